set -e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRT_ROUTES_MEMO=/tmp/memo
nproc; python3 -c "import torch,timm,transformers,onnx,onnxruntime;print(torch.__version__,timm.__version__,transformers.__version__,onnx.__version__,onnxruntime.__version__)"
mkdir -p /tmp/p/models && cd /tmp/p
python3 - <<'PY'
import torch, timm, transformers
m = timm.create_model("resnet18", pretrained=False).eval()
torch.onnx.export(m, torch.randn(1,3,96,96), "models/resnet18.onnx", input_names=["x"], output_names=["y"], dynamic_axes={"x":{0:"b"}}, dynamo=False)
cfg = transformers.BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256)
class B(torch.nn.Module):
    def __init__(self):
        super().__init__(); self.m = transformers.BertModel(cfg).eval()
    def forward(self, input_ids):
        return self.m(input_ids=input_ids).last_hidden_state
ids = torch.randint(0, 1000, (1, 32))
torch.onnx.export(B().eval(), (ids,), "models/bert.onnx", input_names=["input_ids"], output_names=["h"], dynamic_axes={"input_ids":{0:"b",1:"s"}}, dynamo=False)
PY
cp $OLDPWD/tuning.yaml t.yaml
python3 - <<'PY'
import re
s = open("t.yaml").read()
s = s[:s.index("models:")] + """models:
  resnet18:
    path: models/resnet18.onnx
    shapes: {bs1: {x: [1, 3, 96, 96]}}
  bert:
    path: models/bert.onnx
    shapes: {s32: {input_ids: [1, 32]}}
    inputs: {input_ids: {dtype: int64, low: 0, high: 1000}}
"""
open("tuning.yaml", "w").write(s)
PY
printf 'import sys\nfrom trt_routes.cli.launch import main\nif __name__ == "__main__":\n    sys.exit(main())\n' > trt-routes
TRT_ROUTES_TIMINGS=/tmp/p/t.jsonl bash -c 'time python3 trt-routes apply'
grep -E '"reference"' /tmp/p/t.jsonl | head -3
time python3 trt-routes apply | tail -1
python3 trt-routes plan --check > /dev/null; echo "plan --check rc $?"
python3 trt-routes explain bert/s32/cpu | head -12
