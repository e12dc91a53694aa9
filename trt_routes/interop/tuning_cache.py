"""Read trtexec ``--tuningCacheFile`` and Torch-TensorRT per-partition tuning caches (JSON Lines).

Pure parsing into dataclasses: no database, no guessing. Header fields we know are mapped, everything
else is kept in ``unknown``. Status mapping, from the writers' documented behaviour (TENSORRT.md and the
trtexec / Torch-TensorRT sources): both record a failed build, a signal or a missing result as
``crash=true`` (so those rows import as ``crashed``: the file cannot tell a build error from a crash),
and a non-empty ``error_message`` with ``crash=false`` only after the engine was built and run, when
its accuracy exceeded the threshold (``accuracy-failed``), except Torch-TensorRT's "non-finite gpu_time: ..."
(a time it could not measure: ``crashed``, like a row without a usable time). A row that claims success but carries a
non-finite loss is ``accuracy-failed`` too: trtexec's l0 and lInf let NaN through. A row that claims
success without a usable time is ``crashed``: trtexec writes ``gpu_time`` 0 when its child produced no
timing trace (samples/trtexec/trtexec.cpp, ``meanGpuTimeMs{0.0}``) and nlohmann::json writes NaN as null,
so 0, null, negative or non-finite times mean the iteration was not measured, and such a row must never
win (trtexec's own ``<`` lets a 0 win)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trt_routes.catalog import Catalog
from trt_routes.errors import RouteError, TrtRoutesError
from trt_routes.evidence import TrialStatus
from trt_routes.text import NotRegularFileError, read_regular

#: How Torch-TensorRT's tuner words a row whose time was not finite (``error_message = f"non-finite gpu_time:
#: {gpu_time}"``, gpu_time set to None, crashed left false): a failed measurement, not an accuracy failure.
NOT_MEASURED = "non-finite gpu_time"

#: Accuracy algorithm names, case-insensitive, as written by trtexec (``getAlgorithmName``: L0, L1, L2, LInf,
#: Cosine) or Torch-TensorRT (the user's spelling, which its ``compute_tensor_loss`` takes as l0, l1, l2,
#: linf or linfinity, cos or cosine).
METRICS: dict[str, str] = {
    "l0": "l0",
    "l1": "l1",
    "l2": "l2",
    "linf": "lInf",
    "linfinity": "lInf",
    "cosine": "cos",
    "cos": "cos",
}
#: trtexec's ``getAlgorithmName`` writes "Unknown" for an algorithm it has no name for: no metric known.
NO_METRIC = ("unknown",)

HEADER_KEYS = (
    "tuner_version",
    "accuracy_algorithm",
    "accuracy_parameter",
    "searching_algorithm",
    "command_line",
    "default_build_route",
    "tuning_expr",
    "files",
    "argv",
    "partition_key",
)
ROW_KEYS = ("iter", "build_route", "crash", "error_message", "accuracy_loss", "gpu_time")
SOURCES = ("trtexec", "torch-tensorrt")


class TuningCacheFormatError(TrtRoutesError):
    """A tuning cache file is not in the documented format; names the file and line."""

    def __init__(
        self, message: str, hint: str | None = None, *, path: str = "", line: int | None = None
    ) -> None:
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}" if where else message, hint)
        self.path = path
        self.line = line


@dataclass(frozen=True)
class ImportedHeader:
    """Line 1 of a tuning cache."""

    source: str  # "trtexec" or "torch-tensorrt"
    tuner_version: str
    accuracy_algorithm: str  # as written
    metric: str | None  # ours (l0, l1, l2, lInf, cos); None when absent
    atol: float | None
    rtol: float | None
    threshold: float | None  # accuracy_parameter.epsilon: a route fails when loss >= threshold
    searching_algorithm: str
    command_line: str
    default_build_route: str
    tuning_expr: str
    files: dict[str, Any]
    argv: tuple[str, ...] | None  # trtexec only
    partition_key: str | None  # Torch-TensorRT only
    time_statistic: str  # "mean" (trtexec) or "median of 10 runs" (Torch-TensorRT)
    unknown: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ImportedRow:
    """One iteration: one route built (or not) and measured."""

    line: int
    iter: int
    build_route: str  # as written
    route: str  # canonical: catalog defaults (or the header's default route) dropped, sorted
    status: TrialStatus  # ok, crashed or accuracy-failed
    crash: bool
    error_message: str
    accuracy_loss: dict[str, float | None] | None  # None where the writer wrote a non-number
    gpu_time_ms: float | None
    note: str = ""  # why the status differs from the raw flags, if it does
    unknown: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ImportedCache:
    """A whole tuning cache file."""

    path: str
    header: ImportedHeader
    rows: tuple[ImportedRow, ...]

    def fastest_ok(self) -> ImportedRow | None:
        """The fastest row imported as ``ok``, by trtexec's rule (strict ``<``, first wins).

        Unlike trtexec, rows whose loss is non-finite are not ``ok`` and cannot win."""
        best: ImportedRow | None = None
        for row in self.rows:
            if (
                row.status == TrialStatus.OK
                and row.gpu_time_ms is not None
                and row.gpu_time_ms > 0
                and (
                    best is None or row.gpu_time_ms < best.gpu_time_ms  # type: ignore[operator]
                )
            ):
                best = row
        return best

    def tuner_mismatch(self, catalog: Catalog) -> str | None:
        """Why these rows do not belong to ``catalog``'s tuner, or None when the versions agree."""
        if (
            self.header.tuner_version
            and catalog.tuner_version
            and self.header.tuner_version != catalog.tuner_version
        ):
            return (
                f"{self.path} was written by tuner {self.header.tuner_version}, "
                f"this catalog is tuner {catalog.tuner_version}"
            )
        return None


