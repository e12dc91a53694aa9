"""sqlite-utils, imported without its optional pandas and numpy imports.

``sqlite_utils.db`` imports pandas and numpy whenever they are installed, only to map ``pandas.Timestamp``
and numpy scalar types to column types when it infers a table's columns from values. The cache never does:
every table is created from Python types (``trt_routes.cache.schema``), and rows hold Python values. Those
imports cost 130 ms (pandas) and 40 ms (numpy) of every command's start-up, where a no-op ``plan`` needs
neither. While sqlite-utils is imported, a ``None`` entry in ``sys.modules`` makes each import fail as if
the package were absent; the entries are removed again at once, so pandas and numpy import normally later
(``trt_routes.api`` hands out DataFrames, apply's trial statistics use numpy). A package already imported
is left as it is. ``trt_routes.cache`` imports this first, so every module of the package that then
imports sqlite_utils gets this copy."""

from __future__ import annotations

__all__: list[str] = []

import sys
from types import ModuleType

#: The optional imports of ``sqlite_utils.db`` that the cache has no use for.
SKIPPED = ("pandas", "numpy")


def _load() -> ModuleType:
    blocked = [name for name in SKIPPED if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        import sqlite_utils
    finally:
        for name in blocked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
    return sqlite_utils


_load()
