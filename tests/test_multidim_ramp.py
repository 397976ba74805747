"""Tapered pipelines (synth/multidim/ramp.py) and where a schedule's time goes (synth/multidim/losses.py)."""

from __future__ import annotations

import dataclasses

import pytest

from ccsynth.collectives.verify import verify
from ccsynth.errors import CollectiveError
from ccsynth.formats.files import get_topology
from ccsynth.synth.multidim import dim_net, schedule_multidim
from ccsynth.synth.multidim.chunks import make_chunk
from ccsynth.synth.multidim.cost import PhaseCosts
from ccsynth.synth.multidim.losses import dimension_losses, startup_optimum
from ccsynth.synth.multidim.lowering import to_schedule
from ccsynth.synth.multidim.lp import bandwidth_bound, pipelined_bound, solve_lattice
from ccsynth.synth.multidim.pipeline import PRIORITIES, time_chunks
from ccsynth.synth.multidim.ramp import ramp_pieces, ramped_chunks
from ccsynth.synth.simulate import simulate

#: Themis's artifact sample: no order may sensibly start on the 12.5 GB/s dimension, so it idles while the first
#: chunk reduce-scatters on the others and while the last one gathers there -- the pipeline's fill and drain
ARTIFACT = "hierarchical:2x8x2@250,175,12.5"


def _timed(net, costs, kind, size, chunks):
    return min((time_chunks(net, costs, kind, size, chunks, p) for p in PRIORITIES), key=lambda t: t.makespan_us)


def test_ramp_cuts_only_the_first_and_last_chunks_and_keeps_every_orders_bytes():
    net = dim_net(get_topology("hierarchical:4x2@200,50"))
    costs = PhaseCosts(net)
    size = 1 << 24
    chunks = [make_chunk(net, costs, "allreduce", o, size / 4) for o in ((0, 1), (1, 0), (0, 1), (1, 0))]
    assert ramp_pieces(8, 3) == (1, 1, 2, 4)
    ramped = ramped_chunks(net, costs, "allreduce", size, chunks, 3)
    assert [c.units for c in ramped] == [1, 1, 2, 4, 8, 8, 4, 2, 1, 1]
    assert [c.order for c in ramped] == [(0, 1)] * 4 + [(1, 0), (0, 1)] + [(1, 0)] * 4
    for order in ((0, 1), (1, 0)):  # each order carries half the bytes, as before
        assert sum(c.units for c in ramped if c.order == order) == 16
    # a piece's algorithm is chosen for its own size (64 KiB on the 4-rank dimension: direct, as for the chunk)
    assert ramped[0].algorithms == make_chunk(net, costs, "allreduce", (0, 1), size / 32).algorithms
    with pytest.raises(CollectiveError):
        ramped_chunks(net, costs, "allreduce", size, chunks[:1], 1)
    with pytest.raises(CollectiveError):
        ramp_pieces(6, 2)


@pytest.mark.parametrize("spec, kind", [
    ("hierarchical:2x4x2@250,175,12.5", "allreduce"),
    ("hierarchical:2x2x2@250,175,12.5", "allreduce"),
    ("hierarchical:2x2x2@250,175,12.5", "reduce_scatter"),
    ("hierarchical:2x2x2@250,175,12.5", "allgather"),
    ("hierarchical:4x4@100,100", "allreduce"),
])
def test_ramped_schedules_verify_simulate_as_modelled_and_respect_the_lp_bound(spec, kind):
    t = get_topology(spec)
    net = dim_net(t)
    costs = PhaseCosts(net)
    size = 1 << 26
    for k in (2, 4):
        plain = schedule_multidim(net, kind, size, "lp", chunks=k)
        for depth in (1, 2):
            chunks = ramped_chunks(net, costs, kind, size, plain.chunks, depth)
            md = dataclasses.replace(plain, chunks=chunks, timing=_timed(net, costs, kind, size, chunks))
            sched = to_schedule(md, t)
            verify(sched, t)
            sim = simulate(sched, t, size).time_us
            assert md.makespan_us == pytest.approx(sim, rel=0.05)
            # the pieces keep the LP's split and no chunk grows: T* at the LP's count still bounds the schedule
            assert plain.lp_bound_us <= sim * (1 + 1e-9)
            assert bandwidth_bound(net, costs, kind, size) <= sim * (1 + 1e-9)


