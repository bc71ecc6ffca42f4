"""hbal's search as Ganeti 3.0.2 runs it (Cluster.hs `tryBalance`, `checkMove`,
`checkInstanceMove`, `possibleMoves`, `checkSingleStep`, `doNextBalance`; Program/Hbal.hs
`iterateDepth`; Cluster/Moves.hs `applyMoveEx` through `model.resources.apply_move`), ported
for `exalloc balance --greedy` and for the exact half, which takes its moves and per-step checks
from here (docs/balance.md).

The pieces, pure functions over a `ClusterState` (nothing here prints):

* `Scope` (`scope_of(state, group_uuid, movable)`): the group hbal balances
  (`ClusterUtils.splitCluster`): its nodes and the instances whose primary is in it, in
  htools' index order, and which of them may move (`Instance.movable`: a movable template,
  not split across groups, not excluded, selected when a selection is given).
* `group_score(state, scope) -> float`: `Metrics.compCV` over the group's nodes, the score
  hbal prints and minimises (the 20 terms of `model.score`, bit for bit: `model.htools.metrics`).
* `possible_moves(mirror, use_secondary, instance_moves, disk_moves, restricted, primary_offline,
  target) -> list[Move]`: `possibleMoves`, the moves towards one target node.
* `instance_moves(state, scope, instance, options) -> list[Move]`: every move
  `checkInstanceMove` tries for one instance, in its order (Failover first, then each online
  group node but the instance's own, in index order, with `possible_moves`' list).
* `apply_step(state, instance, move, options) -> ClusterState | FailMode`: `checkSingleStep`'s
  `applyMoveEx`: the move with htools' add/remove rules on the receiving nodes in their current
  state (soft checks skipped with `--ignore-soft-errors` or when the node given up is offline).
* `check_instance_move(options, scope, table, instance) -> Table`,
  `check_move(options, scope, table, victims) -> Table`: the best table after one move (of one
  instance, of any): strictly lower scores only, so the first move in hbal's order wins ties.
* `movable_now(options, scope, table) -> list[str]`: the instances `tryBalance` relocates.
* `try_balance(options, scope, table) -> Table | None`: one round with hbal's min-gain rule.
* `do_next_balance(table, max_rounds, min_score) -> bool`, `iterate_depth(options, scope,
  table, max_rounds, min_score) -> Table`, `balance(state, scope, options, max_rounds,
  min_score_gap) -> Table`: the whole search, a pure function returning the steps
  (`Table.placements`, oldest first) and the final state (hcheck's "needs rebalancing" asks it).
* `optimal_score(state, scope) -> float`: `Metrics.optimalCVScore`, the score the N+1
  reservations leave at best.

A `Table` is htools' `Cluster.Table`: a state, its group score and the placements so far.
hbal's main (loading extras, group selection, its messages, -C, -S, -X's job sets) is
model/htools/hbal_program.py. Scores of all candidate moves of a round are computed together
(`ListScores`: an estimate with an error bound for each, the exact two-pass value for those
that may be the best), which gives the same choice as hbal's sequential fold.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from model.backends.text import (
    alias,
    cluster_suffix,
    printf_fixed,
)
from model.cluster import MOVABLE_TEMPLATES, read_name
from model.htools.evacuate import MIRROR_EXTERNAL, MIRROR_INTERNAL, mirror_type
from model.htools.metrics import (
    Change,
    ListScores,
    RowCache,
    list_score,
    list_stats,
    node_row,
    stat_value,
)
from model.htools.nodelist import table
from model.operations import Step, command
from model.resources import (
    FailMode,
    MoveKind,
    MoveResult,
    NodeState,
    apply_move,
)
from model.score import METRICS
from model.state import ClusterState

if TYPE_CHECKING:
    pass

#: Metrics.reservedMemRtotalCoeff
RESERVED_MEM_RTOTAL_COEFF = 0.25


@dataclass(frozen=True)
class BalanceOptions:
    """hbal's `AlgorithmOptions` that shape its search (CLI defaults of 3.0.2)."""

    disk_moves: bool = True  # not --no-disk-moves
    instance_moves: bool = True  # not --no-instance-moves
    restricted_migration: bool = False  # --restricted-migration
    ignore_soft_errors: bool = False  # --ignore-soft-errors
    evac_mode: bool = False  # --evac-mode
    min_gain: float = 0.01  # -g / --min-gain
    min_gain_limit: float = 0.1  # --min-gain-limit


