"""Read tuning.yaml into a Manifest, keeping every node's position so that each error names
``file:LINE:COL``, shows the offending lines with a caret, and says how to fix it."""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from trt_routes.errors import ManifestError
from trt_routes.manifest import schema
from trt_routes.manifest.schema import SCHEMA_VERSION, Manifest

KeyPath = tuple[str | int, ...]
Position = tuple[int, int]

SCHEMA_ID = f"urn:trt-routes:manifest:v{SCHEMA_VERSION}"
MAX_REPORTED = 20  # problems shown in one report; the rest are counted
_NODE_BUDGET = 1_000_000  # positions recorded before shared (aliased) subtrees stop being re-walked
_LINE_BREAK = re.compile(r"\r\n|[\n\r\x85\u2028\u2029]")  # the breaks PyYAML counts lines by
_MODELS: dict[str, type[BaseModel]] = {
    obj.__name__: obj
    for obj in vars(schema).values()
    if isinstance(obj, type) and issubclass(obj, BaseModel) and obj is not BaseModel
}
# Errors meaning "this union branch is the wrong kind of value", as opposed to a real problem inside it.
_KIND_MISMATCH = frozenset({
    "list_type", "dict_type", "model_type", "model_attributes_type", "literal_error", "string_type",
    "int_type", "int_parsing", "int_from_float", "float_type", "float_parsing", "bool_type", "bool_parsing",
})


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
        return _locate(self.positions, path)

    def error(self, path: KeyPath, message: str, hint: str | None = None) -> ManifestError:
        """A ManifestError pointing at ``path``'s value (or its nearest written ancestor)."""
        found = _nearest(self.positions, path)
        if found is None:
            return ManifestError(message, hint, path=_shown(self.path))
        line, column = self.positions[found]
        width = self.widths.get(found, 1) if found == path else 1
        return _error_at(self.path, self.text, (line, column), message, hint, width)

    def error_in(self, path: KeyPath, needle: str, message: str, hint: str | None = None) -> ManifestError:
        """A ManifestError at the first occurrence of ``needle`` inside ``path``'s value (e.g. one
        token of a multi-line switch group); falls back to the value itself."""
        start = self.locate(path)
        if start is not None and needle:
            lines = self.text.splitlines()
            for n in range(start[0] - 1, len(lines)):
                col = lines[n].find(needle, start[1] - 1 if n == start[0] - 1 else 0)
                if col >= 0:
                    return _error_at(self.path, self.text, (n + 1, col + 1), message, hint, len(needle))
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

    loader: yaml.SafeLoader | None = None
    try:
        loader = yaml.SafeLoader(text)
        root = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        raise _yaml_error(resolved, text, exc) from None
    except yaml.reader.ReaderError as exc:  # a control character: no mark, only an offset
        before = text[: exc.position]
        where = (before.count("\n") + 1, exc.position - (before.rfind("\n") + 1) + 1)
        message = f"invalid YAML: character #x{exc.character:04x} is not allowed"
        raise _error_at(resolved, text, where, message,
                        "remove the control character, or write it as an escape in a quoted string") from None
    except RecursionError:
        raise ManifestError("the manifest is nested too deeply to read",
                            "flatten it: tuning.yaml needs a handful of levels",
                            path=_shown(resolved)) from None
    finally:
        if loader is not None:
            loader.dispose()

    if not isinstance(root, yaml.MappingNode):
        where = (root.start_mark.line + 1, root.start_mark.column + 1) if root is not None else (1, 1)
        kind = "empty" if root is None else f"a {_node_kind(root)}"
        raise _error_at(resolved, text, where, f"the manifest must be a mapping, but the file is {kind}",
                        "start with 'schema_version: 1' and a 'models:' mapping at the top level")

    _check_duplicates(resolved, text, root)
    try:
        data = _construct(root)
    except yaml.MarkedYAMLError as exc:
        raise _yaml_error(resolved, text, exc) from None
    positions, key_positions, widths = _index_positions(root)
    loaded_parts = (positions, key_positions, widths)
    _check_version(resolved, text, data, loaded_parts)

    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        raise _validation_error(resolved, text, data, loaded_parts, exc) from None
    return LoadedManifest(manifest, resolved, text, positions, key_positions, widths)


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


