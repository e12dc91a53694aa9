#!/bin/bash
# issue 17 on the H200 (fifth run): the two CNNs that the fourth run left without a route (its deadline cut them), and
# BERT again, three shards side by side instead of five; gpu_vs_modes loads the locked engines as trt-routes does.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv; nproc; date -u;
  python3 -c "import sys,torch,triton,timm,transformers,torchvision;print(sys.version.split()[0], torch.__version__, triton.__version__, timm.__version__, transformers.__version__, torchvision.__version__)"; } > $OUT/env.txt 2>&1
T0=$(date +%s)
( timeout 470 python3 bench/gpu_speedup.py --recipe recipes/torch-gpu/modes --work /tmp/tune --models convnext-tiny resnet50 bert-base --parallel 3 --deadline 430 --out $OUT/tune.json > $OUT/tune.log 2>&1; echo "tune exit $? wall $(( $(date +%s)-T0 )) s" >> $OUT/tune.log ) &
TP=$!
TORCHINDUCTOR_COMPILE_THREADS=3 timeout 575 python3 bench/gpu_vs_modes.py --work /tmp/tune --models convnext-tiny resnet50 bert-base --wait-lock 460 --budget 570 --rounds 12 --iters 20 --out $OUT/modes.json > $OUT/modes.log 2>&1
echo "modes exit $? at $(( $(date +%s)-T0 )) s" >> $OUT/modes.log
wait $TP
python3 - <<'PY' > $OUT/locked.json
import json, glob, os, yaml
out = {}
for lock in sorted(glob.glob("/tmp/tune/shard*/tuning.lock")):
    data = yaml.safe_load(open(lock)) or {}
    for job, e in (data.get("jobs") or {}).items():
        eng = (e.get("engine") or {}).get("path")
        rec = {}
        if eng and os.path.isfile(os.path.join(os.path.dirname(lock), eng)):
            r = json.load(open(os.path.join(os.path.dirname(lock), eng)))
            cc = r.get("compile_cache") or {}
            rec = {k: v for k, v in cc.items() if k not in ("data", "data_base64")}
        out[job] = {"route": e.get("route"), "timing": e.get("timing"), "selection": e.get("selection"),
                    "trials": e.get("trials"), "compile_cache": rec}
print(json.dumps(out, indent=1, default=str))
PY
(cd /tmp/tune && tar czf $OUT/shards.tgz --exclude=caches --exclude=engines --exclude='*.pt2' .) 2>/dev/null
tail -12 $OUT/tune.log; tail -10 $OUT/modes.log
