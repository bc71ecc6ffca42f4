"""hspace 3.0.2's output (Program/Hspace.hs; Cluster.totalResources, computeAllocationDelta),
byte for byte: the human text, the `HTS_*` lines of `--machine-readable`, `-p` node lists and
`-v -v` allocation maps on stderr, and the `-S` files.

`CStats` is htools' cluster statistics over every node (offline ones too); the numbers printed
are its fields, formatted as Haskell's printf and show format them (model/backends/text.py).
`hspace_text` renders a whole run from the phases model/htools/hspace.py computed (or from an
exact answer's final states, with exalloc's numbers in hspace's layout).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from model.backends.text import (
    cluster_suffix,
    dump_text,
    printf_0f,
    printf_fixed,
    show_double,
    show_list,
)
from model.cluster import Cluster, Instance
from model.htools.hspace import DivideByZero, FailStats, Phase, Spec, required_nodes
from model.htools.metrics import N_METRICS, list_score, list_stats, node_row, stat_value
from model.htools.nodelist import NodeList, parse_fields
from model.resources import NodeState
from model.score import METRICS
from model.state import ClusterState


@dataclass(frozen=True)
class CStats:
    """Cluster.CStats (the fields hspace prints)."""

    fmem: int
    fdsk: int
    fspn: int
    amem: int
    adsk: int
    mmem: int
    mdsk: int
    imem: int
    idsk: int
    ispn: int
    icpu: int
    tmem: float
    tdsk: float
    tspn: float
    tcpu: float
    vcpu: int
    ncpu: float
    xmem: int
    nmem: int
    score: float
    ninst: int


def total_resources(states: Sequence[NodeState]) -> CStats:
    """Cluster.totalResources: updateCStats folded over the nodes in order, and compCV."""
    acc = dict.fromkeys(("fmem", "fdsk", "fspn", "amem", "adsk", "mmem", "mdsk"), 0)
    acc.update(dict.fromkeys(("imem", "idsk", "ispn", "icpu", "vcpu", "xmem", "nmem", "ninst"), 0))
    tmem = tdsk = tspn = tcpu = ncpu = 0.0
    for st in states:
        acc["fmem"] += st.unallocated_memory_mib
        acc["fdsk"] += st.free_disk_mib
        acc["fspn"] += st.free_spindles
        acc["amem"] += st.available_memory_mib
        acc["adsk"] += st.available_disk_mib
        acc["mmem"] = max(acc["mmem"], st.available_memory_mib)
        acc["mdsk"] = max(acc["mdsk"], st.available_disk_mib)
        acc["imem"] += st.instance_memory_mib
        acc["idsk"] += math.trunc(st.total_disk_mib) - st.free_disk_mib
        acc["ispn"] += st.total_spindles - st.free_spindles
        acc["icpu"] += st.used_vcpus
        tmem += st.total_memory_mib
        tdsk += st.total_disk_mib
        tspn += float(st.total_spindles)
        tcpu += st.total_cpus
        acc["vcpu"] += st.hi_cpu
        ncpu += st.used_vcpus / st.vcpu_ratio if st.vcpu_ratio else math.inf
        acc["xmem"] += st.missing_memory_mib
        acc["nmem"] += st.node_memory_mib
        acc["ninst"] += len(st.primaries)
    return CStats(
        tmem=tmem, tdsk=tdsk, tspn=tspn, tcpu=tcpu, ncpu=ncpu, score=list_score(states), **acc
    )


def _eff(num: int, den: float) -> float:
    if den == 0:
        return math.nan if num == 0 else math.copysign(math.inf, num)
    return num / den


#: Hspace.statsData: (key, value) of one phase
STATS: tuple[tuple[str, Callable[[CStats], str]], ...] = (
    ("SCORE", lambda c: printf_fixed(c.score, 8)),
    ("INST_CNT", lambda c: str(c.ninst)),
    ("MEM_FREE", lambda c: str(c.fmem)),
    ("MEM_AVAIL", lambda c: str(c.amem)),
    ("MEM_RESVD", lambda c: str(c.fmem - c.amem)),
    ("MEM_INST", lambda c: str(c.imem)),
    ("MEM_OVERHEAD", lambda c: str(c.xmem + c.nmem)),
    ("MEM_EFF", lambda c: printf_fixed(_eff(c.imem, c.tmem), 8)),
    ("DSK_FREE", lambda c: str(c.fdsk)),
    ("DSK_AVAIL", lambda c: str(c.adsk)),
    ("DSK_RESVD", lambda c: str(c.fdsk - c.adsk)),
    ("DSK_INST", lambda c: str(c.idsk)),
    ("DSK_EFF", lambda c: printf_fixed(_eff(c.idsk, c.tdsk), 8)),
    ("SPN_FREE", lambda c: str(c.fspn)),
    ("SPN_INST", lambda c: str(c.ispn)),
    ("SPN_EFF", lambda c: printf_fixed(_eff(c.ispn, c.tspn), 8)),
    ("CPU_INST", lambda c: str(c.icpu)),
    ("CPU_EFF", lambda c: printf_fixed(_eff(c.icpu, float(c.vcpu)), 8)),
    ("MNODE_MEM_AVAIL", lambda c: str(c.mmem)),
    ("MNODE_DSK_AVAIL", lambda c: str(c.mdsk)),
)


def ensure_quoted(v: str) -> str:
    """Utils.ensureQuoted: quoted unless every character is alphanumeric or a dot."""
    return v if all(c.isalnum() or c == "." for c in v) else f"'{v}'"


def keys(pairs: Sequence[tuple[str, str]]) -> str:
    """CLI.printKeys "HTS"."""
    return "".join(f"HTS_{k.upper()}={ensure_quoted(v)}\n" for k, v in pairs)


def phase_stats(kind: str, cs: CStats) -> list[tuple[str, str]]:
    return [(f"{kind}_{k}", fn(cs)) for k, fn in STATS]


def have_excl_storage(states: Sequence[NodeState]) -> bool:
    return any(st.exclusive_storage for st in states)


def _spec_fields(spec: Spec, spn: bool) -> list[tuple[str, str]]:
    out = [("MEM", str(spec.memory_mib)), ("DSK", str(spec.disk_mib)), ("CPU", str(spec.vcpus))]
    return out + [("SPN", str(spec.spindles))] if spn else out


def format_resources(pairs: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"{a} {b}" for a, b in pairs)


def _cluster_fields(cs: CStats, spn: bool) -> list[tuple[str, str]]:
    out = [
        ("MEM", printf_0f(cs.tmem)),
        ("DSK", printf_0f(cs.tdsk)),
        ("CPU", printf_0f(cs.tcpu)),
        ("VCPU", str(cs.vcpu)),
    ]
    return out + [("SPN", printf_0f(cs.tspn))] if spn else out


def print_cluster(machine: bool, cs: CStats, node_count: int, spn: bool) -> str:
    if machine:
        pairs = [(f"CLUSTER_{a}", v) for a, v in _cluster_fields(cs, True)]
        pairs.append(("CLUSTER_NODES", str(node_count)))
        return keys(pairs) + keys(phase_stats("INI", cs))
    count = str(cs.ninst) if cs.ninst > 0 else "no"
    return (
        f"The cluster has {node_count} nodes and the following resources:\n"
        f"  {format_resources(_cluster_fields(cs, spn))}.\n"
        f"There are {count} initial instances on the cluster.\n"
    )


SPEC_PREFIX = {"normal": "SPEC", "tiered": "TSPEC_INI"}
SPEC_DESCRIPTION = {"normal": "Standard (fixed-size)", "tiered": "Tiered (initial size)"}


def print_ispec(machine: bool, spec: Spec, kind: str, template: str, spn: bool) -> str:
    if machine:
        prefix = SPEC_PREFIX[kind]
        pairs = [(f"{prefix}_{a}", v) for a, v in _spec_fields(spec, True)]
        pairs += [(f"{prefix}_RQN", str(required_nodes(template)))]
        pairs += [(f"{prefix}_DISK_TEMPLATE", template)]
        return keys(pairs)
    return (
        f"{SPEC_DESCRIPTION[kind]} instance spec is:\n"
        f"  {format_resources(_spec_fields(spec, spn))}, using disk template '{template}'.\n"
    )


def format_table(rows: Sequence[Sequence[str]], numeric: Sequence[bool]) -> list[list[str]]:
    """Utils.formatTable: each column padded to its widest cell, numbers to the right."""
    if not rows:
        return []
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return [
        [
            cell.rjust(w) if num else cell.ljust(w)
            for cell, w, num in zip(r, widths, numeric, strict=True)
        ]
        for r in rows
    ]


def allocation_map(msg: str, excl: bool, placed: Sequence[Instance]) -> str:
    """printAllocationMap at -v -v: the new instances, oldest first."""
    rows = []
    for i in placed:
        spn = ""
        if excl:
            total = (
                sum(d.spindles for d in i.disks)
                if all(d.spindles is not None for d in i.disks)
                else None
            )  # type: ignore[misc]
            spn = "?" if total is None else str(total)
        rows.append(
            [
                i.name,
                i.primary,
                i.secondary or "",
                str(i.memory_mib),
                str(i.disk_mib),
                str(i.vcpus),
                spn,
            ]
        )
    table = format_table(rows, [False, False, False, True, True, True, True])
    return f"{msg} map\n" + "".join(" " + " ".join(r) + "\n" for r in table)


def eff_lines(cs: CStats, spn: bool) -> str:
    """printClusterEff."""
    rows = [
        ("memory", _eff(cs.imem, cs.tmem)),
        ("disk", _eff(cs.idsk, cs.tdsk)),
        ("vcpu", _eff(cs.icpu, float(cs.vcpu))),
    ]
    if spn:
        rows.append(("spindles", _eff(cs.ispn, cs.tspn)))
    width = max(len(s) for s, _ in rows)
    return "".join(
        f"  - {s.rjust(width)} usage efficiency: {printf_fixed(v * 100, 2).rjust(5)}%\n"
        for s, v in rows
    )


def fr_scores(ini: ClusterState, fin: ClusterState, reasons: FailStats) -> str:
    """printFRScores: the most likely failure, the scores, the efficiencies."""
    fin_states = list(fin.nodes.values())
    return (
        f"  - most likely failure reason: {reasons[0][0]}\n"
        f"  - initial cluster score: {printf_fixed(list_score(list(ini.nodes.values())), 8)}\n"
        f"  -   final cluster score: {printf_fixed(list_score(fin_states), 8)}\n"
        + eff_lines(total_resources(fin_states), have_excl_storage(fin_states))
    )


def spec_map_text(spec_map: Sequence[tuple[Spec, int]]) -> str:
    """formatSpecMap, joined by spaces."""
    return " ".join(f"{s.memory_mib},{s.disk_mib},{s.vcpus},{s.spindles}={n}" for s, n in spec_map)


def _alloc_info(prefix: str, cpu: int, npu: float, mem: int, dsk: int, spn: int):
    return [
        (f"KM_{prefix}_CPU", str(cpu)),
        (f"KM_{prefix}_NPU", show_double(npu)),
        (f"KM_{prefix}_MEM", str(mem)),
        (f"KM_{prefix}_DSK", str(dsk)),
        (f"KM_{prefix}_SPN", str(spn)),
    ]


def allocation_stats(ini: CStats, fin: CStats) -> str:
    """printAllocationStats (computeAllocationDelta): used, allocated, left."""
    return keys(
        _alloc_info("USED", ini.icpu, ini.ncpu, ini.imem, ini.idsk, ini.ispn)
        + _alloc_info(
            "POOL",
            fin.icpu - ini.icpu,
            fin.ncpu - ini.ncpu,
            fin.imem - ini.imem,
            fin.idsk - ini.idsk,
            fin.ispn - ini.ispn,
        )
        + _alloc_info(
            "UNAV",
            fin.vcpu - fin.icpu,
            fin.tcpu - fin.ncpu,
            math.trunc(fin.tmem) - fin.imem,
            math.trunc(fin.tdsk) - fin.idsk,
            math.trunc(fin.tspn) - fin.ispn,
        )
    )


def print_tiered(
    machine: bool,
    spec_map: Sequence[tuple[Spec, int]],
    ini: ClusterState,
    trl: ClusterState,
    reasons: FailStats,
) -> str:
    if machine:
        trl_stats = total_resources(list(trl.nodes.values()))
        return (
            keys(phase_stats("TRL", trl_stats))
            + keys([("TSPEC", spec_map_text(spec_map))])
            + allocation_stats(total_resources(list(ini.nodes.values())), trl_stats)
        )
    spn = have_excl_storage(list(ini.nodes.values()))
    out = "Tiered allocation results:\n"
    if not spec_map:
        out += "  - no instances allocated\n"
    for spec, n in spec_map:
        out += f"  - {n:3d} instances of spec {format_resources(_spec_fields(spec, spn))}\n"
    if not reasons:
        raise EmptyHead(out)
    return out + fr_scores(ini, trl, reasons)


class EmptyHead(Exception):
    """GHC's `head []` in hspace's printing: printFRScores takes the first failure reason,
    and a tiered phase ended by `-l` before any tryAlloc (`-l 0`; `-l` below -1, which
    combineTiered compares with the count as it is) has none. The real hspace has printed
    `printed` of the block by then, then `hspace: Prelude.head: empty list` on stderr, exit 1
    (the `-S` file of the phase is written already)."""

    def __init__(self, printed: str) -> None:
        super().__init__("Prelude.head: empty list")
        self.printed = printed


class InternalInconsistency(Exception):
    """hspace's `exitWhen` of printResults."""


