"""``ccsynth topo profile`` (bench/profile.py): patterns, probes, the fit on synthetic timings, and end to end under mpiexec."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ccsynth.bench.profile import (
    CURVE_MIN_BYTES, CURVE_MIN_SHARE, FOOTPRINT_SMALL, FOOTPRINTS, NO_SWITCH, KernelRates, LinkFit, ProfileOptions, Probe, ProtocolFit, Sample,
    build_topology, byte_share, eviction_bytes, fit_curve, fit_footprint, fit_forward_curve, fit_patterns, fit_round_cost,
    non_increasing,
    local_curve, patterns, plan_probes, probe_footprint, probe_schedule, prune_message_curve, refit_with_footprint,
    robust_us,
    round_partners, round_peer_counts, round_probes,
)
from ccsynth.bench.profiling.fit import Predictor
from ccsynth.bench.profiling.probes import pair_pattern
from ccsynth.bench.profiling.topology import node_ports
from ccsynth.synth.executor_model import lower_for_executor
from ccsynth.synth.simulate import receive_rounds, simulate_graph
from ccsynth.topologies.coldcall import ColdCallCost
from ccsynth.topologies.rounds import RoundCost
from ccsynth.topologies.curve import SizeCurve
from ccsynth.topologies.io import load_topology, topology_to_json

VENV_BIN = Path(sys.executable).parent
MPIEXEC = VENV_BIN / "mpiexec"


def _ordered_pairs(pats):
    return sorted(p for pat in pats for p in pat.pairs)


# ------------------------------------------------------------------ patterns
@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_patterns_send_once_over_every_ordered_pair_with_every_rank_active(n):
    pats = patterns([0] * n)
    assert len(pats) == n - 1
    assert _ordered_pairs(pats) == [(a, b) for a in range(n) for b in range(n) if a != b]
    for pat in pats:  # a permutation: every rank sends once and receives once
        assert sorted(pat.dest) == list(range(n)) and all(d != r for r, d in enumerate(pat.dest))
        assert pat.kind == "intra"


def test_patterns_on_two_nodes_keep_to_one_kind_of_pair():
    nodes = [0, 0, 1, 1, 0, 1]  # ranks interleaved over two nodes of three
    pats = patterns(nodes)
    assert _ordered_pairs(pats) == [(a, b) for a in range(6) for b in range(6) if a != b]
    for pat in pats:
        same = {nodes[r] == nodes[d] for r, d in pat.pairs}
        assert same == ({True} if pat.kind == "intra" else {False})
    assert sum(p.kind == "intra" for p in pats) == 2 and sum(p.kind == "inter" for p in pats) == 3


def test_unequal_nodes_fall_back_to_shifts():
    pats = patterns([0, 0, 0, 1])
    assert [p.name for p in pats] == ["shift 1", "shift 2", "shift 3"]
    assert _ordered_pairs(pats) == [(a, b) for a in range(4) for b in range(4) if a != b]
    assert {p.kind for p in pats} == {"mixed"}


def test_a_pair_alone_needs_three_ranks_on_the_node():
    assert pair_pattern([0, 0], 0) is None
    pat = pair_pattern([0, 0, 0, 0], 0)
    assert pat.dest == (1, 0, -1, -1) and pat.pairs == ((0, 1), (1, 0))


# ------------------------------------------------------------------ probes
def test_probe_schedules_compile_for_the_executor():
    pat = patterns([0] * 4)[0]
    chain = probe_schedule(4, Probe(pat, "chain", 3, 8))
    # round j forwards what round j - 1 received: each send after the first waits for a receive
    sends = [op for op in chain.ops if op.kind == "send"]
    assert sum(1 for op in sends if op.deps) == 4 * 2
    window = probe_schedule(4, Probe(pat, "window", 3, 8))
    assert all(not op.deps for op in window.ops)
    g = lower_for_executor(window, Probe(pat, "window", 3, 2 << 20).size_bytes)
    assert "dataflow" in g.name
    pair = probe_schedule(4, Probe(pair_pattern([0] * 4, 0), "window", 2, 8))
    assert {op.rank for op in pair.ops} == {0, 1}


def test_the_plan_of_probes_covers_latency_overhead_and_bandwidth():
    pats = patterns([0] * 4)
    probes = plan_probes(pats, ProfileOptions())
    for pat in pats:
        mine = [p for p in probes if p.pattern == pat]
        assert {p.messages for p in mine if p.shape == "chain" and p.nbytes == 8} == {1, 2, 4, 8}
        assert {p.messages for p in mine if p.shape == "window" and p.nbytes == 8} == {2, 4, 8, 16}
        ladder = [p.nbytes for p in mine if p.shape == "chain" and p.nbytes > 8]
        assert ladder[0] == 1 << 10 and ladder[-1] == 32 << 10 and 8 << 10 in ladder
        big = [p for p in mine if p.shape == "window" and p.nbytes > 8]
        assert {p.slice_bytes for p in big} == {1 << 20, 4 << 20}
        assert not [p for p in big if p.slice_bytes == 4 << 20 and p.nbytes < 1 << 20]
    quick = plan_probes(pats, ProfileOptions(quick=True))
    assert len(quick) < len(probes) / 2


# ------------------------------------------------------------------ the fit
@pytest.mark.parametrize(
    "n, alpha, overhead, bw, call, protocol",
    [
        (2, 1.0, 0.6, 10.0, 2.7, ProtocolFit(6144.0, 4.0)),
        (4, 20.0, 8.0, 2.5, 10.0, ProtocolFit(4096.0, 30.0)),
        (4, 0.5, 3.0, 5.0, 0.0, NO_SWITCH),
    ],
)
def test_fit_recovers_known_figures_from_synthetic_timings(n, alpha, overhead, bw, call, protocol):
    """Timings made by the very prediction the fit inverts: known figures in, the same out."""
    pats = patterns([0] * n)
    opts = ProfileOptions(quick=n == 4)
    pred = Predictor(n)
    samples = [Sample(p, pred.time(p, alpha, overhead, bw, call, protocol)) for p in plan_probes(pats, opts)]
    result = fit_patterns(n, samples, pred)
    assert result.call_overhead == pytest.approx(call, abs=0.02)
    assert result.protocol.eager_limit == protocol.eager_limit
    assert result.protocol.rendezvous_alpha == pytest.approx(protocol.rendezvous_alpha, rel=0.02)
    fits = result.fits
    assert len(fits) == n - 1
    for f in fits:
        assert f.alpha == pytest.approx(alpha, rel=0.02, abs=0.02)
        assert f.overhead == pytest.approx(overhead, rel=0.02)
        assert f.bw == pytest.approx(bw, rel=0.02)
        assert f.error < 0.01


def test_fit_of_noisy_timings_stays_close():
    pats = patterns([0, 0])
    pred = Predictor(2)
    probes = plan_probes(pats, ProfileOptions())
    noise = [1.05, 0.95, 1.02, 0.98]
    samples = [Sample(p, pred.time(p, 1.0, 0.6, 10.0, 2.7) * noise[i % 4]) for i, p in enumerate(probes)]
    [f] = fit_patterns(2, samples, pred).fits
    assert f.hop_us == pytest.approx(1.0 + 1.2, rel=0.15)
    assert f.bw == pytest.approx(10.0, rel=0.1)


# ------------------------------------------------------------------ topology
def test_topology_has_a_link_per_ordered_pair_and_the_cpu_engine_model():
    pats = patterns([0] * 3)
    fits = [LinkFit(pats[0], 1.0, 0.5, 4.0), LinkFit(pats[1], 2.0, 0.25, 3.0)]
    t = build_topology(3, fits, 2.0, KernelRates(8.0, 6.0, 5.0, 1 << 24), [0, 0, 0], name="m")
    assert len(t.links) == 6 and t.overhead_scope == "rank" and t.local_bw == 5.0 and t.call_overhead == 2.0
    c = t.connection(0, 1)
    assert (c.alpha, c.overhead, c.bw) == (1.0, 0.5, 4.0)
    assert t.connection(0, 2).bw == 3.0 and not t.shared_ports


def test_a_node_whose_pairs_slow_each_other_down_gets_a_shared_port():
    nodes = [0, 0, 0, 0]
    pats = patterns(nodes)
    fits = [LinkFit(p, 1.0, 0.5, 2.0) for p in pats]  # 4 links at 2 GB/s each: 8 GB/s together
    ports = node_ports(fits, nodes, {0: 5.0})  # one pair alone: 5 GB/s per direction
    assert list(ports) == [0] and ports[0].bw == pytest.approx(8.0) and ports[0].srcs == (0, 1, 2, 3)
    t = build_topology(4, fits, 0.0, KernelRates(8.0, 6.0, 5.0, 1), nodes, ports=ports, pair_bw={0: 5.0})
    assert t.links[0].bw == 5.0 and t.connection(0, 1).bw == pytest.approx(5.0)  # alone: the pair's rate
    assert not node_ports(fits, nodes, {0: 2.1})  # within the margin: no port
    assert not node_ports(fits, nodes, {0: 2.1}, [4, 4, 4, 4])  # 4 ranks on 4 cores: still none


def test_an_oversubscribed_node_gets_a_shared_port_whatever_its_pair_alone_measured():
    """4 ranks on 2 cores: the pair is not alone (the others poll on the same cores), so its figure cannot decide;
    the node's port is what all its pairs reached together, and a stream alone keeps the patterns' rate."""
    nodes = [0, 0, 0, 0]
    fits = [LinkFit(p, 1.0, 0.5, bw) for p, bw in zip(patterns(nodes), (2.0, 3.0, 2.5))]
    ports = node_ports(fits, nodes, {0: 2.9}, [2, 2, 2, 2])  # within the margin of the fastest pattern
    assert list(ports) == [0] and ports[0].bw == pytest.approx(4 * 2.5)
    t = build_topology(4, fits, 0.0, KernelRates(8.0, 6.0, 5.0, 1), nodes, ports=ports, pair_bw={0: 2.9})
    assert t.shared_ports[0].bw == pytest.approx(10.0) and t.connection(0, 1).bw == pytest.approx(2.9)
    assert not node_ports(fits, [0, 0, 1, 1], {}, [1, 1, 1, 1])  # no node with a pair probe: nothing to go by


# ------------------------------------------------------------------ end to end
def _run(cmd, timeout=300):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 4])
def test_profile_writes_a_topology_that_loads_and_synth_uses(ranks, tmp_path):
    if not MPIEXEC.exists():
        pytest.skip("mpiexec not installed in the virtual environment")
    out, raw = tmp_path / "machine.json", tmp_path / "raw.json"
    proc = _run([str(MPIEXEC), "-n", str(ranks), sys.executable, "-m", "ccsynth", "topo", "profile", "-o", str(out),
                 "--quick", "--raw", str(raw)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    # progress on stderr, [k/N] per step; the summary table on stdout, once (rank 0)
    progress = [ln for ln in proc.stderr.splitlines() if ln.startswith("[")]
    assert progress and progress[-1].startswith(f"[{len(progress) - 1}/{len(progress) - 1}]")
    assert proc.stdout.count("fixed cost per collective call") == 1 and f"wrote {out}" in proc.stdout
    assert any("footprint of 2 x 256K" in ln for ln in progress) and "cost by footprint" in proc.stdout
    topo = load_topology(out)
    assert topo.n_ranks == ranks and len(topo.links) == ranks * (ranks - 1)
    assert topo.overhead_scope == "rank" and topo.local_bw > 0 and topo.call_overhead >= 0
    # rounds of k = 1 .. n - 1 peers, and the communicator's per-call cost (0 is written as no key)
    assert topo.round_cost is not None and topo.round_cost.peers == tuple(range(1, ranks))
    assert all(c >= 0 for c in topo.round_cost.us) and topo.communicator_overhead >= 0
    assert "a round costs more by the peers" in proc.stdout and "through ccsynth's communicator" in proc.stdout
    # the reference collectives ran last in the pass, at the quick sizes, and gave the run curve
    from ccsynth.bench import calibration as cal

    assert any(ln.startswith("[") and "reference collectives: allreduce and allgather" in ln for ln in progress)
    assert topo.run_curve is not None and topo.run_curve.sizes == tuple(float(s) for s in cal.QUICK_SIZES)
    assert all(cal.RUN_RANGE[0] <= f <= cal.RUN_RANGE[1] for f in topo.run_curve.factors)
    assert "a whole run costs, by its input bytes per rank" in proc.stdout
    # ... and MPI's own times in those runs, the yardstick of bench --predict's drift lines
    assert [r.collective for r in topo.mpi_reference] == list(cal.REFERENCE_KINDS)
    assert all(r.sizes == tuple(float(s) for s in cal.QUICK_SIZES) and min(r.us) > 0 for r in topo.mpi_reference)
    assert proc.stdout.count("MPI's own all") == 2
    bench_json = tmp_path / "bench.json"
    bench = _run([str(MPIEXEC), "-n", str(ranks), sys.executable, "-m", "ccsynth", "bench", "allgather", "-m",
                  "1K:64K", "--algo", "mpi,ring", "-i", "3", "-x", "1", "--predict", str(out), "--json",
                  str(bench_json)])
    assert bench.returncode == 0, bench.stdout + bench.stderr
    assert f"MPI's own allgather / its time when {out} was profiled" in bench.stdout
    drift = json.loads(bench_json.read_text())["mpi_drift"]
    assert drift and sum(d["rows"] for d in drift) == 7 and all(d["least"] <= d["median"] <= d["most"] for d in drift)
    assert all(l.bw > 0 and l.alpha >= 0 and l.overhead >= 0 for l in topo.links)
    assert f"{ranks} ranks" in topo.description and "cores" in topo.description
    doc = json.loads(out.read_text())
    assert doc["format"] == "ccsynth.topology" and doc["overhead_scope"] == "rank"

    # the footprint probes ran; a curve is written where they differ by more than FOOTPRINT_FLAT (on a quiet
    # machine data beyond the last-level cache costs more; under heavy load every probe is the scheduler's)
    assert (topo.footprint_curve is not None) == ("footprint_curve" in doc)
    if topo.footprint_curve is not None:
        assert topo.footprint_curve.factors[0] == 1.0 and max(topo.footprint_curve.factors) > 1.05
    show = _run([sys.executable, "-m", "ccsynth", "topo", "show", str(out)])
    assert show.returncode == 0 and "overhead scope: rank" in show.stdout, show.stderr
    assert (topo.footprint_curve is not None) == ("message cost by footprint" in show.stdout)
    # the large footprint windows ran too: the cold call cost is written (0 where they measured none), and shown
    assert topo.cold_call is not None and "cold_call" in doc and all(c >= 0 for c in topo.cold_call.us)
    assert "a cold call costs more once" in show.stdout and "a cold call costs more once" in proc.stdout
    assert "a whole run costs, by its input bytes per rank" in show.stdout
    # the raw probe times: fitted again offline, the very same file; on fewer footprint probes, fewer points
    assert f"wrote {raw}" in proc.stdout and json.loads(raw.read_text())["n_ranks"] == ranks
    again = tmp_path / "again.json"
    refit = _run([sys.executable, "-m", "ccsynth", "topo", "refit", str(raw), "-o", str(again)])
    assert refit.returncode == 0 and f"wrote {again}" in refit.stdout, refit.stdout + refit.stderr
    assert again.read_text() == out.read_text()
    fewer = _run([sys.executable, "-m", "ccsynth", "topo", "refit", str(raw), "-o", str(again), "--footprints", "64M"])
    assert fewer.returncode == 0, fewer.stdout + fewer.stderr
    assert len(load_topology(again).cold_call.footprints) == 2 < len(topo.cold_call.footprints)
    sched = tmp_path / "s.json"
    synth = _run([sys.executable, "-m", "ccsynth", "-q", "synth", "-t", str(out), "-c", "allreduce", "--size", "1M",
                  "-o", str(sched)])
    assert synth.returncode == 0, synth.stdout + synth.stderr
    verify = _run([sys.executable, "-m", "ccsynth", "verify", str(sched), "-t", str(out)])
    assert verify.returncode == 0, verify.stdout + verify.stderr


@pytest.mark.mpi
def test_profile_quiet_and_errors(tmp_path):
    if not MPIEXEC.exists():
        pytest.skip("mpiexec not installed in the virtual environment")
    base = [str(MPIEXEC), "-n", "2", sys.executable, "-m", "ccsynth", "topo", "profile"]
    quiet = _run(base + ["-o", str(tmp_path / "m.json"), "--quick", "-q", "--sizes", "64K", "--no-reference"])
    assert quiet.returncode == 0 and not [ln for ln in quiet.stderr.splitlines() if ln.startswith("[")], quiet.stderr
    # --no-reference: no reference collectives, so neither a run curve nor MPI's reference times
    plain = load_topology(tmp_path / "m.json")
    assert plain.run_curve is None and plain.mpi_reference == ()
    assert "a whole run: as predicted (no reference collectives measured)" in quiet.stdout
    missing = _run(base + ["-o", str(tmp_path / "no" / "m.json"), "--quick"])
    assert missing.returncode == 2 and missing.stderr.count("does not exist") == 1, missing.stderr
    one = _run([str(MPIEXEC), "-n", "1", sys.executable, "-m", "ccsynth", "topo", "profile", "-o",
                str(tmp_path / "m1.json"), "--quick"])
    assert one.returncode == 2 and "at least 2 ranks" in one.stderr


# ------------------------------------------------------------------ the benchmark's report
def test_bench_predict_report_from_results():
    from ccsynth.bench.bench_predict import baselines_for, markdown

    assert baselines_for("allreduce", 2) == ["ring", "recursive_doubling", "recursive_halving", "direct", "one_shot"]
    assert "multi_ring" in baselines_for("allreduce", 4) and baselines_for("allgather", 4) == ["ring", "recursive_doubling", "direct"]

    def row(size, med, pred=None, algo="x"):
        r = {"size": size, "median_us": med, "algorithm": algo}
        if pred:
            r["predicted_us"] = pred
        return r

    sizes = [8, 64 << 10, 1 << 20]
    doc = {"results": {
        "mpi": [row(s, 10.0, algo="mpi") for s in sizes],
        "default": [row(s, 12.0, 10.0) for s in sizes],
        "plan:p.json": [row(s, 11.0, 9.0 if s == 1 << 20 else 10.0, "ring(c=4)") for s in sizes],
        "ring": [row(s, 20.0, 10.0) for s in sizes],
    }}
    topo = {"n_ranks": 2, "description": "profiled", "sources": ["here"], "call_overhead_us": 2.0,
            "local_bw_GBps": 5.0, "shared_ports": [], "links": [{"src": 0, "dst": 1, "alpha_us": 1.0, "bw_GBps": 9.0,
                                                                 "overhead_us": 0.5}]}
    case = {"n": 2, "topology": topo, "loads": {"before": "0.5 0.5 0.5"},
            "runs": {"allreduce": {"json": doc, "plan": "plan:p.json", "synth_s": 1.0}}}
    text = markdown([case], ["mpiexec -n 2 ccsynth topo profile -o machine2.json"])
    assert "mpiexec -n 2 ccsynth topo profile" in text and "| 0->1 | 1.00 | 0.50 | 2.00 | 9.000 |" in text
    # errors: default 20%, plan 10%, ring 100% at every size: median 20%, worst 100% (ring)
    assert "| 8 B | 3 | 20% | 100% |" in text and "| 64K | 3 | 20% | 100% |" in text
    assert "plan at least as fast as the default plan at 100% of 3 sizes" in text
    # predicted plan / default: 1.00 (no winner called) but at 1 MiB 0.90, and the plan does win there
    assert "by more than 5% (1 of 3 sizes), the measured winner is the predicted one at 100%" in text
    assert "| 8 B | 10.0 | 12.0 | 11.0 | 0.92 | 1.10 | 1.20 | 1.00 | ring(c=4) |" in text
    assert "| 1M | 10.0 | 12.0 | 11.0 | 0.92 | 1.10 | 1.20 | 0.90 | ring(c=4) |" in text
    # latency / MPI's per band, the same run
    assert "| ring | 2.00 | 2.00 | 2.00 |" in text
    # with the rounds of ccsynth.bench.compare: the summary's row and the per-size table of the case
    from ccsynth.bench import compare

    rounds = [compare.Comparison(s, (11.0,) * 6, (12.0,) * 6, (12.0,) * 6, "ring(c=4)", "ring", False) for s in sizes]
    case["runs"]["allreduce"]["compare"] = compare.to_dict(rounds)
    text = markdown([case], [])
    assert "| allreduce 2r | 6 | 100% | 100% | 0% | 0% | 100% | 100% | 0 of 3 | 2.0% | - |" in text
    assert "| 8 | 11.0 | 12.0 | 0.917 | 0.92-0.92 | 1.00-1.00 | 2.0% | faster | ring(c=4) | ring |" in text


def test_bench_predict_keeps_the_fastest_run_of_each_row():
    from ccsynth.bench.bench_predict import fastest_rows

    def doc(*meds):
        return {"n_ranks": 2, "results": {"mpi": [{"size": 8 << i, "median_us": m} for i, m in enumerate(meds)],
                                          "ring": [{"size": 8 << i, "median_us": 2 * m, "predicted_us": 1.0}
                                                   for i, m in enumerate(meds)]}}

    merged = fastest_rows([doc(5.0, 9.0), doc(7.0, 3.0)])
    assert [r["median_us"] for r in merged["results"]["mpi"]] == [5.0, 3.0]
    assert [r["median_us"] for r in merged["results"]["ring"]] == [10.0, 6.0]
    assert merged["n_ranks"] == 2 and all(r["predicted_us"] == 1.0 for r in merged["results"]["ring"])


# ------------------------------------------------------------------ size-dependent costs
def test_fit_curve_recovers_a_known_message_curve_from_synthetic_timings():
    """Timings made with a curve (cache-resident mid sizes twice as fast): the fitted curve predicts them."""
    pats = patterns([0, 0])
    pred = Predictor(2)
    true = SizeCurve((16384, 65536, 262144, 1 << 20, 4 << 20, 16 << 20), (0.8, 0.5, 0.5, 0.7, 1.0, 1.0))
    samples = [Sample(p, pred.time(p, 1.0, 0.6, 3.0, 2.7, NO_SWITCH, true)) for p in plan_probes(pats, ProfileOptions())]
    result = fit_patterns(2, samples, pred)
    curve = fit_curve(pred, samples, result)
    # a point per probe size whose messages carry CURVE_MIN_BYTES or more: 2 rounds x 2 ranks x 4 KiB first
    assert curve is not None and curve.sizes[0] == 4 * CURVE_MIN_BYTES
    [f] = result.fits
    # the cost of a call's bytes, f * m / bw, is the true one (bw and the factors may trade off)
    for m in (65536, 1 << 20, 16 << 20):
        assert curve.factor(m) / f.bw == pytest.approx(true.factor(m) / 3.0, rel=0.05)
    errors = [abs(pred.fitted(s.probe, f, result.call_overhead, result.protocol, curve) / s.measured_us - 1)
              for s in samples if s.probe.nbytes >= CURVE_MIN_BYTES]
    assert max(errors) < 0.03


def test_byte_share_by_hand():
    """A probe of 10 us fixed plus 5 us of bytes: its bytes are 5 / 15 of its time (factor 1 -> 2: 15 -> 20 us)."""
    probes = [Probe(patterns([0, 0])[0], "chain", 2, nb) for nb in (4096, 8192, 16384)]

    def predict(p, c):
        return 10.0 + 5.0 * (p.nbytes / 8192) * (c.factor(p.size_bytes) if c is not None else 1.0)

    assert byte_share(probes[1:2], predict) == pytest.approx(1 / 3)
    # the median over the probes: 2.5 / 12.5, 5 / 15, 10 / 20
    assert byte_share(probes, predict) == pytest.approx(1 / 3)
    assert byte_share(probes[:1], predict) == pytest.approx(0.2)


def _latency_bound_samples(noise: float):
    """A 2-rank machine whose hop (30 us of alpha) dwarfs the ladder's 4-16 KiB messages, the true curve flat;
    the ladder's chains of 8 KiB (a 32 KiB call) measured ``noise`` faster than the model."""
    pats = patterns([0, 0])
    pred = Predictor(2)
    samples = []
    for p in plan_probes(pats, ProfileOptions()):
        t = pred.time(p, 30.0, 0.6, 3.0, 2.7)
        if p.shape == "chain" and p.nbytes == 8192:
            t *= 1 - noise
        samples.append(Sample(p, t))
    return pred, samples


