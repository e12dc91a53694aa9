"""What every tuning.yaml model shares: strict models and the field types (integers that are not booleans,
finite numbers, paths, names, dimensions)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints
from pydantic import Strict as StrictType


def _not_bool(v: object) -> object:
    if isinstance(v, bool):
        raise ValueError("expected a number, not true/false")
    return v


def _no_nul(v: object) -> object:
    if isinstance(v, str) and "\x00" in v:
        raise ValueError("a NUL character cannot be part of a path or name")
    return v


#: Every integer a user (or a bundle's manifest) can give: a real YAML integer, never true/false, 2.5 or "5".
Int = Annotated[int, StrictType()]
#: Every real number: an integer or a float, never true/false, and finite (no .inf, no .nan).
Number = Annotated[float, BeforeValidator(_not_bool), Field(allow_inf_nan=False)]
#: A path as written in the manifest: text without NUL, not empty.
PathText = Annotated[str, BeforeValidator(_no_nul), StringConstraints(min_length=1, max_length=4096)]
#: A tensor dimension: a positive integer TensorRT and ONNX Runtime can hold (int32 range).
Dim = Annotated[int, StrictType(), Field(ge=1, le=2**31 - 1)]
MAX_WORKERS = 256  # local worker processes (or Ray trials in flight) one apply may start
MAX_ELEMENTS = 2**31  # elements of one input tensor: beyond this no backend here can allocate it

Metric = Literal["l0", "l1", "l2", "lInf", "cos"]
NAME = r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$"
Name = Annotated[str, Field(pattern=NAME, max_length=100)]
ENTRY = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
