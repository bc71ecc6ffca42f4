"""Rolling reboots as data: which nodes may reboot together, and what moves when they do
(docs/roll.md, "The question").

A *round* is a set of considered nodes rebooted at once. Before it, every instance leaves the
round's nodes as hroller has it (Program/Hroller.hs), each round starting from the cluster as
loaded (instances return to their nodes after each round):

* non-redundant instances (no secondary) move to online nodes of their node's group outside
  the round, with htools' hard checks (`addPriEx True`: memory, local disk, free spindles
  under exclusive storage), unless `--ignore-non-redundant`;
* with `--full-evacuation`, or `--memory-aware`, drbd primaries migrate to their secondary
  (`migrate`), whose unallocated memory must take them;
* with `--full-evacuation`, every drbd instance with a node in the round gets a new secondary
  outside the round in that node's group (`replaceSecondary`, `addSecEx True`).

Two nodes conflict when one is an instance's primary and the other its secondary, and, unless
`--memory-aware` or `--offline-maintenance`, when instances on both share a secondary
(hroller's clique, `Node.mkRebootNodeGraph`). Whether a round is possible depends on the
round alone, and every subset of a possible round is possible (a node leaving the round only
adds room: it is no instance's partner in the round), so the fewest rounds is a colouring
with a packing per colour (formulations/roll.py, solvers/strategies/roll.py).

`first_fit_round` packs one round quickly (a packing found is its own proof); `check_plan` is
the independent checker: from the cluster alone it recomputes the considered nodes and the
conflicts, and replays every round's moves with htools' own adds.

Instances are named by index where names may repeat (htools accepts two instances of one
name; Ganeti's hroller-full.data has them).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from model.cluster import Cluster, read_name
from model.errors import CheckFailedError, InfeasibleError
from model.htools.hroller import NO_SECONDARY, Loaded, load
from model.resources import (
    FailMode,
    NodeState,
    TagRules,
    add_primary,
    add_secondary,
    demand_of,
    loaded_states,
    remove_primary,
    remove_secondary,
)

PRIMARY = "primary"  # a non-redundant instance moves to another node
SECONDARY = "secondary"  # a drbd instance's secondary is replaced (--full-evacuation)
MIGRATE = "migrate"  # a drbd primary moves to its secondary


@dataclass(frozen=True)
class RollRules:
    """Which of hroller's options shape the rounds, and exalloc's `--memory-aware`."""

    offline_maintenance: bool = False
    ignore_non_redundant: bool = False
    full_evacuation: bool = False
    memory_aware: bool = False

    @property
    def migrations(self) -> bool:
        """Whether drbd primaries migrate to their secondaries and are counted there."""
        return self.memory_aware or self.full_evacuation

    @property
    def shared_secondary_conflicts(self) -> bool:
        return not (self.memory_aware or self.offline_maintenance)


@dataclass(frozen=True, slots=True)
class Item:
    """An instance that must leave a node of the round: a non-redundant primary, or a drbd
    secondary to replace. `forbidden` is the node it may not go to (its primary)."""

    index: int
    name: str
    kind: str  # PRIMARY or SECONDARY
    source: str
    group: str
    memory_mib: int  # counted memory (0 for stopped instances; 0 for secondaries)
    local: bool
    disk_mib: int
    spindles: int | None
    forbidden: str | None = None

    def shape(self) -> tuple:
        """What a packing sees of the item: equal shapes are interchangeable."""
        return (self.kind, self.group, self.memory_mib, self.local, self.disk_mib,
                self.spindles, self.forbidden)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Migration:
    index: int
    name: str
    primary: str
    secondary: str
    memory_mib: int


@dataclass(frozen=True, slots=True)
class Room:
    """What an online node can still take: `addPriEx True` keeps unallocated memory and free
    disk above 0 and free spindles (exclusive storage) at 0 or more."""

    memory_mib: int  # unallocated - 1
    disk_mib: int  # free disk - 1
    spindles: int | None  # free spindles under exclusive storage, else None
    group: str


@dataclass(frozen=True)
class RollProblem:
    rules: RollRules
    nodes: tuple[str, ...]  # considered nodes, in the cluster's order
    master: str | None
    cliques: tuple[tuple[str, ...], ...]  # sets of pairwise conflicting considered nodes
    edges: tuple[tuple[str, str], ...]  # conflicts inside no clique
    items: Mapping[str, tuple[Item, ...]]  # by considered node: what leaves it
    migrations: Mapping[str, tuple[Migration, ...]]  # by considered node
    rooms: Mapping[str, Room]  # every online node
    groups: Mapping[str, tuple[str, ...]]  # online nodes by group uuid, in order

    @property
    def conflict_pairs(self) -> set[frozenset[str]]:
        pairs = {frozenset(e) for e in self.edges}
        for q in self.cliques:
            pairs |= {frozenset((a, b)) for i, a in enumerate(q) for b in q[i + 1 :]}
        return pairs

    @cached_property
    def by_room(self) -> dict[tuple[str, int], list[tuple[int, str]]]:
        """Each group's online nodes by room, most first ((−room, node), a heap as it is),
        for memory (axis 0) and disk (axis 1)."""
        out = {}
        for g, ns in self.groups.items():
            for axis in (0, 1):
                rooms = [(self.rooms[n].memory_mib, self.rooms[n].disk_mib) for n in ns]
                out[g, axis] = sorted((-r[axis], n) for r, n in zip(rooms, ns, strict=True))
        return out

    def neighbours(self) -> dict[str, set[str]]:
        adj: dict[str, set[str]] = {v: set() for v in self.nodes}
        for pair in self.conflict_pairs:
            a, b = tuple(pair)
            adj[a].add(b)
            adj[b].add(a)
        return adj

    def loads(self) -> dict[str, dict[str, int]]:
        """Migration memory by receiving node, then by considered primary node."""
        out: dict[str, dict[str, int]] = {}
        for v, mgs in self.migrations.items():
            for mg in mgs:
                per = out.setdefault(mg.secondary, {})
                per[v] = per.get(v, 0) + mg.memory_mib
        return out

    def restricted(self, keep: Iterable[str]) -> RollProblem:
        """The same question for a subset of the considered nodes (the others in no round):
        a relaxation, since every round of a plan of all nodes, less the left-out nodes, is
        a possible round (rooms and groups stay: the left-out nodes still take moves)."""
        kept = set(keep)
        nodes = tuple(v for v in self.nodes if v in kept)
        cliques = []
        edges = [e for e in self.edges if e[0] in kept and e[1] in kept]
        for q in self.cliques:
            sub = tuple(v for v in q if v in kept)
            if len(sub) > 2:
                cliques.append(sub)
            elif len(sub) == 2:
                edges.append((sub[0], sub[1]))
        return replace(
            self,
            nodes=nodes,
            master=self.master if self.master in kept else None,
            cliques=tuple(cliques),
            edges=tuple(dict.fromkeys(edges)),
            items={v: i for v, i in self.items.items() if v in kept},
            migrations={v: m for v, m in self.migrations.items() if v in kept},
        )

    def memory_bound_nodes(self) -> set[str]:
        """Considered nodes whose round depends on a receiving node's memory: receiving
        nodes whose considered primaries' migrations exceed their room all together, and
        those primaries."""
        out: set[str] = set()
        for s, per in self.loads().items():
            if sum(per.values()) > self.rooms[s].memory_mib:
                out |= {p for p, w in per.items() if w > 0}
                out.add(s)
        return out & set(self.nodes)


def peel(problem: RollProblem, rounds: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The nodes left once those with fewer than `rounds` conflicting nodes left are taken
    out, one by one (the `rounds`-core of the conflict graph), keeping every node whose round
    depends on a receiving node's memory; and the nodes taken out, in the order taken.
    Put back in the reverse order, each taken-out node finds a round none of its
    conflicting nodes is in, whatever rounds the others have (its migrations fit whatever
    round it joins); its round's packing is checked then."""
    adj = {v: set(ws) for v, ws in problem.neighbours().items()}
    fixed = problem.memory_bound_nodes()
    stack = [v for v in problem.nodes if len(adj[v]) < rounds and v not in fixed]
    out: list[str] = []
    gone: set[str] = set()
    while stack:
        v = stack.pop()
        if v in gone:
            continue
        gone.add(v)
        out.append(v)
        for w in adj[v]:
            adj[w].discard(v)
            if w not in gone and w not in fixed and len(adj[w]) < rounds:
                stack.append(w)
    return tuple(v for v in problem.nodes if v not in gone), tuple(out)