def print_results(
    machine: bool,
    ini: ClusterState,
    fin: ClusterState,
    num_instances: int,
    allocs: int,
    reasons: FailStats,
) -> str:
    if machine:
        fin_stats = total_resources(list(fin.nodes.values()))
        if num_instances + allocs != fin_stats.ninst:
            raise InternalInconsistency(
                f"internal inconsistency, allocated ({num_instances + allocs}) != counted "
                f"({fin_stats.ninst})\n"
            )
        main = reasons[0]
        total = num_instances + allocs
        usage = num_instances / total if total else math.nan
        return (
            keys(phase_stats("FIN", fin_stats))
            + keys(
                [
                    ("ALLOC_USAGE", printf_fixed(usage, 8)),
                    ("ALLOC_INSTANCES", str(allocs)),
                    ("ALLOC_FAIL_REASON", str(main[0]).upper()),
                ]
            )
            + keys([(f"ALLOC_{m}_CNT", str(c)) for m, c in reasons])
        )
    return (
        "Normal (fixed-size) allocation results:\n"
        f"  - {allocs:3d} instances allocated\n" + fr_scores(ini, fin, reasons)
    )


def print_stats(prefix: str, states: Sequence[NodeState]) -> str:
    """Metrics.printStats: every metric's value and weight; the header alone when no node is
    online (compDetailedCV of none: [], as hbal's, model/htools/hbal.py)."""
    stats = list_stats([node_row(s) for s in states], [not s.offline for s in states])
    rows = [["Field", "Value", "Weight"]]
    for k in () if stats.empty else range(N_METRICS):
        value = stat_value(k, stats.values[k])
        rows.append(
            [METRICS[k].name, printf_fixed(value, 8), "x" + printf_fixed(METRICS[k].weight, 2)]
        )
    table = format_table(rows, [False, True, True])
    return "".join(prefix + " " + " ".join(r) + "\n" for r in table)


