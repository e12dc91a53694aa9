"""The TensorRT recipes (recipes/tensorrt/*.yaml) are valid manifests built from publicly known knobs."""

from __future__ import annotations

import pytest
import yaml
from _paths import REPO
from _tensorrt_knobs import PUBLIC_KNOBS

from trt_routes.backends.tensorrt import TensorRTBackend, check_settings
from trt_routes.manifest.schema import Manifest
from trt_routes.routes import parse_expression

RECIPES = REPO / "recipes" / "tensorrt"
PUBLISHED_VALUES = {"-conv_use_long_w": {"on", "off"}, "-kgen:codegen:cuda_tile": {"0", "1", "2", "3"}}


@pytest.mark.parametrize("name", ["resnet50.yaml", "bert.yaml"])
def test_recipe_is_a_valid_tensorrt_manifest(name: str) -> None:
    manifest = Manifest.model_validate(yaml.safe_load((RECIPES / name).read_text(encoding="utf-8")))
    assert manifest.defaults.backend == "tensorrt"
    backend = TensorRTBackend()
    for target in manifest.targets.values():
        assert backend.supports(target.model_dump()) is None
    for model in manifest.models:
        effective = manifest.effective(model)
        assert effective.backend == "tensorrt"
        assert manifest.models[model].path.startswith("models/")
        check_settings(effective.settings)  # every setting is one the backend maps
        checks = {c.metric for c in manifest.tolerances[effective.tolerance or ""].checks}
        assert checks == {"cos", "lInf"}
    for group, text in manifest.switch_groups.items():
        expression = parse_expression(text, source=f"{name}:{group}")
        assert expression.varied, group
        for token in expression.tokens:
            assert token.option in PUBLIC_KNOBS, f"{group}: {token.option}"
            if token.option in PUBLISHED_VALUES:
                assert set(token.values) <= PUBLISHED_VALUES[token.option], f"{group}: {token.text()}"