@dataclass(frozen=True, slots=True)
class Move:
    """One of hbal's moves (`IMove`): its kind and target node (None for a failover)."""

    kind: MoveKind
    target: str | None = None


FAILOVER = Move(MoveKind.FAILOVER)


@dataclass(frozen=True, slots=True)
class Placement:
    """One step of a solution (htools' `Placement`), with where the instance was before it."""

    instance: str
    old_primary: str
    old_secondary: str | None
    primary: str
    secondary: str | None
    move: Move
    score: float


@dataclass(frozen=True)
class Scope:
    """The group hbal balances: its nodes and instances in index order, the movable ones."""

    group_uuid: str
    nodes: tuple[str, ...]
    instances: tuple[str, ...]
    movable: frozenset[str]


@dataclass(frozen=True)
class Table:
    """`Cluster.Table`: the state, its group score, the placements so far (oldest first)."""

    state: ClusterState
    score: float
    placements: tuple[Placement, ...] = ()


# --- the group ---------------------------------------------------------------------------


def split_instances(state: ClusterState) -> frozenset[str]:
    """`findSplitInstances`: instances whose primary and secondary are in different groups."""
    from model.htools.hinfo import split_instances as split

    return frozenset(i.name for i in split(state))


def movable_instances(
    state: ClusterState,
    selected: Iterable[str] = (),
    excluded: Iterable[str] = (),
) -> frozenset[str]:
    """`Instance.movable` after loading: a movable template (`supportsMoves`), not excluded,
    in the selection when there is one (`updateMovable`), not split (`disableSplitMoves`)."""
    chosen = set(selected)
    out = set(excluded)
    split = split_instances(state)
    return frozenset(
        name
        for name, d in state.demands.items()
        if d.disk_template in MOVABLE_TEMPLATES
        and name not in out
        and (not chosen or name in chosen)
        and name not in split
    )


def scope_of(state: ClusterState, group_uuid: str, movable: frozenset[str]) -> Scope:
    """`splitCluster` for one group: its nodes, the instances whose primary is in it."""
    nodes = tuple(n for n, st in state.nodes.items() if st.group_uuid == group_uuid)
    inside = set(nodes)
    order = {i.name: k for k, i in enumerate(state.cluster.instances)}
    instances = tuple(
        sorted(
            (i for i, (p, _) in state.locations.items() if p in inside),
            key=lambda i: order.get(i, len(order)),
        )
    )
    return Scope(group_uuid, nodes, instances, frozenset(i for i in instances if i in movable))


def group_score(state: ClusterState, scope: Scope) -> float:
    """`Metrics.compCV` of the group's node list: the score hbal prints and minimises."""
    return list_score([state.nodes[n] for n in scope.nodes])


def optimal_score(state: ClusterState, scope: Scope) -> float:
    """`Metrics.optimalCVScore`: 0.25 × (D/(T − max T) − D/T), D the peer reservations'
    sum, T the nodes' total memory; 0 with fewer than two nodes or T − max T ≤ 0."""
    nodes = [state.nodes[n] for n in scope.nodes]
    if len(nodes) <= 1:
        return 0.0
    mems = [st.total_memory_mib for st in nodes]
    total = 0.0
    for m in mems:
        total += m
    one_less = total - max(mems)
    if not one_less > 0:
        return 0.0
    drbd = float(sum(mem for st in nodes for _, mem in st.peers))
    return RESERVED_MEM_RTOTAL_COEFF * (drbd / one_less - drbd / total)


def initial_table(state: ClusterState, scope: Scope) -> Table:
    return Table(state, group_score(state, scope))


# --- the moves ---------------------------------------------------------------------------


