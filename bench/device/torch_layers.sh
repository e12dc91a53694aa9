#!/usr/bin/env bash
# Issue 32 on the H200: torch-inductor's layer profiles (torch.profiler, kernel device times) for a model the
# project did not write (torchvision's ResNet-50, float16, jit). Carry .whl (pydantic). Everything lands in $OUT.
#   bash bench/device/torch_layers.sh SECONDS [SWITCH_GROUP]   (default: "-freezing=[0|1] -channels_last=[0|1]")
set -u
budget=${1:-540}; group=${2:-"-freezing=[0|1] -channels_last=[0|1]"}; start=$(date +%s); left() { echo $(( budget - ($(date +%s) - start) )); }
repo=$PWD; work=/tmp/tl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$repo PYTHONUNBUFFERED=1
rm -rf $work; mkdir -p $work
cat > $work/tv.py <<'PY'
import torchvision


def resnet50(shapes):
    return torchvision.models.resnet50()
PY
cat > $work/tuning.yaml <<YAML
schema_version: 1
measurement: {warmup: 10, iterations: 30, repeats: 3, timeout_s: 600}
targets: {h200: {kind: gpu, name: "*H200*"}}
switch_groups: {g: "$group"}
strategies: {s: {mode: fast}}
tolerances: {fp16: {checks: [{metric: cos, threshold: 5.0e-4}]}}
defaults: {backend: torch-inductor, targets: [h200], switch_group: g, strategy: s, tolerance: fp16,
           settings: {dtype: float16}}
models:
  resnet50: {entry: "tv:resnet50", shapes: {bs16: {x: [16, 3, 224, 224]}}}
YAML
tr() { timeout "$1" python3 -m trt_routes.cli.app "${@:2}"; }
{
  cd $work
  echo "== $(date -u +%FT%TZ) $(nvidia-smi -L | head -1), $(python3 -c 'import torch; print("torch", torch.__version__)')"
  echo "== apply (budget $(left) s)"; tr $(( $(left) - 60 )) apply 2>&1 | tail -40; echo "== apply exit ${PIPESTATUS[0]}"
  echo "== explain --layers"; tr 60 explain resnet50/bs16/h200 --layers 2>&1 | tail -60
  tr 60 explain resnet50/bs16/h200 --layers --json > "$OUT/layers.json" 2> "$OUT/layers-err.txt"
  echo "== explain"; tr 30 explain resnet50/bs16/h200 2>&1 | head -40
  cd $repo
} > "$OUT/torch-layers.txt" 2>&1
cp $work/tuning.lock $work/tuning.yaml "$OUT/" 2>/dev/null; cp -r $work/caches/profiles "$OUT/profiles" 2>/dev/null
tail -n 70 "$OUT/torch-layers.txt"
