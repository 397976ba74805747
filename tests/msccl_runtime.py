"""An independent check of an MSCCL XML file against what the runtimes' parsers accept.

Written from the runtimes' sources (msccl-executor-nccl src/misc/msccl/msccl_parser.cc and
src/include/msccl/msccl_struct.h, microsoft/msccl src/graph/topo.cc), not from ccsynth's exporter:
it parses the text and counts. Returns the problems found, one line each (empty: the file loads).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

MAX_STEPS = 64  # MSCCL_MAX_NUM_STEPS, executor's default build
MAX_COUNT = 72  # cnt must be below
MAX_CHANNELS = 32  # MAXCHANNELS
MAX_TB_PER_CHANNEL = 32  # MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL (sending / receiving threadblocks)
MAX_DEPID = 127  # int8_t dependentBid
MAX_OFFSET = 32767  # int16_t offsets
MAX_NODES = 4096  # parser's node table


def runtime_problems(text: str, max_steps: int = MAX_STEPS) -> list[str]:
    root = ET.fromstring(text)
    out = []
    ngpus = int(root.get("ngpus"))
    nchannels = int(root.get("nchannels"))
    if not 1 <= nchannels <= MAX_CHANNELS:
        out.append(f"nchannels={nchannels}")
    for g in root.findall("gpu"):
        gid = int(g.get("id"))
        chunks = {"i": int(g.get("i_chunks")), "o": int(g.get("o_chunks")), "s": int(g.get("s_chunks"))}
        tbs = g.findall("tb")
        if len(tbs) > MAX_DEPID + 1:
            out.append(f"gpu {gid}: {len(tbs)} threadblocks")
        # nodes the parser keeps while loading this gpu: <algo>, every <gpu>, this gpu's <tb> and <step>
        nodes = 1 + ngpus + len(tbs) + sum(len(t.findall("step")) for t in tbs)
        if nodes >= MAX_NODES:
            out.append(f"gpu {gid}: {nodes} XML nodes")
        senders: dict[int, int] = {}
        receivers: dict[int, int] = {}
        for t in tbs:
            tid, chan = int(t.get("id")), int(t.get("chan"))
            if not 0 <= chan < MAX_CHANNELS or chan >= nchannels:
                out.append(f"gpu {gid} tb {tid}: channel {chan} (nchannels {nchannels})")
            if int(t.get("send")) >= 0:
                senders[chan] = senders.get(chan, 0) + 1
            if int(t.get("recv")) >= 0:
                receivers[chan] = receivers.get(chan, 0) + 1
            for st in t.findall("step"):
                s = int(st.get("s"))
                if s >= max_steps:
                    out.append(f"gpu {gid} tb {tid}: step {s} (at most {max_steps} steps)")
                    break
                depid = int(st.get("depid"))
                if depid > MAX_DEPID or int(st.get("deps")) > MAX_OFFSET:
                    out.append(f"gpu {gid} tb {tid} step {s}: depid {depid}")
                if st.get("type") == "nop":
                    continue
                cnt = int(st.get("cnt"))
                if not 0 <= cnt < MAX_COUNT:
                    out.append(f"gpu {gid} tb {tid} step {s}: cnt {cnt}")
                for buf, off, is_src in (("srcbuf", "srcoff", True), ("dstbuf", "dstoff", False)):
                    if not _uses(st.get("type"), is_src):
                        continue
                    b, o = st.get(buf), int(st.get(off))
                    if not 0 <= o <= MAX_OFFSET or o + cnt > chunks[b]:
                        out.append(f"gpu {gid} tb {tid} step {s}: offset {o} in {b!r} ({chunks[b]} chunks)")
        for what, per in (("sending", senders), ("receiving", receivers)):
            for chan, k in per.items():
                if k > MAX_TB_PER_CHANNEL:
                    out.append(f"gpu {gid} channel {chan}: {k} {what} threadblocks")
    return out


def _uses(step_type: str, is_src: bool) -> bool:
    """Whether a step of this type reads its src (``is_src``) or dst range as a local buffer."""
    src_types = {"s", "rrs", "rrc", "rrcs", "cpy", "re"}
    dst_types = {"r", "rcs", "rrc", "rrcs", "cpy", "re"}
    return step_type in (src_types if is_src else dst_types)