# -- helpers -------------------------------------------------------------------------------------------
def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _route_tokens(text: str) -> dict[str, str]:
    from trt_routes.routes import parse_route

    return parse_route(text)


def canonical_route(build_route: str, catalog: Catalog | None, defaults: Mapping[str, str]) -> str:
    """The canonical form of a route read from a file: knobs at their default dropped, the rest sorted.

    With a catalog: every knob must be in it and every value one TensorRT's tuner takes (an open knob
    takes any fixed value, as in trtexec), integers written as ``trt_routes.routes.canonical`` writes
    them. Without one: knobs at the value of the header's ``default_build_route`` dropped."""
    from trt_routes.backends.tensorrt.catalog import route_problems, without_defaults
    from trt_routes.routes import parse_route

    assign = parse_route(build_route)
    if catalog is not None:
        problems = route_problems(assign, catalog)
        if problems:
            raise RouteError("; ".join(problems))
        kept = without_defaults(assign, catalog)
    else:
        kept = {k: v for k, v in assign.items() if defaults.get(k) != v}
    return " ".join(f"{k}={kept[k]}" for k in sorted(kept))


def _header(obj: dict[str, Any], source: str, err: Any) -> ImportedHeader:
    def text(key: str) -> str:
        value = obj.get(key, "")
        if not isinstance(value, str):
            raise err(f"header field '{key}' must be a string, got {type(value).__name__}")
        return value

    if source == "auto":
        if "argv" in obj:
            source = "trtexec"
        elif "partition_key" in obj:
            source = "torch-tensorrt"
        else:
            raise err(
                "the header has neither 'argv' (trtexec) nor 'partition_key' (Torch-TensorRT)",
                "pass source='trtexec' or source='torch-tensorrt'",
            )
    if source not in SOURCES:
        raise err(f"unknown source '{source}'", f"one of: {', '.join(SOURCES)}")
    params = obj.get("accuracy_parameter") or {}
    if not isinstance(params, dict):
        raise err("header field 'accuracy_parameter' must be an object {atol, rtol, epsilon}")
    numbers: dict[str, float | None] = {}
    for key in ("atol", "rtol", "epsilon"):
        value = params.get(key)
        if value is not None and _number(value) is None:
            raise err(f"accuracy_parameter.{key} must be a number or null, got {value!r}")
        numbers[key] = _number(value)
    algorithm = text("accuracy_algorithm")
    metric = METRICS.get(algorithm.lower()) if algorithm else None
    if algorithm and metric is None and algorithm.lower() not in NO_METRIC:
        raise err(
            f"unknown accuracy_algorithm '{algorithm}'",
            "trtexec writes L0, L1, L2, LInf, Cosine or Unknown; Torch-TensorRT l0, l1, l2, linf, linfinity, cos",
        )
    files = obj.get("files", {})
    if not isinstance(files, dict):
        raise err("header field 'files' must be an object")
    argv = obj.get("argv")
    if argv is not None and not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)):
        raise err("header field 'argv' must be a list of strings")
    partition = obj.get("partition_key")
    if partition is not None and not isinstance(partition, str):
        raise err("header field 'partition_key' must be a string")
    unknown = {k: v for k, v in obj.items() if k not in HEADER_KEYS}
    extra_params = {k: v for k, v in params.items() if k not in ("atol", "rtol", "epsilon")}
    if extra_params:
        unknown["accuracy_parameter"] = extra_params
    return ImportedHeader(
        source=source,
        tuner_version=text("tuner_version"),
        accuracy_algorithm=algorithm,
        metric=metric,
        atol=numbers["atol"],
        rtol=numbers["rtol"],
        threshold=numbers["epsilon"],
        searching_algorithm=text("searching_algorithm"),
        command_line=text("command_line"),
        default_build_route=text("default_build_route"),
        tuning_expr=text("tuning_expr"),
        files=dict(files),
        argv=tuple(argv) if argv is not None else None,
        partition_key=partition,
        time_statistic="mean" if source == "trtexec" else "median of 10 runs",
        unknown=unknown,
    )


