"""A job's generated inputs: what the reference run feeds every route when the manifest gives no input files,
and how a trial's log marks the backend's stderr. The worker, the on-demand profile (``audit.layers``) and the
console share them; numpy is imported only to make inputs."""

from __future__ import annotations

__all__ = ["DTYPES", "STDERR_HEADER", "make_inputs"]

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

#: The input dtypes a manifest may name.
DTYPES = ("float32", "float16", "int64", "int32", "bool")
#: Where a trial's log turns to what the worker captured from the backend's stderr.
STDERR_HEADER = "--- backend stderr ---"


def make_inputs(inputs: dict[str, dict[str, object]], seed: int) -> dict[str, np.ndarray]:
    """Deterministic inputs: seeded uniform values in [low, high) of each input's dtype; a shape tensor
    (``shape_tensor``) is fed the values its ``shape`` entry holds (the profile gives its values)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for name in sorted(inputs):
        spec = inputs[name]
        shape = [int(d) for d in spec["shape"]]  # type: ignore[attr-defined]
        dtype = np.dtype(str(spec.get("dtype", "float32"))).type
        low, high = float(spec.get("low", -1.0)), float(spec.get("high", 1.0))  # type: ignore[arg-type]
        if spec.get("shape_tensor"):
            feeds[name] = np.array(shape, dtype=dtype)
        elif np.issubdtype(dtype, np.integer):
            feeds[name] = rng.integers(int(low), max(int(high), int(low) + 1), size=shape).astype(dtype)
        elif dtype is np.bool_:
            feeds[name] = rng.random(size=shape) < 0.5
        else:
            feeds[name] = rng.uniform(low, high, size=shape).astype(dtype)
    return feeds
