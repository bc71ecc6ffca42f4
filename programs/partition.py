"""exalloc partition: integer Bareon disk layout from a dynamic schema (issue 5).

read → diagnose → build → solve lexicographically → check → write documents → report.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import yaml
from pyomo.core.expr.numvalue import is_constant

from formulations.partition import (
    Stage,
    add_placement_rows,
    add_polish_rows,
    build_lp_floor_model,
    build_partition_model,
    remove_polish_rows,
    spread_pvs,
    stages,
)
from model.bareon.check import CheckReport, check_layout, diagnose_infeasible
from model.bareon.outputs import (
    allocator_document,
    bareon_document,
    ironic_document,
    layout_svg,
)
from model.bareon.schema import (
    ALLOCATOR_OVERHEADS,
    OVERHEADS_BY_FORMAT,
    Layout,
    Overheads,
    PartitionProblem,
    read_problem,
)
from model.errors import CheckFailedError, InfeasibleError, InputError, SolverError
from model.files import write_file
from solvers import Objective, Status, Stopwatch, solve, solve_lexicographic


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


@dataclass(frozen=True)
class PartitionReport:
    """What `exalloc partition` prints, as text or as one JSON object."""

    status: str
    objective: dict[str, int]
    bound: dict[str, float | None]
    gap: dict[str, float | None]
    build_s: float
    solve_s: float
    solver: str
    output_format: str
    layout: Any
    unallocated_mib: int
    unallocated_why: tuple[tuple[str, int, str], ...]
    notes: tuple[str, ...] = ()
    baseline: Baseline | None = None
    svg_path: str | None = None
    sizes_mib: tuple[tuple[int, ...], ...] = field(default=(), repr=False)

    @property
    def exit_code(self) -> int:
        return 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "status": self.status,
            "objective": self.objective,
            "unallocated_mib": self.unallocated_mib,
            "layout": self.layout,
            "bound": self.bound,
            "gap": self.gap,
            "build_s": round(self.build_s, 6),
            "solve_s": round(self.solve_s, 6),
        }
        if self.baseline is not None:
            out["baseline"] = self.baseline.to_json()
        return out

    def text(self) -> str:
        stage_text = " ".join(f"{k}={v}" for k, v in self.objective.items())
        gaps = [g for g in self.gap.values() if g is not None]
        lines = [
            f"status: {self.status} ({self.solver}); objective: {stage_text}; "
            f"gap: {max(gaps, default=0.0):g}; build {self.build_s:.3f} s, "
            f"solve {self.solve_s:.3f} s",
            f"layout ({self.output_format}):",
            _yaml(self.layout).rstrip(),
            f"unallocated: {self.unallocated_mib} MiB",
        ]
        lines += [f"  {disk}: {mib} MiB: {why}" for disk, mib, why in self.unallocated_why]
        if self.baseline is not None:
            b = self.baseline
            lines.append("baseline lp-floor (bareon-allocator: LP, sizes rounded down):")
            if b.layout is None:
                lines.append(f"  status: {b.status}")
            else:
                lines.append(_yaml(b.layout).rstrip())
                lines.append(
                    f"  unallocated: {b.unallocated_mib} MiB; lost against exalloc: "
                    f"{b.lost_mib} MiB; constraints broken: {len(b.broken)}"
                )
                lines += [f"    broken: {v}" for v in b.broken]
        if self.svg_path:
            lines.append(f"svg: {self.svg_path}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines) + "\n"


def _yaml(document: Any) -> str:
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=None, width=100)


@dataclass(frozen=True)
class Solved:
    """An exalloc layout with its solver figures (shared by run() and the benchmark)."""

    layout: Layout
    check: CheckReport
    status: str
    bound: dict[str, float | None]
    gap: dict[str, float | None]
    build_s: float
    solve_s: float


def solve_layout(
    problem: PartitionProblem,
    overheads: Overheads,
    *,
    leave_preferred_empty: bool = False,
    solver: str = "highs",
    time_limit: float | None = None,
    gap: float = 0.0,
    threads: int = 1,
    aggregate: bool = True,
) -> Solved:
    """Build, solve the stages, read the layout back and check it independently.

    aggregate=False solves stages 1-4 on the disk model only, even with HiGHS (to compare).
    """
    reason = diagnose_infeasible(problem, overheads)
    if reason is not None:
        raise InfeasibleError(reason, source=problem.source or None)
    if not problem.spaces:  # nothing to place: the empty layout is the only one
        return _empty_layout(problem, overheads, leave_preferred_empty)
    # With HiGHS, stages 1-4 are solved first on classes of identical disks (no symmetry
    # to branch over) and stage 5 spreads that answer over the disks; then on the disk
    # model, whose identical disks are ordered instead; each with two random seeds. The
    # next attempt is taken when the classes' PVs do not spread over the disks, or when a
    # stage after the first (or stage 5) reports infeasible: the previous stage's solution
    # satisfies every row, so that is HiGHS's floating point (MiB-sized rows beside PV
    # integers), which another seed or model gets through.
    plan = stages(leave_preferred_empty)
    lex_stages, placement = plan[:-1], plan[-1]
    if solver == "highs":
        attempts = [(aggregate, 0), (aggregate, 1), (False, 0), (False, 1)]
        attempts = list(dict.fromkeys(attempts))  # aggregate=False: the disk model only
    else:
        attempts = [(False, 0)]
    # Every stage objective of stages 1-4 is an integer of magnitude at most
    # |S| * capacity, so a relative gap of 0.5 / that bound is an absolute gap below 1:
    # optimality is still proved, and ties within float noise need not be branched on.
    capacity = sum(d.size_mib for d in problem.disks)
    stage_gap = gap if gap > 0 else 0.5 / max(1, capacity * max(1, len(problem.spaces)))
    build_s = solve_s = 0.0
    started = time.perf_counter()
    for attempt, (on_classes, seed) in enumerate(attempts):
        final = attempt + 1 == len(attempts)
        with Stopwatch() as watch:
            m = build_partition_model(
                problem,
                overheads,
                leave_preferred_empty=leave_preferred_empty,
                integer_placement=solver != "highs",
                aggregate=on_classes,
                integer_totals=not on_classes,
            )
        build_s += watch.seconds
        objectives = [
            Objective(st.name, getattr(m, st.name).expr, st.sense)
            for st in lex_stages
            if not _constant(getattr(m, st.name).expr)
        ]
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
            polished, polish_s = _polish_space_order(m, fixed, reported["space_order"], threads)
            solve_s += polish_s
            if polished is not None and polished > reported["space_order"]:
                reported["space_order"] = polished
                bound["space_order"] = max(bound["space_order"] or polished, polished)
        if not all(_integral(var.value) for var in m.total_mib.values()) and not final:
            continue  # continuous totals that the polish LP did not make whole
        totals = {s: _whole(m.total_mib[s].value) for s in m.S}
        flags = None
        if on_classes:
            with Stopwatch() as watch:
                place = build_partition_model(
                    problem,
                    overheads,
                    leave_preferred_empty=leave_preferred_empty,
                    integer_placement=False,
                )
            build_s += watch.seconds
            flags = spread_pvs(problem, overheads, *_pv_counts(problem, m))
        add_placement_rows(place, fixed, totals, flags)
        # stage 5 is a root LP: give it a second even when stages 1-4 used the budget
        last = solve(
            place,
            solver,
            time_limit=_left(time_limit, started, 1.0),
            mip_gap=gap,
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
    sizes = tuple(
        tuple(_whole(place.x[d.disk_id, s.space_id].value) for s in problem.spaces)
        for d in problem.disks
    )
    layout = Layout(sizes)
    check = check_layout(problem, layout, overheads, leave_preferred_empty=leave_preferred_empty)
    if not check.ok:
        raise CheckFailedError("layout rejected by the checker: " + "; ".join(check.violations))
    values = check.stage_values
    for name, value in reported.items():
        if value is not None and abs(value - values[name]) > 0.5:
            raise CheckFailedError(
                f"stage {name}: solver reports {value}, checker recomputes {values[name]}"
            )
    status = Status.OPTIMAL
    if any(st is not Status.OPTIMAL for st in statuses):
        status = Status.FEASIBLE
    names = [st.name for st in plan]
    return Solved(
        layout=layout,
        check=check,
        status=str(status),
        bound={n: bound.get(n, values[n]) for n in names},
        gap={n: gaps.get(n, 0.0) for n in names},
        build_s=build_s,
        solve_s=solve_s,
    )


def _empty_layout(
    problem: PartitionProblem, overheads: Overheads, leave_preferred_empty: bool
) -> Solved:
    layout = Layout(tuple(() for _ in problem.disks))
    check = check_layout(problem, layout, overheads, leave_preferred_empty=leave_preferred_empty)
    if not check.ok:
        raise CheckFailedError("layout rejected by the checker: " + "; ".join(check.violations))
    names = [st.name for st in stages(leave_preferred_empty)]
    return Solved(
        layout=layout,
        check=check,
        status=str(Status.OPTIMAL),
        bound={n: check.stage_values[n] for n in names},
        gap=dict.fromkeys(names, 0.0),
        build_s=0.0,
        solve_s=0.0,
    )


def _polish_space_order(
    m: Any, fixed: list[tuple[Stage, int]], found: float, threads: int
) -> tuple[float | None, float]:
    """Stage 4 as an LP with the integers fixed (add_polish_rows): its value, or None when
    it is unusable (then the stage 4 solution is put back as it was), and the solve time.

    The LP's vertex has whole-MiB totals, also for totals that were continuous in the
    model; a better value than `found` means HiGHS stopped short in floating point.
    """
    kept = [(var, var.value) for var in (*m.x.values(), *m.total_mib.values())]
    add_polish_rows(m, fixed)
    try:
        result = solve(m, "highs", threads=threads)
    finally:
        remove_polish_rows(m)
    usable = (
        result.status is Status.OPTIMAL
        and result.objective is not None
        and result.objective >= found - 0.5
        and all(_integral(var.value) for var in m.total_mib.values())
    )
    if not usable:
        for var, value in kept:
            var.set_value(value, skip_validation=True)
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
    problem: PartitionProblem, m: Any
) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], float]]:
    """From the class model: PVs per (VG, class) and the MiB of the VG's LVs in the class."""
    lvs = {vg.vg_id: vg.lv_ids for vg in problem.vgs}
    counts = {(g, d): _whole(m.pv[g, d].value) for g in m.G for d in m.D}
    mib = {(g, d): sum(m.x[d, s].value or 0.0 for s in lvs[g]) for g in m.G for d in m.D}
    return counts, mib


