"""Streams: one per (connection, channel), moving one transfer's bytes at a time at a max-min fair rate.

The data phases of the transfers of one stream run one after another, first
come first served, like the single in-order stream of an NCCL/MSCCL channel
or a DMA queue (see :mod:`ccsynth.synth.simulate`). A stream is busy while
it moves a transfer's bytes; it holds that transfer (``cur``), its bytes
left as of time ``tupd`` (``rem``), its rate, the transfers queued behind it
and when the current one completes (``t_next``, numpy for a fast minimum).
A transfer handing over to the next of its queue keeps the rate, so only a
stream starting or stopping marks its resources *dirty*, and the next
:meth:`Streams.reshare` recomputes the rates of the affected component only
(:mod:`~ccsynth.synth.simulator.sharing`).
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from ccsynth.synth.simulator import sharing

__all__ = ["Streams"]


class Streams:
    """The streams of one run (see the module docstring); ``class_res[c]``: the resources of stream ``c``,
    ``caps[r]``: resource ``r``'s bandwidth in bytes per us."""

    def __init__(self, class_res: list[tuple[int, ...]], caps: list[float]):
        n_cls = len(class_res)
        self.class_res = class_res
        self.caps = caps
        self.busy = [0] * n_cls
        self.cur = [-1] * n_cls
        # (rem, rate, tupd are numpy arrays, for the vectorised reshare of a large component)
        self.rem = np.zeros(n_cls)
        self.rate = np.zeros(n_cls)
        self.tupd = np.zeros(n_cls)
        self.t_next = np.full(n_cls, math.inf)
        # the same tables for maxmin_all: busy classes as a mask, resources padded with one of infinite capacity
        self.busy_mask = np.zeros(n_cls, dtype=bool)
        self.caps_pad = np.array([*caps, math.inf])
        width = max((len(rs) for rs in class_res), default=1) or 1
        self.res_pad = np.full((n_cls, width), len(caps), dtype=np.int64)
        for c, rs in enumerate(class_res):
            self.res_pad[c, : len(rs)] = rs
        self.queue: list[deque[int]] = [deque() for _ in range(n_cls)]
        self.res_active: list[set[int]] = [set() for _ in caps]
        self.res_weight = [0] * len(caps)  # busy classes on each resource
        self.n_busy = 0
        self.res_bytes = [0.0] * len(caps)  # bytes each resource carried (the busy-time report)
        self.dirty: set[int] = set()  # resources whose streams started or stopped since the last reshare
        self.touched: set[int] = set()  # streams that started since the last reshare

    def next_completion(self) -> float:
        """When the earliest busy stream completes its transfer (inf if none is busy)."""
        return float(self.t_next.min()) if self.n_busy else math.inf

    def due(self, horizon: float) -> list[int]:
        """The streams whose transfer completes by ``horizon``, in class order."""
        return np.flatnonzero(self.t_next <= horizon).tolist()

    def admit(self, c: int, s: int, nbytes: float, now: float) -> None:
        """Transfer ``s`` of ``nbytes`` joins stream ``c``: it starts moving now if the stream is idle, else queues."""
        for r in self.class_res[c]:
            self.res_bytes[r] += nbytes
        if self.busy[c]:
            self.queue[c].append(s)
            return
        self.busy[c] = 1
        self.busy_mask[c] = True
        self.n_busy += 1
        self.cur[c], self.rem[c], self.tupd[c] = s, nbytes, now
        for r in self.class_res[c]:
            self.res_weight[r] += 1
            self.res_active[r].add(c)
            self.dirty.add(r)
        self.touched.add(c)

    def next_queued(self, c: int) -> int:
        """The transfer queued next on stream ``c`` (taken off its queue), or -1."""
        q = self.queue[c]
        return q.popleft() if q else -1

    def hand_over(self, c: int, s: int, nbytes: float, now: float) -> None:
        """Stream ``c`` goes on with transfer ``s`` of ``nbytes``, at the same rate."""
        self.cur[c], self.rem[c], self.tupd[c] = s, nbytes, now
        self.t_next[c] = now + self.rem[c] / self.rate[c]

    def stop(self, c: int, now: float) -> None:
        """Stream ``c`` has nothing left to move: it goes idle and frees its share of its resources."""
        self.busy[c] = 0
        self.busy_mask[c] = False
        self.n_busy -= 1
        self.cur[c], self.rem[c], self.rate[c], self.tupd[c] = -1, 0.0, 0.0, now
        self.t_next[c] = math.inf
        for r in self.class_res[c]:
            self.res_weight[r] -= 1
            self.res_active[r].discard(c)
            self.dirty.add(r)

    def reshare(self, now: float) -> None:
        """Recompute the rates of the streams connected to the dirty resources (max-min fair)."""
        found = sharing.component(self.dirty, self.res_active, self.class_res, sharing.SMALL_COMPONENT)
        self.dirty.clear()
        if found is None:
            self._reshare_all(now)
        else:
            rate, rem, tupd = self.rate, self.rem, self.tupd
            new_rates = sharing.maxmin(found[1], self.res_active, self.res_weight, self.busy, self.class_res,
                                       self.caps)
            idx, val = [], []
            for c, new in new_rates.items():
                if new == rate[c] and c not in self.touched:
                    continue  # same rate: its completion time stands
                rem[c] -= rate[c] * (now - tupd[c])
                tupd[c] = now
                rate[c] = new
                idx.append(c)
                val.append(now + rem[c] / new if new > 0 else math.inf)
            if idx:
                self.t_next[idx] = val
        self.touched.clear()

    def _reshare_all(self, now: float) -> None:
        # a large component: every busy class at once, in numpy (the other components' rates come out the same)
        act = np.flatnonzero(self.busy_mask)
        new = sharing.maxmin_all(self.res_pad[act], self.caps_pad)
        old = self.rate[act]
        changed = new != old
        if self.touched:
            mark = np.zeros(len(self.busy), dtype=bool)
            mark[list(self.touched)] = True
            changed |= mark[act]
        idx, new, old = act[changed], new[changed], old[changed]
        self.rem[idx] -= old * (now - self.tupd[idx])
        self.tupd[idx] = now
        self.rate[idx] = new
        with np.errstate(divide="ignore", invalid="ignore"):
            self.t_next[idx] = np.where(new > 0, now + self.rem[idx] / new, math.inf)

    def busy_us(self, names: list[str]) -> dict[str, float]:
        """Per resource that carried data, the time its bytes take at its full bandwidth."""
        caps, res_bytes = self.caps, self.res_bytes
        return {names[r]: res_bytes[r] / caps[r] for r in range(len(caps)) if res_bytes[r] > 0}