def possible_moves(
    mirror: str,
    use_secondary: bool,
    instance_moves: bool,
    disk_moves: bool,
    restricted: bool,
    primary_offline: bool,
    target: str,
) -> list[Move]:
    """`possibleMoves`: the moves towards `target` for an instance of this mirror type."""
    if mirror == MIRROR_EXTERNAL:
        return [Move(MoveKind.FAILOVER_TO_ANY, target)] if instance_moves else []
    if mirror != MIRROR_INTERNAL or not disk_moves:
        return []
    rs = Move(MoveKind.REPLACE_SECONDARY, target)
    if not instance_moves:
        return [rs]
    if restricted and not primary_offline:
        return [rs]
    raf = Move(MoveKind.REPLACE_AND_FAILOVER, target)
    if not use_secondary:
        return [rs, raf]
    far = Move(MoveKind.FAILOVER_AND_REPLACE, target)
    if not restricted:
        return [rs, raf, Move(MoveKind.REPLACE_PRIMARY, target), far]
    return [rs, raf, far]


def online_nodes(state: ClusterState, scope: Scope) -> list[str]:
    """The group's online nodes in index order: every move's possible targets."""
    return [n for n in scope.nodes if not state.nodes[n].offline]


def instance_moves(
    state: ClusterState,
    scope: Scope,
    instance: str,
    options: BalanceOptions,
    online: Sequence[str] | None = None,
) -> list[Move]:
    """Every move `checkInstanceMove` tries for the instance, in its order."""
    if online is None:
        online = online_nodes(state, scope)
    p, s = state.locations[instance]
    mirror = mirror_type(state.demands[instance].disk_template)
    use_secondary = s is not None and s in online and options.instance_moves
    out: list[Move] = []
    if mirror == MIRROR_INTERNAL and use_secondary:
        out.append(FAILOVER)
    primary_offline = state.nodes[p].offline
    for t in online:
        if t == p or t == s:
            continue
        out += possible_moves(
            mirror,
            use_secondary,
            options.instance_moves,
            options.disk_moves,
            options.restricted_migration,
            primary_offline,
            t,
        )
    return out


def move_result(
    nodes: Mapping[str, NodeState],
    state: ClusterState,
    instance: str,
    move: Move,
    force: bool,
    memo: dict | None = None,
) -> MoveResult | FailMode:
    """`applyMoveEx force` on the node states `nodes` (the changed nodes and new places);
    `memo`: `apply_move`'s, shared by the moves of one round."""
    p, s = state.locations[instance]
    d = state.demands[instance]
    return apply_move(nodes, d, p, s, move.kind, move.target, force=force, memo=memo)


def apply_step(
    state: ClusterState, instance: str, move: Move, options: BalanceOptions
) -> ClusterState | FailMode:
    """One step as `checkSingleStep` makes it: the new state, or the failure that refuses
    it (htools' add rules on the receiving nodes; the nodes given up are never checked)."""
    return state.move(instance, move.kind, move.target, force=options.ignore_soft_errors)


def _placed(state: ClusterState, instance: str, result: MoveResult) -> ClusterState:
    locations = dict(state.locations)
    locations[instance] = (result.primary, result.secondary)
    return replace(state.with_nodes(result.nodes), locations=locations)


# --- the search --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Candidate:
    instance: str
    move: Move
    result: MoveResult


class SearchCache(RowCache):
    """What hbal's rounds share: node components (RowCache) and each candidate move's last
    result. `applyMoveEx` reads the instance, its two nodes and the target only, and node
    states are immutable: while those are the same objects as when a move was tried, its
    result (or failure) and its change of the node list are the same, and a round after the
    first recomputes only the moves that touch a node the last step changed."""

    def __init__(self) -> None:
        super().__init__()
        self.moves: dict[tuple, tuple[tuple, MoveResult | FailMode, Change | None]] = {}
        # an instance's moves depend on its nodes and the online nodes only
        self.instance_moves: dict[tuple, tuple[Move, ...]] = {}


#: Seconds `_chosen` takes per move tried, to score them and keep hbal's first best: 0.96 s
#: for 123,087 and 1.15 s for 162,854 on benchmarks/time_limits.py's 200-node group (load 1),
#: 7-8e-6, so 1e-5; a round cut by its deadline keeps this for the choice after it.
CHOOSE_S_PER_MOVE = 1e-5


