"""Max-min fair bandwidth sharing between streams: progressive filling (water-filling).

All rates grow together; when a resource saturates, the streams through it
freeze at their current rate; the others keep growing. Max-min allocations
decompose over connected components (streams linked through shared
resources), so after a stream starts or stops only its component is
recomputed: :func:`component` finds it, :func:`maxmin` fills it with a lazy
heap (pure Python, cheap for a small component), and past
:data:`SMALL_COMPONENT` busy classes :func:`maxmin_all` recomputes every
busy class at once in numpy (the other components' rates come out the same,
bit for bit). ``tests/test_simulate.py`` checks both against a plain
water-filling.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable

import numpy as np

from ccsynth.tolerance import EVENT_REL, is_greater

__all__ = ["SMALL_COMPONENT", "component", "maxmin", "maxmin_all"]

#: above this many busy classes in the changed component, the rates are recomputed by :func:`maxmin_all`
#: (numpy, every busy class at once) instead of the heap of :func:`maxmin` (pure Python, the component only)
SMALL_COMPONENT = 48


def component(
    seeds: Iterable[int], res_active: list[set[int]], class_res: list[tuple[int, ...]], limit: int,
) -> tuple[set[int], set[int]] | None:
    """The busy classes and resources connected to resources ``seeds``, or None past ``limit`` classes.

    ``res_active[r]`` holds the busy classes on resource ``r``. Max-min allocations decompose over
    connected components (classes linked through shared resources), so the rates elsewhere do not
    change.
    """
    seen = set(seeds)
    todo = list(seen)
    comp: set[int] = set()
    while todo:
        r = todo.pop()
        for c in res_active[r]:
            if c not in comp:
                comp.add(c)
                if len(comp) > limit:
                    return None
                for r2 in class_res[c]:
                    if r2 not in seen:
                        seen.add(r2)
                        todo.append(r2)
    return comp, seen


def maxmin(
    seen: set[int],
    res_active: list[set[int]],
    res_weight: list[int],
    weight: list[int],
    class_res: list[tuple[int, ...]],
    caps: list[float],
) -> dict[int, float]:
    """Max-min fair per-transfer rates of the classes on resources ``seen`` (a whole component).

    Class ``c`` stands for ``weight[c]`` transfers crossing resources
    ``class_res[c]``; ``res_active[r]`` holds the classes with transfers on
    resource ``r`` and ``res_weight[r]`` their total weight. Progressive
    filling with a lazy heap over resources keyed by their fair share
    ``(cap - used) / unfrozen weight``: shares only grow as classes freeze
    elsewhere, so a popped entry whose share is still current is the next
    bottleneck. O((C + R) log R) for C classes and R resources in the component.
    """
    cnt = {r: res_weight[r] for r in seen if res_weight[r] > 0}
    used = dict.fromkeys(cnt, 0.0)
    heap = [(caps[r] / w, r) for r, w in cnt.items()]
    heapq.heapify(heap)
    rate: dict[int, float] = {}
    while heap:
        key, r = heapq.heappop(heap)
        w = cnt[r]
        if w == 0:
            continue
        share = (caps[r] - used[r]) / w
        if is_greater(share, key, EVENT_REL):
            heapq.heappush(heap, (share, r))
            continue
        if share < 0.0:
            share = 0.0
        for c in sorted(res_active[r]):
            if c in rate:
                continue
            rate[c] = share
            wc = weight[c]
            for r2 in class_res[c]:
                cnt[r2] -= wc
                used[r2] += share * wc
    return rate


def maxmin_all(class_res: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """Max-min fair rates of classes ``class_res`` (one row of resource indices per class), vectorised.

    Every class stands for one transfer; rows are padded with the index of a
    last resource of infinite capacity (``caps[-1]``), which is never a
    bottleneck. Progressive filling, all components at once and many levels
    per round: a resource whose fair share ``(cap - used) / unfrozen
    classes`` is the smallest among the resources of every class crossing
    it (within :data:`~ccsynth.tolerance.EVENT_REL`) saturates at that
    share, whatever happens elsewhere -- only its classes change its share,
    and they freeze only where a share is smaller, which can only grow --
    so every such resource freezes its classes in the same round. The
    resource of least share is always one, so each round freezes some
    classes; the rounds are as many as the longest chain of rising
    bottleneck levels. The rates equal :func:`maxmin`'s up to rounding
    (``tests/test_simulate.py`` checks both against a plain water-filling).
    A component's rates depend on its own classes only, bit for bit: the
    rounds never compare shares across components.
    """
    k, width = class_res.shape
    n_res = len(caps)
    pad = n_res - 1
    rate = np.empty(k)
    if k == 0:
        return rate
    cnt = np.bincount(class_res.ravel(), minlength=n_res).astype(float)
    used = np.zeros(n_res)
    live = np.arange(k)
    # one array per column: numpy reduces along a short last axis slowly, elementwise over columns fast
    cols = [np.ascontiguousarray(class_res[:, j]) for j in range(width)]
    while live.size:
        with np.errstate(divide="ignore", invalid="ignore"):
            share = (caps - used) / cnt
        share[cnt <= 0] = math.inf
        share[pad] = math.inf
        shares = [share[col] for col in cols]
        cs = shares[0]
        for sj in shares[1:]:
            cs = np.minimum(cs, sj)
        # an incidence whose resource offers more than its class gets elsewhere: that resource is no bottleneck
        limit = cs + EVENT_REL * np.maximum(1.0, cs)
        blocked = np.zeros(n_res, dtype=bool)
        blocked[pad] = True
        for col, sj in zip(cols, shares):
            blocked[col[sj > limit]] = True
        frozen = ~blocked[cols[0]]
        for col in cols[1:]:
            frozen |= ~blocked[col]
        if not frozen.any():  # only infinite shares left: nothing limits these classes
            frozen[:] = True
        got = np.maximum(cs[frozen], 0.0)
        rate[live[frozen]] = got
        weights = np.where(np.isfinite(got), got, 0.0)
        for col in cols:
            fc = col[frozen]
            used += np.bincount(fc, weights=weights, minlength=n_res)
            cnt -= np.bincount(fc, minlength=n_res)
        keep = ~frozen
        live = live[keep]
        cols = [col[keep] for col in cols]
    return rate
