"""tuning.lock entries as typed models (trt_routes.lockfile.LockEntry): the bytes apply writes round-trip
through the model unchanged, the serializer writes exactly the schema's fields, and a malformed entry
is a clear LockfileError naming the file and the job in every command that reads the lock."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from _project import cli
from pydantic import BaseModel

from trt_routes.errors import LockfileError
from trt_routes.lockfile import LockEntry, Lockfile, LockModel, parse_entry


def test_the_written_lock_round_trips_byte_for_byte_through_the_model(tuned: Path) -> None:
    path = tuned.parent / "tuning.lock"
    original = path.read_bytes()
    lock = Lockfile.read(path)
    assert lock.jobs and all(isinstance(e, LockEntry) for e in lock.jobs.values())
    assert lock.render().encode("utf-8") == original
    # parse -> model -> plain data is the very data on disk, entry by entry
    data = yaml.safe_load(original)["jobs"]
    assert {name: parse_entry(name, raw).to_data() for name, raw in data.items()} == data
    assert lock.write() is False  # nothing changed: the file is not rewritten
    assert path.read_bytes() == original


def _model_type(model: type[BaseModel], name: str) -> type[BaseModel] | None:
    annotation = model.model_fields[name].annotation
    for arg in getattr(annotation, "__args__", ()):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


#: Fields written only where the manifest asks for them (a job's ``baseline:``); every other field is always
#: written. tests/func/test_baseline.py checks these on a job that has one.
ONLY_WHEN_CONFIGURED = {"LockTiming": {"baseline", "baseline_ms", "baseline_speedup", "baseline_source"}}


def _check_against_schema(model: type[BaseModel], data: dict[str, Any], where: str) -> None:
    expected = set(model.model_fields) - ONLY_WHEN_CONFIGURED.get(model.__name__, set())
    assert set(data) == expected, f"{where}: {set(data) ^ expected}"
    for name, value in data.items():
        nested = _model_type(model, name)
        if nested is not None and value is not None:
            _check_against_schema(nested, value, f"{where}.{name}")


def test_the_serialized_entry_is_exactly_the_schema(tuned: Path) -> None:
    """Every key apply writes is a field of the model, and every field is written (DVC's
    test_serialize_pipeline_lock): a field added to one but not the other fails here."""
    data = yaml.safe_load((tuned.parent / "tuning.lock").read_text())["jobs"]
    assert data
    for name, entry in data.items():
        model = dict(entry.pop("model"))
        assert set(model) == {"path", "digest"} <= set(LockModel.model_fields)  # a file model (not `entry`)
        _check_against_schema(LockEntry, {**entry, "model": None}, name)
        parsed = parse_entry(name, {**entry, "model": model})
        assert not parsed.model_extra, name  # nothing written that the model does not name


def test_keys_the_model_does_not_name_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "tuning.lock"
    raw = {"route": "", "engine": {"sha256": "a" * 64, "size": 3, "later": [1]}, "from_a_newer_version": {"x": 1}}
    Lockfile(path, jobs={"m/s/cpu": parse_entry("m/s/cpu", raw)}).write()
    text = path.read_text()
    lock = Lockfile.read(path)
    entry = lock.jobs["m/s/cpu"]
    assert entry.engine is not None and entry.engine.size == 3 and entry.engine_sha256 == "a" * 64
    assert entry.route == "" and entry.status is None and "status" not in entry
    assert lock.render() == text and "from_a_newer_version" in text and "later" in text


MALFORMED = {
    "an int": 3,
    "a list": ["-x=1"],
    "an engine that is a string": "engine",
    "a size that is not a number": "size",
}


def _break(entry: dict[str, Any], how: str) -> Any:
    if how == "an engine that is a string":
        return {**entry, "engine": "engines/cnn.onnx"}
    if how == "a size that is not a number":
        return {**entry, "engine": {**entry["engine"], "size": "big"}}
    return MALFORMED[how]


@pytest.mark.parametrize("how", list(MALFORMED))
def test_a_malformed_entry_is_a_clear_lockfile_error(tuned: Path, tmp_path: Path, how: str) -> None:
    project = tmp_path / "p"
    shutil.copytree(tuned.parent, project)
    path = project / "tuning.lock"
    data = yaml.safe_load(path.read_text())
    data["jobs"]["cnn/bs1/cpu"] = _break(data["jobs"]["cnn/bs1/cpu"], how)
    path.write_text(yaml.safe_dump(data))
    before = path.read_bytes()
    with pytest.raises(LockfileError) as err:
        Lockfile.read(path)
    assert str(path) in err.value.message and "job 'cnn/bs1/cpu'" in err.value.message
    assert err.value.hint and "git checkout -- tuning.lock" in err.value.hint
    manifest = str(project / "tuning.yaml")
    for command in (["plan"], ["status"], ["explain", "cnn/bs1/cpu"], ["lock", "check"],
                    ["lock", "show", "cnn/bs1/cpu"], ["apply"], ["apply", "--frozen"]):
        code, out = cli(*command, "-m", manifest)
        assert code == 2, (command, out)
        assert "tuning.lock" in out and "cnn/bs1/cpu" in out and "Traceback" not in out, (command, out)
    assert path.read_bytes() == before  # nothing rewrote it


def test_identity_json_tells_apart_what_renders_apart_and_ignores_key_order() -> None:
    """``LockEntry.identity_json`` (the lock's read/write digest, settled fingerprints): entries whose
    tuning.lock text differs never share it; equal entries read in another key order do; keys that do not
    sort (an int beside a str, written by hand) fall back to the canonical serializer."""

    def ident(data: dict[str, object]) -> str:
        return parse_entry("j", {"route": "", **data}).identity_json()

    differ = [({"facts": {"energy": float("nan")}}, {"facts": {"energy": None}}),
              ({"facts": {"x": 1}}, {"facts": {"x": 1.0}}),
              ({"facts": {}}, {"facts": None}), ({"facts": {}}, {}),
              ({"facts": {"x": float("inf")}}, {"facts": {"x": float("-inf")}})]
    for a, b in differ:
        assert ident(a) != ident(b), (a, b)
    assert ident({"facts": {"a": 1, "b": 2}, "note": {"y": 1, "x": 2}}) == \
        ident({"note": {"x": 2, "y": 1}, "facts": {"b": 2, "a": 1}})
    assert ident({"note": {1: "x", "b": 2}}) == ident({"note": {"b": 2, 1: "x"}})
