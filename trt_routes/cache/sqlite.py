"""sqlite-utils, imported when the cache first writes through it, without its optional pandas and numpy imports.

A ``CacheStore`` reads and writes through its own ``sqlite3`` connection, and its schema migrations are SQL;
sqlite-utils (bulk inserts of bundles and merges, maintenance) wraps that same connection the first time a caller
asks for ``CacheStore.db``. ``plan`` and ``apply`` never do, and so never import it: sqlite-utils, click, pluggy,
dateutil and the scan of installed packages' entry points for sqlite-utils plugins are ~30-40 ms of a command's
start-up, and of a first apply's path to its first task (``bench/tool_time.py``).

``sqlite_utils.db`` imports pandas and numpy whenever they are installed, only to map ``pandas.Timestamp``
and numpy scalar types to column types when it infers a table's columns from values. The cache never does:
its tables are created by SQL (``trt_routes.cache.schema``), and rows hold Python values. Those
imports cost 130 ms (pandas) and 40 ms (numpy). While sqlite-utils is imported, a ``None`` entry in
``sys.modules`` makes each import fail as if the package were absent; the entries are removed again at once,
so pandas and numpy import normally later (``trt_routes.api`` hands out DataFrames, apply's trial statistics
use numpy). A package already imported is left as it is."""

from __future__ import annotations

__all__ = ["database", "load"]

import sqlite3
import sys
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite_utils

#: The optional imports of ``sqlite_utils.db`` that the cache has no use for.
SKIPPED = ("pandas", "numpy")


def load() -> ModuleType:
    """The ``sqlite_utils`` module, imported (once) without pandas and numpy."""
    if "sqlite_utils" in sys.modules:
        return sys.modules["sqlite_utils"]
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


def database(conn: sqlite3.Connection) -> sqlite_utils.Database:
    """A sqlite-utils ``Database`` over ``conn`` (the same connection: its transactions are the caller's)."""
    db: sqlite_utils.Database = load().Database(conn)
    return db
