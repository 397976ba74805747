"""``ccsynth topo list|show|export|profile|refit``: the topology catalog, and the machine that is there.

``mpiexec -n N ccsynth topo profile -o machine.json`` measures this
machine's ranks (:mod:`ccsynth.bench.profile`: latency, per-message
overhead and bandwidth between every pair, what ranks share, local
reduction rate, the fixed cost of a call) and writes a topology file that
``ccsynth synth -t machine.json`` and ``ccsynth bench --predict
machine.json`` use. Only rank 0 prints (a ``[k/N]`` progress line per
probe on stderr, quiet with ``-q``; the summary table on stdout) and
writes the file. ``--raw raw.json`` also writes every probe's times, and
``ccsynth topo refit raw.json -o machine.json`` fits them again (the same
topology under the same fit rules; :mod:`ccsynth.bench.profile_raw`).
"""

from __future__ import annotations

from ccsynth.atomic import check_writable, write_text
from ccsynth.bench.omb import agree
from ccsynth.bench.machine import with_start_load
from ccsynth.bench.profile import ProfileOptions, fit_profile, measure_machine
from ccsynth.collectives.mpi_util import install_abort_handler
from ccsynth.commands._common import add_json_arg, count_arg, json_doc, print_json, print_table
from ccsynth.commands._progress import Progress, elapsed_text
from ccsynth.errors import CCSynthError, TopologyError
from ccsynth.limits import check as check_limit
from ccsynth.topologies.io import topology_to_json
from ccsynth.units import format_size, parse_sizes

__all__ = ["register", "run"]


def register(sub) -> None:
    p = sub.add_parser("topo", help="list, show and export topologies", description=__doc__)
    tsub = p.add_subparsers(dest="topo_cmd", metavar="ACTION")
    tsub.required = True
    pl = tsub.add_parser("list", help="the catalog with its parameters")
    add_json_arg(pl)
    ps = tsub.add_parser("show", help="ranks, nodes, links and bandwidth constraints of one topology")
    ps.add_argument("spec", help="catalog name (dgx1, ndv2x2, ring:8, ...) or a topology file")
    ps.add_argument("--links", action="store_true", help="list every connection")
    add_json_arg(ps)
    pe = tsub.add_parser("export", help="write a topology as ccsynth JSON")
    pe.add_argument("spec", help="catalog name or a topology file (TACCL files are converted)")
    pe.add_argument("-o", "--output", required=True, help="output file")
    pp = tsub.add_parser(
        "profile", help="measure this machine under mpiexec and write its topology file",
        description="Run under mpiexec with the ranks to profile, e.g. mpiexec -n 4 ccsynth topo profile -o machine.json. "
                    "Measures latency, per-message overhead and bandwidth between every pair of ranks (all ranks active "
                    "at once, through ccsynth's executor), the local reduction rate, the fixed cost of a call and what "
                    "ranks share; then runs reference collectives (allreduce and allgather by ring, recursive doubling "
                    "and MPI) to measure what a whole run costs beside the prediction (the run curve); writes a "
                    "ccsynth topology file.",
    )
    pp.add_argument("-o", "--output", required=True, help="topology file to write (ccsynth JSON)")
    pp.add_argument("--sizes", metavar="LIST",
                    help="message sizes of the bandwidth probes, a range MIN:MAX or a list (default 64K,256K,1M,4M,16M; "
                         "with --quick 64K,1M)")
    pp.add_argument("--iters", type=count_arg(1, "MAX_BENCH_ITERATIONS"), metavar="N",
                    help="timed iterations per probe over all passes (default 120 small, 12 large)")
    pp.add_argument("--passes", type=count_arg(1, "MAX_PROFILE_PASSES"), metavar="N",
                    help="passes over all probes, each probe keeping its fastest (default 3; --quick 1)")
    pp.add_argument("--quick", action="store_true", help="fewer probes and iterations: seconds, for tests and a first look")
    pp.add_argument("--warm", action="store_true",
                    help="time large messages with warm caches, call after call on the same buffers (default: each "
                         "call starts with the caches holding other data, as a collective meets them)")
    pp.add_argument("--footprints", metavar="LIST",
                    help="footprints per rank (bytes a rank touches between two calls) at which the footprint probes "
                         "are timed, besides their own buffers alone, a range MIN:MAX (powers of 2) or a list "
                         "(default 2M:256M; with --quick 8M,64M)")
    pp.add_argument("--no-reference", action="store_true",
                    help="skip the reference collectives: no run curve (predictions of whole runs from the probes "
                         "alone)")
    pp.add_argument("--busy-ok", action="store_true",
                    help="profile even when the machine is busy (its load average above its cores; refused by "
                         "default): the profile's description then says so and records the load")
    pp.add_argument("--raw", metavar="FILE",
                    help="also write every probe's measured times here (JSON), for ccsynth topo refit")
    pr = tsub.add_parser(
        "refit", help="fit a profile again from the raw probe times ccsynth topo profile --raw wrote",
        description="Fit the topology of a profile again from its raw probe times (ccsynth topo profile --raw FILE), "
                    "with the current fit rules, without measuring: the same topology the profile wrote when the rules "
                    "are the same.")
    pr.add_argument("raw", help="a raw profile (ccsynth topo profile --raw)")
    pr.add_argument("-o", "--output", required=True, help="topology file to write (ccsynth JSON)")
    pr.add_argument("--footprints", metavar="LIST",
                    help="fit the footprint costs on the footprint probes at these footprints only (those at the "
                         "probes' own buffers always count): what a profile of fewer probes would have said")
    p.set_defaults(func=run)


