"""A search state's key digests every strategy parameter except those the strategy declares outside the
search (issue 34.4: a parameter left off a hand-written list silently reused the old search state)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from trt_routes import canonical
from trt_routes.manifest.schema import Confirm, Strategy
from trt_routes.search.job import strategy_key

#: A value other than the default for each parameter (a new parameter must be added here: the test below
#: fails until it is, and then shows whether it enters the key).
OTHER: dict[str, Any] = {"mode": "fast", "max_builds": 7, "max_minutes": 3.0, "min_gain": 0.05,
                         "warm_start": False, "confirm": Confirm(margin=0.05)}


def key(strategy: Strategy) -> str:
    return strategy_key(SimpleNamespace(strategy=strategy, expression=None))  # type: ignore[arg-type]


def test_keys_of_existing_caches_are_unchanged() -> None:
    s = Strategy()
    assert key(s) == canonical.digest({"mode": s.mode, "min_gain": s.min_gain, "warm_start": s.warm_start,
                                       "expression": ""}, 16)


def test_every_parameter_outside_the_declared_ones_changes_the_key() -> None:
    assert set(OTHER) == set(Strategy.model_fields), "give a non-default value for the new parameter in OTHER"
    base = Strategy()
    for name, value in OTHER.items():
        changed = base.model_copy(update={name: value})
        assert (key(changed) != key(base)) == (name not in Strategy.NOT_SEARCH_STATE), name
