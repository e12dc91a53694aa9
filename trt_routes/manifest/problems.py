"""Pydantic validation errors turned into positioned manifest errors: one problem per mistake (union
branches pruned, misspellings folded into "did you mean"), each with file:LINE:COL, a snippet and a fix."""

from __future__ import annotations

import difflib
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from trt_routes.errors import ManifestError
from trt_routes.manifest import schema
from trt_routes.manifest.positions import LINE_BREAK, KeyPath, Parts, Position, dotted, position, value_at
from trt_routes.manifest.schema import Manifest

MAX_REPORTED = 20  # problems shown in one report; the rest are counted


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
class _Problem:
    loc: KeyPath  # the key path in the file (union branch tags removed)
    tag_at: int | None  # index in pydantic's loc of the first union branch tag, if any
    raw: dict[str, Any]


def validation_error(path: Path, text: str, data: Any, parts: Parts, exc: ValidationError) -> ManifestError:
    positions, key_positions, widths = parts
    problems = _drop_misspelled(_prune_unions([_to_problem(positions, dict(err)) for err in exc.errors()]))
    errors: list[tuple[Position, ManifestError]] = []
    for group in problems:
        where, at_key, message, hint = _describe(group, data)
        pos, width = position(positions, key_positions, widths, where, at_key)
        errors.append((pos, error_at(path, text, pos, message, hint, width)))
    errors.sort(key=lambda item: item[0])
    unique: list[ManifestError] = []
    for _, err in errors:
        if all(str(err) != str(other) for other in unique):
            unique.append(err)
    return combine(unique)


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
        value = value_at(data, loc)
        hint = _closest_literal(value, group) or f"write {wanted}"
        return loc, False, f"{dotted(loc)}: expected {wanted}, got {_short(value)}", hint
    err = first.raw
    kind = err["type"]
    if kind == "extra_forbidden":
        key = loc[-1]
        model = _model_at(tuple(err["loc"])[:-1])
        valid = sorted(model.model_fields) if model is not None else []
        close = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.6)
        hint = (f"did you mean '{close[0]}'?" if close
                else f"valid keys here: {', '.join(valid)}" if valid else "remove it")
        parent = f" in {dotted(loc[:-1])}" if loc[:-1] else ""
        return loc, True, f"unknown key '{key}'{parent}", hint
    if kind == "missing":
        field_name = loc[-1]
        parent_loc = loc[:-1]
        where = f" in {dotted(parent_loc)}" if parent_loc else " at the top level"
        return parent_loc, True, f"missing required key '{field_name}'{where}", f"add '{field_name}: ...'"
    if loc and loc[-1] == "[key]":
        name = str(loc[-2])
        return loc, True, f"{dotted(loc[:-2])}: invalid name '{name}': {_plain(err)}", _hint_for(err)
    if kind == "value_error" and not loc:
        return _cross_reference(err, data)
    value = value_at(data, loc)
    prefix = f"{dotted(loc)}: " if loc else ""
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
            got = value_at(data, where)
            if isinstance(got, list) and name in got:
                where = (*where, got.index(name))
            elif got != name:
                continue
            return where, False, f"{dotted(where)}: unknown {kind} '{name}'", hint
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


def _short(value: object) -> str:
    text = repr(value) if not isinstance(value, dict | list) else type(value).__name__
    if value is None:
        text = "nothing (null)"
    return text if len(text) <= 40 else text[:37] + "..."


def shown(path: Path) -> str:
    """The path as the user will recognise it: relative to the working folder when under it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def render_snippet(text: str, line: int, column: int, width: int = 1) -> str:
    """The line at ``line`` with one line of context each side, a line-number gutter and a caret
    (``^`` repeated ``width`` times) under ``column``. Both are 1-based."""
    lines = LINE_BREAK.split(text)
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


def error_at(path: Path, text: str, where: Position, message: str, hint: str | None,
              width: int = 1) -> ManifestError:
    line, column = where
    return ManifestError(message, hint, path=shown(path), line=line, column=column,
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


def combine(errors: list[ManifestError]) -> ManifestError:
    return errors[0] if len(errors) == 1 else ManifestProblems(errors)