# --- reading and YAML ------------------------------------------------------------------------


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
        raw = path.read_bytes()
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
    return _error_at(path, text, where, message, _yaml_hint(problem, context))


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


def _node_kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "mapping"
    if isinstance(node, yaml.SequenceNode):
        return "list"
    return "null" if node.tag.endswith(":null") else "scalar"


def _key_value(node: yaml.Node) -> object:
    """The Python value of a key node, as the constructor will build it."""
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    except yaml.YAMLError:
        return ("<unconstructible>", id(node))
    finally:
        loader.dispose()


def _pairs(node: yaml.MappingNode) -> Iterator[tuple[yaml.Node, yaml.Node]]:
    """The pairs written in a mapping, merge keys ('<<') left out."""
    for knode, vnode in node.value:
        if knode.tag != "tag:yaml.org,2002:merge":
            yield knode, vnode


def _children(node: yaml.Node) -> Iterator[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        for knode, vnode in node.value:
            yield knode
            yield vnode
    elif isinstance(node, yaml.SequenceNode):
        yield from node.value


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
            for knode, vnode in _pairs(node):
                key = _key_value(knode)
                try:
                    earlier = first.get(key)
                except TypeError:  # an unhashable key; the constructor reports it
                    continue
                if earlier is not None:
                    pos = (knode.start_mark.line + 1, knode.start_mark.column + 1)
                    width = knode.end_mark.column - knode.start_mark.column
                    parent = f" in {_dotted(where)}" if where else ""
                    message = f"duplicate key '{key}'{parent} (first at line {earlier.start_mark.line + 1})"
                    hint = "YAML keeps only the last of equal keys: remove one, or merge the two"
                    found.append((pos, _error_at(path, text, pos, message, hint, width)))
                else:
                    first[key] = knode
                child = (*where, key) if isinstance(key, str | int) else where
                stack.append((vnode, child))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, (*where, i)) for i, item in enumerate(node.value))
    if found:
        raise _combine([err for _, err in sorted(found, key=lambda item: item[0])])


def _construct(root: yaml.Node) -> Any:
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_document(root)
    finally:
        loader.dispose()


def _index_positions(root: yaml.Node) -> tuple[dict[KeyPath, Position], dict[KeyPath, Position],
                                                 dict[KeyPath, int]]:
    """Positions of every value and key. Runs after construction, which flattens merge keys
    into the mappings, so the last equal key (the one that wins) is the one recorded."""
    positions: dict[KeyPath, Position] = {}
    keys: dict[KeyPath, Position] = {}
    widths: dict[KeyPath, int] = {}
    walked: set[int] = set()

    def visit(node: yaml.Node, where: KeyPath, active: frozenset[int]) -> None:
        positions[where] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if isinstance(node, yaml.ScalarNode) and node.start_mark.line == node.end_mark.line:
            widths[where] = max(1, node.end_mark.column - node.start_mark.column)
        if id(node) in active or (id(node) in walked and len(positions) > _NODE_BUDGET):
            return  # a cycle through an alias, or a shared subtree walked often enough already
        walked.add(id(node))
        inner = active | {id(node)}
        if isinstance(node, yaml.MappingNode):
            for knode, vnode in node.value:
                key = _key_value(knode)
                if not isinstance(key, str | int):
                    continue
                keys[(*where, key)] = (knode.start_mark.line + 1, knode.start_mark.column + 1)
                if knode.start_mark.line == knode.end_mark.line:
                    widths[(*where, key, "[key]")] = max(1, knode.end_mark.column - knode.start_mark.column)
                visit(vnode, (*where, key), inner)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                visit(item, (*where, i), inner)

    visit(root, (), frozenset())
    return positions, keys, widths


# --- schema_version --------------------------------------------------------------------------

_Parts = tuple[dict[KeyPath, Position], dict[KeyPath, Position], dict[KeyPath, int]]


