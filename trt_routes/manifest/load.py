"""Read tuning.yaml into a Manifest, keeping every node's position so that each error names
``file:LINE:COL``, shows the offending lines with a caret, and says how to fix it."""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from trt_routes.errors import ManifestError
from trt_routes.manifest.positions import (
    KeyPath,
    Parts,
    Position,
    compose,
    construct,
    dotted,
    index_positions,
    key_value,
    locate,
    nearest,
    node_kind,
    pairs,
)
from trt_routes.manifest.problems import combine, error_at, shown, validation_error
from trt_routes.manifest.schema import SCHEMA_VERSION, Manifest, Paths
from trt_routes.text import NotRegularFileError, read_regular

SCHEMA_ID = f"urn:trt-routes:manifest:v{SCHEMA_VERSION}"


@dataclass
class LoadedManifest:
    """A validated manifest with its file, text and the position of every value in it.

    ``positions`` maps a key path such as ``("models", "resnet-like", "shapes", "bs8")`` to the
    1-based (line, column) of the value there; ``key_positions`` does the same for the key that
    introduces it, and ``widths`` holds the length of single-line scalars (for the caret)."""

    manifest: Manifest
    path: Path
    text: str
    positions: dict[KeyPath, Position]
    key_positions: dict[KeyPath, Position] = field(default_factory=dict)
    widths: dict[KeyPath, int] = field(default_factory=dict)

    def locate(self, path: KeyPath) -> Position | None:
        """The position of ``path``'s value, or of its nearest ancestor that the file spells out."""
        return locate(self.positions, path)

    def error(self, path: KeyPath, message: str, hint: str | None = None) -> ManifestError:
        """A ManifestError pointing at ``path``'s value (or its nearest written ancestor)."""
        found = nearest(self.positions, path)
        if found is None:
            return ManifestError(message, hint, path=shown(self.path))
        line, column = self.positions[found]
        width = self.widths.get(found, 1) if found == path else 1
        return error_at(self.path, self.text, (line, column), message, hint, width)

    def error_in(self, path: KeyPath, needle: str, message: str, hint: str | None = None) -> ManifestError:
        """A ManifestError at the first occurrence of ``needle`` inside ``path``'s value (e.g. one
        token of a multi-line switch group); falls back to the value itself."""
        start = self.locate(path)
        if start is not None and needle:
            lines = self.text.splitlines()
            for n in range(start[0] - 1, len(lines)):
                col = lines[n].find(needle, start[1] - 1 if n == start[0] - 1 else 0)
                if col >= 0:
                    return error_at(self.path, self.text, (n + 1, col + 1), message, hint, len(needle))
        return self.error(path, message, hint)

    def resolve(self, rel: str) -> Path:
        """``rel`` (as written in the manifest) relative to the manifest's folder."""
        p = Path(rel).expanduser()
        return (p if p.is_absolute() else self.path.parent / p).resolve()


def load_manifest(path: Path | str) -> LoadedManifest:
    """Read and validate tuning.yaml; every problem is raised as a ManifestError with a position."""
    given = Path(path)
    text = _read(given)
    resolved = given.resolve()

    try:
        root = compose(text)
    except yaml.MarkedYAMLError as exc:
        raise _yaml_error(resolved, text, exc) from None
    except yaml.reader.ReaderError as exc:  # a control character: no mark, only an offset
        before = text[: exc.position]
        where = (before.count("\n") + 1, exc.position - (before.rfind("\n") + 1) + 1)
        message = f"invalid YAML: character #x{exc.character:04x} is not allowed"
        raise error_at(resolved, text, where, message,
                        "remove the control character, or write it as an escape in a quoted string") from None
    except RecursionError:
        raise ManifestError("the manifest is nested too deeply to read",
                            "flatten it: tuning.yaml needs a handful of levels",
                            path=shown(resolved)) from None

    if not isinstance(root, yaml.MappingNode):
        where = (root.start_mark.line + 1, root.start_mark.column + 1) if root is not None else (1, 1)
        kind = "empty" if root is None else f"a {node_kind(root)}"
        raise error_at(resolved, text, where, f"the manifest must be a mapping, but the file is {kind}",
                        "start with 'schema_version: 1' and a 'models:' mapping at the top level")

    _check_expansion(resolved, text, root)
    _check_duplicates(resolved, text, root)
    try:
        data = construct(root)
    except yaml.MarkedYAMLError as exc:
        raise _yaml_error(resolved, text, exc) from None
    positions, key_positions, widths = index_positions(root)
    loaded_parts = (positions, key_positions, widths)
    _check_version(resolved, text, data, loaded_parts)

    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        raise validation_error(resolved, text, data, loaded_parts, exc) from None
    loaded = LoadedManifest(manifest, resolved, text, positions, key_positions, widths)
    _check_paths(loaded)
    return loaded


