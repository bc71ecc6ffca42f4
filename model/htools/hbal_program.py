"""hbal's main as Ganeti 3.0.2 runs it (Program/Hbal.hs `main`, `checkCluster`, `selectGroup`,
`checkGroup`, `checkNeedRebalance`, `iterateDepth`'s printing, `maybeExecJobs`'s job sets;
ExtLoader.loadExternalData's extras: `-U`, `--exclusion-tags`, `--select-instances`,
`--exclude-instances`), for `exalloc balance --greedy` (docs/balance.md). The search itself
is model/htools/hbal.py.

`hbal(cluster, options, loaded) -> HbalRun` is pure: it returns what hbal prints on stdout and
stderr, its exit code, the files it writes (-S FILE.original and FILE.balanced, the -C script)
and its answer (scope, initial and final tables, job sets); the program writes the files and,
with -X, runs `job_sets(run)` through LUXI.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from model.backends.text import printf_fixed, printf_g, show_list, show_string
from model.cluster import Cluster, read_name
from model.htools.hbal import (
    BalanceOptions,
    Placement,
    Scope,
    Table,
    format_cmds,
    initial_table,
    instance_map,
    iterate_depth,
    movable_instances,
    move_steps,
    naming_of,
    optimal_score,
    print_stats,
    scope_of,
    solution_line,
    split_instances,
    split_jobs,
    step_commands,
)
from model.resources import EXCLUSION_TAG_PREFIX, NodeState
from model.squeeze import SH_TEMPLATE as squeeze_script_head
from model.state import ClusterState

if TYPE_CHECKING:
    from model.backends.jobs import JobSet


# --- Program/Hbal.hs main: the run as hbal prints it ----------------------------------------

SH_TEMPLATE = squeeze_script_head  # CLI.shTemplate: one text for hbal and hsqueeze


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
    #: mergeData refused the run (an unknown --select/--exclude-instances name): hbal stops
    #: before checkData, so the loader's warning on inconsistent data is not printed
    merge_failed: bool = False


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


def balanced_snapshot(
    cluster: Cluster, state: ClusterState, scope: Scope, *, reported_memory: bool = True
) -> Cluster:
    """`ini_cdata { cdNodes = fin_nl, cdInstances = fin_il }`: the group's nodes and
    instances as the balance left them, every group kept.

    `reported_memory` (hbal's file): Node.fMem is the memory the node reported at load; in
    3.0.2 no add or remove changes it (Text.serializeNode writes it as read), unlike free
    disk, so hinfo scores hbal's FILE.balanced from the old free memory. Without it the free
    memory follows the moves (`ClusterState.snapshot`), and the file scores in hinfo what the
    balance claims (the exact mode's -S). Node.fSpindles is written as the moves left it too:
    on a node without exclusive storage, calcNewFreeSpindles makes it 0 once a (not
    forthcoming) instance is added to or removed from the node, so hbal writes 0 there."""
    snap = state.snapshot()
    nodes = set(scope.nodes)
    insts = set(scope.instances)
    return replace(
        cluster,
        nodes=tuple(
            replace(
                n,
                free_memory_mib=state.nodes[n.name].reported_free_memory_mib,
                free_spindles=state.nodes[n.name].free_spindles,
            )
            if reported_memory
            else n
            for n in snap.nodes
            if n.name in nodes
        ),
        instances=tuple(i for i in snap.instances if i.name in insts),
    )


def hbal(cluster: Cluster, options: HbalOptions, loaded: Cluster | None = None) -> HbalRun:
    """hbal's main after loading (`cluster`: as `loadExternalData` leaves it; `loaded`: what
    -S writes as FILE.original, by default `cluster`)."""
    from model.backends.text import dump_text
    from model.space import with_node_status
    from model.state import node_states

    o = _Out()
    v = options.verbose
    known = [i.name for i in cluster.instances]
    selected, wrong_sel = lookup_names(known, options.selected)
    excluded, wrong_ex = lookup_names(known, options.excluded)
    if wrong_sel or wrong_ex:  # mergeData's error, before anything is printed
        shown = show_list([*wrong_sel, *wrong_ex])
        return o.fail(
            f"failed to load data, aborting: Unknown instance(s): {shown}", merge_failed=True
        )
    if v > 1:
        o.out.append(loaded_header(cluster, loaded))
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
    if v > 1:
        o.err.append(split_warning(state))
    o.out.append(f"Loaded {len(cluster.nodes)} nodes, {len(cluster.instances)} instances\n")
    if v > 1:
        o.out.append(suffix_line(cluster))
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
    o.out.append(group_check(state, scope, v, options.search.ignore_soft_errors))
    o.err.append(
        views(cluster, state, scope, options.print_instances, options.print_nodes, "Initial")
    )
    start = initial_table(state, scope)
    ini_cv = start.score
    opt_cv = optimal_score(state, scope)
    o.out.append(score_text("Initial", state, scope, ini_cv, v))
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
    else:
        o.out.append(score_text("Final", fin, scope, final.score, v, ini_cv))
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
        o.files[path] = dump_text(balanced_snapshot(loaded or cluster, fin, scope))
        o.err.append(f"The cluster state after balancing has been written to file '{path}'\n")
    o.err.append(views(cluster, fin, scope, options.print_instances, options.print_nodes, "Final"))
    if v > 3:
        o.out.append(totals(state, fin, scope))
    job_sets = tuple(tuple(js) for js in sets)
    return o.run(scope=scope, initial=start, final=final, job_sets=job_sets)


# --- the parts of hbal's output that the exact mode prints too (programs/balance_exact.py) ---


def loaded_header(cluster: Cluster, loaded: Cluster | None) -> str:
    """-v -v: the cluster's tags as read (without --exclusion-tags' prefixes) and its ipolicy."""
    from model.htools.hinfo import show_ipolicy

    tags = (loaded or cluster).cluster_tags
    return (
        "Loaded cluster tags: " + ",".join(tags) + "\n"
        "Loaded cluster ipolicy: " + show_ipolicy(cluster.cluster_policy) + "\n"
    )


def split_warning(state: ClusterState) -> str:
    """-v -v, on stderr: the instances split between groups, which hbal does not move."""
    split = split_instances(state)
    if not split:
        return ""
    names = "".join(f"  {read_name(i)}\n" for i in state.locations if i in split)
    return (
        "Found instances belonging to multiple node groups:\n"
        + names
        + "These instances will not be moved.\n"
    )


def suffix_line(cluster: Cluster) -> str:
    """-v -v: the common name suffix the output strips."""
    from model.htools.loader import suffix_note

    note = suffix_note(cluster)
    return note + "\n" if note else ""


def group_check(state: ClusterState, scope: Scope, v: int, ignore_soft_errors: bool) -> str:
    """`checkGroup`: the bad nodes and instances, N+1 happiness, the policy-violating nodes."""
    from model.htools.hinfo import bad_items

    out = []
    bad_nodes, bad_insts = bad_items(state, scope.nodes)
    if v >= 1:
        out.append(
            f"Initial check done: {len(bad_nodes)} bad nodes, {len(bad_insts)} bad instances.\n"
        )
    policy_bad = [
        n for n in scope.nodes if n not in bad_nodes and _policy_unhealthy(state.nodes[n])
    ]
    if v > 4:
        happy = [n for n in scope.nodes if n not in bad_nodes]
        health = ",".join(f"({show_string(n)},{_policy_health(state.nodes[n])})" for n in happy)
        out.append(f"Bad nodes: {show_list(bad_nodes)}\n")
        out.append(f"N+1 happy nodes: {show_list(happy)}\n")
        out.append(f"Node policy status: [{health}]\n")
    if bad_nodes:
        out.append(
            "Cluster is not N+1 happy, continuing but no guarantee that the cluster will end "
            "N+1 happy.\n"
        )
    if policy_bad:
        out.append(f"The cluster contains {len(policy_bad)} policy-violating nodes.\n")
        out.append(
            "Continuing, ignoring soft errors.\n"
            if ignore_soft_errors
            else "Continuing, but the set of moves might be too restricted; consider using the "
            "--ignore-soft-errors option.\n"
        )
    return "".join(out)


def views(
    cluster: Cluster,
    state: ClusterState,
    scope: Scope,
    print_instances: bool,
    print_nodes: tuple[str, ...] | None,
    when: str,
) -> str:
    """--print-instances and -p, on stderr: the instance map and node list, "Initial" or
    "Final"."""
    from model.htools.nodelist import NodeList

    out = ""
    if print_instances:
        out += f"\n{when} instance map:\n" + instance_map(state, scope)
    if print_nodes is not None:
        listing = NodeList(cluster).text(state, print_nodes, scope.nodes)
        out += f"\n{when} cluster status:\n{listing}\n"
    return out


def score_text(
    when: str, state: ClusterState, scope: Scope, score: float, v: int, initial: float = 0.0
) -> str:
    """The initial or final score: with -v -v -v the coefficients' table, else one line."""
    if v > 2:
        label = (
            "Initial coefficients: overall"
            if when == "Initial"
            else "Final coefficients:   overall"
        )
        return f"{label} {printf_fixed(score, 8)}\n" + print_stats(state, scope)
    if when == "Initial":
        return f"Initial score: {printf_fixed(score, 8)}\n"
    return f"Cluster score improved from {printf_fixed(initial, 8)} to {printf_fixed(score, 8)}\n"


