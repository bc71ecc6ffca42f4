"""Relocating instances across node groups, proven: master model, exact N+1 check, cuts
(docs/groups.md, "The exact method").

1. The master (formulations/relocation.py) counts movers per shape, origin and target node
   under every strict row of the receiving nodes and *necessary* N+1 rows. It is a relaxation:
   its optimum bounds the true one.
2. A master solution is turned into relocations; drbd arrivals get their (primary, secondary)
   pairs from a small pairing model (htools' N+1 reserve on each secondary). The plan is
   replayed with the strict adds (`model.groups.apply_relocations`): a failure there is a
   modelling error, never a verdict.
3. Every node that must stay evacuable is decided exactly (solvers/strategies/n1.py `decide`;
   nodes whose plan leans on nothing that changed keep their verdict, `still_valid`).
4. A node that is not evacuable yields a cut. Adding instances to a group never helps its
   N+1 and removing never hurts (docs/groups.md), so the failure holds for every plan with at
   least these arrivals and at most these departures in the node's group. Both sets are
   shrunk first (arrivals dropped, departures added, while the node still fails), and the cut
   forbids only what remains. The master is solved again.
5. A master optimum whose plan passes the exact check is optimal; an infeasible master (cuts
   included) proves that no plan exists.

A failure that depends on how drbd arrivals were paired (the node's new drbd primaries fail
over to their secondaries) is cut in the pairing model instead; when no pairing is left, the
group's arrivals as a whole are cut from the master.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import pyomo.core as pyo

from formulations import relocation as form
from model.errors import CheckFailedError
from model.groups import Relocation, Storage, check_relocations, placed_state
from model.n1 import HARD, replay
from model.relocation import (
    Origin,
    PairingProblem,
    RelocationProblem,
    Scenario,
    Shape,
    failover_room,
    peer_room,
    scenario_of,
)
from model.state import ClusterState
from solvers import SolveResult, Status, Stopwatch, solve
from solvers.lexicographic import fixing_bounds, open_session
from solvers.options import DEFAULT_OPTIONS, SolverOptions
from solvers.strategies.n1 import NodeVerdict, decide, still_valid

#: Cuts derived from one master solution at most (the failing nodes beyond wait a round).
CUTS_PER_ROUND = 8
MAX_ROUNDS = 400
#: Pairings tried for one master solution before its group's arrivals are cut as a whole.
MAX_PAIRINGS = 50


@dataclass(frozen=True)
class Plan:
    """Relocations and what the exact check found on the cluster after them."""

    relocations: tuple[Relocation, ...]
    state: ClusterState
    verdicts: Mapping[str, NodeVerdict]  # every required node, evacuable, with its plan


@dataclass
class Outcome:
    """The answer to one relocation problem."""

    status: str  # optimal, infeasible, feasible (stopped with a plan), time_limit
    plan: Plan | None
    objective: tuple[float | None, ...] = ()
    bound: tuple[float | None, ...] = ()
    gap: tuple[float | None, ...] = ()
    stages: tuple[str, ...] = ()
    reason: str | None = None  # why no plan exists
    build_s: float = 0.0
    solve_s: float = 0.0
    check_s: float = 0.0
    rounds: int = 0
    cuts: int = 0
    scenarios: int = 0  # failing nodes whose packing joined the master
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "status": self.status,
            "stages": list(self.stages),
            "objective": list(self.objective),
            "bound": list(self.bound),
            "gap": list(self.gap),
            "build_s": round(self.build_s, 6),
            "solve_s": round(self.solve_s, 6),
            "check_s": round(self.check_s, 6),
            "rounds": self.rounds,
            "cuts": self.cuts,
            "scenarios": self.scenarios,
            **({"reason": self.reason} if self.reason else {}),
            **({"notes": list(self.notes)} if self.notes else {}),
        }


class Infeasible(Exception):
    """A cut with no condition: the node fails whatever the plan does."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


# --- the exact N+1 of required nodes ------------------------------------------------------


