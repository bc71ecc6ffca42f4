"""hspace's question answered exactly: the most new instances of one spec (docs/space.md).

`standard(state, spec, options)` is the one call a program makes: it poses the problem
(`model.space.space_problem`, the exact N+1 gate of `--independent-groups` decided here), solves
the count model (formulations/space.py) and turns the counts into named instances:

* drbd: the pairs come from a flow on each group (`model.space.pair_matrix`); when the counts
  admit none, the flow's min cut becomes a row and the model is solved again;
* other templates with capacity checks: the final state's global N+1 is decided exactly
  (solvers/strategies/n1.py); a group that is not redundant before takes nothing (adding load
  never restores redundancy), and each failure the final state does not survive is added to the
  model as its exact re-placement (`add_failure`) before solving again. The model only ever
  gains rows that every valid answer meets, so its optimum stays a bound and the first answer
  that survives every failure is optimal.

Every answer is replayed by the independent checker (`model.check.check_space`) before it is
returned; the reason no further instance fits is read off the final state (`model.space.binding`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from dataclasses import replace as evolve
from typing import Any

from formulations import space as form
from model.check import check_space
from model.errors import CheckFailedError
from model.n1 import EvacuationPlan, Packing, Packings
from model.space import (
    Binding,
    SpaceAnswer,
    SpaceOptions,
    SpaceProblem,
    Spec,
    binding,
    binding_text,
    count_bound,
    final_state,
    greedy_counts,
    pair_matrix,
    placements_of,
    space_problem,
    with_node_status,
)
from model.state import ClusterState
from solvers import Status, Stopwatch, solve_lexicographic
from solvers.options import DEFAULT_OPTIONS, SolverOptions
from solvers.strategies.n1 import decide_packing
from solvers.strategies.space_n1 import (
    AFTER_SOLVE_PER_INPUT_N1,
    InputFailures,
    check_estimate,
    seconds_left,
    until,
)


@dataclass(frozen=True)
class SpaceResult:
    """One phase's answer with its proof: status, bound, gap, times, and why no more fit."""

    problem: SpaceProblem
    answer: SpaceAnswer
    final: ClusterState
    status: str
    bound: int | None
    gap: float | None
    build_s: float
    solve_s: float
    seconds: float
    solves: int = 1
    flow_cuts: int = 0
    failures_added: int = 0
    binding: tuple[Binding, ...] = ()
    n1_plans: Mapping[str, EvacuationPlan] = field(default_factory=dict)
    closed: Mapping[str, str] = field(default_factory=dict)  # group name -> why (global N+1)
    reason: str | None = None  # why nothing could be tried (hspace's FailN1 stop)
    ran_out: str | None = None  # the stage the time limit cut short, and what was proven

    @property
    def count(self) -> int:
        return self.answer.count

    @property
    def by_group(self) -> dict[str, int]:
        return self.answer.by_group(self.problem.state)

    def binding_text(self) -> str:
        if self.reason is not None:
            return self.reason
        if self.ran_out is not None:
            return self.ran_out
        return binding_text(self.binding)

    def to_json(self) -> dict[str, Any]:
        s = self.answer.spec
        return {
            "spec": {
                "memory_mib": s.memory_mib,
                "disk_mib": s.disk_mib,
                "vcpus": s.vcpus,
                "spindles": s.spindles,
                "disk_template": self.problem.options.disk_template,
            },
            "instances": self.count,
            "status": self.status,
            "bound": self.bound,
            "gap": self.gap,
            "build_s": round(self.build_s, 4),
            "solve_s": round(self.solve_s, 4),
            "seconds": round(self.seconds, 4),
            "by_group": self.by_group,
            "binding": self.binding_text(),
            "binding_nodes": {b.kind: list(b.nodes) for b in self.binding},
            "unallocatable": dict(self.problem.unallocatable) | dict(self.closed),
            "placements": [
                {"name": p.name, "primary": p.primary, "secondary": p.secondary}
                for p in self.answer.placements
            ],
        }


