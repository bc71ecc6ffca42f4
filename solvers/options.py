"""How a problem is to be solved: the one typed options object every solving command carries.

`programs/options.py` builds it from `--solver`, `--time-limit`, `--gap` and `--threads`;
programs and solve strategies pass it on; `kwargs()` maps it onto `solvers.solve` /
`solve_lexicographic`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

SOLVERS = ("highs", "cpsat")


@dataclass(frozen=True)
class SolverOptions:
    solver: str = "highs"  # one of SOLVERS
    time_limit: float | None = None  # seconds for the whole answer; None: until proven
    gap: float = 0.0  # relative MIP gap accepted (0: prove optimality)
    threads: int = 1
    # False when the user named no solver (`--solver` absent): a strategy may then pick the
    # backend per problem (squeeze with DRBD moves runs CP-SAT, docs/squeeze.md)
    solver_given: bool = True

    def __post_init__(self) -> None:
        if self.solver not in SOLVERS:
            raise ValueError(f"unknown solver {self.solver!r} (expected one of {SOLVERS})")

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments of `solvers.solve` and `solvers.solve_lexicographic`."""
        return {
            "solver": self.solver,
            "time_limit": self.time_limit,
            "mip_gap": self.gap,
            "threads": self.threads,
        }

    def within(self, seconds: float | None) -> SolverOptions:
        """The same options with at most `seconds` left (None keeps the limit as it is)."""
        if seconds is None:
            return self
        if self.time_limit is None or seconds < self.time_limit:
            return replace(self, time_limit=seconds)
        return self

    def deadline(self) -> float | None:
        """The perf_counter time by which a solve started now must end."""
        return None if self.time_limit is None else time.perf_counter() + self.time_limit


#: The options of a solve nobody configured: HiGHS, no time limit, proven optimal, one thread.
DEFAULT_OPTIONS = SolverOptions()