def run(args) -> int:
    from ccsynth import topologies as T
    from ccsynth.formats.files import get_topology, list_topologies

    if args.topo_cmd == "profile":
        return _profile(args)
    if args.topo_cmd == "refit":
        return _refit(args)
    if args.topo_cmd == "list":
        rows = list_topologies()
        if args.json:
            print_json(json_doc("topo.list", {"topologies": [{"spec": s, "description": d} for s, d in rows]}))
        else:
            print_table(["topology", "description"], rows)
        return 0
    if args.topo_cmd == "export":
        check_writable(args.output, "topology", TopologyError)
    topo = get_topology(args.spec)
    if args.topo_cmd == "export":
        T.save_topology(topo, args.output)
        print(f"wrote {args.output}: {topo.name}, {topo.n_ranks} ranks")
        return 0
    if args.json:
        d = T.topology_to_dict(topo)
        print_json(json_doc("topo.show", {"name": topo.name, "n_ranks": topo.n_ranks, "n_nodes": topo.n_nodes,
                                          "topology": d}))
        return 0
    classes = topo.connection_classes()  # counted by formula: no pair is built
    print(f"{topo.name}: {topo.n_ranks} ranks on {topo.n_nodes} node(s), "
          f"{sum(c.count for c in classes)} directed connections")
    if topo.description:
        print(topo.description)
    extras = []
    if topo.overhead_scope != "connection":
        extras.append(f"overhead scope: {topo.overhead_scope}")
    if topo.local_bw is not None:
        extras.append(f"local copies/reductions {topo.local_bw:g} GB/s")
    if topo.local_overhead:
        extras.append(f"{topo.local_overhead:g} us per local copy/reduction")
    if topo.call_overhead:
        extras.append(f"{topo.call_overhead:g} us per call")
    if topo.eager_limit is not None and topo.rendezvous_alpha:
        extras.append(f"messages above {topo.eager_limit:g} B: {topo.rendezvous_alpha:g} us more latency")
    if not topo.async_progress:
        extras.append("no asynchronous progress (a message's bytes wait for both ranks to be idle)")
        if topo.receiver_copies:
            extras.append("the receiver's core copies a message's bytes (nothing else runs on that rank meanwhile)")
    if topo.round_cost is not None:
        extras.append("a round of k peers costs more: " + ", ".join(f"k={k} {c:.3g} us" for k, c in
                                                                  zip(topo.round_cost.peers, topo.round_cost.us)))
    if topo.communicator_overhead:
        extras.append(f"{topo.communicator_overhead:g} us more per call through ccsynth's communicator")
    for what, curve in (("message", topo.message_curve), ("local", topo.local_curve),
                        ("forwarded message (more)", topo.forward_curve)):
        if curve is not None:
            extras.append(f"{what} cost by size: " + ", ".join(f"{m:g} B x{f:.2f}" for m, f in zip(curve.sizes, curve.factors)))
    if topo.footprint_curve is not None:
        c = topo.footprint_curve
        extras.append("message cost by footprint (bytes a rank touches between two calls): "
                      + ", ".join(f"{format_size(int(m))} x{f:.2f}" for m, f in zip(c.sizes, c.factors)))
    if topo.cold_call is not None:
        extras.append(_cold_line(topo.cold_call))
    if topo.run_curve is not None:
        extras.append(_run_line(topo.run_curve))
    extras += [_reference_line(r) for r in topo.mpi_reference]
    if extras:
        print("; ".join(extras))
    if topo.dims:
        print("dimensions: " + ", ".join(f"{d.name} size {d.size} {d.bw:g} GB/s {d.alpha:g} us" for d in topo.dims))
    print_table(["via", "alpha (us)", "bw (GB/s)", "overhead (us)", "connections"],
                [(c.kind, c.alpha, c.bw, c.overhead, c.count) for c in classes])
    if topo.switches:
        print(f"switches: {len(topo.switches)} (" + ", ".join(f"{s.name}: {len(s.ranks)} ranks @ {s.bw:g} GB/s" for s in topo.switches[:6]) + (", ..." if len(topo.switches) > 6 else "") + ")")
    if topo.shared_ports:
        print(f"shared ports: {len(topo.shared_ports)} (" + ", ".join(f"{s.name} @ {s.bw:g} GB/s" for s in topo.shared_ports[:6]) + (", ..." if len(topo.shared_ports) > 6 else "") + ")")
    if topo.spines:
        print("spines: " + ", ".join(f"{s.name}: {len(s.leaves)} leaves, "
                                     + ("non-blocking" if s.uplink_bw is None else f"up-links {s.uplink_bw:g} GB/s per leaf")
                                     + f", {s.alpha:g} us" for s in topo.spines))
    if args.links:
        print_table(["src", "dst", "alpha (us)", "bw (GB/s)", "via"],
                    [(c.src, c.dst, c.alpha, c.bw, c.via) for c in topo.connections()])
    for s in topo.sources:
        print(f"source: {s}")
    return 0


