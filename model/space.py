"""hspace's question as data: how many more instances of one spec fit, and where (docs/space.md).

hspace (Ganeti 3.0.2, `Program/Hspace.hs`) adds `new-N` instances of one spec one at a time,
each where hail's balance score is lowest, until none fits. The exact answer is the largest
number K of such instances placed on top of the existing ones (which stay) such that every
addition passes the checks htools makes (`Node.addPriEx` / `addSecExEx`, model/resources.py)
and N+1 holds as hspace defines it. This module turns a cluster state and hspace's options into
that problem (`space_problem`), the answer into data (`SpaceAnswer`, new instances with their
nodes), applies an answer to the cluster through model/state.py (`final_state`) and says, from
the final state alone, why no further instance fits (`binding`).

What the problem keeps of hspace:

* the nodes: `-O` marks nodes offline, `--max-cpu` sets every node's vCPU ratio, `--min-disk`
  its disk reserve (`CLI.setNodeStatus`, `with_node_status`);
* the new instance (`Hspace.instFromSpec`): one disk of the spec's size and spindles, running,
  auto-balanced, no tags, the template of `--disk-template` (else the cluster policy's first)
  and the spindle use of `--spindle-use` (else the cluster policy's std spec);
* the candidates (`Cluster.genAllocNodes`): online nodes of the allocatable groups, and for
  drbd every ordered pair of distinct such nodes in one group; a primary must pass its group's
  instance policy (`Instance.instMatchesPolicy`, with the primary's exclusive storage);
* the N+1 gate (`Hspace.main`): without `--accept-existing-errors` the groups of nodes already
  failing N+1 are unallocatable and, unless `--independent-groups` leaves a group, such a node
  stops all allocation (failure FailN1); `--independent-groups` also makes the groups that are
  not globally N+1 redundant unallocatable (decided exactly by the caller, where hspace walks
  greedily) and leaves them out of the capacity check;
* the capacity check: for drbd only the secondaries' failover reservations (hspace turns
  `GlobalN1` off for drbd, `Cluster.iterateAllocSmallStep`); for every other template with
  capacity checks, global N+1 of the groups that receive instances, decided exactly
  (`exalloc n1`, docs/n1.md) where hspace walks greedily.

Why checking the final state is enough: on a node that passes N+1 at the start, every check
is a linear capacity (model/capacity.py) that additions only use up, and the drbd reserve only
grows while unallocated memory only shrinks, so each intermediate state passes whatever the
order (docs/space.md, "Monotonicity").
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from model.capacity import (
    DISK,
    DISK_FORTH,
    N1,
    SPINDLE_RATIO,
    SPINDLE_RATIO_FORTH,
    SPINDLES,
    SPINDLES_FORTH,
    applies,
    primary_usage,
    row_caps,
    secondary_usage,
)
from model.cluster import Cluster, Disk, Instance, ISpec
from model.errors import InputError
from model.policy import policy_shortfall
from model.resources import (
    FailMode,
    InstanceDemand,
    NodeState,
    primary_shortfalls,
    secondary_shortfalls,
)
from model.state import ClusterState, StateEdit

DRBD = "drbd"
#: Rows a drbd secondary is checked against (`addSecExEx`): its disk, spindles and their
#: `*_forth` twins; its memory enters through the failover reservation.
SECONDARY_ROWS = frozenset(
    {DISK, SPINDLES, SPINDLE_RATIO, DISK_FORTH, SPINDLES_FORTH, SPINDLE_RATIO_FORTH}
)
#: The prefix of new instances' names (`Cluster.iterateAllocSmallStep`: new-0, new-1, ...).
NEW_PREFIX = "new-"


@dataclass(frozen=True, slots=True)
class Spec:
    """An hspace resource spec (`RSpec`), as `--standard-alloc=DISK,RAM,CPU[,SPINDLES]`."""

    memory_mib: int
    disk_mib: int
    vcpus: int
    spindles: int = 1  # the new disk's spindles (rspecSpn)


@dataclass(frozen=True)
class SpaceOptions:
    """hspace's options that shape the problem (node names already resolved)."""

    disk_template: str
    spindle_use: int
    offline: tuple[str, ...] = ()  # -O
    max_cpu: float | None = None  # --max-cpu
    min_disk: float = 0.0  # --min-disk (hspace's default 0)
    capacity_checks: bool = True  # not --no-capacity-checks
    independent_groups: bool = False
    accept_existing_errors: bool = False
    limit: int | None = None  # -l (None: no limit)
    # global N+1: offline nodes take re-placed instances, as htools' check lets them
    # (docs/n1.md); exalloc's default leaves them out (they run nothing)
    offline_targets: bool = False


