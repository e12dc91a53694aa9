"""report/formats.py: strict JSON (no NaN/Infinity), one valid draft 2020-12 schema per format, error
documents; report/console.py's word-boundary shortening."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import jsonschema
import pydantic
import pytest

from trt_routes.errors import ManifestError, UsageError
from trt_routes.report.console import shorten
from trt_routes.report.formats import DESCRIPTIONS, document, dumps, error_document, schema, schema_for, strict


def test_non_finite_floats_become_null_at_any_depth() -> None:
    data = {"a": math.nan, "b": [1.0, math.inf, {"c": -math.inf}], "d": (1, 2), "ok": 0.5}
    assert strict(data) == {"a": None, "b": [1.0, None, {"c": None}], "d": [1, 2], "ok": 0.5}
    text = dumps(document("report", {"html": "r.html", "jobs": 1, "with_trials": 0}))
    assert json.loads(text)["format"] == "trt-routes/report@1"
    doc = document("profile", {"job": "j", "backend": "b", "route": "", "runs": 3, "wall_ms": math.inf,
                               "layers_ms": 1.0, "dropped": 0, "note": "", "layers": []})
    assert doc["wall_ms"] is None and "Infinity" not in dumps(doc)
    jsonschema.validate(doc, schema("profile"))


def test_non_finite_numbers_spelled_as_canonical_strings_become_null_too() -> None:
    """Stored records hold canonical.normalize's "Infinity" (a lock's confirmation interval): the documented
    rule holds for them as for floats; other strings are untouched."""
    data = {"confirmation": {"ci": [0, "Infinity"], "ratio": "NaN", "low": "-Infinity", "route": "Infinityish"}}
    assert strict(data) == {"confirmation": {"ci": [0, None], "ratio": None, "low": None, "route": "Infinityish"}}


def _objects(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        if node.get("type") == "object":
            yield node
        for v in node.values():
            yield from _objects(v)
    elif isinstance(node, list):
        for v in node:
            yield from _objects(v)


def test_every_schema_is_a_valid_2020_12_schema_naming_its_format() -> None:
    assert {"error", "validate", "plan", "apply", "status", "explain", "report", "lock-show", "lock-check",
            "knobs", "cache-stats", "cache-verify", "cache-gc"} <= set(DESCRIPTIONS)
    for name in DESCRIPTIONS:
        found = schema(name)
        jsonschema.Draft202012Validator.check_schema(found)
        assert found["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert found["properties"]["format"] == {"const": f"trt-routes/{name}@1"} and "format" in found["required"]
        assert found["title"] == f"trt-routes/{name}@1" and found["description"] == DESCRIPTIONS[name]
    assert schema_for("trt-routes/plan@1") == schema("plan")
    with pytest.raises(UsageError, match="no JSON format 'nope'"):
        schema_for("nope")


def test_every_object_is_closed_and_lists_every_key_it_has() -> None:
    """Objects the documents define are closed and require each key (null or empty where nothing applies);
    the only open objects are records passed through as stored (a dict of anything)."""
    for name in DESCRIPTIONS:
        for obj in _objects(schema(name)):
            if "properties" in obj:
                assert obj.get("additionalProperties") is False or name == "trials", (name, obj)
                assert set(obj["required"]) == set(obj["properties"]), (name, sorted(obj["properties"]))
            else:  # a map: its values are typed, or it is a stored record
                assert "additionalProperties" in obj or obj == {"type": "object"} or obj.get("title"), (name, obj)


def test_a_key_the_model_lacks_or_misses_fails_the_writer_and_the_schema() -> None:
    good = {"html": "r.html", "jobs": 1, "with_trials": 0}
    jsonschema.validate(document("report", good), schema("report"))
    for bad in ({**good, "extra": 1}, {"html": "r.html", "jobs": 1}, {**good, "jobs": "one"}):
        with pytest.raises(pydantic.ValidationError):
            document("report", bad)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"format": "trt-routes/report@1", **bad}, schema("report"))


def test_a_document_of_another_format_does_not_validate() -> None:
    doc = document("report", {"html": "r.html", "jobs": 1, "with_trials": 1})
    jsonschema.validate(doc, schema("report"))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schema("status"))


def test_error_documents_carry_the_position_of_manifest_errors() -> None:
    exc = ManifestError("unknown key 'shapez'", "did you mean 'shapes'?", path="tuning.yaml", line=7, column=5)
    doc = error_document(exc, exc.exit_code)
    jsonschema.validate(doc, schema("error"))
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
