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

from collections import ChainMap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from model.htools.capacity import N1Check, N1Verdict, Placement, state_after
from model.htools.evacuate import CHANGE_PRIMARY, node_evac_instance
from model.htools.metrics import RowCache
from model.policy import policy_shortfall
from model.resources import FailMode, InstanceDemand, MoveKind, NodeState, add_primary, apply_move
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
    *,
    shortcut: bool = True,
    found: dict | None = None,
) -> str | None:
    """canEvacuateNode: None when the node's instances can all go elsewhere, else why not.

    `alias` maps an instance to the record htools finds for it (see `GreedyN1Check`); the
    simulation moves records, so a record listed twice is found where the first move left it.
    With `shortcut`, after the failovers a node of the group that could take *all* the
    remaining instances at once settles it: every greedy choice then finds room, whatever
    the scores (`_absorbers`). `found` receives those nodes ("absorbers").
    """
    cache = cache or RowCache()
    nodes = ChainMap({}, state.nodes)  # the simulation's changes over the cluster's states
    alias = alias or {}
    plan = _plan(state, node, alias)
    where: dict[str, tuple[str, str | None]] = {}

    def located(name: str) -> tuple[str, tuple[str, str | None]]:
        key = alias.get(name, name)
        return key, where.get(key, state.locations[key])

    failovers: list[tuple[str, str | None, NodeState]] = []
    if found is not None:
        found["failovers"] = failovers
    for name in plan.drbd:
        key, (p, s) = located(name)
        failovers.append((key, s, nodes[node]))
        r = apply_move(nodes, state.demands[key], p, s, MoveKind.FAILOVER, force=True)
        if isinstance(r, FailMode):
            return f"failover of {name} to {s}: {r}"
        nodes.update(r.nodes)
        where[key] = (r.primary, r.secondary)
    if not plan.shared and not plan.recreate:
        return None
    group = state.nodes[node].group_uuid
    group_nodes = [n for n in scope if state.nodes[n].group_uuid == group]
    escape = [n for n in group_nodes if n != node]
    policy = state.cluster.group(group).ipolicy
    if shortcut and not alias:
        absorbers = _absorbers(state, nodes, node, plan, escape, policy)
        if found is not None:
            found["absorbers"] = absorbers
        if absorbers:
            return None
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
    for name in plan.recreate:
        done += 1
        d = state.demands[alias.get(name, name)]
        chosen = _recreate(nodes, d, escape, scope, policy, cache, need_choice=done < steps)
        if chosen is None:
            return f"re-creation of {name}: no node can take it"
        nodes.update(chosen)
    return None


#: absorbers kept per node: a placement changes two nodes, so three always leave one
ABSORBERS = 3


def _absorbers(
    state: ClusterState,
    nodes: Mapping[str, NodeState],
    node: str,
    plan: _Plan,
    escape: Sequence[str],
    policy,
) -> tuple[str, ...]:
    """Nodes of `escape` that pass every hard check for all of the node's instances to move
    or re-create at once: memory (unallocated above their total), local disk for re-created
    plain instances, migration tags for moved ones, the policy for re-created ones. Each
    greedy step adds one instance to one target, so such a node always has room for the next
    instance: the evacuation succeeds whatever htools' scores choose (docs/hail.md)."""
    moved = [state.demands[n] for n in plan.shared]
    made = [state.demands[n] for n in plan.recreate]
    if any(policy_shortfall(d, policy, False) is not None for d in made):
        return ()
    memory = sum(d.memory_mib for d in (*moved, *made) if d.uses_memory)
    local = [d for d in made if d.uses_local_storage]
    disk = sum(d.disk_mib for d in local)
    source = nodes[node]
    out: list[str] = []
    for t in escape:
        st = nodes[t]
        if memory and st.unallocated_memory_mib <= memory:
            continue
        if local and st.free_disk_mib <= disk:
            continue
        if made and st.exclusive_storage:
            continue
        if moved and not source.migration_tags <= st.receivable_migration_tags:
            continue
        out.append(t)
        if len(out) == ABSORBERS:
            break
    return tuple(out)


