"""hail's allocate and multi-allocate for normal and shared-storage groups (Cluster.hs
tryAlloc, findAllocation, findBestAllocGroup, tryMGAlloc, tryGroupAlloc, allocList;
docs/hail.md, "Allocate" and "Multi-allocate").

For one group: every online node of the group (one node), or every ordered pair of them
(drbd), passes the group policy and the add checks, and is scored by the score of the checked
node list after the placement: the whole cluster without `group_name`, the group with it.
Single nodes get the score recomputed from scratch (two passes), pairs hail's incremental
update from the list's statistics; candidates are then consulted in score order against the
global N+1 check (`solutions.choose`), per primary for pairs. Without `group_name` every group
with nodes is tried, and the best group wins by (allocation policy, score), ties to the later
group.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from model.cluster import NodeGroup
from model.htools.capacity import CapacityCheck, NoCapacityCheck, Placement
from model.htools.metrics import RowCache, list_stats, pair_scores, update_stats
from model.htools.metrics import _haskell_sorted as haskell_sorted
from model.htools.solutions import AllocSolution, annotated, choose, group_lines, sum_allocs
from model.resources import (
    FailMode,
    InstanceDemand,
    NodeState,
    add_primary,
    add_secondary,
    pair_location_score,
    policy_shortfall,
)
from model.state import ClusterState

POLICY_ORDER = {"preferred": 0, "last_resort": 1, "unallocable": 2}
#: appended to a new instance's name when the cluster already has an instance of that name:
#: hail tells instances apart by index and accepts such requests (Ganeti's test data has one)
SAME_NAME_MARK = "\x00new"


def internal_name(name: str, taken: Mapping[str, Any]) -> str:
    """A name for a new instance that no instance in `taken` has."""
    while name in taken:
        name += SAME_NAME_MARK
    return name


def shown_name(d: InstanceDemand) -> str:
    """The instance's name as the request gave it."""
    return d.name.split(SAME_NAME_MARK, 1)[0]


@dataclass(frozen=True)
class AllocOptions:
    """The algorithm options hail's allocation honours (AlgorithmOptions)."""

    capacity: CapacityCheck = NoCapacityCheck()
    ignore_soft_errors: bool = False
    restrict_to_nodes: tuple[str, ...] | None = None


Singles = list[str]
Pairs = list[tuple[str, list[str]]]


def gen_alloc_nodes(
    state: ClusterState, names: Sequence[str], count: int, restrict: Sequence[str] | None
) -> Singles | Pairs | str:
    """genAllocNodes: online nodes (restricted) or, for two nodes, each with the other online
    nodes of its group; primaries without a possible secondary are dropped."""
    online = [n for n in names if not state.nodes[n].offline]
    if restrict is not None:
        allowed = set(restrict)
        online = [n for n in online if n in allowed]
    if count == 1:
        return online
    if count == 2:
        pairs = [
            (
                p,
                [
                    s
                    for s in online
                    if s != p and state.nodes[s].group_uuid == state.nodes[p].group_uuid
                ],
            )
            for p in online
        ]
        return [(p, ss) for p, ss in pairs if ss]
    return "Unsupported number of nodes, only one or two  supported"


def _policy(state: ClusterState, node: str):
    return state.cluster.group(state.nodes[node].group_uuid).ipolicy


def _hail_order(scores: np.ndarray) -> Iterator[int]:
    """Indices in hail's sorted order: score ascending, equal scores the later first."""
    if np.all(np.isfinite(scores)):
        yield from np.lexsort((-np.arange(len(scores)), scores)).tolist()
    else:
        yield from (i for i, _ in haskell_sorted(np.asarray(scores, dtype=float)))


