"""hbal's question as plain data: the least group score within K of hbal's steps
(docs/balance.md, ../shared/specs/hspace-hbal.md §2 "An exact hbal").

hbal improves a group one move at a time (`Cluster.tryBalance`), each move one of
`possibleMoves` for the instance's template, each step checked by `applyMoveEx` on the nodes
as they are at that moment. exalloc asks for the final placement of every movable instance
that scores least among those reachable in at most K steps, and then for an order of those
steps that every intermediate state passes.

A drbd instance on (p, s) reaches a final (P, S) in a number of steps that depends only on
how (P, S) relates to (p, s): one of seven *classes* (`CLASSES`): stay (p, s), swap (s, p),
(p, x), (s, x), (x, p), (x, s), (x, y), x and y other online nodes of the group. The fewest
steps of each class under hbal's flags (`--no-disk-moves`, `--no-instance-moves`,
`--restricted-migration`, offline nodes) follow from a search over these abstract pairs
(`class_paths`), so no move is ever enumerated per pair of nodes: the formulation chooses a
class and its node(s) (formulations/balance.py). An externally mirrored instance moves its
primary to any online node in one step (`fa`).

The independent checker (`model.check.check_balance`) replays ordered steps with
`ClusterState.move` (htools' `applyMoveEx`: add/remove rules, soft checks unless forced) and
scores the result with `model.score`; `order_steps` finds such an order for a set of finals.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache

from model.resources import FailMode, MoveKind
from model.state import ClusterState

#: the seven classes of a drbd final relative to its pair now (p, s); x, y other nodes
STAY, SWAP, PX, SX, XP, XS, XY = "stay", "swap", "px", "sx", "xp", "xs", "xy"
CLASSES = (STAY, SWAP, PX, SX, XP, XS, XY)
#: the symbols of an abstract pair: the nodes now, and two others
P, S, A, B = "p", "s", "a", "b"
#: the class of an abstract final
_CLASS_OF = {
    (P, S): STAY,
    (S, P): SWAP,
    (P, A): PX,
    (S, A): SX,
    (A, P): XP,
    (A, S): XS,
    (A, B): XY,
}
#: the externally mirrored instance's one class besides staying: primary anywhere (`fa`)
FA = "fa"


@dataclass(frozen=True)
class BalanceRules:
    """hbal's flags that restrict the moves (Hbal.hs, `possibleMoves`), and those that stop
    its search (`-g`, `--min-gain-limit`, `-e`): they decide hbal's own answer, hence K when
    `-l` is not given, never which plans the exact answer may take."""

    no_disk_moves: bool = False
    no_instance_moves: bool = False
    restricted_migration: bool = False
    evac_mode: bool = False
    ignore_soft_errors: bool = False
    select_instances: frozenset[str] | None = None
    exclude_instances: frozenset[str] = frozenset()
    min_gain: float = 0.01  # -g / --min-gain
    min_gain_limit: float = 0.1  # --min-gain-limit
    min_score: float = 1e-9  # -e / --min-score: hbal stops this far above optimalCVScore

    def search(self):  # noqa: ANN201
        """hbal's own options for these flags (model/htools/hbal.py `BalanceOptions`)."""
        from model.htools.hbal import BalanceOptions

        return BalanceOptions(
            disk_moves=not self.no_disk_moves,
            instance_moves=not self.no_instance_moves,
            restricted_migration=self.restricted_migration,
            ignore_soft_errors=self.ignore_soft_errors,
            evac_mode=self.evac_mode,
            min_gain=self.min_gain,
            min_gain_limit=self.min_gain_limit,
        )


