"""Super-cluster operations, proven: group health, redistribution, compression and node
evacuation across groups (docs/groups.md).

Each operation names its movers (which instances may or must leave their nodes), where each may
go (`candidates`: peer groups by storage, the group's policy, htools' strict adds on the node
alone) and which nodes must stay evacuable; `solvers.strategies.relocation` then finds the
optimal plan with the exact N+1 check, or proves that none exists.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from model.errors import InputError
from model.groups import (
    Relocation,
    Resources,
    Storage,
    group_nodes,
    group_refusal,
    hosts,
    instances_in,
    node_refusal,
    placed_state,
    used_and_free,
)
from model.n1 import HARD
from model.relocation import build_problem
from model.resources import primary_shortfalls, secondary_shortfalls
from model.state import ClusterState
from solvers.options import DEFAULT_OPTIONS, SolverOptions
from solvers.strategies.n1 import GroupVerdict, N1Report, NodeVerdict, check_cluster
from solvers.strategies.relocation import N1Watch, Outcome, solve_relocation


@dataclass(frozen=True)
class GroupHealth:
    """A group's health (the design's healthy / unhealthy lists)."""

    uuid: str
    name: str
    verdict: GroupVerdict  # exact N+1 of every node
    peers: tuple[str, ...]  # peer group uuids (sharing a storage method)

    @property
    def healthy(self) -> bool | None:
        return self.verdict.healthy

    @property
    def failing(self) -> tuple[str, ...]:
        return tuple(v.node for v in self.verdict.nodes if v.evacuable is not True)


@dataclass(frozen=True)
class Health:
    report: N1Report
    groups: Mapping[str, GroupHealth]  # by uuid

    def evacuable(self) -> set[str]:
        return {v.node for g in self.report.groups for v in g.nodes if v.evacuable}

    def verdicts(self) -> dict[str, NodeVerdict]:
        return {v.node: v for g in self.report.groups for v in g.nodes}

    def watch(
        self, state: ClusterState, required: Sequence[str], options: SolverOptions
    ) -> N1Watch:
        """The exact N+1 watch of `required` nodes, starting from these verdicts."""
        r = self.report
        return N1Watch(state, required, r.mode, r.offline_targets, options, self.verdicts())


def health(
    state: ClusterState,
    storage: Storage,
    *,
    mode: str = HARD,
    offline_targets: bool = False,
    options: SolverOptions = DEFAULT_OPTIONS,
) -> Health:
    report = check_cluster(state, mode=mode, offline_targets=offline_targets, options=options)
    groups = {g.uuid: GroupHealth(g.uuid, g.name, g, storage.peers(g.uuid)) for g in report.groups}
    return Health(report, groups)


# --- where a mover may go ------------------------------------------------------------------


class Candidates:
    """Candidate nodes of movers, computed once per kind of mover (instances asking the same
    of every node, from the same group, node tags and pool, share them)."""

    def __init__(self, state: ClusterState, base0: ClusterState, storage: Storage):
        self.state = state
        self.base0 = base0
        self.storage = storage
        self._cache: dict[tuple, tuple[tuple[str, ...], tuple[str, ...]]] = {}

    def __call__(
        self, name: str, groups: Sequence[str], exclude: frozenset[str]
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        st = self.state
        d = st.demands[name]
        p = st.locations[name][0]
        own = st.nodes[p].group_uuid
        key = (
            replace(d, name=""),
            own,
            self.storage.instance_pool.get(name),
            st.nodes[p].migration_tags,
            tuple(groups),
            exclude,
        )
        if key not in self._cache:
            self._cache[key] = self._compute(name, groups, exclude)
        return self._cache[key]

    def _compute(
        self, name: str, groups: Sequence[str], exclude: frozenset[str]
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        st, b0 = self.state, self.base0
        d = st.demands[name]
        own = st.nodes[st.locations[name][0]].group_uuid
        drbd = d.has_secondary
        prim: list[str] = []
        sec: list[str] = []
        for g in groups:
            if g != own and group_refusal(st, self.storage, name, g) is not None:
                continue
            gp: list[str] = []
            gs: list[str] = []
            for t in group_nodes(st, g):
                if t in exclude:
                    continue
                if node_refusal(st, name, t) is None and not primary_shortfalls(b0.nodes[t], d):
                    gp.append(t)
                if drbd and node_refusal(st, name, t, role="secondary") is None:
                    if not secondary_shortfalls(b0.nodes[t], d, ""):
                        gs.append(t)
            if drbd and (not gp or not gs or (len(set(gp) | set(gs)) < 2)):
                continue
            prim += gp
            sec += gs
        return tuple(prim), tuple(sec)


def _problem(
    state: ClusterState,
    storage: Storage,
    movers: Sequence[str],
    must: Iterable[str],
    groups_of: Mapping[str, Sequence[str]],
    exclude: frozenset[str],
    required: Iterable[str],
):
    """The relocation problem of `movers` whose destinations are the groups `groups_of[own
    group]` (their own group among them for moves inside it), never the `exclude`d nodes."""
    base0 = placed_state(state, movers, ())
    cands = Candidates(state, base0, storage)

    def destinations(name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        own = state.nodes[state.locations[name][0]].group_uuid
        return cands(name, tuple(groups_of.get(own, ())), exclude)

    problem, _ = build_problem(state, movers, must, destinations, required)
    return problem


# --- redistribution --------------------------------------------------------------------------


@dataclass
class Redistribution:
    health: Health
    unhealthy: tuple[str, ...]
    healthy: tuple[str, ...]
    outcome: Outcome | None  # None when there is nothing to do or no way to do it
    reason: str | None = None  # why nothing is done (or cannot be)
    seconds: float = 0.0


def redistribute(
    state: ClusterState,
    storage: Storage,
    *,
    mode: str = HARD,
    offline_targets: bool = False,
    options: SolverOptions = DEFAULT_OPTIONS,
    known: Health | None = None,
) -> Redistribution:
    """The fewest relocations into healthy peer groups that make every group healthy (the
    design's redistribution, exactly), or the proof that none exists."""
    began = time.perf_counter()
    h = known or health(state, storage, mode=mode, offline_targets=offline_targets, options=options)
    unhealthy = tuple(g for g, gh in h.groups.items() if gh.healthy is not True)
    healthy = tuple(g for g, gh in h.groups.items() if gh.healthy is True)
    name = {g: gh.name for g, gh in h.groups.items()}

    def done(outcome: Outcome | None, reason: str | None) -> Redistribution:
        return Redistribution(h, unhealthy, healthy, outcome, reason, time.perf_counter() - began)

    if not unhealthy:
        return done(None, "every group is healthy: nothing to do")
    undecided = [g for g in unhealthy if h.groups[g].healthy is None]
    if undecided:
        return done(None, f"N+1 undecided in group(s) {', '.join(name[g] for g in undecided)}")
    alone = [g for g in unhealthy if not set(h.groups[g].peers) & set(healthy)]
    if alone:
        return done(
            None,
            "no plan exists: group(s) "
            + ", ".join(name[g] for g in alone)
            + " have no healthy peer group (no shared storage method)",
        )
    movers = [n for g in unhealthy for n in instances_in(state, g)]
    offline = {n for n, st in state.nodes.items() if st.offline}
    must = [n for n in movers if set(state.locations[n]) & offline]
    # a drbd instance of an unhealthy group with its secondary elsewhere moves as a mover too
    groups_of = {g: [p for p in h.groups[g].peers if p in healthy] for g in unhealthy}
    receiving = {p for v in groups_of.values() for p in v}
    required = [n for g in (*unhealthy, *receiving) for n in group_nodes(state, g)]
    problem = _problem(state, storage, movers, must, groups_of, frozenset(), required)
    stuck = [
        n
        for s in problem.shapes
        if s.must_move and not s.primaries
        for names in s.members.values()
        for n in names
    ]
    if stuck:
        return done(
            None,
            f"no plan exists: {', '.join(stuck[:5])} must leave an offline node but no healthy "
            "peer group can take it",
        )
    outcome = solve_relocation(
        state,
        storage,
        problem,
        [("moves", "min")],
        mode=mode,
        offline_targets=offline_targets,
        options=options,
        allowed_groups=groups_of,
        watch=h.watch(state, required, options),
    )
    return done(outcome, None)


def memory_shortfall(state: ClusterState, problem) -> str | None:  # noqa: ANN001
    """A one-line proof that movers which must leave cannot all fit: for the instances sharing
    a set of candidate primaries, more memory than those nodes have unallocated (less one MiB
    each, htools' strict memory check)."""
    need: dict[frozenset[str], tuple[int, int]] = {}
    for s in problem.shapes:
        if not s.must_move:
            continue
        key = frozenset(s.primaries)
        mem, count = need.get(key, (0, 0))
        need[key] = (mem + s.memory_mib * s.count, count + s.count)
    for nodes, (mem, count) in need.items():
        # everything that can only go to a subset of these nodes competes for them too
        for other, (m2, c2) in need.items():
            if other < nodes:
                mem, count = mem + m2, count + c2
        room = sum(max(problem.nodes[t].room_mib, 0) for t in nodes)
        if mem > room:
            groups = sorted({state.cluster.group(state.nodes[t].group_uuid).name for t in nodes})
            return (
                f"no plan: {count} instance(s) need {mem} MiB of memory, the {len(nodes)} "
                f"node(s) of {', '.join(groups)} that could take them have {room} MiB"
            )
    return None


# --- compression ------------------------------------------------------------------------------


def receiving_peers(state: ClusterState, h: Health, group: str) -> list[str]:
    """The peer groups of `group` that may receive instances: healthy (adding instances never
    mends a group, so an unhealthy one takes nothing) and not unallocable."""
    return [
        p
        for p in h.groups[group].peers
        if state.cluster.group(p).alloc_policy != "unallocable" and h.groups[p].healthy is True
    ]


@dataclass
class Compression:
    """Per group: can it be emptied into its peers (and how), and the best one."""

    health: Health
    groups: dict[str, Outcome | str]  # uuid -> outcome, or why it is not a candidate
    free: dict[str, Resources]
    used: dict[str, Resources]
    best: str | None
    seconds: float = 0.0


def compress(
    state: ClusterState,
    storage: Storage,
    *,
    only: Sequence[str] | None = None,
    mode: str = HARD,
    offline_targets: bool = False,
    options: SolverOptions = DEFAULT_OPTIONS,
    known: Health | None = None,
) -> Compression:
    """Every group (or the `only` ones) that can be emptied into its healthy peer groups with
    every strict check and no peer node losing its evacuability, proven; the best is the
    evacuable group with the most free resources (the design: reclaim the most capacity)."""
    began = time.perf_counter()
    h = known or health(state, storage, mode=mode, offline_targets=offline_targets, options=options)
    evacuable = h.evacuable()
    stats = {g: used_and_free(state, g) for g in h.groups}
    used = {g: u for g, (u, _) in stats.items()}
    free = {g: f for g, (_, f) in stats.items()}
    wanted = list(h.groups)
    if only:
        index = {state.cluster.group(x).uuid for x in only}
        wanted = [g for g in wanted if g in index]
    out: dict[str, Outcome | str] = {}
    for g in wanted:
        peers = receiving_peers(state, h, g)
        if not peers:
            out[g] = "no healthy peer group shares a storage method with it"
            continue
        movers = instances_in(state, g)
        movers += [n for n in hosts(state, group_nodes(state, g)) if n not in set(movers)]
        if not movers:
            out[g] = Outcome("optimal", None, objective=(0.0,), bound=(0.0,), gap=(0.0,))
            continue
        groups_of = {g: peers}
        for name in movers:  # a split drbd instance moves within its primary's group too
            other = state.nodes[state.locations[name][0]].group_uuid
            groups_of.setdefault(other, [other, *(p for p in peers if p != other)])
        receiving = {p for v in groups_of.values() for p in v}
        required = [n for p in receiving for n in group_nodes(state, p) if n in evacuable]
        emptied = frozenset(group_nodes(state, g))
        problem = _problem(state, storage, movers, movers, groups_of, emptied, required)
        nowhere = [
            n
            for s in problem.shapes
            if not s.primaries
            for names in s.members.values()
            for n in names
        ]
        if nowhere:
            why = [group_refusal(state, storage, n, p) for n in nowhere[:1] for p in peers]
            detail = next((w for w in why if w), "no node of a peer group can take it alone")
            out[g] = f"{len(nowhere)} instance(s) have nowhere to go, e.g. {nowhere[0]}: {detail}"
            continue
        short = memory_shortfall(state, problem)
        if short is not None:
            out[g] = Outcome(
                "infeasible", None, objective=(None,), bound=(None,), gap=(None,), reason=short
            )
            continue
        out[g] = solve_relocation(
            state,
            storage,
            problem,
            [("moves", "min")],
            mode=mode,
            offline_targets=offline_targets,
            options=options,
            allowed_groups=groups_of,
            watch=h.watch(state, required, options),
        )
    yes = [
        g for g, o in out.items() if isinstance(o, Outcome) and o.status in ("optimal", "feasible")
    ]
    best = max(yes, key=lambda g: (free[g].key(), -len(instances_in(state, g))), default=None)
    return Compression(h, out, free, used, best, time.perf_counter() - began)


# --- node evacuation --------------------------------------------------------------------------


@dataclass
class Evacuation:
    health: Health
    nodes: tuple[str, ...]
    instances: tuple[str, ...]
    outcome: Outcome
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def evacuate(
    state: ClusterState,
    storage: Storage,
    nodes: Sequence[str],
    *,
    mode: str = HARD,
    offline_targets: bool = False,
    options: SolverOptions = DEFAULT_OPTIONS,
    known: Health | None = None,
) -> Evacuation:
    """Instances off `nodes`: inside their group, or into a healthy peer group (the design's
    (remote group, nodes) pairs). Most instances evacuated (proven), then fewest cross-group
    moves; every node evacuable before (the evacuated ones aside) stays so."""
    began = time.perf_counter()
    unknown = [n for n in nodes if n not in state.nodes]
    if unknown:
        raise InputError(f"--nodes: no such node(s): {', '.join(unknown)}")
    h = known or health(state, storage, mode=mode, offline_targets=offline_targets, options=options)
    gone = frozenset(nodes)
    movers = hosts(state, gone)
    groups_of: dict[str, list[str]] = {}
    for name in movers:
        own = state.nodes[state.locations[name][0]].group_uuid
        if own not in groups_of:
            groups_of[own] = [own, *receiving_peers(state, h, own)]
    touched = {g for v in groups_of.values() for g in v}
    evacuable = h.evacuable()
    required = [
        n for g in touched for n in group_nodes(state, g) if n in evacuable and n not in gone
    ]
    problem = _problem(state, storage, movers, (), groups_of, gone, required)
    outcome = solve_relocation(
        state,
        storage,
        problem,
        [("moves", "max"), ("cross", "min")],
        mode=mode,
        offline_targets=offline_targets,
        options=options,
        allowed_groups=groups_of,
        watch=h.watch(state, required, options),
    )
    return Evacuation(h, tuple(nodes), tuple(movers), outcome, time.perf_counter() - began)


def relocations_of(outcome: Outcome | None) -> tuple[Relocation, ...]:
    if outcome is None or outcome.plan is None:
        return ()
    return outcome.plan.relocations


# --- judging a plan (the greedy baselines') by the exact standards ------------------------------


def judge(
    state: ClusterState,
    storage: Storage,
    relocations: Sequence[Relocation],
    required: Iterable[str],
    groups: Iterable[str] = (),
    *,
    mode: str = HARD,
    offline_targets: bool = False,
    options: SolverOptions = DEFAULT_OPTIONS,
    deadline: float | None = None,
) -> list[str]:
    """What is wrong with a plan by exalloc's standards: broken strict checks, `required`
    nodes left without an exact evacuation plan, offline nodes of `groups` still hosting
    instances (empty when the plan is good). Past `deadline` (perf_counter) the nodes left
    are not judged, and the list says so."""
    from model.groups import check_relocations
    from model.n1 import offline_hosts
    from solvers.strategies.n1 import decide

    after, broken = check_relocations(state, storage, relocations)
    out = [str(v) for v in broken]
    required = list(required)
    for k, n in enumerate(required):
        if deadline is not None and time.perf_counter() >= deadline:
            out.append(f"not judged: the time limit ran out before {len(required) - k} node(s)")
            break
        v = decide(after, n, mode=mode, offline_targets=offline_targets, options=options)
        if v.evacuable is not True:
            out.append(f"{n} not evacuable: {v.reason}")
    for g in groups:
        for n in offline_hosts(after, group_nodes(after, g)):
            out.append(f"offline node {n} still hosts instances")
    return out
