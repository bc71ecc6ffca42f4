"""`exalloc balance --across-groups` solved: the least score between the groups of each pool
within K migrations (docs/balance.md "Across groups", formulations/balance_groups.py).

Kelley's cutting planes on a convex objective over an exact feasible set: the model's rows are
the checker's rules, its spreads are cut from below by planes (every pair of groups at the
start, then the tangents where each solution lands). Rounds: solve; read the migrations; the
checker replays them and scores the layout they lead to (never the model); planes are added
there. A round's dual bound is a lower bound of the least score; the run ends `optimal` when
the best checked score meets it, else at the time limit with the bound and gap. A solution
that comes back with its own planes in is the model's optimum at its true score: proven.

Every answer returned passed `check_across_groups`; its score is the checker's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from formulations import balance_groups as form
from model.balance_groups import (
    AcrossProblem,
    across_data,
    across_score,
    check_across_groups,
    greedy_plan,
    point_planes,
    spread_planes,
)
from model.errors import CheckFailedError
from model.groups import Relocation, apply_relocations, relocation
from solvers import Status, Stopwatch
from solvers.lexicographic import open_session
from solvers.options import DEFAULT_OPTIONS, SolverOptions

#: Seconds per target variable to build the model and copy it into HiGHS through Pyomo
#: (benchmarks/bench_balance_groups.py, 5 groups of 20 nodes: 27,719 variables, build 8.6 s
#: and the copy about 5 s at a load average of about 8), and the share of the time left the
#: two may take
MODEL_SECONDS_PER_VARIABLE = 5e-4
MODEL_SHARE = 0.5
#: relative gap at which the score counts as proven (a float sum of square roots)
SCORE_GAP = 1e-6
MAX_ROUNDS = 1000


@dataclass(frozen=True)
class AcrossAnswer:
    """The migrations found and what is proven about them."""

    relocations: tuple[Relocation, ...]
    score_before: float
    score: float  # the checker's
    bound: float | None
    status: str
    rounds: int = 0
    build_s: float = 0.0
    solve_s: float = 0.0
    check_s: float = 0.0
    notes: tuple[str, ...] = field(default_factory=tuple)
    start_score: float | None = None  # the greedy start's (the best single migration, again)
    start_moves: int = 0

    @property
    def gap(self) -> float | None:
        if self.bound is None:
            return None
        return max(0.0, self.score - self.bound) / max(abs(self.score), 1e-9)


def _checked(problem: AcrossProblem, plan: tuple[Relocation, ...]) -> float:
    report = check_across_groups(problem, plan)
    if report.violations:
        raise CheckFailedError(
            "balance --across-groups: the plan fails the checker: "
            + "; ".join(str(v) for v in report.violations)
        )
    return report.objectives["score"]


def _met(score: float, bound: float | None) -> bool:
    return bound is not None and score - bound <= SCORE_GAP * max(abs(score), 1.0)


def balance_across(
    problem: AcrossProblem, *, options: SolverOptions = DEFAULT_OPTIONS
) -> AcrossAnswer:
    """The least score across groups within `problem.max_moves` migrations."""
    began = time.perf_counter()
    deadline = None if options.time_limit is None else began + options.time_limit
    check_s = 0.0
    t0 = time.perf_counter()
    before = _checked(problem, ())
    check_s += time.perf_counter() - t0
    best: tuple[Relocation, ...] = ()
    best_score = before
    with Stopwatch() as sw:
        data = across_data(problem)
    if not data.pools or not any(mv.targets for mv in data.movers) or data.max_moves == 0:
        why = (
            "no pool with two groups to balance" if not data.pools
            else "no migration allowed" if data.max_moves == 0
            else "no instance may migrate to another group of its pool"
        )  # fmt: skip
        return AcrossAnswer((), before, before, before, str(Status.OPTIMAL), build_s=sw.seconds,
                            check_s=check_s, notes=(why,))  # fmt: skip
    pools = data.pools
    with sw:
        start = greedy_plan(problem, data)  # the best single migration, again and again
    t0 = time.perf_counter()
    start_score = _checked(problem, start)
    check_s += time.perf_counter() - t0
    if start_score < best_score - 1e-12:
        best, best_score = start, start_score
    size = sum(len(mv.targets) for mv in data.movers)
    left = None if deadline is None else deadline - time.perf_counter()
    if left is not None and size * MODEL_SECONDS_PER_VARIABLE > MODEL_SHARE * left:
        why = (
            f"no time for the model: {size} variables would take about "
            f"{size * MODEL_SECONDS_PER_VARIABLE:.1f} s to build and hand to the solver, more "
            f"than {MODEL_SHARE:.0%} of the {max(left, 0.0):.1f} s left; the best single "
            "migrations one after another stand, with the bound 0 (no score is lower)"
        )
        status = Status.OPTIMAL if best_score <= 0.0 else Status.FEASIBLE
        return AcrossAnswer(best, before, best_score, 0.0, str(status), 0, sw.seconds, 0.0,
                            check_s, (why,), start_score, len(start))  # fmt: skip
    with sw:
        m = form.build(data)
        session = open_session(options.solver, m, options.gap, options.threads, 0, presolve=False)
        obj = form.objective(m)
        session.set_objective(obj.expr, obj.sense)
        planes = spread_planes(pools) + point_planes(across_score(problem.state, problem.storage))
        if start:
            after, _ = apply_relocations(problem.state, start)
            planes += point_planes(across_score(after, problem.storage, pools))
        for row in form.plane_rows(m, planes):
            session.add_bound(*row)
    solve_s = 0.0
    if best and hasattr(session, "solve_with_fixed"):
        # the start, completed by the solver into its first incumbent
        left = None if deadline is None else max(deadline - time.perf_counter(), 0.0)
        res = session.solve_with_fixed(form.load_plan(m, data, best), time_limit=left)
        solve_s += res.solve_s
    bound: float | None = None
    rounds = 0
    notes: list[str] = []
    seen: set[tuple[tuple[str, str], ...]] = set()
    while rounds < MAX_ROUNDS:
        left = None if deadline is None else deadline - time.perf_counter()
        if left is not None and left <= 0.01:
            break
        rounds += 1
        res = session.solve(time_limit=left, build_s=sw.seconds)
        solve_s += res.solve_s
        if res.bound is not None and (bound is None or res.bound > bound):
            bound = min(res.bound, best_score) if res.status == Status.OPTIMAL else res.bound
        if not res.has_solution:
            break
        moves = tuple(sorted(form.solution(m, data)))
        plan = tuple(relocation(problem.state, i, n, None) for i, n in moves)
        t0 = time.perf_counter()
        score = _checked(problem, plan)
        check_s += time.perf_counter() - t0
        if score < best_score - 1e-12:
            best, best_score = plan, score
        if _met(best_score, bound):
            break
        if moves in seen and res.status == Status.OPTIMAL:
            # its planes are in and it is the model's optimum again: the gap is float noise
            notes.append("a solution repeated with its planes in (float tolerance)")
            bound = min(best_score, score)
            break
        seen.add(moves)
        after, _ = apply_relocations(problem.state, plan)
        with sw:
            for row in form.plane_rows(
                m, point_planes(across_score(after, problem.storage, pools))
            ):
                session.add_bound(*row)
    session.close()
    status = Status.OPTIMAL if _met(best_score, bound) else Status.FEASIBLE
    return AcrossAnswer(best, before, best_score, bound, str(status), rounds, sw.seconds, solve_s,
                        check_s, tuple(notes), start_score, len(start))  # fmt: skip
