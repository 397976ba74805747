"""MSCCL XML export and import (ccsynth.formats.msccl) and the IR transforms it uses."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.schedule import Chunks, Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.collectives.transforms import alias_in_place, replicate_instances, split_long_ranges
from ccsynth.collectives.verify import verify
from ccsynth.errors import ScheduleError, ScheduleFormatError
from ccsynth.formats.files import load_schedule
from ccsynth.formats.msccl import (
    MAX_COUNT,
    STEP_TYPES,
    UNBOUNDED,
    describe_xml,
    plan_to_msccl_xmls,
    schedule_from_msccl_xml,
    schedule_to_msccl_xml,
)
from ccsynth.topologies.model import Link, Topology

DATA = Path(__file__).parent / "data"

ALGO_ATTRS = ("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace", "outofplace", "minBytes", "maxBytes")
GPU_ATTRS = ("id", "i_chunks", "o_chunks", "s_chunks")
TB_ATTRS = ("id", "send", "recv", "chan")
STEP_ATTRS = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep")
SENDING = {"s", "rcs", "rrs", "rrcs"}
RECEIVING = {"r", "rcs", "rrs", "rrc", "rrcs"}


# ------------------------------------------------------------ schedules
def ring_topology(n: int, alpha: float = 1.0, bw: float = 10.0) -> Topology:
    links = [Link(a, (a + 1) % n, alpha, bw) for a in range(n)] + [Link((a + 1) % n, a, alpha, bw) for a in range(n)]
    return Topology(f"ring{n}", n, links=tuple(links))


def ring_allgather(n: int, c: int = 1) -> Schedule:
    b = ScheduleBuilder(Collective("allgather", n, c), f"ring_allgather{n}")
    for r in range(n):
        b.copy(r, ("i", 0, c), ("o", r * c, c))
    for step in range(n - 1):
        for r in range(n):
            q = (r - step) % n
            for j in range(c):
                b.transfer(r, (r + 1) % n, ("o", q * c + j), ("o", q * c + j))
    return b.build()


def ring_allreduce(n: int) -> Schedule:
    """Reduce-scatter then allgather around a ring, one chunk per rank."""
    b = ScheduleBuilder(Collective("allreduce", n, n), f"ring_allreduce{n}")
    for r in range(n):
        b.copy(r, ("i", 0, n), ("o", 0, n))
    for step in range(n - 1):
        for r in range(n):
            b.transfer(r, (r + 1) % n, ("o", (r - step) % n), ("o", (r - step) % n), reduce=True)
    for step in range(n - 1):
        for r in range(n):
            j = (r + 1 - step) % n
            b.transfer(r, (r + 1) % n, ("o", j), ("o", j))
    return b.build()


def scratch_allreduce(n: int) -> Schedule:
    """Ring allreduce whose reduce-scatter receives into scratch and adds locally."""
    b = ScheduleBuilder(Collective("allreduce", n, n), f"scratch_allreduce{n}")
    for r in range(n):
        b.copy(r, ("i", 0, n), ("o", 0, n))
    for step in range(n - 1):
        for r in range(n):
            j = (r - step) % n
            b.transfer(r, (r + 1) % n, ("o", j), ("s", 0))
            b.reduce((r + 1) % n, ("s", 0), ("o", j))
    for step in range(n - 1):
        for r in range(n):
            j = (r + 1 - step) % n
            b.transfer(r, (r + 1) % n, ("o", j), ("o", j))
    return b.build()


def direct_alltoall(n: int) -> Schedule:
    b = ScheduleBuilder(Collective("alltoall", n), f"direct_alltoall{n}")
    for r in range(n):
        b.copy(r, ("i", r), ("o", r))
        for k in range(1, n):
            d = (r + k) % n
            b.transfer(r, d, ("i", d), ("o", r))
    return b.build()


HAND_BUILT = [ring_allgather(4), ring_allgather(3, 2), ring_allreduce(4), scratch_allreduce(3), direct_alltoall(4)]


# -------------------------------------------------------------- checks
def check_msccl_xml(text: str) -> ET.Element:
    """What the MSCCL runtimes' parsers require of a file."""
    assert not text.lstrip().startswith("<?"), "the runtimes' parsers do not read an XML declaration"
    assert " />" not in text, "the runtimes' parsers expect '<step .../>'"
    root = ET.fromstring(text)
    assert root.tag == "algo"
    for a in ALGO_ATTRS:
        assert a in root.attrib, f"<algo> lacks {a}"
    assert root.get("proto") in ("Simple", "LL", "LL128")
    assert int(root.get("minBytes")) <= int(root.get("maxBytes"))
    ngpus = int(root.get("ngpus"))
    gpus = root.findall("gpu")
    assert sorted(int(g.get("id")) for g in gpus) == list(range(ngpus))
    for g in gpus:
        for a in GPU_ATTRS:
            assert a in g.attrib
        gid = int(g.get("id"))
        for b in "ios":
            int(g.get(f"{b}_chunks"))  # raises unless every *_chunks attribute is an integer
        tbs = g.findall("tb")
        assert sorted(int(t.get("id")) for t in tbs) == list(range(len(tbs)))
        seen_send, seen_recv = set(), set()
        steps_of = {}
        for t in tbs:
            for a in TB_ATTRS:
                assert a in t.attrib
            send, recv, chan = int(t.get("send")), int(t.get("recv")), int(t.get("chan"))
            assert gid not in (send, recv)
            # one connection per peer and channel belongs to one threadblock
            if send >= 0:
                assert (send, chan) not in seen_send
                seen_send.add((send, chan))
            if recv >= 0:
                assert (recv, chan) not in seen_recv
                seen_recv.add((recv, chan))
            steps = t.findall("step")
            steps_of[int(t.get("id"))] = steps
            for k, st in enumerate(steps):
                for a in STEP_ATTRS:
                    assert a in st.attrib
                assert int(st.get("s")) == k
                ty = st.get("type")
                assert ty in STEP_TYPES
                if ty in SENDING:
                    assert send >= 0, "a sending step needs the threadblock's send peer"
                if ty in RECEIVING:
                    assert recv >= 0, "a receiving step needs the threadblock's receive peer"
                if ty != "nop":
                    cnt = int(st.get("cnt"))
                    assert 1 <= cnt < 72
                    for b, _off in ((st.get("srcbuf"), st.get("srcoff")), (st.get("dstbuf"), st.get("dstoff"))):
                        assert b in "ios"
        for t in tbs:
            prev_nop = False
            for st in t.findall("step"):
                depid, deps = int(st.get("depid")), int(st.get("deps"))
                if st.get("type") == "nop":
                    assert depid >= 0, "a nop carries a dependency"
                elif prev_nop:
                    assert depid >= 0, "the step after nops carries the last dependency"
                prev_nop = st.get("type") == "nop"
                if depid >= 0:
                    target = steps_of[depid][deps]
                    assert target.get("hasdep") == "1" and target.get("type") != "nop"
    return root


