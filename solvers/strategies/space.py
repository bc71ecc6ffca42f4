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
from collections import Counter
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
    non_redundant_of,
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


def _left(deadline: float | None, reserve_s: float = 0.0) -> float | None:
    return None if deadline is None else max(deadline - reserve_s - time.perf_counter(), 0.01)


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
            **solver.within(_left(deadline, after_s)).kwargs(),
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
            m, form.objectives(m, problem), **solver.within(_left(deadline)).kwargs()
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


# --- tiered allocation ---------------------------------------------------------------------

#: hspace's shrink units (`Instance.shrinkByType`): memory 64 MiB, disk 256 MiB, one vCPU.
SHRINK = {"memory_mib": 64, "disk_mib": 256, "vcpus": 1, "spindles": 1}
#: Which spec field a binding check shrinks (the others, e.g. the policy, shrink memory).
SHRINKS = {
    "memory": "memory_mib",
    "n1": "memory_mib",
    "global_n1": "memory_mib",
    "secondary": "memory_mib",
    "disk": "disk_mib",
    "disk_reserve": "disk_mib",
    "vcpu": "vcpus",
    "spindles": "spindles",
    "spindle_ratio": "spindles",
}


#: The rungs of a tiered ladder at most: the whole ladder of a 200-node group (96 rungs, until
#: no smaller spec fits) takes about 11 s; the cap only bounds a pathological one.
MAX_TIERS = 1000


@dataclass(frozen=True)
class TieredResult:
    """Tiered allocation: each tier's spec and its proven-largest count on top of the tiers
    before it (a ladder of standard allocations, docs/space.md "Tiered")."""

    stages: tuple[SpaceResult, ...]
    seconds: float
    # why the ladder ended early: "time limit", "-l", "tiers" (max_tiers); None when no
    # smaller spec fits any more
    stopped: str | None = None

    @property
    def count(self) -> int:
        return sum(s.count for s in self.stages)

    @property
    def final(self) -> ClusterState | None:
        return self.stages[-1].final if self.stages else None

    def spec_counts(self) -> list[tuple[Spec, int]]:
        """hspace's `tieredSpecMap`: consecutive equal specs merged."""
        out: list[tuple[Spec, int]] = []
        for s in self.stages:
            if not s.count:
                continue
            if out and out[-1][0] == s.answer.spec:
                out[-1] = (s.answer.spec, out[-1][1] + s.count)
            else:
                out.append((s.answer.spec, s.count))
        return out

    def handed_out(self) -> dict[str, int]:
        """Memory, disk and vCPUs of all tiered instances."""
        totals = {"memory_mib": 0, "disk_mib": 0, "vcpus": 0}
        for spec, k in self.spec_counts():
            for f in totals:
                totals[f] += getattr(spec, f) * k
        return totals

    def to_json(self) -> dict[str, Any]:
        return {
            "instances": self.count,
            "specs": [
                {"memory_mib": s.memory_mib, "disk_mib": s.disk_mib, "vcpus": s.vcpus,
                 "spindles": s.spindles, "count": k}
                for s, k in self.spec_counts()
            ],
            "handed_out": self.handed_out(),
            "status": "optimal" if all(s.status == "optimal" for s in self.stages) else "feasible",
            "seconds": round(self.seconds, 4),
            "stopped": self.stopped,
            "stages": [s.to_json() | {"placements": None} for s in self.stages],
        }  # fmt: skip


