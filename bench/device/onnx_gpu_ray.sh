#!/usr/bin/env bash
# Issue 31, item 4: ONNX Runtime CUDA jobs run by the Ray executor on the H200 (a local one-node Ray cluster).
# Before it, back to back: onnxruntime-gpu's parts into /tmp/bigwheel and assembled (bench/device/README:
# ../shared/device/big-wheel.sh), ray's two parts (.dev/raywheel/p0 into /tmp/raywheel). This last call carries
# .dev/raywheel/p1 (the second part, ray's dependencies, SHA256SUMS) and .whl (pydantic). Results land in $OUT.
#   bash bench/device/onnx_gpu_ray.sh SECONDS
set -u
budget=${1:-540}; start=$(date +%s); left() { echo $(( budget - ($(date +%s) - start) )); }
repo=$PWD; work=/tmp/ogr
{
  cp .dev/raywheel/p1/part.1 /tmp/raywheel/ && cd /tmp/raywheel && cat part.* > ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl \
    && sha256sum -c "$repo/.dev/raywheel/p1/SHA256SUMS" && cd "$repo"
  # into /tmp/site beside onnxruntime-gpu: ray, and of its dependencies only those the image lacks
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/raywheel/ray-*.whl .whl/*.whl
  for pair in click:click filelock:filelock jsonschema:jsonschema msgpack:msgpack packaging:packaging \
      google.protobuf:protobuf yaml:pyyaml requests:requests referencing:referencing rpds:rpds_py attr:attrs \
      jsonschema_specifications:jsonschema_specifications certifi:certifi idna:idna urllib3:urllib3 \
      charset_normalizer:charset_normalizer typing_extensions:typing_extensions; do
    python3 -c "import ${pair%%:*}" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile \
      --target /tmp/site .dev/raywheel/p1/deps/${pair#*:}-*.whl
  done
  PYTHONPATH=/tmp/site python3 -c "import ray, pydantic, typer; print('ray', ray.__version__, 'pydantic', pydantic.__version__)"
} > "$OUT/install.txt" 2>&1
export PYTHONPATH=/tmp/site:$repo PYTHONUNBUFFERED=1
py=python3
rm -rf $work; mkdir -p $work/models; cp recipes/onnx-gpu/make_models.py $work/
cat > $work/tuning.yaml <<'YAML'
schema_version: 1
measurement: {warmup: 10, iterations: 20, repeats: 3, timeout_s: 600}
targets: {gpu: {kind: gpu, name: "*NVIDIA*"}}
switch_groups: {fp32: "-prefer_nhwc=[0|1] -enable_cuda_graph=[0|1]"}
strategies: {full: {mode: full}}
tolerances: {tf32: {checks: [{metric: cos, threshold: 1.0e-4}]}}
execution: {executor: ray}
defaults: {backend: onnxruntime-cuda, targets: [gpu], switch_group: fp32, strategy: full, tolerance: tf32}
models:
  resnet50: {path: models/resnet50.onnx, shapes: {bs32: {image: [32, 3, 224, 224]}}}
  bert-base: {path: models/bert-base.onnx, shapes: {b8s128: {input_ids: [8, 128]}},
              inputs: {input_ids: {dtype: int64, low: 0, high: 30522}}}
YAML
{
  cd $work
  echo "== $(date -u +%FT%TZ) $(nvidia-smi -L | head -1)"
  for m in resnet50 bert-base; do timeout 90 $py make_models.py $m 2>&1 | grep -v Warning | tail -2; done
  echo "== validate"; timeout 60 $py -m trt_routes.cli.app validate 2>&1 | tail -5
  echo "== apply --executor ray (budget $(left) s)"
  timeout $(( $(left) - 60 )) $py -m trt_routes.cli.app apply 2>&1 | tail -40; echo "== apply exit ${PIPESTATUS[0]}"
  echo "== plan --check"; timeout 60 $py -m trt_routes.cli.app plan --check 2>&1 | tail -3; echo "== exit ${PIPESTATUS[0]}"
  echo "== status"; timeout 60 $py -m trt_routes.cli.app status 2>&1 | tail -6
  echo "== where each trial ran"
  timeout 60 $py - <<'PY'
import sqlite3, json
con = sqlite3.connect("caches/trials.sqlite")
for job, route, status, median, meta, sig in con.execute("SELECT job, route, status, median_ms, meta, signature FROM trials"):
    m = json.loads(meta or "{}")
    print(job, repr(route), status, median, "worker", m.get("worker"), "node", m.get("node"), "gpu", (m.get("gpu") or {}).get("name") if isinstance(m.get("gpu"), dict) else m.get("gpu_name"))
PY
  cd $repo
} > "$OUT/ray.txt" 2>&1
cp $work/tuning.lock "$OUT/" 2>/dev/null
tail -n 60 "$OUT/ray.txt"; tail -3 "$OUT/install.txt"
