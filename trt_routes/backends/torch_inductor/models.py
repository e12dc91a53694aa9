"""Where torch models come from: a Python entry point (``module:factory``) or a torch.export ``.pt2`` file;
their honest digest; example inputs; and outputs flattened to named arrays.

Digest of an entry model (see ``entry_digest``): the source of every module imported from the manifest's
folder while importing the entry and calling its factory, the factory's name, every parameter and buffer
(names, dtypes, shapes, bytes) and the example inputs' names, dtypes and shapes. Code installed outside
that folder (torch itself, other libraries) is covered by the signature's torch version only."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import inspect
import random
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trt_routes import canonical
from trt_routes.backends.base import BuildSpec, InputMismatch, SettingError
from trt_routes.errors import TrtRoutesError

SEED = 0  # factories run under torch.manual_seed(SEED): unseeded random init is still reproducible
_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16", "int64": "int64",
           "int32": "int32", "bool": "bool"}


@dataclass
class LoadedModel:
    """A model ready to cast and run: the module, example inputs by name, and the user files it came from."""

    module: Any  # torch.nn.Module
    example: dict[str, Any] | None
    files: list[Path] = field(default_factory=list)
    source: str = ""


def _torch() -> Any:
    import torch

    return torch


def _under(path: str | None, root: Path) -> bool:
    if not path:
        return False
    try:
        Path(path).resolve().relative_to(root)
    except ValueError:
        return False
    return True


def _user_modules(root: Path) -> dict[str, Path]:
    return {name: Path(file).resolve() for name, m in list(sys.modules.items())
            if (file := getattr(m, "__file__", None)) is not None and _under(file, root)}


def load_entry(entry: str, root: Path, shapes: Mapping[str, list[int]]) -> LoadedModel:
    """Import ``module:factory`` with ``root`` first on sys.path (user modules under ``root`` are imported
    afresh, so edits are seen) and call the factory under a fixed seed."""
    torch = _torch()
    root = root.resolve()
    module_name, _, func_name = entry.partition(":")
    parts = module_name.split(".")
    for name in [*_user_modules(root), *(".".join(parts[:i]) for i in range(1, len(parts) + 1))]:
        sys.modules.pop(name, None)  # re-resolve with root first on sys.path (a same-named module may be loaded)
    importlib.invalidate_caches()
    if str(root) in sys.path:
        sys.path.remove(str(root))
    sys.path.insert(0, str(root))
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise SettingError(None, f"cannot import {module_name} (entry {entry}) from {root}: "
                           f"{type(exc).__name__}: {exc}", "the module is imported with the manifest's folder "
                           "first on sys.path") from exc
    factory = getattr(module, func_name, None)
    if not callable(factory):
        raise SettingError(None, f"{module_name} has no function {func_name} (entry {entry})",
                           f"define `def {func_name}(shapes): return module, example_inputs`")
    takes_shapes = bool(inspect.signature(factory).parameters)
    state = (random.getstate(), np.random.get_state())
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(SEED)
            random.seed(SEED)
            np.random.seed(SEED)
            made = factory({k: list(v) for k, v in shapes.items()}) if takes_shapes else factory()
    except Exception as exc:
        raise SettingError(None, f"{entry}({dict(shapes)}) raised {type(exc).__name__}: {exc}") from exc
    finally:
        random.setstate(state[0])
        np.random.set_state(state[1])
    model, example = (made if isinstance(made, tuple) and len(made) == 2 else (made, None))
    if not isinstance(model, torch.nn.Module):
        raise SettingError(None, f"{entry} returned {type(model).__name__}, not a torch.nn.Module",
                           "return the module, or (module, {input name: example tensor})")
    if example is not None and not (isinstance(example, Mapping) and
                                    all(isinstance(v, torch.Tensor) for v in example.values())):
        raise SettingError(None, f"{entry}: example inputs must be a dict of input name -> tensor",
                           "return (module, {input name: example tensor})")
    found = set(_user_modules(root).values())
    if (own := getattr(module, "__file__", None)) is not None:
        found.add(Path(own).resolve())  # the entry's own file, even when installed elsewhere
    return LoadedModel(model, dict(example) if example is not None else None, sorted(found), entry)


def load_exported(path: Path) -> LoadedModel:
    """A torch.export program saved with ``torch.export.save`` (weights inside the file)."""
    torch = _torch()
    try:
        program = torch.export.load(str(path))
    except Exception as exc:
        raise SettingError(None, f"{path} is not a torch.export program: {type(exc).__name__}: {exc}",
                           "save one with torch.export.save(torch.export.export(model, args), 'model.pt2')"
                           ) from exc
    inner = program.module()
    names = forward_names(inner) or []
    return LoadedModel(_by_keyword(torch)(inner, names), None, [], str(path))


def _by_keyword(torch: Any) -> Any:
    class ByKeyword(torch.nn.Module):  # type: ignore[misc,name-defined]
        """Calls an exported program's module, which takes its inputs by position, with keyword inputs."""

        def __init__(self, inner: Any, names: list[str]) -> None:
            super().__init__()
            self.inner = inner
            self.input_names = names

        def forward(self, **inputs: Any) -> Any:
            return self.inner(*(inputs[n] for n in self.input_names))

    return ByKeyword


