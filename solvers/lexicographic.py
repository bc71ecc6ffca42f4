"""Preemptive (lexicographic) multi-objective solving by staged solves.

Staged solves were measured to cost about the same as HiGHS's native lexicographic mode and
need no arrays, and blended weights are only safe for small integer ranges
(docs/solvers.md). Each backend keeps one solver instance across stages.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import pyomo.core as pyo

from formulations.objective import Objective
from solvers import progress
from solvers.result import LexResult, SolveResult, Status, classify

#: Tolerance used to fix a non-integral objective, relative to max(|v|, 1).
FIX_TOL = 1e-6
#: Floor on a stage's time budget so a late stage still gets a chance to run.
MIN_STAGE_S = 0.01


#: Rows (expr, lb, ub) that become valid once stage k is fixed at its value: cuts a caller knows.
StageRows = Callable[[int, float], Sequence[tuple[Any, float | None, float | None]]]


class Session(Protocol):
    """What a backend offers the driver: one solver instance re-used across stages."""

    def set_objective(self, expr: Any, sense: str) -> None: ...
    def add_bound(self, expr: Any, lb: float | None, ub: float | None) -> None: ...
    def solve(self, *, time_limit: float | None, build_s: float) -> SolveResult: ...
    def close(self) -> None: ...


def fixing_bounds(obj: Objective, value: float) -> tuple[float | None, float | None]:
    """Bounds that keep later stages at least as good as `value` on this objective."""
    if obj.integral:
        v = float(round(value))
        return (None, v) if obj.sense == "min" else (v, None)
    tol = FIX_TOL * max(1.0, abs(value))
    return (None, value + tol) if obj.sense == "min" else (value - tol, None)


def _from_previous(res: SolveResult, obj: Objective, previous: SolveResult) -> SolveResult:
    """A stage that stopped without a solution still has the previous stage's solution, which
    satisfies every row added so far: report it as the incumbent (values are still loaded)."""
    try:
        value = float(pyo.value(obj.expr))
    except (ValueError, TypeError):  # a variable new in this stage has no value yet
        return res
    if not math.isfinite(value):
        return res
    _, gap = classify(converged=False, objective=value, bound=res.bound)
    return dataclasses.replace(
        res, status=Status.FEASIBLE, objective=value, gap=gap, values=previous.values
    )


def open_session(
    solver: str,
    model: Any,
    mip_gap: float,
    threads: int,
    seed: int,
    presolve: bool = True,
    restarts: bool = True,
) -> Session:
    """One solver instance on `model`, for strategies that re-solve as they add rows (cuts).
    presolve=False: HiGHS solves without presolve (CP-SAT ignores it), for large models that
    are re-solved many times with a few rows more each time, and for tiny ones where its fixed
    cost is most of the solve. restarts=False: HiGHS does not restart its MIP after the
    root (solvers/highs_backend.py `RESTARTS`)."""
    if solver == "highs":
        from solvers.highs_backend import HighsSession

        return HighsSession(
            model,
            mip_gap=mip_gap,
            threads=threads,
            seed=seed,
            presolve=presolve,
            restarts=restarts,
        )
    if solver == "cpsat":
        from solvers.cpsat_backend import CpSatSession

        return CpSatSession(model, mip_gap=mip_gap, threads=threads, seed=seed)
    raise ValueError(f"unknown solver {solver!r} (expected 'highs' or 'cpsat')")


def solve_lexicographic(
    model: Any,
    objectives: Sequence[Objective],
    solver: str = "highs",
    *,
    time_limit: float | None = None,
    mip_gap: float = 0.0,
    threads: int = 1,
    seed: int = 0,
    build_s: float = 0.0,
    stage_rows: StageRows | None = None,
    presolve: bool = True,
    hint: Mapping[Any, float] | None = None,
) -> LexResult:
    """Optimise `objectives` in order, each stage fixed as a row before the next.

    time_limit covers the whole run. A stage that ends feasible-not-optimal is fixed at its
    incumbent, so later stages stay feasible; the run stops after a stage with no solution.
    stage_rows(k, value), called with stage k's solution loaded, returns further rows that
    the fixing makes valid (cuts that speed up the later proofs); they are added with it.
    `hint` (Pyomo variable -> value) is a start for the first solve where the backend takes
    one (CP-SAT: a point it starts its search from and repairs if it breaks a row; HiGHS
    sessions ignore it).
    The model's own objectives are deactivated meanwhile; every added component is removed
    at the end and the objectives are re-activated. Variable values of the last solution stay.
    """
    if not objectives:
        raise ValueError("solve_lexicographic needs at least one objective")
    names = tuple(o.name for o in objectives)
    reporter = progress.current()
    start = time.perf_counter()
    stages: list[SolveResult] = []
    session = open_session(solver, model, mip_gap, threads, seed, presolve)
    if hint and hasattr(session, "hint"):
        session.hint(hint)
    try:
        for k, obj in enumerate(objectives):
            left = None
            if time_limit is not None:
                left = max(time_limit - (time.perf_counter() - start), MIN_STAGE_S)
            session.set_objective(obj.expr, obj.sense)
            if reporter is not None:
                reporter.stage(obj.name, k, len(objectives))
            res = session.solve(time_limit=left, build_s=build_s if k == 0 else 0.0)
            if reporter is not None:
                reporter.solving(res.objective, res.bound, res.gap)
            if res.status is Status.TIME_LIMIT and stages and stages[-1].has_solution:
                res = _from_previous(res, obj, stages[-1])
            stages.append(res)
            if not res.has_solution or res.objective is None:
                break
            if k + 1 < len(objectives):
                session.add_bound(obj.expr, *fixing_bounds(obj, res.objective))
                for expr, lb, ub in stage_rows(k, res.objective) if stage_rows else ():
                    session.add_bound(expr, lb, ub)
    finally:
        session.close()
    return LexResult.from_stages(names, tuple(stages), build_s)