def test_fit_curve_gives_no_point_where_the_bytes_are_a_small_share_of_the_time():
    """Without the share rule the 8 KiB chains' 8% of noise, divided by their bytes' share (about 0.06), put the
    curve's floor (0.1) on every 32 KiB call; with it, those sizes take the first well-measured point's factor."""
    pred, samples = _latency_bound_samples(0.08)
    result = fit_patterns(2, samples, pred)
    curve = fit_curve(pred, samples, result)
    [f] = result.fits
    assert curve is not None

    def predict(p, c):
        return pred.fitted(p, f, result.call_overhead, result.protocol, c)

    for m in curve.sizes:  # every point the curve has was fitted on probes whose bytes matter
        group = [s.probe for s in samples if s.probe.size_bytes == m and s.probe.shape in ("chain", "window")
                 and s.probe.nbytes >= CURVE_MIN_BYTES]
        assert byte_share(group, predict) >= CURVE_MIN_SHARE
    small = [s.probe for s in samples if s.probe.shape == "chain" and s.probe.nbytes == 8192]
    assert byte_share(small, predict) < CURVE_MIN_SHARE
    assert small[0].size_bytes < curve.sizes[0]
    # the true curve is flat: the bytes of every call size cost what the fitted bandwidth says, within the fit
    for m in (32768, 65536, 1 << 20, 16 << 20):
        assert curve.factor(m) / f.bw == pytest.approx(1 / 3.0, rel=0.1)