def _show_alloc_nodes(targets, index: Mapping[str, int], pairs: bool) -> str:
    """`show` of AllocNodes (node indices): Right for a template on two nodes (drbd), Left
    for one, also when no node is left (`Right []` for drbd)."""
    if pairs:
        items = ",".join(
            f"({index[p]},[{','.join(str(index[s]) for s in ss if s != p)}])" for p, ss in targets
        )
        return f"Right [{items}]"
    return "Left [" + ",".join(str(index[n]) for n in targets) + "]"


@dataclass
class Output:
    """What hspace prints and writes, and its exit code."""

    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    exit_code: int = 0
    notes: tuple[str, ...] = ()  # exalloc's (the proof of an exact answer)
    json: dict = field(default_factory=dict)

    def fail(self, message: str) -> Output:
        """CLI.exitErr."""
        self.stderr.append(f"Error: {message}\n")
        self.exit_code = 1
        return self


@dataclass(frozen=True)
class Display:
    """hspace's output options."""

    machine_readable: bool = False
    verbose: int = 1
    print_nodes: str | None = None  # -p[FIELDS]
    save: str | None = None  # -S FILE
    # the cluster was merged twice (-I: every instance on its nodes twice, the instance list
    # once, docs/htools-facts.md §5): -S writes each existing instance once
    merged_twice: bool = False
    # the index of the first node: 1 in a --simulate cluster (Simu.parseData numbers its
    # nodes from 1), 0 as every other loader reads one; shown by -pidx, peermap and -v -v -v -v
    first_node_index: int = 0


