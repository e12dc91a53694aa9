#!/usr/bin/env bash
# Issue 31 on the H200 machine: the last of the back-to-back calls that bring onnxruntime-gpu over
# (../shared/device/big-wheel.sh split onnxruntime-gpu==1.31.1; carry .whl, .dev/wheel/pN, .dev/wheel/run).
#   bash bench/device/onnx_gpu_session.sh SECONDS [CACHE_DIR]
# Installs the wheels into /tmp/site, then within SECONDS: doctor and the CUDA provider's own option list,
# the GPU tests, the recipe's five models exported by torchvision/timm/transformers, `trt-routes apply` on
# recipes/onnx-gpu (continuing from CACHE_DIR's cache when given), `plan --check`, `lock show`, and
# bench/onnx_gpu.py. Everything lands in $OUT.
set -u
budget=${1:-540}; cache_in=${2:-}
start=$(date +%s); left() { echo $(( budget - ($(date +%s) - start) )); }
repo=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
[ -d /tmp/site/onnxruntime/capi ] && python3 -c "import sys; sys.path.insert(0,'/tmp/site'); import onnxruntime" 2>/dev/null \
  || bash .dev/wheel/run/assemble.sh
export PYTHONPATH=/tmp/site:$repo PYTHONUNBUFFERED=1
tr() { python3 -m trt_routes.cli.app "$@"; }
{
  echo "== $(date -u +%FT%TZ) $(nproc) cores, $(python3 --version), $(nvidia-smi -L | head -1)"
  python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.__file__); print(o.get_available_providers())"
  tr doctor
  python3 -m trt_routes.backends.onnxruntime_cuda
} > "$OUT/env.txt" 2>&1
timeout $(( $(left) / 4 )) python3 -m pytest -q -p no:cacheprovider -o addopts="" -m gpu -c pyproject.toml \
  tests/backends/test_backend_onnxruntime_cuda.py > "$OUT/gpu-tests.txt" 2>&1; echo "== pytest exit $?" >> "$OUT/gpu-tests.txt"
work=/tmp/og; rm -rf $work; cp -r recipes/onnx-gpu $work
[ -n "$cache_in" ] && [ -d "$cache_in" ] && cp -r "$cache_in" $work/caches
( cd $work && for m in resnet50 efficientnet-b0 convnext-t vit-b16 bert-base; do timeout 60 python3 make_models.py $m; done ) > "$OUT/export.txt" 2>&1
python3 - $work >> "$OUT/export.txt" 2>&1 <<'PY'
import pathlib, sys, yaml  # a model that did not export leaves the manifest (said here), the rest still run
path = pathlib.Path(sys.argv[1]) / "tuning.yaml"; data = yaml.safe_load(path.read_text())
gone = [m for m, spec in data["models"].items() if not (path.parent / spec["path"]).exists()]
for m in gone: del data["models"][m]
path.write_text(yaml.safe_dump(data, sort_keys=False)); print("left out (no model file):", gone or "none")
PY
{
  cd $work
  echo "== plan"; timeout 60 python3 -m trt_routes.cli.app plan 2>&1 | tail -30
  echo "== apply (budget $(left) s)"; timeout $(( $(left) - 150 )) python3 -m trt_routes.cli.app apply 2>&1 | tail -60
  echo "== apply exit ${PIPESTATUS[0]}"
  timeout 60 python3 -m trt_routes.cli.app plan --check 2>&1 | tail -5; echo "== plan --check exit ${PIPESTATUS[0]}"
  timeout 30 python3 -m trt_routes.cli.app lock show resnet50/bs32/gpu 2>&1 | tail -40
  timeout 30 python3 -m trt_routes.cli.app explain resnet50/bs32/gpu 2>&1 | tail -40
  cd $repo
} > "$OUT/apply.txt" 2>&1
cp $work/tuning.lock "$OUT/" 2>/dev/null; mkdir -p "$OUT/caches"; cp $work/caches/*.sqlite "$OUT/caches/" 2>/dev/null
[ "$(left)" -gt 60 ] && timeout $(( $(left) - 15 )) python3 bench/onnx_gpu.py --project $work --rounds 5 \
  --torch-modes "${TORCH_MODES:-}" --out "$OUT/onnx_gpu.json" > "$OUT/bench.txt" 2>&1
echo "== done at $(left) s left" >> "$OUT/bench.txt"
tail -5 "$OUT"/*.txt
