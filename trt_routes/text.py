"""Text that came from outside (bundles, remotes, tuning caches, logs) made safe to print and store.

``sanitize`` drops terminal control: ANSI/VT escape sequences (CSI, OSC, DCS...), C0 and C1 control
characters (except newline and tab) and bidirectional overrides, so a stored string cannot move the
cursor, retitle the terminal, hide text or forge output lines when `explain` or `report` prints it.
Renderers call it on every stored string they print; imports apply it before rows are stored."""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Any

# ESC [ ... final byte | ESC ] ... (BEL | ESC \\) | ESC P/X/^/_ ... ESC \\ | ESC + one char | CSI (0x9b) ...
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|\x1b[ -~]?"
    r"|\x9b[0-?]*[ -/]*[@-~]?"
    r"|[\x9d\x90\x98\x9e\x9f][^\x07\x9c]*[\x07\x9c]?"
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def sanitize(text: str, *, newlines: bool = True) -> str:
    """``text`` without escape sequences and control characters (newline and tab kept unless
    ``newlines`` is False, where they become spaces: for one-line fields such as names and errors)."""
    out = _CONTROL.sub("", _ESCAPES.sub("", text.replace("\r\n", "\n")))
    if not newlines:
        out = out.replace("\n", " ").replace("\t", " ")
    return out


def is_clean(text: str, *, newlines: bool = True) -> bool:
    return sanitize(text, newlines=newlines) == text


def sanitize_data(value: Any) -> Any:
    """``value`` (decoded JSON) with every string in it, keys included, sanitized."""
    if isinstance(value, str):
        return sanitize(value)
    if isinstance(value, list):
        return [sanitize_data(v) for v in value]
    if isinstance(value, dict):
        return {sanitize(str(k)): sanitize_data(v) for k, v in value.items()}
    return value


MAX_JSON_DEPTH = 64


class JSONDepthError(ValueError):
    """Decoded JSON nests deeper than the limit."""


def json_depth_ok(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when ``value`` (decoded JSON) nests at most ``limit`` levels (checked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return False
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return True


def loads_bounded(data: str | bytes, limit: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` that raises ValueError (JSONDepthError) instead of RecursionError, and for any
    document nested deeper than ``limit``: every JSON that comes from outside is read through it."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise JSONDepthError(f"JSON nested deeper than {limit} levels") from None
    if not json_depth_ok(value, limit):
        raise JSONDepthError(f"JSON nested deeper than {limit} levels")
    return value


#: Option names that look like credentials, and URLs that carry them: never stored (remotes, manifests).
SECRET_NAME = re.compile(r"key|secret|token|passw|credential|auth|session|signature|cookie|bearer", re.IGNORECASE)
URL_USERINFO = re.compile(r"^([a-z][a-z0-9+.-]*://)([^/@?#]*@)", re.IGNORECASE)


def looks_secret(name: str) -> bool:
    return SECRET_NAME.search(name) is not None


def has_userinfo(text: str) -> bool:
    """``text`` is a URL with ``user:password@`` in it."""
    return URL_USERINFO.match(text.strip()) is not None



class NotRegularFileError(ValueError):
    """A file we read as text (tuning.yaml, tuning.lock, an import) is not a plain file or is too large;
    the message says which, ready to follow "<path>: "."""


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of ``path`` when it is a regular file (a symlink to one counts) of at most ``limit``
    bytes. A FIFO, socket or device (``/dev/zero``) is refused without reading it (a FIFO is opened
    non-blocking, so a missing writer cannot hang the command); so is a larger file (NotRegularFileError).
    OSError (missing, unreadable) passes through."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode)
                    else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                    else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
            raise NotRegularFileError(f"is {kind}: only regular files are read")
        if st.st_size > limit:
            raise NotRegularFileError(f"is {st.st_size / 1e6:.1f} MB, over the {limit / 1e6:.0f} MB this file "
                                      "may have")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
        if len(data) > limit:  # grew while read
            raise NotRegularFileError(f"is over the {limit / 1e6:.0f} MB this file may have")
        return data
    finally:
        os.close(fd)