class SearchOutOfTime(Exception):
    """A round's deadline (time.perf_counter()) passed while its moves were tried: the round
    is not finished (one round of 200 nodes takes 20-77 s, issue 40 item 4). `table` is the
    best table after one move of the victims tried before (the table itself when none
    improved), which hbal's round would not necessarily pick, and `tried` of `victims`."""

    def __init__(self, tried: int, victims: int, moves: object = None) -> None:
        super().__init__(f"the round stopped after {tried} of {victims} instances")
        self.tried = tried
        self.victims = victims
        self.moves = moves  # _Tried: the moves of the victims tried
        self.table: Table | None = None


def _candidates(
    options: BalanceOptions,
    scope: Scope,
    table: Table,
    victims: Sequence[str],
    cache: RowCache,
    deadline: float | None = None,
) -> tuple[list[_Candidate], list[Change]]:
    """Every move of the victims that `applyMoveEx` accepts, in hbal's order, and the change
    each makes to the group's node list; SearchOutOfTime once `deadline` has passed (looked
    at before each victim, none started that the longest so far would carry past it)."""
    state = table.state
    nodes = state.nodes
    online = online_nodes(state, scope)
    position = {n: k for k, n in enumerate(scope.nodes)}
    memo = cache.moves if isinstance(cache, SearchCache) else None
    moves_of = cache.instance_moves if isinstance(cache, SearchCache) else {}
    online_key = tuple(online)
    force = options.ignore_soft_errors
    ops: dict = {}  # apply_move's adds and removes shared by this round's moves
    out, changes = [], []
    longest_s, last = 0.0, None  # a victim's moves are not cut inside: seconds on 200 nodes
    for k, name in enumerate(victims):
        if deadline is not None:
            now = time.perf_counter()
            longest_s = longest_s if last is None else max(longest_s, now - last)
            last = now
            # not started where the longest victim so far, and choosing among the moves
            # tried, would end past the deadline (the port resumed after the model ran 2-4 s
            # past a 60 s limit on 200 nodes: its choice among the moves tried took 5 s)
            if now + longest_s + CHOOSE_S_PER_MOVE * len(out) >= deadline:
                raise SearchOutOfTime(k, len(victims), _Tried(out, changes))
        p, s = state.locations[name]
        d = state.demands[name]
        mkey = (name, p, s, online_key)
        moves = moves_of.get(mkey)
        if moves is None:
            moves = moves_of[mkey] = tuple(instance_moves(state, scope, name, options, online))
        for mv in moves:
            inputs = (d, nodes[p], None if s is None else nodes[s], mv.target and nodes[mv.target])
            key = (name, mv.kind, mv.target, p, s, force)
            hit = None if memo is None else memo.get(key)
            if hit is not None and all(a is b for a, b in zip(hit[0], inputs, strict=True)):
                result, change = hit[1], hit[2]
            else:
                result = move_result(nodes, state, name, mv, force, ops)
                change = None
                if not isinstance(result, FailMode):
                    names = [n for n in result.nodes if n in position]
                    change = cache.change(
                        [position[n] for n in names], [result.nodes[n] for n in names]
                    )
                if memo is not None:
                    memo[key] = (inputs, result, change)
            if not isinstance(result, FailMode):
                assert change is not None
                out.append(_Candidate(name, mv, result))
                changes.append(change)
    return out, changes


def _first_best(scores: ListScores, changes: list, current: float) -> tuple[int, float] | None:
    """The candidate hbal's fold keeps (`compareTables`: a later table replaces the kept one
    only when strictly lower; NaN never does), or None when none is below `current`."""
    if not changes:
        return None
    est, bound = scores.estimate(changes)
    if np.all(np.isfinite(est)) and np.all(np.isfinite(bound)):
        lo, hi = est - bound, est + bound
        top = min(float(hi.min()), current)
        todo = np.flatnonzero(lo <= top)
    else:
        todo = np.arange(len(changes))
    exact = scores.exact([changes[i] for i in todo])
    best: tuple[int, float] | None = None
    kept = current
    for i, v in zip(todo.tolist(), exact.tolist(), strict=True):
        if kept > v:
            kept = v
            best = (i, v)
    return best


