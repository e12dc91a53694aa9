"""TensorRT's knob catalog (``IBuilderConfig.all_build_routes`` JSON) and route strings.

Pure functions: parse the catalog, render and parse ``-knob=value`` route strings, validate a route
against a catalog before it is handed to TensorRT, and compare what TensorRT reads back."""

from __future__ import annotations

import json
from collections.abc import Mapping
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


def parse_catalog(text: str, *, version: str) -> Catalog:
    """Parse the catalog JSON returned by ``IBuilderConfig.all_build_routes``.

    ``version`` is the TensorRT version the text came from. Raises CatalogFormatError for anything
    that is not the documented shape (every field a string, options with a leading dash, unique)."""
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
    knobs: list[Knob] = []
    seen: set[str] = set()
    for i, item in enumerate(options):
        where = f"build-route catalog: tuner_options[{i}]"
        if not isinstance(item, dict):
            raise CatalogFormatError(f"{where} must be an object", hint)
        for key in ("option", "allowed_values", "default_value", "help"):
            if key in item and not isinstance(item[key], str):
                raise CatalogFormatError(f"{where}.{key} must be a string, got {item[key]!r}", hint)
        option = item.get("option", "").strip()
        if not option.startswith("-") or len(option) < 2 or any(c.isspace() or c in "=[]|" for c in option):
            raise CatalogFormatError(f"{where}: bad option name {option!r}", hint)
        if option in seen:
            raise CatalogFormatError(f"{where}: option {option} is listed twice", hint)
        if "default_value" not in item:
            raise CatalogFormatError(f"{where}: option {option} has no default_value", hint)
        seen.add(option)
        values = _allowed_values(item.get("allowed_values", ""))
        default = item["default_value"].strip()
        knobs.append(Knob(option=option, values=values, default=default, help=item.get("help", "").strip()))
    return Catalog(backend=BACKEND_NAME, version=version, knobs=tuple(knobs), tuner_version=tuner_version)


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


def route_problems(route: Mapping[str, str], catalog: Catalog) -> list[str]:
    """Every reason ``route`` would not be accepted by TensorRT (empty list when it is valid)."""
    problems: list[str] = []
    for knob, value in sorted(route.items()):
        spec = catalog.get(knob)
        if spec is None:
            import difflib

            close = difflib.get_close_matches(knob, catalog.options, n=1)
            problems.append(f"unknown knob {knob}" + (f" (did you mean {close[0]}?)" if close else ""))
        elif not isinstance(value, str) or not value or any(c.isspace() for c in value):
            problems.append(f"{knob}: bad value {value!r}")
        elif not spec.allows(value):
            allowed = "an integer" if spec.values is None else "|".join(spec.values)
            problems.append(f"{knob}={value} is not allowed (allowed: {allowed})")
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


def without_defaults(route: Mapping[str, str], catalog: Catalog) -> dict[str, str]:
    """``route`` with every knob at its catalog default dropped (unknown knobs are kept)."""
    return {k: v for k, v in route.items() if (spec := catalog.get(k)) is None or spec.default != v}


def readback_differences(wanted: Mapping[str, str], readback: str, catalog: Catalog) -> list[str]:
    """How the route TensorRT reports differs from the one set, knobs at default ignored on both sides."""
    try:
        got_all = parse_route_text(readback)
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
