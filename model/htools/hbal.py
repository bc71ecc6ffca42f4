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
Scores of all candidate moves of a round are computed together (`ListScores`: an estimate
with an error bound for each, the exact two-pass value for those that may be the best), which
gives the same choice as hbal's sequential fold.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from model.backends.text import (
    alias,
    cluster_suffix,
    printf_fixed,
    printf_g,
    show_list,
    show_string,
)
from model.cluster import MOVABLE_TEMPLATES, Cluster, read_name
from model.htools.evacuate import MIRROR_EXTERNAL, MIRROR_INTERNAL, mirror_type
from model.htools.metrics import ListScores, RowCache, list_score, list_stats, node_row, stat_value
from model.htools.nodelist import table
from model.operations import Step, command
from model.resources import (
    EXCLUSION_TAG_PREFIX,
    FailMode,
    MoveKind,
    MoveResult,
    NodeState,
    apply_move,
)
from model.score import METRICS
from model.state import ClusterState

if TYPE_CHECKING:
    from model.backends.jobs import JobSet

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
) -> MoveResult | FailMode:
    """`applyMoveEx force` on the node states `nodes` (the changed nodes and new places)."""
    p, s = state.locations[instance]
    return apply_move(nodes, state.demands[instance], p, s, move.kind, move.target, force=force)


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


def _candidates(
    options: BalanceOptions, scope: Scope, table: Table, victims: Sequence[str]
) -> list[_Candidate]:
    state = table.state
    online = online_nodes(state, scope)
    out = []
    for name in victims:
        for mv in instance_moves(state, scope, name, options, online):
            result = move_result(state.nodes, state, name, mv, options.ignore_soft_errors)
            if not isinstance(result, FailMode):
                out.append(_Candidate(name, mv, result))
    return out


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
) -> Table:
    cache = cache or RowCache()
    cands = _candidates(options, scope, table, victims)
    position = {n: k for k, n in enumerate(scope.nodes)}
    scores = cache.scores(table.state.nodes, scope.nodes)
    changes = []
    for c in cands:
        names = [n for n in c.result.nodes if n in position]
        changes.append(
            cache.change([position[n] for n in names], [c.result.nodes[n] for n in names])
        )
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
) -> Table:
    """`checkMove`: the best table after one move of any of `victims` (or `table`)."""
    return _best_table(options, scope, table, victims, cache)


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
    options: BalanceOptions, scope: Scope, table: Table, cache: RowCache | None = None
) -> Table | None:
    """`tryBalance`: one round, the best single move, if the min-gain rule accepts it."""
    fin = check_move(options, scope, table, movable_now(options, scope, table), cache)
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
    cache = RowCache()
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


# --- Program/Hbal.hs main: the run as hbal prints it ----------------------------------------

SH_TEMPLATE = (
    "#!/bin/sh\n\n"
    "# Auto-generated script for executing cluster rebalancing\n\n"
    "# To stop, touch the file /tmp/stop-htools\n\n"
    "set -e\n\n"
    "check() {\n"
    "  if [ -f /tmp/stop-htools ]; then\n"
    "    echo 'Stop requested, exiting'\n"
    "    exit 0\n"
    "  fi\n"
    "}\n\n"
)  # CLI.shTemplate


@dataclass(frozen=True)
class HbalOptions:
    """hbal's options besides the backend (names already resolved by the caller)."""

    search: BalanceOptions = BalanceOptions()
    group: str | None = None  # -G
    max_length: int = -1  # -l
    min_score: float = 1e-9  # -e / --min-score
    print_nodes: tuple[str, ...] | None = None  # -p[FIELDS]
    print_instances: bool = False
    print_commands: str | None = None  # -C: "-" (stdout) or FILE
    first_job_group: bool = False
    save: str | None = None  # -S FILE
    verbose: int = 1
    offline: tuple[str, ...] = ()  # -O
    max_cpu: float | None = None
    min_disk: float = 0.0
    selected: tuple[str, ...] = ()  # --select-instances (names as given)
    excluded: tuple[str, ...] = ()  # --exclude-instances
    exec_jobs: bool = False  # -X (the caller runs them)


@dataclass(frozen=True)
class HbalRun:
    """What one hbal run prints and writes, and its answer (for -X and --json)."""

    stdout: str
    stderr: str
    exit_code: int
    files: Mapping[str, str]
    scope: Scope | None = None
    initial: Table | None = None
    final: Table | None = None
    job_sets: tuple[tuple[int, ...], ...] = ()  # indices into final.placements