def _no_solution(problem: PartitionProblem, status: Status) -> None:
    if status is Status.INFEASIBLE:
        raise InfeasibleError(
            "no whole-MiB layout meets every min_size, fairness tie and LVM overhead at once "
            "(each holds on its own)",
            source=problem.source or None,
        )
    raise SolverError(f"no layout found ({status}); try a larger --time-limit")


def _constant(expr: Any) -> bool:
    """A stage with no variable (e.g. no space has a preference) needs no solve."""
    return is_constant(expr)


def _whole(value: float | None) -> int:
    """Solver values of integer variables, rounded to the integer they represent."""
    return 0 if value is None else int(round(value))


def lp_floor_baseline(problem: PartitionProblem, exalloc_unallocated: int) -> Baseline:
    """Solve bareon-allocator's LP with HiGHS, floor every value, and check the result."""
    m = build_lp_floor_model(problem)
    result = solve(m, "highs")
    if not result.has_solution:
        return Baseline(str(result.status), None, None, None, ())
    spaces = [s.space_id for s in problem.spaces]
    sizes = tuple(
        tuple(math.floor(m.x[d.disk_id, s].value or 0.0) for s in spaces) for d in problem.disks
    )
    unallocated = tuple(
        math.floor(m.x[d.disk_id, "unallocated"].value or 0.0) for d in problem.disks
    )
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


