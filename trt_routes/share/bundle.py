"""Portable bundles of trials: a gzip'd tar whose first member is a versioned JSON manifest, then JSON
Lines tables (trials, signatures, references) and content-addressed blobs (``blobs/<sha256>``).

Reading trusts nothing: format and version, every member's name, type, size and sha256, the schema and
keys of every row, and every row as data (finite, positive timings consistent with their samples,
canonical routes, statuses consistent with their fields, search states within bounds, identity fields
free of terminal control; free text is sanitized). Member names are matched against a fixed allow-list
and never become paths; a blob is staged under the store and named only by the digest of the bytes
actually read. Sizes are capped before anything is written: what a bundle may decompress to is bounded
by its size on disk (``MAX_EXPANSION``), declared sizes are checked against that bound first, and rows
are parsed as they stream (each JSON document nests at most ``text.MAX_JSON_DEPTH`` levels)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import socket
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from trt_routes import __version__, canonical
from trt_routes.cache.store import TrialRecord, now
from trt_routes.errors import CacheError
from trt_routes.files.artifacts import atomic_output
from trt_routes.share.profiles import parse_profile
from trt_routes.share.rows import (
    _BLOB_NAME,
    _HEX,
    BundleError,
    _is_number,
    parse_reference,
    parse_remeasurement,
    parse_search,
    parse_signature,
    parse_trial,
    trial_json,
)
from trt_routes.text import loads_bounded

FORMAT = "trt-routes-bundle"
VERSION = 1
MANIFEST = "trt-routes-bundle.json"
TABLES = ("trials.jsonl", "signatures.jsonl", "references.jsonl")
#: Present when the exporting cache has such rows: side-by-side re-measurements that confirm winners, and
#: the state of each job group's search (warm-start routes, budget spent), so a machine that pulls a
#: complete cache plans the same search and finds nothing left to build.
OPTIONAL_TABLES = ("remeasurements.jsonl", "searches.jsonl", "profiles.jsonl")
BLOB_KINDS = ("engine", "outputs", "reference")
MAX_MANIFEST_BYTES = 16 << 20
#: A table is parsed into rows in memory: 256 MiB of JSON Lines is far more than any cache needs (a large
#: one is a few tens of MiB); `cache export --only PATTERN` splits a larger one.
MAX_TABLE_BYTES = 256 << 20
MAX_ROW_BYTES = 16 << 20
#: What a bundle may decompress to: this many times its size on disk, and at least MIN_EXPANDED_BYTES.
#: gzip'd engines and tables shrink 1.1-10x; a decompression bomb (1000x) is refused before it is written.
MAX_EXPANSION = 50
MIN_EXPANDED_BYTES = 32 << 20
def _jsonl(rows: Iterable[Any], sort_keys: bool = True) -> bytes:
    return b"".join(json.dumps(r, sort_keys=sort_keys, separators=(",", ":"), allow_nan=True).encode() + b"\n"
                    for r in rows)


# -- the bundle --------------------------------------------------------------------------------------
@dataclass
class Bundle:
    """A validated bundle: rows ready to merge, blobs verified and staged (call ``discard`` when done)."""

    path: str
    info: dict[str, Any]
    trials: list[TrialRecord] = field(default_factory=list)
    signatures: dict[str, dict[str, str]] = field(default_factory=dict)
    references: list[dict[str, str]] = field(default_factory=list)
    remeasurements: list[dict[str, str]] = field(default_factory=list)
    searches: list[dict[str, Any]] = field(default_factory=list)
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)  # trial id -> layer profile
    blobs: dict[str, Path] = field(default_factory=dict)
    staging: Path | None = None
    where: dict[tuple[str, str], str] = field(default_factory=dict)  # search row -> "member line N"

    def discard(self) -> None:
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
            self.staging = None


def write_bundle(dest: Path | IO[bytes], trials: list[TrialRecord], signatures: dict[str, dict[str, str]],
                 references: list[dict[str, str]] | None = None,
                 blobs: dict[str, tuple[Path, str]] | None = None, kind: str = "export",
                 remeasurements: list[dict[str, str]] | None = None,
                 searches: list[dict[str, Any]] | None = None,
                 profiles: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Write a bundle to ``dest`` (a path, written atomically, or a binary file). ``blobs`` maps a sha256
    to (file, kind); each file is verified against its name first. Returns the manifest."""
    blobs = blobs or {}
    for sha, (path, _) in sorted(blobs.items()):
        if canonical.file_sha256(path) != sha:
            raise CacheError(f"blob {sha} in {path.parent} is corrupt (its bytes hash differently)",
                             "run `trt-routes cache verify` to evict it, then export again")
    ordered = sorted(trials, key=lambda t: t.id)
    tables = {
        # key order as stored (not sorted): an imported row is byte for byte the exported one
        "trials.jsonl": (_jsonl((trial_json(t) for t in ordered), sort_keys=False), len(ordered)),
        "signatures.jsonl": (_jsonl({"hash": h, "fields": signatures[h]} for h in sorted(signatures)),
                             len(signatures)),
        "references.jsonl": (_jsonl(sorted(references or [], key=lambda r: r["key"])), len(references or [])),
    }
    if remeasurements:
        tables["remeasurements.jsonl"] = (_jsonl(sorted(remeasurements, key=lambda r: r["key"])),
                                          len(remeasurements))
    if searches:
        tables["searches.jsonl"] = (_jsonl(sorted(searches, key=lambda r: (r["group_key"], r["strategy_key"]))),
                                    len(searches))
    if profiles:
        tables["profiles.jsonl"] = (_jsonl({"trial": t, "profile": profiles[t]} for t in sorted(profiles)),
                                    len(profiles))
    manifest = {
        "format": FORMAT, "version": VERSION, "kind": kind, "created_at": now(), "host": socket.gethostname(),
        "tool_version": __version__,
        "members": {name: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "rows": rows}
                    for name, (data, rows) in tables.items()},
        "blobs": {sha: {"size": path.stat().st_size, "kind": k} for sha, (path, k) in sorted(blobs.items())},
    }
    if isinstance(dest, Path):
        with atomic_output(dest) as f:
            _write_tar(f, manifest, tables, blobs)
    else:
        _write_tar(dest, manifest, tables, blobs)
    return manifest