class _Out:
    def __init__(self) -> None:
        self.out: list[str] = []
        self.err: list[str] = []
        self.files: dict[str, str] = {}

    def run(self, code: int = 0, **kw: object) -> HbalRun:
        return HbalRun("".join(self.out), "".join(self.err), code, dict(self.files), **kw)  # type: ignore[arg-type]

    def fail(self, message: str, **kw: object) -> HbalRun:
        self.err.append(f"Error: {message}\n")
        return self.run(1, **kw)


def lookup_names(names: Sequence[str], wanted: Sequence[str]) -> tuple[list[str], list[str]]:
    """htools' `lookupName` for each wanted name: (the names found, the lookups that failed)."""
    from model.htools.hroller import lookup_name

    found, wrong = [], []
    for w in wanted:
        prio, content = lookup_name(names, w)
        (found if prio in (0, 2) else wrong).append(content)
    return found, wrong


def _balanced_snapshot(cluster: Cluster, state: ClusterState, scope: Scope) -> Cluster:
    """`ini_cdata { cdNodes = fin_nl, cdInstances = fin_il }`: the group's nodes and
    instances as the balance left them, every group kept."""
    snap = state.snapshot()
    nodes = set(scope.nodes)
    insts = set(scope.instances)
    # Node.fMem is the memory the node reported at load: in 3.0.2 no add or remove changes it
    # (Text.serializeNode writes it as read), unlike free disk
    return replace(
        cluster,
        nodes=tuple(
            replace(n, free_memory_mib=state.nodes[n.name].reported_free_memory_mib)
            for n in snap.nodes
            if n.name in nodes
        ),
        instances=tuple(i for i in snap.instances if i.name in insts),
    )