# ------------------------------------------------------------------ profile
def _profile(args) -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    install_abort_handler(comm)
    try:
        # agreed on every rank, so that a bad argument stops them all instead of leaving some waiting
        options = agree(comm, lambda: _profile_options(args))
        agree(comm, lambda: check_writable(args.output, "topology", TopologyError) if rank == 0 else None)
        if args.raw:
            agree(comm, lambda: check_writable(args.raw, "raw profile", CCSynthError) if rank == 0 else None)
        state = agree(comm, lambda: _machine_before_profile(args.busy_ok))  # each node its own load
    except CCSynthError:
        if rank != 0:
            return 2
        raise
    display = Progress.for_args(args, rank)  # -q (anywhere on the command line): no progress lines

    def progress(k: int, total: int, what: str) -> None:
        display.say(f"[{k}/{total}] {what}")  # every probe: each takes seconds

    try:
        raw = measure_machine(comm, options, progress)
    except CCSynthError:
        if rank != 0:
            return 2
        raise
    if rank != 0:
        return 0
    raw = with_start_load(raw, state)  # in the raw file too: a refit gives the same topology
    if args.raw:
        from ccsynth.bench.profile_raw import save_raw

        save_raw(raw, args.raw)  # first: if the fit fails, the times are kept
    prof = fit_profile(raw)
    write_text(args.output, topology_to_json(prof.topology), what="topology", error=TopologyError)
    _summary(prof)
    if state.busy:
        print(f"warning: profiled on a busy machine ({state.describe()} when it started; --busy-ok): its figures "
              f"include the other work, and its description says so")
    if args.raw:
        print(f"wrote {args.raw}: every probe's times (ccsynth topo refit {args.raw} -o FILE fits them again)")
    print(f"wrote {args.output}: {prof.topology.name}, {prof.topology.n_ranks} ranks (measured in "
          f"{prof.seconds:.1f} s; {elapsed_text()} in all); "
          f"use it with ccsynth synth -t {args.output} and ccsynth bench ... --predict {args.output}")
    return 0


