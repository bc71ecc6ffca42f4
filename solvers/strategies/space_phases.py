"""hspace's two phases, exactly, under one `--time-limit` (docs/space.md): how the limit is
shared between the tiered ladder and the standard allocation is a solve strategy, so it lives
here and `exalloc space` makes one call with the whole limit. Apart from
solvers/strategies/space.py because the standard phase may move existing instances first
(solvers/strategies/space_moves.py, which builds on space.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from model.space import SpaceOptions, Spec
from model.state import ClusterState
from solvers.options import DEFAULT_OPTIONS, SolverOptions
from solvers.strategies.space import standard
from solvers.strategies.space_moves import moved_standard
from solvers.strategies.space_n1 import InputFailures
from solvers.strategies.space_tiered import TieredResult, tiered

#: The share of what is left of the limit the tiered phase (which runs first) may use: the
#: standard phase keeps at least the other half, and all of it when the ladder ends early.
TIERED_SHARE = 0.5

#: The limit a phase gets when none is left: a solve handed no time still answers (the best
#: proven so far, checked) rather than being skipped.
FLOOR_S = 0.001


@dataclass(frozen=True)
class Share:
    """How one phase used the limit (seconds from the program's start): what it was given
    when it started and how long it took, in `--json` so that a user can see where a
    `--time-limit` went."""

    phase: str  # "tiered" or "standard"
    started_s: float
    limit_s: float | None  # None: no --time-limit
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "started_s": round(self.started_s, 4),
            "limit_s": None if self.limit_s is None else round(self.limit_s, 4),
            "seconds": round(self.seconds, 4),
        }


def share_of(limit_s: float | None, elapsed_s: float, share: float = 1.0) -> float | None:
    """The time limit of a phase starting `elapsed_s` after the program's start under a
    whole `limit_s`: `share` of what is left, at least FLOOR_S; None without a limit."""
    if limit_s is None:
        return None
    return max(limit_s - elapsed_s, 0.0) * share or FLOOR_S


@dataclass(frozen=True)
class Phases:
    """hspace's two phases under one time limit, each run when hspace's output asks for it
    (the tiered phase first, and not at all when hspace would skip it); `shares` records how
    each phase that ran used the limit, in the order they ran."""

    tiered: Callable[[], TieredResult]
    standard: Callable[[], Any]  # a SpaceResult, or a MovesResult with moves
    shares: list[Share] = field(default_factory=list)

    def share(self, phase: str) -> Share | None:
        return next((s for s in self.shares if s.phase == phase), None)


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
    first, gets TIERED_SHARE of what is left when it starts, the standard phase all that is
    left then (issue 40, item 4: each phase had the whole limit, 60 s for a 10 s limit on
    1,000 nodes)."""
    start = time.perf_counter() if began is None else began
    shares: list[Share] = []
    # the input's N+1 verdicts, decided once for both phases (the ladder's first state is the
    # standard phase's state)
    decided = InputFailures()

    def timed(phase: str, share: float, run: Callable[[SolverOptions], Any]) -> Any:
        started = time.perf_counter() - start
        given = solver.within(share_of(solver.time_limit, started, share))
        result = run(given)
        ended = time.perf_counter() - start
        shares.append(Share(phase, started, given.time_limit, ended - started))
        return result

    def run_tiered() -> TieredResult:
        return timed(
            "tiered",
            TIERED_SHARE,
            lambda s: tiered(state, tuple(tier_specs), options, s, decided=decided),
        )

    def run_standard() -> Any:
        if move_existing or max_moves is not None:
            return timed(
                "standard", 1.0, lambda s: moved_standard(state, spec, options, s, max_moves)
            )
        return timed("standard", 1.0, lambda s: standard(state, spec, options, s, decided=decided))

    return Phases(run_tiered, run_standard, shares)