def _best_table(
    options: BalanceOptions,
    scope: Scope,
    table: Table,
    victims: Sequence[str],
    cache: RowCache | None = None,
    deadline: float | None = None,
) -> Table:
    cache = cache or SearchCache()
    try:
        cands, changes = _candidates(options, scope, table, victims, cache, deadline)
    except SearchOutOfTime as stop:
        tried = stop.moves
        assert isinstance(tried, _Tried)
        stop.table = _chosen(scope, table, tried.candidates, tried.changes, cache)
        raise
    return _chosen(scope, table, cands, changes, cache)


@dataclass(frozen=True)
class _Tried:
    """The moves of the victims tried before a round's deadline."""

    candidates: list[_Candidate]
    changes: list[Change]


def _chosen(
    scope: Scope, table: Table, cands: list[_Candidate], changes: list[Change], cache: RowCache
) -> Table:
    """The table after the first best of `cands` (hbal's fold), or `table`."""
    scores = cache.scores(table.state.nodes, scope.nodes)
    best = _first_best(scores, changes, table.score)
    if best is None:
        return table
    cand = cands[best[0]]
    state = table.state
    p, s = state.locations[cand.instance]
    step = Placement(
        cand.instance, p, s, cand.result.primary, cand.result.secondary, cand.move, best[1]
    )
    return Table(_placed(state, cand.instance, cand.result), best[1], (*table.placements, step))


def check_instance_move(
    options: BalanceOptions, scope: Scope, table: Table, instance: str
) -> Table:
    """`checkInstanceMove`: the best table after one move of `instance` (or `table`)."""
    return _best_table(options, scope, table, [instance])


def check_move(
    options: BalanceOptions,
    scope: Scope,
    table: Table,
    victims: Sequence[str],
    cache: RowCache | None = None,
    deadline: float | None = None,
) -> Table:
    """`checkMove`: the best table after one move of any of `victims` (or `table`)."""
    return _best_table(options, scope, table, victims, cache, deadline)


def movable_now(options: BalanceOptions, scope: Scope, table: Table) -> list[str]:
    """`tryBalance`'s `reloc_inst`: movable, auto-balanced instances (with --evac-mode, only
    those using an offline group node), in index order."""
    state = table.state
    offline = {n for n in scope.nodes if state.nodes[n].offline}
    out = []
    for name in scope.instances:
        if options.evac_mode:
            p, s = state.locations[name]
            if p not in offline and (s is None or s not in offline):
                continue
        if name in scope.movable and state.demands[name].auto_balance:
            out.append(name)
    return out


def accepted(options: BalanceOptions, before: float, after: float) -> bool:
    """`tryBalance`'s min-gain rule: lower, and either the score still above the limit or
    the gain at least `min_gain`."""
    return after < before and (
        before > options.min_gain_limit or before - after >= options.min_gain
    )


def try_balance(
    options: BalanceOptions,
    scope: Scope,
    table: Table,
    cache: RowCache | None = None,
    deadline: float | None = None,
) -> Table | None:
    """`tryBalance`: one round, the best single move, if the min-gain rule accepts it
    (SearchOutOfTime once the perf_counter time `deadline` passes before the round ends, its
    `table` the best accepted move among the instances tried, or None)."""
    victims = movable_now(options, scope, table)
    try:
        fin = check_move(options, scope, table, victims, cache, deadline)
    except SearchOutOfTime as stop:
        # the best move among the victims tried, if the min-gain rule accepts it
        part = stop.table
        ok = part is not None and len(part.placements) > len(table.placements)
        stop.table = part if ok and accepted(options, table.score, part.score) else None
        raise
    if len(fin.placements) == len(table.placements):
        return None
    return fin if accepted(options, table.score, fin.score) else None


def do_next_balance(table: Table, max_rounds: int, min_score: float) -> bool:
    """`doNextBalance`: rounds left (`-l`, negative: no limit) and the score above the stop."""
    return (max_rounds < 0 or len(table.placements) < max_rounds) and table.score > min_score


