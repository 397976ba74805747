"""``ccsynth topo list|show|export``: the topology catalog."""

from __future__ import annotations

from ccsynth.atomic import check_writable
from ccsynth.commands._common import add_json_arg, print_json, print_table
from ccsynth.errors import TopologyError

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
    p.set_defaults(func=run)


def run(args) -> int:
    from ccsynth import topologies as T
    from ccsynth.formats.files import get_topology, list_topologies

    if args.topo_cmd == "list":
        rows = list_topologies()
        if args.json:
            print_json([{"spec": s, "description": d} for s, d in rows])
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
        print_json(T.topology_to_dict(topo))
        return 0
    classes = topo.connection_classes()  # counted by formula: no pair is built
    print(f"{topo.name}: {topo.n_ranks} ranks on {topo.n_nodes} node(s), "
          f"{sum(c.count for c in classes)} directed connections")
    if topo.description:
        print(topo.description)
    if topo.dims:
        print("dimensions: " + ", ".join(f"{d.name} size {d.size} {d.bw:g} GB/s {d.alpha:g} us" for d in topo.dims))
    print_table(["via", "alpha (us)", "bw (GB/s)", "connections"], [(c.kind, c.alpha, c.bw, c.count) for c in classes])
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