def hbal(cluster: Cluster, options: HbalOptions, loaded: Cluster | None = None) -> HbalRun:
    """hbal's main after loading (`cluster`: as `loadExternalData` leaves it; `loaded`: what
    -S writes as FILE.original, by default `cluster`)."""
    from model.backends.text import dump_text
    from model.htools.hinfo import bad_items, show_ipolicy
    from model.htools.loader import suffix_note
    from model.htools.nodelist import NodeList
    from model.space import with_node_status
    from model.state import node_states

    o = _Out()
    v = options.verbose
    known = [i.name for i in cluster.instances]
    selected, wrong_sel = lookup_names(known, options.selected)
    excluded, wrong_ex = lookup_names(known, options.excluded)
    if wrong_sel or wrong_ex:  # mergeData's error, before anything is printed
        shown = show_list([*wrong_sel, *wrong_ex])
        return o.fail(f"failed to load data, aborting: Unknown instance(s): {shown}")
    if v > 1:
        tags = (loaded or cluster).cluster_tags  # as read, without --exclusion-tags' prefixes
        o.out.append("Loaded cluster tags: " + ",".join(tags) + "\n")
        o.out.append("Loaded cluster ipolicy: " + show_ipolicy(cluster.cluster_policy) + "\n")
    state = node_states(cluster)
    names = list(state.nodes)
    offline, wrong = lookup_names(names, options.offline)
    if wrong:
        return o.fail(f"wrong node name(s) set as offline: {', '.join(wrong)}\n")
    state = with_node_status(state, offline, options.max_cpu, options.min_disk)
    # checkCluster
    if not cluster.instances:
        o.out.append("Cluster is empty, exiting.\n")
        return o.run()
    split = split_instances(state)
    if split and v > 1:
        o.err.append("Found instances belonging to multiple node groups:\n")
        o.err += [f"  {read_name(i)}\n" for i in state.locations if i in split]
        o.err.append("These instances will not be moved.\n")
    o.out.append(f"Loaded {len(cluster.nodes)} nodes, {len(cluster.instances)} instances\n")
    note = suffix_note(cluster)
    if note and v > 1:
        o.out.append(note + "\n")
    if options.save:
        path = f"{options.save}.original"
        o.files[path] = dump_text(loaded or cluster)
        o.err.append(f"The cluster state before balancing has been written to file '{path}'\n")
    # selectGroup
    with_nodes = [g for g in cluster.groups if any(n.group_uuid == g.uuid for n in cluster.nodes)]
    if len(with_nodes) > 1 and options.group is None:
        o.err.append("Found multiple node groups:\n")
        o.err += [f"  {g.name}\n" for g in with_nodes]
        return o.fail("Aborting.")
    if options.group is None:
        group = with_nodes[0]
    else:
        # Container.findByName: the one group of that name or uuid
        named = [g for g in cluster.groups if options.group in (g.name, g.uuid)]
        group = named[0] if len(named) == 1 else None
        if group is None:
            o.err.append(f"Node group {options.group} not found. Node group list is:\n")
            o.err += [f"  {g.name}\n" for g in cluster.groups]
            return o.fail("Aborting.")
    scope = scope_of(state, group.uuid, movable_instances(state, selected, excluded))
    # checkGroup
    o.out.append(f"Group size {len(scope.nodes)} nodes, {len(scope.instances)} instances\n")
    o.out.append(f"Selected node group: {group.name}\n")
    bad_nodes, bad_insts = bad_items(state, scope.nodes)
    if v >= 1:
        o.out.append(
            f"Initial check done: {len(bad_nodes)} bad nodes, {len(bad_insts)} bad instances.\n"
        )
    policy_bad = [
        n for n in scope.nodes if n not in bad_nodes and _policy_unhealthy(state.nodes[n])
    ]
    if v > 4:
        happy = [n for n in scope.nodes if n not in bad_nodes]
        health = ",".join(f"({show_string(n)},{_policy_health(state.nodes[n])})" for n in happy)
        o.out.append(f"Bad nodes: {show_list(bad_nodes)}\n")
        o.out.append(f"N+1 happy nodes: {show_list(happy)}\n")
        o.out.append(f"Node policy status: [{health}]\n")
    if bad_nodes:
        o.out.append(
            "Cluster is not N+1 happy, continuing but no guarantee that the cluster will end "
            "N+1 happy.\n"
        )
    if policy_bad:
        o.out.append(f"The cluster contains {len(policy_bad)} policy-violating nodes.\n")
        o.out.append(
            "Continuing, ignoring soft errors.\n"
            if options.search.ignore_soft_errors
            else "Continuing, but the set of moves might be too restricted; consider using the "
            "--ignore-soft-errors option.\n"
        )
    listing = NodeList(cluster)
    if options.print_instances:
        o.err.append("\nInitial instance map:\n" + instance_map(state, scope))
    if options.print_nodes is not None:
        o.err.append(
            "\nInitial cluster status:\n"
            + listing.text(state, options.print_nodes, scope.nodes)
            + "\n"
        )
    start = initial_table(state, scope)
    ini_cv = start.score
    opt_cv = optimal_score(state, scope)
    if v > 2:
        o.out.append(f"Initial coefficients: overall {printf_fixed(ini_cv, 8)}\n")
        o.out.append(print_stats(state, scope))
    else:
        o.out.append(f"Initial score: {printf_fixed(ini_cv, 8)}\n")
    if ini_cv - opt_cv < options.min_score:
        o.out.append(
            f"Cluster is already well balanced (initial score {printf_g(ini_cv)},\n"
            f"optimum score due to N+1 reservations {printf_g(opt_cv)},\n"
            f"minimum score {printf_g(options.min_score)}).\nNothing to do, exiting\n"
        )
        return o.run(scope=scope, initial=start, final=start)
    o.out.append("Trying to minimize the CV...\n")
    naming = naming_of(state, scope)
    final = iterate_depth(
        options.search, scope, start, options.max_length, opt_cv + options.min_score
    )
    for k, plc in enumerate(final.placements, 1):
        o.out.append(solution_line(plc, k, naming) + "\n")
    fin = final.state
    if not final.placements:
        o.out.append("No solution found\n")
    elif v > 2:
        o.out.append(f"Final coefficients:   overall {printf_fixed(final.score, 8)}\n")
        o.out.append(print_stats(fin, scope))
    else:
        o.out.append(
            f"Cluster score improved from {printf_fixed(ini_cv, 8)} to "
            f"{printf_fixed(final.score, 8)}\n"
        )
    if v >= 1:
        o.out.append(f"Solution length={len(final.placements)}\n")
    sets = split_jobs(final.placements)
    if options.first_job_group:
        sets = sets[:1]
    if options.print_commands is not None:
        # the verb (migrate or failover) follows the instance's status, which no step changes
        cmds = format_cmds(
            [[step_commands(state, final.placements[k], naming) for k in js] for js in sets]
        )
        msg = (
            "First set of jobs:"
            if options.first_job_group
            else "Commands to run to reach the above solution:"
        )
        if options.print_commands == "-":
            o.out.append("\n" + msg + "\n")
            o.out += [f"  {line}\n" for line in cmds.splitlines() if line != "  check"]
        else:
            o.files[options.print_commands] = SH_TEMPLATE + cmds
            o.out.append(f"The commands have been written to file '{options.print_commands}'\n")
    if options.save:
        path = f"{options.save}.balanced"
        o.files[path] = dump_text(_balanced_snapshot(loaded or cluster, fin, scope))
        o.err.append(f"The cluster state after balancing has been written to file '{path}'\n")
    if options.print_instances:
        o.err.append("\nFinal instance map:\n" + instance_map(fin, scope))
    if options.print_nodes is not None:
        o.err.append(
            "\nFinal cluster status:\n" + listing.text(fin, options.print_nodes, scope.nodes) + "\n"
        )
    if v > 3:  # printStats: totalResources' free memory and disk
        for label, st in (("Original:", state), ("Final:   ", fin)):
            mem = sum(st.nodes[n].unallocated_memory_mib for n in scope.nodes)
            dsk = sum(st.nodes[n].free_disk_mib for n in scope.nodes)
            o.out.append(f"{label} mem={mem} disk={dsk}\n")
    job_sets = tuple(tuple(js) for js in sets)
    return o.run(scope=scope, initial=start, final=final, job_sets=job_sets)


