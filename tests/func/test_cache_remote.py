"""Two machines exchange trials through a cache remote: a ``file://`` folder and a local S3-compatible
server (moto, on loopback). Machines are projects with their own cache folders; the second machine's
signature differs by its CPU model (``open_project(manifest, env=...)``)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from _project import copy_project, edit_manifest, make_project
from _sharing import add_foreign_trials, fresh_clone, machine, other_machine, trial_table
from typer.testing import CliRunner

from trt_routes.audit.explain import explain
from trt_routes.canonical import file_sha256
from trt_routes.cli.app import app
from trt_routes.errors import UsageError
from trt_routes.lockfile import Lockfile
from trt_routes.project import Project
from trt_routes.share.remote import PushReport, Remote, normalize_url, pull, push
from trt_routes.tune.apply import apply, compute_plan


@pytest.fixture
def a(sharing_project: Path, tmp_path: Path) -> Path:
    """Machine A's project (applied once per session), copied to change it."""
    return copy_project(sharing_project, tmp_path / "a")


def _exchange(a: Path, url: str, tmp_path: Path, options: dict[str, str] | None = None) -> None:
    """The whole story over one remote: A pushes; B (other signature) pulls, builds its own, pushes;
    A pulls B's; C (A's signature, fresh clone with tuning.lock) pulls and builds nothing."""
    first = push(machine(a), url, options)
    locked = {e["engine"]["sha256"] for e in Lockfile.read(a.parent / "tuning.lock").jobs.values()}
    assert first.trials == 10 and first.engines == len(locked) and first.segment
    assert push(machine(a), url, options).trials == 0  # the local record: nothing twice

    b = fresh_clone(a, tmp_path / "b", lock=False)
    env_b = other_machine()
    got = pull(machine(b, env_b), url, options)
    assert (got.segments, got.added, got.rejected) == (1, 10, [])
    result = apply(machine(b, env_b))
    assert result.exit_code == 0 and result.built == 10  # another signature: A's trials never serve B
    pushed_b = push(machine(b, env_b), url, options)
    assert pushed_b.trials == 10  # only B's own trials: the pulled ones are on the remote already

    got = pull(machine(a), url, options)
    assert (got.segments, got.added) == (1, 10)
    assert len(trial_table(machine(a))) == 20
    ex = explain(machine(a), "cnn/bs1/cpu")
    assert ex.selection is not None and ex.other_groups == 1  # B's trials: shown, not used
    assert pull(machine(a), url, options).segments == 0  # idempotent

    c = fresh_clone(a, tmp_path / "c")
    got = pull(machine(c), url, options)
    assert (got.segments, got.added) == (2, 20)
    result = apply(machine(c))
    assert result.exit_code == 0 and result.built == 0  # measured by A under this signature: reused
    lock_a, lock_c = Lockfile.read(a.parent / "tuning.lock"), Lockfile.read(c.parent / "tuning.lock")
    for name, entry in lock_a.jobs.items():
        assert lock_c.jobs[name]["route"] == entry["route"]
        engine = c.parent / entry["engine"]["path"]
        assert file_sha256(engine) == entry["engine"]["sha256"]  # fetched lazily, verified


def test_two_machines_exchange_through_a_file_remote(a: Path, tmp_path: Path) -> None:
    _exchange(a, (tmp_path / "remote").as_uri(), tmp_path)
    segments = sorted(p.name for p in (tmp_path / "remote" / "segments").iterdir())
    assert len(segments) == 2 and all(file_sha256(tmp_path / "remote" / "segments" / s) == s[:64]
                                      for s in segments)