class N1Watch:
    """Verdicts of the required nodes on successive plans. Base verdicts are decided once; on
    a plan only nodes whose own state or whose plan's targets changed are decided again."""

    def __init__(
        self,
        base: ClusterState,
        required: Sequence[str],
        mode: str,
        offline_targets: bool,
        options: SolverOptions,
        known: Mapping[str, NodeVerdict] | None = None,
    ):
        self.base = base
        self.required = tuple(required)
        self.mode = mode
        self.offline_targets = offline_targets
        self.options = options
        known = known or {}
        self.verdicts = {n: known.get(n) or self.decide(base, n) for n in self.required}

    def decide(self, state: ClusterState, node: str) -> NodeVerdict:
        return decide(
            state, node, mode=self.mode, offline_targets=self.offline_targets, options=self.options
        )

    def evacuable(self, state: ClusterState, node: str) -> bool:
        v = self.decide(state, node)
        if v.evacuable is None:
            raise TimeoutError(f"N+1 of {node} undecided: {v.reason}")
        return bool(v.evacuable)

    def check(self, state: ClusterState) -> tuple[dict[str, NodeVerdict], list[str]]:
        """Every required node's verdict on `state`, and those that are not evacuable."""
        changed = [n for n, st in state.nodes.items() if st is not self.base.nodes[n]]
        touched = set(changed)
        out: dict[str, NodeVerdict] = {}
        failing: list[str] = []
        for n in self.required:
            v = self.verdicts[n]
            if not (n in touched or not v.evacuable or not still_valid(state, v, touched)):
                out[n] = v
                continue
            v = self.decide(state, n)
            if v.evacuable is None:
                raise TimeoutError(f"N+1 of {n} undecided: {v.reason}")
            out[n] = v
            if not v.evacuable:
                failing.append(n)
        return out, failing


# --- turning a master solution into relocations ---------------------------------------------


@dataclass(frozen=True)
class Realized:
    """A master solution as relocations, and the counts it came from."""

    relocations: tuple[Relocation, ...]
    state: ClusterState
    solution: form.Solution
    pairs: Mapping[tuple[int, str, str], int]  # drbd (shape, primary, secondary) -> count


def _leaving(problem: RelocationProblem, sol: form.Solution) -> dict[int, list[tuple[Origin, str]]]:
    """Per shape, the members that leave: the first `out` of each origin."""
    out: dict[int, list[tuple[Origin, str]]] = defaultdict(list)
    for s in problem.shapes:
        for o, names in s.members.items():
            k = sol.leave.get((s.index, o), 0)
            out[s.index] += [(o, n) for n in names[:k]]
    return out


def _single_arrivals(
    problem: RelocationProblem, sol: form.Solution, leaving: Mapping[int, list]
) -> list[Relocation]:
    relocs: list[Relocation] = []
    for s in problem.shapes:
        if s.drbd:
            continue
        slots = [t for t in s.primaries for _ in range(sol.primary.get((s.index, t), 0))]
        for (o, name), t in zip(leaving[s.index], slots, strict=True):
            relocs.append(Relocation(name, t, None, o[0], o[1]))
    return relocs


def _drbd_arrivals(
    problem: RelocationProblem,
    leaving: Mapping[int, list],
    pairs: Mapping[tuple[int, str, str], int],
) -> list[Relocation]:
    relocs: list[Relocation] = []
    by_shape: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for (s, a, b), k in sorted(pairs.items()):
        by_shape[s] += [(a, b)] * k
    for s in problem.shapes:
        if not s.drbd:
            continue
        for (o, name), (a, b) in zip(leaving[s.index], by_shape[s.index], strict=True):
            relocs.append(Relocation(name, a, b, o[0], o[1]))
    return relocs


def _group_counts(
    problem: RelocationProblem, sol: form.Solution
) -> dict[str, tuple[dict[int, dict[str, int]], dict[int, dict[str, int]]]]:
    """Per group: drbd primaries and secondaries counted per shape and node."""
    drbd = {s.index for s in problem.shapes if s.drbd}
    out: dict[str, tuple[dict, dict]] = {}
    for (s, t), k in sol.primary.items():
        if s in drbd:
            g = problem.nodes[t].group
            out.setdefault(g, ({}, {}))[0].setdefault(s, {})[t] = k
    for (s, t), k in sol.secondary.items():
        g = problem.nodes[t].group
        out.setdefault(g, ({}, {}))[1].setdefault(s, {})[t] = k
    return out


