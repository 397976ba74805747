"""ccsynth.bench: OMB-style microbenchmarks (``ccsynth bench NAME`` under mpiexec).

* :mod:`ccsynth.bench.omb` -- the registry of benchmarks (latency, bw,
  allreduce, allgather, reduce_scatter, alltoall, bcast, reduce, barrier)
  and the one shared timing loop;
* :mod:`ccsynth.bench.algos` -- what ``--algo`` names (mpi, a baseline
  schedule, the default plan, ``plan:FILE``);
* :mod:`ccsynth.bench.validate` -- exact inputs and NumPy references for ``-c``;
* :mod:`ccsynth.bench.report` -- OMB tables, nccl-tests columns, comparison, JSON;
* :mod:`ccsynth.bench.plot` -- ``--plot`` (matplotlib).

Results and the commands that produced them: docs/results.md.
"""

__all__: list[str] = []