def try_alloc(
    opts: AllocOptions,
    state: ClusterState,
    scope: Sequence[str],
    d: InstanceDemand,
    count: int,
    targets: Singles | Pairs,
    cache: RowCache | None = None,
) -> AllocSolution | str:
    """tryAlloc: the best placement on `targets` (nodes, or (primary, secondaries) for
    `count` 2), scored over the node list `scope`; hail's error without targets."""
    cache = cache or RowCache()
    strict = not opts.ignore_soft_errors
    if not targets:
        return "No online nodes" if count == 1 else "Not enough online nodes"
    check = opts.capacity.prepare(state, scope)
    if count == 1:
        return annotated(_try_singles(state, scope, d, targets, strict, check, cache))  # type: ignore[arg-type]
    return annotated(_try_pairs(state, scope, d, targets, strict, check, cache))  # type: ignore[arg-type]


def _try_singles(
    state: ClusterState,
    scope: Sequence[str],
    d: InstanceDemand,
    targets: Sequence[str],
    strict: bool,
    check: Any,
    cache: RowCache,
) -> AllocSolution:
    failures: Counter = Counter()
    ok: list[Placement] = []
    verdicts: dict[tuple[str, bool], FailMode | None] = {}
    for t in targets:
        st = state.nodes[t]
        key = (st.group_uuid, st.exclusive_storage)
        if key not in verdicts:
            verdicts[key] = policy_shortfall(d, _policy(state, t), st.exclusive_storage)
        fail = verdicts[key]
        if fail is None:
            new = add_primary(st, d, strict=strict)
            if isinstance(new, FailMode):
                fail = new
            else:
                ok.append(Placement(d, t, None, {t: new}, math.nan))
                continue
        failures[fail] += 1
    if not ok:
        return AllocSolution(failures)
    scores = cache.scores(state.nodes, scope)
    index = {n: i for i, n in enumerate(scope)}
    changes = [cache.change((index[p.primary],), (p.nodes[p.primary],)) for p in ok]

    def ranked() -> Iterator[Placement]:
        for i, score in scores.ranked(changes):
            yield replace(ok[i], score=score)

    return choose(ranked(), len(ok), failures, check)


def _try_pairs(
    state: ClusterState,
    scope: Sequence[str],
    d: InstanceDemand,
    pairs: Sequence[tuple[str, Sequence[str]]],
    strict: bool,
    check: Any,
    cache: RowCache,
) -> AllocSolution:
    """Every (primary, secondary): the policy, the primary's and the secondary's add checks,
    and hail's incremental score; per primary, its placements consulted in score order.

    A secondary's new state depends on the primary only through the failover memory it
    already reserves for it, so each secondary is added once "generically" (its components,
    hence the scores, are exact) and again for the primaries it has peers for; the node
    states of a placement are made for the placements hail consults only."""
    sts = [state.nodes[n] for n in scope]
    base = list_stats([cache.row(s) for s in sts], [not s.offline for s in sts])
    total = AllocSolution()
    policy_verdicts: dict[tuple[str, bool], FailMode | None] = {}
    generic: dict[str, NodeState | FailMode] = {}
    vectors: dict[str, np.ndarray] = {}

    for p, secondaries in pairs:
        pst = state.nodes[p]
        key = (pst.group_uuid, pst.exclusive_storage)
        if key not in policy_verdicts:
            policy_verdicts[key] = policy_shortfall(d, _policy(state, p), pst.exclusive_storage)
        failures: Counter = Counter()
        if policy_verdicts[key] is not None:
            failures[policy_verdicts[key]] += len(secondaries)
            total = sum_allocs(total, AllocSolution(failures))
            continue
        after_p: dict[int, Any] = {}  # location score -> (new primary, its stats) or failure
        ok_s: list[str] = []
        ok_loc: list[int] = []
        ok_online: list[bool] = []
        old_rows: list[np.ndarray] = []
        new_rows: list[np.ndarray] = []
        for s in secondaries:
            sst = state.nodes[s]
            loc = pair_location_score(pst, sst)
            if loc not in after_p:
                new_p = add_primary(pst, d, strict=strict, location_score=loc)
                after_p[loc] = (
                    new_p
                    if isinstance(new_p, FailMode)
                    else (
                        new_p,
                        update_stats(base, cache.row(pst), cache.row(new_p), not pst.offline),
                    )
                )
            got = after_p[loc]
            if isinstance(got, FailMode):
                failures[got] += 1
                continue
            if sst.peer_memory_mib(p):
                new_s = add_secondary(sst, d, p)
            else:
                if s not in generic:
                    generic[s] = add_secondary(sst, d, "")
                new_s = generic[s]
            if isinstance(new_s, FailMode):
                failures[new_s] += 1
                continue
            if s not in vectors:
                vectors[s] = cache.change((0,), (sst,)).vectors[0]
            ok_s.append(s)
            ok_online.append(not sst.offline)
            ok_loc.append(loc)
            old_rows.append(vectors[s])
            new_rows.append(cache.change((0,), (new_s,)).vectors[0])
        if not ok_s:
            total = sum_allocs(total, AllocSolution(failures))
            continue
        scores = np.empty(len(ok_s))
        old_m, new_m = np.array(old_rows), np.array(new_rows)
        locs = np.array(ok_loc)
        for loc, got in after_p.items():
            if isinstance(got, FailMode):
                continue
            sel = np.flatnonzero(locs == loc)
            if len(sel):
                online = np.array(ok_online)[sel]
                scores[sel] = pair_scores(got[1], old_m[sel], new_m[sel], online)

        def ranked(
            p=p, ok_s=ok_s, ok_loc=ok_loc, scores=scores, after_p=after_p
        ) -> Iterator[Placement]:
            for i in _hail_order(scores):
                s = ok_s[i]
                new_p = after_p[ok_loc[i]][0]
                new_s = add_secondary(state.nodes[s], d, p)
                yield Placement(d, p, s, {p: new_p, s: new_s}, float(scores[i]))

        sol = choose(ranked(), len(ok_s), failures, check)
        total = sum_allocs(total, sol)
    return total