def _machine_before_profile(busy_ok: bool):
    """This rank's machine's load and cores (:mod:`ccsynth.bench.machine`); a busy machine is refused unless
    ``busy_ok``."""
    from ccsynth.bench.machine import busy_error, machine_state

    state = machine_state()
    if state.busy and not busy_ok:
        raise busy_error(state, "a profile")
    return state


def _refit(args) -> int:
    from ccsynth.bench.profile_raw import load_raw

    check_writable(args.output, "topology", TopologyError)
    raw = load_raw(args.raw)
    prof = fit_profile(raw, _footprint_list(args.footprints) if args.footprints else None)
    write_text(args.output, topology_to_json(prof.topology), what="topology", error=TopologyError)
    _summary(prof)
    print(f"wrote {args.output}: {prof.topology.name}, {prof.topology.n_ranks} ranks, fitted again from {args.raw} "
          f"({len(raw.probe_us)} probes measured {raw.when})")
    return 0


def _byte_list(flag: str, text: str) -> tuple[int, ...]:
    """The sizes of ``--sizes`` or ``--footprints``: each 1 byte to MAX_MESSAGE_BYTES (every rank allocates them)."""
    sizes = tuple(sorted(set(parse_sizes(text))))
    if not sizes or sizes[0] < 1:
        raise CCSynthError(f"{flag} {text!r}: sizes must be at least 1 byte")
    check_limit(f"{flag} size", sizes[-1], "MAX_MESSAGE_BYTES")
    return sizes


def _footprint_list(text: str) -> tuple[int, ...]:
    return _byte_list("--footprints", text)


def _profile_options(args) -> ProfileOptions:
    sizes = _byte_list("--sizes", args.sizes) if args.sizes is not None else None
    footprints = _footprint_list(args.footprints) if args.footprints is not None else None
    return ProfileOptions(sizes=sizes, iters=args.iters, quick=args.quick, passes=args.passes,
                          cold=not getattr(args, "warm", False), footprints=footprints,
                          calibrate=not getattr(args, "no_reference", False))


