"""Loading tuning.yaml: a full valid manifest, and every kind of error with its exact position."""

from __future__ import annotations

import itertools
import json
import textwrap
from pathlib import Path

import pytest

from trt_routes.canonical import l0_key
from trt_routes.errors import ManifestError
from trt_routes.manifest import LoadedManifest, Manifest, load_manifest, manifest_json_schema
from trt_routes.manifest.problems import ManifestProblems
from trt_routes.manifest.schema import DimRange, ReferenceFiles

FULL = """\
schema_version: 1
paths:
  cache: caches/t.sqlite
  engines: caches/engines
  lockfile: tuning.lock
  out: engines
measurement:
  warmup: 5
  iterations: 30
  repeats: 3
  timeout_s: 120
  seed: 7
targets:
  cpu: {kind: cpu}
  h200: {kind: gpu, name: "*H200*"}
  hopper: {kind: gpu, compute_capability: "9.0"}
switch_groups:
  conv: "-conv_use_long_w=[on|off] -kgen:codegen:cuda_tile=[0|1|2]"
  ort: "-graph_optimization_level=[basic|all]"
strategies:
  quick: {mode: fast}
  thorough: {mode: full, max_builds: 64}
  adaptive: {mode: mixed}
tolerances:
  strict:
    checks:
      - {metric: l0, threshold: 0.001, atol: 1.0e-4, rtol: 1.0e-3}
      - {metric: cos, threshold: 1.0e-5}
    outputs:
      logits:
        - {metric: lInf, threshold: 0.01}
  loose:
    checks: [{metric: l1, threshold: 0.1}, {metric: l2, threshold: 0.01}]
defaults:
  backend: onnxruntime
  targets: [cpu]
  switch_group: ort
  strategy: quick
  tolerance: loose
  settings: {opt_level: 3, fp16: false}
models:
  resnet-like:
    path: models/resnet.onnx
    backend: tensorrt
    targets: [h200, hopper]
    switch_group: conv
    strategy: adaptive
    tolerance: strict
    settings: {fp16: true}
    shapes:
      bs1: {input: [1, 3, 224, 224]}
      dyn:
        input: {min: [1, 3, 224, 224], opt: [8, 3, 224, 224], max: [32, 3, 224, 224]}
    inputs:
      input: {dtype: float16, low: 0.0, high: 1.0}
  bert-tiny:
    path: models/bert.onnx
    shapes:
      s128:
        input_ids: [1, 128]
        attention_mask: [1, 128]
    inputs:
      input_ids: {dtype: int64, low: 0, high: 30000}
      attention_mask: {dtype: bool}
    reference: {inputs: refs/bert_in.npz, outputs: refs/bert_out.npz}
"""

# The smallest manifest that loads; error tests change one thing in it.
MINIMAL = """\
schema_version: 1
switch_groups:
  g: "-a=[1|2]"
tolerances:
  strict:
    checks: [{metric: l1, threshold: 0.1}]
defaults:
  switch_group: g
  tolerance: strict
models:
  net:
    path: net.onnx
    shapes:
      bs1: {x: [1, 4]}
"""


