"""hcheck 3.0.2 (Program/Hcheck.hs), byte for byte: what `exalloc n1 --greedy` prints.

`hcheck` follows `Hcheck.main` after loading: per group (`perGroupChecks`) the nodes failing
N+1, the nodes with conflicting primaries (exclusion tags), the primaries and secondaries of
offline nodes (htools counts the offline nodes for the latter: `length $ map Node.sList`), the
nodes htools' greedy global N+1 cannot evacuate (`GlobalN1.canEvacuateNode`, unless
`--no-capacity-checks`) and the group score; their sums for the cluster, which needs
rebalancing when any is not zero. Then, unless `--no-simulation`, each such group's score is
improved by hbal's search (`Hbal.iterateDepth` from the group's optimal score plus `-e`,
model/htools/hbal.py) and the checks are repeated on the result ("after rebalancing"; the
cluster's verdict there is the initial one's, as hcheck computes it). `--machine-readable`
prints the same values as shell variables (`HCHECK_INIT_GROUP_0_N1_FAIL=0`, groups by index,
`HCHECK_OK=1` last), and always the "after" phase. The exit code is 1 when the cluster needs
rebalancing and the simulation ran.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from model.backends.text import printf_fixed
from model.groups_greedy import failing_nodes
from model.htools.hbal import (
    BalanceOptions,
    initial_table,
    iterate_depth,
    movable_instances,
    optimal_score,
    scope_of,
)
from model.htools.hinfo import bad_items, group_members
from model.score import cluster_score
from model.state import ClusterState

PREFIX = "HCHECK"

#: (key, description) of the values shown for groups and for the cluster (`commonData`).
COMMON = (
    ("N1_FAIL", "Nodes not N+1 happy"),
    ("CONFLICT_TAGS", "Nodes with conflicting instances"),
    ("OFFLINE_PRI", "Instances having the primary node offline"),
    ("OFFLINE_SEC", "Instances having a secondary node offline"),
)
GN1 = ("GN1_FAIL", "Nodes not directly evacuateable")
SCORE = ("SCORE", "Group score")
NEED_REBALANCE = ("NEED_REBALANCE", "Cluster is not healthy")


@dataclass(frozen=True)
class HcheckOptions:
    """hcheck's options: verbosity (1 = none given), `--machine-readable`,
    `--no-simulation`, the capacity checks (`--no-capacity-checks` clears), hbal's search
    options for the simulation (`-l`, `-e`, `-g`, `--min-gain-limit`, ...)."""

    verbose: int = 1
    machine_readable: bool = False
    no_simulation: bool = False
    capacity: bool = True
    balance: BalanceOptions = field(default_factory=BalanceOptions)
    max_rounds: int = -1
    min_score: float = 1e-9
    selected: tuple[str, ...] = ()  # --select-instances (resolved names): only these move
    excluded: tuple[str, ...] = ()  # --exclude-instances: these do not


@dataclass(frozen=True)
class GroupStats:
    """`perGroupChecks`: the group's index, name, score and counts (in `commonData`'s order,
    the global N+1 failures last when checked)."""

    index: int
    name: str
    score: float
    counts: tuple[int, ...]


@dataclass(frozen=True)
class HcheckOutput:
    stdout: str
    exit_code: int
    needs_rebalance: bool
    initial: tuple[GroupStats, ...]
    final: tuple[GroupStats, ...]


def ensure_quoted(value: str) -> str:
    """`Utils.ensureQuoted`: quoted unless every character is alphanumeric or `.`."""
    return value if all(c.isalnum() or c == "." for c in value) else f"'{value}'"


def _keys(pairs: Sequence[tuple[str, str]]) -> list[str]:
    """`CLI.printKeys "HCHECK"`."""
    return [f"{PREFIX}_{k.upper()}={ensure_quoted(v)}\n" for k, v in pairs]


def group_stats(
    state: ClusterState,
    uuid: str,
    nodes: Sequence[str],
    index: int,
    capacity: bool,
    gn1_failures: Mapping[str, int] | None = None,
) -> GroupStats:
    """`perGroupChecks` for one group of `splitCluster`; `gn1_failures` (group uuid -> count)
    replaces the greedy global N+1's count (exalloc n1's exact verdicts)."""
    offline = [n for n in nodes if state.nodes[n].offline]
    counts = [
        len(bad_items(state, nodes)[0]),
        sum(1 for n in nodes if state.nodes[n].conflicting_primaries > 0),
        sum(len(state.nodes[n].primaries) for n in offline),
        len(offline),
    ]
    if capacity and gn1_failures is not None:
        counts.append(gn1_failures.get(uuid, 0))
    elif capacity:
        counts.append(len(failing_nodes(state, uuid)))
    name = state.cluster.group(uuid).name
    return GroupStats(index, name, cluster_score(state, uuid), tuple(counts))


def _all_groups(
    state: ClusterState, capacity: bool, gn1_failures: Mapping[str, int] | None = None
) -> list[GroupStats]:
    index = {g.uuid: k for k, g in enumerate(state.cluster.groups)}
    return [
        group_stats(state, uuid, nodes, index[uuid], capacity, gn1_failures)
        for uuid, nodes in group_members(state)
    ]


def _rebalanced(state: ClusterState, options: HcheckOptions) -> ClusterState:
    """`maybeSimulateRebalance`: each group whose score is at least its optimal score plus
    `-e` balanced by hbal's search, one after the other."""
    movable = movable_instances(state, options.selected, options.excluded)
    for uuid, _ in group_members(state):
        scope = scope_of(state, uuid, movable)
        start = initial_table(state, scope)
        stop = options.min_score + optimal_score(state, scope)
        if start.score < stop:
            continue
        state = iterate_depth(options.balance, scope, start, options.max_rounds, stop).state
    return state


