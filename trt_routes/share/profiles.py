"""Layer profiles travel with their trials (issue 32): a bundle or remote segment carries ``profiles.jsonl``, one
row ``{"trial": <trial id>, "profile": <the profile JSON>}`` per profiled trial. A profile is a fact about a trial
like its median: taken once (``trt-routes profile``, ``explain --layers``), kept as ``<id>.json`` beside the cache
(``Project.profiles_dir``), and never replaced by an incoming one.

Nothing incoming is trusted beyond what is checked: the trial id is 32 hex digits (a file name, never a path), the
profile parses as a ``LayerProfile`` and is at most ``MAX_PROFILE_BYTES``, and it is written only for a trial the
cache holds after the merge."""

from __future__ import annotations

__all__ = ["install_profiles", "parse_profile", "profiles_of"]

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from trt_routes.evidence.layers import MAX_PROFILE_BYTES, LayerProfile
from trt_routes.files.artifacts import atomic_write_text
from trt_routes.project import Project
from trt_routes.share.rows import BundleError

_TRIAL_ID = re.compile(r"^[0-9a-f]{32}$")


def _valid(data: Any) -> bool:
    try:
        LayerProfile.from_json(data)
    except (KeyError, TypeError, ValueError, AttributeError):
        return False
    return len(json.dumps(data).encode()) <= MAX_PROFILE_BYTES


def profiles_of(project: Project, trial_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Trial id -> its stored profile, for those of ``trial_ids`` that have a readable one here."""
    out: dict[str, dict[str, Any]] = {}
    for tid in sorted(set(trial_ids)):
        path = project.profiles_dir / f"{tid}.json"
        if not _TRIAL_ID.match(tid) or not path.is_file():
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # a damaged file stays local; `trt-routes profile --fresh` takes it again
        if _valid(data):
            out[tid] = data
    return out


def parse_profile(obj: Any, where: str) -> tuple[str, dict[str, Any]]:
    """A ``profiles.jsonl`` row, checked: (trial id, profile)."""
    if not (isinstance(obj, dict) and set(obj) == {"trial", "profile"} and isinstance(obj["trial"], str)
            and _TRIAL_ID.match(obj["trial"]) and isinstance(obj["profile"], dict)):
        raise BundleError(f"{where}: a profile row is {{trial, profile}}: a 32-hex trial id and a layer profile")
    if not _valid(obj["profile"]):
        raise BundleError(f"{where}: the profile of trial {obj['trial']} is not a layer profile of at most "
                          f"{MAX_PROFILE_BYTES} bytes")
    return obj["trial"], obj["profile"]


def install_profiles(project: Project, profiles: Mapping[str, dict[str, Any]], held: Iterable[str]) -> int:
    """Write the incoming profiles of trials the cache holds (``held``) that have none here; returns how many."""
    held = set(held)
    written = 0
    for tid, data in sorted(profiles.items()):
        path = project.profiles_dir / f"{tid}.json"
        if tid not in held or path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(data))
        written += 1
    return written
