"""Cache remotes through fsspec: ``file://`` paths (or plain folders) and ``s3://`` (``pip install
'trt-routes[s3]'``). Many machines push at once with no server and no locks, because nothing is ever
rewritten in place:

    URL/trt-routes-remote.json       {"format": "trt-routes-remote", "version": 1}
    URL/segments/<sha256>.tar.gz     a bundle of trials (no blobs), named by the sha256 of its bytes
    URL/blobs/<ab>/<sha256>          engines, named by the sha256 of their bytes

Push uploads blobs first, then one segment of the trials the remote lacks (a local record of what went
where), so a reader that sees a segment can find its engines. Pull merges every segment not merged yet
(validated, one transaction each); engines are fetched lazily when apply needs one, verified first."""

from __future__ import annotations

import json
import os
import re
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trt_routes.cache.store import CacheStore, now
from trt_routes.canonical import file_sha256
from trt_routes.errors import CacheError, UsageError
from trt_routes.files.artifacts import BlobStore
from trt_routes.share import AS_DOCUMENT
from trt_routes.share.bundle import read_bundle, write_bundle
from trt_routes.share.merge import (
    check_searches,
    collect,
    exclusive,
    install_blobs,
    merge,
    remeasurements_of,
    search_row_key,
    searches_of,
)
from trt_routes.share.profiles import install_profiles, profiles_of
from trt_routes.share.rows import BundleError
from trt_routes.text import SECRET_NAME, URL_USERINFO, has_userinfo, loads_bounded

if TYPE_CHECKING:
    from trt_routes.project import Project

REMOTE_FORMAT = "trt-routes-remote"
REMOTE_VERSION = 1
MARKER = "trt-routes-remote.json"
_SEGMENT = re.compile(r"^([0-9a-f]{64})\.tar\.gz$")
_SECRET = SECRET_NAME
_USERINFO = URL_USERINFO
#: Caps on what a remote may hand us before it is read: its marker, and each segment (a bundle of trials).
MAX_MARKER_BYTES = 64 << 10
MAX_SEGMENT_BYTES = 512 << 20


def redact_url(text: str) -> str:
    """``text`` with the userinfo of a URL (``http://KEY:SECRET@host``) removed."""
    return _USERINFO.sub(r"\1", text)


def normalize_url(url: str) -> str:
    """``s3://b/p`` stays; a plain path or ``file://`` URL becomes an absolute ``file://`` URL."""
    url = url.strip()
    if has_userinfo(url):
        raise UsageError(f"remote URL {redact_url(url)!r} carries credentials (user:password@): they would be "
                         "stored in the cache", "give credentials through the environment (e.g. "
                         "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY) or ~/.aws/credentials, not in the URL")
    if url.startswith("file://"):
        url = url[len("file://"):]
    elif "://" in url:
        return url.rstrip("/")
    return "file://" + Path(url).expanduser().resolve().as_posix()


def parse_options(pairs: list[str] | None) -> dict[str, str]:
    """``KEY=VALUE`` pairs (fsspec storage options such as endpoint_url) into a dict. Credentials are
    refused: options named like a key, secret, token or password, and URLs with user:password@ (remotes
    are remembered in the cache, and credentials never are)."""
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--option {redact_url(pair)!r:.120} is not KEY=VALUE",
                             "e.g. --option endpoint_url=http://127.0.0.1:9000")
        hint = ("give credentials through the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
                "AWS_SESSION_TOKEN) or ~/.aws/credentials")
        if _SECRET.search(key):
            raise UsageError(f"--option {key.strip()!r:.80} looks like a credential: it is refused so that it "
                             "is never stored with the remote", hint)
        if has_userinfo(value):
            raise UsageError(f"--option {key.strip()}={redact_url(value)!r:.120} carries credentials "
                             "(user:password@ in a URL): refused so that they are never stored", hint)
        out[key.strip()] = value
    return out