def test_prune_message_curve_drops_the_points_a_refit_would_not_fit():
    pred, samples = _latency_bound_samples(0.0)
    result = fit_patterns(2, samples, pred)
    [f] = result.fits
    sizes = sorted({s.probe.size_bytes for s in samples if s.probe.shape in ("chain", "window")
                    and s.probe.nbytes >= CURVE_MIN_BYTES})
    old = SizeCurve(tuple(sizes), tuple(0.5 + 0.1 * i for i in range(len(sizes))))
    topo = build_topology(2, [f], result.call_overhead, KernelRates(8.0, 6.0, 5.0, 1 << 24), [0, 0],
                          protocol=result.protocol, message_curve=old)
    kept = prune_message_curve(topo).message_curve
    fitted = fit_curve(pred, samples, result)
    assert kept is not None and fitted is not None
    assert kept.sizes == fitted.sizes and len(kept.sizes) < len(sizes)  # the sizes a fit keeps now
    assert all(old.factor(m) == kept.factor(m) for m in kept.sizes)  # their factors as they were
    assert prune_message_curve(build_topology(2, [f], 1.0, KernelRates(8.0, 6.0, 5.0, 1 << 24), [0, 0])).message_curve is None


def test_local_curve_from_the_kernel_ladder():
    # 1 GB/s on 16 MiB; 1 us a call; 64 KiB buffers in 1 + 16.384 us (4x faster), 1 MiB at the full rate
    k = KernelRates(1.0, 1.0, 1.0, 1 << 24, 1.0, ((65536, 1.0 + 65.536 / 4), (1 << 20, 1.0 + 1048.576)))
    c = local_curve(k)
    assert c.sizes == (65536.0, float(1 << 20), float(1 << 24))
    assert c.factors == pytest.approx((0.25, 1.0, 1.0))
    assert local_curve(KernelRates(1.0, 1.0, 1.0, 1 << 24, 1.0)) is None


