"""Integer Bareon disk layouts: how the stages are solved (docs/partition.md).

`solve_layout` answers one schema on one server. With HiGHS, stages 1-4 are solved first on
classes of identical disks (no symmetry to branch over) and stage 5 spreads that answer over
the disks; then on the disk model, whose identical disks are ordered instead; each with two
random seeds. The next attempt is taken when the classes' PVs do not spread over the disks,
or when a stage after the first (or stage 5) reports infeasible: the previous stage's
solution satisfies every row, so that is HiGHS's floating point (MiB-sized rows beside PV
integers), which another seed or model gets through. After stages 1-4, stage 4 is polished
as an LP with the integers fixed. CP-SAT solves the disk model once.

`lp_floor_baseline` answers the same schema as bareon-allocator does (its LP, every value
rounded down). The independent checker (model/bareon/check.py) judges both layouts.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from formulations import partition as form
from formulations.partition import LayoutProblem, LayoutValues, Stage
from model.bareon.check import CheckReport, check_layout, diagnose_infeasible
from model.bareon.outputs import allocator_document
from model.bareon.schema import ALLOCATOR_OVERHEADS, Layout, Overheads, PartitionProblem
from model.errors import CheckFailedError, InfeasibleError, SolverError, UsageError
from solvers import Status, Stopwatch, solve, solve_lexicographic
from solvers.options import DEFAULT_OPTIONS, SolverOptions

#: The largest fairness group weight sum W (formulations/partition.py, define_fairness) HiGHS
#: is given: its rows W·y_s - w_s·r_f <= W - 1 are exact only while W times HiGHS's
#: integrality tolerance (10^-6) stays below 1 MiB. Past it, weights 4095999, 4095998 and 1 on
#: a 1,000 MiB disk were called infeasible ("no whole-MiB layout ...") where CP-SAT, exact in
#: its integers, answers (benchmarks/large_numbers.py; issue 40, item 2). CP-SAT solves past it.
HIGHS_FAIR_WEIGHT_SUM = 2**19


@dataclass(frozen=True)
class LayoutResult:
    """An exalloc layout, checked, with its solver figures per stage (in stage order)."""

    layout: Layout
    check: CheckReport
    status: str
    objective: dict[str, int]  # each stage's value, as the checker recomputes it
    bound: dict[str, float | None]
    gap: dict[str, float | None]
    build_s: float
    solve_s: float
    solver: str  # the one that solved it (CP-SAT past HIGHS_FAIR_WEIGHT_SUM)


@dataclass(frozen=True)
class Baseline:
    """bareon-allocator's answer (LP, floored) beside exalloc's."""

    status: str
    layout: list[dict[str, Any]] | None
    unallocated_mib: int | None
    lost_mib: int | None  # its unallocated MiB minus exalloc's
    broken: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "unallocated_mib": self.unallocated_mib,
            "lost_mib": self.lost_mib,
            "broken": list(self.broken),
            "layout": self.layout,
        }


def solve_layout(
    problem: PartitionProblem,
    overheads: Overheads,
    *,
    leave_preferred_empty: bool = False,
    options: SolverOptions = DEFAULT_OPTIONS,
    aggregate: bool = True,
) -> LayoutResult:
    """Build, solve the stages, read the layout back and check it independently.

    aggregate=False solves stages 1-4 on the disk model only, even with HiGHS (to compare).
    """
    started = time.perf_counter()  # the limit counts the diagnosis and the problem's making
    reason = diagnose_infeasible(problem, overheads)
    if reason is not None:
        raise InfeasibleError(reason, source=problem.source or None)
    lp = LayoutProblem(problem, overheads, leave_preferred_empty)
    if not problem.spaces:  # nothing to place: the empty layout is the only one
        return _empty_layout(lp, options.solver)
    solver, time_limit, threads = _exact_solver(lp, options), options.time_limit, options.threads
    lex_stages, placement = lp.stages[:-1], lp.stages[-1]
    if solver == "highs":
        attempts = [(aggregate, 0), (aggregate, 1), (False, 0), (False, 1)]
        attempts = list(dict.fromkeys(attempts))  # aggregate=False: the disk model only
    else:
        attempts = [(False, 0)]
    # Every stage objective of stages 1-4 is an integer of magnitude at most
    # |S| * capacity, so a relative gap of 0.5 / that bound is an absolute gap below 1:
    # optimality is still proved, and ties within float noise need not be branched on.
    capacity = sum(d.size_mib for d in problem.disks)
    stage_gap = (
        options.gap if options.gap > 0 else 0.5 / max(1, capacity * max(1, len(problem.spaces)))
    )
    build_s = solve_s = 0.0
    for attempt, (on_classes, seed) in enumerate(attempts):
        final = attempt + 1 == len(attempts)
        with Stopwatch() as watch:
            m = form.build(
                lp,
                integer_placement=solver != "highs",
                aggregate=on_classes,
                integer_totals=not on_classes,
            )
        build_s += watch.seconds
        objectives = form.objectives(m, lp)
        bound: dict[str, float | None] = {}
        gaps: dict[str, float | None] = {}
        reported: dict[str, float | None] = {}
        statuses: list[Status] = []
        place = m
        if not objectives:
            break
        lex = solve_lexicographic(
            m,
            objectives,
            solver,
            time_limit=_left(time_limit, started, 0.0),
            mip_gap=stage_gap,
            threads=threads,
            seed=seed,
            build_s=watch.seconds,
        )
        solve_s += lex.solve_s
        if not lex.has_solution:
            _no_solution(problem, lex.status)
        if Status.INFEASIBLE in (st.status for st in lex.stages) and not final:
            continue
        for k, name in enumerate(lex.names):
            bound[name], gaps[name], reported[name] = lex.bound[k], lex.gap[k], lex.objective[k]
        statuses.append(lex.status)
        fixed = [
            (st, round(reported[st.name]))
            for st in lex_stages[:3]
            if reported.get(st.name) is not None
        ]
        if solver == "highs" and reported.get("space_order") is not None:
            polished, polish_s = _polish_space_order(m, lp, fixed, reported["space_order"], threads)
            solve_s += polish_s
            if polished is not None and polished > reported["space_order"]:
                reported["space_order"] = polished
                bound["space_order"] = max(bound["space_order"] or polished, polished)
        values = form.solution(m, lp)
        if not all(_integral(v) for v in values.total_mib.values()) and not final:
            continue  # continuous totals that the polish LP did not make whole
        totals = {s: _whole(v) for s, v in values.total_mib.items()}
        flags = None
        if on_classes:
            with Stopwatch() as watch:
                place = form.build(lp, integer_placement=False)
            build_s += watch.seconds
            flags = form.spread_pvs(problem, overheads, *_pv_counts(problem, values))
        form.add_placement_rows(place, fixed, totals, flags)
        # stage 5 is a root LP: give it a second even when stages 1-4 used the budget
        last = solve(
            place,
            solver,
            time_limit=_left(time_limit, started, 1.0),
            mip_gap=options.gap,
            threads=threads,
            seed=seed,
        )
        solve_s += last.solve_s
        if last.status is Status.INFEASIBLE and not final:
            continue
        if not last.has_solution:
            _no_solution(problem, last.status)
        bound[placement.name], gaps[placement.name] = last.bound, last.gap
        reported[placement.name] = last.objective
        statuses.append(last.status)
        break
    mib = form.solution(place, lp).mib
    layout = Layout(
        tuple(
            tuple(_whole(mib[d.disk_id, s.space_id]) for s in problem.spaces) for d in problem.disks
        )
    )
    check = _checked(lp, layout)
    values = check.stage_values
    # the solver's values hold to its tolerances (1e-7 relative on rows): at millions of MiB
    # the reported objective may be a few MiB off the rounded layout's. The layout passed the
    # checker, so it is printed; beyond 1e-6 relative it is only called feasible (the proof
    # was about a point the rounding moved)
    off = [
        name
        for name, value in reported.items()
        if value is not None and abs(value - values[name]) > max(0.5, 1e-6 * abs(values[name]))
    ]
    status = Status.OPTIMAL
    if off or any(st is not Status.OPTIMAL for st in statuses):
        status = Status.FEASIBLE
    names = [st.name for st in lp.stages]
    return LayoutResult(
        layout=layout,
        check=check,
        status=str(status),
        objective={n: values[n] for n in names},
        bound={n: bound.get(n, values[n]) for n in names},
        gap={n: gaps.get(n, 0.0) for n in names},
        build_s=build_s,
        solve_s=solve_s,
        solver=solver,
    )


def _exact_solver(lp: LayoutProblem, options: SolverOptions) -> str:
    """The solver the layout is solved with: CP-SAT in place of HiGHS when a fairness group's
    weight sum passes HIGHS_FAIR_WEIGHT_SUM; a usage error when --solver highs was asked for."""
    widest = max(lp.fair_groups, key=lambda g: g.weight_sum, default=None)
    if options.solver != "highs" or widest is None or widest.weight_sum <= HIGHS_FAIR_WEIGHT_SUM:
        return options.solver
    if options.solver_given:
        spaces = [lp.problem.spaces[i] for i in widest.space_indexes]
        names = ", ".join(sp.space_id for sp in spaces)
        given = ", ".join(f"{float(sp.weight):g}" for sp in spaces)
        raise UsageError(
            f"--solver highs: the weights ({given}) of spaces {names} scale to whole numbers "
            f"summing to "
            f"{widest.weight_sum}, past 2^19, beyond which HiGHS's integrality tolerance can "
            "miss a fair share by a MiB: use --solver cpsat, or leave --solver out (CP-SAT is "
            "then used)"
        )
    return "cpsat"


def _checked(lp: LayoutProblem, layout: Layout) -> CheckReport:
    """The checker's verdict on a layout; a layout it rejects is never an answer."""
    check = check_layout(
        lp.problem, layout, lp.overheads, leave_preferred_empty=lp.leave_preferred_empty
    )
    if not check.ok:
        raise CheckFailedError("layout rejected by the checker: " + "; ".join(check.violations))
    return check