def _stats_lines(
    options: HcheckOptions, level: str | None, phase: str, values: Sequence[str], pairs
) -> list[str]:
    """`printStats`: shell variables, or the human block (unless `-q`)."""
    if options.machine_readable:
        where = "CLUSTER" if level is None else f"GROUP_{level}"
        return _keys([(f"{phase}_{where}_{k}", v) for (k, _), v in zip(pairs, values)])  # noqa: B905
    if options.verbose < 1:
        return []
    when = "initially" if phase == "INIT" else "after rebalancing"
    head = "Cluster statistics" if level is None else f"Statistics for group {level}"
    lines = ["\n", f"{head} {when}\n"]
    lines += [f"    {d}: {v}\n" for (_, d), v in zip(pairs, values)]  # noqa: B905 - as `zip`
    return lines


def _phase(
    options: HcheckOptions, phase: str, groups: Sequence[GroupStats], need: bool
) -> list[str]:
    common = [*COMMON, *([GN1] if options.capacity else [])]
    out = []
    for g in groups:
        level = str(g.index) if options.machine_readable else g.name
        values = [*map(str, g.counts), printf_fixed(g.score, 8)]
        out += _stats_lines(options, level, phase, values, [*common, SCORE])
    # `map sum . transpose`: no groups, no totals (and `zip` then keeps only the first key)
    totals = [sum(col) for col in zip(*(g.counts for g in groups), strict=True)]
    shown = ("1" if need else "0") if options.machine_readable else str(need)
    out += _stats_lines(options, None, phase, [*map(str, totals), shown], [*common, NEED_REBALANCE])
    return out


def hcheck(
    state: ClusterState, options: HcheckOptions, gn1_failures: Mapping[str, int] | None = None
) -> HcheckOutput:
    """`Hcheck.main` after loading and `setNodeStatus` (`gn1_failures`: see `group_stats`;
    exalloc's exact verdicts, with no simulation)."""
    out: list[str] = []
    if options.machine_readable:
        out += _keys([(f"GROUP_UUID_{k}", g.uuid) for k, g in enumerate(state.cluster.groups)])
    initial = _all_groups(state, options.capacity, gn1_failures)
    need = any(sum(g.counts) > 0 for g in initial)
    if options.verbose >= 1 and not options.machine_readable:
        if options.no_simulation:
            out.append("Running in no-simulation mode.\n")
        elif need:
            out.append("Cluster needs rebalancing.\n")
        else:
            out.append("No need to rebalance cluster, no problems found.\n")
    out += _phase(options, "INIT", initial, need)
    simulate = need and not options.no_simulation
    final = initial
    if simulate or options.machine_readable:
        if simulate:
            final = _all_groups(_rebalanced(state, options), options.capacity)
        out += _phase(options, "FINAL", final, need)  # hcheck repeats the initial verdict
    if options.machine_readable:
        out += _keys([("OK", "1")])
    exit_code = 1 if simulate else 0
    return HcheckOutput("".join(out), exit_code, need, tuple(initial), tuple(final))