def sim_time(schedule: Schedule, topology: Topology, size: int) -> float:
    from ccsynth.synth.simulate import simulate

    return simulate(schedule, topology, size).time_us


# --------------------------------------------------------------- export
@pytest.mark.parametrize("sched", HAND_BUILT, ids=lambda s: s.name)
def test_export_is_valid_msccl_xml(sched):
    verify(sched)
    text = schedule_to_msccl_xml(sched, max_bytes=1 << 20)
    root = check_msccl_xml(text)
    coll = sched.collective
    assert int(root.get("ngpus")) == coll.n_ranks
    assert int(root.get("nchunksperloop")) == coll.size_chunks
    assert root.get("minBytes") == "0" and root.get("maxBytes") == str(1 << 20)
    assert root.get("inplace") == "0" and root.get("outofplace") == "1"
    assert root.get("name") == sched.name
    for g in root.findall("gpu"):
        assert int(g.get("i_chunks")) == coll.in_chunks and int(g.get("o_chunks")) == coll.out_chunks


@pytest.mark.parametrize("sched", HAND_BUILT, ids=lambda s: s.name)
def test_round_trip_verifies_and_is_stable(sched):
    text = schedule_to_msccl_xml(sched)
    back = schedule_from_msccl_xml(text)
    assert back.collective == sched.collective
    verify(back)
    # the same transfers, however they were fused or split
    def moved(s):
        return sorted(op.count for op in s.ops if op.kind == "send")

    assert moved(back) == moved(sched)
    assert schedule_to_msccl_xml(back) == text