def _empty_layout(lp: LayoutProblem, solver: str) -> LayoutResult:
    layout = Layout(tuple(() for _ in lp.problem.disks))
    check = _checked(lp, layout)
    names = [st.name for st in lp.stages]
    return LayoutResult(
        layout=layout,
        check=check,
        status=str(Status.OPTIMAL),
        objective={n: check.stage_values[n] for n in names},
        bound={n: check.stage_values[n] for n in names},
        gap=dict.fromkeys(names, 0.0),
        build_s=0.0,
        solve_s=0.0,
        solver=solver,
    )


def _polish_space_order(
    m: Any, lp: LayoutProblem, fixed: list[tuple[Stage, int]], found: float, threads: int
) -> tuple[float | None, float]:
    """Stage 4 as an LP with the integers fixed (add_polish_rows): its value, or None when
    it is unusable (then the stage 4 solution is put back as it was), and the solve time.

    The LP's vertex has whole-MiB totals, also for totals that were continuous in the
    model; a better value than `found` means HiGHS stopped short in floating point.
    """
    kept = form.solution(m, lp)
    form.add_polish_rows(m, fixed)
    try:
        result = solve(m, "highs", threads=threads)
    finally:
        form.remove_polish_rows(m)
    usable = (
        result.status is Status.OPTIMAL
        and result.objective is not None
        and result.objective >= found - 0.5
        and all(_integral(v) for v in form.solution(m, lp).total_mib.values())
    )
    if not usable:
        form.set_values(m, kept)
        return None, result.solve_s
    return float(round(result.objective)), result.solve_s