def _write_tar(out: IO[bytes], manifest: dict[str, Any], tables: dict[str, tuple[bytes, int]],
               blobs: dict[str, tuple[Path, str]]) -> None:
    def info(name: str, size: int) -> tarfile.TarInfo:
        ti = tarfile.TarInfo(name)
        ti.size, ti.mtime, ti.mode, ti.uid, ti.gid, ti.uname, ti.gname = size, 0, 0o644, 0, 0, "", ""
        return ti

    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, filename="", compresslevel=6) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        head = json.dumps(manifest, sort_keys=True, indent=1).encode()
        tar.addfile(info(MANIFEST, len(head)), io.BytesIO(head))
        for name, (data, _) in tables.items():
            tar.addfile(info(name, len(data)), io.BytesIO(data))
        for sha, (path, _) in sorted(blobs.items()):
            with open(path, "rb") as f:
                tar.addfile(info(f"blobs/{sha}", manifest["blobs"][sha]["size"]), f)


def _read_exact(f: IO[bytes], size: int, sink: Callable[[bytes], None]) -> str:
    h = hashlib.sha256()
    left = size
    while left:
        block = f.read(min(left, 1 << 20))
        if not block:
            break
        h.update(block)
        sink(block)
        left -= len(block)
    if left:
        raise BundleError("bundle ends inside a member (truncated)")
    return h.hexdigest()


def _check_manifest(head: Any, where: str) -> dict[str, Any]:
    def bad(msg: str, hint: str | None = None) -> BundleError:
        return BundleError(f"{where}: {msg}", hint or "the bundle is corrupt or was altered")

    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise bad("not a trt-routes bundle (its manifest names no 'trt-routes-bundle' format)")
    version = head.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise bad("bundle manifest has no integer version")
    if version > VERSION:
        raise bad(f"bundle format version {version} is newer than this trt-routes understands ({VERSION})",
                  "upgrade trt-routes (pip install -U trt-routes) on this machine")
    if version < 1:
        raise bad(f"bundle format version {version} is not a known version")
    members, blobs = head.get("members"), head.get("blobs")
    if not isinstance(members, dict) or not set(TABLES) <= set(members) <= set(TABLES + OPTIONAL_TABLES):
        raise bad(f"bundle manifest must list the members {', '.join(TABLES)} (and optionally "
                  f"{', '.join(OPTIONAL_TABLES)})")
    for name, m in members.items():
        if not (isinstance(m, dict) and isinstance(m.get("sha256"), str) and _HEX[64].match(m["sha256"])
                and _is_number(m.get("size")) and 0 <= m["size"] <= MAX_TABLE_BYTES
                and _is_number(m.get("rows")) and m["rows"] >= 0):
            raise bad(f"bundle manifest entry for {name} needs sha256, size (at most {MAX_TABLE_BYTES}) and rows")
    if not isinstance(blobs, dict):
        raise bad("bundle manifest 'blobs' must be an object {sha256: {size, kind}}")
    for sha, b in blobs.items():
        if not (_HEX[64].match(sha) and isinstance(b, dict) and _is_number(b.get("size")) and b["size"] >= 0
                and b.get("kind") in BLOB_KINDS):
            raise bad(f"bundle manifest blob entry {sha!r:.80} needs a sha256 name, a size and a kind")
    return head