def test_profiled_topology_file_round_trips_its_curves(tmp_path):
    pats = patterns([0, 0])
    fits = [LinkFit(p, 1.0, 0.5, 4.0) for p in pats]
    msg = SizeCurve((4096.0, 65536.0), (0.7, 1.1))
    loc = SizeCurve((4096.0, 1 << 24), (0.2, 1.0))
    t = build_topology(2, fits, 2.0, KernelRates(8.0, 6.0, 5.0, 1 << 24), [0, 0], name="m", message_curve=msg,
                       local_curve=loc)
    path = tmp_path / "m.json"
    path.write_text(topology_to_json(t))
    back = load_topology(path)
    assert back == t and back.message_curve == msg and back.local_curve == loc


# ------------------------------------------------------------------ forwarded messages, cold caches
def test_the_plan_has_forward_probes_at_every_bandwidth_size_and_one_smaller():
    pats = patterns([0, 0])
    opts = ProfileOptions()
    fwd = [p for p in plan_probes(pats, opts) if p.shape == "forward"]
    assert sorted(p.nbytes for p in fwd) == sorted({16 << 10, *opts.bw_sizes})
    # a forward is a chain: its second send passes on what the first brought
    sched = probe_schedule(2, fwd[0])
    assert sum(1 for op in sched.ops if op.kind == "send" and op.deps) == 2
    assert 1 << 20 <= eviction_bytes() <= 1 << 30