def _row(
    obj: dict[str, Any], number: int, catalog: Catalog | None, defaults: Mapping[str, str], err: Any
) -> ImportedRow:
    missing = [k for k in ("iter", "build_route", "crash") if k not in obj]
    if missing:
        raise err(f"row lacks {', '.join(missing)}", f"rows have the keys {', '.join(ROW_KEYS)}")
    iteration, route_text, crash = obj["iter"], obj["build_route"], obj["crash"]
    if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 0:
        raise err(f"'iter' must be a non-negative integer, got {iteration!r}")
    if not isinstance(route_text, str):
        raise err(f"'build_route' must be a string, got {route_text!r}")
    if not isinstance(crash, bool):
        raise err(f"'crash' must be true or false, got {crash!r}")
    message = obj.get("error_message", "")
    if not isinstance(message, str):
        raise err(f"'error_message' must be a string, got {message!r}")
    raw_loss = obj.get("accuracy_loss")
    if raw_loss is not None and not isinstance(raw_loss, dict):
        raise err(f"'accuracy_loss' must be an object {{output: loss}} or null, got {raw_loss!r}")
    losses: dict[str, float | None] | None = None
    if raw_loss is not None:
        losses = {}
        for name, value in raw_loss.items():
            if value is not None and _number(value) is None:
                raise err(f"accuracy_loss['{name}'] must be a number, got {value!r}")
            losses[name] = _number(value)
    raw_time = obj.get("gpu_time")
    if raw_time is not None and _number(raw_time) is None:
        raise err(f"'gpu_time' must be a number of ms or null, got {raw_time!r}")
    gpu_time = _number(raw_time)
    try:
        route = canonical_route(route_text, catalog, defaults)
    except RouteError as exc:
        raise err(
            f"build_route {route_text!r} does not fit: {exc.message}",
            "was the file written by another TensorRT version than the catalog's?",
        ) from exc
    notes: list[str] = []
    timed = gpu_time is not None and math.isfinite(gpu_time) and gpu_time > 0
    if crash:
        status = TrialStatus.CRASHED
    elif message.startswith(NOT_MEASURED):  # Torch-TensorRT's own words for a time it could not measure
        status = TrialStatus.CRASHED
        notes.append(f"the iteration was not measured ({message})")
    elif message:
        status = TrialStatus.ACCURACY_FAILED
    elif not timed:  # built and run, but not measured: no time can rank it
        status = TrialStatus.CRASHED
        notes.append(f"no usable gpu_time ({raw_time!r}): the iteration was not measured")
    else:
        status = TrialStatus.OK
        bad = sorted(name for name, value in (losses or {}).items() if not _finite(value))
        if bad:
            status = TrialStatus.ACCURACY_FAILED
            notes.append(f"non-finite accuracy loss for {', '.join(bad)}")
    if gpu_time is not None and not timed:
        if status == TrialStatus.ACCURACY_FAILED:
            notes.append(f"gpu_time {raw_time!r} dropped")
        gpu_time = None
    note = "; ".join(notes)
    return ImportedRow(
        line=number,
        iter=iteration,
        build_route=route_text,
        route=route,
        status=status,
        crash=crash,
        error_message=message,
        accuracy_loss=losses,
        gpu_time_ms=gpu_time,
        note=note,
        unknown={k: v for k, v in obj.items() if k not in ROW_KEYS},
    )


