#!/bin/bash
# issue 17 on the H200, final run, call 1 of 2: tune all five models of recipes/torch-gpu/modes with the
# recipe's current switch group, the GPU alone (gpu_vs_modes runs in call 2, on the same warm machine).
# As the channels-last run, the recipe's baseline is reduce-overhead alone and max_minutes 6 for this call.
# The work folder and the edited recipe are kept under build/ (git-ignored, kept on a warm device) for call 2.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
# env in the background (CPU only: nvidia-smi and imports), so the tuning's 585 s fit the call
( { nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv; nproc; date -u;
  python3 -c "import sys,torch,triton,timm,transformers,torchvision;print(sys.version.split()[0], torch.__version__, triton.__version__, timm.__version__, transformers.__version__, torchvision.__version__)"; } > $OUT/env.txt 2>&1 ) &
ENVP=$!
rm -rf /tmp/recipe && cp -r recipes/torch-gpu/modes /tmp/recipe
python3 - <<'PY' || exit 1
import yaml
p = "/tmp/recipe/tuning.yaml"
d = yaml.safe_load(open(p))
d["defaults"]["baseline"] = {"preset": "reduce-overhead"}
d["strategies"]["adaptive"]["max_minutes"] = 6
yaml.safe_dump(d, open(p, "w"), sort_keys=False)
PY
mkdir -p build && rm -rf build/tune17 build/recipe17 build/tune17.wall && cp -r /tmp/recipe build/recipe17
T0=$(date +%s)
timeout 585 python3 bench/gpu_speedup.py --recipe /tmp/recipe --work $PWD/build/tune17 --parallel 5 --deadline 560 --out $OUT/tune.json > $OUT/tune.log 2>&1
RC=$?
echo "tune exit $RC wall $(( $(date +%s)-T0 )) s" >> $OUT/tune.log
echo $(( $(date +%s)-T0 )) > build/tune17.wall
# shards run in their own process sessions: end any left (only processes working in this run's shard folders)
for d in /proc/[0-9]*; do
  case "$(readlink $d/cwd 2>/dev/null)" in $PWD/build/tune17/*) echo "left running: ${d#/proc/}" >> $OUT/tune.log; kill -KILL ${d#/proc/} 2>/dev/null;; esac
done
python3 - <<'PY' > $OUT/locked.json
import json, glob, yaml
out = {}
for lock in sorted(glob.glob("build/tune17/shard*/tuning.lock")):
    data = yaml.safe_load(open(lock)) or {}
    for job, e in (data.get("jobs") or {}).items():
        out[job] = {"route": e.get("route"), "timing": e.get("timing"), "selection": e.get("selection"),
                    "trials": e.get("trials")}
print(json.dumps(out, indent=1, default=str))
PY
(cd build/tune17 && tar czf $OUT/shards.tgz --exclude=caches --exclude=engines --exclude='*.pt2' .) 2>/dev/null
wait $ENVP
ls build/tune17/shard*/tuning.lock
tail -12 $OUT/tune.log