def test_ring_steps_fuse_like_msccl_tools():
    text = schedule_to_msccl_xml(ring_allreduce(3))
    gpu0 = ET.fromstring(text).find("gpu")
    ring_tb = [t for t in gpu0.findall("tb") if t.get("send") == "1" and t.get("recv") == "2"]
    assert len(ring_tb) == 1, "receive-from-2 and send-to-1 share one threadblock"
    types = [st.get("type") for st in ring_tb[0].findall("step")]
    assert types == ["s", "rrcs", "rrcs", "rcs", "r"]
    assert describe_xml(text)["step_types"] == {"cpy": 3, "r": 3, "rcs": 3, "rrcs": 6, "s": 3}


def test_extra_dependencies_become_nops():
    # rank 1's reduce waits for a receive (threadblock of peer 0) and a copy (local threadblock)
    text = schedule_to_msccl_xml(scratch_allreduce(3))
    check_msccl_xml(text)
    back = schedule_from_msccl_xml(text)
    verify(back)
    # rank 0 forwards o[0:2] to rank 2: o[0] from its local copy, o[1] from
    # rank 1 -- two threadblocks to wait for, so one nop
    b = ScheduleBuilder(Collective("allgather", 3), "two_sources")
    for r in range(3):
        b.copy(r, ("i", 0), ("o", r))
    b.transfer(1, 0, ("i", 0), ("o", 1))
    b.transfer(0, 2, ("o", 0, 2), ("o", 0, 2))
    b.transfer(2, 0, ("i", 0), ("o", 2))
    b.transfer(2, 1, ("i", 0), ("o", 2))
    b.transfer(0, 1, ("i", 0), ("o", 0))
    sched = b.build()
    text = schedule_to_msccl_xml(sched)
    check_msccl_xml(text)
    assert describe_xml(text)["step_types"]["nop"] == 1
    back = schedule_from_msccl_xml(text)
    verify(back)
    assert schedule_to_msccl_xml(back) == text


def test_rooted_collective_keeps_its_root():
    b = ScheduleBuilder(Collective("reduce", 3, 1, root=2), "to_two")
    b.copy(2, ("i", 0), ("o", 0))
    b.transfer(0, 2, ("i", 0), ("s", 0))
    b.transfer(1, 2, ("i", 0), ("s", 1))
    b.reduce(2, ("s", 0), ("o", 0))
    b.reduce(2, ("s", 1), ("o", 0))
    text = schedule_to_msccl_xml(b.build())
    check_msccl_xml(text)
    assert ET.fromstring(text).get("root") == "2"
    back = schedule_from_msccl_xml(text)
    verify(back)
    assert back.collective.root == 2 and schedule_to_msccl_xml(back) == text


@pytest.mark.parametrize("make,n", [(ring_allgather, 4), (ring_allreduce, 4), (scratch_allreduce, 3)])
def test_round_trip_simulates_the_same(make, n):
    topo = ring_topology(n)
    sched = make(n)
    back = schedule_from_msccl_xml(schedule_to_msccl_xml(sched))
    for size in (1024, 1 << 20, 64 << 20):
        assert sim_time(back, topo, size) == pytest.approx(sim_time(sched, topo, size), rel=0.02)


def test_baselines_round_trip_on_dgx1():
    from ccsynth.synth.baselines import applicable_baselines, make_baseline
    from ccsynth.topologies import get_topology

    topo = get_topology("dgx1")
    n = 0
    for kind in ("allgather", "reduce_scatter", "allreduce", "alltoall", "broadcast", "reduce", "gather", "scatter"):
        coll = Collective(kind, topo.n_ranks, 2)
        for name in applicable_baselines(coll, topo):
            sched = make_baseline(name, coll, topo)
            text = schedule_to_msccl_xml(sched)
            check_msccl_xml(text)
            back = schedule_from_msccl_xml(text)
            verify(back, topo)
            assert schedule_to_msccl_xml(back) == text, (kind, name)
            t0, t1 = sim_time(sched, topo, 1 << 20), sim_time(back, topo, 1 << 20)
            # one threadblock runs a stream's messages one after another: never
            # much faster or slower than the schedule's own overlap
            assert 0.5 * t0 <= t1 <= 1.5 * t0, (kind, name, t0, t1)
            n += 1
    assert n >= 20


