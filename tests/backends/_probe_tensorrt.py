"""Run in a subprocess with the REAL ``tensorrt`` on sys.path and the stub libraries on LD_LIBRARY_PATH:
print, as JSON, every public name of the module with its kind and its signatures (pybind11's, read from
``__doc__``; ``inspect`` for the Python functions of ``tensorrt/__init__.py``), every property (with
whether it has a setter and its type) and every enum member with its value; then the answers of the
real module to the few calls trt-routes relies on without a GPU (the TypeError of a failed factory, the
distribution trt-routes detects). Not a test on its own: tests/backends/test_tensorrt_conformance.py runs it."""

from __future__ import annotations

import inspect
import json
import re
import sys
from typing import Any

PREFIXES = ("tensorrt_bindings.tensorrt.", "tensorrt.tensorrt.", "tensorrt.")


def _short(type_text: str) -> str:
    text = type_text.strip()
    for prefix in PREFIXES:
        text = text.replace(prefix, "")
    return text


def _split_params(text: str) -> list[str]:
    """Split ``a: int, b: list[int] = [1, 2]`` at top-level commas."""
    out, depth, current = [], 0, ""
    for char in text:
        if char in "([{<":
            depth += 1
        elif char in ")]}>":
            depth -= 1
        if char == "," and depth == 0:
            out.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        out.append(current)
    return [p.strip() for p in out]


def pybind_signatures(name: str, doc: str | None) -> list[dict[str, Any]]:
    """Every ``name(params) -> ret`` line of a pybind11 docstring (overloads numbered ``1.``, ``2.``)."""
    found = []
    pattern = re.compile(rf"^\s*(?:\d+\.\s+)?{re.escape(name)}\((.*)\)\s*->\s*(.+?)\s*$")
    for line in (doc or "").splitlines():
        match = pattern.match(line)
        if not match:
            continue
        params = []
        for raw in _split_params(match.group(1)):
            if raw in ("*args", "**kwargs"):
                params.append({"name": raw, "default": True, "type": ""})
                continue
            head, eq, _default = raw.partition("=")
            pname, _, ptype = head.partition(":")
            params.append({"name": pname.strip(), "default": bool(eq), "type": _short(ptype)})
        found.append({"params": params, "returns": _short(match.group(2))})
    return [s for s in found if not any(p["name"] in ("*args", "**kwargs") for p in s["params"])] or found


def python_signature(func: Any) -> list[dict[str, Any]]:
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return []
    params = [
        {"name": p.name, "default": p.default is not inspect.Parameter.empty, "type": ""}
        for p in sig.parameters.values()
    ]
    return [{"params": params, "returns": ""}]


def describe_member(cls: type, name: str, value: Any) -> dict[str, Any]:
    if isinstance(value, property):
        first = (value.fget.__doc__ or "").strip().splitlines()[:1] if value.fget is not None else []
        match = re.search(r"->\s*(.+?)\s*$", first[0]) if first else None
        returns = _short(match.group(1)) if match else ""
        return {"kind": "property", "settable": value.fset is not None, "returns": returns}
    if isinstance(value, type):
        return describe_class(value) if value is not cls else {"kind": "other", "type": "self"}
    if isinstance(value, cls) and hasattr(value, "__int__"):
        return {"kind": "enum_value", "value": int(value)}
    if inspect.isfunction(value):  # Python-level, e.g. added by tensorrt/__init__.py
        return {"kind": "method", "signatures": python_signature(value)}
    if callable(value):
        return {"kind": "method", "signatures": pybind_signatures(name, getattr(value, "__doc__", None))}
    return {"kind": "other", "type": type(value).__name__}


def describe_class(cls: type) -> dict[str, Any]:
    members: dict[str, Any] = {}
    for name in dir(cls):
        if name.startswith("__") and name != "__init__":
            continue
        try:
            value = inspect.getattr_static(cls, name)
        except AttributeError:
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = getattr(cls, name)
        if name == "__init__":
            members[name] = {"kind": "method", "signatures": pybind_signatures("__init__", value.__doc__)
                             or python_signature(value)}
            continue
        members[name] = describe_member(cls, name, value)
    enum = getattr(cls, "__members__", None)
    return {
        "kind": "class",
        "enum": {k: int(v) for k, v in enum.items()} if isinstance(enum, dict) else None,
        "members": members,
        "bases": [b.__name__ for b in cls.__mro__[1:]],
    }


def describe_module(module: Any) -> dict[str, Any]:
    names: dict[str, Any] = {}
    for name in dir(module):
        if name.startswith("_"):
            continue
        value = getattr(module, name)
        if isinstance(value, type):
            names[name] = describe_class(value)
        elif inspect.isfunction(value):
            names[name] = {"kind": "function", "signatures": python_signature(value)}
        elif callable(value):
            names[name] = {"kind": "function", "signatures": pybind_signatures(name, value.__doc__)}
        elif inspect.ismodule(value):
            names[name] = {"kind": "module"}
        else:
            names[name] = {"kind": "other", "type": type(value).__name__}
    return names


def main() -> None:
    import tensorrt as trt

    out: dict[str, Any] = {
        "version": trt.__version__,
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "file": trt.__file__,
        "bindings_file": sys.modules["tensorrt_bindings"].__file__ if "tensorrt_bindings" in sys.modules else "",
        "names": {**describe_module(trt), "__version__": {"kind": "other", "type": "str"}},
    }
    if sys.argv[1:] == ["--names-only"]:  # another Python's bindings: the standard library only (no numpy)
        json.dump(out, sys.stdout)
        return
    out |= {
        "itemsize": {name: trt.DataType.__members__[name].itemsize for name in trt.DataType.__members__},
        "nptype_raises": sorted(
            name for name, member in trt.DataType.__members__.items() if _raises(lambda m=member: trt.nptype(m))
        ),
    }
    factories = {}
    for kind in ("Builder", "Runtime"):
        try:
            getattr(trt, kind)(trt.Logger(trt.Logger.ERROR))
            factories[kind] = "no error"
        except Exception as exc:
            factories[kind] = f"{type(exc).__name__}: {exc}"
    out["factories"] = factories
    from trt_routes.backends.tensorrt.process import find_distribution

    found = find_distribution(trt)
    out["distribution"] = {"name": found.name, "version": found.version, "cuda": found.cuda}
    from trt_routes.backends.tensorrt import TensorRTBackend

    out["backend_unavailable"] = TensorRTBackend().unavailable_reason()
    json.dump(out, sys.stdout)


def _raises(call: Any) -> bool:
    try:
        call()
    except TypeError:
        return True
    return False


if __name__ == "__main__":
    main()