def _summary(prof) -> None:
    """The table at the end of a profile: pairs, shared ports, local rates, per-call cost."""
    topo = prof.topology
    print(topo.description)
    fit_of = {pair: f for f in prof.fits for pair in f.pattern.pairs}
    rows = []
    for link in topo.links:
        f = fit_of.get((link.src, link.dst))
        rows.append((link.src, link.dst, f.pattern.name if f else "", link.alpha, link.alpha + 2 * link.overhead,
                     link.overhead, link.bw, f"{100 * f.error:.0f}%" if f else ""))
    print_table(["src", "dst", "pattern", "alpha (us)", "latency (us)", "overhead (us)", "bw (GB/s)", "fit error"], rows)
    for p in topo.shared_ports:
        print(f"shared port {p.name}: {p.bw:.3g} GB/s for all traffic among ranks {list(p.srcs)} "
              f"(one pair alone: {prof.pair_bw.get(int(p.name[4:].split('.')[0]), 0):.3g} GB/s per direction)")
    if not topo.shared_ports:
        alone = ", ".join(f"node {k}: {v:.3g} GB/s" for k, v in sorted(prof.pair_bw.items()))
        print("shared ports: none" + (f" (one pair alone gets no more than all at once: {alone})" if alone else
                                      " (no node runs three ranks: nothing to compare)"))
    print("a message's bytes are copied by the receiving rank's core (receiver_copies: every rank has a core of "
          "its own)" if topo.receiver_copies else "a message's bytes overlap the receiver's other work (more ranks "
          "than cores: receiver_copies left out)")
    if prof.protocol.eager_limit is not None:
        print(f"protocol switch: messages above {format_size(int(prof.protocol.eager_limit))} bytes pay "
              f"{prof.protocol.rendezvous_alpha:.3g} us more latency (rendezvous)")
    else:
        print("protocol switch: none found (every size pays the same latency)")
    for what, curve in (("message", prof.topology.message_curve), ("local work", prof.topology.local_curve),
                        ("forwarded message, more", prof.topology.forward_curve)):
        if curve is not None:
            print(f"{what} cost by size (x the constant rate; PLogP g(m)): "
                  + ", ".join(f"{format_size(int(m))} {f:.2f}" for m, f in zip(curve.sizes, curve.factors)))
    rc = prof.topology.round_cost
    if rc is not None:
        print("a round costs more by the peers a rank waits on in it: "
              + ", ".join(f"{k} peer{'s' if k > 1 else ''} {c:.3g} us" for k, c in zip(rc.peers, rc.us)))
    if prof.communicator is not None:
        print(f"a call through ccsynth's communicator costs {prof.topology.communicator_overhead:.3g} us more than "
              "through the executor (" + ", ".join(f"{k} {prof.communicator.via_us[k]:.3g} against "
                                                  f"{prof.communicator.direct_us[k]:.3g} us"
                                                  for k in prof.communicator.via_us) + ")")
    fc = prof.topology.footprint_curve
    if fc is not None:
        print("message cost by footprint (bytes a rank touches between two calls; x the smallest): "
              + ", ".join(f"{format_size(int(m))} {f:.2f}" for m, f in zip(fc.sizes, fc.factors)))
    else:
        print("message cost by footprint: flat (no footprint probe cost 5% more than the smallest)")
    if prof.topology.cold_call is not None:
        print(_cold_line(prof.topology.cold_call))
    if prof.topology.run_curve is not None:
        print(_run_line(prof.topology.run_curve) + " (reference collectives: measured / predicted)")
    else:
        print("a whole run: as predicted (no reference collectives measured)")
    for ref in prof.topology.mpi_reference:
        print(_reference_line(ref) + " (ccsynth bench --predict compares MPI's rows with it: the machine's drift)")
    k = prof.kernels
    print(f"local work {k.local_bw:.3g} GB/s (kernels, every rank at once, {format_size(k.nbytes)} buffers: "
          f"receive-reduce-copy {k.fused:.3g}, sum {k.reduce:.3g}, copy {k.copy:.3g}) and {k.call_us:.3g} us per "
          f"kernel call; fixed cost per collective call {prof.call_overhead:.3g} us")
    print("latency = alpha + 2 x overhead: one small message alone; fit error: median |predicted / measured - 1| "
          "over the pattern's probes")


def _cold_line(cold) -> str:
    """The cold call cost (:mod:`ccsynth.topologies.coldcall`) in words."""
    return (f"a cold call costs more once (calls of {format_size(int(cold.working_set_bytes))} or more per rank; "
            "less in proportion), by footprint: " + ", ".join(f"{format_size(int(m))} {c:.3g} us"
                                                               for m, c in zip(cold.footprints, cold.us)))


def _run_line(curve) -> str:
    """The run curve (``Topology.run_curve``, :mod:`ccsynth.bench.calibration`) in words."""
    return ("a whole run costs, by its input bytes per rank, x the prediction: "
            + ", ".join(f"{format_size(int(m))} {f:.2f}" for m, f in zip(curve.sizes, curve.factors)))


def _reference_line(ref) -> str:
    """MPI's own times when profiled (``Topology.mpi_reference``, :mod:`ccsynth.topologies.reference`) in words."""
    return (f"MPI's own {ref.collective} when profiled, by input bytes per rank: "
            + ", ".join(f"{format_size(int(m))} {t:.3g} us" for m, t in zip(ref.sizes, ref.us)))