def conflicts_of(
    cluster: Cluster, considered: Iterable[str], rules: RollRules
) -> tuple[tuple[tuple[str, ...], ...], tuple[tuple[str, str], ...]]:
    """hroller's conflicts among the considered nodes, as cliques and leftover edges: each
    instance's primary and secondary (`instancesToEdges`: forthcoming ones too) and, for
    `shared_secondary_conflicts`, the primaries of the (real) instances of each secondary
    with that secondary (`nodeToSharedSecondaryEdge`, over every node of the cluster)."""
    keep = set(considered)
    order = {n.name: k for k, n in enumerate(cluster.nodes)}
    pairs: set[tuple[str, str]] = set()
    members: dict[str, set[str]] = {}
    for inst in cluster.instances:
        if not inst.secondary:
            continue
        p, s = inst.primary, inst.secondary
        if p in keep and s in keep:
            pairs.add((p, s) if order[p] < order[s] else (s, p))
        if rules.shared_secondary_conflicts and not inst.forthcoming and p in keep:
            members.setdefault(s, set()).add(p)
    cliques: set[tuple[str, ...]] = set()
    for s, prims in members.items():
        q = prims | ({s} if s in keep else set())
        if len(q) >= 2:
            cliques.add(tuple(sorted(q, key=order.__getitem__)))
    covered = {frozenset((a, b)) for q in cliques for i, a in enumerate(q) for b in q[i + 1 :]}
    edges = tuple(
        sorted(
            (e for e in pairs if frozenset(e) not in covered),
            key=lambda e: (order[e[0]], order[e[1]]),
        )
    )
    return tuple(sorted(cliques, key=lambda q: [order[n] for n in q])), edges