def group_redundancy(
    state: ClusterState,
    *,
    online_only: bool,
    offline_targets: bool = False,
    options: SolverOptions = DEFAULT_OPTIONS,
) -> dict[str, str]:
    """The groups that are not globally N+1 redundant, decided exactly, with the first node
    whose failure is not absorbed (`online_only`: offline nodes' failures are not asked, as
    htools with `--accept-existing-errors`). An undecided node counts as not absorbed."""
    out: dict[str, str] = {}
    packings = Packings(state, offline_targets=offline_targets)
    for g in state.cluster.groups:
        for n, st in state.nodes.items():
            if st.group_uuid != g.uuid or (online_only and st.offline):
                continue
            v = decide_packing(state, packings.of(n), options)
            if v.evacuable is not True:
                out[g.uuid] = f"node {n} cannot be evacuated: {v.reason}"
                break
    return out


def problem_of(
    state: ClusterState,
    spec: Spec,
    options: SpaceOptions,
    solver: SolverOptions = DEFAULT_OPTIONS,
) -> SpaceProblem:
    """The problem, the `--independent-groups` gate decided exactly."""
    non_redundant = None
    if options.independent_groups:
        ns = with_node_status(state, options.offline, options.max_cpu, options.min_disk)
        non_redundant = group_redundancy(
            ns,
            online_only=options.accept_existing_errors,
            offline_targets=options.offline_targets,
            options=solver,
        )
    return space_problem(state, spec, options, non_redundant)