class _Capped(io.RawIOBase):
    """A reader that refuses to give more than ``cap`` bytes: the decompressed stream of a bundle."""

    def __init__(self, inner: IO[bytes], cap: int, where: str) -> None:
        self.inner, self.cap, self.where, self.seen = inner, cap, where, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self.inner.read(len(b))
        self.seen += len(data)
        if self.seen > self.cap:
            raise BundleError(f"{self.where}: decompresses to more than {self.cap} bytes ({MAX_EXPANSION}x its "
                              "size): refused as a decompression bomb before anything more was written",
                              "nothing from this bundle was merged; ask for a fresh export")
        b[:len(data)] = data
        return len(data)


def expansion_cap(size: int) -> int:
    """The most a bundle of ``size`` bytes on disk may decompress to."""
    return max(MIN_EXPANDED_BYTES, MAX_EXPANSION * size)


def read_bundle(source: Path, staging_root: Path | None = None, *, label: str | None = None) -> Bundle:
    """Read and validate the bundle at ``source``. Blobs are streamed into a fresh folder under
    ``staging_root`` (bundles with blobs need one) and verified by digest. Raises BundleError."""
    where = label or str(source)
    try:
        with open(source, "rb") as raw:
            magic = raw.read(2)
            raw.seek(0)
            cap = expansion_cap(os.fstat(raw.fileno()).st_size)
            inner: IO[bytes] = cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb")) if magic == b"\x1f\x8b" else raw
            stream = io.BufferedReader(_Capped(inner, cap, where), 1 << 16)
            with tarfile.open(fileobj=stream, mode="r|") as tar:
                return _read_members(tar, where, staging_root, cap)
    except BundleError:
        raise
    except (tarfile.TarError, OSError, EOFError, gzip.BadGzipFile, UnicodeDecodeError, zlib.error) as exc:
        raise BundleError(f"{where}: not a readable trt-routes bundle ({exc})",
                          "bundles are written by `trt-routes cache export`") from exc


def _read_members(tar: tarfile.TarFile, where: str, staging_root: Path | None, cap: int) -> Bundle:
    manifest: dict[str, Any] | None = None
    tables: dict[str, list[tuple[str, Any]]] = {}
    bundle = Bundle(path=where, info={})
    try:
        for member in tar:
            name = member.name
            if not member.isreg():
                raise BundleError(f"{where}: member {name!r:.120} is not a regular file (links, folders and "
                                  "devices are refused)", "the bundle was altered; ask for a fresh export")
            if manifest is None:
                if name != MANIFEST or member.size > MAX_MANIFEST_BYTES:
                    raise BundleError(f"{where}: not a trt-routes bundle (first member is {name!r:.120}, "
                                      f"expected {MANIFEST} of at most {MAX_MANIFEST_BYTES} bytes)",
                                      "bundles are written by `trt-routes cache export`")
                data = _member_bytes(tar, member, where)
                try:
                    head = loads_bounded(data)
                except ValueError as exc:
                    raise BundleError(f"{where}: bundle manifest is not JSON ({exc})") from exc
                manifest = _check_manifest(head, where)
                declared = sum(m["size"] for m in manifest["members"].values()) + sum(
                    b["size"] for b in manifest["blobs"].values())
                if declared > cap:
                    raise BundleError(f"{where}: its manifest declares {declared} bytes of members, more than "
                                      f"this {cap // MAX_EXPANSION}-byte file may expand to ({cap}): refused "
                                      "before anything was written", "ask for a fresh export")
                bundle.info = {k: manifest.get(k) for k in ("kind", "created_at", "host", "tool_version",
                                                             "version")}
                continue
            if name in manifest["members"]:
                declared_member = manifest["members"][name]
                if name in tables or member.size != declared_member["size"]:
                    raise BundleError(f"{where}: member {name} is duplicated or its size differs from the manifest")
                tables[name] = _member_rows(tar, member, where, declared_member["sha256"])
                continue
            match = _BLOB_NAME.match(name)
            if match is None:
                raise BundleError(f"{where}: unexpected member {name!r:.120}: bundles hold only "
                                  f"{MANIFEST}, {', '.join(TABLES)} and blobs/<sha256>; nothing is extracted "
                                  "by member name", "the bundle was altered; ask for a fresh export")
            sha = match.group(1)
            declared_blob = manifest["blobs"].get(sha)
            if declared_blob is None or sha in bundle.blobs or member.size != declared_blob["size"]:
                raise BundleError(f"{where}: blob {sha} is undeclared, duplicated, or its size differs "
                                  "from the manifest")
            if staging_root is None:
                raise BundleError(f"{where}: bundle carries blobs but no store was given to receive them")
            if bundle.staging is None:
                staging_root.mkdir(parents=True, exist_ok=True)
                bundle.staging = Path(tempfile.mkdtemp(prefix=".incoming-", dir=staging_root))
            dest = bundle.staging / sha
            f = tar.extractfile(member)
            assert f is not None
            with open(dest, "wb") as out:
                got = _read_exact(f, member.size, _writer(out))
            if got != sha:
                raise BundleError(f"{where}: blob {sha} is corrupt or tampered: its bytes hash to {got}",
                                  "nothing from this bundle was merged; ask for a fresh export")
            bundle.blobs[sha] = dest
        if manifest is None:
            raise BundleError(f"{where}: empty archive, not a trt-routes bundle")
        missing = [n for n in manifest["members"] if n not in tables] + [f"blobs/{s}" for s in manifest["blobs"]
                                                            if s not in bundle.blobs]
        if missing:
            raise BundleError(f"{where}: bundle lacks member(s) {', '.join(missing[:5])} (truncated?)")
        for name, rows in tables.items():
            if len(rows) != manifest["members"][name]["rows"]:
                raise BundleError(f"{where}: {name} has {len(rows)} rows, the manifest says "
                                  f"{manifest['members'][name]['rows']}")
        _parse_tables(bundle, tables, where)
        return bundle
    except BaseException:
        bundle.discard()
        raise


