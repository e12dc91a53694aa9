"""The JSON contract of every ``--json`` output: one versioned format per command, a JSON Schema (draft
2020-12) per format, and the one writer that makes a payload strict JSON.

Every document is one object whose ``format`` is ``trt-routes/<command>@<version>`` (``lock check`` is
``lock-check``). A float that is not finite (NaN, inf) is written as ``null`` and, inside an object, a sibling
``<key>_reason`` says what it was ("nan", "inf", "-inf"): strict parsers (``jq``, JavaScript) read every
document. A failure under ``--json`` is a ``trt-routes/error@1`` document with the exit code."""

from __future__ import annotations

import json
import math
from typing import Any

from trt_routes.errors import UsageError

VERSION = 1
DRAFT = "https://json-schema.org/draft/2020-12/schema"


def format_id(name: str) -> str:
    return f"trt-routes/{name}@{VERSION}"


# -- strict JSON ------------------------------------------------------------------------------------
#: canonical.normalize's spelling of non-finite floats, found in stored records (a lock's confirmation
#: record, an older lock): the same null and reason as the float itself
_SPELLED = {"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}


def _reason(x: Any) -> str | None:
    """What a non-finite number was ("nan", "inf", "-inf"); None for anything else."""
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return _SPELLED.get(x) if isinstance(x, str) else None


def strict(data: Any) -> Any:
    """``data`` with every non-finite number (a float, or canonical's string "Infinity"/"NaN") replaced by
    None (and ``<key>_reason`` beside it in objects), tuples as lists and non-JSON leaves as strings."""
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            key = str(k)
            if (why := _reason(v)) is not None:
                out[key] = None
                out[f"{key}_reason"] = why
            else:
                out[key] = strict(v)
        return out
    if isinstance(data, (list, tuple)):
        return [None if _reason(v) is not None else strict(v) for v in data]
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    return str(data)


def document(name: str, payload: dict[str, Any]) -> dict[str, Any]:
    """The payload of command ``name`` as its format's document (strict, ``format`` first)."""
    if name not in SCHEMAS:
        raise KeyError(f"no JSON format '{name}'")
    return {"format": format_id(name), **strict(payload)}


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n"


def _where(exc: BaseException) -> dict[str, Any]:
    return {"message": str(getattr(exc, "message", None) or getattr(exc, "format_message", lambda: str(exc))()),
            "file": getattr(exc, "path", None), "line": getattr(exc, "line", None),
            "column": getattr(exc, "column", None), "hint": getattr(exc, "hint", None)}


def error_document(exc: BaseException, code: int) -> dict[str, Any]:
    """A failure as a ``trt-routes/error@1`` document; manifest errors carry their file, line and column, and
    a manifest with several problems lists every one under ``problems`` (the first is also the top level)."""
    many = getattr(exc, "problems", None) or []
    return document("error", {"code": int(code), "error": type(exc).__name__, **_where(exc),
                              "problems": [_where(p) for p in many]})


# -- schemas ----------------------------------------------------------------------------------------
_STR = {"type": "string"}
_INT = {"type": "integer", "minimum": 0}
_NUM_OR_NULL = {"type": ["number", "null"]}
_STR_OR_NULL = {"type": ["string", "null"]}
_BOOL = {"type": "boolean"}
_STRS = {"type": "array", "items": _STR}
_OBJ = {"type": "object"}
_COUNTS = {"type": "object", "additionalProperties": _INT}


def _obj(required: dict[str, Any], optional: dict[str, Any] | None = None, *, closed: bool = False) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": {**required, **(optional or {})},
                              "required": sorted(required)}
    if closed:
        schema["additionalProperties"] = False
    return schema


