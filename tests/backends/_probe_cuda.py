"""Run in a subprocess with the REAL cuda-python (``cuda.bindings``) on sys.path: print, as JSON, every
public function of ``cuda.bindings.runtime`` with its parameters (``inspect.signature`` of the Cython
functions) and how many values it returns (its numpydoc "Returns" section: ``cudaError_t`` first, then
one line per output), every enum with its members, and the attributes of ``cudaDeviceProp``. No GPU is
needed; zero-argument calls are made to confirm the ``(err, value)`` tuples the docstrings describe."""

from __future__ import annotations

import inspect
import json
import sys
from typing import Any


def returned(doc: str | None) -> list[str] | None:
    """The types of the values listed under "Returns" (numpydoc: ``cudaError_t``, then ``name : type``
    per output), up to the next section; None without such a section."""
    lines = (doc or "").splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Returns")
    except StopIteration:
        return None
    types: list[str] = []
    for j in range(start + 2, len(lines)):
        line = lines[j]
        if not line.strip() or line[:1].isspace():
            continue
        if j + 1 < len(lines) and lines[j + 1].strip() and set(lines[j + 1].strip()) == {"-"}:
            break  # the next section's title
        kind = line.partition(" : ")[2] or line
        types.append(kind.replace(":py:obj:`~.", "").replace("`", "").split(" or ")[-1].strip())
    return types


def main() -> None:
    from cuda.bindings import runtime as rt

    functions: dict[str, Any] = {}
    enums: dict[str, Any] = {}
    classes: dict[str, Any] = {}
    for name in dir(rt):
        if name.startswith("_"):
            continue
        value = getattr(rt, name)
        if isinstance(value, type):
            members = getattr(value, "__members__", None)
            if members:
                enums[name] = {k: int(v) for k, v in members.items()}
            else:
                try:
                    instance = value()
                    attrs = sorted(a for a in dir(instance) if not a.startswith("_"))
                except Exception:
                    attrs = sorted(a for a in dir(value) if not a.startswith("_"))
                classes[name] = attrs
        elif callable(value):
            try:
                params = [
                    {"name": p.name, "default": p.default is not inspect.Parameter.empty}
                    for p in inspect.signature(value).parameters.values()
                ]
            except (TypeError, ValueError):
                params = None
            functions[name] = {"params": params, "returns": returned(value.__doc__)}
    observed = {}
    for name in ("cudaStreamCreate", "cudaEventCreate", "cudaGetDeviceCount", "cudaRuntimeGetVersion",
                 "cudaGetLastError", "cudaDriverGetVersion"):
        observed[name] = len(getattr(rt, name)())
    import importlib.metadata as md

    json.dump({"version": md.version("cuda-bindings"), "file": rt.__file__, "functions": functions,
               "enums": enums, "classes": classes, "observed_arity": observed}, sys.stdout)


if __name__ == "__main__":
    main()