def _policy_health(st: NodeState) -> str:
    """`Node.getPolicyHealth`, as Haskell shows it: `Bad FailDisk` with more instance
    spindles than allowed, `Bad FailCPU` above the policy's vCPU ratio, else `Ok ()`."""
    if st.instance_spindles > st.hi_spindles:
        return "Bad FailDisk"
    if st.p_cpu > st.vcpu_ratio:
        return "Bad FailCPU"
    return "Ok ()"


def _policy_unhealthy(st: NodeState) -> bool:
    return _policy_health(st) != "Ok ()"


# --- loading (ExtLoader.loadExternalData's extras) ------------------------------------------


def read_dynu(text: str, source: str = "") -> dict[str, tuple[float, float, float, float]]:
    """`-U FILE` (`parseUtilisation`): `NAME CPU MEM DSK NET` per line, split on single
    spaces; a line that is not five fields is htools' error."""
    from model.backends.text import read_double, sep_split
    from model.errors import InputError

    out: dict[str, tuple[float, float, float, float]] = {}
    for k, line in enumerate(text.splitlines(), 1):
        fields = sep_split(" ", line)
        if len(fields) != 5:
            raise InputError(
                f"can't parse utilisation data: Cannot parse line {line}", source=source, line=k
            )
        name, *values = fields
        try:
            loads = tuple(read_double(v, name) for v in values)
        except ValueError as exc:
            raise InputError(
                f"can't parse utilisation data: {exc}", source=source, line=k
            ) from None
        out[name] = loads  # type: ignore[assignment]
    return out


def with_dynu(cluster: Cluster, loads: Mapping[str, tuple[float, float, float, float]]) -> Cluster:
    """`mergeData`'s utilisation: each named instance gets its loads (unknown names skipped)."""
    return replace(
        cluster,
        instances=tuple(
            replace(i, util=loads[i.name]) if i.name in loads else i for i in cluster.instances
        ),
    )


def with_exclusion_tags(cluster: Cluster, prefixes: Sequence[str]) -> Cluster:
    """`--exclusion-tags T,...`: each T: is an exclusion prefix besides the cluster's
    htools:iextags: ones (read by `TagRules.of` from the cluster tags)."""
    if not prefixes:
        return cluster
    extra = tuple(f"{EXCLUSION_TAG_PREFIX}{t}:" for t in prefixes)
    return replace(cluster, cluster_tags=extra + cluster.cluster_tags)


def job_sets(run: HbalRun) -> list[JobSet]:
    """-X's job sets (`maybeExecJobs`): per step one job, its opcodes as `iMoveToJob` makes
    them (full names), described as hbal describes them."""
    from model.backends.jobs import JobSet
    from model.operations import opcode

    assert run.final is not None
    plcs = run.final.placements
    out = []
    for js in run.job_sets:
        jobs = []
        for k in js:
            plc = plcs[k]
            name = read_name(plc.instance)
            steps = move_steps(plc.move, plc.primary, plc.secondary)
            jobs.append(tuple(opcode(name, st) for st in steps))
        names = ", ".join(read_name(plcs[k].instance) for k in js)
        out.append(JobSet(f"Executing jobset for instances {names}", tuple(jobs)))
    return out


__all__ = [
    "BalanceOptions",
    "FAILOVER",
    "HbalOptions",
    "HbalRun",
    "SH_TEMPLATE",
    "hbal",
    "job_sets",
    "read_dynu",
    "with_dynu",
    "with_exclusion_tags",
    "lookup_names",
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
