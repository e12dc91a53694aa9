"""Knobs and catalogs: what a backend lets us switch, with defaults and help."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from trt_routes import canonical

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


#: ``Catalog.route_cost`` never says more than this (a route of many autotuning knobs)
MAX_COST = 50.0


@dataclass(frozen=True)
class Knob:
    """One compiler switch.

    ``option`` keeps its leading dash (``-conv_use_long_w``, ``-kgen:codegen:cuda_tile``).
    ``values`` is the closed list of allowed values, or None for an open knob, whose values are of
    ``open_type``: ``int`` (TensorRT's ``=int32_t`` / ``=int``, within ``minimum``..``maximum``), ``float``, or
    ``text`` (any one token, for a type word trt-routes does not know: trtexec takes any fixed value).
    ``phase`` says where a backend applies it: ``build`` (changes the engine) or ``runtime``
    (applied when the engine is loaded; recorded in the lockfile beside the engine)."""

    option: str
    values: tuple[str, ...] | None
    default: str
    help: str = ""
    phase: str = "build"
    #: An open knob's bounds (TensorRT's open knobs are int32_t). Validation only: not in the catalog digest.
    minimum: int = INT32_MIN
    maximum: int = INT32_MAX
    #: The type of an open knob's values (``int``, ``float`` or ``text``); in the digest only when not ``int``.
    open_type: str = "int"
    #: How much longer a build gets with the knob away from its default, as a factor of a default build
    #: (Inductor's autotuning switches: 3-6). A hint for budgets (``route_cost``): not in the digest.
    cost: float = 1.0

    @property
    def is_open(self) -> bool:
        return self.values is None

    def allows(self, value: str) -> bool:
        if self.values is not None:
            return value in self.values
        if self.open_type == "float":
            return _is_float(value)
        if self.open_type == "text":
            return bool(value) and not any(c.isspace() or c in "[]|" for c in value)
        if len(value) > 12:  # more digits than any int32 has (and int() of 5000 digits raises)
            return False
        try:
            return self.minimum <= int(value) <= self.maximum
        except ValueError:
            return False

    def allowed_text(self) -> str:
        """The knob as TensorRT's ``allowed_values`` field writes it."""
        if self.values is None:
            return f"{self.option}={self.open_type}"
        return f"{self.option}=[{'|'.join(self.values)}]"


@dataclass(frozen=True)
class Catalog:
    """The knobs a backend offers, in the backend's order."""

    backend: str
    version: str
    knobs: tuple[Knob, ...]
    tuner_version: str = ""
    _index: dict[str, Knob] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._index.update({k.option: k for k in self.knobs})

    def get(self, option: str) -> Knob | None:
        return self._index.get(option)

    def __contains__(self, option: object) -> bool:
        return option in self._index

    def __len__(self) -> int:
        return len(self.knobs)

    @property
    def options(self) -> list[str]:
        return [k.option for k in self.knobs]

    def route_cost(self, route: Mapping[str, str]) -> float:
        """The build-time factor of ``route`` against a default build: the product of the ``cost`` of each
        knob set away from its default (and not to 0, which switches a feature off), capped at 50."""
        factor = 1.0
        for option, value in route.items():
            knob = self._index.get(option)
            if knob is not None and value != knob.default and value != "0":
                factor *= knob.cost
        return min(factor, MAX_COST)

    def to_json(self) -> dict[str, object]:
        return {
            "backend": self.backend,
            "version": self.version,
            "tuner_version": self.tuner_version,
            "knobs": [
                {"option": k.option, "values": list(k.values) if k.values is not None else None,
                 "default": k.default, "help": k.help, "phase": k.phase}
                for k in self.knobs
            ],
        }

    def to_record(self) -> dict[str, object]:
        """Everything the catalog holds, the knobs' bounds too (``from_record`` reads it back): for the memo."""
        return {**self.to_json(), "knobs": [
            {"option": k.option, "values": list(k.values) if k.values is not None else None, "default": k.default,
             "help": k.help, "phase": k.phase, "minimum": k.minimum, "maximum": k.maximum, "open_type": k.open_type}
            for k in self.knobs]}

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> Catalog:
        return cls(backend=str(data["backend"]), version=str(data["version"]),
                   tuner_version=str(data["tuner_version"]),
                   knobs=tuple(Knob(k["option"], tuple(k["values"]) if k["values"] is not None else None,
                                    k["default"], k["help"], k["phase"], minimum=int(k["minimum"]),
                                    maximum=int(k["maximum"]), open_type=str(k.get("open_type", "int")))
                               for k in data["knobs"]))

    @cached_property
    def digest(self) -> str:
        """Hash of everything that gives routes their meaning (help text excluded). Computed once per
        catalog (it is frozen): every job of a backend shares one, and a 200-job plan asked 200 times."""
        data = self.to_json()
        data["knobs"] = [{"option": k.option, "values": list(k.values) if k.values is not None else None,
                          "default": k.default, "phase": k.phase,
                          **({"open_type": k.open_type} if k.open_type != "int" else {})} for k in self.knobs]
        return canonical.digest(data, 16)


def _is_float(text: str) -> bool:
    """A finite decimal number (``0.5``, ``1e-3``, ``2``)."""
    import math

    try:
        return math.isfinite(float(text)) and not any(c.isspace() for c in text)
    except ValueError:
        return False
