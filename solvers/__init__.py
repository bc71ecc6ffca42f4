"""Exact solving of Pyomo models with HiGHS or OR-Tools CP-SAT behind one result type.

`solve()` runs one objective; `solve_lexicographic()` runs preemptive multi-objective stages.
Both return statuses instead of raising for infeasible, unbounded or timed-out runs; they raise
`model.errors.SolverError` only when the backend cannot take the model at all.
"""

from __future__ import annotations

from typing import Any

from solvers.options import SOLVERS, SolverOptions
from solvers.result import LexResult, SolveResult, Status, Stopwatch

__all__ = [
    "SOLVERS",
    "LexResult",
    "SolverOptions",
    "SolveResult",
    "Status",
    "Stopwatch",
    "solve",
    "solve_lexicographic",
]


def __getattr__(name: str) -> Any:
    """solve_lexicographic imports Pyomo: loaded when first used, so that a caller needing only
    the options or result types (the batch planner, the hail client) starts without it."""
    if name == "solve_lexicographic":
        from solvers.lexicographic import solve_lexicographic

        return solve_lexicographic
    raise AttributeError(f"module 'solvers' has no attribute {name!r}")


def solve(
    model: Any,
    solver: str = "highs",
    *,
    time_limit: float | None = None,
    mip_gap: float = 0.0,
    threads: int = 1,
    seed: int = 0,
    build_s: float = 0.0,
) -> SolveResult:
    """Solve a model with exactly one active objective; load the solution into its Vars.

    build_s is the caller's Pyomo build time (see Stopwatch), carried into the result.
    """
    kw = {
        "time_limit": time_limit,
        "mip_gap": mip_gap,
        "threads": threads,
        "seed": seed,
        "build_s": build_s,
    }
    # Backends are imported lazily so that a HiGHS-only caller never loads ortools, and back.
    if solver == "highs":
        from solvers.highs_backend import solve_highs

        return solve_highs(model, **kw)
    if solver == "cpsat":
        from solvers.cpsat_backend import solve_cpsat

        return solve_cpsat(model, **kw)
    raise ValueError(f"unknown solver {solver!r} (expected one of {', '.join(SOLVERS)})")