def test_tampered_segment_is_rejected_whole_and_others_merge(a: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    push(machine(a), str(remote))
    seg = next((remote / "segments").iterdir())
    data = bytearray(seg.read_bytes())
    data[len(data) // 2] ^= 0xFF
    seg.write_bytes(bytes(data))
    b = fresh_clone(a, tmp_path / "b")
    report = pull(machine(b), str(remote))
    assert report.segments == 0 and len(report.rejected) == 1
    assert "tampered" in report.rejected[0] and seg.name[:64] in report.rejected[0]
    assert trial_table(machine(b)) == []  # nothing half-merged, and it is retried next time
    code = CliRunner().invoke(app, ["cache", "pull", str(remote), "-m", str(b)])
    assert code.exit_code == 2 and "rejected" in code.output


def test_tampered_engine_is_rejected_and_rebuilt(a: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    push(machine(a), str(remote))
    for blob in (remote / "blobs").glob("*/*"):
        blob.write_bytes(b"not the engine you are looking for")
    c = fresh_clone(a, tmp_path / "c")
    pull(machine(c), str(remote))
    messages: list[str] = []

    class Collect:
        def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
            return (lambda text: messages.append(text)) if name == "message" else (lambda *a, **k: None)

    result = apply(machine(c), reporter=Collect())  # type: ignore[arg-type]
    assert result.exit_code == 0 and result.built >= 1  # a winner rebuilt: the bad bytes never used
    assert any("failed verification" in m for m in messages)
    for sha in (c.parent / "caches" / "engines").glob("*/*"):
        assert file_sha256(sha) == sha.name


def test_a_remote_emptied_and_recreated_at_the_same_url_gets_everything_again(a: Path, tmp_path: Path) -> None:
    import shutil

    url = str(tmp_path / "r")
    first = push(machine(a), url)
    assert first.trials > 0 and first.segment and not first.resent
    assert push(machine(a), url).trials == 0  # the local record, and the remote still holds its segment
    shutil.rmtree(tmp_path / "r")
    (tmp_path / "r").mkdir()
    again = push(machine(a), url)
    assert again.resent == 1 and again.trials == first.trials and again.engines == first.engines
    assert "no longer holds" in again.text()
    assert Remote(url).segments()[0] == [again.segment]
    third = push(machine(a), url)  # the record was renewed: nothing twice
    assert (third.trials, third.resent) == (0, 0) and "nothing to push" in third.text()
    b = fresh_clone(a, tmp_path / "b", lock=False)
    got = pull(machine(b), url)
    assert (got.segments, got.added) == (1, first.trials)


def test_remote_urls_and_errors(tmp_path: Path) -> None:
    assert normalize_url(str(tmp_path / "r")) == (tmp_path / "r").resolve().as_uri()
    assert normalize_url("s3://bucket/prefix/") == "s3://bucket/prefix"
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "trt-routes-remote.json").write_text('{"format": "trt-routes-remote", "version": 99}')
    with pytest.raises(Exception, match="newer"):
        Remote(str(tmp_path / "r")).check_format(create=False)
    with pytest.raises(UsageError, match=r"not a usable remote URL|s3"):
        Remote("nosuchproto://x/y")


def test_pull_from_nothing_is_a_clear_error(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    manifest = make_project(tmp_path / "p", tiny_models)
    result = CliRunner().invoke(app, ["cache", "pull", str(tmp_path / "nowhere"), "-m", str(manifest)])
    assert result.exit_code == 2 and "no trt-routes remote" in result.output


# -- S3 ------------------------------------------------------------------------------------------------
@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, dict[str, str]]]:
    """A moto S3 server on 127.0.0.1 and a new bucket (its URL, the storage options); skipped when moto
    or s3fs is not installed or the server cannot start."""
    server_mod = pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    try:
        server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
    except Exception as exc:  # no free port, a sandbox without sockets...
        pytest.skip(f"local S3 server could not start: {exc}")
    options = {"endpoint_url": f"http://{host}:{port}"}
    try:
        import s3fs

        bucket = f"trt-routes-{uuid.uuid4().hex[:12]}"  # moto keeps buckets across servers of one process
        s3fs.S3FileSystem(skip_instance_cache=True, **options).mkdir(bucket)
        yield f"s3://{bucket}", options
    finally:
        server.stop()


def test_two_machines_exchange_through_s3(a: Path, tmp_path: Path, s3: tuple[str, dict[str, str]]) -> None:
    _exchange(a, f"{s3[0]}/team-cache", tmp_path, s3[1])


def test_s3_cli_push_and_pull(a: Path, tmp_path: Path, s3: tuple[str, dict[str, str]]) -> None:
    opt = f"endpoint_url={s3[1]['endpoint_url']}"
    url = f"{s3[0]}/cli"
    runner = CliRunner()
    result = runner.invoke(app, ["cache", "push", url, "--option", opt, "-m", str(a)])
    assert result.exit_code == 0 and "pushed 10 trial(s)" in result.output
    c = fresh_clone(a, tmp_path / "c")
    result = runner.invoke(app, ["cache", "pull", url, "--option", opt, "-m", str(c)])
    assert result.exit_code == 0 and "10 new trial(s)" in result.output
    result = runner.invoke(app, ["cache", "stats", "--json", "-m", str(c)])
    assert result.exit_code == 0 and f'"{url}"' in result.output
    assert "testing" not in result.output  # credentials are never stored


def test_machines_push_at_once_without_locks(a: Path, tmp_path: Path) -> None:
    """Two machines push to one remote at the same moment (threads): no lock, no lost segment."""
    b = fresh_clone(a, tmp_path / "b", lock=False)
    env_b = other_machine()
    assert add_foreign_trials(a, b) == 10
    remote = str(tmp_path / "remote")
    barrier = threading.Barrier(2)

    def go(project: Project) -> PushReport:
        barrier.wait()
        return push(project, remote)

    with ThreadPoolExecutor(2) as pool:
        reports = list(pool.map(go, [machine(a), machine(b, env_b)]))
    assert [r.trials for r in reports] == [10, 10] and reports[0].segment != reports[1].segment
    c = fresh_clone(a, tmp_path / "c")
    got = pull(machine(c), remote)
    assert (got.segments, got.added, got.rejected) == (2, 20, [])


@pytest.mark.parametrize("budget", [None, 3])
def test_a_pulled_adaptive_cache_leaves_nothing_to_plan_build_or_remeasure(
        budget: int | None, tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    """The quickstart's default (adaptive) strategy: warm starts from related jobs' winners, budgets and side-by-side
    confirmation. Machine B (same signature, a clone of the repo with tuning.lock) pulls A's cache: its plan
    proposes nothing, and apply builds and re-measures nothing (also when A's search stopped at its budget)."""
    a = make_project(tmp_path / "a", tiny_models, mode="adaptive")
    if budget is not None:
        edit_manifest(a, lambda d: d["strategies"]["s"].update(max_builds=budget))
    assert apply(machine(a)).exit_code == 0
    remote = (tmp_path / "remote").as_uri()
    push(machine(a), remote)
    b = fresh_clone(a, tmp_path / "b")
    assert pull(machine(b), remote).added == len(trial_table(machine(a)))
    project = machine(b)
    with project.open_cache() as cache:
        plan = compute_plan(project, cache, project.read_lock())
        remeasured = cache.conn.execute("SELECT count(*) FROM remeasurements").fetchone()[0]
    # nothing to tune or re-decide, and the pull materialized the locked engines (not in git)
    assert {j.action for j in plan.jobs} == {"up-to-date"}, {j.job.name: j.reasons for j in plan.jobs}
    result = apply(machine(b))
    assert result.exit_code == 0 and result.built == 0
    with machine(b).open_cache() as cache:
        assert cache.conn.execute("SELECT count(*) FROM remeasurements").fetchone()[0] == remeasured
    assert Lockfile.read(b.parent / "tuning.lock").jobs.keys() == Lockfile.read(a.parent / "tuning.lock").jobs.keys()
    for name, entry in Lockfile.read(a.parent / "tuning.lock").jobs.items():
        assert Lockfile.read(b.parent / "tuning.lock").jobs[name]["route"] == entry["route"]


def test_credentials_are_never_stored_with_a_remote(a: Path, tmp_path: Path) -> None:
    """Secret-looking options and URLs with user:password@ are refused on the command line; given through
    the Python API, what is remembered in the cache is redacted."""
    import json as json_

    from trt_routes.share.remote import parse_options, remember

    for pair in ("key=AKIA", "secret=s", "token=t", "aws_session_token=t", "password=p",
                 "endpoint_url=http://AK:SK@127.0.0.1:9000"):
        with pytest.raises(UsageError, match="credential"):
            parse_options([pair])
    with pytest.raises(UsageError, match="carries credentials"):
        normalize_url("s3://AK:SK@bucket/prefix")
    assert parse_options(["endpoint_url=http://127.0.0.1:9000"]) == {"endpoint_url": "http://127.0.0.1:9000"}
    remote = Remote(str(tmp_path / "r"), {"auto_mkdir": "true"})
    remote.options.update({"secret": "s3cr3t", "endpoint_url": "http://AK:SK@host:9000", "client_token": "t0k"})
    with machine(a).open_cache() as cache:
        remember(cache, remote, pulled=False)
        stored = cache.conn.execute("SELECT options FROM remotes WHERE url = ?", [remote.url]).fetchone()[0]
    assert json_.loads(stored) == {"auto_mkdir": "true", "endpoint_url": "http://host:9000"}
    raw = (a.parent / "caches" / "trials.sqlite").read_bytes()
    assert b"s3cr3t" not in raw and b"AK:SK" not in raw and b"t0k" not in raw


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_remotes_by_name_with_a_default(a: Path, tmp_path: Path) -> None:
    """`remotes:` in tuning.yaml: push and pull by name, or with no name the default remote."""
    team, other = tmp_path / "team", tmp_path / "other"
    edit_manifest(a, lambda d: d.__setitem__("remotes", {"team": {"url": str(team), "default": True},
                                                         "other": {"url": other.as_uri()}}))
    code, out = _cli("cache", "push", "-m", str(a))  # no name: the default
    assert code == 0, out
    assert (team / "segments").is_dir() and not other.exists()
    code, out = _cli("cache", "push", "other", "-m", str(a))
    assert code == 0 and (other / "segments").is_dir(), out
    c = fresh_clone(a, tmp_path / "c")
    code, out = _cli("cache", "pull", "-m", str(c))
    assert code == 0, out
    with machine(c).open_cache() as cache:
        assert cache.all_trials()  # merged from the default remote
    code, out = _cli("cache", "pull", "nosuchremote", "-m", str(c))  # not a name: taken as a folder
    assert code != 0 and "Traceback" not in out


@pytest.mark.parametrize("remote", [
    {"url": "s3://bucket/p", "options": {"aws_secret_access_key": "x"}},
    {"url": "http://KEY:SECRET@host/p"},
    {"url": "s3://bucket/p", "options": {"endpoint_url": "http://KEY:SECRET@127.0.0.1:9000"}},
])
def test_remotes_in_the_manifest_never_hold_credentials(a: Path, remote: dict[str, object]) -> None:
    edit_manifest(a, lambda d: d.__setitem__("remotes", {"team": remote}))
    code, out = _cli("validate", "-m", str(a))
    assert code == 2 and "tuning.yaml:" in out and "credential" in out, out


def test_two_default_remotes_and_no_default_are_usage_errors(a: Path, tmp_path: Path) -> None:
    edit_manifest(a, lambda d: d.__setitem__("remotes", {"x": {"url": str(tmp_path / "x"), "default": True},
                                                         "y": {"url": str(tmp_path / "y"), "default": True}}))
    code, out = _cli("validate", "-m", str(a))
    assert code == 2 and "both marked default" in out, out
    edit_manifest(a, lambda d: d.__setitem__("remotes", {"x": {"url": str(tmp_path / "x")},
                                                         "y": {"url": str(tmp_path / "y")}}))
    code, out = _cli("cache", "push", "-m", str(a))
    assert code == 2 and "names no default remote" in out, out
