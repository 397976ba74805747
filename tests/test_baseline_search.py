"""The baseline search's pruning: static bounds of schedules, and the search against a time to beat."""

from __future__ import annotations

import itertools

import pytest

from ccsynth.collectives.spec import Collective
from ccsynth.collectives.verify import verify
from ccsynth.errors import CCSynthError
from ccsynth.synth.baseline_search import (
    WORSE_IN_A_ROW,
    _Builds,
    baseline_choices,
    best_for,
    baselines_against,
    chunk_factor_ladder,
    verified,
)
from ccsynth.synth.baselines import applicable_baselines, get_baseline, make_baseline, min_chunk_factor
from ccsynth.synth.simulate import simulate, static_bound
from ccsynth.topologies import get_topology
from ccsynth.tolerance import is_close

CASES = [
    ("dgx1", "allgather"),
    ("dgx1", "allreduce"),
    ("ndv2x2", "reduce_scatter"),
    ("ring:6", "allreduce"),
    ("torus:3x3", "allgather"),
]


@pytest.mark.parametrize("topo_name,kind", CASES)
def test_a_baseline_moves_the_same_bytes_through_every_resource_at_every_chunk_factor(topo_name, kind):
    """What lets the search drop a baseline's every factor when the bytes of its first exceed the time to beat."""
    topo = get_topology(topo_name)
    size = 1 << 20
    for name in applicable_baselines(Collective(kind, topo.n_ranks), topo):
        volumes = []
        for factor in chunk_factor_ladder(name, kind, topo, size)[:3]:
            try:
                sched = make_baseline(name, Collective(kind, topo.n_ranks, factor), topo)
            except CCSynthError:  # a factor the baseline cannot build is no candidate
                continue
            volumes.append(static_bound(sched, topo, size).volume_us)
        assert all(is_close(v, volumes[0]) for v in volumes), (name, volumes)


@pytest.mark.parametrize("topo_name,kind", CASES)
def test_the_static_bound_never_exceeds_the_simulated_time(topo_name, kind):
    topo = get_topology(topo_name)
    for size in (1 << 12, 1 << 20):
        for name in applicable_baselines(Collective(kind, topo.n_ranks), topo):
            factor = chunk_factor_ladder(name, kind, topo, size)[:2][-1]
            try:
                sched = make_baseline(name, Collective(kind, topo.n_ranks, factor), topo)
            except CCSynthError:
                continue
            b = static_bound(sched, topo, size)
            assert b.time_us <= simulate(sched, topo, size).time_us * (1 + 1e-9), (name, factor, size, b)
            assert b.volume_us > 0 and b.engine_us >= 0


def test_against_a_time_no_baseline_beats_every_one_is_proven_slower_or_simulated():
    topo = get_topology("ndv2x2")
    coll = Collective("allgather", topo.n_ranks)
    size = 1 << 20
    every = baseline_choices(coll, topo, size)
    fastest = every[0].result.time_us
    # a time below every baseline's: each is simulated slower or proven slower, none is faster
    found = baselines_against(coll, topo, size, fastest * 0.9)
    assert all(c.result.time_us > fastest * 0.9 for c in found.choices)
    assert {c.name for c in found.choices} | {o.name for o in found.outrun} == {c.name for c in every}
    assert found.outrun, "the ring and direct baselines move far more bytes through the NICs than the bound"
    for o in found.outrun:
        full = next(c for c in every if c.name == o.name)
        assert o.bound_us <= full.result.time_us * (1 + 1e-9)
    # a time above every baseline's: the same choices, the same times, as the unpruned search
    loose = baselines_against(coll, topo, size, every[-1].result.time_us * 10)
    assert not loose.outrun
    assert [(c.name, c.chunk_factor, c.result.time_us) for c in loose.choices] == \
        [(c.name, c.chunk_factor, c.result.time_us) for c in every]
    # the search builds unverified; what is used is verified
    best = verified(loose.choices[0], topo)
    assert verify(best.schedule, topo).n_ops == len(best.schedule.ops)


def test_unchecked_builds_are_the_verified_schedules():
    topo = get_topology("dgx1")
    coll = Collective("allreduce", 8)
    for name in applicable_baselines(coll, topo):
        f = min_chunk_factor(name, "allreduce", topo)
        a, b = _Builds(coll, topo).get(name, f), _Builds(coll, topo, checked=False).get(name, f)
        assert a is not None and b is not None and a.ops == b.ops