def test_long_ranges_are_split():
    c = MAX_COUNT + 16
    b = ScheduleBuilder(Collective("allgather", 2, c), "big")
    for r in range(2):
        b.copy(r, ("i", 0, c), ("o", r * c, c))
        b.transfer(r, 1 - r, ("i", 0, c), ("o", r * c, c))
    sched = b.build()
    text = schedule_to_msccl_xml(sched)
    check_msccl_xml(text)
    cnts = [int(st.get("cnt")) for st in ET.fromstring(text).iter("step")]
    assert max(cnts) == MAX_COUNT and sum(cnts) == 2 * 3 * c  # per rank a copy, a send and a receive, in pieces
    verify(schedule_from_msccl_xml(text))
    assert len(split_long_ranges(sched, MAX_COUNT).ops) == 2 * 3 * 2


def test_channels_as_instances():
    sched = ring_allreduce(3)
    text = schedule_to_msccl_xml(sched, nchannels=2)
    root = check_msccl_xml(text)
    assert root.get("nchannels") == "2"
    assert root.get("nchunksperloop") == str(2 * sched.collective.size_chunks)
    back = schedule_from_msccl_xml(text)
    assert back.collective.chunk_factor == 2 * sched.collective.chunk_factor
    verify(back)
    inst = replicate_instances(sched, 3)
    verify(inst)
    assert {op.channel for op in inst.ops} == {0, 1, 2}
    with pytest.raises(ScheduleError, match="nchannels"):
        schedule_to_msccl_xml(sched, nchannels=0)


def test_many_peers_spread_over_channels():
    sched = direct_alltoall(34)  # 33 peers: above the executor's 32 per channel
    text = schedule_to_msccl_xml(sched)
    check_msccl_xml(text)
    assert int(ET.fromstring(text).get("nchannels")) == 2
    verify(schedule_from_msccl_xml(text))


def test_in_place_export():
    sched = ring_allreduce(3)
    text = schedule_to_msccl_xml(sched, inplace=True)
    root = check_msccl_xml(text)
    assert root.get("inplace") == "1" and root.get("outofplace") == "0"
    # in place, input and output are one buffer: the initial copy is gone
    assert "cpy" not in describe_xml(text)["step_types"]
    back = schedule_from_msccl_xml(text)
    verify(back)
    assert schedule_to_msccl_xml(back, inplace=True) == text
    with pytest.raises(ScheduleError, match="in place"):
        schedule_to_msccl_xml(direct_alltoall(3), inplace=True)
    # the file is written from the in-place IR, which the verifier checks on its one buffer
    verify(alias_in_place(sched))
    with pytest.raises(ScheduleError, match="race"):
        verify(alias_in_place(direct_alltoall(3)))


def test_options_and_errors():
    sched = ring_allgather(3)
    root = ET.fromstring(schedule_to_msccl_xml(sched, proto="LL128", min_bytes=4096, name="mine"))
    assert (root.get("proto"), root.get("minBytes"), root.get("maxBytes"), root.get("name")) == ("LL128", "4096", str(UNBOUNDED), "mine")
    rs = ScheduleBuilder(Collective("reduce_scatter", 2), "rs")
    rs.copy(0, ("i", 0), ("o", 0))
    rs.copy(1, ("i", 1), ("o", 0))
    rs.transfer(0, 1, ("i", 1), ("o", 0), reduce=True)
    rs.transfer(1, 0, ("i", 0), ("o", 0), reduce=True)
    rs = rs.build()
    assert ET.fromstring(schedule_to_msccl_xml(rs)).get("coll") == "reducescatter"
    old = schedule_to_msccl_xml(rs, coll="reduce_scatter")
    assert ET.fromstring(old).get("coll") == "reduce_scatter"
    verify(schedule_from_msccl_xml(old))
    with pytest.raises(ScheduleError, match="protocol"):
        schedule_to_msccl_xml(sched, proto="Fast")
    with pytest.raises(ScheduleError, match="maxBytes"):
        schedule_to_msccl_xml(sched, min_bytes=100, max_bytes=10)
    with pytest.raises(ScheduleError, match="coll"):
        schedule_to_msccl_xml(sched, coll="allreduce")