def _check_version(path: Path, text: str, data: dict[Any, Any], parts: _Parts) -> None:
    positions, key_positions, widths = parts
    if "schema_version" not in data:
        keys = [k for k in data if isinstance(k, str)]
        close = difflib.get_close_matches("schema_version", keys, n=1, cutoff=0.7)
        if close:
            raise _error_at(path, text, key_positions[(close[0],)], "the manifest has no 'schema_version'",
                            f"rename '{close[0]}' to 'schema_version'", widths.get((close[0], "[key]"), 1))
        raise _error_at(path, text, positions[()], "the manifest has no 'schema_version'",
                        f"add 'schema_version: {SCHEMA_VERSION}' as the first line")
    version = data["schema_version"]
    where = positions[("schema_version",)]
    width = widths.get(("schema_version",), 1)
    if not isinstance(version, int) or isinstance(version, bool):
        raise _error_at(path, text, where, f"schema_version must be a whole number, not {version!r}",
                        f"write 'schema_version: {SCHEMA_VERSION}'", width)
    if version > SCHEMA_VERSION:
        raise _error_at(path, text, where,
                        f"this manifest uses schema_version {version}, but this trt-routes reads "
                        f"schema_version {SCHEMA_VERSION} only",
                        "upgrade trt-routes (pip install -U trt-routes)", width)
    if version != SCHEMA_VERSION:
        raise _error_at(path, text, where, f"unsupported schema_version {version}",
                        f"write 'schema_version: {SCHEMA_VERSION}'", width)


# --- pydantic errors -------------------------------------------------------------------------


@dataclass
class _Problem:
    loc: KeyPath  # the key path in the file (union branch tags removed)
    tag_at: int | None  # index in pydantic's loc of the first union branch tag, if any
    raw: dict[str, Any]


def _validation_error(path: Path, text: str, data: Any, parts: _Parts, exc: ValidationError) -> ManifestError:
    positions, key_positions, widths = parts
    problems = _drop_misspelled(_prune_unions([_to_problem(positions, err) for err in exc.errors()]))
    errors: list[tuple[Position, ManifestError]] = []
    for group in problems:
        where, at_key, message, hint = _describe(group, data)
        pos, width = _position(positions, key_positions, widths, where, at_key)
        errors.append((pos, _error_at(path, text, pos, message, hint, width)))
    errors.sort(key=lambda item: item[0])
    unique: list[ManifestError] = []
    for _, err in errors:
        if all(str(err) != str(other) for other in unique):
            unique.append(err)
    return _combine(unique)


def _to_problem(positions: dict[KeyPath, Position], err: dict[str, Any]) -> _Problem:
    loc: tuple[str | int, ...] = tuple(err["loc"])
    walked: KeyPath = ()
    tag_at: int | None = None
    last = len(loc) - 1
    for i, part in enumerate(loc):
        known = part == "[key]" or (*walked, part) in positions
        if known or (err["type"] == "missing" and i == last):
            walked = (*walked, part)
        elif tag_at is None:
            tag_at = i
    return _Problem(walked, tag_at, err)


def _prune_unions(problems: list[_Problem]) -> list[list[_Problem]]:
    """Keep the union branches whose kind matched the value; if none did, merge the branches
    into one problem ("expected a list of integers or a mapping with keys min, opt, max")."""
    groups: dict[tuple[str | int, ...], dict[str | int, list[_Problem]]] = {}
    out: list[list[_Problem]] = []
    for p in problems:
        if p.tag_at is None:
            out.append([p])
            continue
        raw_loc = tuple(p.raw["loc"])
        groups.setdefault(raw_loc[: p.tag_at], {}).setdefault(raw_loc[p.tag_at], []).append(p)
    for branches in groups.values():
        def mismatch(ps: list[_Problem]) -> bool:
            return len(ps) == 1 and ps[0].tag_at == len(ps[0].raw["loc"]) - 1 and \
                ps[0].raw["type"] in _KIND_MISMATCH
        matched = [ps for ps in branches.values() if not mismatch(ps)]
        if matched:
            out.extend([p] for ps in matched for p in ps)
        else:
            out.append([ps[0] for ps in branches.values()])
    return out