def load_model(spec: BuildSpec) -> LoadedModel:
    if spec.entry:
        return load_entry(spec.entry, Path(spec.model_path), spec.opt_shapes)
    return load_exported(Path(spec.model_path))


def forward_names(module: Any) -> list[str] | None:
    """The parameter names forward takes by keyword, or None when it takes ``**kwargs``/``*args`` only."""
    if isinstance(getattr(module, "input_names", None), list):
        return list(module.input_names)
    try:
        params = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return None
    names = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if not names:
        return None
    return names


def check_inputs(loaded: LoadedModel, profile_inputs: list[str], shapes: Mapping[str, list[int]],
                 dtypes: Mapping[str, str] | None = None) -> None:
    """The profile's input names must be forward's parameters; example inputs must match the profile, and
    an integer example input the manifest's ``inputs:`` dtype (float noise is never fed to an index)."""
    names = forward_names(loaded.module)
    if names is not None:
        unknown = [n for n in profile_inputs if n not in names]
        if unknown:
            raise InputMismatch(f"{loaded.source}: forward({', '.join(names)}) takes no input named "
                               f"{', '.join(unknown)}", "name the shape profile's inputs after forward's "
                               "parameters")
    if loaded.example is not None:
        if sorted(loaded.example) != sorted(profile_inputs):
            raise InputMismatch(f"{loaded.source}: example inputs {sorted(loaded.example)} differ from the "
                               f"shape profile's inputs {sorted(profile_inputs)}")
        for name, tensor in loaded.example.items():
            if list(tensor.shape) != list(shapes[name]):
                raise InputMismatch(f"{loaded.source}: example input {name} has shape {list(tensor.shape)}, "
                                   f"the shape profile says {list(shapes[name])}",
                                   "return example inputs of the profile's shapes (the factory gets them)")
        for name, tensor in loaded.example.items():
            given = (dtypes or {}).get(name)
            have = str(tensor.dtype).removeprefix("torch.")
            if given is not None and given != have and (have.startswith(("int", "uint", "bool")) or
                                                         given.startswith(("int", "uint", "bool"))):
                raise InputMismatch(f"{loaded.source}: example input {name} is {have}, the manifest's inputs give "
                                    f"{given}", f"set models.<model>.inputs.{name}.dtype: {have} (with low/high "
                                    "for an integer input)")


def _sha_tensor(h: Any, tensor: Any) -> None:
    t = tensor.detach().to("cpu").contiguous()
    h.update(f"{t.dtype}:{list(t.shape)}:".encode())
    if t.numel():
        h.update(t.view(-1).view(_torch().uint8).numpy().tobytes())


def state_digest(module: Any) -> str:
    """sha256 over every parameter and buffer (persistent or not): names, dtypes, shapes and bytes."""
    h = hashlib.sha256()
    for kind, items in (("param", module.named_parameters(remove_duplicate=False)),
                        ("buffer", module.named_buffers(remove_duplicate=False))):
        for name, tensor in items:
            h.update(f"{kind}:{name}:".encode())
            _sha_tensor(h, tensor)
    return h.hexdigest()


def entry_digest(spec: BuildSpec) -> str:
    """The digest of an entry model at ``spec``'s shapes; the factory runs twice and must agree with itself."""
    root = Path(spec.model_path).resolve()
    first = load_entry(spec.entry, root, spec.opt_shapes)
    check_inputs(first, sorted(spec.profile), spec.opt_shapes,
                 {name: str(info.get("dtype")) for name, info in spec.inputs.items() if info.get("dtype")})
    weights = state_digest(first.module)
    again = state_digest(load_entry(spec.entry, root, spec.opt_shapes).module)
    if again != weights:
        raise SettingError(None, f"{spec.entry} returns different weights on each call, so no digest can "
                           "identify the model", "make the factory deterministic (it runs under "
                           f"torch.manual_seed({SEED}); load weights from a file or avoid other random sources)")
    code = {(p.relative_to(root).as_posix() if _under(str(p), root) else str(p)): canonical.file_sha256(p)
            for p in first.files}
    example = ({n: [str(t.dtype), list(t.shape)] for n, t in sorted(first.example.items())}
               if first.example is not None else None)
    return canonical.digest({"entry": spec.entry, "code": code, "weights": weights, "example": example,
                             "module": f"{type(first.module).__module__}.{type(first.module).__qualname__}"}, 32)