def _room(st: NodeState) -> Room:
    return Room(
        st.unallocated_memory_mib - 1,
        st.free_disk_mib - 1,
        st.free_spindles if st.exclusive_storage else None,
        st.group_uuid,
    )


def problem_of(
    cluster: Cluster,
    considered: Sequence[str],
    rules: RollRules,
    offline: Iterable[str] = (),
    loaded: Loaded | None = None,
) -> RollProblem:
    """The question for the considered nodes (hroller's filters applied by the caller), with
    the -O nodes offline; `loaded` is the cluster as hroller's prelude loaded it, if at hand."""
    if loaded is None:
        loaded = load(cluster, set(offline))
    names = loaded.names
    states = {names[k]: r.state for k, r in enumerate(loaded.records)}
    online = [n for n in names if not states[n].offline]
    online_set = set(online)
    items: dict[str, list[Item]] = {v: [] for v in considered}
    migrations: dict[str, list[Migration]] = {v: [] for v in considered}
    keep = set(considered)
    for k, rec in enumerate(loaded.records):
        v = names[k]
        if v not in keep:
            continue
        group = rec.state.group_uuid
        for idx in rec.plist:
            d = loaded.demands[idx]
            s = loaded.places[idx][1]
            memory = d.memory_mib if d.uses_memory else 0
            if s == NO_SECONDARY:
                if not rules.ignore_non_redundant:
                    items[v].append(_item(loaded, idx, PRIMARY, v, group, memory, None))
                continue
            secondary = names[s]
            if secondary not in online_set:
                continue  # nowhere to migrate to: it goes down with its primary, as in hroller
            if rules.migrations:
                migrations[v].append(
                    Migration(idx, loaded.instance_names[idx], v, secondary, memory)
                )
            if rules.full_evacuation:
                items[v].append(_item(loaded, idx, SECONDARY, v, group, 0, secondary))
        if rules.full_evacuation:
            for idx in rec.slist:
                p = names[loaded.places[idx][0]]
                items[v].append(_item(loaded, idx, SECONDARY, v, group, 0, p))
    cliques, edges = conflicts_of(cluster, considered, rules)
    groups: dict[str, list[str]] = {}
    for n in online:
        groups.setdefault(states[n].group_uuid, []).append(n)
    masters = [n.name for n in cluster.nodes if n.master and n.name in keep]
    return RollProblem(
        rules=rules,
        nodes=tuple(considered),
        master=masters[0] if masters else None,
        cliques=cliques,
        edges=edges,
        items={v: tuple(i) for v, i in items.items()},
        migrations={v: tuple(m) for v, m in migrations.items()},
        rooms={n: _room(states[n]) for n in online},
        groups={g: tuple(ns) for g, ns in groups.items()},
    )


