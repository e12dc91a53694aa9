"""The console script's start-up without the cyclic garbage collector.

Start-up (the imports of typer, pydantic, numpy and trt-routes, the manifest and the project) allocates ~60k
long-lived objects and almost no cyclic garbage (a few hundred objects of it at the end of `apply`'s start-up):
the collector's ~140 passes over them cost 30-40 ms of every command and free next to nothing. ``main`` turns
the collector off (``begin``); once the project is loaded (``end``, from ``cli.common.open_project``, or when
the command returns), what start-up allocated is moved out of the collector's sight (``gc.freeze``: later
passes skip it too, and the start-up's little garbage stays allocated) and the collector is on again for the
command's own work."""

from __future__ import annotations

import gc

_paused: list[bool] = []


def begin() -> None:
    """Pause the collector for the start-up (only if it is on; ``end`` turns it back on)."""
    if gc.isenabled() and not _paused:
        gc.disable()
        _paused.append(True)


def end() -> None:
    """Start-up is over: freeze what it allocated and turn the collector back on (if ``begin`` paused it)."""
    if _paused:
        _paused.clear()
        gc.freeze()
        gc.enable()
