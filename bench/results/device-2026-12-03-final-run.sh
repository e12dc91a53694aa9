#!/usr/bin/env bash
# The final code on the H200 machine (16 cores, Python 3.12, torch 2.11 CUDA 13): a torch-inductor GPU
# test (jit, CUDA graphs), then a fresh apply, a no-op apply and plan --check on models exported by timm and transformers
# with torch.onnx.export (ONNX Runtime on the machine's CPU). One device call; results under $OUT.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
cd "$(mktemp -d)" || exit 1
{
  echo "== $(date -u +%FT%TZ) $(nproc) cores, $(python3 --version), $(nvidia-smi -L | head -1)"
  timeout 55 python3 -m pytest -q -p no:cacheprovider -o addopts="" -m gpu -k jit_with_cuda_graphs -c "$OLDPWD/pyproject.toml" \
    --rootdir "$OLDPWD" "$OLDPWD/tests/backends/test_backend_torch.py" 2>&1 | tail -15
  echo "== pytest exit ${PIPESTATUS[0]}"
} > "$OUT/gpu-tests.txt" 2>&1
mkdir -p models
timeout 30 python3 - <<'PY' > "$OUT/export.txt" 2>&1
import timm, torch, transformers
torch.manual_seed(0)
m = timm.create_model("resnet18", pretrained=False).eval()
torch.onnx.export(m, (torch.randn(1, 3, 224, 224),), "models/resnet18.onnx", input_names=["x"],
                  output_names=["y"], dynamic_axes={"x": {0: "b"}, "y": {0: "b"}}, dynamo=False)
cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=256, num_attention_heads=4, intermediate_size=1024)
bert = transformers.BertModel(cfg).eval()
ids = torch.randint(0, cfg.vocab_size, (2, 64))
torch.onnx.export(bert, (ids,), "models/bert.onnx", input_names=["input_ids"], output_names=["h", "pooled"],
                  dynamic_axes={"input_ids": {0: "b", 1: "s"}}, dynamo=False)
print("exported", torch.__version__, timm.__version__, transformers.__version__)
PY
cat > tuning.yaml <<'YAML'
schema_version: 1
measurement: {warmup: 3, iterations: 10, repeats: 3, timeout_s: 120}
targets: {cpu: {kind: cpu}}
switch_groups:
  g: |
    -graph_optimization_level=[basic|all]
    -intra_op_num_threads=[4|8]
    -disable_prepacking=[0|1]
strategies: {s: {mode: adaptive, max_builds: 6, confirm: {candidates: 2, rounds: 6}}}
tolerances: {t: {checks: [{metric: cos, threshold: 1.0e-4}]}}
defaults: {backend: onnxruntime, targets: [cpu], switch_group: g, strategy: s, tolerance: t}
models:
  resnet18: {path: models/resnet18.onnx, shapes: {bs4: {x: [4, 3, 224, 224]}}}
  bert:
    path: models/bert.onnx
    shapes: {b2s64: {input_ids: [2, 64]}}
    inputs: {input_ids: {low: 0, high: 30522}}
YAML
{
  timeout 55 python3 -m trt_routes.cli.app apply 2>&1 | tail -25; echo "== apply exit ${PIPESTATUS[0]}"
  timeout 8 python3 -m trt_routes.cli.app apply 2>&1 | tail -3; echo "== second apply exit ${PIPESTATUS[0]}"
  timeout 8 python3 -m trt_routes.cli.app plan --check 2>&1 | tail -3; echo "== plan --check exit ${PIPESTATUS[0]}"
  timeout 8 python3 -m trt_routes.cli.app lock check 2>&1 | tail -3; echo "== lock check exit ${PIPESTATUS[0]}"
} > "$OUT/apply.txt" 2>&1
cp tuning.lock "$OUT/tuning.lock" 2>/dev/null
tail -3 "$OUT"/*.txt
