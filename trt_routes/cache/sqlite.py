"""sqlite-utils, imported without its optional pandas import.

``sqlite_utils.db`` imports pandas whenever it is installed, only to map ``pandas.Timestamp`` columns to
TEXT, which the cache never writes: 130 ms of every command's start-up on a machine with pandas (most data
science environments). While sqlite-utils is imported, a ``None`` entry in ``sys.modules`` makes that
import fail as if pandas were absent; the entry is removed again at once, so pandas imports normally later
(``trt_routes.api`` hands out DataFrames). ``trt_routes.cache`` imports this first, so every module of the
package that then imports sqlite_utils gets this copy."""

from __future__ import annotations

__all__: list[str] = []

import sys
from types import ModuleType


def _load() -> ModuleType:
    blocked = "pandas" not in sys.modules
    if blocked:
        sys.modules["pandas"] = None  # type: ignore[assignment]
    try:
        import sqlite_utils
    finally:
        if blocked and "pandas" in sys.modules and sys.modules["pandas"] is None:
            del sys.modules["pandas"]
    return sqlite_utils


_load()
