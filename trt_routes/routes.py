"""Tuning expressions (trtexec's ``--tuneBuildRoutes`` grammar) and canonical routes.

An expression pins some knobs and varies others over lists; a route is one concrete assignment."""

from __future__ import annotations

__all__ = [
    "DEFAULT_ROUTE", "UNBOUNDED_LIMIT", "Expression", "Token", "canonical", "count_text", "describe",
    "parse_expression", "parse_route", "product_size", "route_dict", "validate_expression",
]

import difflib
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from trt_routes.catalog import Catalog, Knob
from trt_routes.errors import RouteError

#: The default route: every knob at its catalog default (canonical form: the empty string).
DEFAULT_ROUTE = ""

_TOKEN_START = re.compile(r"-[^\s=\[\]|]+=")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_RANGE = re.compile(r"([+-]?[0-9]{1,10})\.\.([+-]?[0-9]{1,10})")
_MAX_RANGE_HINT = 16


def count_text(n: int) -> str:
    """A count of routes or builds as a reader takes it in: ``1,638``, or ``1.32e+477`` once it has more than
    seven digits (a 1,000-knob group's product has hundreds: a float cannot hold it, a ``Decimal`` can)."""
    return f"{n:,}" if n < 10_000_000 else f"{Decimal(n):.2e}"


#: Without max_builds or max_minutes, a product of more routes than this cannot be walked to its end: ``full``
#: over such a group is refused when the manifest is read, ``mixed``'s phase 2 over such a product is left out.
UNBOUNDED_LIMIT = 1_000_000


def product_size(tokens: Sequence[Token]) -> int:
    """How many routes the product of the tokens' lists holds (before duplicates are merged)."""
    return math.prod(len(t.values) for t in tokens)


@dataclass(frozen=True)
class Token:
    """One expression token: ``-knob=value`` (pinned) or ``-knob=[a|b|c]`` (varied)."""

    option: str
    values: tuple[str, ...]
    pinned: bool

    def text(self) -> str:
        if self.pinned:
            return f"{self.option}={self.values[0]}"
        return f"{self.option}=[{'|'.join(self.values)}]"


@dataclass(frozen=True)
class Expression:
    """A parsed tuning expression: tokens in the order they were written."""

    tokens: tuple[Token, ...]

    @property
    def varied(self) -> tuple[Token, ...]:
        return tuple(t for t in self.tokens if not t.pinned)

    @property
    def pinned(self) -> dict[str, str]:
        return {t.option: t.values[0] for t in self.tokens if t.pinned}

    def text(self) -> str:
        """The expression as trtexec's ``--tuneBuildRoutes`` takes it."""
        return " ".join(t.text() for t in self.tokens)


def parse_expression(text: str, catalog: Catalog | None = None, *, source: str = "expression") -> Expression:
    """Parse tokens separated by any whitespace (one per line in the file form; ``#`` lines are comments).

    With a catalog, every knob and value is checked and open numeric values are normalized."""
    tokens: list[Token] = []
    seen: dict[str, str] = {}
    for raw, where in _pieces(text, source):
        token = _parse_token(raw, where, catalog)
        if catalog is not None:
            token = _checked(token, catalog, where, raw)
        _check_duplicate(token, raw, seen, where)
        tokens.append(token)
    return Expression(tuple(tokens))


def validate_expression(expr: Expression, catalog: Catalog, *, source: str = "expression") -> None:
    """Check an expression against a catalog: known knobs, allowed values, no duplicates."""
    seen: dict[str, str] = {}
    for token in expr.tokens:
        raw = token.text()
        if not token.values or (token.pinned and len(token.values) != 1):
            raise RouteError(
                f"{source}: token `{raw}` has {len(token.values)} values",
                "a pinned token has exactly one value, a varied token at least one",
            )
        _checked(token, catalog, source, raw)
        _check_duplicate(token, raw, seen, source)


def parse_route(text: str, catalog: Catalog | None = None, *, source: str = "route") -> dict[str, str]:
    """Parse a route: pinned ``-knob=value`` tokens only. ``""`` or ``default`` is the default route."""
    if text.strip() == "default":
        return {}
    assign: dict[str, str] = {}
    seen: dict[str, str] = {}
    for raw, where in _pieces(text, source):
        token = _parse_token(raw, where, catalog)
        if not token.pinned:
            raise RouteError(
                f"{where}: token `{raw}` is a list, but a route gives each knob one value",
                f"pick one value, e.g. `{token.option}={token.values[0]}`, "
                "or put the list in a tuning expression",
            )
        if catalog is not None:
            token = _checked(token, catalog, where, raw)
        _check_duplicate(token, raw, seen, where)
        assign[token.option] = token.values[0]
    return assign