def _drop_misspelled(groups: list[list[_Problem]]) -> list[list[_Problem]]:
    """A misspelled key reads as an unknown key plus a missing one; report it once, as the former."""
    unknown: dict[KeyPath, list[str]] = {}
    for group in groups:
        p = group[0]
        if len(group) == 1 and p.raw["type"] == "extra_forbidden":
            unknown.setdefault(p.loc[:-1], []).append(str(p.loc[-1]))

    def misspelled(p: _Problem) -> bool:
        typos = unknown.get(p.loc[:-1], [])
        return bool(difflib.get_close_matches(str(p.loc[-1]), typos, n=1, cutoff=0.6))

    return [g for g in groups if not (len(g) == 1 and g[0].raw["type"] == "missing" and misspelled(g[0]))]


def _describe(group: list[_Problem], data: Any) -> tuple[KeyPath, bool, str, str | None]:
    """(where, point at the key?, message, hint) for one problem or one merged union problem."""
    first = group[0]
    loc = first.loc
    if len(group) > 1:
        tags = [str(tuple(p.raw["loc"])[p.tag_at or 0]) for p in group]
        wanted = _either([_tag_text(tag, p.raw) for tag, p in zip(tags, group, strict=True)])
        value = _value_at(data, loc)
        hint = _closest_literal(value, group) or f"write {wanted}"
        return loc, False, f"{_dotted(loc)}: expected {wanted}, got {_short(value)}", hint
    err = first.raw
    kind = err["type"]
    if kind == "extra_forbidden":
        key = loc[-1]
        model = _model_at(tuple(err["loc"])[:-1])
        valid = sorted(model.model_fields) if model is not None else []
        close = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.6)
        hint = (f"did you mean '{close[0]}'?" if close
                else f"valid keys here: {', '.join(valid)}" if valid else "remove it")
        parent = f" in {_dotted(loc[:-1])}" if loc[:-1] else ""
        return loc, True, f"unknown key '{key}'{parent}", hint
    if kind == "missing":
        field_name = loc[-1]
        parent = loc[:-1]
        where = f" in {_dotted(parent)}" if parent else " at the top level"
        return parent, True, f"missing required key '{field_name}'{where}", f"add '{field_name}: ...'"
    if loc and loc[-1] == "[key]":
        name = loc[-2]
        return loc, True, f"{_dotted(loc[:-2])}: invalid name '{name}': {_plain(err)}", _hint_for(err)
    if kind == "value_error" and not loc:
        return _cross_reference(err, data)
    value = _value_at(data, loc)
    prefix = f"{_dotted(loc)}: " if loc else ""
    message = f"{prefix}{_plain(err)}"
    if kind not in ("value_error", "missing") and not isinstance(value, dict | list):
        message += f" (got {_short(value)})"
    return loc, False, message, _hint_for(err, value)


_UNKNOWN = re.compile(r"^models\.(?P<model>.+): unknown (?P<kind>target|switch group|strategy|tolerance) "
                      r"'(?P<name>.*)'; (?P<hint>.*)$", re.S)
_TABLES = {"target": ("targets", "targets"), "switch group": ("switch_groups", "switch_group"),
           "strategy": ("strategies", "strategy"), "tolerance": ("tolerances", "tolerance")}
_UNSET = re.compile(r"^model '(?P<model>.+)' has no (?P<kind>[a-z ]+): (?P<hint>set .*)$", re.S)


def _cross_reference(err: dict[str, Any], data: Any) -> tuple[KeyPath, bool, str, str | None]:
    """Manifest-level checks (names that refer to other tables): point at the referring value."""
    text = _plain(err)
    if m := _UNKNOWN.match(text):
        model, kind, name = m["model"], m["kind"], m["name"]
        table, field_name = _TABLES[kind]
        hint = _defined_hint(m["hint"], table)
        for owner in (("models", model), ("defaults",)):
            where = (*owner, field_name)
            got = _value_at(data, where)
            if isinstance(got, list) and name in got:
                where = (*where, got.index(name))
            elif got != name:
                continue
            return where, False, f"{_dotted(where)}: unknown {kind} '{name}'", hint
        return ("models", model), True, f"models.{model}: unknown {kind} '{name}'", hint
    if m := _UNSET.match(text):
        return ("models", m["model"]), True, f"model '{m['model']}' has no {m['kind']}", m["hint"]
    return (), False, text, None


