#!/usr/bin/env bash
# bench/gpu_routes.py on the GPU machine: named routes of one model timed side by side, after the back-to-back
# calls that bring onnxruntime-gpu over (as for gpu_search.sh).
#   bash bench/device/gpu_routes.sh MODEL 'LABEL=ROUTE' ...    its table in $OUT/MODEL-routes.txt, rows in .json
set -u
model=$1; shift
source bench/device/ort_gpu.sh
routes=(); for r in "$@"; do routes+=(--route "$r"); done
timeout 560 python3 bench/gpu_routes.py --model "$model" --rounds 12 "${routes[@]}" --out "$OUT/$model-routes.json" \
  > "$OUT/$model-routes.txt" 2> "$OUT/$model-routes-stderr.txt"
echo "== exit $?" >> "$OUT/$model-routes.txt"
grep -v "No registered plugin EP" "$OUT/$model-routes-stderr.txt" | tail -40 > "$OUT/$model-routes-err.txt"
rm "$OUT/$model-routes-stderr.txt"; cat "$OUT/$model-routes.txt"; tail -5 "$OUT/$model-routes-err.txt"