def _forward_fit(true: SizeCurve | None):
    """The forward curve fitted to synthetic timings of a 2-rank profile made with forward curve ``true``."""
    pats = patterns([0, 0])
    pred = Predictor(2)
    samples = [Sample(p, pred.time(p, 1.0, 0.6, 3.0, 2.7, NO_SWITCH, None, true))
               for p in plan_probes(pats, ProfileOptions())]
    result = fit_patterns(2, samples, pred)
    [f] = result.fits
    assert f.bw == pytest.approx(3.0, rel=0.02)  # windows alone fit the bandwidth, whatever the forwards cost
    return fit_forward_curve(pred, samples, result, None)


def test_fit_forward_curve_recovers_known_factors_from_synthetic_timings():
    """Timings made with a forward curve (forwarded messages 3x dearer up to 256 KiB, as dear as any from 1 MiB):
    fitted back from 1 MiB, and dearer than 1 below, never above what the probes measured (the smallest probe's
    16 KiB messages fit low: its factor, the curve's first point, bounds the ones after it)."""
    true = SizeCurve((65536.0, 256 << 10, 1 << 20, 64 << 20), (3.0, 3.0, 1.0, 1.0))
    fwd = _forward_fit(true)
    assert fwd is not None and min(fwd.factors) >= 1.0
    assert list(fwd.factors) == sorted(fwd.factors, reverse=True)
    for m in fwd.sizes:
        assert fwd.factor(m) <= true.factor(m) * 1.05
    assert fwd.factor(65536) > 1.4 and fwd.factor(256 << 10) > 1.4
    for m in (1 << 20, 4 << 20, 16 << 20):
        assert fwd.factor(m) == pytest.approx(1.0, rel=0.05)
    # without forwarding costs there is no curve
    assert _forward_fit(None) is None


def test_forward_curve_never_rises_with_the_size():
    """Forward probes dearer only from 1 MiB (the probes' second mode, which no collective showed): each size keeps
    the smallest factor at it or below, so (about) none; dearer from 4 MiB than at 1 MiB: those keep the 1 MiB probe's factor."""
    rising = _forward_fit(SizeCurve((65536.0, 1 << 20, 64 << 20), (1.0, 3.0, 3.0)))  # measured 3x from 1 MiB
    assert rising is None or max(rising.factors) < 1.05
    fwd = _forward_fit(SizeCurve((65536.0, 256 << 10, 1 << 20, 4 << 20, 64 << 20), (3.0, 3.0, 1.5, 4.0, 4.0)))
    assert fwd is not None
    assert fwd.factor(1 << 20) == pytest.approx(1.5, rel=0.05)
    for m in (4 << 20, 16 << 20):  # measured 4x, kept at the 1 MiB probe's 1.5x
        assert fwd.factor(m) == pytest.approx(1.5, rel=0.05)
    assert non_increasing((2.0, 1.0, 3.0, 0.5)) == (2.0, 1.0, 1.0, 0.5) and non_increasing(()) == ()


def test_repredict_recomputes_a_saved_run_with_the_current_model(tmp_path):
    from ccsynth.bench.bench_predict import repredict_cases, row_lines
    from ccsynth.bench.predict import repredict_document

    topo = build_topology(2, [LinkFit(p, 1.0, 0.5, 4.0) for p in patterns([0, 0])], 2.0,
                          KernelRates(8.0, 6.0, 5.0, 1 << 24), [0, 0], name="m")
    (tmp_path / "machine2.json").write_text(topology_to_json(topo))
    rows = lambda algo: [{"size_bytes": s, "nccl_size_bytes": s, "median_us": 50.0, "algorithm": algo}  # noqa: E731
                         for s in (8, 1 << 20)]
    doc = {"collective": "allreduce", "n_ranks": 2, "dtype": "float32", "command": "ccsynth bench allreduce",
           "results": {"mpi": rows("mpi"), "default": rows("one_shot"), "ring": rows("ring")}}
    new = repredict_document(doc, topo, tmp_path)
    assert all("predicted_us" not in r for r in new["results"]["mpi"])
    ring = [r["predicted_us"] for r in new["results"]["ring"]]
    assert 0 < ring[0] < ring[1]
    cases = [{"n": 2, "machine": "/gone/machine2.json", "topology": {}, "loads": {},
              "runs": {"allreduce": {"json": doc, "plan": "plan:x", "synth_s": 0.0}}}]
    [case] = repredict_cases(cases, tmp_path)
    assert case["topology"]["name"] == "m"
    assert any("| allreduce 2r | ring | 1M | ring |" in line for line in row_lines([case]))


# ------------------------------------------------------------------ rounds of k peers
@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
def test_round_probes_wait_on_k_peers_per_round(n):
    assert round_peer_counts(n) == tuple(range(1, n))
    for k in round_peer_counts(n):
        perms = round_partners(n, k)
        assert len(perms) == k and all(sorted(p) == list(range(n)) and all(d != r for r, d in enumerate(p))
                                       for p in perms)
        probe = Probe(patterns([0] * n)[0], "rounds", 3, 8, peers=k)
        s = probe_schedule(n, probe)
        got = receive_rounds(s.ops, s.matches, RoundCost((1,), (1.0,)))
        for r in range(n):
            mine = [got.of[op.id] for op in s.ops if op.rank == r and op.kind == "recv"]
            assert len(set(mine)) == 3 and {got.peers[g] for g in mine} == {k}
        # every send after the first round waits for all k receives of the last one
        later = [op for op in s.ops if op.kind == "send" and op.deps]
        assert len(later) == 2 * k * n and all(sum(s.ops[d].kind == "recv" for d in op.deps) == k for op in later)
        assert probe.size_bytes == n * 3 * k * 8
        lower_for_executor(s, probe.size_bytes)  # the executor runs it


