"""htools' greedy global N+1 check (GlobalN1.hs): the `greedy` capacity check.

A cluster is redundant when every node of the checked list, offline ones included, can be
evacuated (docs/hail.md, "Global N+1"). For one node, on a copy of the cluster with soft errors
ignored and no backtracking:

1. every drbd primary fails over to its secondary (in the node's primary-list order);
2. every diskless, sharedfile, rbd, ext and gluster primary moves (failover to any node) to
   the best other node of the node's group by group score;
3. every plain, file and blockdev primary, largest memory first, is re-created on the best
   other node of the group that passes the group policy and the hard checks, by the score of
   the whole checked list (the instance also stays where it is).

Only hard checks apply: memory, local disk for re-created plain instances, exclusive-storage
spindles, migration tags, and the policy for re-creation. Offline nodes are targets too.

htools re-runs this for every candidate placement. A node's verdict depends only on the nodes
its simulation reads (`_Dependencies`), so `GreedyN1Check` keeps every node's verdict on the
cluster before the placement and re-simulates only the nodes whose inputs the placement
changed. Choices whose outcome cannot matter (the last move of a node's evacuation: any
working target gives the same verdict) skip the scoring.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from model.htools.capacity import N1Check, N1Verdict, Placement, state_after
from model.htools.evacuate import CHANGE_PRIMARY, node_evac_instance
from model.htools.metrics import RowCache
from model.resources import (
    FailMode,
    InstanceDemand,
    MoveKind,
    NodeState,
    add_primary,
    apply_move,
    policy_shortfall,
)
from model.state import ClusterState

#: diskTemplateMovable: the templates GlobalN1 moves (blockdev, plain, file are re-created)
GLOBAL_N1_MOVABLE = frozenset({"diskless", "sharedfile", "rbd", "ext", "gluster"})


def primaries_in_htools_order(st: NodeState) -> tuple[str, ...]:
    """Node.pList order: htools prepends, `NodeState.primaries` appends."""
    return st.primaries[::-1]


@dataclass(frozen=True)
class _Plan:
    """A node's evacuation, split as GlobalN1 does it."""

    drbd: tuple[str, ...]
    shared: tuple[str, ...]
    recreate: tuple[str, ...]  # sorted by memory, largest first


def _plan(state: ClusterState, node: str, alias: Mapping[str, str] | None = None) -> _Plan:
    alias = alias or {}
    drbd, shared, other = [], [], []
    for name in primaries_in_htools_order(state.nodes[node]):
        t = state.demands[alias.get(name, name)].disk_template
        if t == "drbd":
            drbd.append(name)
        elif t in GLOBAL_N1_MOVABLE:
            shared.append(name)
        else:
            other.append(name)
    other.sort(key=lambda n: -state.demands[alias.get(n, n)].memory_mib)
    return _Plan(tuple(drbd), tuple(shared), tuple(other))


def can_evacuate(
    state: ClusterState,
    node: str,
    scope: Sequence[str],
    cache: RowCache | None = None,
    alias: Mapping[str, str] | None = None,
) -> str | None:
    """canEvacuateNode: None when the node's instances can all go elsewhere, else why not.

    `alias` maps an instance to the record htools finds for it (see `GreedyN1Check`); the
    simulation moves records, so a record listed twice is found where the first move left it.
    """
    cache = cache or RowCache()
    nodes = dict(state.nodes)
    alias = alias or {}
    plan = _plan(state, node, alias)
    where: dict[str, tuple[str, str | None]] = {}

    def located(name: str) -> tuple[str, tuple[str, str | None]]:
        key = alias.get(name, name)
        return key, where.get(key, state.locations[key])

    for name in plan.drbd:
        key, (p, s) = located(name)
        r = apply_move(nodes, state.demands[key], p, s, MoveKind.FAILOVER, force=True)
        if isinstance(r, FailMode):
            return f"failover of {name} to {s}: {r}"
        nodes.update(r.nodes)
        where[key] = (r.primary, r.secondary)
    group = state.nodes[node].group_uuid
    group_nodes = [n for n in scope if state.nodes[n].group_uuid == group]
    escape = [n for n in group_nodes if n != node]
    steps = len(plan.shared) + len(plan.recreate)
    done = 0
    for name in plan.shared:
        done += 1
        key, (p, s) = located(name)
        r = node_evac_instance(
            nodes,
            state.demands[key],
            p,
            s,
            CHANGE_PRIMARY,
            group_nodes,
            escape,
            True,
            cache,
            need_choice=done < steps,
        )
        if isinstance(r, str):
            return f"move of {name}: {r}"
        nodes.update(r.nodes)
        where[key] = (r.primary, r.secondary)
    policy = state.cluster.group(group).ipolicy
    for name in plan.recreate:
        done += 1
        d = state.demands[alias.get(name, name)]
        chosen = _recreate(nodes, d, escape, scope, policy, cache, need_choice=done < steps)
        if chosen is None:
            return f"re-creation of {name}: no node can take it"
        nodes.update(chosen)
    return None


