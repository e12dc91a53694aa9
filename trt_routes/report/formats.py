"""The JSON contract of every ``--json`` output: one versioned format per command, its pydantic model
(``report/documents.py``), the JSON Schema (draft 2020-12) generated from that model, and the one writer that
checks a payload against its model and makes it strict JSON.

Every document is one object whose ``format`` is ``trt-routes/<command>@<version>`` (``lock check`` is
``lock-check``) and has every key its model names, and no other. A number that is not finite (NaN, inf) is
written as ``null``: strict parsers (``jq``, JavaScript) read every document; the trial's status, error and
verdict say in words what went wrong. A failure under ``--json`` is a ``trt-routes/error@1`` document with the
exit code."""

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
#: record, an older lock): null, as the float itself
_SPELLED = frozenset({"NaN", "Infinity", "-Infinity"})


def _non_finite(x: Any) -> bool:
    return (isinstance(x, float) and not math.isfinite(x)) or (isinstance(x, str) and x in _SPELLED)


def strict(data: Any) -> Any:
    """``data`` with every non-finite number (a float, or canonical's string "Infinity"/"NaN") replaced by
    None, tuples as lists and non-JSON leaves as strings."""
    if _non_finite(data):
        return None
    if isinstance(data, dict):
        return {str(k): strict(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [strict(v) for v in data]
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    return str(data)


def document(name: str, payload: dict[str, Any]) -> dict[str, Any]:
    """The payload of command ``name`` as its format's document: checked by its model (a missing or unknown
    key, a wrong type raise: a bug, not output), strict, ``format`` first."""
    if name not in DESCRIPTIONS:
        raise KeyError(f"no JSON format '{name}'")
    adapter = _adapter(name)
    checked = adapter.dump_python(adapter.validate_python(payload))
    return {"format": format_id(name), **strict(checked)}


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
#: format name -> one line of description (the model is ``report.documents.model(name)``)
DESCRIPTIONS: dict[str, str] = {
    "error": "A failure: the exit code, the error class, its message and where it is (manifest errors).",
    "validate": "`validate`: the manifest is valid; its models and jobs, and the jobs that cannot run here.",
    "plan": "`plan`: each job's action, its reasons and the routes to build.",
    "apply": "`apply` (also --dry-run and --frozen): what was built and locked, per job, and the exit code.",
    "status": "`status`: each job's lock against cache against engine on disk.",
    "explain": "`explain JOB`: the decision, every trial with its verdict, provenance and lock history.",
    "layers": "`explain JOB --layers`: the default route against the winner (or the closest challenger to a kept "
              "default), layer by layer, largest difference first; times in ms, diff_ms > 0: faster in the winner.",
    "profile": "`profile JOB`: one route's layer profile (median ms per layer over its profiled runs).",
    "report": "`report --html FILE`: the file written and how many jobs it shows.",
    "lock-show": "`lock show JOB`: the job's tuning.lock entry, and what a serving process must set to run its "
                 "engine as measured (``serving.settings``: ONNX Runtime session options and provider options, "
                 "Inductor compile settings; null with a ``note`` where the engine carries the route).",
    "lock-check": "`lock check`: does tuning.lock match the manifest; each job added, removed or changed.",
    "knobs": "`knobs`: a backend's catalog.",
    "cache-stats": "`cache stats`: trials by status, backend, source and signature; sizes; remotes.",
    "cache-gc": "`cache gc` (and --dry-run): what was (or would be) dropped.",
    "cache-verify": "`cache verify`: integrity of the database, its rows and blobs.",
    "cache-export": "`cache export FILE`: what the bundle holds.",
    "cache-import": "`cache import FILE`: one report per merged bundle or imported tuning cache.",
    "cache-push": "`cache push URL`: what was pushed (``resent``: segments this cache had pushed that the remote "
                  "no longer holds; then everything was pushed again).",
    "cache-recover": "`cache recover`: the rows salvaged per table from a damaged cache, and where the damaged "
                     "file was kept.",
    "trials": "`trials`: every trial in the cache as a flat record (losses as loss:OUTPUT:METRIC keys).",
    "cache-pull": "`cache pull URL`: what was merged, rejected and materialized.",
}


def _adapter(name: str) -> Any:
    from pydantic import TypeAdapter

    from trt_routes.report.documents import model

    return TypeAdapter(model(name))


def schema(name: str) -> dict[str, Any]:
    """The JSON Schema of format ``name``, generated from its model."""
    generated = _adapter(name).json_schema(mode="serialization")
    return {**generated, "$schema": DRAFT, "$id": f"https://trt-routes.dev/schemas/{name}-{VERSION}.json",
            "title": format_id(name), "description": DESCRIPTIONS[name],
            "properties": {"format": {"const": format_id(name)}, **generated["properties"]},
            "required": ["format", *generated["required"]]}


def schema_for(name: str) -> dict[str, Any]:
    """The JSON Schema of format ``name`` ("plan" or "trt-routes/plan@1")."""
    short = name.removeprefix("trt-routes/").removesuffix(f"@{VERSION}")
    if short not in DESCRIPTIONS:
        raise UsageError(f"no JSON format '{name}'", f"formats: {', '.join(sorted(DESCRIPTIONS))}")
    return schema(short)
