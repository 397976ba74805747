#!/bin/bash
cd /work/main && . .venv/bin/activate
D=/tmp/b11b
run() {  # name topology collectives sizes
  echo "$(date -u +%H:%M:%S) start $1 load $(cut -d' ' -f1-3 /proc/loadavg)" >> $D/progress
  python -m ccsynth.bench.bench_synth --suite trees --topologies $2 --collectives $3 --sizes $4 --json $D/$1.json > $D/$1.md 2> $D/$1.err
  echo "$(date -u +%H:%M:%S) done $1 rc=$? load $(cut -d' ' -f1-3 /proc/loadavg)" >> $D/progress
}
run small star5,two_clusters18 allgather,reduce_scatter 64M,1G
run rs_a16 dgx_a100x16 reduce_scatter 64M,1G
run rs_ft fat_tree:16x8:4:2 reduce_scatter 64M,1G
run rs_h32 dgx_h100x32 reduce_scatter 64M,1G
run rs_a32 dgx_a100x32 reduce_scatter 64M,1G
run a128 dgx_a100x128 allgather,reduce_scatter 1G
run ag_a16 dgx_a100x16 allgather 64M,1G
run ag_ft fat_tree:16x8:4:2 allgather 64M,1G
run ag_h32 dgx_h100x32 allgather 64M,1G
run ag_a32 dgx_a100x32 allgather 64M,1G
run ar_small star5,two_clusters18 allreduce 64M,1G
echo "$(date -u +%H:%M:%S) all done" >> $D/progress
