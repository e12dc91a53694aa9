#!/bin/bash
# issue 17, call 2 of 2: the tuning continues (same shards, --resume) while gpu_vs_modes compiles eager, the
# default and each named mode per model; each model is then timed side by side against its locked route.
[ -d /tmp/site/pydantic ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/.dev17:/tmp/site PYTHONUNBUFFERED=1
cd .dev17
if [ -d /tmp/tune/shard0 ]; then echo "warm: /tmp/tune kept from call 1" > $OUT/call2.txt
else tar xzf tune1.tgz -C /tmp && echo "cold: /tmp/tune restored from tune1.tgz (no inductor cache)" > $OUT/call2.txt; fi
T0=$(date +%s)
( timeout 470 python3 bench/gpu_speedup.py --recipe recipes/torch-gpu/modes --work /tmp/tune --parallel 5 --resume --deadline 420 --out $OUT/tune2.json > $OUT/tune2.log 2>&1; echo "tune2 exit $? wall $(( $(date +%s)-T0 )) s" >> $OUT/tune2.log ) &
TP=$!
TORCHINDUCTOR_COMPILE_THREADS=3 timeout 575 python3 bench/gpu_vs_modes.py --work /tmp/tune --wait-lock 480 --rounds 15 --iters 20 --out $OUT/modes.json > $OUT/modes.log 2>&1
echo "modes exit $? at $(( $(date +%s)-T0 )) s" >> $OUT/modes.log
wait $TP
(cd /tmp/tune && tar czf $OUT/shards.tgz --exclude=caches --exclude='*.pt2' .) 2>/dev/null
tail -15 $OUT/tune2.log; tail -12 $OUT/modes.log; cat $OUT/call2.txt
