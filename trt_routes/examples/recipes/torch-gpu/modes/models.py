"""Five models from the H200 image's timm, transformers and torchvision (random init: nothing is
downloaded), as users take them: the library's own classes. Each factory returns the module (and
trt-routes casts it to float16); language models are wrapped so that forward returns one tensor."""

from __future__ import annotations

import torch
from torch import nn


def convnext_tiny(shapes: dict[str, list[int]]) -> nn.Module:
    import timm

    return timm.create_model("convnext_tiny", pretrained=False)


def vit_base(shapes: dict[str, list[int]]) -> nn.Module:
    import timm

    return timm.create_model("vit_base_patch16_224", pretrained=False)


def resnet50(shapes: dict[str, list[int]]) -> nn.Module:
    import torchvision

    return torchvision.models.resnet50(weights=None)


class LastHidden(nn.Module):
    """A Hugging Face encoder's last hidden state."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids).last_hidden_state


class Logits(nn.Module):
    """A Hugging Face causal LM's logits (no key/value cache: one forward over the prompt)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, use_cache=False).logits


def bert_base(shapes: dict[str, list[int]]) -> nn.Module:
    from transformers import BertConfig, BertModel

    return LastHidden(BertModel(BertConfig(), add_pooling_layer=False))


def gpt2(shapes: dict[str, list[int]]) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    return Logits(GPT2LMHeadModel(GPT2Config()))