@dataclass(frozen=True, slots=True)
class Step:
    """One hbal move: the instance, its kind (hbal's `a=` code) and target node."""

    instance: str
    kind: MoveKind
    target: str | None

    @property
    def code(self) -> str:
        """hbal's `a=` text: `f`, `r:node`, `f r:node f`, `r:node f`, `f r:node`, `fa:node`."""
        t = self.target
        return {
            MoveKind.FAILOVER: "f",
            MoveKind.REPLACE_SECONDARY: f"r:{t}",
            MoveKind.REPLACE_PRIMARY: f"f r:{t} f",
            MoveKind.REPLACE_AND_FAILOVER: f"r:{t} f",
            MoveKind.FAILOVER_AND_REPLACE: f"f r:{t}",
            MoveKind.FAILOVER_TO_ANY: f"fa:{t}",
        }[self.kind]


def _allowed(pair: tuple[str, str], offline: frozenset[str], rules: BalanceRules) -> list[tuple]:
    """The abstract moves from `pair` (symbols): hbal's own `possibleMoves` and its failover
    rule (model/htools/hbal.py `instance_moves`) asked about symbolic targets, the online
    nodes of the group not in the pair: the nodes now (p, s) when online and free, and a new
    one (a, or b when a is in the pair)."""
    from model.htools.evacuate import MIRROR_INTERNAL
    from model.htools.hbal import FAILOVER, possible_moves

    options = rules.search()
    pri, sec = pair
    use_secondary = sec not in offline and options.instance_moves
    out: list[tuple] = [(FAILOVER.kind, None)] if use_secondary else []
    targets = [t for t in (P, S) if t not in pair and t not in offline]
    if A not in pair:
        targets.append(A)
    elif B not in pair:
        targets.append(B)
    for t in targets:
        for mv in possible_moves(
            MIRROR_INTERNAL,
            use_secondary,
            options.instance_moves,
            options.disk_moves,
            options.restricted_migration,
            pri in offline,
            t,
        ):
            out.append((mv.kind, mv.target))
    return out


_AFTER = {
    MoveKind.FAILOVER: lambda p, s, t: (s, p),
    MoveKind.REPLACE_SECONDARY: lambda p, s, t: (p, t),
    MoveKind.REPLACE_AND_FAILOVER: lambda p, s, t: (t, p),
    MoveKind.REPLACE_PRIMARY: lambda p, s, t: (t, s),
    MoveKind.FAILOVER_AND_REPLACE: lambda p, s, t: (s, t),
}


def _canonical(pair: tuple[str, str], path: tuple) -> tuple[tuple[str, str], tuple]:
    """Rename a lone fresh node b to a (so that (b, s) and (a, s) are one class)."""
    if B in pair and A not in pair:
        ren = {B: A}
        return (
            tuple(ren.get(x, x) for x in pair),  # type: ignore[return-value]
            tuple((k, ren.get(t, t)) for k, t in path),
        )
    return pair, path


@cache
def class_paths(
    p_offline: bool, s_offline: bool, rules: BalanceRules, max_steps: int
) -> dict[str, tuple[tuple, ...]]:
    """Each class reachable in at most `max_steps` steps -> every path of the fewest steps
    to it, as abstract moves (kind, target symbol). A breadth-first search over the abstract
    pairs: the fewest steps of a class never depend on which other node x (or y) is."""
    offline = frozenset(x for x, off in ((P, p_offline), (S, s_offline)) if off)
    start = (P, S)
    best: dict[tuple[str, str], int] = {start: 0}
    paths: dict[tuple[str, str], list[tuple]] = {start: [()]}
    frontier = [start]
    for depth in range(1, max_steps + 1):
        nxt: list[tuple[str, str]] = []
        for pair in frontier:
            for path in paths[pair]:
                if len(path) != depth - 1:
                    continue
                for kind, t in _allowed(pair, offline, rules):
                    new, new_path = _canonical(_AFTER[kind](*pair, t), (*path, (kind, t)))
                    if new not in _CLASS_OF and new != (B, A):
                        continue
                    if new == (B, A):  # (b, a): the class xy with its nodes named the other way
                        new, new_path = (
                            (A, B),
                            tuple((k, {A: B, B: A}.get(x, x)) for k, x in new_path),
                        )
                    if best.get(new, depth) < depth:
                        continue
                    if new not in best:
                        best[new] = depth
                        paths[new] = []
                        nxt.append(new)
                    paths[new].append(new_path)
        frontier = nxt
    return {_CLASS_OF[pair]: tuple(ps) for pair, ps in paths.items() if pair in _CLASS_OF}