def _node_list(
    out: Output, display: Display, cluster: Cluster, msg: str, state: ClusterState, placed=()
) -> None:
    """maybePrintNodes: the node list on stderr, new instances indexed after the known ones."""
    if display.print_nodes is None:
        return
    nodes = NodeList(
        cluster, [i.name for i in placed], indexed=True, first_node=display.first_node_index
    )
    text = nodes.text(state, parse_fields(display.print_nodes))
    out.stderr.append(f"\n{msg} status:\n{text}\n")


def saved_cluster(state: ClusterState, *, merged_twice: bool = False) -> Cluster:
    """What Text.serializeCluster writes of the cluster after a phase: htools never updates
    a node's reported free memory (f_mem) when it adds an instance, and its free spindles
    follow calcNewFreeSpindles (0 on a node without exclusive storage once it took one);
    `merged_twice`: a state loaded with every instance twice (-I), whose instance list
    htools holds once."""
    snap = state.snapshot()
    if merged_twice:
        seen: set[str] = set()
        once = [i for i in snap.instances if not (i.name in seen or seen.add(i.name))]
        snap = replace(snap, instances=tuple(once))
    nodes = tuple(
        replace(
            n,
            free_memory_mib=state.nodes[n.name].reported_free_memory_mib,
            free_spindles=state.nodes[n.name].free_spindles,
        )
        for n in snap.nodes
    )
    return replace(snap, nodes=nodes)


