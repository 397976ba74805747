#!/bin/bash
# two back-to-back runs each way (old: one interleaved bench pass of every algorithm; new: compare rounds), alternated
cd /work/wt/h39-plans && . .venv/bin/activate
E=bench/data/issue10_runE/r2
O=/tmp/h39s
export CCSYNTH_CACHE_BYTES=1073741824
for rep in 1 2; do
 for kind in allreduce allgather; do
  if [ $kind = allreduce ]; then B=ring,recursive_doubling,recursive_halving,direct,one_shot; else B=ring,recursive_doubling,direct; fi
  echo "[$(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)] old $kind #$rep"
  /usr/bin/time -f "%e s wall %U user %S sys" mpiexec -n 2 ccsynth bench $kind -m 8:16M -c --algo mpi,default,plan:$E/plan_${kind}2.json,$B --predict $E/machine2.json --interleave --json $O/old_${kind}_$rep.json > $O/old_${kind}_$rep.txt
  echo "[$(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)] new $kind #$rep"
  /usr/bin/time -f "%e s wall %U user %S sys" mpiexec -n 2 python -m ccsynth.bench.compare $E/plan_${kind}2.json -c $kind -m 8:16M --json $O/new_${kind}_$rep.json > $O/new_${kind}_$rep.txt
 done
done
echo "[$(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)] done"