def _probe(problem: SpaceProblem) -> tuple[bool, list[str]]:
    """One pass of htools' node checks over the candidates (the first failing check of each,
    a drbd primary's secondaries in group order): whether one more instance of the problem's
    spec passes them somewhere (global N+1 aside: the stage's solve decides that), and the
    spec fields by how many candidates fail first on a check they feed (a drbd primary that
    passes: its first failing secondary's check), most first; on a tie, the later in
    hspace's order."""
    from model.resources import first_primary_shortfall, first_secondary_shortfall

    d, nodes = problem.demand, problem.state.nodes
    by_group: dict[str, list[str]] = {}
    for room in problem.rooms:
        by_group.setdefault(room.group, []).append(room.name)
    counts: Counter[str] = Counter()
    fits = False
    for room in problem.rooms:
        if not room.primary_ok:
            continue
        first = first_primary_shortfall(nodes[room.name], d)
        if first is None and problem.drbd:
            backed = False
            for peer in by_group[room.group]:
                if peer == room.name:
                    continue
                failed = first_secondary_shortfall(nodes[peer], d, room.name)
                if failed is None:
                    backed = True
                elif first is None:
                    first = failed
                if backed and first is not None:
                    break
            fits = fits or backed
        elif first is None:
            fits = True
        if first is not None and (f := SHRINKS.get(first.kind)):
            counts[f] += 1
    # hspace's order of failure modes (Mem, Disk, CPU, ..., Spindles); on a tie the later
    # one is shrunk, as `Cluster.tieredAlloc` sorts the counts stably and takes the last
    order = ("memory_mib", "disk_mib", "vcpus", "spindles")
    ranked = sorted(counts, key=lambda f: (counts[f], order.index(f)), reverse=True)
    return fits and not problem.stopped, ranked + [f for f in order if f not in ranked]


def _shrunk(spec: Spec, field_name: str, units: int) -> Spec | None:
    """The spec with one field `units` shrink units smaller; None below hspace's floors."""
    value = getattr(spec, field_name) - units * SHRINK[field_name]
    if value < SHRINK[field_name]:
        return None
    return evolve(spec, **{field_name: value})


def tiered(
    state: ClusterState,
    specs: tuple[Spec, ...],
    options: SpaceOptions,
    solver: SolverOptions = DEFAULT_OPTIONS,
    *,
    max_tiers: int = MAX_TIERS,
    decided: InputFailures | None = None,
) -> TieredResult:
    """hspace's tiered allocation as a ladder of exact standard allocations: for each tier
    spec in order, the largest count of it on top of what earlier tiers placed (proven); then
    the spec shrunk, in hspace's units, along the check that stopped most nodes (the largest
    shrink found by bisection after which one more instance passes htools' node checks), and
    so on; a field that cannot shrink further hands over to the next (memory, disk, vCPUs);
    `-l` caps the total; the solver's time limit (and `max_tiers`) ends the ladder early,
    said in `stopped`. Each stage is checked like a standard answer."""
    start = time.perf_counter()
    deadline = solver.deadline()
    decided = InputFailures() if decided is None else decided
    first = problem_of(state, specs[0], options, solver)
    stages: list[SpaceResult] = []
    current = state
    placed = 0

    def stage_problem(spec: Spec) -> SpaceProblem:
        left = None if options.limit is None else options.limit - placed
        opts = options if left is None else _with_limit(options, left)
        return space_problem(current, spec, opts, non_redundant_of(first), placed)

    stopped = None
    for tier in specs:
        spec: Spec | None = tier
        while spec is not None and stopped is None:
            if options.limit is not None and placed >= options.limit:
                stopped = "-l"
            elif deadline is not None and time.perf_counter() > deadline:
                stopped = "time limit"
            elif len(stages) >= max_tiers:
                stopped = "tiers"
            if stopped is not None:
                break
            problem = stage_problem(spec)
            result = solve_problem(problem, solver.within(_left(deadline)), decided=decided)
            stages.append(result)
            placed += result.count
            if result.count:
                current = _without_status(result.final, state)
            spec = _next_spec(spec, result, stage_problem, solver, deadline, decided=decided)
            if spec is None and deadline is not None and time.perf_counter() > deadline:
                stopped = "time limit"  # the walk to the next tier ran out of time
    return TieredResult(tuple(stages), time.perf_counter() - start, stopped)


def _next_spec(
    spec: Spec,
    result: SpaceResult,
    pose: Any,
    solver: SolverOptions,
    deadline: float | None = None,
    *,
    decided: InputFailures | None = None,
) -> Spec | None:
    """The next tier: the spec shrunk one of hspace's units at a time (`Instance.shrinkByType`:
    memory 64 MiB, disk 256 MiB, one vCPU, one spindle) until one more instance fits: first
    along the check most candidates fail first at each step, then, as hspace's big step, along
    one field alone at a time; None when the policy or hspace's floors stop every walk."""
    base = pose(spec)
    for only in (None, "memory_mib", "disk_mib", "vcpus", "spindles"):
        walk = _walk(spec, base, pose, solver, only, deadline=deadline, decided=decided)
        if walk is not None:
            return walk
    return None