def _item(
    loaded: Loaded, idx: int, kind: str, source: str, group: str, memory: int, forbidden: str | None
) -> Item:
    d = loaded.demands[idx]
    local = d.uses_local_storage or kind == SECONDARY
    return Item(
        index=idx,
        name=loaded.instance_names[idx],
        kind=kind,
        source=source,
        group=group,
        memory_mib=memory,
        local=local,
        disk_mib=d.disk_mib if local else 0,
        spindles=d.disk_spindles,
        forbidden=forbidden,
    )


# --- one round --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Step:
    """One move of a round: an item to its new node, or a migration (`target` = secondary)."""

    kind: str  # PRIMARY, SECONDARY or MIGRATE
    index: int
    name: str
    source: str
    target: str


@dataclass(frozen=True)
class RoundPlan:
    nodes: tuple[str, ...]
    steps: tuple[Step, ...]


class Rooms:
    """What each online node outside a round can still take ([memory, disk, spindles]),
    copied from the problem only for the nodes a round touches (a round of one node on
    2,000 nodes touches a handful)."""

    def __init__(self, problem: RollProblem, inside: set[str]) -> None:
        self._rooms = problem.rooms
        self.inside = inside
        self._copies: dict[str, list[int | None]] = {}
        self.changed: set[str] = set()

    def __contains__(self, node: str) -> bool:
        return node in self._rooms and node not in self.inside

    def __getitem__(self, node: str) -> list[int | None]:
        hit = self._copies.get(node)
        if hit is None:
            if node not in self:
                raise KeyError(node)
            r = self._rooms[node]
            hit = self._copies[node] = [r.memory_mib, r.disk_mib, r.spindles]
        return hit

    def all(self) -> dict[str, list[int | None]]:
        """Every node's room (for the exact packing)."""
        return {n: self[n] for n in self._rooms if n in self}


def rooms_after_migrations(
    problem: RollProblem, members: Iterable[str]
) -> tuple[Rooms, list[Step]] | None:
    """Every online node outside the round with its room once the round's drbd primaries
    have migrated there; None when a receiving node cannot take them (memory, or a free
    disk at 0)."""
    inside = set(members)
    room = Rooms(problem, inside)
    steps = []
    for v in members if isinstance(members, Sequence) else sorted(inside):
        if problem.migrations.get(v) and problem.rooms[v].disk_mib < 0:
            return None  # htools' migrate re-adds the disk as a secondary here: free disk > 0
        for mg in problem.migrations.get(v, ()):
            if mg.secondary not in room:
                return None
            r = room[mg.secondary]
            r[0] -= mg.memory_mib  # type: ignore[operator]
            room.changed.add(mg.secondary)
            if r[0] < 0 or r[1] < 0:  # type: ignore[operator]
                return None
            steps.append(Step(MIGRATE, mg.index, mg.name, v, mg.secondary))
    return room, steps


def fits(room: Sequence[int | None], item: Item) -> bool:
    """Whether a node with `room` left takes the item (its hard checks)."""
    mem, dsk, spn = room
    if item.kind == PRIMARY and mem < item.memory_mib:  # type: ignore[operator]
        return False
    if item.local:
        if dsk < item.disk_mib:  # type: ignore[operator]
            return False
        if spn is not None and (item.spindles is None or spn < item.spindles):
            return False
    return True


def take(room: list[int | None], item: Item) -> None:
    if item.kind == PRIMARY:
        room[0] -= item.memory_mib  # type: ignore[operator]
    if item.local:
        room[1] -= item.disk_mib  # type: ignore[operator]
        if room[2] is not None and item.spindles is not None:
            room[2] -= item.spindles


def round_items(problem: RollProblem, members: Iterable[str]) -> list[Item]:
    return [i for v in members for i in problem.items.get(v, ())]