def iterate_depth(
    options: BalanceOptions,
    scope: Scope,
    table: Table,
    max_rounds: int,
    min_score: float,
) -> Table:
    """`iterateDepth` without its printing: rounds until one is refused or the limits stop."""
    cache = SearchCache()
    while do_next_balance(table, max_rounds, min_score):
        nxt = try_balance(options, scope, table, cache)
        if nxt is None:
            break
        table = nxt
    return table


def balance(
    state: ClusterState,
    scope: Scope,
    options: BalanceOptions = BalanceOptions(),
    max_rounds: int = -1,
    min_score: float = 1e-9,
) -> Table:
    """hbal's whole search from `state`: its steps (`placements`) and final state. hbal stops
    at `optimal_score + min_score` (-e, default 1e-9)."""
    start = initial_table(state, scope)
    return iterate_depth(options, scope, start, max_rounds, optimal_score(state, scope) + min_score)


# --- what hbal prints (Cluster.hs printSolutionLine, computeMoves, splitJobs, formatCmds) ---


@dataclass(frozen=True)
class Naming:
    """Display names (`Node.alias`, `Instance.alias`: the common suffix stripped) and the
    widths of hbal's step table (the longest alias of the group's nodes and instances)."""

    suffix: str
    node_width: int
    instance_width: int

    def alias(self, name: str) -> str:
        return alias(name, self.suffix)


def naming_of(state: ClusterState, scope: Scope) -> Naming:
    suffix = cluster_suffix(state.cluster)
    nodes = [len(alias(n, suffix)) for n in scope.nodes]
    insts = [len(alias(read_name(i), suffix)) for i in scope.instances]
    return Naming(suffix, max(nodes, default=0), max(insts, default=0))


def is_running(status: str) -> bool:
    """`Instance.isRunning`: running or ERROR_up (migrated live, else failed over)."""
    return status in ("running", "ERROR_up")


def move_text(move: Move, primary: str, secondary: str | None) -> str:
    """`computeMoves`' first half: `f`, `fa:NODE`, `r:NODE`, `f r:NODE`, `r:NODE f`,
    `f r:NODE f` with the new primary / secondary's alias."""
    kind = move.kind
    if kind is MoveKind.FAILOVER:
        return "f"
    if kind is MoveKind.FAILOVER_TO_ANY:
        return f"fa:{primary}"
    if kind is MoveKind.FAILOVER_AND_REPLACE:
        return f"f r:{secondary}"
    if kind is MoveKind.REPLACE_SECONDARY:
        return f"r:{secondary}"
    if kind is MoveKind.REPLACE_AND_FAILOVER:
        return f"r:{primary} f"
    return f"f r:{primary} f"


def move_steps(move: Move, primary: str, secondary: str | None) -> list[Step]:
    """`computeMoves`' second half as plan steps (model.operations): the migrations and
    disk replacements, in order; the verb (migrate or failover) is the caller's."""
    mig: Step = ("migrate", None)
    kind = move.kind
    if kind is MoveKind.FAILOVER:
        return [mig]
    if kind is MoveKind.FAILOVER_TO_ANY:
        return [("migrate", primary)]
    if kind is MoveKind.FAILOVER_AND_REPLACE:
        return [mig, ("replace", secondary)]
    if kind is MoveKind.REPLACE_SECONDARY:
        return [("replace", secondary)]
    if kind is MoveKind.REPLACE_AND_FAILOVER:
        return [("replace", primary), mig]
    return [mig, ("replace", primary), mig]


def step_commands(state: ClusterState, plc: Placement, naming: Naming) -> list[str]:
    """The gnt-instance commands of one step (without `gnt-instance`), as hbal prints them:
    instance and node aliases, `migrate` for a running instance, else `failover`."""
    verb = "migrate" if is_running(state.demands[plc.instance].status) else "failover"
    p = naming.alias(plc.primary)
    s = naming.alias(plc.secondary) if plc.secondary is not None else None
    inam = naming.alias(read_name(plc.instance))
    return [
        command(inam, (verb if op == "migrate" else op, node))
        for op, node in move_steps(plc.move, p, s)
    ]


