"""TensorRT's knob catalog (``IBuilderConfig.all_build_routes`` JSON) and route strings.

Pure functions: parse the catalog, render and parse ``-knob=value`` route strings, validate a route
against a catalog before it is handed to TensorRT, and compare what TensorRT reads back."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trt_routes.catalog import Catalog, Knob
from trt_routes.errors import BackendUnavailable, RouteError

BACKEND_NAME = "tensorrt"


class CatalogFormatError(BackendUnavailable):
    """``all_build_routes`` is not the documented JSON: the tuner cannot be driven safely."""


def _allowed_values(text: str) -> tuple[str, ...] | None:
    """Values between the first ``[`` and the first ``]`` split on ``|``; None for an open knob.

    Mirrors trtexec's ``BuildRouteKnobDatabase::parseAllowedValues``: no brackets (``=int32_t``,
    ``=int``), an empty list or ``...`` inside them all mean an open integer knob."""
    start, end = text.find("["), text.find("]")
    if start < 0 or end < 0 or end <= start:
        return None
    inner = text[start + 1 : end]
    if "..." in inner:
        return None
    values = tuple(v.strip() for v in inner.split("|") if v.strip())
    return values or None


@dataclass(frozen=True)
class CatalogReading:
    """A parsed catalog and the entries that were skipped, each with the reason."""

    catalog: Catalog
    skipped: tuple[str, ...] = ()


def _entry_problem(item: Any, where: str) -> str | None:
    """Why one ``tuner_options`` entry cannot be used, or None."""
    if not isinstance(item, dict):
        return f"{where} is not an object"
    for key in ("option", "allowed_values", "default_value", "help"):
        if key in item and not isinstance(item[key], str):
            return f"{where}.{key} is not a string ({item[key]!r})"
    option = item.get("option", "").strip()
    if not option.startswith("-") or len(option) < 2 or any(c.isspace() or c in "=[]|" for c in option):
        return f"{where}: bad option name {option!r}"
    if "default_value" not in item:
        return f"{where}: option {option} has no default_value"
    default = item["default_value"].strip()
    allowed = item.get("allowed_values", "")
    kind = open_type(allowed)
    if _allowed_values(allowed) is None and not Knob(option, None, default, open_type=kind).allows(default):
        # routes write open knobs' defaults normalized (trt_routes.routes); a default not of the knob's type
        # cannot be told apart from a set value there
        return f"{where}: open knob {option} has the default {default!r}, not of its type {kind}"
    return None


#: Type words of open knobs (``-knob=int32_t``): integers, floating point; any other word is ``text``.
_INT_TYPES = ("int", "int32_t", "int64_t", "uint32_t", "uint64_t", "long", "size_t", "")
_FLOAT_TYPES = ("float", "double")


def open_type(allowed_values: str) -> str:
    """The type of an open knob's values from its ``allowed_values`` (``-k=int32_t`` -> ``int``, ``-k=float`` ->
    ``float``, another word -> ``text``). A bracket form (``[]``, ``[...]``) is an integer knob, as trtexec
    reads it."""
    if "[" in allowed_values:
        return "int"
    word = allowed_values.partition("=")[2].strip().lower()
    return "int" if word in _INT_TYPES else "float" if word in _FLOAT_TYPES else "text"


def read_catalog(text: str, *, version: str) -> CatalogReading:
    """Parse the catalog JSON returned by ``IBuilderConfig.all_build_routes``, skipping odd entries.

    ``version`` is the TensorRT version the text came from. Like trtexec's ``BuildRouteKnobDatabase``
    (samples/common/sampleTuning.cpp), one entry that is not the documented shape is skipped, not fatal
    (each skip is named in ``skipped``); a later entry for the same option replaces the earlier one, as
    trtexec's map does. CatalogFormatError only when the whole text is unusable: empty, not JSON, no
    ``tuner_options`` list, or no usable entry at all."""
    hint = "the catalog comes from IBuilderConfig.all_build_routes; report this TensorRT version"
    if not text or not text.strip():
        raise CatalogFormatError("TensorRT returned an empty build-route catalog", hint)
    try:
        root: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CatalogFormatError(
            f"build-route catalog is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", hint
        ) from exc
    if not isinstance(root, dict):
        raise CatalogFormatError(
            f"build-route catalog must be a JSON object, got {type(root).__name__}", hint
        )
    tuner_version = root.get("tuner_version", "")
    if not isinstance(tuner_version, str):
        raise CatalogFormatError("build-route catalog: 'tuner_version' must be a string", hint)
    options = root.get("tuner_options")
    if not isinstance(options, list):
        raise CatalogFormatError("build-route catalog: 'tuner_options' must be a list", hint)
    knobs: dict[str, Knob] = {}
    skipped: list[str] = []
    for i, item in enumerate(options):
        where = f"tuner_options[{i}]"
        problem = _entry_problem(item, where)
        if problem:
            skipped.append(f"{problem}; skipped")
            continue
        option = item["option"].strip()
        knob = Knob(
            option=option,
            values=_allowed_values(item.get("allowed_values", "")),
            default=item["default_value"].strip(),
            help=item.get("help", "").strip(),
            open_type=open_type(item.get("allowed_values", "")),
        )
        if option in knobs:
            skipped.append(f"{where}: option {option} is listed again; the later entry replaces the earlier")
        knobs[option] = knob
    if not knobs:
        raise CatalogFormatError(
            "build-route catalog has no usable entry" + (f" ({'; '.join(skipped)})" if skipped else ""), hint
        )
    catalog = Catalog(
        backend=BACKEND_NAME, version=version, knobs=tuple(knobs.values()), tuner_version=tuner_version
    )
    return CatalogReading(catalog, tuple(skipped))


def parse_catalog(text: str, *, version: str) -> Catalog:
    """The catalog of ``read_catalog`` without the list of skipped entries."""
    return read_catalog(text, version=version).catalog


def route_text(route: Mapping[str, str]) -> str:
    """The string TensorRT takes: ``-knob=value`` tokens sorted by knob, one space apart."""
    return " ".join(f"{knob}={route[knob]}" for knob in sorted(route))


def parse_route_text(text: str) -> dict[str, str]:
    """Parse a route string (``-a=1 -b=off``) into a dict; RouteError on malformed or repeated tokens."""
    out: dict[str, str] = {}
    for token in text.split():
        knob, eq, value = token.partition("=")
        if not eq or not knob.startswith("-") or len(knob) < 2 or not value:
            raise RouteError(f"malformed build-route token {token!r}", "tokens look like -knob=value")
        if knob in out:
            raise RouteError(f"knob {knob} appears twice in route {text!r}")
        out[knob] = value
    return out


def value_problem(knob: Knob, value: str) -> str | None:
    """Why TensorRT's tuner would not take ``value`` for ``knob``, or None.

    A closed knob takes one of its listed values. An open knob takes any fixed value, as trtexec's
    ``BuildRouteExprParser::parseExpr`` does: it refuses only the type word ``int32_t`` (and a token
    cannot hold whitespace or list brackets)."""
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        return f"{knob.option}: bad value {value!r}"
    if knob.values is not None:
        if value not in knob.values:
            return f"{knob.option}={value} is not allowed (allowed: {'|'.join(knob.values)})"
        return None
    if value == "int32_t" or any(c in value for c in "[]|"):
        return f"{knob.option}={value} is not allowed: {knob.option} is open and takes one fixed value"
    return None


def route_problems(route: Mapping[str, str], catalog: Catalog) -> list[str]:
    """Every reason ``route`` would not be accepted by TensorRT (empty list when it is valid)."""
    problems: list[str] = []
    for knob, value in sorted(route.items()):
        spec = catalog.get(knob)
        if spec is None:
            import difflib

            close = difflib.get_close_matches(knob, catalog.options, n=1)
            problems.append(f"unknown knob {knob}" + (f" (did you mean {close[0]}?)" if close else ""))
            continue
        problem = value_problem(spec, value)
        if problem:
            problems.append(problem)
    return problems


def validate_route(route: Mapping[str, str], catalog: Catalog) -> str:
    """The route string for ``route`` after checking it against ``catalog``; RouteError if invalid.

    TensorRT's Python setter discards the C++ success flag, so this check is the only guard."""
    problems = route_problems(route, catalog)
    if problems:
        raise RouteError(
            f"route rejected before it reached TensorRT: {'; '.join(problems)}",
            f"list knobs with `trt-routes knobs` (catalog of TensorRT {catalog.version}, "
            f"tuner {catalog.tuner_version or 'unknown'})",
        )
    return route_text(route)


