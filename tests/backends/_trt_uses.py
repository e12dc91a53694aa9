"""Every TensorRT and cuda-python name the TensorRT backend uses, found in its source, checked against a
description of the real modules (tests/backends/_probe_tensorrt.py, _probe_cuda.py).

Types are tracked the way the backend's code flows, with one explicit table for where the flow starts:
``ROOTS`` names the parameters and ``self`` attributes that hold TensorRT or cuda-python objects. From
there, assignments take the type of the TensorRT call on their right (its return type read from the real
signature: ``builder.create_builder_config()`` is an ``IBuilderConfig`` because the real binding says
so). Every attribute read, call (argument count and keyword names against the real overloads), property
write, ``getattr``/``hasattr`` with a constant name, override of a TensorRT method, and cuda-python
call with its ``(err, value)`` return convention is checked; renaming or removing a name the backend uses
makes a problem appear. What the code reaches by a computed name (``getattr(trt.BuilderFlag, flag)``) is
listed in ``DYNAMIC`` and checked from the data it comes from (``SETTINGS``) by the test."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Where TensorRT / cuda-python objects enter a function: parameter names and ``self`` attributes as the
#: backend spells them. The test checks that each entry still occurs in the source.
ROOTS: dict[str, tuple[str, str]] = {
    "trt": ("module", "trt"),
    "self._trt": ("module", "trt"),
    "builder": ("instance", "Builder"),
    "network": ("instance", "INetworkDefinition"),
    "config": ("instance", "IBuilderConfig"),
    "engine": ("instance", "ICudaEngine"),
    "runtime": ("instance", "Runtime"),
    "trt_dtype": ("instance", "DataType"),
    "parser": ("instance", "OnnxParser"),
    "parser_error": ("instance", "ParserError"),
    "self._engine": ("instance", "ICudaEngine"),
    "self._runtime": ("instance", "Runtime"),
    "rt": ("module", "cuda"),
    "self._rt": ("module", "cuda"),
}
#: Functions whose access by computed name is checked from data instead (see the test).
DYNAMIC = {
    ("settings.py", "apply"): "Setting.apply: config_attr/enum/flag/pool of every entry of SETTINGS",
}
#: The functions that unpack a cuda-python ``(err, *values)`` tuple: (name, index of the tuple argument).
UNPACKERS = {"cuda_check": 1, "_call": 0}


@dataclass(frozen=True)
class T:
    kind: str  # module | class | instance | method | function
    lib: str  # trt | cuda
    name: str = ""  # class name (dotted for nested), function name
    attr: str = ""  # method name
    bound: bool = True  # method reached through an instance (self not passed)


@dataclass
class Report:
    uses: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class Real:
    """Lookups in the probe descriptions of the real modules."""

    def __init__(self, trt: dict[str, Any], cuda: dict[str, Any]) -> None:
        self.trt, self.cuda = trt, cuda

    def trt_class(self, dotted: str) -> dict[str, Any] | None:
        parts = dotted.split(".")
        desc = self.trt["names"].get(parts[0])
        for part in parts[1:]:
            if desc is None or desc.get("kind") != "class":
                return None
            desc = desc["members"].get(part)
        return desc if desc and desc.get("kind") == "class" else None

    def type_of_return(self, text: str) -> T | None:
        text = text.strip()
        if self.trt_class(text) is not None:
            return T("instance", "trt", text)
        return None


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _const_str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


class Analyzer:
    def __init__(self, real: Real) -> None:
        self.real = real
        self.report = Report()

    # -- types ---------------------------------------------------------------------------------------
    def type_of(self, node: ast.AST, scope: dict[str, T]) -> T | None:
        if isinstance(node, ast.Name):
            if node.id in scope:
                return scope[node.id]
            if node.id in ROOTS:  # a parameter or local the backend names as it names its roots
                kind, name = ROOTS[node.id]
                return T(kind, "cuda" if name == "cuda" else "trt", "" if kind == "module" else name)
            return None
        if isinstance(node, ast.Attribute):
            text = _dotted(node)
            if text in scope:
                return scope[text]
            owner = self.type_of(node.value, scope)
            return self.member(owner, node.attr, node) if owner else None
        if isinstance(node, ast.Call):
            return self.call_type(node, scope)
        if isinstance(node, ast.IfExp):
            return self.type_of(node.body, scope) or self.type_of(node.orelse, scope)
        if isinstance(node, ast.BoolOp):
            for value in node.values:
                found = self.type_of(value, scope)
                if found:
                    return found
        return None

    def member(self, owner: T, attr: str, node: ast.AST, *, record: bool = True) -> T | None:
        """The type of ``owner.attr``; a problem when the real module has no such name."""
        where = f"line {getattr(node, 'lineno', '?')}"
        if owner.lib == "trt":
            if owner.kind == "module":
                desc = self.real.trt["names"].get(attr)
                if desc is None:
                    return self._missing(f"tensorrt.{attr}", where)
                self._use(f"tensorrt.{attr}", record)
                if desc["kind"] == "class":
                    return T("class", "trt", attr)
                if desc["kind"] == "function":
                    return T("function", "trt", attr)
                return None
            if owner.kind in ("class", "instance"):
                cls = self.real.trt_class(owner.name)
                if cls is None:
                    return None
                desc = cls["members"].get(attr)
                if desc is None:
                    return self._missing(f"tensorrt.{owner.name}.{attr}", where)
                self._use(f"tensorrt.{owner.name}.{attr}", record)
                kind = desc["kind"]
                if kind == "class":
                    return T("class", "trt", f"{owner.name}.{attr}")
                if kind == "enum_value":
                    return T("instance", "trt", owner.name)
                if kind == "property":
                    return self.real.type_of_return(desc.get("returns", "")) if owner.kind == "instance" else None
                if kind == "method":
                    return T("method", "trt", owner.name, attr, bound=owner.kind == "instance")
            return None
        # cuda-python
        cuda = self.real.cuda
        if owner.kind == "module":
            if attr in cuda["functions"]:
                self._use(f"cuda.bindings.runtime.{attr}", record)
                return T("function", "cuda", attr)
            if attr in cuda["enums"] or attr in cuda["classes"]:
                self._use(f"cuda.bindings.runtime.{attr}", record)
                return T("class", "cuda", attr)
            return self._missing(f"cuda.bindings.runtime.{attr}", where)
        if owner.kind == "class" and owner.name in cuda["enums"]:
            if attr not in cuda["enums"][owner.name]:
                return self._missing(f"cuda.bindings.runtime.{owner.name}.{attr}", where)
            self._use(f"cuda.bindings.runtime.{owner.name}.{attr}", record)
            return T("instance", "cuda", owner.name)
        if owner.kind == "instance" and owner.name in cuda["classes"]:
            if attr not in cuda["classes"][owner.name]:
                return self._missing(f"cuda.bindings.runtime.{owner.name}.{attr}", where)
            self._use(f"cuda.bindings.runtime.{owner.name}.{attr}", record)
        return None

    def call_type(self, node: ast.Call, scope: dict[str, T]) -> T | None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("getattr", "hasattr") and len(node.args) >= 2:
            owner = self.type_of(node.args[0], scope)
            name = _const_str(node.args[1])
            if owner is None or name is None:
                return None
            if func.id == "hasattr":  # a probe: the name must still exist where it is probed
                self.member(owner, name, node)
                return None
            return self.member(owner, name, node)
        if (isinstance(func, ast.Name) and func.id in UNPACKERS) or (
            isinstance(func, ast.Attribute) and func.attr in UNPACKERS and _dotted(func.value) == "self"
        ):
            name = func.id if isinstance(func, ast.Name) else func.attr
            index = UNPACKERS[name]
            if len(node.args) > index:
                inner = node.args[index]
                if isinstance(inner, ast.Call):
                    target = self.type_of(inner.func, scope)
                    if target and target.kind == "function" and target.lib == "cuda":
                        returns = self.real.cuda["functions"][target.name]["returns"] or []
                        if len(returns) == 2 and returns[1] in self.real.cuda["classes"]:
                            return T("instance", "cuda", returns[1])
            return None
        target = self.type_of(func, scope)
        if target is None:
            return None
        if target.kind == "class" and target.lib == "trt":
            return T("instance", "trt", target.name)
        if target.kind == "method" and target.lib == "trt":
            cls = self.real.trt_class(target.name)
            sigs = cls["members"][target.attr]["signatures"] if cls else []
            return self.real.type_of_return(sigs[0]["returns"]) if sigs else None
        return None

    def _use(self, text: str, record: bool) -> None:
        if record:
            self.report.uses.append(text)

    def _missing(self, text: str, where: str) -> None:
        self.report.problems.append(f"{self.file}:{where}: {text} does not exist in the real module")
        return None

    # -- checks ------------------------------------------------------------------------------------------
    def check_call(self, node: ast.Call, scope: dict[str, T], function: str) -> None:
        target = self.type_of(node.func, scope) if not isinstance(node.func, ast.Name) or node.func.id not in (
            "getattr", "hasattr", "setattr") else None
        where = f"{self.file}:line {node.lineno}"
        if isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr", "setattr") and node.args:
            owner = self.type_of(node.args[0], scope)
            computed = owner is not None and len(node.args) >= 2 and _const_str(node.args[1]) is None
            if computed and owner is not None and (self.file, function) not in DYNAMIC:
                self.report.problems.append(
                    f"{where}: {node.func.id}() on a {owner.lib} object with a computed name in {function}(); "
                    "use the name, or list the function in DYNAMIC with the data the test checks"
                )
            if node.func.id == "setattr" and owner is not None and len(node.args) >= 2:
                name = _const_str(node.args[1])
                if name is not None:
                    self.check_store(owner, name, node)
            return
        if target is None:
            return
        if target.lib == "trt" and target.kind in ("method", "class"):
            if target.kind == "class":
                cls = self.real.trt_class(target.name)
                sigs = cls["members"].get("__init__", {}).get("signatures", []) if cls else []
                label, skip = f"tensorrt.{target.name}(...)", 1
            else:
                cls = self.real.trt_class(target.name)
                sigs = cls["members"][target.attr]["signatures"] if cls else []
                label, skip = f"tensorrt.{target.name}.{target.attr}(...)", 1 if target.bound else 0
            if sigs and not any(_fits(sig["params"][skip:], node) for sig in sigs):
                self.report.problems.append(
                    f"{where}: {label} called with {len(node.args)} positional argument(s) and keywords "
                    f"{sorted(k.arg or '**' for k in node.keywords)}; the real overloads take: "
                    + " | ".join("(" + ", ".join(p["name"] for p in sig["params"][skip:]) + ")" for sig in sigs)
                )
        if target.lib == "cuda" and target.kind == "function":
            desc = self.real.cuda["functions"][target.name]
            params = desc["params"]
            if params is not None and not _fits(params, node):
                self.report.problems.append(
                    f"{where}: cuda.bindings.runtime.{target.name} called with {len(node.args)} argument(s); "
                    f"it takes ({', '.join(p['name'] for p in params)})"
                )
            self.check_return_convention(node, target.name, desc["returns"], where)

    def check_return_convention(self, node: ast.Call, name: str, returns: list[str] | None, where: str) -> None:
        """A value taken from ``cuda_check``/``_call`` needs exactly (err, value); indexing a raw result
        needs that many values; the first is always a cudaError_t."""
        if not returns or returns[0] != "cudaError_t":
            self.report.problems.append(f"{where}: cuda.bindings.runtime.{name} does not return (cudaError_t, ...)")
            return
        parent = self.parents.get(node)
        if isinstance(parent, ast.Call) and _unpacker(parent) is not None:
            used = not isinstance(self.parents.get(parent), ast.Expr)
            if used and len(returns) != 2:
                self.report.problems.append(
                    f"{where}: the value of cuda.bindings.runtime.{name} is used as one value, but it returns "
                    f"{len(returns)} ({', '.join(returns)})"
                )
            self.report.uses.append(f"cuda.bindings.runtime.{name} -> ({', '.join(returns)})")

    def check_store(self, owner: T, attr: str, node: ast.AST) -> None:
        if owner.lib != "trt" or owner.kind != "instance":
            return
        cls = self.real.trt_class(owner.name)
        desc = cls["members"].get(attr) if cls else None
        where = f"{self.file}:line {getattr(node, 'lineno', '?')}"
        if desc is None:
            self._missing(f"tensorrt.{owner.name}.{attr}", f"line {getattr(node, 'lineno', '?')}")
        elif desc["kind"] != "property" or not desc["settable"]:
            self.report.problems.append(f"{where}: tensorrt.{owner.name}.{attr} cannot be set (no property setter)")
        else:
            self.report.uses.append(f"tensorrt.{owner.name}.{attr} (set)")

    def check_override(self, node: ast.ClassDef, scope: dict[str, T]) -> None:
        for base in node.bases:
            owner = self.type_of(base, scope)
            if owner is None or owner.kind != "class" or owner.lib != "trt":
                continue
            cls = self.real.trt_class(owner.name) or {"members": {}}
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name in cls["members"]:
                    mine = [a.arg for a in item.args.args]
                    real = cls["members"][item.name].get("signatures", [])
                    if not any([p["name"] for p in sig["params"]] == mine for sig in real):
                        self.report.problems.append(
                            f"{self.file}:line {item.lineno}: {node.name}.{item.name}({', '.join(mine)}) overrides "
                            f"tensorrt.{owner.name}.{item.name} whose parameters are "
                            + " | ".join("(" + ", ".join(p["name"] for p in s["params"]) + ")" for s in real)
                        )
                    else:
                        self.report.uses.append(f"tensorrt.{owner.name}.{item.name} (overridden)")

    # -- walking -----------------------------------------------------------------------------------------
    def analyze(self, path: Path) -> None:
        self.file = path.name
        tree = ast.parse(path.read_text(encoding="utf-8"))
        self.parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
        self_attrs: dict[str, dict[str, T]] = {}
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            attrs: dict[str, T] = {}
            for _ in range(2):  # self.x = <typed> in one method, used in another
                for fn in (n for n in ast.walk(cls) if isinstance(n, ast.FunctionDef)):
                    scope = self.scope_of(fn, {**attrs})
                    for node in ast.walk(fn):
                        if isinstance(node, ast.Assign):
                            for target in node.targets:
                                text = _dotted(target)
                                if text.startswith("self.") and (found := self.type_of(node.value, scope)):
                                    attrs[text] = found
            self_attrs[cls.name] = attrs
        for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            owner = next((c for c in self._enclosing(fn) if isinstance(c, ast.ClassDef)), None)
            outer = [self.scope_of(f, {}) for f in self._enclosing(fn) if isinstance(f, ast.FunctionDef)]
            base: dict[str, T] = {}
            for extra in outer:
                base.update(extra)
            scope = self.scope_of(fn, {**base, **(self_attrs.get(owner.name, {}) if owner else {})})
            self.indexed: dict[str, tuple[str, list[str], str]] = {}
            for node in self._own_nodes(fn):  # raw cuda-python results kept in a name, indexed later
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                    target_type = self.type_of(node.value.func, scope)
                    if target_type and target_type.kind == "function" and target_type.lib == "cuda":
                        returns = self.real.cuda["functions"][target_type.name]["returns"] or []
                        for target in node.targets:
                            if isinstance(target, ast.Name):
                                self.indexed[target.id] = (target_type.name, returns, f"{self.file}:line {node.lineno}")
            for node in self._own_nodes(fn):
                if isinstance(node, ast.Call):
                    self.check_call(node, scope, fn.name)
                elif isinstance(node, ast.Attribute):
                    owner_type = self.type_of(node.value, scope)
                    if owner_type is not None and _dotted(node) not in scope:
                        if isinstance(node.ctx, ast.Store):
                            self.check_store(owner_type, node.attr, node)
                        else:
                            self.member(owner_type, node.attr, node)
                elif isinstance(node, ast.ClassDef):
                    self.check_override(node, scope)
                elif (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
                      and node.value.id in self.indexed and isinstance(node.slice, ast.Constant)):
                    name, returns, where = self.indexed[node.value.id]
                    if int(node.slice.value) >= len(returns):
                        self.report.problems.append(
                            f"{where}: {node.value.id}[{node.slice.value}] of cuda.bindings.runtime.{name}, "
                            f"which returns {len(returns)} value(s)"
                        )
                    else:
                        self.report.uses.append(f"cuda.bindings.runtime.{name}[{node.slice.value}]")

    def scope_of(self, fn: ast.FunctionDef, base: dict[str, T]) -> dict[str, T]:
        scope = dict(base)
        for arg in fn.args.args + fn.args.kwonlyargs:
            if arg.arg in ROOTS:
                kind, name = ROOTS[arg.arg]
                scope[arg.arg] = T(kind, "cuda" if name == "cuda" else "trt", "" if kind == "module" else name)
        for key, (kind, name) in ROOTS.items():
            if key.startswith("self.") and key not in scope:
                scope[key] = T(kind, "cuda" if name == "cuda" else "trt", "" if kind == "module" else name)
        for _ in range(3):  # assignments in any order
            for node in self._own_nodes(fn):
                if isinstance(node, ast.Assign):
                    found = self.type_of(node.value, scope)
                    for target in node.targets:
                        if isinstance(target, ast.Name) and found is not None:
                            scope[target.id] = found
                elif isinstance(node, ast.withitem) and isinstance(node.optional_vars, ast.Name):
                    pass
        return scope

    def _enclosing(self, node: ast.AST) -> Iterator[ast.AST]:
        current = self.parents.get(node)
        while current is not None:
            yield current
            current = self.parents.get(current)

    def _own_nodes(self, fn: ast.FunctionDef) -> Iterator[ast.AST]:
        """Nodes of ``fn``'s body, not of functions nested in it (those are walked on their own)."""
        stack: list[ast.AST] = list(fn.body)
        while stack:
            node = stack.pop()
            yield node
            for child in ast.iter_child_nodes(node):
                if not isinstance(child, (ast.FunctionDef, ast.Lambda)):
                    stack.append(child)


