"""Renderers of the cache commands (stats, gc, verify, export, import, push, pull)."""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trt_routes.share.maintenance import GcReport, Stats, VerifyReport


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def render_stats(s: Stats, out: Console) -> None:
    out.print(f"{escape(s.path)}: {s.trials} trial(s), database {_mb(s.db_bytes)}; "
              f"{s.blobs} blob(s), {_mb(s.blob_bytes)}; engines of trials present here: "
              f"{s.engines_present} of {s.engines_referenced}")
    for title, counts in (("status", s.by_status), ("backend", s.by_backend), ("source", s.by_source)):
        if counts:
            out.print(f"  by {title}: " + ", ".join(f"{escape(k)} {v}" for k, v in counts.items()))
    if s.signatures:
        table = Table(title="Trials by signature", title_justify="left")
        for col in ("signature", "trials", "ok", "hosts", "last seen", "what"):
            table.add_column(col)
        for row in s.signatures:
            table.add_row(row["hash"], str(row["trials"]), str(row["ok"]), str(row["hosts"]),
                          row["last_seen"] or "", escape(row["describe"]))
        out.print(table)
    for r in s.remotes:
        out.print(f"  remote {escape(r['url'])}: last pull {r['last_pull'] or 'never'}, "
                  f"{r['trials_exchanged']} trial(s) exchanged")


def render_gc(r: GcReport, out: Console) -> None:
    out.print(escape(r.text()))
    for sig in r.signatures:
        out.print(f"  signature {sig}: not seen recently")


def render_verify(r: VerifyReport, out: Console) -> None:
    out.print(f"integrity_check: {escape(r.integrity)}")
    out.print(f"blobs checked: {r.blobs_checked}, corrupt: {len(r.corrupt_blobs)}")
    for sha in r.corrupt_blobs:
        out.print(f"  [red]corrupt blob {sha}: evicted[/] (the next plan re-plans, re-fetches or rebuilds it)")
    _lines(out, "unreadable trial row", r.bad_rows, "red")
    _lines(out, "row that cannot be shared (skipped by export/push)", r.unshareable_rows, "yellow")
    for sha in r.missing_lock_engines:
        out.print(f"  note: engine {sha[:12]} of tuning.lock is not in the store (apply fetches or rebuilds it "
                  "when needed)")
    out.print("[green]ok[/]" if r.ok else "[red]problems found[/]")


def _lines(out: Console, what: str, items: Iterable[str], color: str) -> None:
    for item in items:
        out.print(f"  [{color}]{what}:[/] {escape(item)}")