def test_plan_to_xmls():
    from ccsynth.collectives.plan import Plan, PlanEntry

    plan = Plan((PlanEntry("allgather", 4, 0, 65536, ring_allgather(4)), PlanEntry("allgather", 4, 65536, None, ring_allgather(4, 2))))
    files = plan_to_msccl_xmls(plan)
    assert [f for f, _ in files] == ["allgather_4_ring_allgather4_0-65536.xml", "allgather_4_ring_allgather4_65536-inf.xml"]
    first, second = (ET.fromstring(x) for _, x in files)
    assert (first.get("minBytes"), first.get("maxBytes")) == ("0", "65535")  # MSCCL's maxBytes is inclusive
    assert (second.get("minBytes"), second.get("maxBytes")) == ("65536", str(UNBOUNDED))


# --------------------------------------------------------------- import
@pytest.mark.parametrize(
    "fname,kind,n,factor",
    [
        ("msccl_allgather_ring3.xml", "allgather", 3, 1),
        ("msccl_allreduce_inplace2.xml", "allreduce", 2, 2),
        ("msccl_reduce_scatter2.xml", "reduce_scatter", 2, 1),
        ("msccl_allgather_inplace2.xml", "allgather", 2, 1),
    ],
)
def test_hand_written_files_load_and_verify(fname, kind, n, factor):
    sched = load_schedule(DATA / fname)  # dispatches on '<' and verifies
    assert (sched.collective.kind, sched.n_ranks, sched.collective.chunk_factor) == (kind, n, factor)
    assert sched.meta["source"] == "msccl-xml"
    # and they go back out as valid files that read back the same
    text = schedule_to_msccl_xml(sched, inplace=sched.meta["msccl"]["inplace"])
    check_msccl_xml(text)
    again = schedule_from_msccl_xml(text)
    verify(again)
    assert schedule_to_msccl_xml(again, inplace=sched.meta["msccl"]["inplace"]) == text


def test_import_details():
    rs = schedule_from_msccl_xml((DATA / "msccl_reduce_scatter2.xml").read_text())
    info = rs.meta["msccl"]
    assert (info["proto"], info["minBytes"], info["maxBytes"], info["coll"]) == ("Simple", 1024, 4096, "reduce_scatter")
    # the rrc with distinct src and dst is a copy then a receive-reduce
    kinds = [(op.rank, op.kind, op.reduce) for op in rs.ops]
    assert (1, "copy", False) in kinds and (1, "recv", True) in kinds
    # the nop's dependency: the reduce waits for both the receive and the copy
    red = next(op for op in rs.ops if op.kind == "reduce")
    assert {rs.ops[d].kind for d in red.deps} == {"recv", "copy"}
    # export keeps the file's protocol and sizes
    root = ET.fromstring(schedule_to_msccl_xml(rs))
    assert (root.get("proto"), root.get("minBytes"), root.get("maxBytes")) == ("Simple", "1024", "4096")
    ar = schedule_from_msccl_xml((DATA / "msccl_allreduce_inplace2.xml").read_text())
    assert ar.ops[0].kind == "copy" and ar.ops[0].src == Chunks("i", 0, 2)  # in place: input copied to output first
    assert not any(op.dst is not None and op.dst.buf == "i" for op in ar.ops)


