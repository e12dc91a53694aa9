"""Layer profiles in the terminal: `trt-routes profile` and `trt-routes explain JOB --layers`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from trt_routes.routes import describe

if TYPE_CHECKING:
    from trt_routes.audit.layers import LayersReport
    from trt_routes.evidence.layers import LayerProfile


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def render_profile(job: str, profile: LayerProfile, console: Console, top: int = 20) -> None:
    wall = f", {_ms(profile.wall_ms)} ms a run under the profiler" if profile.wall_ms is not None else ""
    console.print(f"{job} {describe(profile.route)} ({profile.backend}): {len(profile.layers)} layer(s), "
                  f"{profile.total_ms:.3f} ms in layers{wall}; median of {profile.runs} run(s)",
                  markup=False, highlight=False)
    table = Table(show_lines=False)
    for col in ("layer", "op", "where", "ms", "share"):
        table.add_column(col, overflow="fold")
    total = profile.total_ms or 1.0
    for layer in sorted(profile.layers, key=lambda x: -x.ms)[:top]:
        table.add_row(layer.name, layer.op, layer.where, _ms(layer.ms), f"{layer.ms / total:.0%}")
    console.print(table)
    if len(profile.layers) > top:
        console.print(f"... and {len(profile.layers) - top} smaller layer(s)", markup=False)
    if profile.dropped:
        console.print(f"{profile.dropped} smallest layer(s) were dropped to keep the profile under 1 MiB", markup=False)
    if profile.note:
        console.print(f"note: {profile.note}", markup=False, highlight=False)


def render_layers(rep: LayersReport, console: Console, top: int = 10) -> None:
    d = rep.diff
    console.print(f"{rep.job}: default against {describe(rep.winner_route)}: {rep.why}", markup=False,
                  highlight=False)
    console.print(f"  trials' medians: {_ms(rep.default_ms)} -> {_ms(rep.winner_ms)} ms; layers: "
                  f"{d.default.total_ms:.3f} -> {d.winner.total_ms:.3f} ms ({abs(d.gain_ms):.3f} ms "
                  f"{'faster' if d.gain_ms >= 0 else 'slower'} in the winner's layers)", markup=False, highlight=False)
    if d.same_layers:
        console.print("  the two engines are the same layer for layer (same names, ops and where each ran): the route "
                      "changed how long layers take, not which run", markup=False)
    else:
        console.print(f"  {len(d.only_default)} layer(s) only in the default, {len(d.only_winner)} only in the "
                      f"winner; {sum(1 for r in d.rows if r.paired_by == 'op and order')} paired by op and order; "
                      f"{len(d.moved)} ran elsewhere (another kernel or provider)", markup=False)
    moved = bool(d.moved)  # a "where" column only when it says something
    table = Table(title=f"the {min(top, len(d.rows))} largest differences")
    for col in ("layer", "op", *(["where"] if moved else []), "default ms", "winner ms", "faster by ms",
                "share of gain"):
        table.add_column(col, overflow="fold")
    for r in d.largest(top):
        name = r.name if not r.winner_name else f"{r.name} ~ {r.winner_name}"
        if r.paired_by == "":
            name += " (only in the default)" if r.winner_ms is None else " (only in the winner)"
        where = f"{r.default_where} -> {r.winner_where}" if r.moved else r.default_where or r.winner_where
        share = d.share(r)
        table.add_row(name, r.op, *([where] if moved else []), _ms(r.default_ms), _ms(r.winner_ms),
                      f"{r.diff_ms:+.3f}", "-" if share is None else f"{share:.0%}")
    console.print(table)
    for note in rep.notes:
        console.print(f"  note: {note}", markup=False, highlight=False)