def _recreate(
    nodes: dict[str, NodeState],
    d: InstanceDemand,
    targets: Sequence[str],
    scope: Sequence[str],
    policy,
    cache: RowCache,
    *,
    need_choice: bool,
) -> Mapping[str, NodeState] | None:
    """GlobalN1.recreate: allocateOnSingle on each target (policy, forced addPri), the best
    by the score of the whole list, later target on equal scores."""
    ok: list[tuple[str, NodeState]] = []
    verdicts: dict[bool, FailMode | None] = {}
    for t in targets:
        st = nodes[t]
        excl = st.exclusive_storage
        if excl not in verdicts:
            verdicts[excl] = policy_shortfall(d, policy, excl)
        if verdicts[excl] is not None:
            continue
        new = add_primary(st, d, strict=False)
        if isinstance(new, FailMode):
            continue
        ok.append((t, new))
        if not need_choice:
            break
    if not ok:
        return None
    if not need_choice or len(ok) == 1:
        t, new = ok[0]
        return {t: new}
    scores = cache.scores(nodes, scope)
    index = {n: i for i, n in enumerate(scope)}
    changes = [cache.change((index[t],), (new,)) for t, new in ok]
    i, _ = scores.best(changes, need_score=False)
    t, new = ok[i]
    return {t: new}


@dataclass(frozen=True)
class _Dependencies:
    """The nodes a node's evacuation reads: itself and its drbd peers (failovers), its
    group (targets and group score of moves and re-creations) and, when a re-creation's
    choice matters, the whole list (its score)."""

    nodes: frozenset[str]
    whole_list: bool


def _dependencies(state: ClusterState, node: str, scope: Sequence[str]) -> _Dependencies:
    plan = _plan(state, node)
    deps = {node}
    for name in plan.drbd:
        p, s = state.locations[name]
        deps.add(p)
        if s is not None:
            deps.add(s)
    whole = False
    if plan.shared or plan.recreate:
        group = state.nodes[node].group_uuid
        deps.update(n for n in scope if state.nodes[n].group_uuid == group)
        # a re-creation's choice is scored over the whole list unless it is the last step
        whole = len(plan.recreate) > 1
    return _Dependencies(frozenset(deps), whole)


class GreedyN1Check:
    """The greedy check prepared on one cluster and node list (see module docstring).

    One htools quirk is kept: allocating into a named group (`group_name`), hail runs the
    check with the group's instances only and numbers the new instance after them, so it
    takes the number of the instance that many places into the cluster's list. When that
    instance's primary is in the group, the check finds the *new* instance's record under its
    number: evacuating its node moves the new instance instead (docs/hail.md, "Global N+1").
    """

    def __init__(self, base: ClusterState, scope: Sequence[str]):
        self.base = base
        self.scope = tuple(scope)
        self.cache = RowCache()
        self._base_verdict: dict[str, str | None] = {}
        self._deps: dict[str, _Dependencies] = {}
        in_scope = set(self.scope)
        names = list(base.demands)
        k = sum(1 for n in names if base.locations[n][0] in in_scope)
        self.shadowed = (
            names[k] if k < len(names) and base.locations[names[k]][0] in in_scope else None
        )

    def _base(self, node: str) -> str | None:
        if node not in self._base_verdict:
            self._base_verdict[node] = can_evacuate(self.base, node, self.scope, self.cache)
        return self._base_verdict[node]

    def _depends(self, node: str) -> _Dependencies:
        if node not in self._deps:
            self._deps[node] = _dependencies(self.base, node, self.scope)
        return self._deps[node]

    def verdict(self, placement: Placement) -> N1Verdict:
        changed = set(placement.nodes)
        after = state_after(self.base, placement)
        alias: dict[str, str] = {}
        if self.shadowed is not None and self.shadowed != placement.demand.name:
            alias[self.shadowed] = placement.demand.name
            changed |= {n for n in self.base.locations[self.shadowed] if n is not None}
        for node in self.scope:
            deps = self._depends(node)
            if node not in changed and not deps.whole_list and not (deps.nodes & changed):
                why = self._base(node)
            else:
                why = can_evacuate(after, node, self.scope, self.cache, alias)
            if why is not None:
                return N1Verdict(False, node, f"node {node} cannot be evacuated: {why}")
        return N1Verdict(True)


class GreedyGlobalN1:
    """`--capacity-checks greedy`: htools' own global N+1 check."""

    name = "greedy"

    def prepare(self, base: ClusterState, scope: Sequence[str]) -> N1Check:
        return GreedyN1Check(base, scope)


def redundant(state: ClusterState, scope: Sequence[str] | None = None) -> bool:
    """GlobalN1.redundant: every node of `scope` (default: all) can be evacuated."""
    names = tuple(state.nodes) if scope is None else tuple(scope)
    cache = RowCache()
    return all(can_evacuate(state, n, names, cache) is None for n in names)