@pytest.mark.parametrize("topo_name", ["dgx1", "ndv2x2", "dgx_a100x2", "ring:5"])
@pytest.mark.parametrize("kind", ["allgather", "reduce_scatter"])
def test_the_ring_familys_bytes_without_building_equal_the_built_schedules(topo_name, kind):
    from ccsynth.synth.baseline_search import RING_FAMILY, ring_volume_us

    topo = get_topology(topo_name)
    size = 3 << 20
    for name in RING_FAMILY:
        coll = Collective(kind, topo.n_ranks, min_chunk_factor(name, kind, topo) * 2)
        try:
            sched = make_baseline(name, coll, topo)
        except CCSynthError:
            assert ring_volume_us(name, coll, topo, size) is None
            continue
        assert ring_volume_us(name, coll, topo, size) == pytest.approx(static_bound(sched, topo, size).volume_us,
                                                                       rel=1e-12)


@pytest.mark.parametrize("topo_name", ["dgx1", "ring:6", "dgx_a100x2", "ndv2x2", "torus:3x3"])
def test_a_larger_factor_never_sends_fewer_messages_on_an_engine(topo_name):
    """What ends a ladder when one factor's per-message overheads exceed the time to beat; the baselines of
    MESSAGES_PER_CHUNK send exactly twice the messages on every engine at twice the factor."""
    from collections import Counter

    from ccsynth.synth.baseline_search import MESSAGES_PER_CHUNK

    topo = get_topology(topo_name)
    for kind in ("allgather", "reduce_scatter", "allreduce", "broadcast", "reduce", "alltoall", "gather", "scatter"):
        for name in applicable_baselines(Collective(kind, topo.n_ranks), topo):
            counts = []
            base = min_chunk_factor(name, kind, topo)
            for factor in (base, 2 * base, 4 * base):
                try:
                    sched = make_baseline(name, Collective(kind, topo.n_ranks, factor), topo)
                except CCSynthError:
                    break
                counts.append(Counter((op.rank, op.kind, op.peer, op.channel) for op in sched.ops
                                      if op.kind in ("send", "recv")))
            for a, b in itertools.pairwise(counts):
                assert all(b[e] >= k for e, k in a.items()), (kind, name)
                if name in MESSAGES_PER_CHUNK:
                    assert b == Counter({e: 2 * k for e, k in a.items()}), (kind, name)


def _walk_simulating_every_factor(name, coll, topo, size):
    """The ladder walk as it was before the pipeline bound: every factor simulated."""
    best = None
    worse = 0
    for factor in chunk_factor_ladder(name, coll.kind, topo, size):
        try:
            sched = get_baseline(name).build(Collective(coll.kind, coll.n_ranks, factor, coll.root), topo)
        except CCSynthError:
            continue
        t = simulate(sched, topo, size).time_us
        if best is None or t < best[1] * (1 - 1e-9):
            best, worse = (factor, t), 0
        else:
            worse += 1
            if worse >= WORSE_IN_A_ROW:
                break
    return best


@pytest.mark.parametrize("topo_name,kind,size", [("dgx_a100x2", "allgather", 1 << 26), ("ndv2x2", "reduce_scatter", 1 << 22),
                                                 ("dgx1", "allreduce", 1 << 20), ("ring:6", "allgather", 1 << 16),
                                                 ("dgx_h100x2", "allgather", 1 << 30)])
def test_the_walk_pruned_by_bounds_picks_what_simulating_every_factor_picks(topo_name, kind, size):
    topo = get_topology(topo_name)
    coll = Collective(kind, topo.n_ranks)
    for name in applicable_baselines(coll, topo):
        got = best_for(name, coll, topo, size)
        want = _walk_simulating_every_factor(name, coll, topo, size)
        assert (got.chunk_factor, got.result.time_us) == (want[0], pytest.approx(want[1], rel=1e-12)), name


@pytest.mark.parametrize("topo_name", ["dgx1", "ndv2x2", "ring:5"])
def test_the_ring_familys_message_count_without_building_equals_the_built_schedules(topo_name):
    from ccsynth.synth.baseline_search import RING_FAMILY, ring_sends

    topo = get_topology(topo_name)
    for kind in ("allgather", "reduce_scatter", "allreduce", "broadcast", "reduce"):
        for name in RING_FAMILY:
            coll = Collective(kind, topo.n_ranks, min_chunk_factor(name, kind, topo) * 2)
            try:
                sched = make_baseline(name, coll, topo)
            except CCSynthError:
                continue
            assert ring_sends(name, coll) == sum(op.kind == "send" for op in sched.ops), (kind, name)
    assert ring_sends("direct", Collective("allgather", topo.n_ranks)) is None