def test_ramp_shrinks_the_fill_and_drain_of_a_dimension_no_chunk_starts_on():
    # 16 ranks, 64 MiB, 2 chunks: the 12.5 GB/s dimension waits for a whole half's phases on the others; cut into
    # 1/4, 1/4, 1/2 and back, the same split (one order) takes 789.4 us instead of 997.9, as simulated (1039.9 and
    # 943.4 while the 2-rank dimensions ran ring phases, which hold the dimension alone)
    t = get_topology("hierarchical:2x4x2@250,175,12.5")
    net = dim_net(t)
    costs = PhaseCosts(net)
    size = 1 << 26
    plain = schedule_multidim(net, "allreduce", size, "lp", chunks=2)
    assert {c.order for c in plain.chunks} == {(0, 1, 2)}
    chunks = ramped_chunks(net, costs, "allreduce", size, plain.chunks, 2)
    md = dataclasses.replace(plain, chunks=chunks, timing=_timed(net, costs, "allreduce", size, chunks))
    sim = simulate(to_schedule(md, t), t, size).time_us
    assert plain.makespan_us == pytest.approx(997.91, abs=0.01)
    assert sim == pytest.approx(789.39, abs=0.01)
    # the bound for the pieces (T* for six chunks, whose ring phases pay their latency six times, plus the fill and
    # drain of the smallest piece) holds, and the 12.5 GB/s dimension starts three times sooner
    assert pipelined_bound(net, costs, "allreduce", size, chunks) <= sim
    fill = {x.dim: x.fill_us for x in dimension_losses(costs, md.timing)}
    plain_fill = {x.dim: x.fill_us for x in dimension_losses(costs, plain.timing)}
    assert fill[2] < plain_fill[2] / 2.5  # a 1/4 piece's phases instead of a half's, latency included


def test_the_lp_on_themis_artifact_sample_is_within_2_percent_of_its_bounds():
    # 1 GiB: 19 equal chunks took 6444.1 us (1.052 of the pipelined bound, 1.092 of T*), cut at the ends 6008.2
    # (1.015, 1.053); with its 2-rank dimensions' phases direct (overlapping in the pipeline) 5442.7 us, 384 chunks
    net = dim_net(get_topology(ARTIFACT))
    costs = PhaseCosts(net)
    size = 1 << 30
    lp = schedule_multidim(net, "allreduce", size, "lp")
    assert lp.makespan_us <= 6008.2 * (1 - 0.09)
    assert lp.lp_bound_us <= lp.makespan_us <= 1.02 * lp.lp_bound_us
    bound = pipelined_bound(net, costs, "allreduce", size, lp.chunks)
    assert bound <= lp.makespan_us <= 1.02 * bound
    assert lp.makespan_us <= schedule_multidim(net, "allreduce", size, "themis").makespan_us
    # a fixed count is kept: no ramp, which would add chunks
    assert len(schedule_multidim(net, "allreduce", size, "lp", chunks=12).chunks) == 12
    # deterministic: test_multidim.py's test_schedules_and_plans_are_deterministic runs the LP's whole search
    # (ramp and tuned shares) twice and compares chunks and tasks, at 64 MiB (here a second 1 GiB search doubled
    # the test's time)


def test_losses_sum_to_the_makespan_and_the_busiest_floor_is_at_least_t_star():
    net = dim_net(get_topology("hierarchical:2x8x8x8@250,175,50,12.5"))
    costs = PhaseCosts(net)
    size, k = 1 << 30, 72
    lp = schedule_multidim(net, "allreduce", size, "lp", chunks=k)
    losses = dimension_losses(costs, lp.timing)
    for x in losses:
        assert x.floor_us + x.exposed_us + x.fill_us + x.idle_us + x.drain_us == pytest.approx(lp.makespan_us)
        assert min(x.floor_us, x.exposed_us, x.fill_us, x.drain_us) >= -1e-9
    t_star = solve_lattice(net, costs, "allreduce", size, k).bound_us
    assert max(x.floor_us for x in losses) >= t_star * (1 - 1e-9)
    # every order starts on dimension 0 (2 ranks): the others fill while its first phase runs
    assert all(x.fill_us > 0 for x in losses[1:]) and losses[0].fill_us == 0
    # with each dimension's measured fill, drain and exposed costs the LP's optimum lies above T*, and no re-split
    # could gain even 1% on this schedule (at its 72 chunks, 2.9% from T*): what is left is those costs themselves
    estimate = startup_optimum(costs, "allreduce", size, k, losses)
    assert t_star < estimate <= lp.makespan_us * (1 + 1e-9)
    assert lp.makespan_us / estimate < 1.01
    assert lp.makespan_us / t_star > 1.02