def class_of(now: tuple[str, str], final: tuple[str, str]) -> str:
    """The class of a drbd final (P, S) relative to the pair now (p, s)."""
    p, s = now
    sym = {p: P, s: S}
    key = (sym.get(final[0], A), sym.get(final[1], A if final[0] in sym else B))
    return _CLASS_OF[key]


def concrete_paths(
    now: tuple[str, str], final: tuple[str, str], paths: Sequence[tuple]
) -> list[tuple[tuple[MoveKind, str | None], ...]]:
    """The abstract paths of a final's class with its symbols named: p, s now; a, b the
    final's other node(s)."""
    p, s = now
    cls = class_of(now, final)
    names = {P: p, S: s}
    if cls in (PX, SX):
        names[A] = final[1]
    elif cls in (XP, XS):
        names[A] = final[0]
    elif cls == XY:
        names[A], names[B] = final
    return [tuple((k, None if t is None else names[t]) for k, t in path) for path in paths]


def movable(state: ClusterState, group_uuid: str, rules: BalanceRules) -> list[str]:
    """The instances hbal may move in the group now (model/htools/hbal.py: `scope_of` over
    `movable_instances`, then `movable_now`: auto balance, and with --evac-mode only those on
    an offline node)."""
    from model.htools.hbal import Table, movable_instances, movable_now, scope_of

    selected = rules.select_instances or ()
    pool = movable_instances(state, selected, rules.exclude_instances)
    scope = scope_of(state, group_uuid, pool)
    return movable_now(rules.search(), scope, Table(state, 0.0))


@dataclass(frozen=True)
class BalanceProblem:
    """One group's balancing question: the cluster as it is, the group, K and hbal's flags."""

    state: ClusterState
    group_uuid: str
    max_steps: int
    rules: BalanceRules = field(default_factory=BalanceRules)

    @property
    def group_nodes(self) -> list[str]:
        return [n for n, st in self.state.nodes.items() if st.group_uuid == self.group_uuid]

    @property
    def online(self) -> list[str]:
        return [n for n in self.group_nodes if not self.state.nodes[n].offline]

    @property
    def movable(self) -> list[str]:
        return movable(self.state, self.group_uuid, self.rules)

    def classes(self, name: str) -> dict[str, tuple[tuple, ...]]:
        """The classes the instance can reach within K steps, each with its fewest-step
        paths (an externally mirrored one: `FA` in one step)."""
        d = self.state.demands[name]
        p, s = self.state.locations[name]
        if d.disk_template != "drbd":
            if self.rules.no_instance_moves or self.max_steps < 1:
                return {STAY: ((),)}
            return {STAY: ((),), FA: (((MoveKind.FAILOVER_TO_ANY, A),),)}
        assert s is not None
        nodes = self.state.nodes
        return class_paths(nodes[p].offline, nodes[s].offline, self.rules, self.max_steps)


def steps_of(paths: Mapping[str, tuple[tuple, ...]], cls: str) -> int:
    return len(paths[cls][0])


# --- an order of the steps -------------------------------------------------------------------