def _light(base: SpaceProblem, spec: Spec) -> SpaceProblem:
    """The stage's problem for another spec, as far as the node-check probes read it: the
    demand and which candidates the policy admits as primaries (rows are not recomputed)."""
    from model.policy import policy_shortfall
    from model.space import demand_of_spec

    opts = base.options
    d = demand_of_spec(spec, opts.disk_template, opts.spindle_use)
    state = base.state
    sizes = Counter(r.group for r in base.rooms)
    verdicts: dict[tuple[str, bool], bool] = {}  # the policy is the group's (and storage's)

    def admits(r: Any) -> bool:
        excl = state.nodes[r.name].exclusive_storage
        key = (r.group, excl)
        if key not in verdicts:
            verdicts[key] = policy_shortfall(d, state.ipolicy_of(r.name), excl) is None
        return verdicts[key] and (not base.drbd or sizes[r.group] > 1)

    rooms = []
    for r in base.rooms:
        ok = admits(r)
        rooms.append(r if r.primary_ok == ok else evolve(r, primary_ok=ok))
    return evolve(base, spec=spec, demand=d, rooms=tuple(rooms))


def _walk(
    spec: Spec,
    base: SpaceProblem,
    pose: Any,
    solver: SolverOptions,
    only: str | None,
    steps: int = 4096,
    deadline: float | None = None,
    *,
    decided: InputFailures | None = None,
) -> Spec | None:
    """Shrink one unit at a time (along `only`, or the check most candidates fail first) until
    one more instance fits. Where the node checks pass and global N+1 refuses, memory and
    local disk (what re-placing a failed node's instances needs) shrink in proportion to
    their room above the policy's minimum."""
    current = spec
    problem = base
    fits, blocking = _probe(problem)
    over: dict[str, int] = {}  # above the policy's max: the nearest max below, per field
    if not any(r.primary_ok for r in problem.rooms):
        over = _over_limits(problem)  # the tier spec above the policy's max: shrink into it
        blocking = [f for f in POLICY_FIELDS if f in over]
    for _ in range(steps):
        if deadline is not None and time.perf_counter() > deadline:
            return None  # the time limit holds for the walk too: 4,096 steps with an N+1
            # solve each took 9 min on Ganeti's hbal-evac.data (issue 40, item 4)
        shrunk = None
        for field_name in [only] if only is not None else blocking:
            shrunk = _shrunk(current, field_name, _units_into(current, field_name, over))
            if shrunk is not None:
                break
        if shrunk is None:
            return None
        current = shrunk
        problem = _light(base, current)
        if not any(r.primary_ok for r in problem.rooms):
            over = _over_limits(problem)
            blocking = [f for f in POLICY_FIELDS if f in over]
            if not blocking:  # below every policy's min (or its templates): smaller is no use
                return None
            continue  # above a max: hspace's tryAlloc fails on the policy and shrinks that field
        over = {}
        fits, blocking = _probe(problem)
        if fits:
            if not base.global_n1 or _n1_admits_one(pose(current), solver, deadline, decided):
                return current
            # from here each step is fixed (`only`, or memory and disk in proportion): search
            if only is not None:
                return _first_admitted(
                    spec, current, base, pose, solver, only, steps, deadline, decided=decided
                )
            return _largest_admitted(
                spec, current, base, pose, solver, steps, deadline, decided=decided
            )
    return None


#: The spec's fields in hspace's order, as `_over_limits` reads them against a policy's max.
POLICY_FIELDS = ("memory_mib", "disk_mib", "vcpus", "spindles")


