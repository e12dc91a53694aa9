"""The manifest checked against its models (no builds): shape profiles and ``inputs:`` against each ONNX model's
graph inputs (names, ranks, static and symbolic dims, dtypes), integer ranges that hold no value (the schema
refuses dims <= 0 and inverted ranges), and a tolerance's per-output checks against the graph's outputs. Every
problem points at ``tuning.yaml:LINE:COL``; all are reported at once."""

from __future__ import annotations

import difflib
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trt_routes.errors import ManifestError
from trt_routes.files.model_files import ModelFiles
from trt_routes.manifest.load import LoadedManifest
from trt_routes.manifest.problems import ManifestProblems, render_snippet
from trt_routes.manifest.schema import DimRange, Model, ReferenceFiles

INTEGER = ("int64", "int32", "int16", "int8", "uint8", "uint16", "uint32", "uint64")
POINTS = ("min", "opt", "max")


def check_models(loaded: LoadedManifest, files: Mapping[str, ModelFiles]) -> None:
    """Raise one ManifestError (or a ManifestProblems) for every mistake; ``files``: model name -> its files
    (models without an ONNX graph, and entry points, are checked for the model-independent mistakes only)."""
    problems: list[ManifestError] = []
    for mname, model in loaded.manifest.models.items():
        problems += _Check(loaded, mname, model, files.get(mname)).run()
    problems.sort(key=lambda p: (p.line or 0, p.column or 0))
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise ManifestProblems(problems)