def networks_ok(group: NodeGroup, nics: Sequence[Mapping[str, Any]]) -> bool:
    """hasRequiredNetworks: every NIC's network (if any) is connected to the group."""
    return all(nic.get("network") is None or nic.get("network") in group.networks for nic in nics)


def groups_with_nodes(state: ClusterState) -> list[NodeGroup]:
    """splitCluster's groups, in group index order."""
    used = {st.group_uuid for st in state.nodes.values()}
    return [g for g in state.cluster.groups if g.uuid in used]


def group_node_names(state: ClusterState, group_uuid: str) -> list[str]:
    return [n for n, st in state.nodes.items() if st.group_uuid == group_uuid]


def find_allocation(
    opts: AllocOptions,
    state: ClusterState,
    group: NodeGroup,
    d: InstanceDemand,
    count: int,
    nics: Sequence[Mapping[str, Any]] = (),
) -> AllocSolution | str:
    """findAllocation (with `group_name`): the group only, scored and checked on its own."""
    if not networks_ok(group, nics):
        return (
            f"The group {group.name} is not connected to a network required by instance "
            f"{shown_name(d)}"
        )
    names = group_node_names(state, group.uuid)
    targets = gen_alloc_nodes(state, names, count, opts.restrict_to_nodes)
    if isinstance(targets, str):
        return targets
    sol = try_alloc(opts, state, names, d, count, targets)
    if isinstance(sol, str):
        return sol
    return replace(sol, log=tuple(group_lines(group.name, group.alloc_policy, sol)))


@dataclass(frozen=True)
class GroupChoice:
    """findBestAllocGroup's answer: the group, its solution, and every group's messages."""

    group: NodeGroup
    solution: AllocSolution
    messages: tuple[str, ...]
    results: tuple[tuple[NodeGroup, AllocSolution | str], ...] = ()