def _pairing_problem(
    problem: RelocationProblem,
    shapes: Mapping[int, Shape],
    state: ClusterState,
    group: str,
    prim: Mapping[int, Mapping[str, int]],
    sec: Mapping[int, Mapping[str, int]],
    cuts: tuple,
) -> PairingProblem:
    """The pairing question of a group on `state` (every relocation but the group's drbd
    arrivals applied); the new drbd primaries' memory is taken off their nodes' room."""
    new_mem: dict[str, int] = defaultdict(int)
    for s, ps in prim.items():
        for a, k in ps.items():
            new_mem[a] += shapes[s].memory_mib * k
    prim_nodes = {a for ps in prim.values() for a, k in ps.items() if k}
    sec_nodes = {b for qs in sec.values() for b, k in qs.items() if k}
    peer_cap: dict[tuple[str, str], int] = {}
    fo_cap: dict[tuple[str, str], int] = {}
    for b in sec_nodes:
        for a in prim_nodes:
            if a == b:
                continue
            room = peer_room(state, b, a)
            if room is not None and problem.nodes[b].n1_row:
                peer_cap[b, a] = room - new_mem[b]
            fo_cap[b, a] = failover_room(state, b, a) - new_mem[b]
    return PairingProblem(
        group=group,
        primaries=prim,
        secondaries=sec,
        reserve_mib={s: shapes[s].reserve_mib for s in prim},
        memory_mib={s: shapes[s].memory_mib for s in prim},
        peer_cap_mib=peer_cap,
        failover_cap_mib=fo_cap,
        cuts=cuts,
    )


def _solve_pairing(p: PairingProblem, options: SolverOptions) -> dict | None:
    if not p.pairs():
        needs = any(k for ps in p.primaries.values() for k in ps.values())
        return None if needs else {}
    m = form.build_pairing(p)
    res = solve(m, **options.kwargs())
    if not res.has_solution:
        return None
    return form.pairing_solution(m)


# --- cuts ------------------------------------------------------------------------------------


