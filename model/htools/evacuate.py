"""Relocate, node-evacuate and change-group as hail does them (Cluster/Evacuate.hs,
Cluster.tryChangeGroup, IAlloc.processRelocate; docs/hail.md, "Relocate", "Node-evacuate",
"Change-group").

Instances are handled one at a time, in request order, each on the cluster the previous ones
left. For one instance (`node_evac_instance`), every target node (or, for drbd in mode `all`,
every ordered pair of targets) is tried with htools' moves (`model.resources.apply_move`) and
the one giving the least *group* score wins, ties to the later candidate. The same primitive
moves shared-storage instances in the greedy global N+1 simulation (`global_n1`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from model.htools.metrics import Change, RowCache
from model.resources import (
    FailMode,
    InstanceDemand,
    MoveKind,
    MoveResult,
    NodeState,
    SecondaryReplacement,
    apply_move,
    pair_location_score,
)
from model.state import ClusterState

CHANGE_PRIMARY = "primary-only"
CHANGE_SECONDARY = "secondary-only"
CHANGE_ALL = "all"

MIRROR_NONE = "none"
MIRROR_INTERNAL = "internal"
MIRROR_EXTERNAL = "external"
_MIRROR = {
    "diskless": MIRROR_EXTERNAL,
    "file": MIRROR_NONE,
    "sharedfile": MIRROR_EXTERNAL,
    "plain": MIRROR_NONE,
    "blockdev": MIRROR_EXTERNAL,
    "drbd": MIRROR_INTERNAL,
    "rbd": MIRROR_EXTERNAL,
    "ext": MIRROR_EXTERNAL,
    "gluster": MIRROR_EXTERNAL,
}


def mirror_type(template: str) -> str:
    """templateMirrorType: how an instance of the template can change nodes."""
    return _MIRROR[template]


@dataclass(frozen=True)
class Step:
    """One move of a plan, as hail turns it into opcodes (iMoveToJob)."""

    kind: MoveKind
    target: str | None = None


@dataclass(frozen=True)
class Evacuated:
    """An instance moved: the node states that changed, its new nodes, the moves made."""

    nodes: Mapping[str, NodeState]
    primary: str
    secondary: str | None
    steps: tuple[Step, ...]
    score: float = 0.0


def _change(
    names_index: Mapping[str, int], changed: Mapping[str, NodeState], cache: RowCache
) -> Change:
    pos, states = [], []
    for name, st in changed.items():
        p = names_index.get(name)
        if p is not None:
            pos.append(p)
            states.append(st)
    return cache.change(pos, states)


def evac_one_node_only(
    nodes: Mapping[str, NodeState],
    d: InstanceDemand,
    primary: str,
    secondary: str | None,
    group_nodes: Sequence[str],
    avail: Sequence[str],
    force: bool,
    cache: RowCache | None = None,
    *,
    need_choice: bool = True,
) -> Evacuated | str:
    """evacOneNodeOnly: the instance's one changing node (secondary for drbd, primary for
    shared storage) to the best of `avail` by the score of `group_nodes`.

    `need_choice=False` only asks whether some target works (the caller does not care which:
    htools' choice would not matter for what comes next); the first working target is then
    returned, with score 0."""
    mirror = mirror_type(d.disk_template)
    if mirror == MIRROR_NONE:
        return "Can't relocate/evacuate non-mirrored instances"
    kind = MoveKind.REPLACE_SECONDARY if mirror == MIRROR_INTERNAL else MoveKind.FAILOVER_TO_ANY
    failed: list[str] = []
    ok: list[tuple[str, MoveResult]] = []
    for t in avail:
        r = apply_move(nodes, d, primary, secondary, kind, t, force=force)
        if isinstance(r, FailMode):
            if not ok:
                failed.append(f" Node {t} failed: {r};")
            continue
        ok.append((t, r))
        if not need_choice:
            break
    if not ok:
        return "Can't find any good node: " + "".join(failed)
    if not need_choice or len(ok) == 1:
        t, r = ok[0]
        return Evacuated(r.nodes, r.primary, r.secondary, (Step(kind, t),))
    cache = cache or RowCache()
    scores = cache.scores(nodes, group_nodes)
    index = {n: i for i, n in enumerate(group_nodes)}
    changes = [_change(index, r.nodes, cache) for _, r in ok]
    i, score = scores.best(changes, need_score=False)
    t, r = ok[i]
    return Evacuated(r.nodes, r.primary, r.secondary, (Step(kind, t),), score)


def drbd_all_pair(
    nodes: Mapping[str, NodeState],
    d: InstanceDemand,
    primary: str,
    secondary: str,
    t_primary: str,
    t_secondary: str,
    force: bool,
) -> Evacuated | str:
    """evacDrbdAllInner: replace-secondary to the new primary, failover, replace-secondary
    to the new secondary (a failover first if the primary is offline)."""
    moves = [_OFFLINE_FAILOVER] if nodes[primary].offline else []
    moves += [*_onto_new_primary(t_primary), _final_secondary(t_secondary)]
    r = _run_moves(nodes, d, primary, secondary, moves, force)
    if isinstance(r, str):
        return r
    _, changed, p, s, steps = r
    return Evacuated(changed, p, s, steps)


Move = tuple[MoveKind, str | None, str]  # a move, its target, how its failure is worded
_OFFLINE_FAILOVER: Move = (MoveKind.FAILOVER, None, "Failing over to the secondary")


def _onto_new_primary(target: str) -> list[Move]:
    """The moves of `drbd_all_pair` that do not depend on the final secondary."""
    return [
        (MoveKind.REPLACE_SECONDARY, target, "Changing secondary to new primary"),
        (MoveKind.FAILOVER, None, "Failing over to new primary"),
    ]


def _final_secondary(target: str) -> Move:
    return (MoveKind.REPLACE_SECONDARY, target, "Changing secondary to final secondary")


def _run_moves(
    nodes: Mapping[str, NodeState],
    d: InstanceDemand,
    primary: str,
    secondary: str,
    moves: Sequence[Move],
    force: bool,
) -> tuple[dict[str, NodeState], dict[str, NodeState], str, str, tuple[Step, ...]] | str:
    """The moves one after another, each on the cluster the previous one left: the cluster,
    the nodes changed, the instance's primary and secondary, the steps; or the first failure,
    worded `<what>: <failure>`."""
    cur, changed, steps, p, s = dict(nodes), {}, [], primary, secondary
    for kind, target, what in moves:
        r = apply_move(cur, d, p, s, kind, target, force=force)
        if isinstance(r, FailMode):
            return f"{what}: {r}"
        cur.update(r.nodes)
        changed.update(r.nodes)
        p, s = r.primary, r.secondary  # type: ignore[assignment]
        steps.append(Step(kind, target))
    return cur, changed, p, s, tuple(steps)


class _PastDeadline(Exception):
    """A walk given a deadline ran past it (caught by try_node_evac, which returns None)."""


def drbd_change_all(
    nodes: Mapping[str, NodeState],
    d: InstanceDemand,
    primary: str,
    secondary: str,
    group_nodes: Sequence[str],
    avail: Sequence[str],
    force: bool,
    cache: RowCache | None = None,
    deadline: float | None = None,
) -> Evacuated | str:
    """nodeEvacInstance ChangeAll for drbd: every ordered pair of `avail`, best group score
    (`deadline` is checked between primaries).

    hail runs the three moves of `drbd_all_pair` for every ordered pair (O(N²) moves, each
    scored over the group). The first two moves depend on the new primary alone, and the
    last one, a replace-secondary, changes the new secondary by what depends only on its
    state and its failover memory for the new primary, and the new primary by the location
    tags the two share: each part is computed once and the pairs combine them. The winner is
    then moved by `drbd_all_pair` itself; the candidates, their order and their scores are
    hail's (tests/test_evacuate_walk.py compares with the pair-by-pair walk)."""
    cache = cache or RowCache()
    index = {n: i for i, n in enumerate(group_nodes)}
    error = "no nodes available"
    pairs: list[tuple[str, str]] = []
    changes: list[Change] = []
    base, p, s, head = dict(nodes), primary, secondary, {}
    if nodes[primary].offline and len(avail) > 1:
        first = _run_moves(base, d, p, s, [_OFFLINE_FAILOVER], force)
        if isinstance(first, str):
            return "Can't find any good nodes for relocation: Allocation failed: " + first
        base, head, p, s, _ = first
    secondaries: dict[tuple[str, int], NodeState | FailMode] = {}
    for tp in avail if len(avail) > 1 else ():  # a pair needs two nodes
        if deadline is not None and time.perf_counter() > deadline:
            raise _PastDeadline
        step = _run_moves(base, d, p, s, _onto_new_primary(tp), force)
        if isinstance(step, str):
            if not changes:
                error = "Allocation failed: " + step
            continue
        cur, changed, new_p, new_s, _ = step
        replace = SecondaryReplacement.of(cur, d, new_p, new_s, force=force)
        changed = {**head, **changed}
        backs: dict[int, NodeState | FailMode] = {}
        for ts in avail:
            if ts == tp:
                continue
            tgt = cur[ts]
            if ts in changed:  # a node the first moves changed: its own state, not shared
                added = replace.new_secondary(tgt)
            else:
                key = (ts, tgt.peer_memory_mib(new_p))
                added = _kept(secondaries, key, replace.new_secondary, tgt)
            back = added
            if not isinstance(added, FailMode):
                loc = pair_location_score(replace.old_primary, tgt)
                back = _kept(backs, loc, replace.primary_back, tgt)
            if isinstance(back, FailMode):  # the first of the two to fail, as apply_move
                if not changes:
                    error = f"Allocation failed: Changing secondary to final secondary: {back}"
                continue
            # in the order of apply_move's result: a node in two roles keeps the last
            final = {**changed, new_p: back, ts: added, new_s: replace.secondary_without}
            pairs.append((tp, ts))
            changes.append(_change(index, final, cache))
    if not changes:
        return "Can't find any good nodes for relocation: " + error
    i, score = cache.scores(nodes, group_nodes).best(changes, need_score=False)
    best = drbd_all_pair(nodes, d, primary, secondary, *pairs[i], force)
    assert not isinstance(best, str), "the pair was feasible when combined"
    return Evacuated(best.nodes, best.primary, best.secondary, best.steps, score)


def _kept(
    table: dict, key: object, make: Callable[[NodeState], NodeState | FailMode], node: NodeState
) -> Any:
    """table[key], made by `make(node)` the first time it is asked for."""
    found = table.get(key)
    if found is None:
        found = table[key] = make(node)
    return found


def node_evac_instance(
    nodes: Mapping[str, NodeState],
    d: InstanceDemand,
    primary: str,
    secondary: str | None,
    mode: str,
    group_nodes: Sequence[str],
    avail: Sequence[str],
    force: bool,
    cache: RowCache | None = None,
    *,
    need_choice: bool = True,
    deadline: float | None = None,
) -> Evacuated | str:
    """nodeEvacInstance: one instance off its node(s) in one of the three modes."""
    t = d.disk_template
    if t in ("plain", "file"):
        return f"Instances of type {t} cannot be relocated"
    if t != "drbd":
        if mode == CHANGE_SECONDARY:
            return f"Instances with disk template '{t}' can't execute change secondary"
        return evac_one_node_only(
            nodes, d, primary, secondary, group_nodes, avail, force, cache, need_choice=need_choice
        )
    assert secondary is not None
    if mode == CHANGE_PRIMARY:
        r = apply_move(nodes, d, primary, secondary, MoveKind.FAILOVER, force=force)
        if isinstance(r, FailMode):
            return str(r)
        return Evacuated(r.nodes, r.primary, r.secondary, (Step(MoveKind.FAILOVER),))
    if mode == CHANGE_SECONDARY:
        return evac_one_node_only(
            nodes, d, primary, secondary, group_nodes, avail, force, cache, need_choice=need_choice
        )
    return drbd_change_all(nodes, d, primary, secondary, group_nodes, avail, force, cache, deadline)


# --- requests ---------------------------------------------------------------------------


@dataclass(frozen=True)
class EvacSolution:
    """hail's EvacSolution: moved (instance, group uuid, nodes), failed (instance, message),
    one job (list of steps) per moved instance; and the cluster afterwards."""

    moved: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    failed: tuple[tuple[str, str], ...] = ()
    jobs: tuple[tuple[str, tuple[Step, ...]], ...] = ()
    state: ClusterState | None = field(default=None, compare=False)


def group_nodes_of(state: ClusterState, group_uuid: str) -> list[str]:
    """splitCluster: a group's nodes, in index order."""
    return [n for n, st in state.nodes.items() if st.group_uuid == group_uuid]


def nodes_to_evacuate(state: ClusterState, mode: str, names: Sequence[str]) -> set[str]:
    out: set[str] = set()
    for name in names:
        p, s = state.locations[name]
        drbd = state.demands[name].disk_template == "drbd"
        if mode in (CHANGE_PRIMARY, CHANGE_ALL):
            out.add(p)
        if mode in (CHANGE_SECONDARY, CHANGE_ALL) and drbd and s is not None:
            out.add(s)
    return out


def apply_evacuated(state: ClusterState, name: str, ev: Evacuated) -> ClusterState:
    """The cluster with the instance moved as `ev` says."""
    moved = state.with_nodes(ev.nodes)
    locations = dict(moved.locations)
    locations[name] = (ev.primary, ev.secondary)
    return ClusterState(
        moved.cluster, moved.rules, moved.nodes, moved.demands, locations, moved.added
    )


def try_node_evac(
    state: ClusterState,
    mode: str,
    names: Sequence[str],
    *,
    ignore_soft_errors: bool = False,
    deadline: float | None = None,
) -> EvacSolution | None:
    """tryNodeEvac: each instance within its group, off the nodes being evacuated. None when
    `deadline` (time.perf_counter) passes first: drbd in mode `all` tries every ordered pair
    of nodes, minutes on a few hundred nodes (as in hail)."""
    excluded = nodes_to_evacuate(state, mode, names)
    excluded |= {n for n, st in state.nodes.items() if st.offline}
    cache = RowCache()
    moved, failed, jobs = [], [], []
    for name in names:
        if deadline is not None and time.perf_counter() > deadline:
            return None
        primary, secondary = state.locations[name]
        group = state.nodes[primary].group_uuid
        members = group_nodes_of(state, group)
        avail = [n for n in members if n not in excluded and n != primary]
        d = state.demands[name]
        try:
            r = node_evac_instance(
                state.nodes,
                d,
                primary,
                secondary,
                mode,
                members,
                avail,
                ignore_soft_errors,
                cache,
                deadline=deadline,
            )
        except _PastDeadline:
            return None
        if isinstance(r, str):
            failed.append((name, r))
            continue
        state = apply_evacuated(state, name, r)
        moved.append((name, state.nodes[r.primary].group_uuid, _all_nodes(d, r)))
        jobs.append((name, r.steps))
    return EvacSolution(tuple(moved), tuple(failed), tuple(jobs), state)


def _all_nodes(d: InstanceDemand, r: Evacuated) -> tuple[str, ...]:
    if d.disk_template == "drbd" and r.secondary is not None:
        return (r.primary, r.secondary)
    return (r.primary,)


def relocate(
    state: ClusterState,
    name: str,
    required_nodes: int,
    relocate_from: Sequence[str],
    *,
    ignore_soft_errors: bool = False,
) -> tuple[str, ...] | str:
    """processRelocate: the new secondary (drbd) or primary (shared storage), or hail's error."""
    if required_nodes != 1:
        return f"Exchange {required_nodes} nodes mode is not implemented"
    primary, secondary = state.locations[name]
    d = state.demands[name]
    mirror = mirror_type(d.disk_template)
    if mirror == MIRROR_NONE:
        return "Can't relocate non-mirrored instances"
    index = {n: i for i, n in enumerate(state.nodes)}
    if mirror == MIRROR_INTERNAL:
        expected, role, mode = secondary, "secondary", CHANGE_SECONDARY
    else:
        expected, role, mode = primary, "primary", CHANGE_PRIMARY
    given = [index[n] for n in relocate_from]
    exp_index = index[expected] if expected is not None else -1
    if given != [exp_index]:
        shown = "[" + ",".join(str(i) for i in given) + "]"
        return (
            f"Unsupported request: excluded nodes not equal to instance's {role}"
            f"({exp_index} versus {shown})"
        )
    sol = try_node_evac(state, mode, [name], ignore_soft_errors=ignore_soft_errors)
    if sol.failed:
        return sol.failed[0][1]
    assert sol.state is not None
    new_p, new_s = sol.state.locations[name]
    if mirror == MIRROR_INTERNAL:
        if new_s == secondary:
            return "Internal error: instance didn't change secondary node?!"
        return (new_s,)  # type: ignore[return-value]
    if new_p == primary:
        return "Internal error: instance didn't change primary node?!"
    return (new_p,)


def try_change_group(
    opts,
    state: ClusterState,
    target_groups: Sequence[str],
    names: Sequence[str],
    nics_of: Mapping[str, Sequence[Mapping]] | None = None,
    no_groups_message=None,
) -> EvacSolution:
    """tryChangeGroup: per instance, the best other group by hail's allocation (with its
    capacity check over the whole cluster, the instance still in its old group), then every
    (primary, secondary) pair of that group's online nodes, default (strict) options."""
    from model.htools.allocate import find_best_alloc_group

    def group_of(name: str, st: ClusterState) -> str:
        return st.nodes[st.locations[name][0]].group_uuid

    evacuated = list(dict.fromkeys(group_of(n, state) for n in names))
    pool = list(target_groups) if target_groups else [g.uuid for g in state.cluster.groups]
    for g in evacuated:  # Haskell's `\\`: one occurrence each
        if g in pool:
            pool.remove(g)
    offline = {n for n, st in state.nodes.items() if st.offline}
    members = {g.uuid: group_nodes_of(state, g.uuid) for g in state.cluster.groups}
    cache = RowCache()
    moved, failed, jobs = [], [], []
    for name in names:
        d = state.demands[name]
        count = 2 if d.disk_template == "drbd" else 1
        nics = (nics_of or {}).get(name, ())
        choice = find_best_alloc_group(
            opts, state, pool, d, count, nics, no_groups_message=no_groups_message
        )
        if isinstance(choice, str):
            failed.append((name, choice))
            continue
        gdx = choice.group.uuid
        avail = [n for n in members[gdx] if n not in offline]
        primary, secondary = state.locations[name]
        r = node_evac_instance(
            state.nodes, d, primary, secondary, CHANGE_ALL, members[gdx], avail, False, cache
        )
        if isinstance(r, str):
            failed.append((name, r))
            continue
        state = apply_evacuated(state, name, r)
        moved.append((name, state.nodes[r.primary].group_uuid, _all_nodes(d, r)))
        jobs.append((name, r.steps))
    return EvacSolution(tuple(moved), tuple(failed), tuple(jobs), state)