def _list(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": item}


_SIDE = _obj({"median_ms": _NUM_OR_NULL, "layers_ms": {"type": "number"}, "wall_ms": _NUM_OR_NULL, "runs": _INT,
              "note": _STR}, closed=True)
_JOB_PLAN = _obj({"job": _STR, "action": {"enum": ["up-to-date", "tune", "reselect", "materialize", "blocked",
                                                   "skipped"]},
                  "reasons": _STRS, "to_build": _STRS, "reused": _INT, "pending": _STR_OR_NULL,
                  "candidates": _INT}, {"at_most": {"type": ["integer", "null"]}})
_PLAN = {"jobs": _list(_JOB_PLAN), "removed": _STRS, "counts": _COUNTS, "builds": _INT, "has_work": _BOOL}
_COUNT_OR_FLAG = {"anyOf": [_INT, _BOOL], "description": "trials (search) or whether the engine was (frozen)"}
_APPLY_JOB = _obj({"job": _STR}, {"action": _STR, "built": _COUNT_OR_FLAG, "reused": _COUNT_OR_FLAG,
                                  "error": _STR_OR_NULL,
                                  "lock": {"type": ["object", "null"]}, "route": _STR_OR_NULL})
_STATUS_ROW = _obj({"job": _STR, "state": {"enum": ["ok", "no-lock", "invalid-lock", "missing-engine",
                                                    "digest-mismatch", "stale", "not-in-cache", "blocked",
                                                    "orphan-lock"]},
                    "detail": _STR, "route": _STR_OR_NULL}, closed=True)
_KNOB = _obj({"option": _STR, "values": {"type": ["array", "null"]}, "default": {}, "help": _STR_OR_NULL,
              "phase": _STR})

# format name -> (one line of description, the payload's properties: (required, optional))
_FORMATS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "error": ("A failure: the exit code, the error class, its message and where it is (manifest errors).",
              {"code": {"type": "integer", "minimum": 1}, "error": _STR, "message": _STR, "file": _STR_OR_NULL,
               "line": {"type": ["integer", "null"]}, "column": {"type": ["integer", "null"]},
               "hint": _STR_OR_NULL,
               "problems": _list(_obj({"message": _STR, "file": _STR_OR_NULL, "line": {"type": ["integer", "null"]},
                                       "column": {"type": ["integer", "null"]}, "hint": _STR_OR_NULL},
                                      closed=True))}, {}),
    "validate": ("`validate`: the manifest is valid; its models and jobs, and the jobs that cannot run here.",
                 {"manifest": _STR, "ok": {"const": True}, "models": _INT,
                  "jobs": _list(_obj({"job": _STR, "backend": _STR, "blocked": _STR_OR_NULL}, closed=True))}, {}),
    "plan": ("`plan`: each job's action, its reasons and the routes to build.", _PLAN, {}),
    "apply": ("`apply` (also --dry-run and --frozen): what was built and locked, per job, and the exit code.",
              {"exit_code": _INT, "built": _INT, "dry_run": _BOOL, "frozen": _BOOL, "jobs": _list(_APPLY_JOB)},
              {"lock_written": _BOOL, "plan": _obj(_PLAN), "skipped": _list(_obj({"job": _STR, "reason": _STR})),
               "record": _STR_OR_NULL, "routes": {"type": "object", "additionalProperties": _STRS}}),
    "status": ("`status`: each job's lock against cache against engine on disk.",
               {"ok": _BOOL, "jobs": _list(_STATUS_ROW)}, {}),
    "explain": ("`explain JOB`: the decision, every trial with its verdict, provenance and lock history.",
                {"job": _STR, "rule": _STR_OR_NULL, "summary": _STR, "winner": _STR_OR_NULL,
                 "default_ms": _NUM_OR_NULL, "chosen_ms": _NUM_OR_NULL, "trials": _list(_OBJ)}, {}),
    "layers": ("`explain JOB --layers`: the default route against the winner (or the closest challenger to a kept "
               "default), layer by layer, largest difference first; times in ms, diff_ms > 0: faster in the winner.",
               {"job": _STR, "default_route": _STR, "winner_route": _STR, "why": _STR, "same_layers": _BOOL,
                "gain_ms": {"type": "number"}, "default": _SIDE, "winner": _SIDE, "notes": _STRS,
                "rows": _list(_obj({"name": _STR, "winner_name": _STR_OR_NULL, "op": _STR,
                                    "default_ms": _NUM_OR_NULL, "winner_ms": _NUM_OR_NULL,
                                    "diff_ms": {"type": "number"}, "share": _NUM_OR_NULL,
                                    "paired_by": _STR_OR_NULL}, closed=True))}, {}),
    "profile": ("`profile JOB`: one route's layer profile (median ms per layer over its profiled runs).",
                {"job": _STR, "route": _STR, "backend": _STR, "runs": _INT, "wall_ms": _NUM_OR_NULL,
                 "layers_ms": {"type": "number"}, "dropped": _INT, "note": _STR,
                 "layers": _list(_obj({"name": _STR, "op": _STR, "where": _STR, "ms": {"type": "number"}},
                                      closed=True))}, {}),
    "report": ("`report --html FILE`: the file written and how many jobs it shows.",
               {"html": _STR, "jobs": _INT, "with_trials": _INT}, {}),
    "lock-show": ("`lock show JOB`: the job's tuning.lock entry, and what a serving process must set to run its "
                  "engine as measured (``serving.settings``: ONNX Runtime session options and provider options, "
                  "Inductor compile settings; null with a ``note`` where the engine carries the route).",
                  {"job": _STR, "entry": _OBJ}, {"serving": _OBJ}),
    "lock-check": ("`lock check`: does tuning.lock match the manifest; each job added, removed or changed.",
                   {"matches": _BOOL, "notes": _STRS,
                    "mismatches": _list(_obj({"job": _STR, "kind": _STR, "details": _STRS}, closed=True))}, {}),
    "knobs": ("`knobs`: a backend's catalog.",
              {"backend": _STR, "version": _STR, "knobs": _list(_KNOB)}, {"tuner_version": _STR_OR_NULL}),
    "cache-stats": ("`cache stats`: trials by status, backend, source and signature; sizes; remotes.",
                    {"trials": _INT, "by_status": _COUNTS, "by_backend": _COUNTS, "by_source": _COUNTS,
                     "signatures": _list(_OBJ), "blobs": _INT, "blob_bytes": _INT, "engines_referenced": _INT,
                     "engines_present": _INT, "remotes": _list(_OBJ)}, {}),
    "cache-gc": ("`cache gc` (and --dry-run): what was (or would be) dropped.",
                 {"dry_run": _BOOL, "trials": _INT, "signatures": _STRS, "blobs": _INT, "bytes": _INT,
                  "temp_files": _INT, "kept_by_lock": _INT}, {}),
    "cache-verify": ("`cache verify`: integrity of the database, its rows and blobs.",
                     {"ok": _BOOL, "integrity": _STR}, {}),
    "cache-export": ("`cache export FILE`: what the bundle holds.",
                     {"path": _STR, "trials": _INT, "signatures": _INT, "blobs": _INT, "bytes": _INT,
                      "skipped": _STRS}, {}),
    "cache-import": ("`cache import FILE`: one report per merged bundle or imported tuning cache.",
                     {"reports": _list(_OBJ)}, {}),
    "cache-push": ("`cache push URL`: what was pushed.",
                   {"url": _STR, "trials": _INT, "segment": _STR_OR_NULL, "engines": _INT, "skipped": _STRS},
                   {"resent": {**_INT, "description": "segments this cache had pushed that the remote no longer "
                                                      "holds; then everything was pushed again"}}),
    "cache-recover": ("`cache recover`: the rows salvaged per table from a damaged cache, and where the damaged "
                      "file was kept.", {"path": _STR, "damaged": _STR, "rows": _COUNTS, "lost": _COUNTS}, {}),
    "trials": ("`trials`: every trial in the cache as a flat record (losses as loss:OUTPUT:METRIC keys).",
               {"trials": _list(_obj({"job": _STR, "route": _STR, "status": _STR, "median_ms": _NUM_OR_NULL}))},
               {}),
    "cache-pull": ("`cache pull URL`: what was merged, rejected and materialized.",
                   {"url": _STR, "segments": _INT, "added": _INT, "present": _INT, "conflicts": _INT,
                    "rejected": _STRS, "ignored": _STRS}, {"materialized": _STRS}),
}


def _schema(name: str) -> dict[str, Any]:
    description, required, optional = _FORMATS[name]
    schema = _obj({"format": {"const": format_id(name)}, **required}, optional)
    return {"$schema": DRAFT, "$id": f"https://trt-routes.dev/schemas/{name}-{VERSION}.json",
            "title": format_id(name), "description": description, **schema}


SCHEMAS: dict[str, dict[str, Any]] = {name: _schema(name) for name in _FORMATS}


def schema_for(name: str) -> dict[str, Any]:
    """The JSON Schema of format ``name`` ("plan" or "trt-routes/plan@1")."""
    short = name.removeprefix("trt-routes/").removesuffix(f"@{VERSION}")
    if short not in SCHEMAS:
        raise UsageError(f"no JSON format '{name}'", f"formats: {', '.join(sorted(SCHEMAS))}")
    return SCHEMAS[short]