def _shrink(items: list, still_fails: Callable[[list], bool]) -> list:
    """A smallest-by-deletion subset of `items` that still fails (chunks halved, as ddmin)."""
    keep = list(items)
    chunk = max(len(keep) // 2, 1)
    while keep:
        i = 0
        changed = False
        while i < len(keep):
            trial = keep[:i] + keep[i + chunk :]
            if still_fails(trial):
                keep = trial
                changed = True
            else:
                i += chunk
        if chunk == 1 and not changed:
            break
        chunk = max(chunk // 2, 1)
    return keep


@dataclass(frozen=True)
class Cut:
    conditions: tuple[form.Condition, ...]
    node: str
    why: str


class Cutter:
    """Cuts for a node that fails on a plan (module docstring, step 4)."""

    def __init__(
        self,
        base: ClusterState,
        problem: RelocationProblem,
        watch: N1Watch,
        shape_of: Mapping[str, int],
    ):
        self.base = base
        self.problem = problem
        self.watch = watch
        self.shape_of = shape_of
        self.shapes = {s.index: s for s in problem.shapes}
        self.origin_of: dict[str, Origin] = {
            name: o for s in problem.shapes for o, names in s.members.items() for name in names
        }

    def _state(
        self,
        removed: Iterable[str],
        placed: Iterable[Relocation],
        relaxed: frozenset[str] = frozenset(),
    ) -> ClusterState:
        """The base without `removed` instances, with `placed` relocations applied; instances in
        `relaxed` arrive as diskless ones on their primary alone (what a drbd arrival would be
        if it could fail over to any node: a relaxation of its pairing)."""
        return placed_state(self.base, removed, placed, relaxed)

    def fails(
        self,
        node: str,
        removed: Iterable[str],
        placed: Iterable[Relocation],
        relaxed: frozenset[str] = frozenset(),
    ) -> bool:
        return not self.watch.evacuable(self._state(removed, placed, relaxed), node)

    def cut(self, node: str, relocations: Sequence[Relocation]) -> Cut | str:
        """A cut for `node`, or "pairing" when the failure hangs on how its new drbd primaries
        were paired (they fail over to their secondaries)."""
        group = self.base.nodes[node].group_uuid

        def in_group(n: str | None) -> bool:
            return n is not None and self.base.nodes[n].group_uuid == group

        arrivals = [r for r in relocations if in_group(r.primary) or in_group(r.secondary)]
        # everything that moves is off its old nodes; only arrivals into the group are placed
        moved = [r.instance for r in relocations]
        own_drbd = frozenset(
            r.instance for r in arrivals if r.primary == node and r.secondary is not None
        )
        # the node's new drbd primaries fail over to their secondaries: whether the node fails
        # must not hang on that pairing, so they count as instances that may go anywhere
        if own_drbd and not self.fails(node, moved, arrivals, own_drbd):
            return "pairing"
        kept = _shrink(arrivals, lambda sub: self.fails(node, moved, sub, own_drbd))
        # departures: movers of the group that stayed, removed too while the node still fails
        stayed = [
            name
            for s in self.problem.shapes
            for o, names in s.members.items()
            if in_group(o[0]) or in_group(o[1])
            for name in names
            if name not in set(moved)
        ]
        extra: list[str] = []
        if stayed:
            if self.fails(node, moved + stayed, kept, own_drbd):
                extra = stayed
            else:
                by_entry: dict[tuple[int, Origin], list[str]] = defaultdict(list)
                for name in stayed:
                    by_entry[self.shape_of[name], self.origin_of[name]].append(name)
                for names in by_entry.values():
                    if self.fails(node, moved + extra + names, kept, own_drbd):
                        extra += names
        # do the kept drbd arrivals' secondaries matter? (only their disk could, for re-created
        # plain instances): if the node fails with them as diskless primaries alone, they do not
        drbd_kept = frozenset(r.instance for r in kept if r.secondary is not None)
        relaxed = own_drbd
        if drbd_kept - own_drbd and self.fails(node, moved + extra, kept, own_drbd | drbd_kept):
            relaxed = own_drbd | drbd_kept
        conditions: list[form.Condition] = []
        counts: dict[tuple[str, int, str], int] = defaultdict(int)
        for r in kept:
            s = self.shape_of[r.instance]
            if in_group(r.primary):
                counts["x", s, r.primary] += 1
            if r.secondary is not None and in_group(r.secondary) and r.instance not in relaxed:
                if r.secondary != node:  # a failing node's own secondaries never matter
                    counts["y", s, r.secondary] += 1
        conditions += [(k, s, t, c) for (k, s, t), c in sorted(counts.items())]
        removed = set(moved) | set(extra)
        for s in self.problem.shapes:
            for o, names in s.members.items():
                if not (in_group(o[0]) or in_group(o[1])):
                    continue
                gone = sum(1 for n in names if n in removed)
                if gone < len(names):
                    conditions.append(("out", s.index, o, gone))
        if not conditions:
            raise Infeasible(
                f"node {node} cannot be evacuable: its group could not absorb its failure even "
                "with every instance that may leave gone"
            )
        why = f"{node} not evacuable with {len(kept)} arrival(s)"
        return Cut(tuple(conditions), node, why)


# --- the solve loop -------------------------------------------------------------------------


class Master:
    """The master model in one solver session: stage objectives, their fixing rows, every cut
    and every failing node's scenario so far. A scenario adds variables, so the session is
    opened again on the grown model; when the indicator pool runs out, the model is built again
    with a pool twice as large. Rows are added back each time."""

    def __init__(
        self,
        problem: RelocationProblem,
        stages: Sequence[tuple[str, str]],
        options: SolverOptions,
    ):
        self.problem = problem
        self.stage_names = stages
        self.options = options
        self.pool = form.CUT_POOL
        self.cuts: list[Cut] = []
        self.scenarios: dict[str, Scenario] = {}
        self.fixed: list[tuple[int, float]] = []  # (stage, value)
        self.build_s = 0.0
        self.stage: int | None = None
        self._build()
        self._session()

    def _build(self) -> None:
        with Stopwatch() as sw:
            self.m, self.ix = form.build(self.problem, cut_pool=self.pool)
            for sc in self.scenarios.values():
                form.add_scenario(self.m, self.problem, self.ix, sc)
            self.objectives = form.objectives(self.m, self.stage_names)
        self.build_s += sw.seconds

    def _session(self) -> None:
        o = self.options
        self.session = open_session(o.solver, self.m, o.gap, o.threads, seed=0)
        self.flags_used = 0
        for k, value in self.fixed:
            obj = self.objectives[k]
            self.session.add_bound(obj.expr, *fixing_bounds(obj, value))
        for cut in self.cuts:
            if not self._rows(cut):
                raise RuntimeError("cut pool too small after a rebuild")
        if self.stage is not None:
            self.set_stage(self.stage)

    def _rows(self, cut: Cut) -> bool:
        need = form.flags_needed(self.m, cut.conditions)
        if self.flags_used + need > self.pool:
            return False
        flags = list(range(self.flags_used, self.flags_used + need))
        self.flags_used += need
        for row in form.cut_rows(self.m, cut.conditions, flags):
            self.session.add_bound(*row)
        return True

    def add(self, cut: Cut) -> None:
        self.cuts.append(cut)
        if not self._rows(cut):
            self.session.close()
            while sum(form.flags_needed(self.m, c.conditions) for c in self.cuts) > self.pool:
                self.pool *= 2
            self._build()
            self._session()

    def add_scenarios(self, scenarios: Sequence[Scenario]) -> None:
        if not scenarios:
            return
        self.session.close()
        with Stopwatch() as sw:
            for sc in scenarios:
                self.scenarios[sc.node] = sc
                form.add_scenario(self.m, self.problem, self.ix, sc)
        self.build_s += sw.seconds
        self._session()

    def set_stage(self, k: int) -> None:
        self.stage = k
        obj = self.objectives[k]
        self.session.set_objective(obj.expr, obj.sense)

    def fix(self, k: int, value: float) -> None:
        self.fixed.append((k, value))
        obj = self.objectives[k]
        self.session.add_bound(obj.expr, *fixing_bounds(obj, value))

    def solve(self, time_limit: float | None) -> SolveResult:
        return self.session.solve(time_limit=time_limit, build_s=0.0)

    def close(self) -> None:
        self.session.close()


def solve_relocation(
    state: ClusterState,
    storage: Storage,
    problem: RelocationProblem,
    stages: Sequence[tuple[str, str]],
    *,
    mode: str = HARD,
    offline_targets: bool = False,
    options: SolverOptions = DEFAULT_OPTIONS,
    allowed_groups: Mapping[str, Iterable[str]] | None = None,
    watch: N1Watch | None = None,
) -> Outcome:
    """The lexicographic optimum of `stages` over plans that keep every required node
    evacuable (module docstring), or the proof that none exists."""
    deadline = options.deadline()  # the answer's, when the command line set one
    t0 = time.perf_counter()
    watch = watch or N1Watch(state, problem.required, mode, offline_targets, options)
    check_s = time.perf_counter() - t0
    shape_of = {
        name: s.index for s in problem.shapes for names in s.members.values() for name in names
    }
    shapes = {s.index: s for s in problem.shapes}
    cutter = Cutter(state, problem, watch, shape_of)
    master = Master(problem, stages, options)
    out = Outcome("time_limit", None, stages=tuple(s for s, _ in stages))
    base0 = placed_state(state, shape_of, ())
    new_scenarios: list[Scenario] = []

    def left() -> float | None:
        return None if deadline is None else max(deadline - time.perf_counter(), 0.05)

    def realize(sol: form.Solution) -> tuple[Plan | None, list[Cut]]:
        """Relocations of a master solution, checked; the plan, or cuts against it."""
        leaving = _leaving(problem, sol)
        singles = _single_arrivals(problem, sol, leaving)
        counts = _group_counts(problem, sol)
        pair_cuts: dict[str, tuple] = defaultdict(tuple)
        gone = [name for s in problem.shapes if s.drbd for _, name in leaving[s.index]]
        partial = placed_state(state, gone, singles)
        failing: list[str] = []
        for _attempt in range(MAX_PAIRINGS):
            pairs: dict[tuple[int, str, str], int] = {}
            cuts: list[Cut] = []
            for g, (prim, sec) in counts.items():
                pp = _pairing_problem(problem, shapes, partial, g, prim, sec, pair_cuts[g])
                found = _solve_pairing(pp, options.within(left()))
                if found is None:
                    cuts.append(_group_cut(problem, sol, g, "no pairing of its drbd arrivals"))
                    continue
                pairs.update(found)
            if cuts:
                return None, cuts
            relocs = tuple(singles + _drbd_arrivals(problem, leaving, pairs))
            after, broken = check_relocations(state, storage, relocs, allowed_groups=allowed_groups)
            if broken:
                raise CheckFailedError(
                    "relocation plan fails the strict replay: " + "; ".join(map(str, broken[:3]))
                )
            verdicts, failing = watch.check(after)
            if not failing:
                return Plan(relocs, after, verdicts), []
            fresh = [n for n in failing if n not in master.scenarios]
            if fresh:  # first failure of these nodes: their packing goes into the master
                new_scenarios.extend(
                    scenario_of(state, base0, problem, n, offline_targets=offline_targets)
                    for n in fresh
                )
                return None, []
            repair: str | None = None
            for node in failing[:CUTS_PER_ROUND]:
                got = cutter.cut(node, relocs)
                if isinstance(got, Cut):
                    cuts.append(got)
                elif repair is None:
                    repair = node
            if cuts or repair is None:
                return None, cuts
            g = state.nodes[repair].group_uuid
            pair_cuts[g] = pair_cuts[g] + (_pairing_cut(cutter, repair, relocs, shape_of),)
        g = state.nodes[failing[0]].group_uuid
        return None, [_group_cut(problem, sol, g, "pairings exhausted")]

    proven = True
    try:
        for k in range(len(stages)):
            master.set_stage(k)
            accepted: Plan | None = None
            res = None
            while out.rounds < MAX_ROUNDS:
                out.rounds += 1
                res = master.solve(left())
                out.solve_s += res.solve_s
                if not res.has_solution:
                    break
                t0 = time.perf_counter()
                try:
                    plan, cuts = realize(form.solution(master.m))
                except Infeasible as why:
                    check_s += time.perf_counter() - t0
                    out.status, out.reason, out.plan = "infeasible", why.reason, None
                    return _finish(out, master, check_s)
                except TimeoutError as why:
                    out.notes.append(str(why))
                    res = None
                    break
                check_s += time.perf_counter() - t0
                if plan is not None:
                    accepted = plan
                    break
                master.add_scenarios(new_scenarios)
                out.scenarios += len(new_scenarios)
                new_scenarios.clear()
                for cut in cuts:
                    master.add(cut)
                    out.cuts += 1
                if deadline is not None and time.perf_counter() >= deadline:
                    out.notes.append("time limit in the cut rounds")
                    res = None
                    break
            else:
                out.notes.append(f"stopped after {MAX_ROUNDS} rounds")
                res = None
            if accepted is None:
                if res is not None and res.status is Status.INFEASIBLE and k == 0:
                    out.status = "infeasible"
                    out.reason = _infeasible_reason(out)
                    if not out.cuts and not out.scenarios:
                        out.reason = explain(problem, options.within(left())) or out.reason
                    out.objective, out.bound, out.gap = (None,), (None,), (None,)
                    return _finish(out, master, check_s)
                if res is not None and res.status is Status.INFEASIBLE:
                    out.notes.append(f"stage {stages[k][0]}: nothing better than the last stage")
                proven = proven and res is not None and res.status is Status.INFEASIBLE
                break
            out.plan = accepted
            value = float(pyo.value(master.objectives[k].expr))
            out.objective += (value,)
            out.bound += (res.bound if res.bound is not None else value,)
            out.gap += (0.0 if res.status is Status.OPTIMAL else res.gap,)
            proven = proven and res.status is Status.OPTIMAL
            if k + 1 < len(stages):
                master.fix(k, value)
    finally:
        master.close()
    if out.plan is None:
        out.status = "time_limit"
    else:
        out.status = "optimal" if proven and len(out.objective) == len(stages) else "feasible"
    return _finish(out, master, check_s)


def _finish(out: Outcome, master: Master, check_s: float) -> Outcome:
    out.check_s = check_s
    out.build_s = master.build_s
    return out


def _infeasible_reason(out: Outcome) -> str:
    learned = []
    if out.scenarios:
        learned.append(f"the failure packings of {out.scenarios} node(s)")
    if out.cuts:
        learned.append(f"{out.cuts} cut(s)")
    if learned:
        return (
            "no plan keeps every required node evacuable: the model is infeasible with "
            + " and ".join(learned)
            + " from the exact N+1 check"
        )
    return "no plan meets the strict capacity rows and the N+1 memory bounds (model infeasible)"


#: What each family of master rows stands for, in an infeasibility's reason.
ROW_WORDS = {
    "memory": "memory (unallocated memory above zero)",
    "disk": "local disk",
    "spindles": "free spindles",
    "spindle_ratio": "the spindle ratio (hail's spindle use per node)",
    "n1": "the N+1 reserve of drbd secondaries",
    "vcpu": "the vCPU ratio",
    "memory_forth": "memory with forthcoming instances",
    "disk_forth": "disk with forthcoming instances",
    "spindles_forth": "spindles with forthcoming instances",
    "spindle_ratio_forth": "the spindle ratio with forthcoming instances",
    "vcpu_forth": "the vCPU ratio with forthcoming instances",
    "pair_flow": "the N+1 reserve new drbd secondaries keep for their primaries",
    "excl": "exclusion tags",
    "n1_memory": "the groups' N+1 memory (what a failing node needs against what the rest offers)",
    "n1_failover": "drbd failovers (memory on the secondaries)",
    "n1_count": "the groups' N+1 granularity (large instances need large holes)",
}


def explain(problem: RelocationProblem, options: SolverOptions) -> str | None:
    """Which families of rows make the master infeasible: families are switched off one after
    the other until the model has a plan, then switched on again where it stays feasible, so
    that what is left is a small set whose rows cannot all hold."""
    import pyomo.core as pyo

    m, _ = form.build(problem, cut_pool=1)
    m.explain_obj = pyo.Objective(expr=m.moves)
    kinds = sorted({k for _, k in m.CAP}, key=list(ROW_WORDS).index)
    families: list[tuple[str, list]] = [
        (k, [m.cap[t, kk] for t, kk in m.CAP if kk == k]) for k in kinds
    ]
    # a family goes with the rows defining its own variables (holes and offers)
    parts = {
        "pair_flow": ("pair_flow",),
        "excl": ("excl",),
        "n1_memory": ("n1_memory", "offered"),
        "n1_failover": ("n1_failover",),
        "n1_count": ("n1_count", "holes", "held", "holes_after"),
    }
    families += [(n, [getattr(m, c) for c in cs]) for n, cs in parts.items()]
    deadline = options.deadline()

    def feasible() -> bool | None:
        left = None if deadline is None else deadline - time.perf_counter()
        if left is not None and left <= 0:
            return None
        res = solve(m, **options.within(left).kwargs())
        if res.status is Status.INFEASIBLE:
            return False
        return True if res.has_solution else None

    off: list[tuple[str, list]] = []
    for fam in families:
        for c in fam[1]:
            c.deactivate()
        off.append(fam)
        got = feasible()
        if got is None:
            return None
        if got:
            break
    else:
        return None
    for fam in list(off):
        for c in fam[1]:
            c.activate()
        got = feasible()
        if got is None:
            return None
        if got:
            off.remove(fam)
        else:
            for c in fam[1]:
                c.deactivate()
    words = " and ".join(ROW_WORDS.get(name, name) for name, _ in off)
    return f"no plan: {words} cannot all hold on the nodes that could take the instances"


def _group_cut(problem: RelocationProblem, sol: form.Solution, group: str, why: str) -> Cut:
    """Forbid the master's arrivals into `group` as a whole (and its departures as they are):
    valid because no pairing of these counts works, and more arrivals cannot help."""
    conditions: list[form.Condition] = []
    for (s, t), k in sorted(sol.primary.items()):
        if problem.nodes[t].group == group:
            conditions.append(("x", s, t, k))
    for (s, t), k in sorted(sol.secondary.items()):
        if problem.nodes[t].group == group:
            conditions.append(("y", s, t, k))
    for shape in problem.shapes:
        for o, names in shape.members.items():
            if problem.nodes[o[0]].group == group or (o[1] and problem.nodes[o[1]].group == group):
                gone = sol.leave.get((shape.index, o), 0)
                if gone < len(names):
                    conditions.append(("out", shape.index, o, gone))
    return Cut(tuple(conditions), "", f"group {group}: {why}")


def _pairing_cut(
    cutter: Cutter, node: str, relocs: Sequence[Relocation], shape_of: Mapping[str, int]
) -> tuple:
    """A no-good on the pairs of `node`'s new drbd primaries, shrunk to the pairs that matter."""
    moved = [r.instance for r in relocs]
    own = [r for r in relocs if r.primary == node and r.secondary is not None]
    others = [r for r in relocs if r not in own]
    kept = _shrink(own, lambda sub: cutter.fails(node, moved, others + sub))
    counts: dict[tuple[int, str, str], int] = defaultdict(int)
    for r in kept or own:
        counts[shape_of[r.instance], r.primary, r.secondary] += 1  # type: ignore[index]
    return tuple(sorted(counts.items()))


def replay_verdicts(
    state: ClusterState, verdicts: Mapping[str, NodeVerdict], mode: str
) -> list[str]:
    """The independent check of "every required node stays evacuable": each node's plan
    replayed on the cluster after the relocations (model.n1.replay)."""
    bad = []
    for n, v in verdicts.items():
        if v.plan is None:
            bad.append(f"{n}: no evacuation plan")
            continue
        why = replay(state, v.plan, mode=mode)
        if why is not None:
            bad.append(f"{n}: {why}")
    return bad