def _path_fields(manifest: Manifest) -> Iterator[tuple[KeyPath, str]]:
    paths = manifest.paths
    for key in ("cache", "engines", "lockfile", "out"):
        yield ("paths", key), getattr(paths, key)
    for name, model in manifest.models.items():
        if model.path is not None:
            yield ("models", name, "path"), model.path
        if not isinstance(model.reference, str):
            yield ("models", name, "reference", "inputs"), model.reference.inputs
            yield ("models", name, "reference", "outputs"), model.reference.outputs


def _check_paths(loaded: LoadedManifest) -> None:
    """Every path the manifest names can be resolved (no unknown ~user, no symlink loop), and the paths
    trt-routes writes do not point at the manifest, at one another, or at something of the wrong kind."""
    resolved: dict[KeyPath, Path] = {}
    for where, text in _path_fields(loaded.manifest):
        try:
            resolved[where] = loaded.resolve(text)
        except (RuntimeError, OSError, ValueError) as exc:
            reason = "a symbolic link loop" if "loop" in str(exc).lower() else str(exc) or type(exc).__name__
            raise loaded.error(where, f"{dotted(where)}: cannot use the path '{text}': {reason}",
                               "give a path relative to the manifest's folder, or an absolute one") from None
    written = {w: p for w, p in resolved.items() if w[0] == "paths"}
    for where, path in written.items():
        if path == loaded.path:
            raise loaded.error(where, f"{dotted(where)} points at the manifest itself",
                               f"use the default ({_DEFAULT_PATHS[str(where[1])]})")
        must_be_dir = where[1] in ("engines", "out")
        if path.exists() and path.is_dir() != must_be_dir:
            kind = "a folder" if must_be_dir else "a file"
            raise loaded.error(where, f"{dotted(where)}: '{path}' exists and is not {kind}",
                               f"use the default ({_DEFAULT_PATHS[str(where[1])]}) or another path")
    seen: dict[Path, KeyPath] = {}
    for where, path in written.items():
        if path in seen:
            raise loaded.error(where, f"{dotted(where)} is the same path as {dotted(seen[path])}",
                               "give each its own path")
        seen[path] = where


_DEFAULT_PATHS = {k: str(v.default) for k, v in Paths.model_fields.items()}


def manifest_json_schema() -> dict[str, Any]:
    """The JSON Schema of tuning.yaml, for editors (``trt-routes schema``)."""
    body = Manifest.model_json_schema(mode="validation")
    body.pop("title", None)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": f"trt-routes tuning.yaml (schema_version {SCHEMA_VERSION})",
        **body,
    }


def _read(path: Path) -> str:
    shown = str(path)
    if not path.exists():
        raise ManifestError(f"manifest not found: {shown}",
                            "create it (it needs 'schema_version: 1' and a 'models:' mapping), "
                            "or pass --manifest PATH to use another file", path=shown)
    if path.is_dir():
        raise ManifestError(f"the manifest is a folder, not a file: {shown}",
                            f"pass the file itself, e.g. --manifest {path / 'tuning.yaml'}", path=shown)
    try:
        raw = read_regular(path, MAX_MANIFEST_BYTES)
    except NotRegularFileError as exc:
        raise ManifestError(f"the manifest {exc}", "point --manifest at the tuning.yaml file itself",
                            path=shown) from None
    except OSError as exc:
        raise ManifestError(f"cannot read the manifest: {exc.strerror or exc}",
                            "check the file's permissions", path=shown) from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ManifestError(f"the manifest is not UTF-8 text (byte 0x{raw[exc.start]:02x})",
                            "save the file as UTF-8", path=shown, line=line, column=column) from None


def _yaml_error(path: Path, text: str, exc: yaml.MarkedYAMLError) -> ManifestError:
    mark = exc.problem_mark or exc.context_mark
    problem = exc.problem or "cannot parse"
    context = exc.context or ""
    if context and exc.context_mark is not None and exc.context_mark is not mark:
        context += f" at line {exc.context_mark.line + 1}"
    if context and problem.startswith("but "):  # "expected a single document ..., but found another"
        message = f"invalid YAML: {context}, {problem}"
    else:
        message = f"invalid YAML: {problem}" + (f" ({context})" if context else "")
    where = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    return error_at(path, text, where, message, _yaml_hint(problem, context))