class Remote:
    """One remote, opened through fsspec."""

    def __init__(self, url: str, options: dict[str, str] | None = None) -> None:
        self.url = normalize_url(url)
        self.options = dict(options or {})
        try:
            import fsspec
        except ImportError as exc:  # pragma: no cover - fsspec is a core dependency
            raise UsageError("cache remotes need fsspec", "pip install 'trt-routes[s3]'") from exc
        try:
            self.fs, self.root = fsspec.core.url_to_fs(self.url, **self.options)
        except ImportError as exc:
            raise UsageError(f"{self.url}: {exc}", "pip install 'trt-routes[s3]' for s3:// remotes") from exc
        except ValueError as exc:
            raise UsageError(f"{self.url}: not a usable remote URL ({exc})",
                             "use a folder, file:///path or s3://bucket/prefix") from exc
        self.root = self.root.rstrip("/")
        self.local = "file" in (self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,))

    @property
    def stored_options(self) -> dict[str, str]:
        """Options worth remembering for lazy fetches: never anything that looks like a credential (an
        option named like a key, secret, token or password is left out; a URL's user:password@ removed)."""
        return {k: redact_url(str(v)) for k, v in self.options.items() if not _SECRET.search(k)}

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def segment_path(self, sha: str) -> str:
        return self.path("segments", f"{sha}.tar.gz")

    def blob_path(self, sha: str) -> str:
        return self.path("blobs", sha[:2], sha)

    def exists(self, rpath: str) -> bool:
        return bool(self.fs.exists(rpath))

    def check_format(self, create: bool) -> None:
        marker = self.path(MARKER)
        broken = "the remote is damaged: restore it from a backup, or empty the folder and `cache push` again"
        if self.exists(marker):
            if not self.fs.isfile(marker):
                raise CacheError(f"{self.url}/{MARKER} is not a plain file (a folder, FIFO or device), so not the "
                                 "remote's marker", broken)
            try:
                size = self.fs.size(marker)
                if size is not None and size > MAX_MARKER_BYTES:
                    raise CacheError(f"{self.url}/{MARKER} is {size} bytes: not a trt-routes remote marker "
                                     f"(at most {MAX_MARKER_BYTES})", "is this a trt-routes remote?")
                head = loads_bounded(self.fs.cat_file(marker, start=0, end=MAX_MARKER_BYTES + 1))
            except ValueError as exc:
                raise CacheError(f"{self.url}/{MARKER} is not JSON ({exc})", "is this a trt-routes remote?") from exc
            except OSError as exc:
                raise CacheError(f"{self.url}/{MARKER} cannot be read ({exc.strerror or exc})", broken) from exc
            if not isinstance(head, dict) or head.get("format") != REMOTE_FORMAT:
                raise CacheError(f"{self.url} is not a trt-routes remote ({MARKER} names another format)")
            version = head.get("version")
            if isinstance(version, bool) or not isinstance(version, int) or version < 1:
                raise CacheError(f"{self.url}/{MARKER}: 'version' is {version!r:.40}, not a layout version "
                                 f"(a whole number; this trt-routes writes {REMOTE_VERSION})", broken)
            if version > REMOTE_VERSION:
                raise CacheError(f"{self.url}: remote layout version {version} is newer than this trt-routes "
                                 f"understands ({REMOTE_VERSION})", "upgrade trt-routes on this machine")
        elif create:
            self.put_bytes(json.dumps({"format": REMOTE_FORMAT, "version": REMOTE_VERSION}).encode(), marker)
        for part in ("segments", "blobs"):
            if self.exists(self.path(part)) and not self.fs.isdir(self.path(part)):
                raise CacheError(f"{self.url}/{part} is a file, not a folder: the remote is broken", broken)

    def segments(self) -> tuple[list[str], list[str]]:
        """(segment digests, other names found under segments/)."""
        folder = self.path("segments")
        if not self.exists(folder):
            return [], []
        shas: list[str] = []
        other: list[str] = []
        for entry in self.fs.ls(folder, detail=False):
            name = str(entry).rstrip("/").rsplit("/", 1)[-1]
            match = _SEGMENT.match(name)
            (shas if match else other).append(match.group(1) if match else name)
        return sorted(shas), sorted(other)

    def put_file(self, local: Path, rpath: str) -> None:
        """Upload so that readers never see a partial file: a temporary name and a rename on a filesystem;
        object stores make an object visible only when its upload completes."""
        parent = rpath.rsplit("/", 1)[0]
        if self.local:
            self.fs.makedirs(parent, exist_ok=True)
            tmp = f"{parent}/.{uuid.uuid4().hex}.tmp"
            try:
                self.fs.put_file(str(local), tmp)
                os.replace(tmp, rpath)
            finally:
                if self.fs.exists(tmp):
                    self.fs.rm_file(tmp)
        else:
            self.fs.put_file(str(local), rpath)

    def put_bytes(self, data: bytes, rpath: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp) / "data"
            local.write_bytes(data)
            self.put_file(local, rpath)

    def get_file(self, rpath: str, local: Path) -> None:
        """Download ``rpath``; on a folder remote only a plain file (a FIFO would wait forever, a device never
        end): anything else is an OSError, which callers report as a file that could not be read."""
        if self.local and not self.fs.isfile(rpath):
            raise OSError(f"{rpath} is not a plain file (a folder, FIFO or device)")
        self.fs.get_file(rpath, str(local))


