"""A model's build under a deadline (issue 40, item 4: the build of a 50-instance drbd batch
took 7 s of a 10 s limit and was not cut short).

A formulation assembles its model family by family (formulations/__init__.py); `build_families`
runs them in order and looks at the clock before each: once the deadline has passed, it stops
with `OutOfTime`, naming the family it did not start and how long the build ran, so that the
strategy answers with what it has (hail's one-by-one batch, the best plan so far) and says so.
A family is never interrupted in the middle, and a model whose last family is built is
returned even past the deadline: deciding whether it may still be solved is the strategy's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence


class OutOfTime(Exception):
    """The deadline passed before `family` of the model's build began."""

    def __init__(self, family: str, built_s: float) -> None:
        super().__init__(f"the model's build stopped before {family} after {built_s:.2f} s")
        self.family = family
        self.built_s = built_s


def build_families(
    families: Sequence[tuple[str, Callable[[], None]]], deadline: float | None
) -> None:
    """Run each (name, define) in order; before each, stop with OutOfTime once `deadline`
    (a time.perf_counter() value; None: no deadline) has passed."""
    began = time.perf_counter()
    for name, define in families:
        if deadline is not None and time.perf_counter() >= deadline:
            raise OutOfTime(name, time.perf_counter() - began)
        define()