def solve_problem(
    problem: SpaceProblem,
    solver: SolverOptions = DEFAULT_OPTIONS,
    *,
    decided: InputFailures | None = None,
) -> SpaceResult:
    """The largest count of new instances the problem admits, proven (or the bound and gap at
    the time limit), checked; instances are named new-`problem.first_index` onwards. The
    input's N+1 verdicts are read from `decided` where an earlier solve on the same state
    decided them."""
    first_index = problem.first_index
    start = time.perf_counter()
    deadline = solver.deadline()
    empty = SpaceAnswer(problem.spec, ())
    if problem.stopped or not problem.rooms:
        reason = "FailN1: a node fails N+1 already" if problem.stopped else problem.no_candidates
        return SpaceResult(
            problem, empty, problem.state, str(Status.OPTIMAL), 0, 0.0, 0.0, 0.0,
            time.perf_counter() - start, solves=0, reason=reason,
        )  # fmt: skip
    targets = problem.options.offline_targets
    closed: dict[str, str] = {}
    packings: list[Packing] = []
    # the input's failures share their group's bins (one Packings for the input state): the
    # gate below and the failures added to the model later
    inputs = (decided or InputFailures()).of(problem.state, targets)
    input_n1_s = 0.0  # the input's N+1 decisions: what the final state's will cost
    if problem.global_n1:
        asked = 0
        for g, nodes in problem.n1_scope.items():
            group_packings = []
            for n in nodes:
                if _late(deadline):
                    return _out_of_time(
                        problem, None, start, closed,
                        f"deciding the input's global N+1 ({asked} of "
                        f"{sum(map(len, problem.n1_scope.values()))} node failures decided)",
                    )  # fmt: skip
                asked += 1
                # not replayed: a wrong plan here would leave the group open, and the final
                # state's plans, which check_space replays, would then fail (load only adds)
                pk, v, seconds = inputs.decide(n, until(solver, deadline))
                input_n1_s += seconds
                if v.evacuable is not True:
                    closed[problem.group_name(g)] = f"node {n} cannot be evacuated: {v.reason}"
                    break
                group_packings.append(pk)
            else:
                packings += group_packings
    closed_uuids = [g for g in problem.groups if problem.group_name(g) in closed]
    counted = _counted(problem, first_index) if problem.drbd else None
    if counted is not None and counted[0].count >= counted[1]:  # the rows' bound is met
        return _finish(
            problem, counted[0], {}, str(Status.OPTIMAL), counted[1], 0.0,
            0.0, 0.0, start, 0, 0, 0, closed,
        )  # fmt: skip
    if _late(deadline):
        return _out_of_time(problem, counted, start, closed, "before the model's build")
    with Stopwatch() as sw:
        m = form.build(problem, packings, closed_uuids)
    build_s, solve_s = sw.seconds, 0.0
    if _late(deadline):  # handing the solver no time still costs its set-up (8 s, 1,000 nodes)
        return _out_of_time(
            problem, counted, start, closed, f"after the model's build ({build_s:.2f} s)"
        )
    solves = cuts = added = 0
    order = list(problem.state.nodes)
    quick = _quick_drbd(problem, m, solver, deadline, counted) if counted is not None else None
    if quick is not None:
        answer, lp_bound, lp_s = quick
        solve_s += lp_s
        if answer.count >= lp_bound:  # the relaxation's bound is met: optimal, no MIP
            return _finish(
                problem, answer, {}, str(Status.OPTIMAL), lp_bound, 0.0,
                build_s, solve_s, start, 1, 0, 0, closed,
            )  # fmt: skip
    failures_in: set[str] = set()
    best = quick[:2] if quick is not None else counted
    while True:
        if solves and _late(deadline):  # a cut or failure added since: its answer is not one
            return _out_of_time(
                problem, best, start, closed, f"after {solves} solves", build_s, solve_s, solves
            )
        # the final state's N+1 decisions and the check's replay come after the solve
        after_s = AFTER_SOLVE_PER_INPUT_N1 * input_n1_s if problem.global_n1 else 0.0
        lex = solve_lexicographic(
            m,
            form.objectives(m, problem),
            **solver.within(seconds_left(deadline, after_s)).kwargs(),
            build_s=0.0,
        )
        solves += 1
        solve_s += lex.solve_s
        if not lex.has_solution:
            ran_out = "the time limit ran out in the solve" if _late(deadline) else None
            return SpaceResult(
                problem, empty, problem.state, str(lex.status), _bound(lex), None,
                build_s, solve_s, time.perf_counter() - start, solves, cuts, added,
                closed=closed, ran_out=ran_out,
            )  # fmt: skip
        x, z, _ = form.solution(m, problem)
        pairs = None
        if problem.drbd:
            pairs, cut_groups = _pairs(problem, x, z)
            if cut_groups:
                with sw:
                    for g, side in cut_groups:
                        form.add_flow_cut(m, problem, side, g)
                build_s = sw.seconds
                cuts += len(cut_groups)
                continue
        answer = SpaceAnswer(problem.spec, placements_of(x, pairs, order, first_index))
        plans: dict[str, EvacuationPlan] = {}
        if problem.global_n1:
            with Stopwatch() as placed:
                final = final_state(problem, answer)
            if isinstance(final, str):
                raise CheckFailedError(f"space: the model's answer fails htools' adds: {final}")
            check_s = check_estimate(problem, final, answer, placed.seconds)
            decide_by = None if deadline is None else deadline - check_s
            failing = _failures(problem, final, answer, plans, solver, decide_by)
            if failing is None:  # undecided: the answer is not proven, the best so far is
                return _out_of_time(
                    problem, best, start, closed,
                    f"deciding the final state's global N+1 (about {check_s:.2f} s kept for "
                    "the check's replay)",
                    build_s, solve_s, solves,
                )  # fmt: skip
            new = [f for f in failing if f not in failures_in]
            if new:
                with sw:
                    for f in new:
                        form.add_failure(m, problem, inputs.packings.of(f))
                build_s = sw.seconds
                failures_in.update(new)
                added += len(new)
                continue
            if failing:
                raise CheckFailedError(
                    f"space: node {failing[0]} fails although its failure is in the model"
                )
        break
    status, bound, gap = str(lex.status), _bound(lex), lex.gap[0]
    if quick is not None and quick[0].count > answer.count:  # stopped short of the quick count
        answer, bound = quick[0], min(v for v in (bound, quick[1]) if v is not None)
        gap = (bound - answer.count) / max(answer.count, 1)
    return _finish(
        problem, answer, plans, status, bound, gap,
        build_s, solve_s, start, solves, cuts, added, closed,
    )  # fmt: skip


