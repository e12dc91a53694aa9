"""report/formats.py: strict JSON (no NaN/Infinity), one valid draft 2020-12 schema per format, error
documents; report/console.py's word-boundary shortening."""

from __future__ import annotations

import json
import math

import jsonschema
import pytest

from trt_routes.errors import ManifestError, UsageError
from trt_routes.report.console import shorten
from trt_routes.report.formats import SCHEMAS, document, dumps, error_document, schema_for, strict


def test_non_finite_floats_become_null_with_a_reason_at_any_depth() -> None:
    data = {"a": math.nan, "b": [1.0, math.inf, {"c": -math.inf}], "d": (1, 2), "ok": 0.5}
    assert strict(data) == {"a": None, "a_reason": "nan", "b": [1.0, None, {"c": None, "c_reason": "-inf"}],
                            "d": [1, 2], "ok": 0.5}
    text = dumps(document("plan", {"jobs": [], "removed": [], "counts": {}, "builds": 0, "has_work": False,
                                   "x": math.inf}))
    assert "Infinity" not in text and json.loads(text)["x_reason"] == "inf"


def test_non_finite_numbers_spelled_as_canonical_strings_become_null_too() -> None:
    """Stored records hold canonical.normalize's "Infinity" (a lock's confirmation interval): the documented
    rule holds for them as for floats; other strings are untouched."""
    data = {"confirmation": {"ci": [0, "Infinity"], "ratio": "NaN", "low": "-Infinity", "route": "Infinityish"}}
    assert strict(data) == {"confirmation": {"ci": [0, None], "ratio": None, "ratio_reason": "nan", "low": None,
                                             "low_reason": "-inf", "route": "Infinityish"}}


def test_every_schema_is_a_valid_2020_12_schema_naming_its_format() -> None:
    assert {"error", "validate", "plan", "apply", "status", "explain", "report", "lock-show", "lock-check",
            "knobs", "cache-stats", "cache-verify", "cache-gc"} <= set(SCHEMAS)
    for name, schema in SCHEMAS.items():
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert schema["properties"]["format"] == {"const": f"trt-routes/{name}@1"} and "format" in schema["required"]
    assert schema_for("trt-routes/plan@1") is SCHEMAS["plan"]
    with pytest.raises(UsageError, match="no JSON format 'nope'"):
        schema_for("nope")


def test_a_document_of_another_format_does_not_validate() -> None:
    doc = document("report", {"html": "r.html", "jobs": 1, "with_trials": 1})
    jsonschema.validate(doc, SCHEMAS["report"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, SCHEMAS["status"])


def test_error_documents_carry_the_position_of_manifest_errors() -> None:
    exc = ManifestError("unknown key 'shapez'", "did you mean 'shapes'?", path="tuning.yaml", line=7, column=5)
    doc = error_document(exc, exc.exit_code)
    jsonschema.validate(doc, SCHEMAS["error"])
    assert doc == {"format": "trt-routes/error@1", "code": 2, "error": "ManifestError",
                   "message": "unknown key 'shapez'", "file": "tuning.yaml", "line": 7, "column": 5,
                   "hint": "did you mean 'shapes'?", "problems": []}
    plain = error_document(UsageError("bad"), 2)
    assert (plain["file"], plain["line"], plain["hint"]) == (None, None, None)


def test_shorten_cuts_at_a_word_boundary() -> None:
    assert shorten("short  text\nhere") == "short text here"
    text = "word " * 40
    cut = shorten(text, 30)
    assert len(cut) <= 30 and cut.endswith("…") and cut[:-1] == "word " * 5 + "word"
    assert shorten("x" * 50, 20) == "x" * 19 + "…"  # one long token: cut inside it
