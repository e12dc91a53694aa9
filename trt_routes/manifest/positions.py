"""Where each value of tuning.yaml sits: YAML nodes walked into (line, column) positions by key path,
and the nearest written position of a path that the file does not spell out."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import yaml

KeyPath = tuple[str | int, ...]


Position = tuple[int, int]


_NODE_BUDGET = 1_000_000  # positions recorded before shared (aliased) subtrees stop being re-walked


LINE_BREAK = re.compile(r"\r\n|[\n\r\x85\u2028\u2029]")  # the breaks PyYAML counts lines by


def node_kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "mapping"
    if isinstance(node, yaml.SequenceNode):
        return "list"
    return "null" if node.tag.endswith(":null") else "scalar"


def key_value(node: yaml.Node) -> object:
    """The Python value of a key node, as the constructor will build it."""
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    except yaml.YAMLError:
        return ("<unconstructible>", id(node))
    finally:
        loader.dispose()


def pairs(node: yaml.MappingNode) -> Iterator[tuple[yaml.Node, yaml.Node]]:
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


MAX_INT_DIGITS = 30  # far beyond any setting; Python refuses int() of more than 4300 digits anyway


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing integers too long to be any setting (with the node's position)."""

    def construct_yaml_int(self, node: yaml.Node) -> int:
        text = str(node.value).replace("_", "").lstrip("+-")
        if len(text) > MAX_INT_DIGITS:
            raise yaml.constructor.ConstructorError(
                None, None, f"an integer of {len(text)} digits is too long for any setting", node.start_mark)
        return super().construct_yaml_int(node)  # type: ignore[no-any-return,arg-type]


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)


_FAST = getattr(yaml, "CSafeLoader", None)  # libyaml, when PyYAML was built with it: ~10x faster


def compose(text: str) -> yaml.Node | None:
    """The node tree of ``text``. libyaml composes it when present (a 200-job manifest: 3 ms, not 33 ms,
    of every command); the pure-Python loader composes it again when libyaml finds any problem, so every
    error's message and position are PyYAML's own. The two give equal trees with equal marks (line, column)
    on valid input: tests/unit/test_manifest_compose.py compares them over every recipe and odd inputs."""
    if _FAST is not None:
        fast = _FAST(text)
        try:
            return fast.get_single_node()  # type: ignore[no-any-return]
        except (yaml.YAMLError, ValueError):  # ValueError: libyaml refusing input PyYAML may word better
            pass
        finally:
            fast.dispose()
    loader = yaml.SafeLoader(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def construct(root: yaml.Node) -> Any:
    loader = _Loader("")
    try:
        return loader.construct_document(root)
    finally:
        loader.dispose()


def index_positions(root: yaml.Node) -> tuple[dict[KeyPath, Position], dict[KeyPath, Position],
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
                key = key_value(knode)
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


Parts = tuple[dict[KeyPath, Position], dict[KeyPath, Position], dict[KeyPath, int]]


def position(positions: dict[KeyPath, Position], key_positions: dict[KeyPath, Position],
              widths: dict[KeyPath, int], where: KeyPath, at_key: bool) -> tuple[Position, int]:
    if where and where[-1] == "[key]":
        where, at_key = where[:-1], True
    if at_key and where in key_positions:
        return key_positions[where], widths.get((*where, "[key]"), 1)
    found = nearest(positions, where)
    if found is None:
        return (1, 1), 1
    return positions[found], widths.get(found, 1) if found == where else 1


def nearest(positions: dict[KeyPath, Position], path: KeyPath) -> KeyPath | None:
    for end in range(len(path), -1, -1):
        if path[:end] in positions:
            return path[:end]
    return None


def locate(positions: dict[KeyPath, Position], path: KeyPath) -> Position | None:
    found = nearest(positions, path)
    return None if found is None else positions[found]


def value_at(data: Any, loc: KeyPath) -> Any:
    for part in loc:
        in_list = isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data)
        if not (in_list or (isinstance(data, dict) and part in data)):
            return None
        data = data[part]
    return data


def dotted(loc: KeyPath) -> str:
    out = ""
    for part in loc:
        if part == "[key]":
            continue
        out += f"[{part}]" if isinstance(part, int) and not isinstance(part, bool) and out else \
            f"{'.' if out else ''}{part}"
    return out or "(top level)"
