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

import heapq
import math
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from model.cluster import NodeGroup
from model.htools.capacity import CapacityCheck, NoCapacityCheck, Placement
from model.htools.metrics import (
    NUMERIC,
    RowCache,
    haskell_sorted,
    list_stats,
    pair_scores,
    update_stats,
)
from model.htools.solutions import AllocSolution, annotated, choose, group_lines, sum_allocs
from model.policy import policy_shortfall
from model.resources import (
    FailMode,
    InstanceDemand,
    add_primary,
    add_secondary,
    apply_secondary,
    first_secondary_shortfall,
    pair_location_score,
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
    # exalloc's --time-limit (hail has none): a time.perf_counter() value past which a
    # multi-allocate's remaining instances fail "out of time", unplaced; each one-by-one step
    # with the exact N+1 check took seconds on 200 nodes (50 instances: minutes, issue 40)
    deadline: float | None = None
    # only the placement matters, not hail's count of every primary's N+1 refusals: the pairs
    # are asked about in one score order across primaries, so the first that passes, hail's
    # own choice, is found after a verdict or a few instead of one per primary (200 exact
    # verdicts per instance on 200 nodes; `_first_passing`). A multi-allocate's placed
    # instances show no counts, and an instance placed nowhere is asked about every pair, as
    # hail asks, so its counts are hail's (`alloc_list` sets it)
    placement_only: bool = False


Singles = list[str]
#: (primary, candidate secondaries); the primary itself, if listed, is not a secondary
Pairs = list[tuple[str, Sequence[str]]]


def gen_alloc_nodes(
    state: ClusterState, names: Sequence[str], count: int, restrict: Sequence[str] | None
) -> Singles | Pairs | str:
    """genAllocNodes: online nodes (restricted) or, for two nodes, each with the other online
    nodes of its group; primaries without a possible secondary are dropped. The secondaries of
    one group are one shared tuple that includes each primary (skipped as its own secondary)."""
    online = [n for n in names if not state.nodes[n].offline]
    if restrict is not None:
        allowed = set(restrict)
        online = [n for n in online if n in allowed]
    if count == 1:
        return online
    if count == 2:
        by_group: dict[str, list[str]] = {}
        for n in online:
            by_group.setdefault(state.nodes[n].group_uuid, []).append(n)
        shared = {g: tuple(ns) for g, ns in by_group.items()}
        return [
            (p, shared[state.nodes[p].group_uuid])
            for p in online
            if len(shared[state.nodes[p].group_uuid]) > 1
        ]
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
    *,
    described: bool = True,
) -> AllocSolution | str:
    """tryAlloc: the best placement on `targets` (nodes, or (primary, secondaries) for
    `count` 2), scored over the node list `scope`; hail's error without targets.
    `described`: with hail's description in front of the log (hspace prints none)."""
    cache = cache or RowCache()
    strict = not opts.ignore_soft_errors
    if not targets:
        return "No online nodes" if count == 1 else "Not enough online nodes"
    check = opts.capacity.prepare(state, scope)
    if opts.deadline is not None:
        check = _Until(check, opts.deadline)
    if count == 1:
        sol = _try_singles(state, scope, d, targets, strict, check, cache)  # type: ignore[arg-type]
    else:
        sol = _try_pairs(state, scope, d, targets, strict, check, cache, opts.placement_only)  # type: ignore[arg-type]
    return annotated(sol) if described else sol


class _OutOfTime(Exception):
    """AllocOptions.deadline passed while a step asked its N+1 verdicts (`alloc_list` fails
    that instance and the rest "out of time")."""


@dataclass(frozen=True)
class _Until:
    """An N+1 check that stops its step once `deadline` (time.perf_counter()) has passed: the
    exact verdicts are what take seconds per step on 200 nodes."""

    check: Any
    deadline: float

    def verdict(self, placement: Placement) -> Any:
        if time.perf_counter() >= self.deadline:
            raise _OutOfTime
        return self.check.verdict(placement)


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