def _unpacker(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name) and func.id in UNPACKERS:
        return func.id
    if isinstance(func, ast.Attribute) and func.attr in UNPACKERS and _dotted(func.value) == "self":
        return func.attr
    return None


def _fits(params: list[dict[str, Any]], node: ast.Call) -> bool:
    """Whether a call's positional count and keyword names fit one real parameter list."""
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        return True
    required = [p for p in params if not p["default"]]
    names = [p["name"] for p in params]
    positional = len(node.args)
    if positional > len(params):
        return False
    bound = set(names[:positional])
    for keyword in node.keywords:
        if keyword.arg not in names or keyword.arg in bound:
            return False
        bound.add(keyword.arg)
    return all(p["name"] in bound for p in required)


def analyze(files: list[Path], trt: dict[str, Any], cuda: dict[str, Any]) -> Report:
    analyzer = Analyzer(Real(trt, cuda))
    for path in files:
        analyzer.analyze(path)
    return analyzer.report


def root_occurrences(files: list[Path]) -> set[str]:
    """Which ROOTS keys occur in the sources (as a parameter name or a ``self`` attribute)."""
    found: set[str] = set()
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.arg) and node.arg in ROOTS:
                found.add(node.arg)
            elif isinstance(node, ast.Attribute) and _dotted(node) in ROOTS:
                found.add(_dotted(node))
    return found