def _integral(value: float | None) -> bool:
    return value is not None and abs(value - round(value)) <= 1e-6


def _left(time_limit: float | None, started: float, floor: float) -> float | None:
    """What is left of the time limit (at least `floor` seconds), or None without a limit."""
    if time_limit is None:
        return None
    return max(time_limit - (time.perf_counter() - started), floor, 0.01)


def _pv_counts(
    problem: PartitionProblem, values: LayoutValues
) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], float]]:
    """From the class model: PVs per (VG, class) and the MiB of the VG's LVs in the class."""
    lvs = {vg.vg_id: vg.lv_ids for vg in problem.vgs}
    counts = {gd: _whole(n) for gd, n in values.pv_count.items()}
    mib = {(g, d): sum(values.mib[d, s] or 0.0 for s in lvs[g]) for g, d in values.pv_count}
    return counts, mib


def _no_solution(problem: PartitionProblem, status: Status) -> None:
    if status is Status.INFEASIBLE:
        raise InfeasibleError(
            "no whole-MiB layout meets every min_size, fairness tie and LVM overhead at once "
            "(each holds on its own)",
            source=problem.source or None,
        )
    raise SolverError(f"no layout found ({status}); try a larger --time-limit")


def _whole(value: float | None) -> int:
    """Solver values of integer variables, rounded to the integer they represent."""
    return 0 if value is None else int(round(value))


def lp_floor_baseline(problem: PartitionProblem, exalloc_unallocated: int) -> Baseline:
    """Solve bareon-allocator's LP with HiGHS, floor every value, and check the result."""
    m = form.build_lp_floor(problem)
    result = solve_lexicographic(m, form.lp_floor_objectives(m, problem), "highs")
    if not result.has_solution:
        return Baseline(str(result.status), None, None, None, ())
    rows = form.lp_floor_solution(m, problem)
    sizes = tuple(tuple(math.floor(v) for v in row[:-1]) for row in rows)
    unallocated = tuple(math.floor(row[-1]) for row in rows)
    layout = Layout(sizes)
    check = check_layout(problem, layout, ALLOCATOR_OVERHEADS)
    shown = tuple(
        max(0, d.size_mib - sum(sizes[i]) - unallocated[i]) for i, d in enumerate(problem.disks)
    )
    broken = list(check.violations)
    broken += [
        f"disk {d.disk_id}: {lost} MiB in neither a space nor 'unallocated' (rounded away)"
        for d, lost in zip(problem.disks, shown, strict=True)
        if lost
    ]
    return Baseline(
        status=str(result.status),
        layout=allocator_document(problem, layout, ALLOCATOR_OVERHEADS, unallocated),
        unallocated_mib=check.unallocated_mib,
        lost_mib=check.unallocated_mib - exalloc_unallocated,
        broken=tuple(broken),
    )
