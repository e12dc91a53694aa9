#!/usr/bin/env bash
# Issue 30 on the H200 machine: bench/gpu_search.py, one model per call, after the back-to-back calls that bring
# onnxruntime-gpu over (../shared/device/big-wheel.sh split onnxruntime-gpu==1.31.1; carry .whl, .dev/wheel/pN,
# .dev/wheel/run, as for onnx_gpu_session.sh).
#   bash bench/device/gpu_search.sh MODEL [BUDGET]    its table in $OUT/MODEL.txt, its rows in $OUT/MODEL.json
set -u
model=$1; budget=${2:-12}
source bench/device/ort_gpu.sh
timeout 560 python3 bench/gpu_search.py --models "$model" --budget "$budget" --out "$OUT/$model.json" \
  > "$OUT/$model.txt" 2> "$OUT/$model-stderr.txt"
echo "== exit $?" >> "$OUT/$model.txt"
grep -v "No registered plugin EP" "$OUT/$model-stderr.txt" | tail -40 > "$OUT/$model-err.txt"; rm "$OUT/$model-stderr.txt"
cat "$OUT/$model.txt"; tail -5 "$OUT/$model-err.txt"