def final_paths(
    problem: BalanceProblem, name: str, final: tuple[str, str | None]
) -> list[tuple[Step, ...]]:
    """The fewest-step paths of one instance to its final, as concrete steps."""
    p, s = problem.state.locations[name]
    classes = problem.classes(name)
    if problem.state.demands[name].disk_template != "drbd":
        if final[0] == p:
            return [()]
        return [(Step(name, MoveKind.FAILOVER_TO_ANY, final[0]),)]
    assert s is not None and final[1] is not None
    cls = class_of((p, s), (final[0], final[1]))
    if cls not in classes:
        return []
    return [
        tuple(Step(name, k, t) for k, t in path)
        for path in concrete_paths((p, s), (final[0], final[1]), classes[cls])
    ]


class OrderOutOfTime(Exception):
    """`order_steps` stopped at its deadline: whether the finals have an order is not known
    (the caller must not cut them off as if they had none)."""


def order_steps(
    problem: BalanceProblem,
    finals: Mapping[str, tuple[str, str | None]],
    *,
    max_visits: int = 20000,
    deadline: float | None = None,
) -> list[Step] | None:
    """An order of the finals' fewest-step paths in which every step passes hbal's per-step
    checks on the state it meets (`ClusterState.move`: htools' applyMoveEx), or None when
    there is none. A depth-first search over interleavings: at each point any instance may
    take its next step (choosing its path at its first step); a set of progress tuples
    already found to lead nowhere is not tried again. Its visits can take seconds on a
    crowded group (13 s for 22 moves on 8 nodes, past a 10 s limit): past `deadline`
    (perf_counter) it raises OrderOutOfTime."""
    names = [n for n in finals if finals[n] != problem.state.locations[n][:2]]
    options = {n: final_paths(problem, n, finals[n]) for n in names}
    if any(not o for o in options.values()):
        return None
    force = problem.rules.ignore_soft_errors
    dead: set[tuple] = set()
    visits = 0

    def go(state: ClusterState, progress: tuple) -> list[Step] | None:
        nonlocal visits
        if all(path is not None and at == len(path) for path, at in progress):
            return []
        if progress in dead or visits > max_visits:
            return None
        visits += 1
        if deadline is not None and visits % 64 == 1 and time.perf_counter() > deadline:
            raise OrderOutOfTime
        for idx, (path, at) in enumerate(progress):
            choices = options[names[idx]] if path is None else [path]
            for choice in choices:
                if at == len(choice):
                    continue
                step = choice[at]
                if problem.rules.evac_mode and allowed_step(problem, state, step) is not None:
                    continue  # --evac-mode: only while the instance is on an offline node
                after = state.move(step.instance, step.kind, step.target, force=force)
                if isinstance(after, FailMode):
                    continue
                nxt = list(progress)
                nxt[idx] = (choice, at + 1)
                rest = go(after, tuple(nxt))
                if rest is not None:
                    return [step, *rest]
        dead.add(progress)
        return None

    start = tuple((None, 0) for _ in names)
    return go(problem.state, start)


def allowed_step(problem: BalanceProblem, state: ClusterState, step: Step) -> str | None:
    """Why hbal would not offer `step` in `state` (None when it would): the instance must be
    one hbal may move there (`movable_now`: with --evac-mode, still on an offline node) and
    the step one of the moves `checkInstanceMove` tries for it (model/htools/hbal.py
    `instance_moves`: hbal's possibleMoves onto the online nodes of the group)."""
    from model.htools.hbal import (
        Move,
        Table,
        instance_moves,
        movable_instances,
        movable_now,
        scope_of,
    )

    rules = problem.rules
    pool = movable_instances(state, rules.select_instances or (), rules.exclude_instances)
    scope = scope_of(state, problem.group_uuid, pool)
    if step.instance not in movable_now(rules.search(), scope, Table(state, 0.0)):
        return "hbal does not move it here"
    offered = instance_moves(state, scope, step.instance, rules.search())
    if Move(step.kind, step.target) not in offered:
        return f"hbal offers no {step.code} for it here"
    return None


