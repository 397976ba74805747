#!/bin/bash
# h49-probes: refit a bench_predict run's raw 2-rank profile (DIR/raw2.json) on subsets of its footprint probes and
# re-predict the run's measured rows with each (bench/RESULTS.md, issue 10, h49-probes).
# usage (repository root, its venv active, PYTHONPATH=$PWD): bench/data/issue10_h49/variants.sh DIR [OUT]
set -e
D=$1
O=${2:-$(mktemp -d)}
python -m ccsynth -q topo refit $D/raw2.json -o $O/v_ladder.json > /dev/null
cmp $O/v_ladder.json $D/machine2.json && echo "refit == profile's own file"
python -m ccsynth -q topo refit $D/raw2.json -o $O/v_two.json --footprints 64M > /dev/null
python -m ccsynth -q topo refit $D/raw2.json -o $O/v_old.json --footprints 4M,8M,16M,32M,64M > /dev/null
for v in two old ladder; do
  echo "== $v"; python -c "
import json; d=json.load(open('$O/v_$v.json')); c=d.get('footprint_curve'); k=d.get('cold_call'); m=d.get('message_curve')
print('footprint', None if not c else [(int(s)>>20, round(f,2)) for s,f in zip(c['sizes_bytes'],c['factors'])])
print('cold', None if not k else [(int(s)>>20, round(f,1)) for s,f in zip(k['footprints_bytes'],k['us'])])
print('message', [(int(s)>>10, round(f,2)) for s,f in zip(m['sizes_bytes'],m['factors'])])"
  python -m ccsynth.bench.bench_predict --repredict $D --topology $O/v_$v.json | sed -n '/^| sizes/,/^$/p' | head -12
done