def _save(out: Output, display: Display, ext: str, msg: str, state: ClusterState) -> None:
    """maybeSaveData: the cluster after the phase, in htools' text format."""
    if display.save is None:
        return
    path = f"{display.save}.{ext}"
    out.files[path] = dump_text(saved_cluster(state, merged_twice=display.merged_twice))
    out.stderr.append(f"The cluster state {msg} has been written to file '{path}'\n")


def run_phase(
    out: Output,
    display: Display,
    cluster: Cluster,
    phase: Phase,
    spec: Spec,
    template: str,
    kind: str,
) -> bool:
    """runAllocation: the phase's error (exit 1), or its spec, map, node list and -S file."""
    if phase.error is not None:
        out.fail(f"failure during allocation: {phase.error}")
        return False
    name = "Tiered" if kind == "tiered" else "Standard"
    excl = have_excl_storage(list(phase.state.nodes.values()))
    out.stdout.append(print_ispec(display.machine_readable, spec, kind, template, excl))
    if display.verbose > 1:
        out.stderr.append(allocation_map(f"{name} allocation", excl, phase.placed))
    _node_list(out, display, cluster, f"{name} allocation", phase.state, phase.placed)
    _save(out, display, name.lower(), f"after {name.lower()} allocation", phase.state)
    return True


def _died(out: Output, crash: Exception) -> Output:
    """hspace's death by a Haskell exception (EmptyHead, DivideByZero): its message after
    what it printed, exit 1."""
    out.stderr.append(f"hspace: {crash}\n")
    out.exit_code = 1
    return out