def test_rrs_goes_through_scratch():
    # gpu 1 adds its chunk to the one from gpu 0 and passes the sum on to gpu 2 (reduce to root 2)
    xml = """<algo name="chain" proto="Simple" nchannels="1" nchunksperloop="1" ngpus="3" coll="reduce" inplace="0" outofplace="1" minBytes="0" maxBytes="0" root="2">
  <gpu id="0" i_chunks="1" o_chunks="1" s_chunks="0">
    <tb id="0" send="1" recv="-1" chan="0"><step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/></tb>
  </gpu>
  <gpu id="1" i_chunks="1" o_chunks="1" s_chunks="0">
    <tb id="0" send="2" recv="0" chan="0"><step s="0" type="rrs" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/></tb>
  </gpu>
  <gpu id="2" i_chunks="1" o_chunks="1" s_chunks="0">
    <tb id="0" send="-1" recv="1" chan="0"><step s="0" type="rrc" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/></tb>
  </gpu>
</algo>"""
    sched = schedule_from_msccl_xml(xml)
    verify(sched)
    assert sched.collective.root == 2 and sched.scratch_chunks == 1
    relay = [op.kind for op in sched.ops_of(1)]
    assert relay == ["copy", "recv", "send"]


def _algo(body: str, **attrs) -> str:
    a = dict(name="t", proto="Simple", nchannels="1", nchunksperloop="2", ngpus="2", coll="allgather", inplace="0",
             outofplace="1", minBytes="0", maxBytes="0")
    a.update(attrs)
    head = " ".join(f'{k}="{v}"' for k, v in a.items() if v is not None)
    return f"<algo {head}>{body}</algo>"


def _pair(step0: str = 's', step1: str = 'r', extra0: str = "", extra1: str = "") -> str:
    """A 2-gpu allgather: gpu g sends its input to the other, receives the other's."""
    def gpu(g: int) -> str:
        o = 1 - g
        return (
            f'<gpu id="{g}" i_chunks="1" o_chunks="2" s_chunks="0">'
            f'<tb id="0" send="{o}" recv="-1" chan="0"><step s="0" type="{step0}" srcbuf="i" srcoff="0" dstbuf="o" dstoff="{g}" cnt="1" depid="-1" deps="-1" hasdep="0"/>{extra0}</tb>'
            f'<tb id="1" send="-1" recv="{o}" chan="0"><step s="0" type="{step1}" srcbuf="i" srcoff="0" dstbuf="o" dstoff="{o}" cnt="1" depid="-1" deps="-1" hasdep="0"/>{extra1}</tb>'
            f'<tb id="2" send="-1" recv="-1" chan="0"><step s="0" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="{g}" cnt="1" depid="-1" deps="-1" hasdep="0"/></tb>'
            "</gpu>"
        )

    return gpu(0) + gpu(1)


def test_minimal_valid_pair():
    sched = schedule_from_msccl_xml(_algo(_pair()))
    verify(sched)