def _units_into(spec: Spec, field_name: str, over: Mapping[str, int]) -> int:
    """How many shrink units hspace's one-unit walk takes along `field_name` before the
    field reaches `over[field_name]`, the nearest policy max below it (1 when the field is
    not above a max): every spec on the way is above that max in the same pairs, refused
    by the policy alike, so the walk can take them at once. One unit at a time, a
    `--tiered-alloc` of 1 TiB memory over a 128 GiB max needed 14,336 units, more than the
    walk's 4,096 steps, and the ladder ended with 0 instances where hspace hands out 4 on
    Ganeti's hspace-tiered.data (tests/test_exact_edges.py)."""
    if field_name not in over or field_name == "spindles":  # spindle use is not the spec's
        return 1
    unit = SHRINK[field_name]
    return max(1, -(-(getattr(spec, field_name) - over[field_name]) // unit))


def _over_limits(problem: SpaceProblem) -> dict[str, int]:
    """The fields in which the problem's spec is above the max of a min/max pair whose min it
    meets, in some candidate's policy that allows its template, each with the nearest such
    max below its value: shrinking those can bring it into the policy (a tier spec above the
    max: `--tiered-alloc` larger than the policy, which hspace shrinks into it); empty when
    no policy admits a smaller instance either."""
    from model.policy import spec_shortfall

    d, state = problem.demand, problem.state
    fields = POLICY_FIELDS
    over: dict[str, int] = {}
    seen: set[tuple[str, bool]] = set()
    for r in problem.rooms:
        excl = state.nodes[r.name].exclusive_storage
        if (r.group, excl) in seen:
            continue
        seen.add((r.group, excl))
        ipolicy = state.ipolicy_of(r.name)
        if d.disk_template not in ipolicy.disk_templates:
            continue
        for mm in ipolicy.minmax:
            if spec_shortfall(d, mm.min, above=True, exclusive_storage=excl) is not None:
                continue
            limits = (mm.max.memory_size, mm.max.disk_size, mm.max.cpu_count, mm.max.spindle_use)
            values = (d.memory_mib, max(d.disk_sizes_mib, default=0), d.vcpus, d.spindle_use)
            if excl:
                values = (*values[:3], d.disk_spindles or 0)
            for f, v, m in zip(fields, values, limits, strict=True):
                if v > m:
                    over[f] = max(over.get(f, m), m)
    return over


def _largest_admitted(
    tier: Spec,
    refused: Spec,
    base: SpaceProblem,
    pose: Any,
    solver: SolverOptions,
    steps: int,
    deadline: float | None,
    *,
    decided: InputFailures | None = None,
) -> Spec | None:
    """Where global N+1 refuses a spec the node checks pass: the first admitted spec of the
    walks from it in proportion, along memory alone and along disk alone, the one handing out
    the most (memory, then disk, vCPUs, spindles). The proportional walk alone can shrink
    memory that a disk-only walk keeps: on `--simulate p,2,1T,64g,16 --simulate a,3,2T,32g,8
    --disk-template plain` it gave 29,696 MiB where hspace's tier (and the disk walk) keeps
    32,704 at the same disk."""
    found = [
        _first_admitted(tier, refused, base, pose, solver, only, steps, deadline, decided=decided)
        for only in (None, "memory_mib", "disk_mib")
    ]
    admitted = [f for f in found if f is not None]
    if not admitted:
        return None
    return max(admitted, key=lambda f: (f.memory_mib, f.disk_mib, f.vcpus, f.spindles))


def _first_admitted(
    tier: Spec,
    refused: Spec,
    base: SpaceProblem,
    pose: Any,
    solver: SolverOptions,
    only: str | None,
    steps: int,
    deadline: float | None,
    *,
    decided: InputFailures | None = None,
) -> Spec | None:
    """The first spec of the walk below `refused` (one unit of `only` a step, or memory and
    disk in proportion to their room, `_in_proportion`) at which the node checks pass and
    global N+1 admits one instance, found by galloping then bisection instead of one exact
    solve per unit: a smaller instance passes every check a larger one passes (capacity rows
    and the re-placement of a failed node's instances only get easier), so the admitted specs
    are a tail of the walk. The walk ends where no field can shrink or the policy admits no
    candidate, as the unit walk does. One solve a unit took 8 minutes on a 7-node plain
    cluster (tiered from the policy's largest spec, hundreds of refused units a tier)."""
    walk = [refused]
    while len(walk) <= steps:
        # each step's light problem is seconds of Python on 1,000 nodes: 10 s past a 30 s
        # limit's tiered share on bench_space's cluster (benchmarks/time_limits.py, issue 40)
        if deadline is not None and time.perf_counter() > deadline:
            return None
        nxt = None
        fields = [only] if only is not None else _in_proportion(tier, walk[-1], base)
        for field_name in fields:
            nxt = _shrunk(walk[-1], field_name, 1)
            if nxt is not None:
                break
        if nxt is None or not any(r.primary_ok for r in _light(base, nxt).rooms):
            break
        walk.append(nxt)
    verdicts: dict[int, bool] = {0: False}

    def admitted(i: int) -> bool:
        if i not in verdicts:
            verdicts[i] = _probe(_light(base, walk[i]))[0] and _n1_admits_one(
                pose(walk[i]), solver, deadline, decided
            )
        return verdicts[i]

    def late() -> bool:
        return deadline is not None and time.perf_counter() > deadline

    lo, hi, jump = 0, None, 1  # walk[lo] refused; walk[hi] admitted
    while hi is None:
        if late() or lo == len(walk) - 1:
            return None
        i = min(lo + jump, len(walk) - 1)
        if admitted(i):
            hi = i
        else:
            lo, jump = i, 2 * jump
    while hi - lo > 1:
        if late():
            return walk[hi]  # admitted, perhaps not the largest: the deadline is near
        mid = (lo + hi) // 2
        if admitted(mid):
            hi = mid
        else:
            lo = mid
    return walk[hi]


def _in_proportion(tier: Spec, current: Spec, problem: SpaceProblem) -> list[str]:
    """Memory and disk, the one with the larger share of its room (tier spec down to the
    policy's minimum, of the min/max pair holding the tier spec) still left first."""
    ipolicy = problem.state.ipolicy_of(problem.rooms[0].name) if problem.rooms else None
    low = {"memory_mib": SHRINK["memory_mib"], "disk_mib": SHRINK["disk_mib"]}
    if ipolicy is not None:
        for mm in ipolicy.minmax:
            if mm.min.memory_size <= tier.memory_mib <= mm.max.memory_size:
                low = {"memory_mib": mm.min.memory_size, "disk_mib": mm.min.disk_size}
                break

    def share(f: str) -> float:
        room = getattr(tier, f) - low[f]
        return (getattr(current, f) - low[f]) / room if room > 0 else -1.0

    return sorted(low, key=share, reverse=True)


def _n1_admits_one(
    problem: SpaceProblem,
    solver: SolverOptions,
    deadline: float | None = None,
    decided: InputFailures | None = None,
) -> bool:
    """Under global N+1, whether one instance is placeable at all (an exact solve capped at
    one, within what is left until the ladder's `deadline`: with the ladder's whole limit, a
    probe begun near the end ran a whole limit past it); always true where the node checks
    are all there is."""
    if not problem.global_n1:
        return True
    one = evolve(problem, options=evolve(problem.options, limit=1))
    return solve_problem(one, solver.within(_left(deadline)), decided=decided).count >= 1


def _with_limit(options: SpaceOptions, left: int) -> SpaceOptions:
    return evolve(options, limit=max(left, 0))


def _without_status(final: ClusterState, loaded: ClusterState) -> ClusterState:
    """A stage's final state as the next stage's input: node status (-O, --max-cpu,
    --min-disk) is applied again by `space_problem`, so the loaded values come back; the
    load-time N+1 flags stay as loaded (hspace judges bad nodes once)."""
    nodes = {}
    for n, st in final.nodes.items():
        was = loaded.nodes[n]
        status = (was.offline, was.vcpu_ratio, was.lo_disk_mib)
        if (st.offline, st.vcpu_ratio, st.lo_disk_mib) != status:  # only the nodes it changes
            nodes[n] = evolve(st, offline=status[0], vcpu_ratio=status[1], lo_disk_mib=status[2])
    return final.with_nodes(nodes)
