"""tuning.yaml is composed by libyaml when PyYAML has it (``positions.compose``), 10x faster than the
pure-Python loader on a 200-job manifest. Every error position and the file/line of every validation message
come from the composed nodes' marks, so the two loaders must agree: equal trees with equal marks on every
manifest that parses, and the pure-Python loader's own error wherever either one refuses the text."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from _manifest_corpus import cases
from _paths import REPO
from _project import make_project

from trt_routes.errors import ManifestError
from trt_routes.manifest import load
from trt_routes.manifest.positions import compose

pytestmark = pytest.mark.skipif(not hasattr(yaml, "CSafeLoader"), reason="PyYAML built without libyaml")

ODD = {
    "unicode": "schema_version: 1\n# café ☕\nmodels:\n  'mödel-ü':\n    path: \"m/ß.onnx\"\n    note: 日本語 text\n",
    "crlf": "schema_version: 1\r\nmodels:\r\n  a:\r\n    path: a.onnx\r\n",
    "breaks": "a: \"x\u2028y\u2029z\x85w\"\nb: 'p\u2028q'\nc: 1\n",
    "anchors": "base: &b {x: 1, y: [1, 2]}\nm:\n  <<: *b\n  y: 3\nlist: [*b, *b]\n",
    "blocks": "a: |\n  one\n  two\nb: >-\n  folded\n  text\nc:\n  - - 1\n    - 2\n  - {k: v}\n",
    "bom": "\ufeffschema_version: 1\nmodels: {}\n",
    "tabs-in-strings": "a: \"tab\\there\"\nb: 'é\tè'\n",
    "empty": "",
    "comments-only": "# nothing\n",
    "astral": "k: \U0001f600 emoji \U0001f680\nk2: [\U0001f600, b]\n",
}


def _pure(text: str) -> yaml.Node | None:
    loader = yaml.SafeLoader(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def _shape(node: yaml.Node | None, seen: set[int] | None = None) -> Iterator[tuple[object, ...]]:
    """Every node as (kind, tag, scalar value, start line, start column, end line, end column), in order."""
    if node is None:
        yield ("none",)
        return
    seen = set() if seen is None else seen
    marks = (node.start_mark.line, node.start_mark.column, node.end_mark.line, node.end_mark.column)
    value = node.value if isinstance(node, yaml.ScalarNode) else None
    yield (type(node).__name__, node.tag, value, *marks)
    if id(node) in seen:  # an alias: its subtree was walked where it was anchored
        return
    seen.add(id(node))
    children = ([c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode)
                else node.value if isinstance(node, yaml.SequenceNode) else [])
    for child in children:
        yield from _shape(child, seen)


def _manifests() -> list[Path]:
    found = [REPO / "tuning.yaml", *REPO.glob("recipes/**/*.y*ml"), *REPO.glob("trt_routes/examples/**/*.y*ml"),
             *REPO.glob("tests/fixtures/**/*.y*ml")]
    return sorted(p for p in found if p.is_file())


@pytest.mark.parametrize("path", _manifests(), ids=lambda p: str(p.relative_to(REPO)))
def test_libyaml_and_pyyaml_compose_every_shipped_manifest_alike(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert list(_shape(compose(text))) == list(_shape(_pure(text)))


@pytest.mark.parametrize("name", sorted(ODD))
def test_libyaml_and_pyyaml_compose_odd_text_alike(name: str) -> None:
    text = ODD[name]
    assert list(_shape(compose(text))) == list(_shape(_pure(text)))


def test_the_synthetic_200_job_manifest_composes_alike(tmp_path: Path) -> None:
    lines = ["schema_version: 1", "models:"]
    for i in range(200):
        lines += [f"  m{i}:", f"    path: models/m{i}.onnx", "    shapes:", f"      s: {{x: [1, {i + 1}, 8]}}"]
    text = "\n".join(lines) + "\n"
    assert list(_shape(compose(text))) == list(_shape(_pure(text)))


def _pure_error(text: str) -> str | None:
    try:
        _pure(text)
    except yaml.YAMLError as exc:
        return f"{type(exc).__name__}: {exc}"
    except RecursionError:  # its text says where the stack ran out, which varies
        return "RecursionError"
    return None


def test_a_manifest_either_loader_refuses_gets_pyyamls_own_error(tmp_path: Path) -> None:
    """Over the malformed corpus (broken encodings, control characters, bad indentation, YAML bombs, deep
    nesting): compose raises exactly what the pure-Python loader raises, and load_manifest reports it with
    the same text as when it composed with the pure-Python loader alone."""
    dummy = {name: tmp_path / f"{name}.onnx" for name in ("resnet_like", "transformer_block")}
    for file in dummy.values():
        file.write_bytes(b"not parsed here")
    base = yaml.safe_load(make_project(tmp_path / "p", dummy, both_models=True).read_text())
    extra = [b"a: [1, 2\n", b"a:\n  b: 1\n c: 2\n", b"a: 'open\n", b"k: \x01\n", b"a: " + b"[" * 5000,
             b"- a\nb: 1\n", b"a: *nope\n", b"\tx: 1\n"]
    texts = [c.text for c in cases(base)] + extra
    refused = 0
    for raw in texts:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue  # _read refuses these before anything composes
        expected = _pure_error(text)
        if expected is None:
            assert list(_shape(compose(text))) == list(_shape(_pure(text)))
            continue
        refused += 1
        with pytest.raises((yaml.YAMLError, RecursionError)) as got:
            compose(text)
        shown = "RecursionError" if got.type is RecursionError else f"{type(got.value).__name__}: {got.value}"
        assert shown == expected
        manifest = tmp_path / "tuning.yaml"
        manifest.write_bytes(raw)
        with pytest.raises(ManifestError) as fast:
            load.load_manifest(manifest)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("trt_routes.manifest.positions._FAST", None)
            with pytest.raises(ManifestError) as slow:
                load.load_manifest(manifest)
        assert str(fast.value) == str(slow.value)
    assert refused >= len(extra)