def totals(state: ClusterState, fin: ClusterState, scope: Scope) -> str:
    """-v -v -v -v (`printStats`): the group's free memory and disk before and after."""
    out = []
    for label, st in (("Original:", state), ("Final:   ", fin)):
        mem = sum(st.nodes[n].unallocated_memory_mib for n in scope.nodes)
        dsk = sum(st.nodes[n].free_disk_mib for n in scope.nodes)
        out.append(f"{label} mem={mem} disk={dsk}\n")
    return "".join(out)


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
    spaces; a line that is not five fields, or a number that does not read, is hbal's error
    (`Error: can't parse utilisation data: ...`, exit 1)."""
    from model.backends.text import read_double, sep_split
    from model.errors import HtoolsError

    out: dict[str, tuple[float, float, float, float]] = {}
    for k, line in enumerate(text.splitlines(), 1):
        fields = sep_split(" ", line)
        if len(fields) != 5:
            raise HtoolsError(
                f"can't parse utilisation data: Cannot parse line {line}", source=source, line=k
            )
        name, *values = fields
        try:
            loads = tuple(read_double(v, name) for v in values)
        except ValueError as exc:
            raise HtoolsError(
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
    """-X's job sets (`maybeExecJobs`) of hbal's own run (`placement_job_sets`)."""
    assert run.final is not None
    return placement_job_sets(run.final.state, run.final.placements, run.job_sets)


def placement_job_sets(
    state: ClusterState, plcs: Sequence[Placement], sets: Sequence[Sequence[int]]
) -> list[JobSet]:
    """-X's job sets (`maybeExecJobs`) for steps `plcs` split into `sets` (indices, as
    `split_jobs` gives them): per step one job, its opcodes as `iMoveToJob` makes them (full
    names; a forthcoming instance, as `state` knows it, fails over instead of migrating),
    described as hbal describes them. hbal's run and the exact mode's steps both go here."""
    from model.backends.jobs import JobSet
    from model.operations import opcode

    out = []
    for js in sets:
        jobs = []
        for k in js:
            plc = plcs[k]
            name = read_name(plc.instance)
            steps = move_steps(plc.move, plc.primary, plc.secondary)
            if state.demands[plc.instance].forthcoming:  # opFforced: a failover
                steps = [
                    ("failover", node) if op == "migrate" else (op, node) for op, node in steps
                ]
            jobs.append(tuple(opcode(name, st) for st in steps))
        names = ", ".join(read_name(plcs[k].instance) for k in js)
        out.append(JobSet(f"Executing jobset for instances {names}", tuple(jobs)))
    return out