def remember(cache: CacheStore, remote: Remote, pulled: bool) -> None:
    """Record the remote (for lazy engine fetches) in its own small transaction."""
    row = cache.conn.execute("SELECT last_pull FROM remotes WHERE url = ?", [remote.url]).fetchone()
    with cache.conn:
        cache.conn.execute(
            "INSERT OR REPLACE INTO remotes (url, options, added_at, last_pull) VALUES (?, ?, "
            "coalesce((SELECT added_at FROM remotes WHERE url = ?), ?), ?)",
            [remote.url, json.dumps(remote.stored_options, sort_keys=True), remote.url, now(),
             now() if pulled else (row[0] if row else "")])


def _state(cache: CacheStore, url: str, kind: str) -> set[str]:
    return {r[0] for r in cache.conn.execute("SELECT key FROM remote_state WHERE remote = ? AND kind = ?",
                                           [url, kind])}


# -- push ---------------------------------------------------------------------------------------------
@dataclass
class PushReport:
    __pydantic_config__ = AS_DOCUMENT

    url: str
    trials: int = 0
    segment: str | None = None
    engines: int = 0
    engines_present: int = 0
    remeasurements: int = 0
    skipped: list[str] = field(default_factory=list)
    #: segments this cache recorded pushing that the remote no longer holds (then everything was pushed again)
    resent: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        if self.resent:
            return (f"{self.url}: the remote no longer holds {self.resent} segment(s) this cache pushed there "
                    f"(emptied or re-created): pushed everything again, {self.trials} trial(s) and "
                    f"{self.engines} engine(s) ({self.engines_present} already there)")
        if not self.trials and not self.engines and not self.remeasurements:
            return f"{self.url}: nothing to push (the remote has every trial and engine of this cache)"
        seg = f" as segment {self.segment[:12]}" if self.segment else ""
        if self.remeasurements:
            seg = f" and {self.remeasurements} re-measurement(s){seg}"
        return (f"{self.url}: pushed {self.trials} trial(s){seg} and {self.engines} engine(s) "
                f"({self.engines_present} already there)")


def push(project: Project, url: str, options: dict[str, str] | None = None, *, all_engines: bool = False,
         everything: bool = False) -> PushReport:
    """Push trials the remote lacks (by the local record) and the engines ``tuning.lock`` references
    (every engine of a pushed trial with ``all_engines``). ``everything`` ignores the local record."""
    remote = Remote(url, options)
    report = PushReport(remote.url)
    remote.check_format(create=True)
    store = project.store
    lock = project.read_lock()
    with project.open_cache() as cache:
        gone = sorted(_state(cache, remote.url, "segment") - set(remote.segments()[0]))
        if gone:  # emptied or re-created at the same URL: the record of earlier pushes is void
            everything = True
            report.resent = len(gone)
        pushed = set() if everything else _state(cache, remote.url, "trial")
        pushed_blobs = set() if everything else _state(cache, remote.url, "blob")
        pushed_remeasurements = set() if everything else _state(cache, remote.url, "remeasurement")
        trials = [t for t in cache.all_trials() if t.id not in pushed]
        keep, signatures, refs, report.skipped = collect(cache, trials)
        remeasured = [r for r in remeasurements_of(cache, None) if r["key"] not in pushed_remeasurements]
        pushed_searches = set() if everything else _state(cache, remote.url, "search")
        searched = [r for r in searches_of(cache, None) if search_row_key(r) not in pushed_searches]
        pushed_profiles = set() if everything else _state(cache, remote.url, "profile")
        profiled = profiles_of(project, (t.id for t in cache.all_trials() if t.id not in pushed_profiles))
        wanted = {e.engine_sha256 for e in lock.jobs.values()}
        if all_engines:
            wanted |= {t.engine_sha256 for t in keep}
        state: list[tuple[str, str, str]] = []
        for sha in sorted(s for s in wanted if s and s not in pushed_blobs and store.has(s)):
            if remote.exists(remote.blob_path(sha)):
                report.engines_present += 1
            elif not store.verify(sha):
                report.skipped.append(f"engine {sha} is corrupt here and was not pushed "
                                      "(run `trt-routes cache verify`)")
                continue
            else:
                remote.put_file(store.path(sha), remote.blob_path(sha))
                report.engines += 1
            state.append((remote.url, "blob", sha))
        if keep or remeasured or searched or profiled:
            with tempfile.TemporaryDirectory(dir=project.cache_path.parent) as tmp:
                local = Path(tmp) / "segment.tar.gz"
                write_bundle(local, keep, signatures, refs, kind="segment", remeasurements=remeasured,
                             searches=searched, profiles=profiled)
                sha = file_sha256(local)
                if not remote.exists(remote.segment_path(sha)):
                    remote.put_file(local, remote.segment_path(sha))
            report.segment, report.trials, report.remeasurements = sha, len(keep), len(remeasured)
            state += [(remote.url, "segment", sha)] + [(remote.url, "trial", t.id) for t in keep]
            state += [(remote.url, "remeasurement", r["key"]) for r in remeasured]
            state += [(remote.url, "search", search_row_key(r)) for r in searched]
            state += [(remote.url, "profile", tid) for tid in profiled]
        remember(cache, remote, pulled=False)
        if gone:
            with cache.conn:
                cache.conn.execute("DELETE FROM remote_state WHERE remote = ?", [remote.url])
        merge(cache, [], {}, state=state)  # the record of what the remote now holds, one transaction
    return report