def canonical_value(knob: Knob | None, value: str) -> str:
    """One spelling per value: integers of open knobs without sign or leading zeros, closed values in the
    catalog's own spelling when they differ from it only in case (and that spelling is unambiguous)."""
    value = value.strip()
    if knob is None:
        return value
    if knob.values is None:
        try:
            return str(int(value))
        except ValueError:
            return value
    if value in knob.values:
        return value
    same = [v for v in knob.values if v.lower() == value.lower()]
    return same[0] if len(same) == 1 else value


def without_defaults(route: Mapping[str, str], catalog: Catalog) -> dict[str, str]:
    """``route`` in canonical spelling, every knob at its catalog default dropped (unknown knobs kept)."""
    out: dict[str, str] = {}
    for knob, value in route.items():
        spec = catalog.get(knob)
        value = canonical_value(spec, value)
        if spec is None or value != canonical_value(spec, spec.default):
            out[knob] = value
    return out


_READBACK_TOKEN = re.compile(r"(-[^\s=,;]+)\s*=\s*([^\s,;]*)")


def parse_readback(text: str) -> dict[str, str]:
    """The knobs of a route as TensorRT may print it: ``-k=v`` pairs separated by whitespace, commas or
    semicolons, with or without spaces around ``=``. RouteError for leftovers or a knob given twice with
    two values."""
    out: dict[str, str] = {}
    leftover = _READBACK_TOKEN.sub(" ", text).replace(",", " ").replace(";", " ")
    if leftover.strip():
        raise RouteError(f"unexpected text {leftover.strip()!r} in route {text!r}")
    for knob, value in _READBACK_TOKEN.findall(text):
        if not value:
            raise RouteError(f"knob {knob} has no value in route {text!r}")
        if out.get(knob, value) != value:
            raise RouteError(f"knob {knob} appears twice in route {text!r}")
        out[knob] = value
    return out


def readback_differences(wanted: Mapping[str, str], readback: str, catalog: Catalog) -> list[str]:
    """How the route TensorRT reports differs from the one set, compared canonically: order, separators,
    spelled-out defaults, integer formatting and the case of a listed value are formatting, not differences."""
    try:
        got_all = parse_readback(readback)
    except RouteError as exc:
        return [f"TensorRT read back an unparsable route {readback!r}: {exc.message}"]
    want = without_defaults(wanted, catalog)
    got = without_defaults(got_all, catalog)
    diffs: list[str] = []
    for knob in sorted(set(want) | set(got)):
        if knob not in got:
            default = catalog.get(knob)
            diffs.append(
                f"{knob}={want[knob]} was dropped"
                + (f" (TensorRT keeps the default {default.default})" if default else "")
            )
        elif knob not in want:
            diffs.append(f"{knob}={got[knob]} was added")
        elif want[knob] != got[knob]:
            diffs.append(f"{knob}={want[knob]} became {knob}={got[knob]}")
    return diffs
