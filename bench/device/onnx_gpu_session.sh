#!/usr/bin/env bash
# Issue 31 on the H200 machine, after the back-to-back calls that bring onnxruntime-gpu over
# (../shared/device/big-wheel.sh split onnxruntime-gpu==1.31.1; carry .whl, .dev/wheel/pN, .dev/wheel/run).
#   bash bench/device/onnx_gpu_session.sh apply SECONDS [CACHE_DIR]   doctor, the CUDA provider's option list,
#        the GPU tests, the recipe's models exported by torchvision/timm/transformers, `trt-routes apply` on
#        recipes/onnx-gpu in /tmp/og (continuing from CACHE_DIR's trials.sqlite), plan --check, lock show, explain
#   bash bench/device/onnx_gpu_session.sh bench SECONDS [TORCH_MODES]  (the next call, back to back)
#        bench/onnx_gpu.py on /tmp/og, torch.compile's TORCH_MODES for reference
# Everything lands in $OUT.
set -u
stage=$1; budget=${2:-540}; arg=${3:-}
start=$(date +%s); left() { echo $(( budget - ($(date +%s) - start) )); }
repo=$PWD; work=/tmp/og
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
# the image's own onnxruntime (CPU) imports too: test for the GPU build's provider library itself
[ -f /tmp/site/onnxruntime/capi/libonnxruntime_providers_cuda.so ] || bash .dev/wheel/run/assemble.sh || exit 1
export PYTHONPATH=/tmp/site:$repo PYTHONUNBUFFERED=1
if [ "$stage" = bench ]; then
  timeout $(( $(left) - 10 )) python3 bench/onnx_gpu.py --project $work --rounds 7 --torch-modes "$arg" \
    --out "$OUT/onnx_gpu.json" > "$OUT/bench.txt" 2> "$OUT/bench-stderr.txt"
  echo "== bench exit $? at $(left) s left" >> "$OUT/bench.txt"; grep -v "No registered plugin EP" "$OUT/bench-stderr.txt" | tail -20 > "$OUT/bench-err.txt"; rm "$OUT/bench-stderr.txt"
  cat "$OUT/bench.txt"; exit 0
fi
tr() { python3 -m trt_routes.cli.app "$@"; }
{
  echo "== $(date -u +%FT%TZ) $(nproc) cores, $(python3 --version), $(nvidia-smi -L | head -1)"
  python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.__file__); print(o.get_available_providers())"
  tr doctor
  python3 -m trt_routes.backends.onnxruntime_cuda
} > "$OUT/env.txt" 2>&1
timeout 90 python3 -m pytest -q -p no:cacheprovider -o addopts="" -m gpu -c pyproject.toml \
  tests/backends/test_backend_onnxruntime_cuda.py > "$OUT/gpu-tests.txt" 2>&1; echo "== pytest exit $?" >> "$OUT/gpu-tests.txt"
rm -rf $work; cp -r recipes/onnx-gpu $work
[ -n "$arg" ] && mkdir -p $work/caches && cp "$arg"/trials.sqlite $work/caches/
( cd $work && for m in resnet50 efficientnet-b0 convnext-t vit-b16 bert-base; do timeout 60 python3 make_models.py $m; done ) 2>&1 | grep -v Warning > "$OUT/export.txt"
{
  cd $work
  echo "== plan"; timeout 60 python3 -m trt_routes.cli.app plan 2>&1 | tail -40
  echo "== apply (budget $(left) s)"; timeout $(( $(left) - 45 )) python3 -m trt_routes.cli.app apply 2>&1 | tail -80
  echo "== apply exit ${PIPESTATUS[0]}"
  timeout 20 python3 -m trt_routes.cli.app plan --check 2>&1 | tail -3; echo "== plan --check exit ${PIPESTATUS[0]}"
  timeout 10 python3 -m trt_routes.cli.app lock show bert-base/b8s128/gpu 2>&1 | tail -30
  timeout 10 python3 -m trt_routes.cli.app explain efficientnet-b0/bs32/gpu 2>&1 | tail -30
  cd $repo
} > "$OUT/apply.txt" 2>&1
cp $work/tuning.lock "$OUT/" 2>/dev/null; mkdir -p "$OUT/caches"; cp $work/caches/*.sqlite "$OUT/caches/" 2>/dev/null
tail -n 25 "$OUT/apply.txt"