def first_fit_round(problem: RollProblem, members: Sequence[str]) -> RoundPlan | None:
    """A packing of the round by first fit decreasing: primaries by memory, then secondaries
    by disk, each on the node of its group with the most room of that kind left. None when
    it gets stuck, which proves nothing (the strategy then solves the packing exactly)."""
    after = rooms_after_migrations(problem, members)
    if after is None:
        return None
    room, steps = after
    items = round_items(problem, members)
    items.sort(key=lambda i: (i.kind != PRIMARY, -i.memory_mib, -i.disk_mib, i.index))
    heaps: dict[tuple[str, int], list[tuple[int, str]]] = {}

    def heap(group: str, axis: int) -> list[tuple[int, str]]:
        key = (group, axis)
        if key not in heaps:  # a sorted list is a heap: the problem's order, less the round
            h = [e for e in problem.by_room[key] if e[1] not in room.inside]
            for n in room.changed:
                if problem.rooms[n].group == group:
                    heapq.heappush(h, (-room[n][axis], n))  # type: ignore[operator]
            heaps[key] = h
        return heaps[key]

    for item in items:
        axis = 0 if item.kind == PRIMARY else 1
        h = heap(item.group, axis)
        skipped, found = [], None
        while h:
            neg, n = heapq.heappop(h)
            if -neg != room[n][axis]:
                continue  # stale
            best = room[n][axis]
            need = item.memory_mib if axis == 0 else item.disk_mib
            if best < need:  # type: ignore[operator]
                skipped.append((neg, n))
                break
            if n == item.forbidden or not fits(room[n], item):
                skipped.append((neg, n))
                continue
            found = n
            break
        for entry in skipped:
            heapq.heappush(h, entry)
        if found is None:
            return None
        take(room[found], item)
        for ax in (0, 1):
            if (item.group, ax) in heaps:
                heapq.heappush(heaps[item.group, ax], (-room[found][ax], found))  # type: ignore[operator]
        steps.append(Step(item.kind, item.index, item.name, item.source, found))
    return RoundPlan(tuple(members), tuple(steps))


# --- bounds -----------------------------------------------------------------------------------


def largest_clique(problem: RollProblem) -> tuple[str, ...]:
    """A large clique of the conflict graph (its size bounds the rounds from below): the
    largest listed clique, grown greedily, or a greedy clique from each node."""
    adj = problem.neighbours()
    order = {v: k for k, v in enumerate(problem.nodes)}
    seeds = [list(q) for q in problem.cliques] or [[v] for v in problem.nodes]
    best: list[str] = []
    for seed in sorted(seeds, key=len, reverse=True)[:200]:
        q = list(seed)
        common = set.intersection(*(adj[v] for v in q)) if q else set()
        while common:
            v = max(common, key=lambda w: (len(adj[w] & common), -order[w]))
            q.append(v)
            common &= adj[v]
        if len(q) > len(best):
            best = q
    return tuple(sorted(best, key=order.__getitem__))


def memory_bound(problem: RollProblem) -> tuple[int, str | None]:
    """Rounds every receiving node's memory forces: its considered primaries' migrations
    must be split into rounds each fitting its room (at least Σ load / room of them, and
    one per primary needing more than half the room), plus a round of its own if it reboots
    too. (rounds, the node that forces them)."""
    best, where = 0, None
    considered = set(problem.nodes)
    for s, per in problem.loads().items():
        loads = [m for m in per.values() if m > 0]
        if not loads:
            continue
        cap = problem.rooms[s].memory_mib
        if cap <= 0:
            continue  # infeasible: said by the round check of the primary alone
        rounds = max(math.ceil(sum(loads) / cap), sum(1 for m in loads if 2 * m > cap))
        rounds += 1 if s in considered else 0
        if rounds > best:
            best, where = rounds, s
    return best, where


# --- the checker ------------------------------------------------------------------------------


@dataclass
class _Replay:
    states: dict[str, NodeState]
    places: dict[int, tuple[str, str | None]] = field(default_factory=dict)


