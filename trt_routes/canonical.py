"""The one canonical serializer: every key, digest and lockfile value goes through here.

Sorted keys, no whitespace, floats normalized to 12 significant digits, tuples as lists."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def normalize(value: Any) -> Any:
    """Turn a value into plain JSON data with normalized numbers (stable across runs)."""
    kind = type(value)
    if kind is str or value is None or kind is bool or kind is int:
        return value
    if kind is dict:
        return {str(k): normalize(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [normalize(v) for v in value]
    if hasattr(value, "model_dump"):
        return normalize(value.model_dump(mode="json"))
    if isinstance(value, Mapping):
        return {str(k): normalize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [normalize(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(normalize(v) for v in value)
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        rounded = float(f"{value:.12g}")
        if rounded == int(rounded) and abs(rounded) < 1e15:
            return int(rounded)
        return rounded
    if isinstance(value, Path):
        return value.as_posix()
    if hasattr(value, "item"):  # numpy scalars
        return normalize(value.item())
    raise TypeError(f"cannot canonicalize {type(value).__name__}")


def dumps(value: Any) -> str:
    """Canonical JSON text of ``value``."""
    return json.dumps(normalize(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def utf8(text: str) -> bytes:
    """``text`` as UTF-8 bytes for a digest, also where it holds a path decoded under a non-UTF-8 locale
    (``LC_ALL=C``: a non-ASCII folder name arrives as surrogate escapes): those become the path's own
    bytes, so the digest is the one a UTF-8 locale computes."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            return text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:  # a lone surrogate that is no escaped byte (from JSON "\ud800")
            return text.encode("utf-8", "surrogatepass")


def digest(value: Any, length: int = 64) -> str:
    """sha256 hex digest of the canonical JSON of ``value`` (truncated to ``length``)."""
    return hashlib.sha256(utf8(dumps(value))).hexdigest()[:length]


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    """sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def l0_key(atol: float, rtol: float) -> str:
    """The name of the l0 loss at one (atol, rtol) pair, as trials store it (the worker computes it, the
    manifest's checks read it): here, below both, so a worker need not import the manifest's schema."""
    return f"l0@atol={atol:g},rtol={rtol:g}"