# -- pull ---------------------------------------------------------------------------------------------
@dataclass
class PullReport:
    __pydantic_config__ = AS_DOCUMENT

    url: str
    segments: int = 0
    added: int = 0
    present: int = 0
    conflicts: int = 0
    rejected: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    materialized: list[str] = field(default_factory=list)  # jobs whose locked engine was written to its path
    notes: list[str] = field(default_factory=list)  # engine fetches: verified, rejected, unreachable

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        text = (f"{self.url}: merged {self.segments} new segment(s): {self.added} new trial(s), "
                f"{self.present} already here")
        if self.conflicts:
            text += f", {self.conflicts} conflicting (ours kept)"
        if self.materialized:
            text += f"; materialized the locked engine of {len(self.materialized)} job(s)"
        return text + "; other engines are fetched when a job needs one"


def pull(project: Project, url: str, options: dict[str, str] | None = None) -> PullReport:
    """Merge every remote segment not merged yet. A segment that fails validation is rejected whole
    (listed in ``rejected``) and the others are merged; nothing is half-merged."""
    remote = Remote(url, options)
    report = PullReport(remote.url)
    remote.check_format(create=False)
    if not remote.exists(remote.path(MARKER)):
        raise UsageError(f"no trt-routes remote at {remote.url} (no {MARKER})",
                         "check the URL; a remote is created by the first `trt-routes cache push`")
    store = project.store
    with exclusive(project, f"cache pull {url}"), project.open_cache() as cache:
        done = _state(cache, remote.url, "segment")
        shas, report.ignored = remote.segments()
        for sha in (s for s in shas if s not in done):
            label = f"{remote.url}/segments/{sha}.tar.gz"
            store.root.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(prefix=".incoming-", dir=store.root) as tmp:
                local = Path(tmp) / "segment"
                try:
                    size = remote.fs.size(remote.segment_path(sha))
                    if size is not None and size > MAX_SEGMENT_BYTES:
                        raise BundleError(f"{label}: segment is {size} bytes, more than a segment may be "
                                          f"({MAX_SEGMENT_BYTES}): not fetched", "push smaller segments")
                    remote.get_file(remote.segment_path(sha), local)
                    got = file_sha256(local)
                    if got != sha:
                        raise BundleError(f"{label}: segment is corrupt or tampered: its bytes hash to {got}",
                                          "nothing from it was merged; the machine that pushed it can push again")
                    bundle = read_bundle(local, Path(tmp), label=label)
                    check_searches(cache, bundle.trials, bundle.searches, label, bundle.where)
                except BundleError as exc:
                    report.rejected.append(str(exc))
                    continue
                except OSError as exc:
                    report.rejected.append(f"{label}: could not be read ({exc})")
                    continue
                install_blobs(store, bundle.blobs)
                state = [(remote.url, "segment", sha)] + [(remote.url, "trial", t.id) for t in bundle.trials]
                state += [(remote.url, "remeasurement", r["key"]) for r in bundle.remeasurements]
                state += [(remote.url, "search", search_row_key(r)) for r in bundle.searches]
                merged = merge(cache, bundle.trials, bundle.signatures, bundle.references, state=state,
                               source=label, remeasurements=bundle.remeasurements, searches=bundle.searches,
                               where=bundle.where)
            held = {tid for tid in bundle.profiles if cache.get(tid) is not None}
            install_profiles(project, bundle.profiles, held)
            report.segments += 1
            report.added += merged.added
            report.present += merged.present
            report.conflicts += merged.replaced + merged.kept
        if report.segments or not report.rejected:  # a remote that gave nothing but rejects is not recorded
            remember(cache, remote, pulled=True)
        report.materialized = materialize_locked(project, cache, store, report.notes.append)
    return report