def _late(deadline: float | None) -> bool:
    return deadline is not None and time.perf_counter() >= deadline


def _out_of_time(
    problem: SpaceProblem,
    best: tuple[SpaceAnswer, int] | None,
    start: float,
    closed: dict[str, str],
    stage: str,
    build_s: float = 0.0,
    solve_s: float = 0.0,
    solves: int = 0,
) -> SpaceResult:
    """The time limit passed at `stage`: the best answer proven so far (the quick drbd count,
    or no instance at all), checked like every answer, with status "time_limit", the nodes'
    own bound (`count_bound`) and the stage said in the reason, so that the answer comes back
    within the limit instead of after the rest of the work (issue 40, item 4)."""
    answer, bound = best if best is not None else (SpaceAnswer(problem.spec, ()), None)
    bound = count_bound(problem) if bound is None else bound
    gap = (bound - answer.count) / max(answer.count, 1)
    result = _finish(
        problem, answer, {}, str(Status.TIME_LIMIT), bound, gap,
        build_s, solve_s, start, solves, 0, 0, closed,
    )  # fmt: skip
    why = f"the time limit ran out {stage}: {answer.count} instances proven, bound {bound}"
    return evolve(result, ran_out=why)


def _finish(
    problem: SpaceProblem,
    answer: SpaceAnswer,
    plans: dict[str, EvacuationPlan],
    status: str,
    bound: int | None,
    gap: float | None,
    build_s: float,
    solve_s: float,
    start: float,
    solves: int,
    cuts: int,
    added: int,
    closed: dict[str, str],
) -> SpaceResult:
    """The checked result: the independent checker replays the answer (it must pass), its
    final state says why no more fit."""
    report = check_space(problem, answer, plans)
    report.raise_if_failed()
    final = report.objectives["final_state"]
    limited = problem.options.limit is not None and answer.count >= problem.options.limit
    return SpaceResult(
        problem, answer, final, status, bound, gap, build_s, solve_s,
        time.perf_counter() - start, solves, cuts, added,
        binding(problem, final, limited=limited), plans, closed,
    )  # fmt: skip


def _counted(problem: SpaceProblem, first: int) -> tuple[SpaceAnswer, int]:
    """drbd without a model: the quick count per node (`model.space.greedy_counts`, `-l`
    applied) with its pairs from a flow (no instances when the flow fails), and the bound of
    the nodes' own rows (`model.space.count_bound`). Where the count meets that bound it is
    optimal with no model built: the tiered ladder's later rungs, where one more instance
    fits on a node or two, are decided so."""
    bound = count_bound(problem)
    x, z = greedy_counts(problem)
    if problem.options.limit is not None:
        x, z = _capped(x, z, problem.options.limit)
    pairs, failed = _pairs(problem, x, z)
    if failed:
        return SpaceAnswer(problem.spec, ()), bound
    order = list(problem.state.nodes)
    return SpaceAnswer(problem.spec, placements_of(x, pairs, order, first)), bound


def _quick_drbd(
    problem: SpaceProblem,
    m: Any,
    solver: SolverOptions,
    deadline: float | None,
    counted: tuple[SpaceAnswer, int],
) -> tuple[SpaceAnswer, int, float] | None:
    """drbd: the model's linear relaxation bounds the count; the quick count (`_counted`)
    often meets it, and is then proven optimal without branching (on 1,000 nodes HiGHS
    takes tens of seconds to find an integer solution of a model whose root bound is already
    the optimum). None when the relaxation has no solution."""
    with relaxed(m):
        lex = solve_lexicographic(
            m, form.objectives(m, problem), **solver.within(seconds_left(deadline)).kwargs()
        )
    if not lex.has_solution or lex.status is not Status.OPTIMAL:
        return None
    bound = min(int(lex.objective[0] + 1e-6), counted[1])
    if problem.options.limit is not None:
        bound = min(bound, problem.options.limit)
    return counted[0], bound, lex.solve_s


