"""Facts derived from immutable inputs, remembered across runs and projects in the user's cache folder: an
installed ONNX Runtime's catalog, a model file's graph inputs, outputs and external-data names.

Each entry is keyed by everything that determines its value (the installed package's files, the model's
sha256, the source of the trt-routes code that derives it), so it cannot go stale: another install, another
model or another trt-routes computes and keeps a new entry. Reads happen anywhere and cost a file read;
values computed on a miss wait in memory until ``save()``, which only ``apply`` calls (plan, validate and
dry runs write nothing). A torn, corrupt or unreadable entry is a miss, never an error.

The folder: ``$TRT_ROUTES_MEMO`` (``off`` disables the memo), else ``$XDG_CACHE_HOME/trt-routes/memo``, else
``~/.cache/trt-routes/memo``."""

from __future__ import annotations

__all__ = ["MEMO_VAR", "folder", "lookup", "package_identity", "remember", "save", "source_identity"]

import contextlib
import functools
import importlib.util
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from trt_routes import canonical

MEMO_VAR = "TRT_ROUTES_MEMO"
#: Native libraries: what a package's compiled code is (a rebuilt or reinstalled one has other files).
_NATIVE = (".so", ".pyd", ".dylib", ".dll")

#: Values computed in this process and not saved yet: (kind, file name) -> record.
_PENDING: dict[tuple[str, str], dict[str, Any]] = {}


def folder() -> Path | None:
    """The memo's folder, or None when ``$TRT_ROUTES_MEMO`` is ``off``."""
    given = os.environ.get(MEMO_VAR, "")
    if given.lower() == "off":
        return None
    if given:
        return Path(given)
    home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(home) / "trt-routes" / "memo"


def _name(key: Any) -> str:
    return canonical.digest(key, 40) + ".json"


def lookup(kind: str, key: Any) -> Any | None:
    """The value remembered under ``key``, or None. An entry is used only when it holds this very key and its
    value still hashes to the checksum written beside it."""
    pending = _PENDING.get((kind, _name(key)))
    if pending is not None:
        return pending["value"]
    root = folder()
    if root is None:
        return None
    try:
        record = json.loads((root / kind / _name(key)).read_text(encoding="utf-8"))
        if record["key"] != canonical.normalize(key) or canonical.digest(record["value"]) != record["check"]:
            return None
        return record["value"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remember(kind: str, key: Any, value: Any) -> None:
    """Keep ``value`` under ``key`` for this process, and on disk at the next ``save()``."""
    value = canonical.normalize(value)
    _PENDING[(kind, _name(key))] = {"key": canonical.normalize(key), "value": value,
                                    "check": canonical.digest(value)}


def save() -> int:
    """Write every value remembered since the last save (temporary file, then rename); returns how many.
    A folder that cannot be written keeps nothing and fails nothing."""
    root = folder()
    saved = 0
    while _PENDING:
        (kind, name), record = _PENDING.popitem()
        if root is None:
            continue
        tmp = ""
        try:
            (root / kind).mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=root / kind, prefix=".tmp-", suffix=".json")
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(json.dumps(record, sort_keys=True))
            os.replace(tmp, root / kind / name)
            saved += 1
        except OSError:
            if tmp:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
    return saved


@functools.cache
def package_identity(name: str) -> dict[str, Any] | None:
    """What identifies installed package ``name`` without importing it: its folder, and the size, mtime,
    inode and device of every file in that folder and the folders just below it that is Python source or a
    native library. An upgrade, a reinstall or another environment changes it. None when the package is not
    installed (or is not a folder). Read once per process, as a process imports a package once."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.submodule_search_locations:
        return None
    root = Path(spec.origin).parent
    files: dict[str, list[int]] = {}
    try:
        for sub in (root, *(Path(e.path) for e in os.scandir(root) if e.is_dir() and e.name != "__pycache__")):
            for entry in os.scandir(sub):
                if entry.is_file() and (entry.name.endswith(".py") or entry.name.endswith(_NATIVE)
                                        or ".so." in entry.name):
                    st = entry.stat()
                    files[Path(entry.path).relative_to(root).as_posix()] = [
                        st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev]
    except OSError:
        return None
    return {"package": name, "root": str(root.resolve()), "files": files}


def source_identity(*paths: str | Path) -> list[str]:
    """The sha256 of each source file given (trt-routes' own modules that derive a remembered value)."""
    return [canonical.file_sha256(Path(p)) for p in paths]
