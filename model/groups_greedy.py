"""The design's own super-cluster algorithms, greedy, as the baselines of exalloc's exact ones
(seed "Synchronising htools to Ganeti 2.3", docs/groups.md "The greedy baselines").

Htools 3.0.2 implements none of them; they are written here as the design describes them, on
htools' own pieces (model/htools): the greedy global N+1 check (GlobalN1.hs) decides health,
hail's allocation (`find_allocation`: the group's candidates scored by the group score, the
N+1 check consulted in score order) places each instance in a group, and hail's node-evacuate
(Evacuate.hs) evacuates within a group. Every step commits to its choice.

* `redistribute`: per unhealthy group, its problem instances in the design's order (on offline
  nodes, secondaries of N+1 failing nodes, primaries of N+1 failing nodes) are removed one by
  one until the group is healthy, then each is allocated in the healthy groups of its
  partition; the group is repaired only if all of them find a place.
* `compress`: groups connected to a peer whose used resources are below the free resources of
  the rest of the super cluster, each emptied instance by instance into its healthy peer
  groups (as in redistribution: an unhealthy group takes nothing).
* `evacuate`: hail's node-evacuate inside the group, then each instance it could not place
  allocated in a healthy peer group (the design's "(remote group, nodes)").
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from model.groups import (
    NO_RESOURCES,
    Relocation,
    Resources,
    Storage,
    group_nodes,
    group_refusal,
    hosts,
    instances_in,
    used_and_free,
)
from model.htools.allocate import POLICY_ORDER, AllocOptions, find_allocation
from model.htools.evacuate import CHANGE_ALL, try_node_evac
from model.htools.global_n1 import GreedyGlobalN1, can_evacuate
from model.htools.metrics import RowCache
from model.n1 import offline_hosts
from model.state import ClusterState

GREEDY_N1 = AllocOptions(capacity=GreedyGlobalN1())


class GreedyOutOfTime(Exception):
    """The deadline passed in the greedy walk (htools' global N+1 of a group, node by node,
    for each instance the walk removes: minutes on 500 nodes, benchmarks/time_limits.py)."""


def _in_time(deadline: float | None) -> None:
    if deadline is not None and time.perf_counter() >= deadline:
        raise GreedyOutOfTime("the time limit ran out in the greedy walk")


class _Paced:
    """The steps of one walk under a deadline: the next step is not started where the longest
    step so far would end past it. One step (a node's htools evacuation, an instance's
    allocation with hail's global N+1 check) is not cut inside, and took 6-7 s on bench_groups'
    500-node super cluster: looked at only before each step, `compress --time-limit 30` ended
    after 35.3 s (benchmarks/time_limits.py, issue 40, item 4)."""

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.longest_s = 0.0
        self._last: float | None = None

    def step(self) -> None:
        if self.deadline is None:
            return
        now = time.perf_counter()
        if self._last is not None:
            self.longest_s = max(self.longest_s, now - self._last)
        self._last = now
        if now + self.longest_s >= self.deadline:
            raise GreedyOutOfTime("the time limit ran out in the greedy walk")


def failing_nodes(state: ClusterState, group: str, deadline: float | None = None) -> list[str]:
    """Nodes of the group htools' greedy walk cannot evacuate (GlobalN1.canEvacuateNode on the
    group's node list, as hcheck runs it; offline nodes are targets there, as in htools).
    Past `deadline` (perf_counter; None: none) GreedyOutOfTime, looked at before each node
    (`_Paced`: none started that the longest so far would carry past it)."""
    scope = group_nodes(state, group)
    cache = RowCache()
    out = []
    paced = _Paced(deadline)
    for n in scope:
        paced.step()
        try:
            why = can_evacuate(state, n, scope, cache, shortcut=False)
        except KeyError:  # a drbd secondary outside the group: hcheck crashes (IntMap.!)
            why = "secondary outside the group"
        if why is not None:
            out.append(n)
    return out


def healthy(state: ClusterState, group: str, deadline: float | None = None) -> bool:
    """The design's health: no offline node hosting instances, no node failing N+1."""
    nodes = group_nodes(state, group)
    return not offline_hosts(state, nodes) and not failing_nodes(state, group, deadline)


@dataclass(frozen=True)
class Placed:
    """Where the standard allocation put an instance, or why it could not."""

    relocation: Relocation | None
    state: ClusterState
    why: str | None = None


def allocate_elsewhere(
    state: ClusterState, storage: Storage, name: str, groups: Sequence[str]
) -> Placed:
    """The standard allocation of an existing instance in one of `groups` (its partition):
    hail's allocation in each group that can take it, the best group by (allocation policy,
    score) as hail ranks groups (later group on ties); the instance leaves its nodes first."""
    old_p, old_s = state.locations[name]
    d = state.demands[name]
    count = 2 if d.has_secondary else 1
    without = state.remove(name)
    record = state.cluster.instance_index.get(name) or state.added.get(name)
    best = None
    reasons = []
    for g in groups:
        why = group_refusal(state, storage, name, g)
        if why is not None:
            reasons.append(why)
            continue
        group = state.cluster.group(g)
        sol = find_allocation(GREEDY_N1, without, group, d, count)
        if isinstance(sol, str) or sol.solution is None:
            reasons.append(f"group {group.name}: {sol if isinstance(sol, str) else 'no node'}")
            continue
        key = (POLICY_ORDER[group.alloc_policy], sol.solution.score)
        if best is None or not best[0] < key:
            best = (key, sol)
    if best is None:
        return Placed(None, state, "; ".join(reasons) or "no peer group")
    pl = best[1].solution
    after = without.placed(record if record is not None else d, pl.primary, pl.secondary)
    return Placed(Relocation(name, pl.primary, pl.secondary, old_p, old_s), after)


@dataclass
class GreedyResult:
    """Relocations made, and per group (or instance) what happened."""

    relocations: list[Relocation] = field(default_factory=list)
    state: ClusterState | None = None
    groups: dict[str, str] = field(default_factory=dict)  # uuid -> "repaired", "failed: ..."
    failed: list[tuple[str, str]] = field(default_factory=list)  # instance, why
    stopped: str | None = None  # why the walk stopped short (the time limit), else None

    @property
    def moves(self) -> int:
        return len(self.relocations)


def problem_instances(state: ClusterState, group: str, deadline: float | None = None) -> list[str]:
    """The design's order: instances on offline nodes, secondaries of N+1 failing nodes,
    primaries of N+1 failing nodes (each once, in the cluster's order within a class)."""
    nodes = group_nodes(state, group)
    offline = [n for n in nodes if state.nodes[n].offline]
    failing = failing_nodes(state, group, deadline)
    out: list[str] = []
    for name in hosts(state, offline):
        out.append(name)
    for n in failing:
        out += [i for i in state.nodes[n].secondaries if i not in out]
    for n in failing:
        out += [i for i in state.nodes[n].primaries if i not in out]
    return out


def redistribute(
    state: ClusterState, storage: Storage, deadline: float | None = None
) -> GreedyResult:
    """The design's redistribution (module docstring). Past `deadline` (perf_counter) the
    walk stops: the groups repaired so far and their relocations, `stopped` saying why."""
    result = GreedyResult(state=state)
    try:
        _redistribute(state, storage, deadline, result)
    except GreedyOutOfTime as cut:
        result.stopped = str(cut)
    return result


def _redistribute(
    state: ClusterState, storage: Storage, deadline: float | None, result: GreedyResult
) -> None:
    groups = [g.uuid for g in state.cluster.groups if group_nodes(state, g.uuid)]
    connected = [g for g in groups if not storage.alone(g)]
    good = [g for g in connected if healthy(state, g, deadline)]
    bad = [g for g in connected if g not in good]
    for g in groups:
        if g not in connected and not healthy(state, g, deadline):
            result.groups[g] = "failed: alone in its partitions"
    if not good or not bad:
        return
    cur = state
    for g in bad:
        peers = [p for p in storage.peers(g) if p in good]
        trial = cur
        removed: list[str] = []
        for name in problem_instances(cur, g, deadline):
            if healthy(trial, g, deadline):
                break
            trial = trial.remove(name)
            removed.append(name)
        if not healthy(trial, g, deadline):
            result.groups[g] = "failed: still unhealthy with every problem instance removed"
            continue
        moves, placed_state, why = _relocate_each(cur, storage, removed, peers, deadline)
        if why is not None:
            result.groups[g] = f"failed: {why}"
            result.failed.append((removed[0], why))
            continue
        cur = placed_state
        result.relocations += moves
        result.groups[g] = "repaired"
        result.state = cur
    result.state = cur


def compression_candidates(state: ClusterState, storage: Storage) -> list[str]:
    """Groups connected to a peer whose used resources fit in the free resources of the rest
    of the super cluster (the design's candidate selection)."""
    groups = [g.uuid for g in state.cluster.groups if group_nodes(state, g.uuid)]
    stats = {g: used_and_free(state, g) for g in groups}
    total_free = sum((f for _, f in stats.values()), NO_RESOURCES)
    return [
        g for g in groups if not storage.alone(g) and stats[g][0].fits_in(total_free - stats[g][1])
    ]


def compress(
    state: ClusterState,
    storage: Storage,
    only: Iterable[str] | None = None,
    deadline: float | None = None,
) -> dict:
    """Per candidate group: "evacuable" with its relocations, or why not (the design's
    compression; the caller picks the group with the most free resources). Past `deadline`
    (perf_counter) the groups not done say GreedyOutOfTime's words instead."""
    wanted = set(only) if only is not None else None
    out: dict[str, tuple[list[Relocation], str | None]] = {}
    for g in compression_candidates(state, storage):
        if wanted is not None and g not in wanted:
            continue
        try:
            out[g] = _compress_group(state, storage, g, deadline)
        except GreedyOutOfTime as cut:
            out[g] = ([], str(cut))
    return out


def _compress_group(
    state: ClusterState, storage: Storage, g: str, deadline: float | None
) -> tuple[list[Relocation], str | None]:
    """One candidate group emptied instance by instance into its healthy peers."""
    peers = [
        p
        for p in storage.peers(g)
        if state.cluster.group(p).alloc_policy != "unallocable" and healthy(state, p, deadline)
    ]
    moves, _, why = _relocate_each(state, storage, hosts(state, group_nodes(state, g)), peers,
                                   deadline)  # fmt: skip
    return moves, why


def _relocate_each(
    state: ClusterState,
    storage: Storage,
    names: Iterable[str],
    peers: list[str],
    deadline: float | None,
) -> tuple[list[Relocation], ClusterState, str | None]:
    """The instances allocated into the peers one after the other, each on the state the
    ones before left (the design's greedy never goes back): the moves, the state after them
    and, at the first that fits nowhere, why (the moves up to it). GreedyOutOfTime past
    `deadline`, looked at before each instance (`_Paced`)."""
    cur = state
    moves: list[Relocation] = []
    paced = _Paced(deadline)
    for name in names:
        paced.step()
        got = allocate_elsewhere(cur, storage, name, peers)
        if got.relocation is None:
            return moves, cur, f"{name}: {got.why}"
        moves.append(got.relocation)
        cur = got.state
    return moves, cur, None


def free_resources(state: ClusterState, group: str) -> Resources:
    return used_and_free(state, group)[1]


def evacuate(
    state: ClusterState, storage: Storage, nodes: Sequence[str], deadline: float | None = None
) -> GreedyResult:
    """hail's node-evacuate (mode all) inside each group, then the design's inter-group step
    for what it could not place; past `deadline` (perf_counter) the inter-group step stops,
    keeping what it placed, `stopped` saying why."""
    names = hosts(state, nodes)
    sol = try_node_evac(state, CHANGE_ALL, names, deadline=deadline)
    result = GreedyResult(state=state)
    if sol is None:  # hail's node-evacuate ran past the deadline
        result.stopped = "the time limit ran out in hail's node-evacuate"
        return result
    cur = sol.state or state
    for name, (new_p, new_s) in ((n, cur.locations[n]) for n, _, _ in sol.moved):
        old_p, old_s = state.locations[name]
        result.relocations.append(Relocation(name, new_p, new_s, old_p, old_s))
    try:
        for name, why_local in sol.failed:
            own = cur.nodes[cur.locations[name][0]].group_uuid
            peers = [
                p
                for p in storage.peers(own)
                if cur.cluster.group(p).alloc_policy != "unallocable"
                and healthy(state, p, deadline)
            ]
            _in_time(deadline)
            got = allocate_elsewhere(cur, storage, name, peers)
            if got.relocation is None:
                result.failed.append((name, f"in its group: {why_local}; elsewhere: {got.why}"))
                continue
            result.relocations.append(got.relocation)
            cur = got.state
    except GreedyOutOfTime as cut:
        result.stopped = str(cut)
    result.state = cur
    return result


def instances_left(state: ClusterState, group: str) -> list[str]:
    return instances_in(state, group)