def offered_steps(problem: BalanceProblem, state: ClusterState) -> list[Step]:
    """Every step hbal offers in `state`, in its order: each instance it may move there
    (`movable_now`) with each move `checkInstanceMove` tries for it (`instance_moves`), the
    steps `allowed_step` allows. Whether a step passes htools' checks is `state.move`'s."""
    from model.htools.hbal import Table, instance_moves, movable_instances, movable_now, scope_of

    rules = problem.rules
    pool = movable_instances(state, rules.select_instances or (), rules.exclude_instances)
    scope = scope_of(state, problem.group_uuid, pool)
    options = rules.search()
    return [
        Step(name, move.kind, move.target)
        for name in movable_now(options, scope, Table(state, 0.0))
        for move in instance_moves(state, scope, name, options)
    ]


# --- the formulation's data --------------------------------------------------------------------


@dataclass(frozen=True)
class MovableData:
    """One movable instance: where it is, the classes it can reach (with their fewest
    steps) and what it does to each node's numbers as primary or secondary there."""

    name: str
    drbd: bool
    primary: str
    secondary: str | None
    steps: Mapping[str, int]  # class -> fewest steps
    primaries: tuple[str, ...]  # online nodes that may take it as a new primary
    secondaries: tuple[str, ...]  # ... as a new secondary
    #: node -> change of the score's spread metrics (model.placement.SD_METRICS) when the
    #: instance is added there as primary / secondary (at its nodes now: what removing it
    #: gives back, with the same sign)
    sd_primary: Mapping[str, tuple[float, ...]]
    sd_secondary: Mapping[str, tuple[float, ...]]
    usage_primary: Mapping[str, int]  # row kind -> what it takes (model.capacity)
    usage_secondary: Mapping[str, int]
    memory_mib: int  # primary memory it uses (unallocated memory)
    failover_mib: int  # what its secondary reserves for its primary
    exclusion_tags: tuple[str, ...]
    primary_offline: bool
    secondary_offline: bool
    forced: bool  # its moves skip the soft checks (an offline node, --ignore-soft-errors)
    #: class -> the nodes left to it by the planes' pruning (model/balance_bound.py; the
    #: (x,y) class as its x and y keys there); None: every candidate
    allowed: Mapping[str, frozenset[str]] | None = None

    def keeps(self, cls: str, node: str | None = None) -> bool:
        """Whether the final of class `cls` at `node` (the other node) is left to the model."""
        if self.allowed is None:
            return True
        nodes = self.allowed.get(cls)
        return nodes is not None and (node is None or node in nodes)


@dataclass(frozen=True)
class NodeData:
    """A scored (online) node of the group now."""

    name: str
    sd_now: tuple[float, ...]
    caps: Mapping[str, int]  # row kind -> cap now (model.capacity.row_caps), N+1 row left out
    unallocated_mib: int
    reserve_mib: int
    total_memory_mib: float
    peers_mib: Mapping[str, int]  # primary node -> failover memory reserved for it now
    fails_loaded: bool  # the N+1 flag as loaded (kept while nothing changes on the node)
    fails_now: bool  # failing N+1 by the loaded flag or as htools recomputes it
    instances: int  # primaries and secondaries now
    tag_counts: Mapping[str, int]  # exclusion tag -> primaries carrying it now


@dataclass(frozen=True)
class BalanceData:
    """What formulations/balance.py needs, read off htools' own arithmetic."""

    nodes: tuple[NodeData, ...]
    instances: tuple[MovableData, ...]
    max_steps: int
    score_now: float
    score_constant: float  # score now minus what the model's terms come to now
    #: failover memory reserved on each node for each primary by instances that do not move
    fixed_peers: Mapping[str, Mapping[str, int]]
    unmodelled: tuple[str, ...] = ()  # why the score model would not be exact

    @property
    def node(self) -> dict[str, NodeData]:
        return {n.name: n for n in self.nodes}


def _sd_values(st) -> tuple[float, ...]:  # noqa: ANN001
    from model.placement import SD_METRICS

    return tuple(float(m.value(st)) for m in SD_METRICS)  # type: ignore[misc]