def prepare_module(module: Any, device: str, dtype: str, channels_last: bool = False) -> Any:
    """The module in inference mode on ``device`` in ``dtype`` (an exported program's module has no eval());
    ``channels_last`` (the model knob): its 4-D parameters and buffers in channels_last memory format."""
    with contextlib.suppress(NotImplementedError):  # torch.export's module: already in inference form
        module.eval()
    module = module.to(device=device, dtype=torch_dtype(dtype))
    if channels_last:
        module = module.to(memory_format=_torch().channels_last)
    return module


def torch_dtype(name: str) -> Any:
    return getattr(_torch(), _DTYPES[name])


def example_inputs(loaded: LoadedModel, spec: BuildSpec, dtype: str, device: str,
                   channels_last: bool = False) -> dict[str, Any]:
    """Inputs to trace with: the factory's examples, else seeded ones from the manifest's input specs."""
    torch = _torch()
    if loaded.example is not None:
        raw = dict(loaded.example)
    else:
        rng = np.random.default_rng(SEED)
        raw = {}
        for name in sorted(spec.profile):
            info = spec.inputs.get(name, {})
            shape = list(spec.profile[name]["opt"])
            kind = str(info.get("dtype", "float32"))
            low, high = float(info.get("low", -1.0)), float(info.get("high", 1.0))
            if kind in ("int64", "int32"):
                arr: np.ndarray = rng.integers(int(low), max(int(high), int(low) + 1), size=shape).astype(kind)
            elif kind == "bool":
                arr = rng.random(size=shape) < 0.5
            else:
                arr = rng.uniform(low, high, size=shape).astype(np.float32)
            raw[name] = torch.from_numpy(arr)
    return {n: cast_input(t, dtype, device, channels_last) for n, t in raw.items()}


def cast_input(tensor: Any, dtype: str, device: str, channels_last: bool = False) -> Any:
    """To ``device``; floating tensors to the model's dtype (integer and bool inputs keep theirs), and with
    ``channels_last`` (the model knob) 4-D floating tensors in channels_last memory format."""
    torch = _torch()
    if not isinstance(tensor, torch.Tensor):
        tensor = torch.from_numpy(np.ascontiguousarray(tensor))
    if tensor.is_floating_point():
        tensor = tensor.to(device=device, dtype=torch_dtype(dtype))
        if channels_last and tensor.dim() == 4:
            tensor = tensor.contiguous(memory_format=torch.channels_last)
        return tensor
    return tensor.to(device=device)


def flatten_outputs(value: Any, prefix: str = "output") -> dict[str, Any]:
    """Outputs by name: a tensor is "output"; tuples/lists "output0", "output1"...; dicts by key."""
    torch = _torch()
    if isinstance(value, torch.Tensor):
        return {prefix: value}
    out: dict[str, Any] = {}
    top = prefix == "output"
    if isinstance(value, Mapping):
        for key, item in value.items():
            out.update(flatten_outputs(item, str(key) if top else f"{prefix}.{key}"))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            out.update(flatten_outputs(item, f"{prefix}{i}" if top else f"{prefix}.{i}"))
    elif value is not None:
        raise TypeError(f"model output of type {type(value).__name__} is neither a tensor nor a container")
    return out


def to_numpy(outputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Named outputs as float32 (floating) or native (integer/bool) numpy arrays, copied to the host."""
    out: dict[str, np.ndarray] = {}
    for name, t in outputs.items():
        t = t.detach()
        out[name] = (t.float() if t.is_floating_point() else t).cpu().numpy().copy()
    return out


def check_low_precision(name: str, low: np.ndarray, ref: np.ndarray, dtype: str) -> None:
    """ReferenceOverflow when the eager model in ``dtype`` cannot reproduce float32's output ``name``: values
    that overflow to inf, or most of them flushed to zero (float16's smallest value is 6e-8), so no route in
    that dtype could pass any tolerance."""
    bad = int(np.count_nonzero(~np.isfinite(low) & np.isfinite(ref)))
    if bad:
        raise ReferenceOverflow(
            f"the eager {dtype} reference itself overflows: output {name} has {bad} non-finite value(s) where "
            f"float32 has none, so every route would fail",
            "run this model in bfloat16 or float32, or scale the inputs (manifest 'inputs')")
    zeros = int(np.count_nonzero((low == 0) & (ref != 0)))
    if zeros * 2 > ref.size:
        largest = float(np.abs(ref[np.isfinite(ref)]).max(initial=0.0))
        raise ReferenceOverflow(
            f"the eager {dtype} model underflows: output {name} has {zeros} of {ref.size} value(s) that are 0 in "
            f"{dtype} and not in float32 (the largest is {largest:.1e} in float32), so every route in {dtype} "
            f"would fail any tolerance", "run this model in float32, or in bfloat16 (float32's range)")


class ReferenceOverflow(TrtRoutesError):
    """The model overflows in its own dtype even in eager mode: every route would fail, so the
    reference is reported as broken instead of failing each trial."""
