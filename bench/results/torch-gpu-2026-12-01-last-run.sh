#!/bin/bash
# issue 17 on the H200, one call (the two-call final run lost its machine between calls): tune all five models of
# recipes/torch-gpu/modes (current switch group; baseline reduce-overhead alone and max_minutes 5 for this call, as
# in the channels-last runs) while gpu_vs_modes compiles eager, the default and reduce-overhead per model; each
# model is then timed side by side against its locked engine, loaded as trt-routes loads it. The max-autotune modes
# are skipped (--skip-modes): their autotuning would share the GPU with the tuning's confirmations (the seventh
# run), and in every earlier run they were slower than reduce-overhead except BERT (1.3%). Logs under $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
( { nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv; nproc; date -u;
  python3 -c "import sys,torch,triton,timm,transformers,torchvision;print(sys.version.split()[0], torch.__version__, triton.__version__, timm.__version__, transformers.__version__, torchvision.__version__)"; } > $OUT/env.txt 2>&1 ) &
rm -rf /tmp/recipe && cp -r recipes/torch-gpu/modes /tmp/recipe
python3 - <<'PY' || exit 1
import yaml
p = "/tmp/recipe/tuning.yaml"
d = yaml.safe_load(open(p))
d["defaults"]["baseline"] = {"preset": "reduce-overhead"}
d["strategies"]["adaptive"]["max_minutes"] = 5
yaml.safe_dump(d, open(p, "w"), sort_keys=False)
PY
T0=$(date +%s)
( timeout 460 python3 bench/gpu_speedup.py --recipe /tmp/recipe --work /tmp/tune --parallel 5 --deadline 440 --out $OUT/tune.json > $OUT/tune.log 2>&1; echo "tune exit $? wall $(( $(date +%s)-T0 )) s" >> $OUT/tune.log ) &
TP=$!
TORCHINDUCTOR_COMPILE_THREADS=3 timeout 580 python3 bench/gpu_vs_modes.py --recipe /tmp/recipe --work /tmp/tune --skip-modes max-autotune max-autotune-no-cudagraphs --wait-lock 465 --budget 575 --rounds 10 --iters 20 --out $OUT/modes.json > $OUT/modes.log 2>&1
echo "modes exit $? at $(( $(date +%s)-T0 )) s" >> $OUT/modes.log
wait $TP
python3 - <<'PY' > $OUT/locked.json
import json, glob, yaml
out = {}
for lock in sorted(glob.glob("/tmp/tune/shard*/tuning.lock")):
    data = yaml.safe_load(open(lock)) or {}
    for job, e in (data.get("jobs") or {}).items():
        out[job] = {"route": e.get("route"), "timing": e.get("timing"), "selection": e.get("selection"),
                    "trials": e.get("trials")}
print(json.dumps(out, indent=1, default=str))
PY
(cd /tmp/tune && tar czf $OUT/shards.tgz --exclude=caches --exclude=engines --exclude='*.pt2' .) 2>/dev/null
tail -8 $OUT/tune.log; tail -12 $OUT/modes.log