def with_node_status(
    state: ClusterState,
    offline: Sequence[str] = (),
    max_cpu: float | None = None,
    min_disk: float = 0.0,
) -> ClusterState:
    """`CLI.setNodeStatus`: `-O` nodes offline, `--max-cpu` as every node's vCPU ratio,
    `--min-disk` as its disk reserve loDsk = floor(ratio × t_dsk) (`Node.setMdsk`)."""
    unknown = [n for n in offline if n not in state.nodes]
    if unknown:
        raise InputError(f"wrong node name(s) set as offline: {', '.join(unknown)}")
    changed: dict[str, NodeState] = {}
    for name, st in state.nodes.items():
        status = {"lo_disk_mib": math.floor(min_disk * st.total_disk_mib)}
        if max_cpu is not None:
            status["vcpu_ratio"] = max_cpu
        if name in offline:
            status["offline"] = True
        if any(getattr(st, k) != v for k, v in status.items()):  # only the nodes it changes
            changed[name] = replace(st, **status)
    return state.with_nodes(changed)


def new_instance(spec: Spec, template: str, spindle_use: int, name: str = "new") -> Instance:
    """`Hspace.instFromSpec`: one disk of the spec's size and spindles, running, auto-balanced,
    no tags or NICs (the nodes are set when it is placed)."""
    return Instance(
        name=name,
        memory_mib=spec.memory_mib,
        disks=(Disk(spec.disk_mib, spec.spindles),),
        vcpus=spec.vcpus,
        status="running",
        auto_balance=True,
        primary="",
        secondary=None,
        disk_template=template,
        spindle_use=spindle_use,
    )


def demand_of_spec(
    spec: Spec, template: str, spindle_use: int, name: str = "new"
) -> InstanceDemand:
    """What one new instance asks of its nodes (every new instance asks the same)."""
    return InstanceDemand(
        name=name,
        memory_mib=spec.memory_mib,
        disk_mib=spec.disk_mib,
        vcpus=spec.vcpus,
        disk_template=template,
        disk_sizes_mib=(spec.disk_mib,),
        disk_spindles=spec.spindles,
        spindle_use=spindle_use,
    )


def bad_nodes(state: ClusterState) -> list[str]:
    """Online nodes failing N+1 already (`Cluster.computeBadItems`: `verifyN1` of the online
    nodes, failN1 as loaded)."""
    return [n for n, st in state.nodes.items() if not st.offline and st.fail_n1]


# --- the problem --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Row:
    """One check of a node as `per_primary·x + per_secondary·z ≤ cap`, x and z the new
    instances it takes as primary and as secondary; `primary` / `secondary` say whether htools
    runs the check for that role at all (a row already over its cap refuses the role even
    when the role takes nothing from it)."""

    kind: str
    cap: int
    per_primary: int
    per_secondary: int
    primary: bool
    secondary: bool


@dataclass(frozen=True)
class NodeRoom:
    """A candidate node: what it can still take, read off its state (model/capacity.py)."""

    name: str
    group: str  # group uuid
    primary_ok: bool  # a primary passes the group's policy here
    rows: tuple[Row, ...]
    n1_checked: bool  # not failing N+1 already: the reserve is checked
    unallocated_mib: int  # U
    reserve_mib: int  # rMem now
    memory_forth_mib: int  # fMemForth
    peers: Mapping[str, int] = field(default_factory=dict)  # candidate primary -> MiB reserved

    def max_primaries(self) -> int:
        """How many new primaries the node's rows admit alone."""
        if not self.primary_ok:
            return 0
        return _max_count(self.rows, primary=True)

    def max_secondaries(self) -> int:
        return _max_count(self.rows, primary=False)