def test_round_peer_counts_stay_few_on_many_ranks():
    ks = round_peer_counts(64)
    assert ks[:8] == tuple(range(1, 9)) and ks[-1] == 63 and len(ks) <= 14
    assert round_peer_counts(1024)[-1] == 64  # the round cost stays at its last point beyond
    rounds = {(p.peers, p.messages) for p in round_probes(64, ProfileOptions())}
    assert {r for k, r in rounds if k == 1} == {1, 2, 4, 8} and {r for k, r in rounds if k == 63} == {1, 2}
    assert len(round_probes(4, ProfileOptions(quick=True))) == 2 * 3


def test_robust_us_is_the_median_of_the_fastest_half():
    assert robust_us([9.0, 1.0, 2.0, 100.0]) == 1.5
    assert robust_us([5.0, 3.0, 4.0]) == 3.5
    assert robust_us([7.0]) == 7.0


def test_fit_round_cost_recovers_known_costs_from_synthetic_timings():
    n = 4
    topo = build_topology(n, [LinkFit(p, 1.0, 0.5, 4.0) for p in patterns([0] * n)], 3.0,
                          KernelRates(8.0, 6.0, 5.0, 1 << 24, 1.0), [0] * n, name="m")
    true = RoundCost((1, 2, 3), (0.5, 4.0, 9.0))
    timed = topo.__class__(**{**topo.__dict__, "round_cost": true})
    samples = []
    for probe in round_probes(n, ProfileOptions()):
        g = lower_for_executor(probe_schedule(n, probe), probe.size_bytes)
        # the machine's own intercept differs from the model's by 2 us: the slope ignores it
        samples.append(Sample(probe, simulate_graph(g, timed).time_us + 2.0))
    got = fit_round_cost(topo, samples)
    assert got.peers == (1, 2, 3)
    assert got.us == pytest.approx(true.us, abs=0.05)
    # rounds measured as fast as predicted: no extra cost
    flat = [Sample(s.probe, simulate_graph(lower_for_executor(probe_schedule(n, s.probe), s.probe.size_bytes),
                                           topo).time_us) for s in samples]
    assert fit_round_cost(topo, flat).us == pytest.approx((0.0, 0.0, 0.0), abs=1e-6)
    assert fit_round_cost(topo, []) is None
# ------------------------------------------------------------------ footprint (h29-cache)
def test_the_plan_has_footprint_probes_at_a_ladder_of_footprints():
    pats = patterns([0] * 4)
    every = [p for p in plan_probes(pats, ProfileOptions()) if p.shape == "footprint"]
    fp = [p for p in every if p.nbytes == 256 << 10]
    assert {p.pattern for p in every} == {pats[0]} and {p.nbytes for p in every} == {256 << 10, FOOTPRINT_SMALL}
    # 4 ranks: the windows' own buffers (2.5 MiB), then every footprint of the ladder above them, a factor 2 apart
    own = 10 * (256 << 10)
    assert sorted(probe_footprint(p) for p in fp) == [own] + [f for f in FOOTPRINTS if f > own]
    assert [f >> 20 for f in FOOTPRINTS] == [2, 4, 8, 16, 32, 64, 128, 256]
    # chosen footprints instead (--footprints), whatever the order; those within the buffers are left out
    mine = [p for p in plan_probes(pats, ProfileOptions(footprints=(64 << 20, 1 << 20, 8 << 20)))
            if p.shape == "footprint" and p.nbytes == 256 << 10]
    assert [probe_footprint(p) for p in mine] == [own, 8 << 20, 64 << 20]
    # the windows of smaller messages at exactly the same footprints (longer eviction passes)
    assert sorted(probe_footprint(p) for p in every if p.nbytes == FOOTPRINT_SMALL) == \
        sorted(probe_footprint(p) for p in fp)
    # a probe's footprint: its send (2 x 256 KiB) and receive (4 x 2 x 256 KiB) buffers and the eviction pass
    assert probe_footprint(fp[0]) == 10 * (256 << 10) + fp[0].evict_bytes
    # the cold windows count their eviction pass too, the chains do not
    w = next(p for p in plan_probes(pats, ProfileOptions()) if p.shape == "window" and p.nbytes > 8)
    assert probe_footprint(w) == w.buffer_bytes + eviction_bytes() and probe_footprint(w, cold=False) == w.buffer_bytes
    # a footprint probe compiles as a window of independent messages
    sched = probe_schedule(4, fp[0])
    assert all(not op.deps for op in sched.ops if op.kind == "send")


def _windows_reproduced(pred, samples, result, fp, cold):
    """The message curve fitted with the footprint's costs in place; every bandwidth window predicted within 3%."""
    curve = fit_curve(pred, samples, result, fp, cold)
    [f] = result.fits
    for s in samples:
        if s.probe.shape == "window" and s.probe.nbytes >= CURVE_MIN_BYTES:
            assert pred.fitted(s.probe, f, result.call_overhead, result.protocol, curve, None, fp, cold) == \
                pytest.approx(s.measured_us, rel=0.03)
    return curve


def test_fit_footprint_recovers_known_factors_and_the_message_curve_stays_exact():
    """Timings made with a footprint curve (3x from 16 MiB per rank) and no cold cost: the footprint fitted back
    relative to the smallest footprint, a cold cost of (about) 0, then the message curve with them in place
    reproduces every window."""
    pats = patterns([0, 0])
    pred = Predictor(2)
    M = 1 << 20
    true = SizeCurve((2.0 * M, 8.0 * M, 16.0 * M, 64.0 * M), (1.0, 1.0, 3.0, 3.0))
    samples = [Sample(p, pred.time(p, 1.0, 0.6, 3.0, 2.7, NO_SWITCH, None, None, true))
               for p in plan_probes(pats, ProfileOptions())]
    result = fit_patterns(2, samples, pred)
    fp, cold = fit_footprint(pred, samples, result)
    assert fp is not None and fp.factors[0] == 1.0
    for f in FOOTPRINTS:  # every point of the ladder, the step between 8 and 16 MiB included
        assert fp.factor(f) == pytest.approx(true.factor(f), rel=0.05)
    assert cold is not None and max(cold.us) < 1.0  # us, against windows of 60-600 us
    _windows_reproduced(pred, samples, result, fp, cold)
    # timings without a footprint: no curve; a spike at one footprint does not raise the larger ones
    flat = [Sample(p, pred.time(p, 1.0, 0.6, 3.0, 2.7)) for p in plan_probes(pats, ProfileOptions())]
    flat_result = fit_patterns(2, flat, pred)
    assert fit_footprint(pred, flat, flat_result)[0] is None
    spiked = [Sample(s.probe, s.measured_us * (3.0 if s.probe.shape == "footprint" and probe_footprint(s.probe) == 8 << 20
                                               else 1.0)) for s in flat]
    assert fit_footprint(pred, spiked, flat_result)[0] is None
    # a window slower than the factors' range at the smallest footprint (a load spike) leaves every factor in range
    slow = [Sample(s.probe, s.measured_us * (50.0 if s.probe.shape == "footprint" and s.probe.evict_bytes == 0 else 1.0))
            for s in samples]
    assert fit_footprint(pred, slow, result)[1] is not None
    # without the large windows (a profile of the older plan): the curve alone, as before
    older = [s for s in samples if s.probe.nbytes != FOOTPRINT_SMALL]
    assert fit_footprint(pred, older, result)[1] is None