# -- public API ----------------------------------------------------------------------------------------
def parse_tuning_cache(
    text: str, *, path: str = "<string>", catalog: Catalog | None = None, source: str = "auto"
) -> ImportedCache:
    """Parse the text of a tuning cache. ``source`` is "auto" (trtexec if the header has argv,
    Torch-TensorRT if it has partition_key), "trtexec" or "torch-tensorrt". Blank lines are skipped."""
    header: ImportedHeader | None = None
    defaults: dict[str, str] = {}
    rows: list[ImportedRow] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue

        def err(message: str, hint: str | None = None, _n: int = number) -> TuningCacheFormatError:
            return TuningCacheFormatError(message, hint, path=path, line=_n)

        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise err(
                f"not a JSON object: {exc.msg} at column {exc.colno}",
                "each line of a tuning cache is one JSON object",
            ) from exc
        if not isinstance(obj, dict):
            raise err(f"expected a JSON object, got {type(obj).__name__}")
        if header is None:
            if "build_route" in obj and "iter" in obj:
                raise err("the first line is an iteration, not the header", "was the header line removed?")
            header = _header(obj, source, err)
            try:
                defaults = _route_tokens(header.default_build_route)
            except RouteError as exc:
                raise err(f"default_build_route does not parse: {exc.message}") from exc
            continue
        rows.append(_row(obj, number, catalog, defaults, err))
    if header is None:
        raise TuningCacheFormatError("empty tuning cache: no header line", path=path)
    return ImportedCache(path=path, header=header, rows=tuple(rows))


#: The largest tuning cache read (one row is ~300 bytes: 64 MB is ~200,000 tactic rows).
MAX_TUNING_CACHE_BYTES = 64 * 1024 * 1024


def read_tuning_cache(
    path: str | Path, *, catalog: Catalog | None = None, source: str = "auto"
) -> ImportedCache:
    """Read one tuning cache file (trtexec ``best_config.json`` style or one Torch-TensorRT partition)."""
    file = Path(path)
    try:
        raw = read_regular(file, MAX_TUNING_CACHE_BYTES)
    except NotRegularFileError as exc:
        raise TuningCacheFormatError(str(exc), path=str(file)) from None
    except OSError as exc:
        raise TuningCacheFormatError(f"cannot read: {exc.strerror or exc}", path=str(file)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TuningCacheFormatError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x}): not a tuning cache",
                                     "pass a bundle from `trt-routes cache export`, a trtexec tuning cache or "
                                     "a Torch-TensorRT partition file (JSON Lines)", path=str(file),
                                     line=raw[: exc.start].count(b"\n") + 1) from None
    return parse_tuning_cache(text, path=str(file), catalog=catalog, source=source)


def read_partition_caches(base: str | Path, *, catalog: Catalog | None = None) -> dict[str, ImportedCache]:
    """Torch-TensorRT's per-partition files ``<base>.<partition_key>.jsonl`` for a base path, by key.

    The key in each file name must match the header's ``partition_key``."""
    base = Path(base)
    suffix = base.suffix or ".jsonl"
    stem = base.name[: -len(base.suffix)] if base.suffix else base.name
    pattern = re.compile(rf"^{re.escape(stem)}\.([^./]+){re.escape(suffix)}$")
    found: dict[str, ImportedCache] = {}
    folder = base.parent
    for candidate in sorted(folder.iterdir()) if folder.is_dir() else []:
        match = pattern.match(candidate.name)
        if not match or not candidate.is_file():
            continue
        cache = read_tuning_cache(candidate, catalog=catalog, source="torch-tensorrt")
        if cache.header.partition_key != match.group(1):
            raise TuningCacheFormatError(
                f"file name says partition {match.group(1)}, header says {cache.header.partition_key!r}",
                path=str(candidate),
                line=1,
            )
        found[match.group(1)] = cache
    if not found:
        raise TuningCacheFormatError(f"no partition files {stem}.<key>{suffix} found", path=str(folder))
    return found