@pytest.mark.parametrize(
    "text,match",
    [
        ("this is not xml", "not well-formed"),
        ("<algo ngpus='2'", "not well-formed"),
        ("<graph/>", "<algo> root"),
        (_algo(_pair(), ngpus=None), "'ngpus'"),
        (_algo(_pair(), coll="allfoo"), "coll='allfoo'"),
        (_algo(_pair(), proto="Fast"), "proto='Fast'"),
        (_algo(_pair(), nchunksperloop="3"), "nchunksperloop=3"),
        (_algo(_pair(), inplace="2"), "inplace=2"),
        (_algo(_pair(step0="sx")), "unknown step type 'sx'"),
        (_algo(_pair().replace('srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1"', 'srcbuf="i" srcoff="5" dstbuf="o" dstoff="0" cnt="1"', 1)), r"src range i\[5:6\]"),
        (_algo(_pair().replace('dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/></tb><tb id="2"', 'dstbuf="o" dstoff="1" cnt="2" depid="-1" deps="-1" hasdep="0"/></tb><tb id="2"', 1)), "dst range o"),
        (_algo(_pair().replace('srcbuf="i"', 'srcbuf="x"', 1)), "srcbuf='x'"),
        (_algo(_pair().replace('cnt="1"', 'cnt="one"', 1)), "cnt='one' is not an integer"),
        (_algo(_pair().replace(' hasdep="0"', "", 1)), "'hasdep'"),
        (_algo(_pair().replace('<step s="0" type="r"', '<step s="1" type="r"', 1)), "s=1"),
        (_algo(_pair(step0="r")), "no receive peer"),
        (_algo(_pair(step1="s")), "no send peer"),
        (_algo(_pair().replace('<tb id="2"', '<tb id="3"', 1)), "<tb id=2> is missing"),
        (_algo(_pair().replace('<tb id="2"', '<tb id="1"', 1)), "threadblock id 1 appears twice"),
        (_algo(_pair().replace('<gpu id="1"', '<gpu id="0"', 1)), r"<gpu id=0> appears twice"),
        (_algo(_pair(extra1='<step s="1" type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>')), "receives 2"),
        (_algo(_pair().replace('depid="-1" deps="-1"', 'depid="7" deps="0"', 1)), "depid=7"),
        (_algo(_pair().replace('depid="-1" deps="-1"', 'depid="2" deps="4"', 1)), "deps=4"),
        (_algo(_pair().replace('depid="-1" deps="-1"', 'depid="2" deps="0"', 1)), 'not marked hasdep'),
        (_algo(_pair(extra0='<step s="1" type="nop" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="-1" cnt="0" depid="-1" deps="-1" hasdep="0"/>')), "nop step without a dependency"),
        (_algo(_pair().replace('recv="-1" chan="0"><step s="0" type="cpy"', 'recv="0" chan="0"><step s="0" type="cpy"', 1)), "cannot send to or receive from its own gpu"),
    ],
)
def test_malformed_xml_is_rejected(text, match):
    with pytest.raises(ScheduleFormatError, match=match):
        schedule_from_msccl_xml(text)


def test_deadlocked_threadblocks_are_rejected():
    # each gpu receives before it sends, in one threadblock: nobody sends first
    def gpu(g: int) -> str:
        o = 1 - g
        return (
            f'<gpu id="{g}" i_chunks="1" o_chunks="2" s_chunks="0"><tb id="0" send="{o}" recv="{o}" chan="0">'
            f'<step s="0" type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="{o}" cnt="1" depid="-1" deps="-1" hasdep="0"/>'
            f'<step s="1" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="{g}" cnt="1" depid="-1" deps="-1" hasdep="0"/>'
            f'<step s="2" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="{g}" cnt="1" depid="-1" deps="-1" hasdep="0"/>'
            "</tb></gpu>"
        )

    with pytest.raises(ScheduleFormatError, match="deadlock"):
        schedule_from_msccl_xml(_algo(gpu(0) + gpu(1)))


def test_racy_file_fails_verification():
    # the local copy into o[g] and a receive into the same chunk, unordered
    text = _algo(_pair().replace('dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/></tb><tb id="2"', 'dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/></tb><tb id="2"', 1))
    sched = schedule_from_msccl_xml(text)
    with pytest.raises(ScheduleError):
        verify(sched)


def test_load_schedule_reports_bad_xml_file(tmp_path):
    p = tmp_path / "bad.xml"
    p.write_text("<algo ngpus='2'><gpu></algo>")
    with pytest.raises(ScheduleFormatError, match="not well-formed"):
        load_schedule(p)


def test_missing_min_max_bytes_is_read_with_a_warning(caplog):
    text = _algo(_pair(), minBytes=None, maxBytes=None)
    with caplog.at_level("WARNING", logger="ccsynth.formats.msccl.reader"):
        sched = schedule_from_msccl_xml(text)
    verify(sched)
    assert re.search("minBytes/maxBytes", caplog.text)