def canonical(assign: Mapping[str, str], catalog: Catalog) -> str:
    """The canonical route: knobs at their default dropped, the rest sorted by name, ``-k=v`` joined.

    The empty string is the default route."""
    kept: dict[str, str] = {}
    for option, value in assign.items():
        knob = _knob(catalog, option, "route", f"{option}={value}")
        value = _allowed(knob, value.strip(), "route", f"{option}={value}")
        if value != _default(knob):
            kept[option] = value
    return " ".join(f"{option}={kept[option]}" for option in sorted(kept))


def route_dict(route: str) -> dict[str, str]:
    """Read a canonical route string back into ``{option: value}`` (no catalog needed)."""
    return parse_route(route)


def describe(route: str) -> str:
    """A route for people: ``default`` for the empty route."""
    return route or "default"


def _pieces(text: str, source: str) -> Iterator[tuple[str, str]]:
    """Split text into raw tokens with their location; a ``[`` list may span spaces on one line."""
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("#"):
            continue
        where = f"{source}:{number}" if len(lines) > 1 else source
        parts = line.split()
        i = 0
        while i < len(parts):
            raw = parts[i]
            i += 1
            while raw.count("[") > raw.count("]") and i < len(parts) and not _TOKEN_START.match(parts[i]):
                raw = f"{raw} {parts[i]}"
                i += 1
            yield raw, where


def _parse_token(raw: str, where: str, catalog: Catalog | None) -> Token:
    """Check one raw token's shape (no catalog rules) and split it into option and values."""
    shape = "tokens look like `-knob=value` (pin) or `-knob=[a|b]` (try each)"
    if not raw.startswith("-"):
        hint = f"write `-{raw}`" if "=" in raw and not raw.startswith("=") else shape
        raise RouteError(f"{where}: token `{raw}` does not start with `-`", hint)
    option, sep, value = raw.partition("=")
    if not sep:
        raise RouteError(
            f"{where}: token `{raw}` has no `=value`",
            f"write `{raw}=VALUE` to pin the knob or `{raw}=[a|b]` to try values "
            "(no spaces around `=`)",
        )
    if option.strip("-") == "":
        raise RouteError(f"{where}: token `{raw}` has no knob name", shape)
    if "*" in option:
        raise RouteError(
            f"{where}: token `{raw}` uses a wildcard in the knob name; the grammar has no wildcards",
            "name each knob in its own token; run `trt-routes knobs` to list them",
        )
    if any(c in option for c in "[]|"):
        raise RouteError(f"{where}: token `{raw}` has `[`, `]` or `|` in its knob name", shape)
    value = value.strip()
    if not value:
        raise RouteError(
            f"{where}: token `{raw}` has an empty value",
            f"write `{option}=VALUE` with no space after `=`",
        )
    _reject_patterns(raw, option, value, where, catalog)
    opens, closes = value.count("["), value.count("]")
    if opens == 0 and closes == 0:
        if "|" in value:
            raise RouteError(
                f"{where}: token `{raw}` lists values without brackets",
                f"write `{option}=[{value}]` to try each value",
            )
        return Token(option, (value,), True)
    if not (opens == closes == 1 and value.startswith("[") and value.endswith("]")):
        raise RouteError(
            f"{where}: token `{raw}` has unbalanced brackets",
            f"write the list as `{option}=[a|b]`: one `[` right after `=`, one `]` at the end",
        )
    inner = value[1:-1]
    if not inner.strip():
        raise RouteError(
            f"{where}: token `{raw}` has an empty list `[]`",
            f"list at least one value, e.g. `{option}=[a|b]`, or pin it with `{option}=value`",
        )
    items = tuple(item.strip() for item in inner.split("|"))
    if "" in items:
        raise RouteError(
            f"{where}: token `{raw}` has an empty item in its list",
            "remove the extra `|` (items are separated by exactly one `|`)",
        )
    for item in items:
        if any(c.isspace() for c in item):
            raise RouteError(
                f"{where}: value `{item}` in token `{raw}` contains a space",
                "separate list items with `|`",
            )
    _reject_repeats(raw, items, where)
    return Token(option, items, False)