def materialize_locked(project: Project, cache: CacheStore, store: BlobStore,
                       say: Callable[[str], None]) -> list[str]:
    """Write the engine tuning.lock records for each manifest job to its path, from the blob store or the
    remotes (sha256 verified), as ``dvc pull`` checks out: after a pull, a machine with the lockfile has its
    engines and `plan --check` passes. An engine already in place is left alone; one no remote has is left
    to `apply`. Returns the jobs whose engine was written."""
    lock = project.read_lock()
    root = project.root.resolve()
    written = []
    for job in project.jobs:
        entry = lock.jobs.get(job.name)
        engine = entry.engine if entry is not None else None
        sha, rel = (engine.sha256, engine.path) if engine is not None else (None, None)
        if not (isinstance(sha, str) and sha and isinstance(rel, str) and rel):
            continue
        dest = (root / rel).resolve()
        if not dest.is_relative_to(root):
            say(f"{job.name}: locked engine path {rel} is outside the project: not materialized")
            continue
        if dest.is_file() and file_sha256(dest) == sha:
            continue
        if (store.verify(sha) or fetch_blob(cache, store, sha, say)) and store.materialize(sha, dest):
            written.append(job.name)
    return written


# -- lazy engine fetches --------------------------------------------------------------------------------
def fetch_blob(cache: CacheStore, store: BlobStore, sha: str, say: Callable[[str], None]) -> bool:
    """Fetch blob ``sha`` from the remotes this cache pulled from or pushed to, newest pull first, and
    keep it only when its bytes hash to ``sha``. Never raises: a miss means the caller rebuilds."""
    if not sha:
        return False
    try:
        rows = list(cache.conn.execute("SELECT url, options FROM remotes ORDER BY last_pull DESC, url"))
    except Exception:  # an old cache without the table, or a busy one: no remote, rebuild
        return False
    for url, options in rows:
        try:
            remote = Remote(url, loads_bounded(options or "{}"))
            rpath = remote.blob_path(sha)
            if not remote.exists(rpath):
                continue
            store.root.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(prefix=".incoming-", dir=store.root) as tmp:
                local = Path(tmp) / sha
                remote.get_file(rpath, local)
                got = file_sha256(local)
                if got != sha:
                    say(f"engine {sha[:12]} from {url} failed verification (its bytes hash to {got[:12]}): "
                        "rejected, not used")
                    continue
                install_blobs(store, {sha: local})
            say(f"engine {sha[:12]} fetched from {url} (sha256 verified)")
            return True
        except Exception as exc:  # network, credentials, missing s3fs: the cache is never fatal
            say(f"could not fetch engine {sha[:12]} from {url}: {exc}")
    return False


def resolve_remote(project: Project, given: str | None, pairs: list[str] | None) -> tuple[str, dict[str, str]]:
    """(URL, storage options) of the remote ``given`` on the command line: a name from tuning.yaml's
    ``remotes:`` (its options, overridden by ``--option``), else a URL or folder; None: the default remote
    (the one marked ``default: true``, or the only one)."""
    remotes = project.loaded.manifest.remotes
    if given is None:
        marked = [n for n, r in remotes.items() if r.default] or (list(remotes) if len(remotes) == 1 else [])
        if not marked:
            raise UsageError("no remote given, and tuning.yaml names no default remote",
                             "give a URL or a name, or add `remotes: {team: {url: s3://bucket/prefix, default: "
                             "true}}` to tuning.yaml")
        given = marked[0]
    if given in remotes:
        remote = remotes[given]
        return remote.url, {**{k: str(v) for k, v in remote.options.items()}, **parse_options(pairs)}
    return given, parse_options(pairs)