def _defined_hint(hint: str, table: str) -> str:
    if hint.startswith("defined: none"):
        return f"define it under '{table}:' first"
    if hint.startswith("defined: "):
        return f"use one of the names under '{table}:' ({hint.removeprefix('defined: ')}), or define it there"
    return hint


def _plain(err: dict[str, Any]) -> str:
    if err["type"] == "value_error" and "error" in err.get("ctx", {}):
        return str(err["ctx"]["error"])
    if err["type"] == "string_pattern_mismatch":
        return "names use letters, digits, '_', '.' and '-', and start with a letter or digit"
    msg = str(err["msg"])
    return msg[0].lower() + msg[1:] if msg[:1].isupper() and msg[1:2].islower() else msg


def _hint_for(err: dict[str, Any], value: object = None) -> str | None:
    kind = err["type"]
    ctx = err.get("ctx", {})
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        close = difflib.get_close_matches(str(value), choices, n=1) if isinstance(value, str) else []
        return f"did you mean '{close[0]}'?" if close else f"use one of: {', '.join(choices)}"
    if kind == "string_pattern_mismatch":
        return "rename it, e.g. 'resnet-50' or 'bs_8'"
    if kind == "list_type":
        return "write a list: [a, b] or one '- item' per line"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "write a mapping: 'key: value' pairs indented under this key"
    if kind == "too_short":
        return "add at least one entry"
    if kind.startswith(("greater_than", "less_than")):
        return "change the number to fit the bound"
    if kind.startswith("int_"):
        return "write a whole number, e.g. 8"
    if kind.startswith("float_"):
        return "write a number, e.g. 0.01"
    if kind.startswith("bool_"):
        return "write true or false"
    if kind.startswith("string_"):
        return "write text; quote it if YAML reads it as something else"
    return None


def _either(options: list[str]) -> str:
    return options[0] if len(options) == 1 else f"{', '.join(options[:-1])} or {options[-1]}"


def _tag_text(tag: str, err: dict[str, Any]) -> str:
    if tag.startswith("literal["):
        return str(err.get("ctx", {}).get("expected", tag))
    named = re.search(r"(\w+)\]?$", tag)
    if named and named.group(1) in _MODELS:
        fields = ", ".join(_MODELS[named.group(1)].model_fields)
        return f"a mapping with keys {fields}"
    simple = {"str": "a string", "int": "an integer", "float": "a number", "bool": "a boolean",
              "list[int]": "a list of integers", "list[str]": "a list of strings"}
    return simple.get(tag, tag)


def _closest_literal(value: object, group: list[_Problem]) -> str | None:
    if not isinstance(value, str):
        return None
    choices = [c for p in group if p.raw["type"] == "literal_error"
               for c in re.findall(r"'([^']*)'", str(p.raw.get("ctx", {}).get("expected", "")))]
    close = difflib.get_close_matches(value, choices, n=1)
    return f"did you mean '{close[0]}'?" if close else None