def find_best_alloc_group(
    opts: AllocOptions,
    state: ClusterState,
    allowed: Sequence[str] | None,
    d: InstanceDemand,
    count: int,
    nics: Sequence[Mapping[str, Any]] = (),
    *,
    no_groups_message: Any = None,
) -> GroupChoice | str:
    """findBestAllocGroup: every (allowed) group tried with the whole cluster as the checked
    list; the best by (policy, score), later group on ties. `no_groups_message(allowed,
    groups)` words the error when no group is allowed (hail prints Haskell records)."""
    groups = groups_with_nodes(state)
    if allowed is not None:
        allowed_set = list(allowed)
        candidates = [g for g in groups if g.uuid in allowed_set]
    else:
        candidates = groups
    bad_msgs = [
        f"group {g.name} is not connected to a network required by instance {shown_name(d)}"
        for g in candidates
        if not networks_ok(g, nics)
    ]
    valid = [g for g in candidates if networks_ok(g, nics)]
    scope = list(state.nodes)
    cache = RowCache()
    results: list[tuple[NodeGroup, AllocSolution | str]] = []
    for g in valid:
        targets = gen_alloc_nodes(
            state, group_node_names(state, g.uuid), count, opts.restrict_to_nodes
        )
        if isinstance(targets, str):
            results.append((g, targets))
            continue
        results.append((g, try_alloc(opts, state, scope, d, count, targets, cache)))
    messages = list(bad_msgs)
    for g, sol in results:
        messages += group_lines(g.name, g.alloc_policy, sol)
    good = [
        (g, sol)
        for g, sol in results
        if not isinstance(sol, str) and sol.solution is not None and g.alloc_policy != "unallocable"
    ]
    good.reverse()
    good.sort(key=lambda gs: (POLICY_ORDER[gs[0].alloc_policy], gs[1].solution.score))  # type: ignore[union-attr]
    if not good:
        if not candidates:
            if no_groups_message is not None:
                return no_groups_message(allowed, groups)
            return "no groups for evacuation"
        return ", ".join(messages)
    g, sol = good[0]
    return GroupChoice(g, sol, tuple(messages), tuple(results))


def try_mg_alloc(
    opts: AllocOptions,
    state: ClusterState,
    d: InstanceDemand,
    count: int,
    nics: Sequence[Mapping[str, Any]] = (),
) -> AllocSolution | str:
    """tryMGAlloc: the best group's solution, its log "Selected group: G" and every group."""
    choice = find_best_alloc_group(opts, state, None, d, count, nics)
    if isinstance(choice, str):
        return choice
    return replace(choice.solution, log=(f"Selected group: {choice.group.name}", *choice.messages))


def try_group_alloc(
    opts: AllocOptions,
    state: ClusterState,
    group_name: str,
    d: InstanceDemand,
    count: int,
    nics: Sequence[Mapping[str, Any]] = (),
) -> AllocSolution | str:
    """tryGroupAlloc: the named group (by name or uuid, exactly one must match)."""
    found = [g for g in state.cluster.groups if group_name in (g.name, g.uuid)]
    if len(found) != 1:
        return f"Wrong number of elems found with name {group_name}"
    return find_allocation(opts, state, found[0], d, count, nics)


def allocate(
    opts: AllocOptions,
    state: ClusterState,
    d: InstanceDemand,
    count: int,
    group_name: str | None,
    nics: Sequence[Mapping[str, Any]] = (),
) -> AllocSolution | str:
    """One allocate request: tryMGAlloc, or tryGroupAlloc with `group_name`."""
    if group_name is None:
        return try_mg_alloc(opts, state, d, count, nics)
    return try_group_alloc(opts, state, group_name, d, count, nics)


def placed(state: ClusterState, sol: AllocSolution, record: Any = None) -> ClusterState:
    """The cluster after a solution's placement (extractNl / updateIl)."""
    pl = sol.solution
    if pl is None:
        return state
    return state.placed(record if record is not None else pl.demand, pl.primary, pl.secondary)


def alloc_list(
    opts: AllocOptions,
    state: ClusterState,
    requests: Sequence[tuple[InstanceDemand, int, Sequence[Mapping[str, Any]], Any]],
    group_name: str | None,
) -> tuple[list[tuple[str, AllocSolution]], ClusterState] | str:
    """allocList: the instances one by one on the evolving cluster; without `group_name` one
    instance no group can take fails the whole request (hail's behaviour)."""
    out: list[tuple[str, AllocSolution]] = []
    for d, count, nics, record in requests:
        sol = allocate(opts, state, d, count, group_name, nics)
        if isinstance(sol, str):
            return sol
        out.append((shown_name(d), sol))
        state = placed(state, sol, record)
    return out, state