def write(tmp_path: Path, text: str, name: str = "tuning.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def add_to_model(line: str) -> str:
    """MINIMAL with ``line`` added to model 'net' right after its path (so on line 13)."""
    return MINIMAL.replace("    path: net.onnx\n", f"    path: net.onnx\n    {line}\n")


def fail(tmp_path: Path, text: str) -> ManifestError:
    with pytest.raises(ManifestError) as info:
        load_manifest(write(tmp_path, text))
    return info.value


def caret(err: ManifestError) -> tuple[int, int]:
    """The (line, column) the snippet's caret points at, read back from the rendered snippet."""
    assert err.snippet is not None
    rows = err.snippet.splitlines()
    for above, row in itertools.pairwise(rows):
        gutter, _, body = row.partition("|")
        body = body.removeprefix(" ")
        if gutter.strip() == "" and body.strip() and set(body.strip()) == {"^"}:
            number, _, _ = above.partition("|")
            return int(number), len(body) - len(body.lstrip(" ")) + 1
    raise AssertionError(f"no caret in snippet:\n{err.snippet}")


def assert_at(err: ManifestError, line: int, column: int) -> None:
    assert (err.line, err.column) == (line, column), str(err)
    assert err.location.endswith(f"tuning.yaml:{line}:{column}")
    assert caret(err) == (line, column), err.snippet
    assert str(err).startswith(f"{err.location}: ")


# --- a valid manifest ------------------------------------------------------------------------


def test_full_manifest_loads_every_feature(tmp_path: Path) -> None:
    loaded = load_manifest(write(tmp_path, FULL))
    assert isinstance(loaded, LoadedManifest)
    m = loaded.manifest
    assert isinstance(m, Manifest)
    assert loaded.path == (tmp_path / "tuning.yaml").resolve()
    assert loaded.text == FULL

    assert m.paths.cache == "caches/t.sqlite"
    assert m.measurement.key_fields() == {"warmup": 5, "iterations": 30, "repeats": 3, "seed": 7,
                                          "settle": {"window": 5, "tolerance": 0.05, "max_runs": 200}}
    assert m.measurement.timeout_s == 120
    assert m.targets["h200"].name == "*H200*"
    assert m.targets["hopper"].compute_capability == "9.0"
    assert m.targets["cpu"].kind == "cpu"
    assert m.strategies["thorough"].max_builds == 64
    assert m.strategy_for("resnet-like") == ("adaptive", m.strategies["adaptive"])
    assert m.strategy_for("bert-tiny") == ("quick", m.strategies["quick"])

    strict = m.tolerances["strict"]
    assert [c.key for c in strict.checks_for("probs")] == [l0_key(1e-4, 1e-3), "cos"]
    assert [c.key for c in strict.checks_for("logits")] == ["lInf"]
    assert [c.metric for c in m.tolerances["loose"].checks] == ["l1", "l2"]

    resnet = m.models["resnet-like"]
    assert resnet.shapes["bs1"]["input"] == [1, 3, 224, 224]
    dyn = resnet.shapes["dyn"]["input"]
    assert isinstance(dyn, DimRange)
    assert (dyn.min[0], dyn.opt[0], dyn.max[0]) == (1, 8, 32)
    assert resnet.inputs["input"].dtype == "float16"
    assert resnet.reference == "auto"
    bert = m.models["bert-tiny"]
    assert bert.inputs["attention_mask"].dtype == "bool"
    assert bert.reference == ReferenceFiles(inputs="refs/bert_in.npz", outputs="refs/bert_out.npz")

    eff = m.effective("resnet-like")
    assert (eff.backend, eff.targets, eff.switch_group, eff.tolerance) == (
        "tensorrt", ["h200", "hopper"], "conv", "strict")
    assert eff.settings == {"opt_level": 3, "fp16": True}
    eff = m.effective("bert-tiny")
    assert (eff.backend, eff.targets, eff.switch_group, eff.tolerance) == (
        "onnxruntime", ["cpu"], "ort", "loose")
    assert eff.settings == {"opt_level": 3, "fp16": False}


def test_positions_point_at_values(tmp_path: Path) -> None:
    loaded = load_manifest(write(tmp_path, FULL))
    assert loaded.positions[()] == (1, 1)
    assert loaded.positions[("schema_version",)] == (1, 17)
    assert loaded.positions[("models", "resnet-like", "shapes", "bs1")] == (51, 12)
    assert loaded.positions[("models", "resnet-like", "shapes", "dyn", "input", "opt")] == (53, 45)
    assert loaded.positions[("tolerances", "strict", "checks", 1)] == (28, 9)
    assert loaded.positions[("defaults", "targets", 0)] == (36, 13)
    # a value nested in block style starts at its first key, on the next line
    assert loaded.positions[("models", "resnet-like")] == (43, 5)


def test_locate_walks_up_to_the_nearest_written_ancestor(tmp_path: Path) -> None:
    loaded = load_manifest(write(tmp_path, FULL))
    assert loaded.locate(("models", "bert-tiny", "path")) == (57, 11)
    # bert-tiny writes no strategy: the model's own mapping is the nearest written ancestor
    assert loaded.locate(("models", "bert-tiny", "strategy")) == loaded.positions[("models", "bert-tiny")]
    assert loaded.locate(("no", "such", "key")) == (1, 1)


def test_error_builds_a_positioned_error_with_snippet(tmp_path: Path) -> None:
    loaded = load_manifest(write(tmp_path, FULL))
    err = loaded.error(("models", "resnet-like", "path"), "cannot open the model", "check the path")
    assert_at(err, 43, 11)
    assert err.hint == "check the path"
    rows = err.snippet.splitlines() if err.snippet else []
    # one line of context each side, numbered in the gutter
    assert [r.split("|")[0].strip() for r in rows] == ["42", "43", "", "44"]
    assert rows[1].endswith("path: models/resnet.onnx")
    assert rows[2].strip().endswith("^" * len("models/resnet.onnx"))
    assert "hint: check the path" in str(err)


def test_resolve_is_relative_to_the_manifest_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sub = tmp_path / "proj"
    sub.mkdir()
    monkeypatch.chdir(tmp_path)
    write(sub, FULL)
    loaded = load_manifest(Path("proj") / "tuning.yaml")
    assert loaded.path == (sub / "tuning.yaml").resolve()
    assert loaded.resolve("models/resnet.onnx") == (sub / "models" / "resnet.onnx").resolve()
    assert loaded.resolve(str(tmp_path / "abs.onnx")) == (tmp_path / "abs.onnx").resolve()


def test_load_accepts_str_and_anchors(tmp_path: Path) -> None:
    text = MINIMAL.replace("checks: [", "checks: &c [")
    text = text.replace("defaults:", "  loose:\n    checks: *c\ndefaults:")
    loaded = load_manifest(str(write(tmp_path, text)))
    assert loaded.manifest.tolerances["loose"].checks == loaded.manifest.tolerances["strict"].checks


# --- the file and YAML -----------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as info:
        load_manifest(tmp_path / "nope.yaml")
    err = info.value
    assert "not found" in err.message
    assert err.line is None
    assert err.hint is not None and "--manifest" in err.hint and "create" in err.hint
    assert "nope.yaml" in str(err)


def test_folder_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as info:
        load_manifest(tmp_path)
    assert info.value.hint is not None and "tuning.yaml" in info.value.hint


def test_yaml_syntax_error_uses_the_problem_mark(tmp_path: Path) -> None:
    err = fail(tmp_path, """\
        schema_version: 1
        models:
          a: [1, 2
          b: 3
        """)
    # the parser trips on the ':' after 'b' while still inside the unclosed '['
    assert_at(err, 4, 4)
    assert err.message.startswith("invalid YAML")
    assert "line 3" in err.message
    assert err.hint is not None and "bracket" in err.hint


def test_tab_indentation(tmp_path: Path) -> None:
    err = fail(tmp_path, "schema_version: 1\nmodels:\n\tnet: 1\n")
    assert_at(err, 3, 1)
    assert err.hint is not None and "tabs" in err.hint


def test_two_documents(tmp_path: Path) -> None:
    err = fail(tmp_path, "schema_version: 1\n---\nmodels: {}\n")
    assert_at(err, 2, 1)
    assert err.hint is not None and "---" in err.hint


def test_control_character(tmp_path: Path) -> None:
    err = fail(tmp_path, "schema_version: 1\nmodels: x\x01\n")
    assert_at(err, 2, 10)
    assert "#x0001" in err.message


def test_python_tags_are_refused(tmp_path: Path) -> None:
    err = fail(tmp_path, "schema_version: 1\nmodels: !!python/object:os.system {}\n")
    assert_at(err, 2, 9)
    assert err.hint is not None and "tag" in err.hint


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "tuning.yaml"
    path.write_bytes(b"schema_version: 1\nmodels: \xff\n")
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    assert (info.value.line, info.value.column) == (2, 9)
    assert info.value.hint == "save the file as UTF-8"


@pytest.mark.parametrize(
    ("text", "where", "kind"),
    [("- a\n- b\n", (1, 1), "a list"), ("just text\n", (1, 1), "a scalar"), ("", (1, 1), "empty"),
     ("# only a comment\n\n", (1, 1), "empty")],
)
def test_top_level_must_be_a_mapping(tmp_path: Path, text: str, where: tuple[int, int], kind: str) -> None:
    err = fail(tmp_path, text)
    assert_at(err, *where)
    assert err.message.endswith(kind)
    assert err.hint is not None and "schema_version: 1" in err.hint


def test_duplicate_key_nested(tmp_path: Path) -> None:
    err = fail(tmp_path, add_to_model("path: other.onnx"))
    assert_at(err, 13, 5)
    assert err.message == "duplicate key 'path' in models.net (first at line 12)"
    assert err.snippet is not None and "^^^^" in err.snippet
    assert err.hint is not None and "remove one" in err.hint


@pytest.mark.parametrize("second", ["{x: [1, 4]}", "{x: {min: [1, 4], opt: [1, 4], max: [1, 4]}}"])
def test_two_shape_profiles_with_the_same_inputs_are_refused(tmp_path: Path, second: str) -> None:
    # trials are keyed by inputs, so both jobs would share every trial (a replayed landscape@2 times each
    # shape with the profile of its name: the second would silently reuse the first one's times)
    err = fail(tmp_path, MINIMAL + f"      bs1b: {second}\n")
    assert_at(err, 14, 7)  # the shapes mapping
    assert "shape profiles 'bs1' and 'bs1b' give the same inputs" in err.message
    assert "remove 'bs1b' or change its dimensions" in err.message
    load_manifest(write(tmp_path, MINIMAL + "      bs2: {x: [2, 4]}\n"))  # other dimensions: two jobs


def test_duplicate_key_top_level_and_nested_are_all_reported(tmp_path: Path) -> None:
    text = MINIMAL + "schema_version: 1\n" + "switch_groups: {}\n"
    text = text.replace('  g: "-a=[1|2]"\n', '  g: "-a=[1|2]"\n  g: "-b=[1|2]"\n')
    with pytest.raises(ManifestProblems) as info:
        load_manifest(write(tmp_path, text))
    problems = info.value.problems
    assert [(p.line, p.column) for p in problems] == [(4, 3), (16, 1), (17, 1)]
    assert problems[0].message == "duplicate key 'g' in switch_groups (first at line 3)"
    assert problems[1].message == "duplicate key 'schema_version' (first at line 1)"
    assert str(info.value).startswith("3 problems in the manifest:")


def test_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    base = "  base: &b\n    checks: [{metric: l2, threshold: 1}]\n"
    text = MINIMAL.replace("  strict:\n", base + "  strict:\n    <<: *b\n")
    loaded = load_manifest(write(tmp_path, text))
    assert loaded.manifest.tolerances["strict"].checks[0].metric == "l1"  # the mapping's own key wins
    assert loaded.positions[("tolerances", "strict", "checks")] == (9, 13)


# --- schema_version --------------------------------------------------------------------------


def test_missing_schema_version(tmp_path: Path) -> None:
    err = fail(tmp_path, MINIMAL.replace("schema_version: 1\n", "# tuning\n"))
    assert_at(err, 2, 1)
    assert "schema_version" in err.message
    assert err.hint == "add 'schema_version: 1' as the first line"


def test_misspelled_schema_version(tmp_path: Path) -> None:
    err = fail(tmp_path, "# tuning\n" + MINIMAL.replace("schema_version:", "schema_verison:"))
    assert_at(err, 2, 1)
    assert err.hint == "rename 'schema_verison' to 'schema_version'"


def test_newer_schema_version_says_upgrade(tmp_path: Path) -> None:
    err = fail(tmp_path, MINIMAL.replace("schema_version: 1", "schema_version: 3"))
    assert_at(err, 1, 17)
    assert "schema_version 3" in err.message
    assert err.hint is not None and "upgrade trt-routes" in err.hint


@pytest.mark.parametrize("value", ["0", "'1'", "true", "1.5"])
def test_unsupported_schema_version(tmp_path: Path, value: str) -> None:
    err = fail(tmp_path, MINIMAL.replace("schema_version: 1", f"schema_version: {value}"))
    assert_at(err, 1, 17)
    assert err.hint == "write 'schema_version: 1'"


# --- schema errors ---------------------------------------------------------------------------


def test_unknown_key_points_at_the_key_and_suggests(tmp_path: Path) -> None:
    err = fail(tmp_path, MINIMAL.replace("    shapes:\n", "    shapse:\n"))
    assert not isinstance(err, ManifestProblems)  # the missing 'shapes' is the same mistake
    assert_at(err, 13, 5)
    assert err.message == "unknown key 'shapse' in models.net"
    assert err.hint == "did you mean 'shapes'?"
    assert err.snippet is not None and "^^^^^^" in err.snippet


def test_unknown_top_level_key(tmp_path: Path) -> None:
    err = fail(tmp_path, MINIMAL.replace("tolerances:", "toleranses:"))
    assert_at(err, 4, 1)
    assert err.message == "unknown key 'toleranses'"
    assert err.hint == "did you mean 'tolerances'?"


def test_unknown_key_with_nothing_close_lists_valid_keys(tmp_path: Path) -> None:
    err = fail(tmp_path, add_to_model("zzz: 1"))
    assert_at(err, 13, 5)
    assert err.hint is not None and err.hint.startswith("valid keys here: ")
    assert "shapes" in err.hint and "reference" in err.hint and "tolerance" in err.hint


def test_unknown_key_inside_a_list_item(tmp_path: Path) -> None:
    err = fail(tmp_path, MINIMAL.replace("checks: [{metric: l1, threshold: 0.1}]",
                                         "checks: [{metric: l1, treshold: 0.1}]"))
    assert_at(err, 6, 27)
    assert err.message == "unknown key 'treshold' in tolerances.strict.checks[0]"
    assert err.hint == "did you mean 'threshold'?"


def test_unknown_key_inside_a_dynamic_shape(tmp_path: Path) -> None:
    err = fail(tmp_path, MINIMAL.replace("{x: [1, 4]}", "{x: {mn: [1], opt: [2], max: [4]}}"))
    assert_at(err, 14, 17)
    assert err.hint == "did you mean 'min'?"


def test_missing_field_points_at_the_parent_and_names_it(tmp_path: Path) -> None:
    err = fail(tmp_path, MINIMAL.replace("    shapes:\n      bs1: {x: [1, 4]}\n", ""))
    assert_at(err, 11, 3)
    assert err.message == "missing required key 'shapes' in models.net"
    assert err.hint is not None and "shapes" in err.hint


def test_model_needs_exactly_one_of_path_and_entry(tmp_path: Path) -> None:
    err = fail(tmp_path, MINIMAL.replace("    path: net.onnx\n", ""))
    assert err.line == 12 and "give exactly one of 'path' (a model file) and 'entry'" in err.message
    err = fail(tmp_path, MINIMAL.replace("    path: net.onnx\n", "    path: net.onnx\n    entry: models:net\n"))
    assert "exactly one of 'path'" in err.message
    err = fail(tmp_path, MINIMAL.replace("    path: net.onnx\n", "    entry: not an entry\n"))
    assert err.line == 12 and "models.net.entry" in err.message


def test_missing_models(tmp_path: Path) -> None:
    err = fail(tmp_path, MINIMAL.split("models:")[0])
    assert_at(err, 1, 1)
    assert "'models'" in err.message and "top level" in err.message


def test_unknown_tolerance_points_at_the_reference(tmp_path: Path) -> None:
    err = fail(tmp_path, add_to_model("tolerance: strictt"))
    assert_at(err, 13, 16)
    assert err.message == "models.net.tolerance: unknown tolerance 'strictt'"
    assert err.hint == "did you mean 'strict'?"
    assert err.snippet is not None and "^^^^^^^" in err.snippet


def test_unknown_reference_in_defaults(tmp_path: Path) -> None:
    err = fail(tmp_path, MINIMAL.replace("  switch_group: g\n", "  switch_group: zzz\n"))
    assert_at(err, 8, 17)
    assert err.message == "defaults.switch_group: unknown switch group 'zzz'"
    assert err.hint is not None and "(g)" in err.hint


def test_unknown_target_in_a_list(tmp_path: Path) -> None:
    err = fail(tmp_path, add_to_model("targets: [cpu, gpuu]"))
    assert_at(err, 13, 20)
    assert err.message == "models.net.targets[1]: unknown target 'gpuu'"


def test_model_without_tolerance(tmp_path: Path) -> None:
    err = fail(tmp_path, MINIMAL.replace("  tolerance: strict\n", ""))
    assert_at(err, 10, 3)
    assert err.message == "model 'net' has no tolerance"
    assert err.hint is not None and "defaults.tolerance" in err.hint


def test_wrong_literal_suggests(tmp_path: Path) -> None:
    err = fail(tmp_path, MINIMAL + "strategies:\n  s: {mode: fsat}\n")
    assert_at(err, 16, 13)
    assert err.message.startswith("strategies.s.mode: ")
    assert err.hint == "did you mean 'fast'?"


def test_union_mismatch_is_one_readable_error(tmp_path: Path) -> None:
    err = fail(tmp_path, add_to_model("reference: autoo"))
    assert_at(err, 13, 16)
    assert err.message == ("models.net.reference: expected 'auto' or a mapping with keys inputs, outputs, "
                           "got 'autoo'")
    assert err.hint == "did you mean 'auto'?"


def test_dynamic_shape_order(tmp_path: Path) -> None:
    err = fail(tmp_path, MINIMAL.replace("{x: [1, 4]}", "{x: {min: [2], opt: [1], max: [4]}}"))
    assert_at(err, 14, 16)
    assert "min <= opt <= max" in err.message


def test_bad_element_in_a_static_shape(tmp_path: Path) -> None:
    err = fail(tmp_path, MINIMAL.replace("{x: [1, 4]}", "{x: [1, four]}"))
    assert_at(err, 14, 20)
    assert err.message.startswith("models.net.shapes.bs1.x[1]: ")


def test_invalid_name_points_at_the_key(tmp_path: Path) -> None:
    err = fail(tmp_path, MINIMAL.replace("      bs1:", "      'bs 1':"))
    assert_at(err, 14, 7)
    assert err.message.startswith("models.net.shapes: invalid name 'bs 1'")


def test_gpu_target_without_match(tmp_path: Path) -> None:
    err = fail(tmp_path, MINIMAL + "targets:\n  gpu: {kind: gpu}\n")
    assert_at(err, 16, 8)
    assert "needs 'name'" in err.message


def test_several_problems_are_reported_in_file_order(tmp_path: Path) -> None:
    text = MINIMAL.replace("    shapes:\n", "    shapse:\n") + "measurement: {warmup: -1}\n"
    with pytest.raises(ManifestProblems) as info:
        load_manifest(write(tmp_path, text))
    err = info.value
    assert [(p.line, p.column) for p in err.problems] == [(13, 5), (15, 23)]
    assert (err.line, err.column) == (13, 5)
    text_out = str(err)
    assert text_out.count("hint:") == 2 and text_out.count("^") >= 2


def test_no_raw_pydantic_or_traceback_text(tmp_path: Path) -> None:
    bad = MINIMAL.replace("{x: [1, 4]}", "{x: [1, four]}").replace("l1", "l7") + "measurement: {warmup: x}\n"
    with pytest.raises(ManifestError) as info:
        load_manifest(write(tmp_path, bad))
    out = str(info.value)
    raw_bits = ("validation error", "errors.pydantic.dev", "Traceback", "function-after", "type=",
                "list[int]")
    for raw in raw_bits:
        assert raw not in out


# --- JSON schema -----------------------------------------------------------------------------


def test_json_schema_for_editors() -> None:
    schema = manifest_json_schema()
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert schema["$id"] and schema["title"]
    assert next(iter(schema)) == "$schema"
    assert {"schema_version", "models"} <= set(schema["required"])
    assert schema["additionalProperties"] is False
    assert "Model" in schema["$defs"]
    json.dumps(schema)  # serializable as is


def test_a_zero_threshold_is_refused_where_it_is_written(tmp_path: Path) -> None:
    """No loss is strictly below 0: a zero threshold would fail every route, the default's too."""
    err = fail(tmp_path, MINIMAL.replace("checks: [{metric: l1, threshold: 0.1}]",
                                         "checks: [{metric: lInf, threshold: 0}]"))
    assert_at(err, 6, 40)
    assert "greater than 0" in err.message
