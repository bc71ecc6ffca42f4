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
from typing import Any

from formulations import space as form
from model.check import check_space
from model.errors import CheckFailedError
from model.n1 import EvacuationPlan, Packing, packing_of
from model.space import (
    Binding,
    SpaceAnswer,
    SpaceOptions,
    SpaceProblem,
    Spec,
    binding,
    binding_text,
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
from solvers.strategies.n1 import decide, decide_packing


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

    @property
    def count(self) -> int:
        return self.answer.count

    @property
    def by_group(self) -> dict[str, int]:
        return self.answer.by_group(self.problem.state)

    def binding_text(self) -> str:
        if self.reason is not None:
            return self.reason
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
    for g in state.cluster.groups:
        for n, st in state.nodes.items():
            if st.group_uuid != g.uuid or (online_only and st.offline):
                continue
            v = decide(state, n, offline_targets=offline_targets, options=options)
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


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(deadline - time.perf_counter(), 0.01)


def solve_problem(problem: SpaceProblem, solver: SolverOptions = DEFAULT_OPTIONS) -> SpaceResult:
    """The largest count of new instances the problem admits, proven (or the bound and gap at
    the time limit), checked."""
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
    if problem.global_n1:
        for g, nodes in problem.n1_scope.items():
            group_packings = []
            for n in nodes:
                pk = packing_of(problem.state, n, offline_targets=targets)
                v = decide_packing(problem.state, pk, solver)
                if v.evacuable is not True:
                    closed[problem.group_name(g)] = f"node {n} cannot be evacuated: {v.reason}"
                    break
                group_packings.append(pk)
            else:
                packings += group_packings
    closed_uuids = [g for g in problem.groups if problem.group_name(g) in closed]
    with Stopwatch() as sw:
        m = form.build(problem, packings, closed_uuids)
    build_s, solve_s = sw.seconds, 0.0
    solves = cuts = added = 0
    order = list(problem.state.nodes)
    quick = _quick_drbd(problem, m, solver, deadline) if problem.drbd else None
    if quick is not None:
        answer, lp_bound, lp_s = quick
        solve_s += lp_s
        if answer.count >= lp_bound:  # the relaxation's bound is met: optimal, no MIP
            return _finish(
                problem, answer, {}, str(Status.OPTIMAL), lp_bound, 0.0,
                build_s, solve_s, start, 1, 0, 0, closed,
            )  # fmt: skip
    failures_in: set[str] = set()
    while True:
        lex = solve_lexicographic(
            m,
            form.objectives(m, problem),
            **solver.within(_left(deadline)).kwargs(),
            build_s=0.0,
        )
        solves += 1
        solve_s += lex.solve_s
        if not lex.has_solution:
            return SpaceResult(
                problem, empty, problem.state, str(lex.status), _bound(lex), None,
                build_s, solve_s, time.perf_counter() - start, solves, cuts, added,
                closed=closed,
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
        answer = SpaceAnswer(problem.spec, placements_of(x, pairs, order))
        plans: dict[str, EvacuationPlan] = {}
        if problem.global_n1:
            final = final_state(problem, answer)
            if isinstance(final, str):
                raise CheckFailedError(f"space: the model's answer fails htools' adds: {final}")
            failing = _failures(problem, final, answer, plans, solver)
            new = [f for f in failing if f not in failures_in]
            if new:
                with sw:
                    for f in new:
                        pk = packing_of(problem.state, f, offline_targets=targets)
                        form.add_failure(m, problem, pk)
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


def _quick_drbd(
    problem: SpaceProblem, m: Any, solver: SolverOptions, deadline: float | None
) -> tuple[SpaceAnswer, int, float] | None:
    """drbd: the model's linear relaxation bounds the count; a quick count per node
    (`model.space.greedy_counts`) whose pairs a flow finds often meets it, and is then proven
    optimal without branching (on 1,000 nodes HiGHS takes tens of seconds to find an integer
    solution of a model whose root bound is already the optimum). None when the relaxation
    has no solution."""
    with relaxed(m):
        lex = solve_lexicographic(
            m, form.objectives(m, problem), **solver.within(_left(deadline)).kwargs()
        )
    if not lex.has_solution or lex.status is not Status.OPTIMAL:
        return None
    bound = int(lex.objective[0] + 1e-6)
    if problem.options.limit is not None:
        bound = min(bound, problem.options.limit)
    x, z = greedy_counts(problem)
    if problem.options.limit is not None:
        x, z = _capped(x, z, problem.options.limit)
    pairs, failed = _pairs(problem, x, z)
    if failed:
        return SpaceAnswer(problem.spec, ()), bound, lex.solve_s
    order = list(problem.state.nodes)
    return SpaceAnswer(problem.spec, placements_of(x, pairs, order)), bound, lex.solve_s


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
) -> list[str]:
    """The nodes of groups that received instances whose failure the final state does not
    absorb (exact, docs/n1.md); the plans of the others go into `plans`."""
    touched = {final.nodes[p.primary].group_uuid for p in answer.placements}
    failing = []
    for g in problem.groups:
        if g not in touched:
            continue
        for n in problem.n1_scope.get(g, ()):
            v = decide(final, n, offline_targets=problem.options.offline_targets, options=solver)
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
) -> SpaceResult:
    """hspace's standard allocation, exactly: the program's one call for it."""
    return solve_problem(problem_of(state, spec, options, solver), solver)