def _recreate(
    nodes: Mapping[str, NodeState],
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


@dataclass(frozen=True)
class _Base:
    """A node's evacuation on the cluster before the placement."""

    why: str | None  # the verdict (None: evacuable)
    touched: frozenset[str]  # itself and the nodes its drbd failovers use
    absorbers: tuple[str, ...]  # nodes that could take all its other instances
    deps: _Dependencies
    work: bool  # it has instances to move or re-create
    # its drbd failovers: (instance, secondary, its own state before that failover)
    failovers: tuple[tuple[str, str | None, NodeState], ...] = ()


class GreedyN1Check:
    """The greedy check prepared on one cluster and node list (see module docstring).

    Every node's evacuation is simulated once on the cluster before the placement. For a
    candidate placement (which changes one or two nodes), a node is simulated again only if
    its result can differ: the placement touches the node or its failover peers, or it has
    no absorber left unchanged and the placement changes a node its simulation reads.

    One htools quirk is kept: allocating into a named group (`group_name`), hail runs the
    check with the group's instances only and numbers the new instance after them, so it
    takes the number of the instance that many places into the cluster's list. When that
    instance's primary is in the group, the check finds the *new* instance's record under its
    number: evacuating its node moves the new instance instead (docs/hail.md, "Global N+1").
    """

    def __init__(
        self, base: ClusterState, scope: Sequence[str], checked: Sequence[str] | None = None
    ):
        self.base = base
        self.scope = tuple(scope)
        # the nodes whose evacuation is judged (hspace leaves some groups out, GlobalN1
        # `redundant`); every one of them is evacuated onto, and scored over, `scope`
        self.checked = self.scope if checked is None else tuple(checked)
        self.order = {n: i for i, n in enumerate(self.scope)}
        self.cache = RowCache()
        in_scope = set(self.scope)
        names = list(base.demands)
        k = sum(1 for n in names if base.locations[n][0] in in_scope)
        self.shadowed = (
            names[k] if k < len(names) and base.locations[names[k]][0] in in_scope else None
        )
        self._nodes: dict[str, _Base] | None = None

    def _analyse(self) -> dict[str, _Base]:
        if self._nodes is not None:
            return self._nodes
        out: dict[str, _Base] = {}
        self.by_touch: dict[str, list[str]] = {}
        for node in self.checked:
            found: dict = {}
            why = can_evacuate(self.base, node, self.scope, self.cache, found=found)
            plan = _plan(self.base, node)
            touched = {node}
            for name in plan.drbd:
                touched.update(n for n in self.base.locations[name] if n is not None)
            info = _Base(
                why,
                frozenset(touched),
                found.get("absorbers", ()),
                _dependencies(self.base, node, self.scope),
                bool(plan.shared or plan.recreate),
                tuple(found.get("failovers", ())),
            )
            out[node] = info
            for t in touched:
                self.by_touch.setdefault(t, []).append(node)
        self.failing = [n for n in self.checked if out[n].why is not None]
        self.fragile = [
            n for n in self.checked if out[n].work and len(out[n].absorbers) < ABSORBERS
        ]
        self._nodes = out
        return out

    def verdict(self, placement: Placement) -> N1Verdict:
        info = self._analyse()
        changed = set(placement.nodes)
        alias: dict[str, str] = {}
        if self.shadowed is not None and self.shadowed != placement.demand.name:
            alias[self.shadowed] = placement.demand.name
            changed |= {n for n in self.base.locations[self.shadowed] if n is not None}
        if alias:
            examine = set(self.checked)
        else:
            examine = {x for c in changed for x in self.by_touch.get(c, ())}
            examine |= changed & set(info)
            for x in self.fragile:
                b = info[x]
                if any(a not in changed for a in b.absorbers):
                    continue
                if x in changed or b.deps.whole_list or b.deps.nodes & changed:
                    examine.add(x)
        failing = [x for x in self.failing if x not in examine]
        if failing:
            node = failing[0]
            return N1Verdict(False, node, f"node {node} cannot be evacuated: {info[node].why}")
        if not examine:
            return N1Verdict(True)
        after = state_after(self.base, placement)
        for node in sorted(examine, key=self.order.__getitem__):
            b = info[node]
            quick = (
                not alias
                and node not in changed
                and b.why is None
                and (not b.work or any(a not in changed for a in b.absorbers))
            )
            why = (
                self._failovers_onto(after, node, changed)
                if quick
                else can_evacuate(after, node, self.scope, self.cache, alias)
            )
            if why is not None:
                return N1Verdict(False, node, f"node {node} cannot be evacuated: {why}")
        return N1Verdict(True)

    def _failovers_onto(self, after: ClusterState, node: str, changed: set[str]) -> str | None:
        """A node the placement did not change, evacuable before it and with an absorber
        left: only its drbd failovers onto changed nodes can fail now. Its own side of each
        failover does not depend on the secondary, so each is replayed from its recorded
        state against the secondary's new one (docs/hail.md, "Global N+1")."""
        current: dict[str, NodeState] = {}
        for key, sec, own in self._nodes[node].failovers:  # type: ignore[index]
            if sec is None or sec not in changed:
                continue
            target = current.get(sec, after.nodes[sec])
            d = after.demands[key]
            r = apply_move({node: own, sec: target}, d, node, sec, MoveKind.FAILOVER, force=True)
            if isinstance(r, FailMode):
                return f"failover of {key} to {sec}: {r}"
            current[sec] = r.nodes[sec]
        return None


def redundant_after(base: ClusterState, scope: Sequence[str], placement: Placement) -> bool:
    """The verdict by brute force: every node simulated in full, no shortcut (for tests)."""
    after = state_after(base, placement)
    cache = RowCache()
    return all(can_evacuate(after, n, scope, cache, shortcut=False) is None for n in scope)


class GreedyGlobalN1:
    """`--capacity-checks greedy`: htools' own global N+1 check."""

    name = "greedy"

    def prepare(self, base: ClusterState, scope: Sequence[str]) -> N1Check:
        return GreedyN1Check(base, scope)


def redundant(
    state: ClusterState,
    scope: Sequence[str] | None = None,
    checked: Sequence[str] | None = None,
    cache: RowCache | None = None,
) -> bool:
    """GlobalN1.redundant: every node of `checked` (default: all of `scope`, default all)
    can be evacuated within `scope`."""
    names = tuple(state.nodes) if scope is None else tuple(scope)
    judged = names if checked is None else tuple(checked)
    cache = cache or RowCache()
    return all(can_evacuate(state, n, names, cache, shortcut=False) is None for n in judged)