@dataclass(frozen=True)
class _Generic:
    """Every possible secondary of a pair tryAlloc added once "generically" (for a primary
    it reserves no memory for): its score vectors before and after, the first failing check
    (0: fits, else 1 + index in `modes`), and the base statistics of the node list. Made only
    once some primary passes the policy: most calls of hspace's tiered phase fail on the
    policy for every primary and need none of it."""

    at: dict[str, int]
    modes: list[FailMode]
    code: np.ndarray
    old_m: np.ndarray
    new_m: np.ndarray
    online_of: np.ndarray
    peers_of: dict[str, list[str]]  # primary -> secondaries reserving memory for it
    located: bool
    base: Any
    # the rows after the generic add, made for the secondaries a placement is scored with
    # (most calls of hspace's tiered phase score none): the states, and which rows are made
    state: ClusterState
    names: list[str]
    d: InstanceDemand
    cache: RowCache
    made: np.ndarray

    def fill(self, rows: np.ndarray) -> None:
        """The generic rows `rows` (indices of secondaries that take the secondary) made."""
        for i in rows[~self.made[rows]].tolist():
            got = apply_secondary(self.state.nodes[self.names[i]], self.d, "")
            self.new_m[i] = self.cache.change((0,), (got,)).vectors[0]
            self.made[i] = True


def _generic(
    state: ClusterState,
    scope: Sequence[str],
    d: InstanceDemand,
    pairs: Sequence[tuple[str, Sequence[str]]],
    cache: RowCache,
) -> _Generic:
    sts = [state.nodes[n] for n in scope]
    base = list_stats([cache.row(s) for s in sts], [not s.offline for s in sts])
    names = list(dict.fromkeys(s for _, ss in pairs for s in ss))
    at = {n: i for i, n in enumerate(names)}
    modes: list[FailMode] = list(FailMode)
    code = np.zeros(len(names), dtype=np.int64)
    old_m = np.zeros((len(names), len(NUMERIC)))
    new_m = np.zeros((len(names), len(NUMERIC)))
    online_of = np.array([not state.nodes[n].offline for n in names], dtype=bool)
    peers_of: dict[str, list[str]] = {}
    for i, s in enumerate(names):
        sst = state.nodes[s]
        old_m[i] = cache.change((0,), (sst,)).vectors[0]
        failed = first_secondary_shortfall(sst, d, "")  # addSecExEx's verdict
        if failed is not None:
            code[i] = 1 + modes.index(failed.mode)
        for p, _ in sst.peers:
            peers_of.setdefault(p, []).append(s)
    located = any(state.nodes[n].location_tags for n in names)
    made = np.zeros(len(names), dtype=bool)
    return _Generic(
        at, modes, code, old_m, new_m, online_of, peers_of, located, base,
        state, names, d, cache, made,
    )  # fmt: skip