def _max_count(rows: Sequence[Row], *, primary: bool) -> int:
    best = 10**9
    for r in rows:
        if not (r.primary if primary else r.secondary):
            continue
        use = r.per_primary if primary else r.per_secondary
        if r.cap < 0:
            return 0
        if use > 0:
            best = min(best, r.cap // use)
    return best


def _rows(st: NodeState, d: InstanceDemand, drbd: bool) -> tuple[Row, ...]:
    """The node's checks for new instances of demand `d`, the N+1 reserve aside (the
    formulation carries it: for drbd it grows with the secondaries)."""
    out = []
    for kind, cap in row_caps(st):
        if kind == N1:
            continue
        prim = applies(kind, d)
        sec = drbd and kind in SECONDARY_ROWS
        if not (prim or sec):
            continue
        out.append(
            Row(
                kind,
                cap,
                primary_usage(kind, d) if prim else 0,
                secondary_usage(kind, d) if sec else 0,
                prim,
                sec,
            )
        )
    return tuple(out)


@dataclass(frozen=True)
class SpaceProblem:
    """The standard allocation of one spec: the largest K of new instances of `demand`."""

    state: ClusterState  # after -O, --max-cpu, --min-disk
    spec: Spec
    options: SpaceOptions
    demand: InstanceDemand
    rooms: tuple[NodeRoom, ...]  # candidate nodes (online, allocatable groups), cluster order
    groups: tuple[str, ...]  # allocatable group uuids with candidates, cluster order
    unallocatable: tuple[tuple[str, str], ...]  # (group name, why)
    stopped: bool  # hspace allocates nothing (a node failing N+1, FailN1)
    global_n1: bool  # every other template with capacity checks
    n1_scope: Mapping[str, tuple[str, ...]]  # group uuid -> nodes whose failure is checked
    no_candidates: str | None = None  # hspace's error when there are none
    first_index: int = 0  # new instances are named new-<first_index> onwards

    @property
    def drbd(self) -> bool:
        return self.demand.disk_template == DRBD

    @property
    def room(self) -> dict[str, NodeRoom]:
        return {r.name: r for r in self.rooms}

    def group_nodes(self, group: str) -> tuple[NodeRoom, ...]:
        return tuple(r for r in self.rooms if r.group == group)

    def group_name(self, uuid: str) -> str:
        return self.state.cluster.group(uuid).name


def space_problem(
    state: ClusterState,
    spec: Spec,
    options: SpaceOptions,
    non_redundant: Mapping[str, str] | None = None,
    first_index: int = 0,
) -> SpaceProblem:
    """The problem hspace's options pose on a loaded cluster (`state` as loaded; `-O`,
    `--max-cpu` and `--min-disk` are applied here).

    `non_redundant` maps the uuid of each group that is not globally N+1 redundant to why
    (the exact check, solvers/strategies/n1.py); only `--independent-groups` reads it.
    """
    state = with_node_status(state, options.offline, options.max_cpu, options.min_disk)
    cluster = state.cluster
    d = demand_of_spec(spec, options.disk_template, options.spindle_use)
    drbd = d.disk_template == DRBD
    bad = bad_nodes(state)
    why_not: dict[str, str] = {}
    for g in cluster.groups:
        if g.alloc_policy == "unallocable":
            why_not[g.uuid] = "its allocation policy is unallocable"
    if not options.accept_existing_errors:
        for n in bad:
            g = state.nodes[n].group_uuid
            why_not.setdefault(g, f"node {n} fails N+1 already")
    ignored: set[str] = set()
    if options.independent_groups:
        for g, why in (non_redundant or {}).items():
            why_not.setdefault(g, f"not N+1 redundant: {why}")
            ignored.add(g)
    remaining = any(g.uuid not in why_not for g in cluster.groups)
    stopped = (
        not options.accept_existing_errors
        and not (options.independent_groups and remaining)
        and bool(bad)
    )
    rooms = []
    admits: dict[tuple[str, bool], bool] = {}  # the policy is the group's (and storage's)
    for name, st in state.nodes.items():
        if st.offline or st.group_uuid in why_not:
            continue
        key = (st.group_uuid, st.exclusive_storage)
        if key not in admits:
            shortfall = policy_shortfall(d, state.ipolicy_of(name), st.exclusive_storage)
            admits[key] = shortfall is None
        peers = dict(st.peers) if drbd else {}
        rooms.append(
            NodeRoom(
                name=name,
                group=st.group_uuid,
                primary_ok=admits[key],
                rows=_rows(st, d, drbd),
                n1_checked=not st.fail_n1,
                unallocated_mib=st.unallocated_memory_mib,
                reserve_mib=st.reserved_memory_mib,
                memory_forth_mib=st.free_memory_forth_mib,
                peers=peers,
            )
        )
    by_group = Counter(r.group for r in rooms)
    if drbd:  # a primary needs another online node of its group (genAllocNodes' pairs)
        rooms = [r if by_group[r.group] > 1 else replace(r, primary_ok=False) for r in rooms]
    groups = tuple(g.uuid for g in cluster.groups if by_group[g.uuid])
    global_n1 = options.capacity_checks and not drbd
    scope: dict[str, tuple[str, ...]] = {}
    if global_n1:
        for g in groups:
            if g in ignored:
                continue
            scope[g] = tuple(
                n
                for n, st in state.nodes.items()
                if st.group_uuid == g and not (options.accept_existing_errors and st.offline)
            )
    no_candidates = None
    if not rooms:
        no_candidates = "No online nodes" if not drbd else "Not enough online nodes"
    elif drbd and not any(by_group[r.group] > 1 for r in rooms):
        no_candidates = "Not enough online nodes"
    unalloc = tuple((cluster.group(g).name, why) for g, why in why_not.items())
    return SpaceProblem(
        state=state,
        spec=spec,
        options=options,
        demand=d,
        rooms=tuple(rooms),
        groups=groups,
        unallocatable=unalloc,
        stopped=stopped,
        global_n1=global_n1,
        n1_scope=scope,
        no_candidates=no_candidates,
        first_index=first_index,
    )


def non_redundant_of(problem: SpaceProblem) -> dict[str, str] | None:
    """The `--independent-groups` verdicts a problem was posed with (group uuid -> why), read
    back off its unallocatable groups, to pose the same gate on another state of the cluster."""
    if not problem.options.independent_groups:
        return None
    by_name = {g.name: g.uuid for g in problem.state.cluster.groups}
    prefix = "not N+1 redundant: "
    return {
        by_name[name]: why[len(prefix) :]
        for name, why in problem.unallocatable
        if why.startswith(prefix)
    }


def count_bound(problem: SpaceProblem) -> int:
    """An upper bound on the problem's count from each node's own rows (formulations/space.py:
    x[n] ≤ X[n], the N+1 reserve now, z[n] ≤ Z[n]), group by group: the primaries each node
    admits alone, and for drbd no more than the secondaries its group admits; `-l` caps it."""
    if problem.stopped or not problem.rooms:
        return 0
    mem = problem.demand.memory_mib
    total = 0
    for g in problem.groups:
        primaries = secondaries = 0
        for room in problem.group_nodes(g):
            x = room.max_primaries()
            if room.n1_checked and mem > 0:
                x = min(x, max((room.unallocated_mib - 1 - room.reserve_mib) // mem, 0))
            primaries += x
            if problem.drbd:
                secondaries += room.max_secondaries()
        total += min(primaries, secondaries) if problem.drbd else primaries
    if problem.options.limit is not None:
        total = min(total, problem.options.limit)
    return total


# --- the answer -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NewPlacement:
    """One new instance: its name and nodes (secondary for drbd only)."""

    name: str
    primary: str
    secondary: str | None = None


@dataclass(frozen=True)
class SpaceAnswer:
    """New instances of one spec, in the order they are added."""

    spec: Spec
    placements: tuple[NewPlacement, ...]

    @property
    def count(self) -> int:
        return len(self.placements)

    def by_group(self, state: ClusterState) -> dict[str, int]:
        """Instances placed per group name (every group, 0 included, cluster order)."""
        counts = Counter(state.nodes[p.primary].group_uuid for p in self.placements)
        return {g.name: counts.get(g.uuid, 0) for g in state.cluster.groups}


def placements_of(
    primaries: Mapping[str, int],
    pairs: Mapping[tuple[str, str], int] | None,
    order: Sequence[str],
    start: int = 0,
) -> tuple[NewPlacement, ...]:
    """Counts per node (or per drbd pair) as named instances, new-`start` onwards, in the
    cluster's node order of their primaries."""
    rank = {n: i for i, n in enumerate(order)}
    out: list[NewPlacement] = []
    if pairs is None:
        for n in sorted(primaries, key=rank.__getitem__):
            out += [NewPlacement("", n)] * primaries[n]
    else:
        for p, s in sorted(pairs, key=lambda ps: (rank[ps[0]], rank[ps[1]])):
            out += [NewPlacement("", p, s)] * pairs[p, s]
    return tuple(replace(pl, name=f"{NEW_PREFIX}{start + i}") for i, pl in enumerate(out))


def final_state(problem: SpaceProblem, answer: SpaceAnswer) -> ClusterState | str:
    """The cluster with the answer's instances added one by one with htools' strict adds
    (`ClusterState.place`), or what failed first."""
    edit = StateEdit(problem.state)
    spec, opts = answer.spec, problem.options
    for pl in answer.placements:
        inst = new_instance(spec, opts.disk_template, opts.spindle_use, pl.name)
        failed = edit.place(inst, pl.primary, pl.secondary)
        if failed is not None:
            where = pl.primary if pl.secondary is None else f"{pl.primary}/{pl.secondary}"
            return f"{pl.name} on {where}: {failed}"
    return edit.state()


# --- why no more fit ------------------------------------------------------------------------

#: How each check reads in a "no more fit because" line.
BINDING_WORDS = {
    "memory": "memory",
    "n1": "memory above the N+1 reservation",
    "disk": "disk",
    "disk_reserve": "disk above the --min-disk reserve",
    "spindles": "free spindles",
    "spindle_ratio": "the spindle ratio",
    "vcpu": "the vCPU ratio",
    "exclusion_tags": "exclusion tags",
    "policy": "the instance policy",
    "secondary": "no secondary in its group",
    "global_n1": "global N+1",
    "limit": "the -l limit",
}


@dataclass(frozen=True, slots=True)
class Binding:
    """A check that keeps a further instance off some nodes."""

    kind: str  # a key of BINDING_WORDS
    nodes: tuple[str, ...]


def _first_kind(shortfalls: Sequence) -> str | None:
    real = [s for s in shortfalls if not s.forthcoming] or list(shortfalls)
    return real[0].kind if real else None


def binding(
    problem: SpaceProblem, final: ClusterState, *, limited: bool = False
) -> tuple[Binding, ...]:
    """Why not one more instance, node by node, read off the final state with htools' checks:
    each candidate primary's first failing check, or, when it could take one, its secondaries'
    most common failing check ("secondary"). Nodes where one more would pass every node check
    are held back by global N+1 (or by `-l` when `limited`). Largest groups of nodes first."""
    d = problem.demand
    nodes = final.nodes
    kinds: dict[str, list[str]] = {}
    # a secondary's checks depend on the primary only through what it reserves for it: judged
    # once for primaries it reserves nothing for, and again for each one it does
    generic = {
        r.name: _first_kind(secondary_shortfalls(nodes[r.name], d, "")) for r in problem.rooms
    }
    for room in problem.rooms:
        name = room.name
        if not room.primary_ok:
            kind: str | None = "policy"
        else:
            kind = _first_kind(primary_shortfalls(nodes[name], d))
        if kind is None and problem.drbd:
            fits = False
            for peer in problem.group_nodes(room.group):
                s = peer.name
                if s == name:
                    continue
                if name in dict(nodes[s].peers):
                    ok = _first_kind(secondary_shortfalls(nodes[s], d, name)) is None
                else:
                    ok = generic[s] is None
                if ok:
                    fits = True
                    break
            if not fits:
                kind = "secondary"
        if kind is None:
            kind = "limit" if limited else "global_n1"
        kinds.setdefault(kind, []).append(name)
    order = sorted(kinds.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return tuple(Binding(k, tuple(v)) for k, v in order)


def binding_text(bindings: Sequence[Binding], *, most: int = 6) -> str:
    """'no more fit because: memory above the N+1 reservation on a, b; disk on c', with at
    most `most` nodes named per check."""
    if not bindings:
        return "no candidate nodes"
    parts = []
    for b in bindings:
        shown = ", ".join(b.nodes[:most])
        more = f" and {len(b.nodes) - most} more" if len(b.nodes) > most else ""
        parts.append(f"{BINDING_WORDS.get(b.kind, b.kind)} on {shown}{more}")
    return "no more fit because: " + "; ".join(parts)


def failure_mode(kind: str) -> FailMode:
    """htools' failure mode of a binding check: what a program prints as hspace's "most likely
    failure reason" (ALLOC_FAIL_REASON) for an exact answer, from its largest binding."""
    return {
        "memory": FailMode.MEM,
        "n1": FailMode.MEM,
        "disk": FailMode.DISK,
        "disk_reserve": FailMode.DISK,
        "spindle_ratio": FailMode.DISK,
        "policy": FailMode.DISK,
        "spindles": FailMode.SPINDLES,
        "vcpu": FailMode.CPU,
        "exclusion_tags": FailMode.TAGS,
        "global_n1": FailMode.N1,
    }.get(kind, FailMode.MEM)


# --- drbd pairs from counts -----------------------------------------------------------------


@dataclass(frozen=True)
class PairFlow:
    """A pair matrix y[p,s] with the counts' row and column sums, or, when none exists, the
    flow's source side (("p", node) and ("s", node) entries) for the min cut."""

    pairs: dict[tuple[str, str], int] | None
    source_side: frozenset[tuple[str, str]] = frozenset()


def pair_matrix(
    members: Sequence[str],
    x: Mapping[str, int],
    z: Mapping[str, int],
    generic_cap: Mapping[str, int],
    special_cap: Mapping[tuple[str, str], int],
) -> PairFlow:
    """Instances per (primary, secondary) of one group: row sums x, column sums z, nothing on
    the diagonal, y[p,s] ≤ special_cap[p,s] where given, else ≤ generic_cap[s].

    A transportation problem solved as a max flow: a greedy start (each primary, most
    instances first, on the secondaries with most left to take), then augmenting paths found
    by breadth-first search over the implicit bipartite graph until every primary is served
    or no path is left, whose reach is the min cut."""
    left = {s: z.get(s, 0) for s in members}
    need = {q: x.get(q, 0) for q in members if x.get(q, 0)}
    by_p: dict[str, dict[str, int]] = {q: {} for q in members}
    by_s: dict[str, dict[str, int]] = {s: {} for s in members}

    def cap(q: str, s: str) -> int:
        if q == s:
            return 0
        return special_cap.get((q, s), generic_cap.get(s, 0))

    def add(q: str, s: str, k: int) -> None:
        by_p[q][s] = by_p[q].get(s, 0) + k
        by_s[s][q] = by_s[s].get(q, 0) + k
        for table, key in ((by_p[q], s), (by_s[s], q)):
            if table[key] == 0:
                del table[key]

    def fill(q: str, candidates: Sequence[str]) -> None:
        for s in candidates:
            if need[q] == 0:
                return
            k = min(need[q], cap(q, s) - by_p[q].get(s, 0), left[s])
            if k > 0:
                add(q, s, k)
                need[q] -= k
                left[s] -= k

    for q in sorted(need, key=lambda n: -need[n]):
        # the secondaries with most left first (one more than needed, in case one is q)
        fill(q, heapq.nlargest(need[q] + 1, members, key=left.__getitem__))
        if need[q]:
            fill(q, sorted(members, key=lambda n: -left[n]))
    while any(need.values()):
        starts = [q for q, k in need.items() if k > 0]
        parent: dict[tuple[str, str], tuple[str, str] | None] = {("p", q): None for q in starts}
        queue = [("p", q) for q in starts]
        end = None
        while queue and end is None:
            nxt = []
            for kind, n in queue:
                if kind == "p":
                    for s in members:
                        if ("s", s) not in parent and by_p[n].get(s, 0) < cap(n, s):
                            parent["s", s] = (kind, n)
                            if left[s] > 0:
                                end = ("s", s)
                                break
                            nxt.append(("s", s))
                else:
                    for q in by_s[n]:
                        if ("p", q) not in parent:
                            parent["p", q] = (kind, n)
                            nxt.append(("p", q))
                if end is not None:
                    break
            queue = nxt
        if end is None:
            return PairFlow(None, frozenset(parent))
        node: tuple[str, str] | None = end
        left[end[1]] -= 1
        while node is not None:
            prev = parent[node]
            if prev is None:
                need[node[1]] -= 1
                break
            if node[0] == "s":  # forward edge prev(p) -> node(s)
                add(prev[1], node[1], 1)
            else:  # backward edge prev(s) -> node(p): undo one unit of node on prev
                add(node[1], prev[1], -1)
            node = prev
    pairs = {(q, s): k for q, row in by_p.items() for s, k in row.items() if k > 0}
    return PairFlow(pairs)


# --- hspace's defaults ------------------------------------------------------------------------


def spec_of(ispec: ISpec) -> Spec:
    """`rspecFromISpec`: an ipolicy spec as a resource spec (its spindle use as the disk's
    spindles)."""
    return Spec(ispec.memory_size, ispec.disk_size, ispec.cpu_count, ispec.spindle_use)


def default_template(cluster: Cluster) -> str:
    """`--disk-template`'s default: the cluster policy's first template."""
    templates = cluster.cluster_policy.disk_templates
    if not templates:
        raise InputError("null list of disk templates received from cluster")
    return templates[0]


def default_options(cluster: Cluster, **given: Any) -> SpaceOptions:
    """SpaceOptions with hspace's defaults for what is not given: the cluster policy's first
    template and its std spec's spindle use."""
    given.setdefault("disk_template", default_template(cluster))
    given.setdefault("spindle_use", cluster.cluster_policy.std.spindle_use)
    return SpaceOptions(**given)


def standard_spec(cluster: Cluster) -> Spec:
    """`--standard-alloc`'s default: the cluster policy's std spec."""
    return spec_of(cluster.cluster_policy.std)


def tier_specs(cluster: Cluster) -> tuple[Spec, ...]:
    """`--tiered-alloc`'s default: the max spec of each min/max pair, in order."""
    return tuple(spec_of(mm.max) for mm in cluster.cluster_policy.minmax)


# --- a quick count for drbd, to meet the model's bound ---------------------------------------


@dataclass(frozen=True, slots=True)
class Modes:
    """What one drbd candidate can take: as a primary-only node (x ≤ alone) or as a node that
    also backs secondaries (x ≤ backing, z ≤ min(secondaries, shared − x)); None: never."""

    name: str
    alone: int
    backing: int | None
    secondaries: int
    shared: int | None


def drbd_modes(problem: SpaceProblem) -> list[Modes]:
    """Each candidate's two ways of taking new instances, read off its rows and reserves as
    formulations/space.py states them (a node backing secondaries keeps room for one primary's
    failover: x + 1 ≤ K)."""
    mem = problem.demand.memory_mib
    out = []
    for room in problem.rooms:
        x_cap, z_cap = room.max_primaries(), room.max_secondaries()
        shared = None
        for row in room.rows:
            if row.primary and row.secondary and row.per_primary and row.cap >= 0:
                t = row.cap // row.per_primary
                shared = t if shared is None else min(shared, t)
        now = k = None
        if room.n1_checked:
            now = max((room.unallocated_mib - 1 - room.reserve_mib) // mem, -1)
            k = (room.unallocated_mib - 1) // mem
        alone = min(v for v in (x_cap, now, shared) if v is not None)
        free_limit = (
            room.memory_forth_mib
            if room.n1_checked
            else min(room.unallocated_mib, room.memory_forth_mib)
        )
        backs = [x_cap, (free_limit - 1) // mem - 1]
        if now is not None:
            backs.append(now)
        if k is not None:
            backs.append(k - 1)
        if shared is not None:
            backs.append(shared - 1)
        backing = min(backs)
        if now is not None and now < 0:
            alone, backing = 0, None
        if backing is not None and (backing < 0 or z_cap < 1):
            backing = None
        out.append(Modes(room.name, max(alone, 0), backing, z_cap, shared))
    return out


def greedy_counts(problem: SpaceProblem) -> tuple[dict[str, int], dict[str, int]]:
    """A good count of drbd instances per node (x) and of secondaries (z), group by group:
    every node primary-only at first, then nodes turned into secondary hosts (cheapest loss
    of primaries per secondary gained first) and primaries given up until every primary has
    a secondary. Not proven: the strategy compares it with the model's bound."""
    modes = {m.name: m for m in drbd_modes(problem)}
    x: dict[str, int] = {}
    z: dict[str, int] = {}
    for g in problem.groups:
        names = [r.name for r in problem.group_nodes(g)]
        xs = {n: modes[n].alone for n in names}
        zs = {n: 0 for n in names}
        deficit = sum(xs.values())

        def z_room(n: str, x_now: int) -> int:
            md = modes[n]
            cap = md.secondaries
            if md.shared is not None:
                cap = min(cap, md.shared - x_now)
            return max(cap, 0)

        switchable = [n for n in names if modes[n].backing is not None]
        switchable.sort(
            key=lambda n: (
                (modes[n].alone - modes[n].backing) / max(z_room(n, modes[n].backing), 1),
                -z_room(n, modes[n].backing),
            )
        )
        for n in switchable:
            if deficit <= 0:
                break
            md = modes[n]
            gain = z_room(n, md.backing)
            if gain <= 0:
                continue
            deficit -= (xs[n] - md.backing) + gain
            xs[n], zs[n] = md.backing, gain
        # still short: give up primaries, where that frees a secondary slot first
        order = sorted(names, key=lambda n: (zs[n] == 0, -xs[n]))
        while deficit > 0 and any(xs.values()):
            for n in order:
                if deficit <= 0:
                    break
                if xs[n] == 0:
                    continue
                xs[n] -= 1
                deficit -= 1
                if zs[n] and z_room(n, xs[n]) > zs[n]:
                    zs[n] += 1
                    deficit -= 1
        # surplus secondaries: take primaries back where that keeps every primary backed
        for n in names:
            md = modes[n]
            top = md.alone if zs[n] == 0 else md.backing
            while deficit < 0 and top is not None and xs[n] < top:
                cost = 1
                if zs[n] and z_room(n, xs[n] + 1) < zs[n]:
                    cost = 2
                if deficit + cost > 0:
                    break
                xs[n] += 1
                zs[n] = min(zs[n], z_room(n, xs[n])) if zs[n] else 0
                deficit += cost
        total_z = sum(zs.values())
        total_x = sum(xs.values())
        extra = total_z - total_x  # drop surplus secondaries, last hosts first
        for n in reversed(names):
            if extra <= 0:
                break
            cut = min(extra, zs[n])
            zs[n] -= cut
            extra -= cut
        x.update({n: v for n, v in xs.items() if v})
        z.update({n: v for n, v in zs.items() if v})
    return x, z