def _reject_patterns(raw: str, option: str, value: str, where: str, catalog: Catalog | None) -> None:
    """Wildcards and ranges are not trtexec grammar: say so, and suggest the explicit list."""
    if ".." in value:
        match = _RANGE.search(value)
        low, high = (int(match.group(1)), int(match.group(2))) if match else (0, 2)
        if match and low <= high and high - low < _MAX_RANGE_HINT:
            listed = "|".join(str(n) for n in range(low, high + 1))
            hint = f"list the values instead: `{option}=[{listed}]`"
        else:
            hint = f"list each value instead, e.g. `{option}=[{low}|{high}]`"
        raise RouteError(f"{where}: token `{raw}` uses a range `..`; the grammar has no ranges", hint)
    if "*" not in value:
        return
    knob = catalog.get(option) if catalog is not None else None
    if knob is not None and knob.values is not None:
        hint = f"list the values you want; all of them: `{knob.allowed_text()}`"
    else:
        hint = f"list the values you want, e.g. `{option}=[a|b]`"
    raise RouteError(f"{where}: token `{raw}` uses a wildcard `*`; the grammar has no wildcards", hint)


def _reject_repeats(raw: str, values: tuple[str, ...], where: str) -> None:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise RouteError(
                f"{where}: token `{raw}` lists the value `{value}` twice",
                "remove the repeated value",
            )
        seen.add(value)


def _check_duplicate(token: Token, raw: str, seen: dict[str, str], where: str) -> None:
    if token.option in seen:
        raise RouteError(
            f"{where}: knob `{token.option}` appears twice (`{seen[token.option]}` and `{raw}`)",
            "keep one token per knob: pin it once, or list all its values in one `[...]`",
        )
    seen[token.option] = raw


def _checked(token: Token, catalog: Catalog, where: str, raw: str) -> Token:
    """The token with catalog rules applied: known knob, allowed values (open integers normalized)."""
    knob = _knob(catalog, token.option, where, raw)
    values = tuple(_allowed(knob, value, where, raw) for value in token.values)
    _reject_repeats(raw, values, where)
    return Token(token.option, values, token.pinned)


def _knob(catalog: Catalog, option: str, where: str, raw: str) -> Knob:
    knob = catalog.get(option)
    if knob is not None:
        return knob
    close = difflib.get_close_matches(option, catalog.options, n=3, cutoff=0.6)
    if close:
        hint = "did you mean " + " or ".join(f"`{c}`" for c in close) + "?"
    else:
        hint = "run `trt-routes knobs` to list them"
    raise RouteError(
        f"{where}: token `{raw}` names unknown knob `{option}` "
        f"(not in the {catalog.backend} {catalog.version} catalog)",
        hint,
    )


def _allowed(knob: Knob, value: str, where: str, raw: str) -> str:
    """The value as routes write it, or a RouteError saying which values the knob takes."""
    if knob.values is None and knob.open_type != "int":
        if not knob.allows(value):
            raise RouteError(
                f"{where}: token `{raw}`: `{knob.option}` is an open {knob.open_type} knob and `{value}` "
                f"is not {'a finite number' if knob.open_type == 'float' else 'one plain token'}",
                f"give one value, e.g. `{knob.option}={knob.default}`, or a list of them",
            )
        return repr(float(value)) if knob.open_type == "float" else value  # 1e-3 and 0.001: one route
    if knob.values is None:
        if not _INTEGER.fullmatch(value):
            raise RouteError(
                f"{where}: token `{raw}`: `{knob.option}` is an open integer knob and `{value}` "
                "is not an integer",
                f"give an integer, e.g. `{knob.option}={_default(knob)}`, or a list of integers",
            )
        if len(value.lstrip("+-")) > 10 or not knob.minimum <= int(value) <= knob.maximum:
            raise RouteError(
                f"{where}: token `{raw}`: `{value}` is out of range for `{knob.option}`",
                f"give an integer from {knob.minimum} to {knob.maximum}",
            )
        return str(int(value))
    if value not in knob.values:
        raise RouteError(
            f"{where}: token `{raw}`: value `{value}` is not allowed for `{knob.option}`",
            f"allowed values: {', '.join(knob.values)} (`{knob.allowed_text()}`)",
        )
    return value


def _default(knob: Knob) -> str:
    """The knob's default as routes write it (open integer defaults normalized)."""
    if knob.values is None and knob.open_type == "int" and _INTEGER.fullmatch(knob.default.strip()):
        return str(int(knob.default))
    if knob.values is None and knob.open_type == "float" and knob.allows(knob.default.strip()):
        return repr(float(knob.default))
    return knob.default