def _try_pairs(
    state: ClusterState,
    scope: Sequence[str],
    d: InstanceDemand,
    pairs: Sequence[tuple[str, Sequence[str]]],
    strict: bool,
    check: Any,
    cache: RowCache,
    placement_only: bool = False,
) -> AllocSolution:
    """Every (primary, secondary): the policy, the primary's and the secondary's add checks,
    and hail's incremental score; per primary, its placements consulted in score order.

    A secondary's new state depends on the primary only through the failover memory it
    already reserves for that primary, so each secondary is added once "generically" (its
    components, hence the scores and failures, are exact) and again for the primaries it has
    peers for; the scores of one primary's secondaries are computed together
    (`metrics.pair_scores`), and the node states of a placement are made only for the
    placements hail consults."""
    total = AllocSolution()
    policy_verdicts: dict[tuple[str, bool], FailMode | None] = {}
    prepared: list[_Generic] = []  # made for the first primary the policy admits
    refused: Counter = Counter()  # the pairs whose primary the policy refuses
    index_of: dict[int, tuple[Sequence[str], np.ndarray]] = {}  # secondaries -> indices
    # with `placement_only`: each primary's failures, fitting pairs and placements in hail's
    # order, asked about together once every primary is scored (`_first_passing`)
    deferred: list[tuple[Counter, int, Iterator[Placement]]] = []
    finite = True
    for p, secondaries in pairs:
        pst = state.nodes[p]
        key = (pst.group_uuid, pst.exclusive_storage)
        if key not in policy_verdicts:
            policy_verdicts[key] = policy_shortfall(d, _policy(state, p), pst.exclusive_storage)
        if policy_verdicts[key] is not None:  # counted together, added once at the end
            refused[policy_verdicts[key]] += sum(1 for s in secondaries if s != p)
            continue
        failures: Counter = Counter()
        if not prepared:
            prepared.append(_generic(state, scope, d, pairs, cache))
        g = prepared[0]
        at, modes, code, old_m, new_m = g.at, g.modes, g.code, g.old_m, g.new_m
        online_of, peers_of, located, base = g.online_of, g.peers_of, g.located, g.base
        key_ss = id(secondaries)
        if key_ss not in index_of:
            index_of[key_ss] = (
                secondaries,
                np.fromiter((at[s] for s in secondaries), dtype=np.int64, count=len(secondaries)),
            )
        all_idx = index_of[key_ss][1]
        keep = all_idx != at.get(p, -1)
        idx = all_idx[keep]
        secondaries = [s for s in secondaries if s != p] if not keep.all() else secondaries
        codes = code[idx]
        new_rows = new_m[idx]
        special = np.zeros(len(idx), dtype=bool)  # rows of secondaries reserving for p
        for s in peers_of.get(p, ()):
            where = np.flatnonzero(idx == at[s])
            if not len(where):
                continue
            got = add_secondary(state.nodes[s], d, p)
            if isinstance(got, FailMode):
                codes[where] = 1 + modes.index(got)
            else:
                codes[where] = 0
                new_rows[where] = cache.change((0,), (got,)).vectors[0]
            special[where] = True
        if located:
            locs = np.array([pair_location_score(pst, state.nodes[s]) for s in secondaries])
        else:
            locs = np.zeros(len(secondaries), dtype=np.int64)
        after_p: dict[int, Any] = {}
        scores = np.full(len(secondaries), np.nan)
        ok = np.zeros(len(secondaries), dtype=bool)
        for loc in np.unique(locs).tolist() if located else (0,):
            sel = locs == loc
            new_p = add_primary(pst, d, strict=strict, location_score=loc)
            if isinstance(new_p, FailMode):
                failures[new_p] += int(sel.sum())
                continue
            stats_p = update_stats(base, cache.row(pst), cache.row(new_p), not pst.offline)
            after_p[loc] = new_p
            counts = np.bincount(codes[sel], minlength=len(modes) + 1)
            for c in np.flatnonzero(counts[1:]).tolist():
                failures[modes[c]] += int(counts[c + 1])
            fits = sel & (codes == 0)
            ok |= fits
            if fits.any():
                generic = fits & ~special
                if generic.any():
                    g.fill(idx[generic])
                    new_rows[generic] = new_m[idx[generic]]
                rows = idx[fits]
                scores[fits] = pair_scores(stats_p, old_m[rows], new_rows[fits], online_of[rows])
        fit = np.flatnonzero(ok)
        if not len(fit):
            total = sum_allocs(total, AllocSolution(failures))
            continue

        def ranked(
            p=p, fit=fit, secondaries=secondaries, locs=locs, scores=scores, after_p=after_p
        ) -> Iterator[Placement]:
            for j in _hail_order(scores[fit]):
                i = int(fit[j])
                s = secondaries[i]
                new_s = add_secondary(state.nodes[s], d, p)
                new_p = after_p[int(locs[i])]
                yield Placement(d, p, s, {p: new_p, s: new_s}, float(scores[i]))

        if placement_only:
            finite = finite and bool(np.all(np.isfinite(scores[fit])))
            deferred.append((failures, len(fit), ranked()))
            continue
        total = sum_allocs(total, choose(ranked(), len(fit), failures, check))
    if deferred and finite:
        total = sum_allocs(total, _first_passing(deferred, check))
    else:  # hail's order of equal scores is not one sort key then (`haskell_sorted`)
        for failures, count, ranked in deferred:
            total = sum_allocs(total, choose(ranked, count, failures, check))
    if refused:
        total = sum_allocs(total, AllocSolution(refused))
    return total


def _first_passing(
    deferred: Sequence[tuple[Counter, int, Iterator[Placement]]], check: Any
) -> AllocSolution:
    """hail's choice among the primaries of `deferred`, asking the N+1 check in one order:
    score, then the later primary, then each primary's own order (the later secondary first
    on equal scores). The first placement that passes is the one hail's fold keeps, which
    takes per primary the first that passes in its order and then the least score, the later
    primary on ties (`sum_allocs`); what hail asks about beyond it is not asked. The
    failure counts are every primary's, plus one FailN1 per refusal asked."""
    failures: Counter = Counter()
    heap: list[tuple[float, int, int, Placement]] = []
    for order, (fails, _, ranked) in enumerate(deferred):
        failures += fails
        first = next(ranked, None)
        if first is not None:
            heap.append((first.score, -order, 0, first))
    heapq.heapify(heap)
    asked: list[tuple[Placement, Any]] = []
    chosen: Placement | None = None
    while heap:
        _, minus_order, position, placement = heapq.heappop(heap)
        verdict = check.verdict(placement)
        asked.append((placement, verdict))
        if verdict.redundant:
            chosen = placement
            break
        failures[FailMode.N1] += 1
        following = next(deferred[-minus_order][2], None)
        if following is not None:
            heapq.heappush(heap, (following.score, minus_order, position + 1, following))
    allocs = sum(count for _, count, _ in deferred) - len(asked) + (chosen is not None)
    return AllocSolution(failures, allocs, chosen, (), tuple(asked))


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