# ------------------------------------------------------------------ CLI
def test_cli_export_round_trip(tmp_path, capsys):
    from ccsynth.cli import main
    from ccsynth.collectives.schedule import save_schedule

    src = tmp_path / "ring.json"
    save_schedule(ring_allreduce(4), src)
    xml = tmp_path / "ring.xml"
    assert main(["export", str(src), "--format", "msccl-xml", "-o", str(xml), "--max-bytes", "64K", "--proto", "LL"]) == 0
    out = capsys.readouterr().out
    assert "wrote" in out and "rrcs" in out
    root = check_msccl_xml(xml.read_text())
    assert (root.get("proto"), root.get("minBytes"), root.get("maxBytes")) == ("LL", "0", "65536")
    back = tmp_path / "back.json"
    assert main(["export", str(xml), "-o", str(back)]) == 0  # format from the suffix
    sched = load_schedule(back)
    assert sched.collective == ring_allreduce(4).collective
    again = tmp_path / "again.xml"
    assert main(["export", str(back), "-o", str(again)]) == 0
    assert again.read_text() == xml.read_text()  # the file's protocol and sizes survive the JSON
    # to standard output, nothing but the file
    capsys.readouterr()
    assert main(["export", str(src), "--min-bytes", "1K"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("<algo ") and 'minBytes="1024"' in out


def test_cli_export_plan_to_directory(tmp_path, capsys):
    from ccsynth.cli import main
    from ccsynth.collectives.plan import Plan, PlanEntry, save_plan

    plan = Plan((PlanEntry("allgather", 3, 0, 4096, ring_allgather(3)), PlanEntry("allgather", 3, 4096, None, ring_allgather(3, 2))))
    save_plan(plan, tmp_path / "plan.json")
    out_dir = tmp_path / "xml"
    assert main(["export", str(tmp_path / "plan.json"), "-f", "msccl-xml", "-o", str(out_dir)]) == 0
    files = sorted(p.name for p in out_dir.iterdir())
    assert len(files) == 2 and all(f.endswith(".xml") for f in files)
    for f in out_dir.iterdir():
        verify(load_schedule(f))
    assert "wrote 2 MSCCL XML file(s)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv,words",
    [
        (["export", "missing.json", "-o", "x.xml"], ["cannot read", "missing.json"]),
        (["export", "{bad}", "-o", "x.json"], ["not well-formed"]),
        (["export", "{ring}", "--format", "json", "--proto", "LL"], ["need --format msccl-xml"]),
        (["export", "{ring}", "--max-bytes", "lots"], ["--max-bytes", "lots"]),
        (["export", "{ring}", "-t", "ring:4"], ["no connection"]),
        (["export", "{plan}", "-f", "msccl-xml"], ["directory"]),
    ],
)
def test_cli_export_errors_exit_2(tmp_path, capsys, argv, words):
    from ccsynth.cli import main
    from ccsynth.collectives.schedule import save_schedule
    from ccsynth.collectives.plan import Plan, PlanEntry, save_plan

    (tmp_path / "bad.xml").write_text("<algo ngpus='2'><gpu></algo>")
    save_schedule(direct_alltoall(4), tmp_path / "ring.json")
    save_plan(Plan((PlanEntry("allgather", 3, 0, None, ring_allgather(3)),)), tmp_path / "plan.json")
    subst = {"{bad}": str(tmp_path / "bad.xml"), "{ring}": str(tmp_path / "ring.json"), "{plan}": str(tmp_path / "plan.json")}
    argv = [subst.get(a, a) for a in argv]
    if argv[1] == "missing.json":
        argv[1] = str(tmp_path / "missing.json")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ccsynth export: error:")
    for w in words:
        assert w in err


def test_layout_choice_uses_the_topology():
    from ccsynth.synth.baselines import make_baseline
    from ccsynth.formats.msccl.threadblocks import layout_xml, layouts
    from ccsynth.topologies import get_topology

    topo = get_topology("dgx1")
    sched = make_baseline("direct", Collective("allreduce", 8, 2), topo)
    found = layouts(sched)
    assert len(found) == 2 and found[0].fused > 0 and found[1].fused == 0
    texts = [layout_xml(sched, l, name="d", proto="Simple", coll="allreduce", inplace=False, min_bytes=0, max_bytes=UNBOUNDED)
             for l in found]
    chosen = schedule_to_msccl_xml(sched, topology=topo, name="d")
    assert chosen in texts
    t = {x: sum(sim_time(schedule_from_msccl_xml(x), topo, z) for z in (1 << 10, 1 << 20, 1 << 26)) for x in texts}
    assert t[chosen] <= min(t.values()) * 1.05
    with pytest.raises(Exception, match="nosuch"):
        schedule_to_msccl_xml(sched, topology="nosuch:3")
