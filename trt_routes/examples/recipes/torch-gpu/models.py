"""Four reference models in plain torch (no downloads; random weights under trt-routes' fixed seed):
ResNet-50, ViT-B/16, MobileNetV3-Large and a 6-layer transformer encoder. Each factory takes the shape
profile ({input name: shape}) and returns the module; trt-routes casts it to the job's dtype."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# -- ResNet-50 ------------------------------------------------------------------------------------------


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.down is None else self.down(x)))


class ResNet50(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2, padding=1))
        layers: list[nn.Module] = []
        cin = 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(blocks):
                layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
                cin = width * Bottleneck.expansion
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)
        for m in self.modules():  # torchvision's init: BN at 1/0, so activations stay in fp16 range
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(image))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet50(shapes: dict[str, list[int]]) -> nn.Module:
    return ResNet50()


# -- transformer blocks (ViT and the encoder) --------------------------------------------------------------


class Block(nn.Module):
    """Pre-norm transformer block: LayerNorm, multi-head self-attention (SDPA), LayerNorm, GELU MLP."""

    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, n, d))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class ViT(nn.Module):
    def __init__(self, image: int = 224, patch: int = 16, dim: int = 768, depth: int = 12, heads: int = 12,
                 classes: int = 1000) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, stride=patch)
        tokens = (image // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, tokens + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*(Block(dim, heads, 4 * dim) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.patch(image).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


def vit_b16(shapes: dict[str, list[int]]) -> nn.Module:
    return ViT()


class Encoder(nn.Module):
    """A 6-layer BERT-size-ish encoder over token ids (d_model 512, 8 heads, FFN 2048)."""

    def __init__(self, vocab: int = 32000, dim: int = 512, depth: int = 6, heads: int = 8,
                 max_len: int = 512) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(1, max_len, dim) * 0.02)
        self.blocks = nn.Sequential(*(Block(dim, heads, 4 * dim) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos[:, : tokens.shape[1]]
        return self.norm(self.blocks(x))


def encoder(shapes: dict[str, list[int]]) -> nn.Module:
    return Encoder()


# -- MobileNetV3-Large ---------------------------------------------------------------------------------------


def _divisible(v: float, d: int = 8) -> int:
    new = max(d, int(v + d / 2) // d * d)
    return new + d if new < 0.9 * v else new


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        squeezed = _divisible(channels // 4)
        self.fc1 = nn.Conv2d(channels, squeezed, 1)
        self.fc2 = nn.Conv2d(squeezed, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        return x * F.hardsigmoid(self.fc2(F.relu(self.fc1(s))))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, kernel: int, expanded: int, cout: int, se: bool, hs: bool, stride: int) -> None:
        super().__init__()
        act: type[nn.Module] = nn.Hardswish if hs else nn.ReLU
        layers: list[nn.Module] = []
        if expanded != cin:
            layers += [nn.Conv2d(cin, expanded, 1, bias=False), nn.BatchNorm2d(expanded), act()]
        layers += [nn.Conv2d(expanded, expanded, kernel, stride, kernel // 2, groups=expanded, bias=False),
                   nn.BatchNorm2d(expanded), act()]
        if se:
            layers.append(SqueezeExcite(expanded))
        layers += [nn.Conv2d(expanded, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return x + out if self.residual else out


#: (kernel, expanded, out, squeeze-excite, hardswish, stride): the paper's MobileNetV3-Large table.
LARGE = ((3, 16, 16, False, False, 1), (3, 64, 24, False, False, 2), (3, 72, 24, False, False, 1),
         (5, 72, 40, True, False, 2), (5, 120, 40, True, False, 1), (5, 120, 40, True, False, 1),
         (3, 240, 80, False, True, 2), (3, 200, 80, False, True, 1), (3, 184, 80, False, True, 1),
         (3, 184, 80, False, True, 1), (3, 480, 112, True, True, 1), (3, 672, 112, True, True, 1),
         (5, 672, 160, True, True, 2), (5, 960, 160, True, True, 1), (5, 960, 160, True, True, 1))


class MobileNetV3(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish()]
        cin = 16
        for kernel, expanded, cout, se, hs, stride in LARGE:
            layers.append(InvertedResidual(cin, kernel, expanded, cout, se, hs, stride))
            cin = cout
        layers += [nn.Conv2d(cin, 960, 1, bias=False), nn.BatchNorm2d(960), nn.Hardswish()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(960, 1280), nn.Hardswish(), nn.Linear(1280, classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(image), 1)
        return self.classifier(torch.flatten(x, 1))


def mobilenet_v3(shapes: dict[str, list[int]]) -> nn.Module:
    return MobileNetV3()