def ranked(
    results: Sequence[tuple[NodeGroup, AllocSolution | str]],
) -> list[tuple[NodeGroup, AllocSolution]]:
    """The groups with an answer, best first as findBestAllocGroup ranks them: by policy,
    then score, the later group first on ties (`sortBy` of the reversed list)."""
    good = [
        (g, sol)
        for g, sol in results
        if not isinstance(sol, str) and sol.solution is not None and g.alloc_policy != "unallocable"
    ]
    good.reverse()
    good.sort(key=lambda gs: (POLICY_ORDER[gs[0].alloc_policy], gs[1].solution.score))  # type: ignore[union-attr]
    return good


def find_best_alloc_group(
    opts: AllocOptions,
    state: ClusterState,
    allowed: Sequence[str] | None,
    d: InstanceDemand,
    count: int,
    nics: Sequence[Mapping[str, Any]] = (),
    *,
    no_groups_message: Any = None,
    tried: list[tuple[NodeGroup, AllocSolution | str]] | None = None,
) -> GroupChoice | str:
    """findBestAllocGroup: every (allowed) group tried with the whole cluster as the checked
    list; the best by (policy, score), later group on ties. `no_groups_message(allowed,
    groups)` words the error when no group is allowed (hail prints Haskell records);
    `tried` receives every group tried with its solution or error, answer or not."""
    groups = groups_with_nodes(state)
    if allowed is not None:
        allowed_set = list(allowed)
        candidates = [g for g in groups if g.uuid in allowed_set]
    else:
        candidates = groups
    unconnected = [
        (g, f"group {g.name} is not connected to a network required by instance {shown_name(d)}")
        for g in candidates
        if not networks_ok(g, nics)
    ]
    bad_msgs = [message for _, message in unconnected]
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
    if tried is not None:
        tried.extend([*unconnected, *results])
    messages = list(bad_msgs)
    for g, sol in results:
        messages += group_lines(g.name, g.alloc_policy, sol)
    good = ranked(results)
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
    tried: list[tuple[NodeGroup, AllocSolution | str]] | None = None,
) -> AllocSolution | str:
    """tryMGAlloc: the best group's solution, its log "Selected group: G" and every group."""
    choice = find_best_alloc_group(opts, state, None, d, count, nics, tried=tried)
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
    tried: list[tuple[NodeGroup, AllocSolution | str]] | None = None,
) -> AllocSolution | str:
    """One allocate request: tryMGAlloc, or tryGroupAlloc with `group_name`; `tried`
    receives every group tryMGAlloc tried (see `find_best_alloc_group`)."""
    if group_name is None:
        return try_mg_alloc(opts, state, d, count, nics, tried)
    return try_group_alloc(opts, state, group_name, d, count, nics)


def placed(state: ClusterState, sol: AllocSolution, record: Any = None) -> ClusterState:
    """The cluster after a solution's placement (extractNl / updateIl)."""
    pl = sol.solution
    if pl is None:
        return state
    return state.placed(record if record is not None else pl.demand, pl.primary, pl.secondary)


#: The log of an instance a multi-allocate did not try: its time limit ran out before it.
OUT_OF_TIME = "out of time: the time limit ran out before its one-by-one step ended"


def alloc_list(
    opts: AllocOptions,
    state: ClusterState,
    requests: Sequence[tuple[InstanceDemand, int, Sequence[Mapping[str, Any]], Any]],
    group_name: str | None,
) -> tuple[list[tuple[str, AllocSolution]], ClusterState] | str:
    """allocList: the instances one by one on the evolving cluster; without `group_name` one
    instance no group can take fails the whole request (hail's behaviour)."""
    out: list[tuple[str, AllocSolution]] = []
    opts = replace(opts, placement_only=True)  # no placed instance's counts are shown
    for d, count, nics, record in requests:
        if opts.deadline is not None and time.perf_counter() >= opts.deadline:
            out.append((shown_name(d), AllocSolution(log=(OUT_OF_TIME,))))
            continue
        try:
            sol = allocate(opts, state, d, count, group_name, nics)
        except _OutOfTime:
            out.append((shown_name(d), AllocSolution(log=(OUT_OF_TIME,))))
            continue
        if isinstance(sol, str):
            return sol
        out.append((shown_name(d), sol))
        state = placed(state, sol, record)
    return out, state