def _minus(a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(x - y for x, y in zip(a, b, strict=True))


class DataOutOfTime(Exception):
    """`balance_data`'s deadline passed before it had every movable instance's numbers (on
    benchmarks/time_limits.py's 200-node group, 1,127 instances, it takes about 16 s)."""

    def __init__(self, done: int, total: int) -> None:
        super().__init__(f"the model's data stopped after {done} of {total} instances")
        self.done = done
        self.total = total


def balance_data(problem: BalanceProblem, deadline: float | None = None) -> BalanceData:
    """The group's numbers now and each movable instance's effect on them (docs/balance.md);
    DataOutOfTime once the perf_counter time `deadline` has passed (looked at per instance).

    Candidates are pruned with a proof: a node refuses a new role when the strict add fails
    even with every movable instance taken off it (every check of an add is monotone in the
    load, and the load a node can have at any step is at least that of the instances that
    never move)."""
    from model.capacity import N1, primary_usage, row_caps, secondary_usage
    from model.placement import NO_PRIMARY
    from model.resources import (
        add_primary,
        add_secondary,
        apply_primary,
        apply_secondary,
        remove_primary,
        remove_secondary,
    )
    from model.score import cluster_score
    from model.state import StateEdit

    state = problem.state
    movable = problem.movable
    online = problem.online
    unmodelled: list[str] = []
    group_states = [state.nodes[n] for n in problem.group_nodes]
    if any(st.location_tags for st in group_states):
        unmodelled.append("location tags (location scores) are not modelled")
    if any(st.migration_tags or st.receivable_migration_tags for st in group_states):
        unmodelled.append("migration tags are not modelled")
    if any(state.demands[n].desired_locations for n in movable):
        unmodelled.append("desired locations are not modelled")
    edit = StateEdit(state)
    for name in movable:
        edit.remove(name)
    base = edit.state()
    fixed_peers: dict[str, dict[str, int]] = {}
    for n in online:
        fixed_peers[n] = dict(base.nodes[n].peers)
    kinds = {k for n in online for k, _ in row_caps(state.nodes[n]) if k != N1}
    insts = []
    for name in movable:
        if deadline is not None and time.perf_counter() >= deadline:
            raise DataOutOfTime(len(insts), len(movable))
        d = state.demands[name]
        p, s = state.locations[name]
        drbd = d.disk_template == "drbd"
        classes = problem.classes(name)
        steps = {c: len(paths[0]) for c, paths in classes.items()}
        forced = (
            problem.rules.ignore_soft_errors
            or state.nodes[p].offline
            or (s is not None and state.nodes[s].offline)
        )
        prims = tuple(
            n
            for n in online
            if n not in (p, s)
            and not isinstance(add_primary(base.nodes[n], d, strict=not forced), FailMode)
            # an externally mirrored instance reaches another primary only by `fa`, which
            # hbal does not offer under --no-instance-moves (or K = 0): no final there
            and (drbd or FA in steps)
        )
        if drbd and s is not None and s in online:
            # the secondary now as the new primary (swap, (s, x))
            if not isinstance(add_primary(base.nodes[s], d, strict=not forced), FailMode):
                prims = (*prims, s)
        secs: tuple[str, ...] = ()
        if drbd:
            secs = tuple(
                n
                for n in online
                if n not in (p, s)
                and not isinstance(
                    add_secondary(base.nodes[n], d, NO_PRIMARY, strict=not forced), FailMode
                )
            )
            if p in online:
                secs = (*secs, p)
        sd_p, sd_s = {}, {}
        for n in prims:
            st = state.nodes[n]
            sd_p[n] = _minus(_sd_values(apply_primary(st, d)), _sd_values(st))
        st = state.nodes[p]
        sd_p[p] = _minus(_sd_values(st), _sd_values(remove_primary(st, d)))
        for n in secs:
            st = state.nodes[n]
            sd_s[n] = _minus(_sd_values(apply_secondary(st, d, NO_PRIMARY)), _sd_values(st))
        if drbd and s is not None:
            st = state.nodes[s]
            sd_s[s] = _minus(_sd_values(st), _sd_values(remove_secondary(st, d, p)))
        insts.append(
            MovableData(
                name=name,
                drbd=drbd,
                primary=p,
                secondary=s if drbd else None,
                steps=steps,
                primaries=prims,
                secondaries=secs,
                sd_primary=sd_p,
                sd_secondary=sd_s,
                usage_primary={k: primary_usage(k, d) for k in sorted(kinds)},
                usage_secondary={k: secondary_usage(k, d) for k in sorted(kinds)},
                memory_mib=d.memory_mib if d.uses_memory else 0,
                failover_mib=d.secondary_memory_mib if drbd else 0,
                exclusion_tags=d.exclusion_tags,
                primary_offline=state.nodes[p].offline,
                secondary_offline=s is not None and state.nodes[s].offline,
                forced=forced,
            )
        )
    nodes = []
    for n in online:
        st = state.nodes[n]
        nodes.append(
            NodeData(
                name=n,
                sd_now=_sd_values(st),
                caps={k: c for k, c in row_caps(st) if k != N1},
                unallocated_mib=st.unallocated_memory_mib,
                reserve_mib=st.reserved_memory_mib,
                total_memory_mib=st.total_memory_mib,
                peers_mib=dict(st.peers),
                fails_loaded=st.fail_n1,
                fails_now=st.fail_n1 or st.unallocated_memory_mib <= st.reserved_memory_mib,
                instances=len(st.primaries) + len(st.secondaries),
                tag_counts=dict(st.exclusion_tag_counts),
            )
        )
    score_now = cluster_score(state, problem.group_uuid)
    modelled = modelled_score(nodes, [state.nodes[n] for n in problem.group_nodes], insts)
    return BalanceData(
        nodes=tuple(nodes),
        instances=tuple(insts),
        max_steps=problem.max_steps,
        score_now=score_now,
        score_constant=score_now - modelled,
        fixed_peers=fixed_peers,
        unmodelled=tuple(unmodelled),
    )


def modelled_score(nodes: Sequence[NodeData], group_states: Sequence, insts) -> float:  # noqa: ANN001
    """What the model's score terms come to with nothing moved: the spreads, the reserves'
    spread and total, the N+1 failures, the offline counts of movable instances and the
    exclusion-tag conflicts the model carries (formulations/balance.py `define_score`)."""
    from model.placement import RESERVED, RESERVED_TOTAL, SD_METRICS, sd_of
    from model.score import WEIGHTS

    total = 0.0
    for k, m in enumerate(SD_METRICS):
        total += m.weight * sd_of([n.sd_now[k] for n in nodes])
    prem = [n.reserve_mib / n.total_memory_mib for n in nodes]
    total += WEIGHTS[RESERVED] * sd_of(prem) + WEIGHTS[RESERVED_TOTAL] * sum(prem)
    total += sum(n.instances for n in nodes if n.fails_loaded)
    for i in insts:
        total += (WEIGHTS["offline_all_cnt"] + WEIGHTS["offline_pri_cnt"]) * i.primary_offline
        total += WEIGHTS["offline_all_cnt"] * i.secondary_offline
    for t, n in tag_keys(nodes, insts):
        total += WEIGHTS["pri_tags_score"] * max(0, n.tag_counts.get(t, 0) - 1)
    return total


def tag_keys(nodes: Sequence[NodeData], insts: Sequence[MovableData]) -> list[tuple[str, NodeData]]:
    """(exclusion tag, node) pairs whose conflict count a move may change."""
    tags = sorted({t for i in insts for t in i.exclusion_tags})
    return [(t, n) for t in tags for n in nodes]


_CODES = {
    "f": MoveKind.FAILOVER,
    "r": MoveKind.REPLACE_SECONDARY,
    "f r f": MoveKind.REPLACE_PRIMARY,
    "r f": MoveKind.REPLACE_AND_FAILOVER,
    "f r": MoveKind.FAILOVER_AND_REPLACE,
    "fa": MoveKind.FAILOVER_TO_ANY,
}


def step_of_code(instance: str, code: str) -> Step:
    """A step from hbal's `a=` text (`f`, `r:n`, `f r:n f`, `r:n f`, `f r:n`, `fa:n`)."""
    target = None
    words = []
    for word in code.split():
        if ":" in word:
            head, target = word.split(":", 1)
            words.append(head)
        else:
            words.append(word)
    kind = _CODES.get(" ".join(words))
    if kind is None:
        raise ValueError(f"not an hbal move: a={code}")
    return Step(instance, kind, target)


def steps_from_hbal(output: str) -> list[Step]:
    """The steps of hbal's solution table (`  1. inst  p:s => p:s  score a=...`), in order."""
    import re

    out = []
    for line in output.splitlines():
        found = re.match(r"\s*\d+\.\s+(\S+)\s+\S+\s+=>\s+\S+\s+\S+\s+a=(.*)$", line)
        if found:
            out.append(step_of_code(found.group(1), found.group(2).strip()))
    return out


#: nodes one of hbal's steps changes at most (`applyMoveEx`'s result: a failover two, a
#: replacement three, failover-to-any two); every other node keeps its state
NODES_PER_STEP = 3


def _least_spread(values: Sequence[float], free: int) -> float:
    """The least population standard deviation of `values` when any `free` of them may be
    replaced by any numbers: the best replacement is the mean of the kept ones, so the least
    is sqrt(min over kept sets F of Σ_F (v − mean_F)² / n), and the best F of a given size is
    a run of neighbours in sorted order (a set minimising the spread is contiguous)."""
    n = len(values)
    keep = n - free
    if keep <= 1:
        return 0.0
    xs = sorted(values)
    best = math.inf
    for lo in range(n - keep + 1):
        run = xs[lo : lo + keep]
        mean = math.fsum(run) / keep
        best = min(best, math.fsum((v - mean) * (v - mean) for v in run))
    return math.sqrt(best / n)


def locality_bound(problem: BalanceProblem) -> float:
    """A lower bound of the group's score after at most K of hbal's steps, valid for any K
    and group size and computed from the loaded state alone: each step changes at most
    `NODES_PER_STEP` nodes, so at least all but 3K nodes keep their score components. Each
    spread is at least its `_least_spread` with 3K values free, each per-node sum (counts,
    reserved memory: all non-negative) at least the sum without its 3K largest terms, the
    pooled exclusion score at least 0; the bound is their weighted sum (each term's worst
    case taken apart, so the bound holds for every set of changed nodes), a hair below it
    for the float sums. The model's relaxation is usually far tighter; this is the bound
    where the model is not built (docs/balance.md)."""
    from model.score import METRICS

    states = [problem.state.nodes[n] for n in problem.group_nodes]
    online = [st for st in states if not st.offline]
    offline = [st for st in states if st.offline]
    free = NODES_PER_STEP * max(problem.max_steps, 0)
    if not online:
        return 0.0
    total = 0.0
    for m in METRICS:
        if m.aggregation == "pooled" or m.value is None:
            continue
        xs = [float(m.value(st)) for st in (online if m.online else offline)]
        if not xs:
            continue
        if m.aggregation == "sd":
            total += m.weight * _least_spread(xs, free)
        else:
            assert min(xs) >= 0.0, m.name
            kept = sorted(xs)[: max(len(xs) - free, 0)]
            total += m.weight * math.fsum(kept)
    return max(0.0, total * (1 - 1e-9) - 1e-9)