def hspace_text(
    cluster: Cluster,
    ini: ClusterState,
    setup_info,  # model.htools.hspace.HspaceSetup
    tier_spec: Spec | None,
    tiered: Callable[[], Phase],
    standard_spec: Spec,
    standard: Callable[[], Phase],
    display: Display,
) -> Output:
    """Hspace.main from setNodeStatus on: what it prints, in order, and where it stops."""
    out = Output()
    states = list(ini.nodes.values())
    suffix = cluster_suffix(cluster)
    if suffix and display.verbose > 1:
        out.stderr.append(f"Note: Stripping common suffix of '{suffix}' from names\n")
    _node_list(out, display, cluster, "Initial cluster", ini)
    if display.verbose > 2:
        out.stderr.append(
            f"Initial coefficients: overall {printf_fixed(list_score(states), 8)}\n"
            + print_stats("  ", states)
        )
    out.stdout.append(
        print_cluster(
            display.machine_readable,
            total_resources(states),
            len(cluster.nodes),
            have_excl_storage(states),
        )
    )
    if display.verbose > 3 and setup_info.bad_nodes:
        out.stderr.append(f"Bad nodes: {show_list(list(setup_info.bad_nodes))}\n")
    if display.verbose > 3 and setup_info.bad_groups:
        out.stderr.append(f"Bad groups: {show_list(list(setup_info.bad_groups))}\n")
    if display.verbose > 3:
        index = {n.name: i for i, n in enumerate(cluster.nodes, display.first_node_index)}
        pairs = required_nodes(setup_info.template) == 2
        shown = _show_alloc_nodes(setup_info.targets, index, pairs)
        out.stderr.append(f"Allocatable nodes: {shown}\n")
    if tier_spec is None:
        return out.fail("Empty list of specs received from the cluster")
    template = setup_info.template
    try:
        trl = tiered()
    except DivideByZero as e:
        return _died(out, e)
    if not run_phase(out, display, cluster, trl, tier_spec, template, "tiered"):
        return out
    try:
        out.stdout.append(
            print_tiered(display.machine_readable, trl.spec_map(), ini, trl.state, trl.reasons)
        )
    except EmptyHead as e:  # hspace's crash, reproduced (issue 495's -l, docs/space.md)
        out.stdout.append(e.printed)
        return _died(out, e)
    try:
        fin = standard()
    except DivideByZero as e:
        return _died(out, e)
    if not run_phase(out, display, cluster, fin, standard_spec, template, "normal"):
        return out
    try:
        out.stdout.append(
            print_results(
                display.machine_readable,
                ini,
                fin.state,
                len(cluster.instances),
                len(fin.placed),
                fin.reasons,
            )
        )
    except InternalInconsistency as e:
        out.stderr.append(f"Error: {e}\n")
        out.exit_code = 1
        return out
    if display.machine_readable:
        out.stdout.append(keys([("OK", "1")]))
    return out


def exact_phase(state: ClusterState, stages: Sequence, final: ClusterState | None) -> Phase:
    """An exact phase as hspace's runAllocation sees one: the instances in order (new-0, ...),
    the cluster after them, the failure counts: the final state's binding checks, node by
    node, as failure modes (hspace counts its last tryAlloc's failing candidates); hspace's
    FailN1 stop, or its error when there are no candidates."""
    from collections import Counter

    from model.htools.hspace import collapse_failures, sort_reasons
    from model.resources import FailMode
    from model.space import failure_mode, new_instance

    last = stages[-1] if stages else None
    if last is not None and last.reason is not None:
        if last.problem.stopped:
            return Phase(((FailMode.N1, 1),), state, ())
        return Phase((), state, (), error=last.reason)
    placed = []
    for st in stages:
        o = st.problem.options
        for pl in st.answer.placements:
            rec = new_instance(st.answer.spec, o.disk_template, o.spindle_use, pl.name)
            placed.append(replace(rec, primary=pl.primary, secondary=pl.secondary))
    counts: Counter = Counter()
    if last is not None:
        for b in last.binding:
            if b.kind != "limit":
                counts[failure_mode(b.kind)] += len(b.nodes)
    return Phase(sort_reasons(collapse_failures(counts)), final or state, tuple(placed))