class _Check:
    def __init__(self, loaded: LoadedManifest, mname: str, model: Model, files: ModelFiles | None) -> None:
        self.loaded, self.mname, self.model = loaded, mname, model
        self.graph = {t.name: t for t in files.inputs} if files is not None and files.inputs is not None else None
        self.outputs = [t.name for t in files.outputs] if files is not None and files.outputs is not None else None
        self.file = files.path.name if files is not None else ""
        self.limits = files.index_limits if files is not None else {}
        self.problems: list[ManifestError] = []

    def fail(self, where: tuple[str | int, ...], message: str, hint: str | None = None, *,
             at_key: bool = False) -> None:
        """A problem at ``models.<model>.<where>``'s value, or its key (``at_key``: for a key that is wrong)."""
        path = ("models", self.mname, *where)
        error = self.loaded.error(path, f"model '{self.mname}': {message}", hint)
        key = self.loaded.key_positions.get(path) if at_key else None
        if key is not None:
            error = ManifestError(error.message, hint, path=error.path, line=key[0], column=key[1],
                                  snippet=render_snippet(self.loaded.text, key[0], key[1], len(str(path[-1]))))
        self.problems.append(error)

    def run(self) -> list[ManifestError]:
        for sname, shapes in self.model.shapes.items():
            for name, spec in shapes.items():
                self.dims(sname, name, spec)
            self.profile(sname, shapes)
        for name, given in self.model.inputs.items():
            self.input_spec(name, given.dtype, given.low, given.high, given.shape_tensor)
        self.integers()
        self.tolerance_outputs()
        if isinstance(self.model.reference, ReferenceFiles):
            self.reference_files(self.model.reference)
        return self.problems

    def reference_files(self, ref: ReferenceFiles) -> None:
        """Reference .npz files exist, are archives of plain arrays (never pickled objects), and hold the graph's
        inputs (names, dtypes, ranks) and outputs by name: found here, not after apply has written files."""
        fix = "write it with numpy.savez(path, <name>=array, ...): one array per graph input (or output)"
        for key, text, names in (("inputs", ref.inputs, self.graph), ("outputs", ref.outputs, self.outputs)):
            path = self.loaded.resolve(text)
            if not path.is_file():
                self.fail(("reference", key), f"reference file not found: {path}", fix)
                continue
            try:
                arrays = npz_headers(path)
            except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
                self.fail(("reference", key), f"{path.name} is not a .npz archive of arrays ({exc})", fix)
                continue
            pickled = sorted(n for n, (dtype, _) in arrays.items() if dtype.hasobject)
            if pickled:
                self.fail(("reference", key), f"{path.name} holds Python objects ({', '.join(pickled)}): "
                          "trt-routes never unpickles", "save numeric arrays only (numpy.savez, no dtype=object)")
                continue
            if names is None:
                continue
            wanted = list(names)
            missing = [n for n in wanted if n not in arrays]
            unknown = sorted(n for n in arrays if n not in wanted)
            if missing or unknown:
                self.fail(("reference", key), f"{path.name} must hold the model's {key} by name: "
                          + "; ".join(part for part in (
                              f"missing {', '.join(missing)}" if missing else "",
                              f"not {key} of {self.file}: {', '.join(unknown)}" if unknown else "") if part),
                          f"the {key} of {self.file}: {', '.join(wanted)}")
                continue
            if key == "inputs" and self.graph is not None:
                for name, (dtype, shape) in arrays.items():
                    info = self.graph[name]
                    if str(dtype) != info.dtype or (info.dims is not None and len(shape) != len(info.dims)):
                        self.fail(("reference", key), f"{path.name}: input '{name}' is {dtype} of shape "
                                  f"{list(shape)}, the graph's is {info.dtype} of rank "
                                  f"{'?' if info.dims is None else len(info.dims)}",
                                  f"save '{name}' as {info.dtype} with the graph's rank")

    def tolerance_outputs(self) -> None:
        """A tolerance's per-output checks name outputs of the graph: a typo there would gate nothing at
        validate and fail every route at apply."""
        manifest = self.loaded.manifest
        tname = manifest.effective(self.mname).tolerance
        tolerance = manifest.tolerances.get(tname) if tname else None
        if self.outputs is None or tolerance is None or tname is None:
            return
        for oname in tolerance.outputs:
            if oname in self.outputs:
                continue
            path = ("tolerances", tname, "outputs", oname)
            close = [o for o in self.outputs if o.lower() == oname.lower()] or \
                difflib.get_close_matches(oname, self.outputs, n=1)
            hint = f"did you mean '{close[0]}'?" if close else "name one of the model's outputs, or remove it"
            error = self.loaded.error(path, f"tolerance '{tname}' names output '{oname}', which model "
                                      f"'{self.mname}' ({self.file}) does not have (its outputs: "
                                      f"{', '.join(self.outputs)})", hint)
            key = self.loaded.key_positions.get(path)
            if key is not None:
                error = ManifestError(error.message, hint, path=error.path, line=key[0], column=key[1],
                                      snippet=render_snippet(self.loaded.text, key[0], key[1], len(oname)))
            self.problems.append(error)

    def _inputs_text(self) -> str:
        assert self.graph is not None
        return ", ".join(f"{t.name} {t.dtype}{_dims_text(t.dims)}" for t in self.graph.values()) or "none"

    def _unknown(self, where: tuple[str | int, ...], name: str, what: str) -> None:
        assert self.graph is not None
        close = difflib.get_close_matches(name, list(self.graph), n=1)
        self.fail(where, f"{what} '{name}', which is not an input of {self.file} (its inputs: "
                  f"{self._inputs_text()})", f"did you mean '{close[0]}'?" if close else "use the model's input names",
                  at_key=True)

    def dims(self, sname: str, name: str, spec: list[int] | DimRange) -> None:
        where = ("shapes", sname, name)
        points = {p: list(getattr(spec, p)) for p in POINTS} if isinstance(spec, DimRange) else {"": list(spec)}
        if self.graph is None:
            return
        info = self.graph.get(name)
        if info is None:
            self._unknown(where, name, f"profile '{sname}' names")
            return
        if info.dims is None:
            return
        spec_in = self.model.inputs.get(name)
        if spec_in is not None and spec_in.shape_tensor:  # the profile gives its values: one per element
            count = len(next(iter(points.values())))
            if len(info.dims) > 1 or (info.dims and isinstance(info.dims[0], int) and info.dims[0] != count):
                self.fail(where, f"shape tensor '{name}' is {_dims_text(info.dims)} in {self.file}: profile "
                          f"'{sname}' gives {count} value(s)",
                          "give one value per element of the shape tensor (a shape tensor has rank 0 or 1)",
                          at_key=True)
            return
        rank = len(next(iter(points.values())))
        if rank != len(info.dims):
            self.fail(where, f"input '{name}' has rank {len(info.dims)} in {self.file} "
                      f"({_dims_text(info.dims)}), profile '{sname}' gives rank {rank}",
                      f"give {len(info.dims)} dimensions", at_key=True)
            return
        for axis, want in enumerate(info.dims):
            if not isinstance(want, int):
                continue
            for point, dims in points.items():
                if dims[axis] != want:
                    label = f"{point} " if point else ""
                    self.fail((*where, point, axis) if point else (*where, axis),
                              f"input '{name}' has the static dimension {want} at axis {axis} in {self.file} "
                              f"({_dims_text(info.dims)}), profile '{sname}' gives {label}{dims[axis]}",
                              f"the model only takes {want} there; only its symbolic dimensions can vary")
                    return

    def profile(self, sname: str, shapes: Mapping[str, list[int] | DimRange]) -> None:
        if self.graph is None:
            return
        missing = [t for t in self.graph.values() if t.name not in shapes]
        if missing:
            self.fail(("shapes", sname), f"profile '{sname}' gives no shape for input(s) "
                      + ", ".join(f"'{t.name}' {t.dtype}{_dims_text(t.dims)}" for t in missing),
                      "every input of the model needs a shape in each profile", at_key=True)
        # a symbolic dimension is one size for the whole graph: inputs sharing it must agree
        seen: dict[tuple[str, str], tuple[str, int]] = {}
        for name, spec in shapes.items():
            info = self.graph.get(name)
            if info is None or info.dims is None or len(info.dims) != len(_point(spec, "opt")):
                continue
            if name in self.model.inputs and self.model.inputs[name].shape_tensor:
                continue  # its profile entry holds values, not dimensions
            for axis, dim in enumerate(info.dims):
                if not isinstance(dim, str):
                    continue
                for point in POINTS:
                    size = _point(spec, point)[axis]
                    first = seen.setdefault((dim, point), (name, size))
                    if first[1] != size:
                        self.fail(("shapes", sname, name), f"inputs '{first[0]}' and '{name}' share the dimension "
                                  f"'{dim}' but profile '{sname}' gives it {first[1]} and {size}"
                                  + (f" at {point}" if isinstance(spec, DimRange) else ""),
                                  f"give '{dim}' one size in both", at_key=True)
                        return

    def input_spec(self, name: str, dtype: str, low: float, high: float, shape_tensor: bool = False) -> None:
        where = ("inputs", name)
        if self.graph is not None:
            info = self.graph.get(name)
            if info is None:
                self._unknown(where, name, "'inputs:' names")
                return
            if info.dtype != dtype and info.dtype in (*INTEGER, "float32", "float16", "float64", "bool"):
                self.fail((*where, "dtype"), f"input '{name}' is {info.dtype} in {self.file}, the manifest says "
                          f"dtype: {dtype}", f"write dtype: {info.dtype}" if info.dtype in _DTYPES else None)
        if dtype == "bool" or shape_tensor:  # a shape tensor is fed its profile's values, not a range
            return
        if low > high:  # the schema refuses it; here only the ranges that hold no value
            return
        if dtype in INTEGER and int(high) <= int(low):
            self.fail((*where, "high"), f"input '{name}': the integer range [{low:g}, {high:g}) is empty "
                      "(high is exclusive)", f"for example low: {int(low)}, high: {int(low) + 2}")
        elif dtype in INTEGER and name in self.limits and int(high) > self.limits[name][0]:
            size, why = self.limits[name]
            self.fail((*where, "high"), f"input '{name}': high {high:g} is beyond the table it {why}: ids from "
                      f"{size} on make the model's Gather fail", f"write high: {size} (high is exclusive)")
        elif low == high:
            self.fail((*where, "high"), f"input '{name}': the range [{low:g}, {high:g}) is empty",
                      "give high above low")

    def integers(self) -> None:
        """Integer (and bool) inputs need their values said: token ids beyond the vocabulary, or float noise cast
        to ints, tune a model on inputs it never sees."""
        if self.graph is None or isinstance(self.model.reference, ReferenceFiles):
            return
        for info in self.graph.values():
            if info.name in self.model.inputs or (info.dtype not in INTEGER and info.dtype != "bool"):
                continue
            example = ("{dtype: bool}" if info.dtype == "bool" else
                       f"{{dtype: {info.dtype}, low: 0, high: 1000}}")
            self.fail(("inputs",) if self.model.inputs else (),
                      f"input '{info.name}' is {info.dtype}: its values must be given, not generated as float noise",
                      (f"add '{info.name}: {example}' under 'inputs:'" if self.model.inputs else
                       f"add 'inputs: {{{info.name}: {example}}}'") + " with the valid range (high exclusive; e.g. "
                      "the vocabulary size for token ids), or give reference files", at_key=True)


def npz_headers(path: Path) -> dict[str, tuple[Any, tuple[int, ...]]]:
    """Array name -> (dtype, shape) of a .npz archive, from each member's header alone (no array is read, nothing
    unpickled)."""
    import numpy as np  # only for a manifest with reference files

    out: dict[str, tuple[Any, tuple[int, ...]]] = {}
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            with archive.open(info) as member:
                version = np.lib.format.read_magic(member)
                read = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                    np.lib.format.read_array_header_2_0
                shape, _fortran, dtype = read(member)
            out[info.filename.removesuffix(".npy")] = (dtype, tuple(shape))
    return out


_DTYPES = ("float32", "float16", "int64", "int32", "bool")


def _point(spec: list[int] | DimRange, point: str) -> list[int]:
    return list(getattr(spec, point)) if isinstance(spec, DimRange) else list(spec)


def _dims_text(dims: tuple[int | str | None, ...] | None) -> str:
    if dims is None:
        return ""
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"