def solution_line(plc: Placement, pos: int, naming: Naming) -> str:
    """`printSolutionLine`: `  %3d. %-*s %-*s => %-*s %12.8f a=%s`, node pairs
    `2 × width + 1` wide."""
    pair = 2 * naming.node_width + 1
    a = naming.alias

    def where(p: str, s: str | None) -> str:
        return a(p) if s is None else f"{a(p)}:{a(s)}"

    s = naming.alias(plc.secondary) if plc.secondary is not None else None
    return (
        f"  {pos:3d}. {a(read_name(plc.instance)):<{naming.instance_width}} "
        f"{where(plc.old_primary, plc.old_secondary):<{pair}} => "
        f"{where(plc.primary, plc.secondary):<{pair}} "
        f"{printf_fixed(plc.score, 8):>12} a={move_text(plc.move, a(plc.primary), s)}"
    )


def involved_nodes(plc: Placement) -> list[str]:
    """`involvedNodes`: the new and the old nodes of a step, without repeats."""
    out: list[str] = []
    for n in (plc.primary, plc.secondary, plc.old_primary, plc.old_secondary):
        if n is not None and n not in out:
            out.append(n)
    return out


def split_jobs(placements: Sequence[Placement]) -> list[list[int]]:
    """`splitJobs`: the steps (indices, oldest first) in job sets; walking newest first, a
    step joins the set being built when its nodes are disjoint from the set's, else it starts
    a new one. Sets come out in chronological order, their steps oldest first."""
    sets: list[list[int]] = []
    buffer: set[str] = set()
    for k in reversed(range(len(placements))):
        nodes = set(involved_nodes(placements[k]))
        if sets and not nodes & buffer:
            sets[0].insert(0, k)
            buffer |= nodes
        else:
            sets.insert(0, [k])
            buffer = nodes
    return sets


def format_cmds(job_sets: Sequence[Sequence[Sequence[str]]]) -> str:
    """`formatCmds`: per job set a blank line and `echo jobset N, M jobs`, per job `  echo
    job N/K`, `  check` and its `  gnt-instance ...` lines (each job: its commands)."""
    lines: list[str] = []
    for jsn, js in enumerate(job_sets, 1):
        for sn, cmds in enumerate(js, 1):
            if sn == 1:
                lines += ["", f"echo jobset {jsn}, {len(js)} jobs"]
            lines += [f"  echo job {jsn}/{sn}", "  check"]
            lines += [f"  gnt-instance {c}" for c in cmds]
    return "".join(line + "\n" for line in lines)


def instance_map(state: ClusterState, scope: Scope) -> str:
    """`Cluster.printInsts` (--print-instances) of the group's instances where they are now."""
    from model.htools.hinfo import instance_map as printed

    inside = set(scope.instances)
    snap = state.snapshot()
    return printed(replace(snap, instances=tuple(i for i in snap.instances if i.name in inside)))


def print_stats(state: ClusterState, scope: Scope, prefix: str = "  ") -> str:
    """`Metrics.printStats`: each of the 20 metrics' value and weight, as hbal prints them
    at -v -v -v."""
    states = [state.nodes[n] for n in scope.nodes]
    stats = list_stats([node_row(st) for st in states], [not st.offline for st in states])
    rows = []
    for k, m in enumerate(() if stats.empty else METRICS):  # compDetailedCV of none: []
        value = stat_value(k, stats.values[k])
        rows.append([m.name, printf_fixed(value, 8), "x" + printf_fixed(m.weight, 2)])
    return table(["Field", "Value", "Weight"], rows, [False, True, True], prefix=prefix)


__all__ = [
    "BalanceOptions",
    "FAILOVER",
    "Naming",
    "format_cmds",
    "instance_map",
    "print_stats",
    "involved_nodes",
    "is_running",
    "move_steps",
    "move_text",
    "naming_of",
    "solution_line",
    "split_jobs",
    "step_commands",
    "Move",
    "Placement",
    "Scope",
    "Table",
    "accepted",
    "apply_step",
    "balance",
    "check_instance_move",
    "check_move",
    "do_next_balance",
    "group_score",
    "initial_table",
    "instance_moves",
    "iterate_depth",
    "movable_instances",
    "movable_now",
    "move_result",
    "online_nodes",
    "optimal_score",
    "possible_moves",
    "scope_of",
    "split_instances",
    "try_balance",
]
