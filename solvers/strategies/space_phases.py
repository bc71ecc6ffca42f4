"""hspace's two phases, exactly, under one `--time-limit` (docs/space.md): how the limit is
shared between the tiered ladder and the standard allocation is a solve strategy, so it lives
here and `exalloc space` makes one call with the whole limit. Apart from
solvers/strategies/space.py because the standard phase may move existing instances first
(solvers/strategies/space_moves.py, which builds on space.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from model.space import SpaceOptions, Spec
from model.state import ClusterState
from solvers.options import DEFAULT_OPTIONS, SolverOptions
from solvers.strategies.space import TieredResult, standard, tiered
from solvers.strategies.space_moves import moved_standard


@dataclass(frozen=True)
class Phases:
    """hspace's two phases under one time limit, each run when hspace's output asks for it
    (the tiered phase first, and not at all when hspace would skip it)."""

    tiered: Callable[[], TieredResult]
    standard: Callable[[], Any]  # a SpaceResult, or a MovesResult with moves


def phases(
    state: ClusterState,
    tier_specs: Sequence[Spec],
    spec: Spec,
    options: SpaceOptions,
    solver: SolverOptions = DEFAULT_OPTIONS,
    *,
    began: float | None = None,
    move_existing: bool = False,
    max_moves: int | None = None,
) -> Phases:
    """The tiered ladder and the standard allocation (after moving existing instances first
    with `move_existing` or `max_moves`) under `solver`'s whole time limit, one deadline from
    `began` (the program's start, perf_counter; now when None): the tiered phase, which runs
    first, gets half of what is left when it starts, the standard phase all that is left then
    (issue 40, item 4: each phase had the whole limit, 60 s for a 10 s limit on 1,000 nodes)."""
    start = time.perf_counter() if began is None else began
    deadline = None if solver.time_limit is None else start + solver.time_limit

    def left(share: float = 1.0) -> SolverOptions:
        if deadline is None:
            return solver
        return solver.within(max(deadline - time.perf_counter(), 0.0) * share or 0.001)

    def run_tiered() -> TieredResult:
        return tiered(state, tuple(tier_specs), options, left(0.5))

    def run_standard() -> Any:
        if move_existing or max_moves is not None:
            return moved_standard(state, spec, options, left(), max_moves)
        return standard(state, spec, options, left())

    return Phases(run_tiered, run_standard)
