#!/bin/bash
# issue 17 on the H200 (seventh run): ResNet-50 alone, with the model knob -channels_last=[0|1] and coordinate
# descent in all directions pinned (recipes/torch-gpu/modes, after bench/torch_knob_probe.py found both). For this
# one call the recipe's baseline is reduce-overhead alone and max_minutes 6: the max-autotune preset's build (about
# 330 s for ResNet-50) would spend the job's budget before the search built anything. The benchmark still compiles
# and times every named mode itself (max-autotune included), and the ratio is to the fastest of them.
# The modes compile while trt-routes tunes; the timing waits for the lock and holds the GPU alone.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv; nproc; date -u;
  python3 -c "import sys,torch,triton,timm,transformers,torchvision;print(sys.version.split()[0], torch.__version__, triton.__version__, timm.__version__, transformers.__version__, torchvision.__version__)"; } > $OUT/env.txt 2>&1
rm -rf /tmp/recipe && cp -r recipes/torch-gpu/modes /tmp/recipe
python3 - <<'PY'
import yaml
p = "/tmp/recipe/tuning.yaml"
d = yaml.safe_load(open(p))
d["defaults"]["baseline"] = {"preset": "reduce-overhead"}
d["strategies"]["adaptive"]["max_minutes"] = 6
yaml.safe_dump(d, open(p, "w"), sort_keys=False)
PY
T0=$(date +%s)
timeout 575 python3 bench/gpu_vs_modes.py --recipe /tmp/recipe --work /tmp/tune --models resnet50 --wait-lock 500 --budget 565 --rounds 12 --iters 20 --out $OUT/modes.json > $OUT/modes.log 2>&1 &
MODES=$!
timeout 480 python3 bench/gpu_speedup.py --recipe /tmp/recipe --work /tmp/tune --models resnet50 --parallel 1 --deadline 465 --out $OUT/tune.json > $OUT/tune.log 2>&1
echo "tune exit $? wall $(( $(date +%s)-T0 )) s" >> $OUT/tune.log
wait $MODES
echo "modes exit $? at $(( $(date +%s)-T0 )) s" >> $OUT/modes.log
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