def _yaml_hint(problem: str, context: str) -> str:
    if "'\\t'" in problem or "\t" in problem:
        return "YAML does not allow tabs for indentation: indent with spaces"
    if "mapping values are not allowed" in problem:
        return "a ':' followed by a space inside a value needs quotes, or the indentation is off"
    if "expected a single document" in context:
        return "keep the whole manifest in one YAML document (remove the second '---')"
    if "could not determine a constructor" in problem:
        return "remove the custom '!tag': the manifest takes plain YAML values only"
    if "found undefined alias" in problem:
        return "define the anchor ('&name') before using it ('*name')"
    if "quoted scalar" in context:
        return "close the quote"
    if "flow" in context:
        return "close the bracket or brace, and separate items with ','"
    return "check the indentation and quoting on this line and the one before"


#: The largest manifest read, and the most nodes its aliases may expand to (a real one has a few hundred).
MAX_MANIFEST_BYTES = 1024 * 1024
MAX_MANIFEST_NODES = 100_000


def _check_expansion(path: Path, text: str, root: yaml.Node) -> None:
    """Refuse a manifest whose aliases expand past MAX_MANIFEST_NODES (an alias bomb: nine levels of ten
    aliases are 10^9 nodes to every walk after this one). Counted once per node, so linear in the text."""
    size: dict[int, int] = {}
    entered: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in size:
            continue
        if not done and id(node) in entered:  # reached again inside itself
            where = (node.start_mark.line + 1, node.start_mark.column + 1)
            raise error_at(path, text, where, "this value contains itself through an alias",
                           "write the values out instead of the alias ('*name') inside its own anchor")
        entered.add(id(node))
        children: list[yaml.Node] = []
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        if not done:
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in size)
            continue
        size[id(node)] = 1 + sum(size.get(id(c), 1) for c in children)
        if size[id(node)] > MAX_MANIFEST_NODES:
            where = (node.start_mark.line + 1, node.start_mark.column + 1)
            raise error_at(path, text, where, f"this value expands to over {MAX_MANIFEST_NODES} YAML nodes "
                           "through anchors and aliases", "write the values out, or use fewer nested aliases "
                           "('*name'): a manifest needs a few hundred nodes")


def _check_duplicates(path: Path, text: str, root: yaml.Node) -> None:
    """PyYAML keeps the last of two equal keys without a word; a manifest may not have any."""
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, KeyPath]] = [(root, ())]
    found: list[tuple[Position, ManifestError]] = []
    while stack:
        node, where = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[object, yaml.Node] = {}
            for knode, vnode in pairs(node):
                key = key_value(knode)
                try:
                    earlier = first.get(key)
                except TypeError:  # an unhashable key; the constructor reports it
                    continue
                if earlier is not None:
                    pos = (knode.start_mark.line + 1, knode.start_mark.column + 1)
                    width = knode.end_mark.column - knode.start_mark.column
                    parent = f" in {dotted(where)}" if where else ""
                    message = f"duplicate key '{key}'{parent} (first at line {earlier.start_mark.line + 1})"
                    hint = "YAML keeps only the last of equal keys: remove one, or merge the two"
                    found.append((pos, error_at(path, text, pos, message, hint, width)))
                else:
                    first[key] = knode
                child = (*where, key) if isinstance(key, str | int) else where
                stack.append((vnode, child))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, (*where, i)) for i, item in enumerate(node.value))
    if found:
        raise combine([err for _, err in sorted(found, key=lambda item: item[0])])


def _check_version(path: Path, text: str, data: dict[Any, Any], parts: Parts) -> None:
    positions, key_positions, widths = parts
    if "schema_version" not in data:
        keys = [k for k in data if isinstance(k, str)]
        close = difflib.get_close_matches("schema_version", keys, n=1, cutoff=0.7)
        if close:
            raise error_at(path, text, key_positions[(close[0],)], "the manifest has no 'schema_version'",
                            f"rename '{close[0]}' to 'schema_version'", widths.get((close[0], "[key]"), 1))
        raise error_at(path, text, positions[()], "the manifest has no 'schema_version'",
                        f"add 'schema_version: {SCHEMA_VERSION}' as the first line")
    version = data["schema_version"]
    where = positions[("schema_version",)]
    width = widths.get(("schema_version",), 1)
    if not isinstance(version, int) or isinstance(version, bool):
        raise error_at(path, text, where, f"schema_version must be a whole number, not {version!r}",
                        f"write 'schema_version: {SCHEMA_VERSION}'", width)
    if version > SCHEMA_VERSION:
        raise error_at(path, text, where,
                        f"this manifest uses schema_version {version}, but this trt-routes reads "
                        f"schema_version {SCHEMA_VERSION} only",
                        "upgrade trt-routes (pip install -U trt-routes)", width)
    if version != SCHEMA_VERSION:
        raise error_at(path, text, where, f"unsupported schema_version {version}",
                        f"write 'schema_version: {SCHEMA_VERSION}'", width)