def _capped(
    x: dict[str, int], z: dict[str, int], limit: int
) -> tuple[dict[str, int], dict[str, int]]:
    """At most `limit` primaries (the first nodes' counts kept) and as many secondaries."""
    out_x: dict[str, int] = {}
    left = limit
    for n, k in x.items():
        if left <= 0:
            break
        out_x[n] = min(k, left)
        left -= out_x[n]
    extra = sum(z.values()) - sum(out_x.values())
    out_z = dict(z)
    for n in reversed(list(out_z)):
        if extra <= 0:
            break
        cut = min(extra, out_z[n])
        out_z[n] -= cut
        extra -= cut
    return out_x, {n: k for n, k in out_z.items() if k}


@contextmanager
def relaxed(m: Any) -> Iterator[None]:
    """The model's integer variables made continuous (binaries within [0, 1]) for the span."""
    import pyomo.core as pyo

    saved = []
    for v in m.component_data_objects(pyo.Var, descend_into=True):
        if v.is_integer() or v.is_binary():
            saved.append((v, v.domain))
            v.domain = pyo.UnitInterval if v.is_binary() else pyo.NonNegativeReals
    try:
        yield
    finally:
        for v, domain in saved:
            v.domain = domain


def _bound(lex: Any) -> int | None:
    b = lex.bound[0] if lex.bound else None
    return None if b is None else int(b + 1e-6)


def _pairs(
    problem: SpaceProblem, x: Mapping[str, int], z: Mapping[str, int]
) -> tuple[dict[tuple[str, str], int], list[tuple[str, set]]]:
    """Every group's pair matrix, or the groups whose flow fails with their cut's side."""
    generic, special = form.pair_caps(problem, x, z)
    pairs: dict[tuple[str, str], int] = {}
    failed = []
    for g in problem.groups:
        members = [room.name for room in problem.group_nodes(g)]
        if not any(x.get(n) for n in members):
            continue
        flow = pair_matrix(members, x, z, generic, special)
        if flow.pairs is None:
            failed.append((g, set(flow.source_side)))
        else:
            pairs.update(flow.pairs)
    return pairs, failed


def _failures(
    problem: SpaceProblem,
    final: ClusterState,
    answer: SpaceAnswer,
    plans: dict[str, EvacuationPlan],
    solver: SolverOptions,
    deadline: float | None = None,
) -> list[str] | None:
    """The nodes of groups that received instances whose failure the final state does not
    absorb (exact, docs/n1.md); the plans of the others go into `plans`. None when the
    deadline passes before every failure is decided."""
    touched = {final.nodes[p.primary].group_uuid for p in answer.placements}
    failing = []
    packings = Packings(final, offline_targets=problem.options.offline_targets)
    for g in problem.groups:
        if g not in touched:
            continue
        for n in problem.n1_scope.get(g, ()):
            if _late(deadline):
                return None
            # not replayed: check_space replays every plan of the answer
            v = decide_packing(final, packings.of(n), until(solver, deadline), replayed=False)
            if v.evacuable is True and v.plan is not None:
                plans[n] = v.plan
            else:
                failing.append(n)
    return failing


def standard(
    state: ClusterState,
    spec: Spec,
    options: SpaceOptions,
    solver: SolverOptions = DEFAULT_OPTIONS,
    *,
    decided: InputFailures | None = None,
) -> SpaceResult:
    """hspace's standard allocation, exactly: the program's one call for it."""
    return solve_problem(problem_of(state, spec, options, solver), solver, decided=decided)