def test_fit_footprint_splits_a_cold_call_from_the_per_byte_cost():
    """Timings made with a per-byte curve and a cold cost per call (0 at the smallest footprint, 40 us at a quarter
    of the last-level cache, 90 us from twice it): both fitted back at every footprint; the message curve fitted
    with them in place reproduces the windows; a 4 MiB-per-rank call after that much data then costs what the
    truth says, where the per-byte curve alone over-charges it."""
    pats = patterns([0, 0])
    pred = Predictor(2)
    M, llc = 1 << 20, 32 << 20
    true = SizeCurve((2.0 * M, llc / 4, 2.0 * llc), (1.0, 1.6, 2.2))
    ref = 1.5 * M  # 2 ranks: two 256 KiB messages sent, four received
    ws = 6.0 * FOOTPRINT_SMALL  # the small windows' buffers: calls of as many pay the cold cost in full
    truth = ColdCallCost((ref, llc / 4, 2.0 * llc), (0.0, 40.0, 90.0), working_set_bytes=ws)
    probes = plan_probes(pats, ProfileOptions())
    samples = [Sample(p, pred.time(p, 1.0, 0.6, 3.0, 2.7, NO_SWITCH, None, None, true, truth)) for p in probes]
    result = fit_patterns(2, samples, pred)
    fp, cold = fit_footprint(pred, samples, result)
    assert fp is not None and cold is not None and cold.working_set_bytes == ws and cold.footprints[0] == ref
    for f in cold.footprints:
        assert cold.cost_us(f, ws) == pytest.approx(truth.cost_us(f, ws), abs=2.0)
        assert fp.factor(f) == pytest.approx(true.factor(f), rel=0.03)
    curve = _windows_reproduced(pred, samples, result, fp, cold)
    [f] = result.fits
    # the per-byte curve alone (the small windows only) puts the cold cost on the bytes: 4x the bytes, 4x the cost
    alone, none = fit_footprint(pred, [s for s in samples if s.probe.nbytes != FOOTPRINT_SMALL], result)
    assert none is None
    big = Probe(pats[0], "footprint", 2, 4 * M, 1 << 20, evict_bytes=int(2 * llc))
    want = pred.time(big, 1.0, 0.6, 3.0, 2.7, NO_SWITCH, None, None, true, truth)
    split = pred.fitted(big, f, result.call_overhead, result.protocol, curve, None, fp, cold)
    per_byte = pred.fitted(big, f, result.call_overhead, result.protocol, fit_curve(pred, samples, result, alone),
                           None, alone)
    # (over-charged by more than 10% with footprint probes at 1.5-65.5 MiB, 5-6% with the ladder up to 256 MiB: more of the
    # cold cost lands on footprints beyond the windows', which the message curve at their size then gives back)
    assert split == pytest.approx(want, rel=0.01) and per_byte > 1.04 * want


def test_refit_with_footprint_keeps_a_profile_without_one_and_adds_one(tmp_path):
    pats = patterns([0, 0])
    msg = SizeCurve((16384.0, 1 << 20, 64 << 20), (1.2, 0.9, 1.0))
    fwd = SizeCurve((65536.0, 1 << 20), (2.0, 1.0))
    t = build_topology(2, [LinkFit(p, 0.3, 0.7, 8.0) for p in pats], 2.2, KernelRates(6.0, 6.0, 6.0, 1 << 24), [0, 0],
                       name="m", message_curve=msg, forward_curve=fwd)
    same = refit_with_footprint(t, None)
    # a point per probe size, each on the profile's own curve
    for new, old in ((same.message_curve, msg), (same.forward_curve, fwd)):
        assert [new.factor(m) for m in new.sizes] == pytest.approx([old.factor(m) for m in new.sizes], rel=1e-3)
    assert same.footprint_curve is None
    fp = SizeCurve((2.0 * (1 << 20), 64.0 * (1 << 20)), (1.0, 3.0))
    more = refit_with_footprint(t, fp)
    assert more.footprint_curve == fp
    path = tmp_path / "m.json"  # the profile's file carries the key, and it loads
    path.write_text(topology_to_json(build_topology(2, [LinkFit(p, 0.3, 0.7, 8.0) for p in pats], 2.2,
                                                    KernelRates(6.0, 6.0, 6.0, 1 << 24), [0, 0], footprint_curve=fp)))
    assert "footprint_curve" in json.loads(path.read_text()) and load_topology(path).footprint_curve == fp
    # the largest windows' footprint costs 3x: the message curve there gives it back, so they predict the same
    assert more.message_curve.factor(64 << 20) == pytest.approx(msg.factor(64 << 20) / 3.0, rel=0.05)
    # part of it once per call instead: refitted again from that profile, the windows still predict as they did
    cold = ColdCallCost((2.0 * (1 << 20), 64.0 * (1 << 20)), (0.0, 40.0), working_set_bytes=6.0 * FOOTPRINT_SMALL)
    split = refit_with_footprint(more, SizeCurve(fp.sizes, (1.0, 2.0)), cold=cold)
    assert split.cold_call == cold and split.footprint_curve.factors == (1.0, 2.0)
    pred = Predictor(2)
    [f] = [LinkFit(p, 0.3, 0.7, 8.0) for p in pats]
    for p in plan_probes(pats, ProfileOptions()):
        if p.shape == "window" and p.nbytes >= CURVE_MIN_BYTES:
            old = pred.fitted(p, f, 2.2, NO_SWITCH, more.message_curve, None, more.footprint_curve)
            assert pred.fitted(p, f, 2.2, NO_SWITCH, split.message_curve, None, split.footprint_curve, cold) == \
                pytest.approx(old, rel=0.03)


