"""Exact global N+1: each node's verdict, proven by a plan or by a bound (docs/n1.md).

For one failing node (`decide`): nothing to re-place, or a first-fit packing, is a plan at
once; a bound that cannot be met (`model.n1.refutation`) is a proof at once; only what is left
goes to the packing MIP (formulations/n1.py), whose optimum says how many primaries can be
re-placed at most. Every plan found is replayed with htools' own moves (`model.n1.replay`)
before it is reported: a plan that fails the replay is an error, never a verdict.

`ExactN1` keeps the verdicts of a cluster state and answers "is it still redundant after this
change?" by re-deciding only the nodes the change can affect: the nodes whose load changed
and the nodes whose plan leaned on them (every other plan stays valid, see `still_valid`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from model.errors import CheckFailedError
from model.n1 import (
    HARD,
    EvacuationPlan,
    Packing,
    first_fit,
    offline_hosts,
    packing_of,
    plan_of,
    refutation,
    replay,
)
from model.state import ClusterState
from solvers import Status, Stopwatch
from solvers.options import DEFAULT_OPTIONS, SolverOptions

NOTHING = "nothing to re-place"
FIRST_FIT = "first fit"
BOUND = "bound"
MIP = "mip"


@dataclass(frozen=True)
class NodeVerdict:
    """Can this node's failure be absorbed by its group? `evacuable` is None when the solver
    stopped before deciding (time limit): then neither a plan nor a proof exists."""

    node: str
    group: str
    evacuable: bool | None
    plan: EvacuationPlan | None = None
    reason: str | None = None
    method: str = NOTHING
    status: str = str(Status.OPTIMAL)
    to_place: int = 0
    placed: int | None = None  # most primaries re-placeable (MIP), when not all
    build_s: float = 0.0
    solve_s: float = 0.0

    def to_json(self) -> dict:
        out: dict = {"name": self.node, "evacuable": self.evacuable, "method": self.method}
        if self.plan is not None:
            out["plan"] = [
                {"instance": s.instance, "action": s.action, "target": s.target}
                for s in self.plan.steps
            ]
        if self.reason is not None:
            out["reason"] = self.reason
        if self.method == MIP:
            out.update(status=self.status, build_s=self.build_s, solve_s=self.solve_s)
        return out


def _checked(
    state: ClusterState, plan: EvacuationPlan, mode: str, replayed: bool = True
) -> EvacuationPlan:
    if not replayed:  # the caller's checker replays every plan it keeps
        return plan
    why = replay(state, plan, mode=mode)
    if why is not None:
        raise CheckFailedError(f"N+1 plan for {plan.node} fails the replay: {why}")
    return plan


def decide(
    state: ClusterState,
    node: str,
    *,
    mode: str = HARD,
    offline_targets: bool = False,
    options: SolverOptions = DEFAULT_OPTIONS,
    replayed: bool = True,
) -> NodeVerdict:
    """The exact verdict for one failing node."""
    packing = packing_of(state, node, mode=mode, offline_targets=offline_targets)
    return decide_packing(state, packing, options, replayed)


def decide_packing(
    state: ClusterState,
    packing: Packing,
    options: SolverOptions = DEFAULT_OPTIONS,
    replayed: bool = True,
) -> NodeVerdict:
    """The verdict on a packing: a plan (first fit, else a MIP) or a refutation. A plan is
    replayed on `state` before it is returned unless `replayed` is False, for a caller whose
    own independent checker replays every plan it keeps (exalloc space: `check_space`)."""
    node, group, mode = packing.node, packing.group, packing.mode
    count = len(packing.items)
    if packing.failover_failure is not None:
        return NodeVerdict(node, group, False, reason=packing.failover_failure, method=BOUND)
    if not packing.items:
        plan = _checked(state, plan_of(packing, {}), mode, replayed)
        return NodeVerdict(node, group, True, plan, method=NOTHING)
    for largest_first in (True, False):
        assignment = first_fit(packing, largest_room_first=largest_first)
        if assignment is not None:
            plan = _checked(state, plan_of(packing, assignment), mode, replayed)
            return NodeVerdict(node, group, True, plan, method=FIRST_FIT, to_place=count)
    why = refutation(packing)
    if why is not None:
        return NodeVerdict(node, group, False, reason=why, method=BOUND, to_place=count)
    # Pyomo only now, when a packing needs a model: first fit and the bounds decide most
    # nodes, and an exalloc-hail call that builds no model starts 0.3 s and more sooner
    # (issue 40, item 12)
    from formulations import n1 as form
    from solvers import solve_lexicographic

    with Stopwatch() as sw:
        m = form.build(packing)
    lex = solve_lexicographic(  # at most what is left of the answer's deadline
        m, form.objectives(m, packing), **options.left().kwargs(), build_s=sw.seconds
    )
    times = {"build_s": lex.build_s, "solve_s": lex.solve_s}
    placed = int(round(lex.objective[0])) if lex.has_solution else 0
    if lex.has_solution and placed == count:
        plan = _checked(state, plan_of(packing, form.solution(m, packing)), mode, replayed)
        return NodeVerdict(
            node, group, True, plan, method=MIP, status=str(lex.status), to_place=count, **times
        )
    if lex.status is Status.OPTIMAL or lex.status is Status.INFEASIBLE:
        need = sum(i.memory_mib for i in packing.items)
        reason = (
            f"no way to re-place its {count} primaries ({need} MiB) on the rest of the group: "
            f"at most {placed} fit at once (proven by MIP)"
        )
        return NodeVerdict(
            node, group, False, reason=reason, method=MIP, to_place=count, placed=placed, **times
        )
    bound = lex.bound[0]
    reason = (
        f"undecided: the solver stopped ({lex.status}) with {placed} of {count} primaries "
        f"placed and a bound of {bound if bound is None else int(bound)}"
    )
    return NodeVerdict(
        node, group, None, reason=reason, method=MIP, status=str(lex.status), to_place=count,
        placed=placed, **times,
    )  # fmt: skip


@dataclass(frozen=True)
class GroupVerdict:
    name: str
    uuid: str
    nodes: tuple[NodeVerdict, ...]
    offline_hosts: tuple[str, ...] = ()  # offline nodes still hosting instances

    @property
    def redundant(self) -> bool | None:
        if any(v.evacuable is False for v in self.nodes):
            return False
        if any(v.evacuable is None for v in self.nodes):
            return None
        return True

    @property
    def healthy(self) -> bool | None:
        """Redundant and without offline nodes that still host instances."""
        return False if self.offline_hosts else self.redundant


@dataclass(frozen=True)
class N1Report:
    mode: str
    offline_targets: bool
    groups: tuple[GroupVerdict, ...]
    seconds: float = 0.0

    @property
    def redundant(self) -> bool | None:
        if any(g.redundant is False for g in self.groups):
            return False
        if any(g.redundant is None for g in self.groups):
            return None
        return True


def scope_nodes(state: ClusterState, *, include_offline: bool = True) -> list[str]:
    """The nodes whose failure is checked: all of them, offline ones too (htools checks an
    offline node as if it failed now; its instances still need a home)."""
    return [n for n, st in state.nodes.items() if include_offline or not st.offline]


#: The reason of a node the time limit left undecided.
OUT_OF_TIME = "not decided: the time limit ran out before this node"


def check_cluster(
    state: ClusterState,
    *,
    groups: Sequence[str] | None = None,
    mode: str = HARD,
    offline_targets: bool = False,
    options: SolverOptions = DEFAULT_OPTIONS,
) -> N1Report:
    """Every node's verdict, by group (all groups with nodes, or the named ones). Past the
    answer's deadline (`options.deadline_at`, the command line's --time-limit) the nodes left
    are undecided, "time_limit", rather than decided late (1,000 nodes take 4-7 s, and each
    MIP at most what is left)."""
    start = time.perf_counter()
    cluster = state.cluster
    wanted = [cluster.group(g) for g in groups] if groups else list(cluster.groups)
    out = []
    end = options.deadline_at

    def verdict(n: str, group: str) -> NodeVerdict:
        if end is not None and time.perf_counter() >= end:
            return NodeVerdict(n, group, None, reason=OUT_OF_TIME, status="time_limit")
        return decide(state, n, mode=mode, offline_targets=offline_targets, options=options)

    for g in wanted:
        names = [n for n, st in state.nodes.items() if st.group_uuid == g.uuid]
        if not names:
            continue
        verdicts = tuple(verdict(n, g.uuid) for n in names)
        out.append(GroupVerdict(g.name, g.uuid, verdicts, tuple(offline_hosts(state, names))))
    return N1Report(mode, offline_targets, tuple(out), time.perf_counter() - start)


# --- incremental: the capacity check of an allocation ------------------------------------


def still_valid(state: ClusterState, verdict: NodeVerdict, changed: Iterable[str]) -> bool:
    """Whether a node's positive verdict survives a change that touched `changed` nodes: its
    plan leans on none of them (and the node itself did not change), or it replays."""
    if verdict.evacuable is not True or verdict.plan is None:
        return False
    touched = set(changed)
    leans = {verdict.node} | {s.target for s in verdict.plan.steps}
    if not (leans & touched):
        return True
    return replay(state, verdict.plan) is None


@dataclass
class ExactN1:
    """Redundancy of successive states of one cluster, re-deciding only what a change can
    affect. `base` verdicts are computed once; `redundant_after(state, changed)` answers for a
    state that differs from the base on the `changed` nodes only."""

    base: ClusterState
    scope: tuple[str, ...]  # nodes whose failure must be absorbable
    mode: str = HARD
    offline_targets: bool = False
    options: SolverOptions = field(default_factory=SolverOptions)
    verdicts: dict[str, NodeVerdict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for n in self.scope:
            self.verdicts[n] = self._decide(self.base, n)

    def _decide(self, state: ClusterState, node: str) -> NodeVerdict:
        return decide(
            state, node, mode=self.mode, offline_targets=self.offline_targets, options=self.options
        )

    @property
    def redundant(self) -> bool:
        return all(v.evacuable for v in self.verdicts.values())

    def failing(self) -> list[NodeVerdict]:
        return [v for v in self.verdicts.values() if v.evacuable is not True]

    def redundant_after(
        self, state: ClusterState, changed: Iterable[str], *, additions_only: bool = False
    ) -> bool:
        """Whether `state` (the base with `changed` nodes altered) is redundant. With
        `additions_only` (an allocation: load only added), a base that is not redundant
        stays so without a look."""
        touched = tuple(changed)
        if additions_only and not self.redundant:
            return False
        for node in self.scope:
            if node not in touched and still_valid(state, self.verdicts[node], touched):
                continue
            if not self._decide(state, node).evacuable:
                return False
        return True


# --- the exact check behind hail's capacity interface (model.htools.capacity) ---------------


class ExactN1Check:
    """Exact global N+1 for the candidates of one allocation (docs/n1.md, "In hail").

    Decisions on htools' quirks (docs/n1.md): offline nodes take no instances; only the groups
    of the nodes a placement uses are judged, since a placement cannot change another group's
    redundancy (hail lets one broken group block every allocation in the cluster). A node's
    verdict on the cluster before the placement is computed once, when first needed; after a
    placement a node is decided again only if its plan leaned on a changed node and no longer
    replays. A group that is not redundant before stays so after any placement (adding load
    never helps), so every candidate in it is refused, as hail refuses it.
    """

    def __init__(
        self,
        base: ClusterState,
        scope: Sequence[str],
        mode: str = HARD,
        options: SolverOptions = DEFAULT_OPTIONS,
        earlier: ExactN1Check | None = None,
    ) -> None:
        self.base = base
        self.scope = tuple(scope)
        self.mode = mode
        self.options = options
        self._base: dict[str, NodeVerdict] = {}
        self._groups: dict[str, list[str]] = {}
        for n in self.scope:
            self._groups.setdefault(base.nodes[n].group_uuid, []).append(n)
        # the verdicts of the step before (a multi-allocate's previous instance), reused where
        # they still hold: deciding every node of a 200-node group again took 1-2 s per
        # instance, most of hail's one-by-one walk (issue 40)
        self._earlier: dict[str, NodeVerdict] = {}
        self._moved: frozenset[str] = frozenset()
        if earlier is not None and earlier.mode == mode and earlier.options == options:
            self._earlier = earlier._base
            old = earlier.base.nodes
            self._moved = frozenset(n for n, st in base.nodes.items() if old.get(n) is not st)

    def _base_verdict(self, node: str) -> NodeVerdict:
        if node not in self._base:
            v = self._earlier.get(node)
            if v is None or node in self._moved or not still_valid(self.base, v, self._moved):
                v = decide(self.base, node, mode=self.mode, options=self.options)
            self._base[node] = v
        return self._base[node]

    def known(self) -> Mapping[str, NodeVerdict]:
        """The verdicts decided on `base` so far (the joint model starts from them)."""
        return dict(self._base)

    def verdict(self, placement):  # noqa: ANN001, ANN201 - model.htools.capacity types
        from model.htools.capacity import N1Verdict

        name = placement.demand.name
        changed = set(placement.nodes)
        if name in self.base.locations:  # an instance that moves (change-group): it leaves
            changed |= {n for n in self.base.location(name) if n is not None}
        groups = {self.base.nodes[n].group_uuid for n in placement.node_names}
        nodes = [n for g in sorted(groups) for n in self._groups.get(g, ())]
        for node in nodes:  # the group broken already: nothing placed there can mend it
            v = self._base_verdict(node)
            if v.evacuable is not True:
                return N1Verdict(False, node, f"node {node} cannot be evacuated: {v.reason}")
        after = self._after(placement)
        plans = {}
        for node in nodes:
            v = self._base[node]
            if node not in changed and still_valid(after, v, changed):
                plans[node] = v.plan
                continue
            again = decide(after, node, mode=self.mode, options=self.options)
            if again.evacuable is not True:
                why = again.reason or "undecided"
                return N1Verdict(False, node, f"node {node} cannot be evacuated: {why}")
            plans[node] = again.plan
        return N1Verdict(True, witness=plans)

    def _after(self, placement):  # noqa: ANN001, ANN202
        """The cluster after the placement. An instance that already exists (change-group,
        allocate-secondary) is counted at its new place only: htools' check still counts it
        at its old place as well, exact does not (docs/n1.md)."""
        base, name = self.base, placement.demand.name
        if name in base.locations:
            base = base.remove(name)
        state = base.with_nodes(placement.nodes)
        return replace(
            state,
            demands={**state.demands, name: placement.demand},
            locations={**state.locations, name: (placement.primary, placement.secondary)},
        )


class ExactGlobalN1:
    """`--capacity-checks exact` (the default): every placement hail would keep must leave the
    groups it touches N+1 redundant by an exact packing."""

    name = "exact"

    def __init__(self, mode: str = HARD, options: SolverOptions = DEFAULT_OPTIONS) -> None:
        self.mode = mode
        self.options = options
        self.first: ExactN1Check | None = None  # the check of the first state asked about
        self._last: ExactN1Check | None = None

    def prepare(self, base: ClusterState, scope: Sequence[str]) -> ExactN1Check:
        """The check of `base`, starting from the verdicts of the last one prepared (each
        step of a walk changes a few nodes: the others' verdicts mostly still hold)."""
        check = ExactN1Check(base, scope, self.mode, self.options, earlier=self._last)
        self._last = check
        if self.first is None:
            self.first = check
        return check
