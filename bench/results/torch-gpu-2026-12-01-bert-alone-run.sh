#!/bin/bash
# issue 17 on the H200 (sixth run): BERT alone and in sequence, nothing else on the machine: trt-routes tunes it
# (one shard), then gpu_vs_modes compiles eager, the default and each named mode and loads the locked engine,
# then times them side by side. The shared runs timed models while other models compiled; this one does not.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv; nproc; date -u;
  python3 -c "import sys,torch,triton,timm,transformers,torchvision;print(sys.version.split()[0], torch.__version__, triton.__version__, timm.__version__, transformers.__version__, torchvision.__version__)"; } > $OUT/env.txt 2>&1
T0=$(date +%s)
timeout 300 python3 bench/gpu_speedup.py --recipe recipes/torch-gpu/modes --work /tmp/tune --models bert-base --parallel 1 --deadline 285 --out $OUT/tune.json > $OUT/tune.log 2>&1
echo "tune exit $? wall $(( $(date +%s)-T0 )) s" >> $OUT/tune.log
LEFT=$(( 560 - ($(date +%s)-T0) ))
timeout $(( LEFT + 10 )) python3 bench/gpu_vs_modes.py --work /tmp/tune --models bert-base --wait-lock 5 --budget $LEFT --rounds 15 --iters 20 --out $OUT/modes.json > $OUT/modes.log 2>&1
echo "modes exit $? at $(( $(date +%s)-T0 )) s (budget $LEFT s)" >> $OUT/modes.log
python3 - <<'PY' > $OUT/locked.json
import json, glob, os, yaml
out = {}
for lock in sorted(glob.glob("/tmp/tune/shard*/tuning.lock")):
    data = yaml.safe_load(open(lock)) or {}
    for job, e in (data.get("jobs") or {}).items():
        out[job] = {"route": e.get("route"), "timing": e.get("timing"), "selection": e.get("selection"),
                    "trials": e.get("trials")}
print(json.dumps(out, indent=1, default=str))
PY
(cd /tmp/tune && tar czf $OUT/shards.tgz --exclude=caches --exclude=engines --exclude='*.pt2' .) 2>/dev/null
tail -8 $OUT/tune.log; tail -6 $OUT/modes.log
