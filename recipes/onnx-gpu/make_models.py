"""Export the recipe's five models with torch.onnx.export (random weights under a fixed seed; no download).

    python make_models.py [NAME ...]   # writes models/NAME.onnx beside this file (all five by default); needs
                                       # torch, torchvision, timm and transformers (the GPU machine has them)

ResNet-50 keeps a dynamic batch axis (the manifest fixes it per shape profile); the others are exported at the
batch size their shape profile names. ``torch_module(NAME)`` gives the same module (bench/onnx_gpu.py times
torch.compile on it for reference)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: name -> (batch, input name, output names, dynamic batch axis)
MODELS: dict[str, tuple[int, str, list[str], bool]] = {
    "resnet50": (2, "image", ["logits"], True),
    "efficientnet-b0": (32, "image", ["logits"], False),
    "convnext-t": (16, "image", ["logits"], False),
    "vit-b16": (8, "image", ["logits"], False),
    "bert-base": (8, "input_ids", ["hidden", "pooled"], False),
}


def torch_module(name: str) -> Any:
    """The model ``name`` as a torch module in eval mode, its weights drawn from seed 0."""
    import torch

    torch.manual_seed(0)
    if name == "resnet50":
        import torchvision

        return torchvision.models.resnet50().eval()
    if name == "efficientnet-b0":
        import torchvision

        return torchvision.models.efficientnet_b0().eval()
    if name in ("convnext-t", "vit-b16"):
        import timm

        return timm.create_model({"convnext-t": "convnext_tiny", "vit-b16": "vit_base_patch16_224"}[name],
                                 pretrained=False).eval()
    if name == "bert-base":
        return _bert().eval()
    raise SystemExit(f"unknown model {name!r}; known: {', '.join(MODELS)}")


def _bert() -> Any:
    """BERT-base (transformers, random init) called with ``input_ids`` alone, returning plain tensors: the
    exporter's tracer passes inputs positionally, which transformers 5's BertModel.forward refuses."""
    import torch
    import transformers

    class Bert(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = transformers.BertModel(transformers.BertConfig())

        def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            out = self.bert(input_ids=input_ids)
            return out.last_hidden_state, out.pooler_output

    return Bert()


def export(name: str) -> Path:
    import torch

    batch, input_name, outputs, dynamic = MODELS[name]
    module = torch_module(name)
    args = ((torch.randint(0, 30522, (batch, 128)),) if input_name == "input_ids"
            else (torch.randn(batch, 3, 224, 224),))
    axes = {input_name: {0: "batch"}, **{o: {0: "batch"} for o in outputs}} if dynamic else None
    path = HERE / "models" / f"{name}.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(module, args, str(path), input_names=[input_name], output_names=outputs,
                          dynamic_axes=axes, opset_version=17, dynamo=False)
    print(f"wrote {path.relative_to(HERE)} ({path.stat().st_size / 2**20:.0f} MiB)")
    return path


if __name__ == "__main__":
    for model in sys.argv[1:] or list(MODELS):
        export(model)