def _writer(out: IO[bytes]) -> Callable[[bytes], None]:
    def write(block: bytes) -> None:
        out.write(block)
    return write


def _member_bytes(tar: tarfile.TarFile, member: tarfile.TarInfo, where: str) -> bytes:
    f = tar.extractfile(member)
    assert f is not None
    buf = bytearray()
    _read_exact(f, member.size, buf.extend)
    return bytes(buf)


def _member_rows(tar: tarfile.TarFile, member: tarfile.TarInfo, where: str, sha: str) -> list[tuple[str, Any]]:
    """A JSON Lines member decoded as it streams (never held whole), checked against ``sha`` at its end."""
    f = tar.extractfile(member)
    assert f is not None
    name = member.name
    rows: list[tuple[str, Any]] = []
    pending = bytearray()

    def line(raw: bytes) -> None:
        at = f"{where}: {name} line {len(rows) + 1}"
        try:
            rows.append((at, loads_bounded(raw.decode("utf-8"))))
        except (ValueError, UnicodeDecodeError) as exc:
            raise BundleError(f"{at}: not JSON ({exc})") from exc

    def sink(block: bytes) -> None:
        pending.extend(block)
        while (cut := pending.find(b"\n")) >= 0:
            line(bytes(pending[:cut]))
            del pending[:cut + 1]
        if len(pending) > MAX_ROW_BYTES:
            raise BundleError(f"{where}: {name} line {len(rows) + 1} is longer than {MAX_ROW_BYTES} bytes")

    got = _read_exact(f, member.size, sink)
    if got != sha:
        raise BundleError(f"{where}: {name} does not match its sha256 in the manifest (tampered?)")
    if pending.strip():
        line(bytes(pending))
    return rows


def _parse_tables(bundle: Bundle, tables: dict[str, list[tuple[str, Any]]], where: str) -> None:
    for at, obj in tables["signatures.jsonl"]:
        sig, fields_ = parse_signature(obj, at)
        bundle.signatures[sig] = fields_
    seen: set[str] = set()
    for at, obj in tables["trials.jsonl"]:
        trial = parse_trial(obj, at)
        if trial.id in seen:
            raise BundleError(f"{at}: trial {trial.id} appears twice")
        if trial.signature not in bundle.signatures:
            raise BundleError(f"{at}: trial {trial.id} names signature {trial.signature}, which the bundle "
                              "does not carry")
        seen.add(trial.id)
        bundle.trials.append(trial)
    for at, obj in tables["references.jsonl"]:
        bundle.references.append(parse_reference(obj, at))
    for at, obj in tables.get("remeasurements.jsonl", []):
        bundle.remeasurements.append(parse_remeasurement(obj, at))
    for at, obj in tables.get("searches.jsonl", []):
        row = parse_search(obj, at)
        bundle.searches.append(row)
        bundle.where[(row["group_key"], row["strategy_key"])] = at
    for at, obj in tables.get("profiles.jsonl", []):
        tid, profile = parse_profile(obj, at)
        bundle.profiles[tid] = profile