def check_plan(
    cluster: Cluster,
    considered: Sequence[str],
    rules: RollRules,
    rounds: Sequence[RoundPlan],
    offline: Iterable[str] = (),
) -> None:
    """The independent check of a plan, from the cluster alone: every considered node in
    exactly one round, no instance's primary and secondary (nor, with the shared-secondary
    rule, two primaries of one secondary) in one round, and each round's steps replayed with
    htools' adds on the cluster as loaded, leaving the round's nodes clear of what must
    leave them. Raises CheckFailedError naming the first broken rule."""
    offline = set(offline)
    seen: dict[str, int] = {}
    for k, r in enumerate(rounds):
        for v in r.nodes:
            if v in seen:
                raise CheckFailedError(f"node {v} is in rounds {seen[v] + 1} and {k + 1}")
            seen[v] = k
    missing = [v for v in considered if v not in seen]
    extra = [v for v in seen if v not in set(considered)]
    if missing or extra:
        raise CheckFailedError(
            f"the rounds leave out {', '.join(missing) or 'no node'} and add "
            f"{', '.join(extra) or 'no node'}"
        )
    for inst in cluster.instances:
        s = inst.secondary
        if s and s in seen and inst.primary in seen and seen[s] == seen[inst.primary]:
            raise CheckFailedError(
                f"{inst.primary} and {s}, primary and secondary of {inst.name}, reboot together"
            )
    if rules.shared_secondary_conflicts:
        by_round: dict[tuple[str, int], str] = {}
        for inst in cluster.instances:
            p = inst.primary
            if inst.secondary and not inst.forthcoming and p in seen:
                other = by_round.setdefault((inst.secondary, seen[p]), p)
                if other != p:
                    raise CheckFailedError(
                        f"{other} and {p} share the secondary {inst.secondary} and reboot together"
                    )
    rules_tags = TagRules.of(cluster)
    _, base, _ = loaded_states(cluster)
    base = {n: s for n, s in base.items()}
    for name in offline:
        if name in base:
            base[name] = replace(base[name], offline=True)
    for k, r in enumerate(rounds):
        _check_round(cluster, rules, rules_tags, base, r, k + 1)


def _check_round(
    cluster: Cluster,
    rules: RollRules,
    tag_rules: TagRules,
    base: Mapping[str, NodeState],
    r: RoundPlan,
    number: int,
) -> None:
    inside = set(r.nodes)
    states = dict(base)
    where = {k: (i.primary, i.secondary) for k, i in enumerate(cluster.instances)}
    demands = {}

    def demand(idx: int):  # noqa: ANN202
        if idx not in demands:
            demands[idx] = demand_of(cluster.instances[idx], tag_rules)
        return demands[idx]

    def fail(message: str) -> None:
        raise CheckFailedError(f"round {number}: {message}")

    for step in r.steps:
        idx = step.index
        if not 0 <= idx < len(cluster.instances) or cluster.instances[idx].name != step.name:
            fail(f"no instance {step.name} at index {idx}")
        p, s = where[idx]
        d = demand(idx)
        t = step.target
        if t not in states or states[t].offline:
            fail(f"{step.name} goes to {t}, which is not an online node")
        if t in inside:
            fail(f"{step.name} goes to {t}, which reboots in this round")
        if step.kind == MIGRATE:
            if s != t or p not in inside:
                fail(f"{step.name} cannot migrate to {t}")
            sec = remove_secondary(states[s], d, p)
            new = add_primary(sec, d, strict=False)
            if isinstance(new, FailMode):
                fail(f"{step.name} cannot migrate to {t} ({new}): {_memory_left(sec, d)}")
            old = add_secondary(remove_primary(states[p], d), d, t, strict=False)
            if isinstance(old, FailMode):
                fail(f"{step.name} cannot migrate off {p} ({old})")
            states[t], states[p] = new, old
            where[idx] = (t, p)
            continue
        source = step.source
        if states[t].group_uuid != states[source].group_uuid:
            fail(f"{step.name} goes from {source} to {t}, another group")
        if step.kind == PRIMARY:
            if p != source or s is not None:
                fail(f"{step.name} is no non-redundant instance of {source}")
            new = add_primary(states[t], d, strict=False)
            if isinstance(new, FailMode):
                fail(f"{step.name} does not fit on {t} ({new})")
            states[t], states[p] = new, remove_primary(states[p], d)
            where[idx] = (t, None)
        elif step.kind == SECONDARY:
            if source not in (p, s) or s is None:
                fail(f"{step.name} has no node {source} to leave")
            primary = p if s == source else s
            if t == primary:
                fail(f"{step.name}'s new secondary {t} is its primary")
            new = add_secondary(states[t], d, primary, strict=False)
            if isinstance(new, FailMode):
                fail(f"{step.name}'s secondary does not fit on {t} ({new})")
            states[t] = new
            where[idx] = (primary, t)
        else:
            fail(f"unknown step {step.kind!r}")
    for idx, inst in enumerate(cluster.instances):
        if inst.forthcoming:
            continue
        p, s = where[idx]
        if p in inside and s is None and not rules.ignore_non_redundant:
            fail(f"{inst.name} stays on {p}, which reboots")
        online_secondary = s is not None and not base[s].offline
        if rules.migrations and p in inside and online_secondary:
            fail(f"{inst.name} does not migrate off {p}")
        if rules.full_evacuation and s in inside and not base[p].offline:
            fail(f"{inst.name} keeps its secondary on {s}, which reboots")