def run(args: Any) -> PartitionReport:
    """The `partition` command: see cli.py for the arguments."""
    if not getattr(args, "schema", None):
        raise InputError("--schema is required")
    output_format = getattr(args, "output_format", "allocator") or "allocator"
    if output_format not in OVERHEADS_BY_FORMAT:
        raise InputError(f"unknown format {output_format!r}")
    overheads = OVERHEADS_BY_FORMAT[output_format]
    leave_empty = bool(getattr(args, "leave_preferred_empty", False))
    problem = read_problem(args.schema, getattr(args, "hw_info", None))
    solved = solve_layout(
        problem,
        overheads,
        leave_preferred_empty=leave_empty,
        solver=getattr(args, "solver", "highs") or "highs",
        time_limit=getattr(args, "time_limit", None),
        gap=getattr(args, "gap", 0.0) or 0.0,
        threads=getattr(args, "threads", 1) or 1,
    )
    layout = solved.layout
    if output_format == "allocator":
        document: Any = allocator_document(problem, layout, overheads)
    elif output_format == "bareon":
        document = bareon_document(problem, layout, overheads)
    else:
        document = ironic_document(problem, layout, overheads)
    baseline = None
    if getattr(args, "baseline", None) == "lp-floor":
        baseline = lp_floor_baseline(problem, solved.check.unallocated_mib)
    svg_path = getattr(args, "svg", None)
    if svg_path:
        write_file(svg_path, layout_svg(problem, layout, overheads))
    names = [st.name for st in stages(leave_empty)]
    return PartitionReport(
        status=solved.status,
        objective={n: solved.check.stage_values[n] for n in names},
        bound=solved.bound,
        gap=solved.gap,
        build_s=solved.build_s,
        solve_s=solved.solve_s,
        solver=getattr(args, "solver", "highs") or "highs",
        output_format=output_format,
        layout=document,
        unallocated_mib=solved.check.unallocated_mib,
        unallocated_why=solved.check.unallocated_by_disk,
        notes=problem.notes,
        baseline=baseline,
        svg_path=svg_path,
        sizes_mib=layout.sizes_mib,
    )
