"""The headline speedup: the confirmed side-by-side ratio with its interval, the raw ratio only without one."""

from __future__ import annotations

from trt_routes.selection.headline import headline
from trt_routes.selection.rank import Selection


def _sel(winner: str | None, confirmation: dict | None = None) -> Selection:
    return Selection(winner=winner, default_ms=3.75, chosen_ms=1.0, verdicts=(), summary="",
                     confirmation=confirmation)


def test_the_confirmed_ratio_is_the_headline_not_the_raw_one() -> None:
    conf = {"vs_default": {"baseline": "", "winner": "-a=1",
                           "results": [{"route": "-a=1", "ratio": 1 / 1.38, "ci": [0.70, 0.75], "passed": True}]}}
    head = headline(_sel("-a=1", conf))
    assert head.confirmed and abs(head.speedup - 1.38) < 1e-9  # type: ignore[operator]
    assert abs(head.low - 1 / 0.75) < 1e-9 and abs(head.high - 1 / 0.70) < 1e-9  # type: ignore[operator]
    assert head.text().startswith("1.38x [1.33-1.43] (side by side)")
    assert head.lock_fields()["speedup_basis"] == "side-by-side"


def test_without_confirmation_the_raw_ratio_is_labelled_so() -> None:
    head = headline(_sel("-a=1"))
    assert not head.confirmed and head.speedup == 3.75
    assert "raw medians, not confirmed" in head.text()
    assert head.lock_fields() == {"speedup_basis": "raw-medians", "speedup_ci": None}


def test_the_default_kept_is_one_and_no_winner_is_none() -> None:
    assert headline(_sel("", {"vs_default": None})).speedup == 1.0
    assert not headline(_sel("", {"vs_default": None})).confirmed  # nothing was re-measured against it
    assert headline(_sel(None)).speedup is None and headline(None).text() == "-"
