#!/bin/bash
# issue 17 on the H200, one call (the session had 12.6 device minutes left): tune the five models (shards side
# by side, baseline: the best of the named modes) while gpu_vs_modes compiles eager, the default and each
# named mode per model; each model is then timed side by side against its locked route. Logs under $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/.dev17:/tmp/site PYTHONUNBUFFERED=1
cd .dev17
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv; nproc; date -u;
  python3 -c "import sys,torch,triton,timm,transformers,torchvision;print(sys.version.split()[0], torch.__version__, triton.__version__, timm.__version__, transformers.__version__, torchvision.__version__)"; } > $OUT/env.txt 2>&1
T0=$(date +%s)
( timeout 470 python3 bench/gpu_speedup.py --recipe recipes/torch-gpu/modes --work /tmp/tune --parallel 5 --deadline 425 --out $OUT/tune.json > $OUT/tune.log 2>&1; echo "tune exit $? wall $(( $(date +%s)-T0 )) s" >> $OUT/tune.log ) &
TP=$!
TORCHINDUCTOR_COMPILE_THREADS=3 timeout 548 python3 bench/gpu_vs_modes.py --work /tmp/tune --wait-lock 455 --budget 540 --rounds 12 --iters 20 --out $OUT/modes.json > $OUT/modes.log 2>&1
echo "modes exit $? at $(( $(date +%s)-T0 )) s" >> $OUT/modes.log
wait $TP
(cd /tmp/tune && tar czf $OUT/shards.tgz --exclude=caches --exclude='*.pt2' .) 2>/dev/null
tail -12 $OUT/tune.log; tail -10 $OUT/modes.log
