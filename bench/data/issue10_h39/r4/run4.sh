#!/bin/bash
# 4 ranks (2x oversubscribed, loaded): the plans synthesized with the new default margin on run E's 4-rank profile,
# against the default plan in rounds; the allgather also in one interleaved pass (the old way), twice each
cd /work/wt/h39-plans && . .venv/bin/activate
O=/tmp/h39f
export CCSYNTH_CACHE_BYTES=1073741824
for rep in 1 2; do
  echo "[$(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)] old allgather 4r #$rep"
  /usr/bin/time -f "%e s wall %U user %S sys" mpiexec -n 4 ccsynth bench allgather -m 8:16M -c --algo mpi,default,plan:$O/plan_allgather4.json,ring,recursive_doubling,direct --interleave --json $O/old_allgather_$rep.json > /dev/null 2>$O/old_allgather_$rep.err
  tail -1 $O/old_allgather_$rep.err
  echo "[$(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)] new allgather 4r #$rep"
  /usr/bin/time -f "%e s wall %U user %S sys" mpiexec -n 4 python -m ccsynth.bench.compare $O/plan_allgather4.json -c allgather -m 8:16M --json $O/new_allgather_$rep.json > $O/new_allgather_$rep.txt
done
echo "[$(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)] new allreduce 4r (the plan runs the default's algorithm everywhere)"
/usr/bin/time -f "%e s wall %U user %S sys" mpiexec -n 4 python -m ccsynth.bench.compare $O/plan_allreduce4.json -c allreduce -m 8:16M --json $O/new_allreduce_1.json > $O/new_allreduce_1.txt
echo "[$(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)] done"
