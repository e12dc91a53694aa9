#!/bin/bash
# issue 17 on the H200, final run, call 2 of 2 (same warm machine as call 1): every locked route of
# build/tune17 against torch.compile's named modes, with bench/gpu_vs_modes.py (tuning done: no --wait-lock).
n=$(ls build/tune17/shard*/tuning.lock 2>/dev/null | wc -l)
if [ "$n" -eq 0 ]; then echo "no build/tune17/shard*/tuning.lock: the machine was recycled, stopping" | tee $OUT/modes.log; exit 3; fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
{ echo "locks: $n"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,memory.used --format=csv; date -u; } > $OUT/env2.txt 2>&1
W=$(cat build/tune17.wall 2>/dev/null)
T0=$(date +%s)
TORCHINDUCTOR_COMPILE_THREADS=3 timeout 585 python3 bench/gpu_vs_modes.py --recipe $PWD/build/recipe17 --work $PWD/build/tune17 --budget 575 --rounds 12 --iters 20 ${W:+--tune-wall-s $W} --out $OUT/modes.json > $OUT/modes.log 2>&1
echo "modes exit $? at $(( $(date +%s)-T0 )) s" >> $OUT/modes.log
tail -10 $OUT/modes.log