def _model_at(loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The pydantic model that validates the value at pydantic location ``loc``."""
    current: Any = Manifest
    parts = list(loc)
    while True:
        current = _unwrap(current, parts[0] if parts else None)
        if current is None:
            return None
        if isinstance(current, tuple):  # a union branch named by the next loc element
            current = current[0]
            parts.pop(0)
            continue
        if not parts:
            return current if isinstance(current, type) and issubclass(current, BaseModel) else None
        part = parts.pop(0)
        origin = typing.get_origin(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            info = current.model_fields.get(str(part))
            if info is None:
                return None
            current = info.annotation
        elif origin is dict:
            current = typing.get_args(current)[1]
        elif origin is list:
            current = typing.get_args(current)[0]
        else:
            return None


def _unwrap(tp: Any, next_part: str | int | None) -> Any:
    """Strip Annotated and Optional; for a real union, return (branch,) when ``next_part`` names it."""
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(members) == 1:
            return _unwrap(members[0], next_part)
        for member in members:
            if isinstance(member, type) and issubclass(member, BaseModel) and isinstance(next_part, str) \
                    and re.search(rf"\b{member.__name__}\]?$", next_part):
                return (member,)
        return None
    return tp


# --- positions and rendering -----------------------------------------------------------------


def _position(positions: dict[KeyPath, Position], key_positions: dict[KeyPath, Position],
              widths: dict[KeyPath, int], where: KeyPath, at_key: bool) -> tuple[Position, int]:
    if where and where[-1] == "[key]":
        where, at_key = where[:-1], True
    if at_key and where in key_positions:
        return key_positions[where], widths.get((*where, "[key]"), 1)
    found = _nearest(positions, where)
    if found is None:
        return (1, 1), 1
    return positions[found], widths.get(found, 1) if found == where else 1


def _nearest(positions: dict[KeyPath, Position], path: KeyPath) -> KeyPath | None:
    for end in range(len(path), -1, -1):
        if path[:end] in positions:
            return path[:end]
    return None


def _locate(positions: dict[KeyPath, Position], path: KeyPath) -> Position | None:
    found = _nearest(positions, path)
    return None if found is None else positions[found]


def _value_at(data: Any, loc: KeyPath) -> Any:
    for part in loc:
        in_list = isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data)
        if not (in_list or (isinstance(data, dict) and part in data)):
            return None
        data = data[part]
    return data


def _dotted(loc: KeyPath) -> str:
    out = ""
    for part in loc:
        if part == "[key]":
            continue
        out += f"[{part}]" if isinstance(part, int) and not isinstance(part, bool) and out else \
            f"{'.' if out else ''}{part}"
    return out or "(top level)"


def _short(value: object) -> str:
    text = repr(value) if not isinstance(value, dict | list) else type(value).__name__
    if value is None:
        text = "nothing (null)"
    return text if len(text) <= 40 else text[:37] + "..."


def _shown(path: Path) -> str:
    """The path as the user will recognise it: relative to the working folder when under it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def render_snippet(text: str, line: int, column: int, width: int = 1) -> str:
    """The line at ``line`` with one line of context each side, a line-number gutter and a caret
    (``^`` repeated ``width`` times) under ``column``. Both are 1-based."""
    lines = _LINE_BREAK.split(text)
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    if line > len(lines):  # a mark at the end of the file: point just past the last character
        line, column = len(lines), len(lines[-1]) + 1
    line = max(line, 1)
    first, last = max(1, line - 1), min(len(lines), line + 1)
    gutter = len(str(last))
    out: list[str] = []
    for n in range(first, last + 1):
        body = lines[n - 1].rstrip()
        out.append(f"  {n:>{gutter}} | {body}".rstrip())
        if n == line:
            raw = lines[n - 1]
            lead = "".join(c if c == "\t" else " " for c in raw[: column - 1])
            span = max(1, min(width, len(raw) - (column - 1)))
            out.append(f"  {'':>{gutter}} | {lead}{'^' * span}")
    return "\n".join(out)


def _error_at(path: Path, text: str, where: Position, message: str, hint: str | None,
              width: int = 1) -> ManifestError:
    line, column = where
    return ManifestError(message, hint, path=_shown(path), line=line, column=column,
                         snippet=render_snippet(text, line, column, width))


class ManifestProblems(ManifestError):
    """Several problems in one manifest; ``problems`` holds each, in file order.

    Its own path, line and column are those of the first problem."""

    def __init__(self, problems: list[ManifestError]) -> None:
        head = problems[0]
        super().__init__(head.message, head.hint, path=head.path, line=head.line, column=head.column,
                         snippet=head.snippet)
        self.problems = problems

    def __str__(self) -> str:
        shown = self.problems[:MAX_REPORTED]
        blocks = [str(p) for p in shown]
        more = len(self.problems) - len(shown)
        if more:
            blocks.append(f"... and {more} more problem{'s' if more > 1 else ''}")
        return f"{len(self.problems)} problems in the manifest:\n\n" + "\n\n".join(blocks)


def _combine(errors: list[ManifestError]) -> ManifestError:
    return errors[0] if len(errors) == 1 else ManifestProblems(errors)