def _memory_left(state: NodeState, d) -> str:  # noqa: ANN001
    return f"{d.memory_mib} MiB asked, {state.unallocated_memory_mib} MiB unallocated"


def unreachable(problem: RollProblem, node: str) -> tuple[str, str]:
    """Why a node can reboot in no round at all: hroller's message for that stage, and
    exalloc's reason."""
    migrate = "Failed to migrate instances off nodes"
    if problem.migrations.get(node) and problem.rooms[node].disk_mib < 0:
        return migrate, (
            f"node {node} can never reboot: its free disk ({problem.rooms[node].disk_mib + 1} "
            "MiB) is too small for htools to migrate its drbd instances off it"
        )
    for mg in problem.migrations.get(node, ()):
        room = problem.rooms[mg.secondary]
        if mg.memory_mib > room.memory_mib or room.disk_mib < 0:
            # the room is one below the unallocated memory: htools' adds keep some free
            # (Node.addPriEx refuses a new free memory <= 0), so an equal size does not fit
            exact_fit = mg.memory_mib == room.memory_mib + 1
            return migrate, (
                f"node {node} can never reboot: its instance {mg.name} needs "
                f"{mg.memory_mib} MiB on {mg.secondary}, which has {room.memory_mib + 1} MiB "
                "unallocated"
                + (
                    ", and htools moves an instance only where memory stays free after it"
                    if exact_fit
                    else ""
                )
            )
    if any(i.kind == PRIMARY for i in problem.items.get(node, ())):
        what = "Not enough capacity to move non-redundant instances"
    else:
        what = "Not enough capacity to move secondaries"
    return what, f"node {node} can never reboot: what must leave it fits nowhere else in its group"


def infeasible(problem: RollProblem, nodes: Sequence[str]) -> InfeasibleError:
    """hroller's error for a node no round can take, with exalloc's reason."""
    what, why = unreachable(problem, nodes[0])
    more = f" (and {len(nodes) - 1} more)" if len(nodes) > 1 else ""
    return InfeasibleError(f"{what}: {why}{more}")


# --- output -----------------------------------------------------------------------------------


def output_order(rounds: Sequence[RoundPlan], masters: set[str]) -> list[RoundPlan]:
    """hroller's order: larger rounds first (stable), then `masterLast`: the round holding a
    master after the others, the master at its end."""
    ordered = sorted(rounds, key=lambda r: -len(r.nodes))
    plain = [r for r in ordered if not masters & set(r.nodes)]
    held = [r for r in ordered if masters & set(r.nodes)]
    out = plain
    for r in held:
        nodes = [v for v in r.nodes if v not in masters] + [v for v in r.nodes if v in masters]
        out.append(RoundPlan(tuple(nodes), r.steps))
    return out


def round_moves(
    cluster: Cluster, r: RoundPlan, *, swaps: bool = False
) -> list[tuple[str, str, str | None]]:
    """`--print-moves`' lines of a round as hroller computes them (`getMoves`): each instance
    whose nodes changed, in input order, with its new primary and secondary; a plain swap of
    its two nodes (a migration) is not a move unless `swaps` (memory-aware plans rest on
    their migrations, so they are shown)."""
    where: dict[int, tuple[str, str | None]] = {}
    for step in r.steps:
        inst = cluster.instances[step.index]
        p, s = where.get(step.index, (inst.primary, inst.secondary))
        if step.kind == PRIMARY:
            where[step.index] = (step.target, None)
        elif step.kind == MIGRATE:
            where[step.index] = (step.target, p)
        else:
            where[step.index] = (p if s == step.source else s, step.target)  # type: ignore[assignment]
    out = []
    for idx in sorted(where):
        inst = cluster.instances[idx]
        p2, s2 = where[idx]
        if (p2, s2) == (inst.primary, inst.secondary):
            continue
        if inst.secondary and p2 == inst.secondary and s2 == inst.primary and not swaps:
            continue
        out.append((read_name(inst.name), p2, s2 if inst.secondary else None))
    return out