def test_repredict_of_an_interleaved_run_predicts_every_row_at_the_footprint_of_all_algorithms(tmp_path):
    from ccsynth.bench.predict import repredict_document

    fp = SizeCurve((1.0 * (1 << 20), 8.0 * (1 << 20)), (1.0, 3.0))
    topo = build_topology(2, [LinkFit(p, 1.0, 0.5, 4.0) for p in patterns([0, 0])], 2.0,
                          KernelRates(8.0, 6.0, 5.0, 1 << 24), [0, 0], name="m", footprint_curve=fp)
    rows = lambda algo: [{"size_bytes": 1 << 20, "nccl_size_bytes": 1 << 20, "median_us": 50.0,  # noqa: E731
                          "algorithm": algo}]
    doc = {"collective": "allreduce", "n_ranks": 2, "dtype": "float32", "command": "ccsynth bench allreduce",
           "results": {"mpi": rows("mpi"), "ring": rows("ring"), "recursive_doubling": rows("recursive_doubling")}}
    alone = repredict_document(doc, topo, tmp_path)["results"]["ring"][0]["predicted_us"]
    together = repredict_document(dict(doc, command=doc["command"] + " --interleave"), topo, tmp_path)
    # ring 2.5 MiB, recursive doubling 4 MiB, MPI's own 2 MiB: 8.5 MiB per rank, beyond the curve's last point
    from ccsynth.synth.baselines import make_baseline
    from ccsynth.collectives.spec import Collective
    from ccsynth.synth.executor_model import simulate_run
    from ccsynth.topologies import fully_connected
    ring = make_baseline("ring", Collective("allreduce", 2, 2), fully_connected(2))
    assert together["results"]["ring"][0]["predicted_us"] == \
        pytest.approx(simulate_run(ring, topo, 1 << 20, footprint_bytes=8.5 * (1 << 20)).time_us)
    assert together["results"]["ring"][0]["predicted_us"] > 1.1 * alone
    # without a footprint curve the interleaving changes nothing
    plain = build_topology(2, [LinkFit(p, 1.0, 0.5, 4.0) for p in patterns([0, 0])], 2.0,
                           KernelRates(8.0, 6.0, 5.0, 1 << 24), [0, 0], name="m")
    assert repredict_document(dict(doc, command="x --interleave"), plain, tmp_path)["results"]["ring"][0]["predicted_us"] \
        == repredict_document(doc, plain, tmp_path)["results"]["ring"][0]["predicted_us"]


# ------------------------------------------------------------------ raw probe times, refit (h49-probes)
def _synthetic_raw(options, footprint=None, n=2):
    """A RawProfile whose times are the simulator's for known figures (every pass alike but the first, 10% slower)."""
    from ccsynth.bench.profile import RawProfile, round_probes

    pats = patterns([0] * n)
    pred = Predictor(n)
    times = lambda p: pred.time(p, 1.0, 0.6, 3.0, 2.7, ProtocolFit(6144.0, 4.0), None, None, footprint)  # noqa: E731
    probes = tuple((p, (1.1 * times(p), times(p))) for p in plan_probes(pats, options))
    rounds = tuple((p, (times(p), 1.2 * times(p), times(p))) for p in round_probes(n, options))
    kernels = KernelRates(6.0, 6.5, 5.0, 1 << 24, 0.9, ((4096, 1.0), (65536, 8.0), (1 << 20, 200.0)))
    return RawProfile(n, options, ("h",) * n, (2,) * n, "MPICH", "2026-12-02 04:00 UTC", "0.5, 0.4, 0.3", probes,
                      rounds, (("allgather", (8.0, 7.5), (6.0, 6.1)),), kernels, 12.5)


def test_a_raw_profile_round_trips_to_the_same_topology(tmp_path):
    from ccsynth.bench.profile import fit_profile
    from ccsynth.bench.profile_raw import load_raw, raw_from_dict, save_raw
    from ccsynth.errors import CCSynthError

    M = 1 << 20
    raw = _synthetic_raw(ProfileOptions(quick=True, footprints=(4 * M, 64 * M)),
                         SizeCurve((2.0 * M, 8.0 * M, 64.0 * M), (1.0, 1.5, 3.0)))
    path = tmp_path / "raw.json"
    save_raw(raw, path)
    back = load_raw(path)
    assert back == raw
    first, again = fit_profile(raw), fit_profile(back)
    assert topology_to_json(again.topology) == topology_to_json(first.topology)
    # the probes as measured count, whatever the options' defaults would plan now
    from dataclasses import replace as _replace
    other = _replace(raw, options=_replace(raw.options, footprints=None, quick=False))
    assert topology_to_json(fit_profile(other).topology) == topology_to_json(first.topology)
    # the fit saw the fastest pass of each probe, and a footprint
    assert first.topology.footprint_curve is not None and again.raw == raw
    assert {s.probe: s.measured_us for s in first.samples} == {p: min(t) for p, t in raw.probe_us}
    doc = json.loads(path.read_text())
    assert doc["format"] == "ccsynth.profile-raw" and len(doc["probes"]) == len(raw.probe_us)
    with pytest.raises(CCSynthError, match="not a raw profile"):
        raw_from_dict({"format": "ccsynth.topology"})
    with pytest.raises(CCSynthError, match="malformed"):
        raw_from_dict({**doc, "probes": [{"pattern": "x"}]})


def test_the_footprint_ladder_sees_what_two_points_interpolate_over():
    """A footprint that costs nothing up to 32 MiB and 3x from 64 MiB (hand-computed): the ladder's fit has 1.0 at
    28 MiB; from the same times, the probes at the own buffers (1.5 MiB) and 64 MiB alone (as run F had them)
    interpolate 2.94 there -- e(28M) = 1.5M + (3 x 64M - 1.5M) x 26.5 / 62.5 = 82.3M -- which is what the message
    curve of a 28 MiB window then has to give back."""
    from ccsynth.bench.profile import fit_profile

    M = 1 << 20
    truth = SizeCurve((2.0 * M, 32.0 * M, 64.0 * M), (1.0, 1.0, 3.0))
    raw = _synthetic_raw(ProfileOptions(footprints=(8 * M, 16 * M, 32 * M, 64 * M, 128 * M)), truth)
    ladder = fit_profile(raw).topology.footprint_curve
    two = fit_profile(raw, footprints=(64 * M,)).topology.footprint_curve
    assert two.sizes == (1.5 * M, 64.0 * M) and two.factors == pytest.approx((1.0, 3.0), rel=0.03)
    assert two.factor(28 * M) == pytest.approx((1.5 + (3.0 * 64 - 1.5) * 26.5 / 62.5) / 28, rel=0.03)  # 2.94
    assert len(ladder.sizes) == 6 and ladder.factor(28 * M) == pytest.approx(1.0, rel=0.03)
    assert ladder.factor(128 * M) == pytest.approx(3.0, rel=0.03)


def test_one_eviction_buffer_serves_every_pass_and_grows_to_the_largest():
    from ccsynth.bench.profile import EvictionBuffer

    ev = EvictionBuffer()
    a = ev.view(1 << 20)
    assert a.size == 1 << 20 and a.min() == 1  # written: a zero page would sit in the caches
    b = ev.view(1 << 10)
    assert b.size == 1 << 10 and np.shares_memory(a, b)  # a shorter pass reuses the buffer
    c = ev.view(4 << 20)
    assert c.size == 4 << 20 and not np.shares_memory(a, c) and np.shares_memory(c, ev.view(2 << 20))


def test_the_profile_says_receiver_copies_where_every_rank_has_a_core():
    """A rank's core copies what it receives (receiver_copies) where no node runs more ranks than it has cores; the
    fit predicts the probes with it, and the topology written says so."""
    from dataclasses import replace as _replace

    from ccsynth.bench.profile import fit_profile, own_cores

    assert own_cores([0, 0], [2, 2]) and own_cores([0, 0, 1, 1], [2] * 4)
    assert not own_cores([0, 0, 0, 0], [2] * 4) and not own_cores([0, 0, 1], [1, 1, 1])
    raw = _synthetic_raw(ProfileOptions(quick=True))
    assert fit_profile(raw).topology.receiver_copies is True  # 2 ranks on 2 cores
    assert fit_profile(_replace(raw, cores=(1, 1))).topology.receiver_copies is False
