"""The drop-in against the MPI it wraps (issue 29): ccsynth's communicator over MPI's own collective, per size.

For every rank count and collective it runs ``mpiexec -n N <python> -m ccsynth bench C -m SIZES
--algo mpi,default[,plan:FILE] --interleave --json FILE`` (every algorithm in turn within each
iteration, so load that comes and goes hits them alike) and prints, as Markdown, one table: a row per
size, a column per collective and rank count, each cell the median latency of ccsynth's communicator
over MPI's in the same run (below 1.00 is faster), then the largest ratio per column. The machine's
one-minute load average before and after every run is printed with the table: on a shared machine the
absolute times mean little, the ratios of one interleaved run still do.

Run::

    python -m ccsynth.bench.bench_mpi --ranks 2,4 --sizes 8,128,2K,32K,512K,8M,64M
    python -m ccsynth.bench.bench_mpi --ranks 2 --plans 'plan_{c}{n}.json'   # a tuned plan per collective

``--plans PATTERN`` adds a column ``plan:PATTERN`` (``{c}`` the collective, ``{n}`` the rank count),
e.g. the output of ``ccsynth tune``; ``--python`` times another installation (a baseline).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["COLLECTIVES", "run", "table", "main"]

#: the ``ccsynth bench`` names of the collectives the drop-in runs on schedules
COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "alltoall", "bcast")


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def run(n: int, coll: str, sizes: str, out: Path, *, python: str, iters: int, plan: str | None,
        log: list[str]) -> dict:
    """One interleaved ``ccsynth bench`` run; its JSON document (with the load before and after)."""
    algos = "mpi,default" + (f",plan:{plan}" if plan else "")
    js = out / f"{coll}{n}.json"
    mpiexec = Path(python).parent / "mpiexec"  # the launcher of that installation's MPI
    cmd = [str(mpiexec) if mpiexec.exists() else "mpiexec", "-n", str(n), python, "-m", "ccsynth", "bench", coll, "-m", sizes, "-i", str(iters),
           "-x", str(max(2, iters // 10)), "--algo", algos, "--interleave", "--json", str(js)]
    before = _load()
    log.append(" ".join(cmd))
    print("+ " + log[-1], file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    doc = json.loads(js.read_text())
    doc["load"] = (before, _load())
    return doc


def table(docs: dict[tuple[str, int], dict], column: str = "default") -> list[str]:
    """The Markdown table of ``column``'s median latency over MPI's, per size and (collective, ranks)."""
    keys = sorted(docs, key=lambda k: (COLLECTIVES.index(k[0]) if k[0] in COLLECTIVES else 99, k[1]))
    ratios = {k: {r["size_bytes"]: _ratio(r["median_ratio"], column) for r in docs[k]["comparison"]["rows"]}
              for k in keys}
    sizes = sorted({s for v in ratios.values() for s in v})
    head = ["size"] + [f"{c} {n}r" for c, n in keys]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in sizes:
        cells = [_sz(s)] + [_cell(ratios[k].get(s)) for k in keys]
        lines.append("| " + " | ".join(cells) + " |")
    worst = [max((v for v in ratios[k].values() if v is not None), default=None) for k in keys]
    lines.append("| **max** | " + " | ".join(f"**{_cell(w)}**" for w in worst) + " |")
    lines.append("| load | " + " | ".join("{}-{}".format(*docs[k]["load"]) for k in keys) + " |")
    return lines


def _ratio(ratios: dict, column: str):
    """The ratio of ``column`` (``plan``: of the ``plan:FILE`` algorithm) in one comparison row."""
    return next((v for k, v in ratios.items() if k == column or k.startswith(column + ":")), None)


def _cell(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def _sz(n: int) -> str:
    for unit, shift in (("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ccsynth.bench.bench_mpi", description=__doc__.split("\n")[0])
    p.add_argument("--ranks", default="2,4", help="rank counts, comma separated (default 2,4)")
    p.add_argument("--collectives", default=",".join(COLLECTIVES), help="ccsynth bench names, comma separated")
    p.add_argument("--sizes", default="8,128,2K,32K,512K,8M,64M", help="message sizes (ccsynth bench -m)")
    p.add_argument("--iters", type=int, default=40, help="timed iterations per size and algorithm (default 40)")
    p.add_argument("--plans", metavar="PATTERN", help="also time plan:PATTERN ({c} collective, {n} ranks)")
    p.add_argument("--python", default=sys.executable, help="the Python whose ccsynth runs (default this one)")
    p.add_argument("--out", default="bench-out/mpi", help="folder of the JSON files (default bench-out/mpi)")
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    log: list[str] = []
    docs = {}
    for n in (int(x) for x in a.ranks.split(",")):
        for c in a.collectives.split(","):
            plan = a.plans.format(c=c, n=n) if a.plans else None
            docs[(c, n)] = run(n, c, a.sizes, out, python=a.python, iters=a.iters, plan=plan, log=log)
    print("\n".join(table(docs)))
    if a.plans:
        print()
        print("\n".join(table(docs, "plan")))
    print("\ncommands:\n" + "\n".join(log))
    return 0


if __name__ == "__main__":
    sys.exit(main())
