"""hinfo 3.0.2 (Program/Hinfo.hs), byte for byte: what `exalloc info` prints by default.

`hinfo` follows `Hinfo.main`: the cluster tags, the policy (`-v -v`, as Haskell's `show`
prints an `IPolicy`), `commonInfo`'s counts and suffix note, `splitInstancesInfo`,
`showGroupInfo`'s table (`-v`) and N+1 verdict, the instance map (`--print-instances`,
`Cluster.printInsts`) and node list (`-p`, `Cluster.printNodes`) on stderr, then
`Metrics.printStats`' coefficients and the score. Verbosity counts as htools' does: 1 by
default, each `-v` one more, each `-q` one less.

`set_node_status` is `CLI.setNodeStatus`'s `-O` (every htools program's): the nodes named
offline, by htools' `lookupName` (an exact name, or the one name it is a prefix of).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from model.backends.iallocator_response import show_ipolicy
from model.backends.text import printf_fixed
from model.cluster import Cluster, Instance, read_name
from model.errors import HtoolsError
from model.htools.hroller import offline_names
from model.htools.loader import suffix_note
from model.htools.nodelist import NodeList, table
from model.score import METRICS, cluster_metrics, cluster_score
from model.state import ClusterState, node_states

#: Instance.isRunning: the run states htools counts as running.
_RUNNING = ("running", "ERROR_up")


def wrong_offline_names(cluster: Cluster, offline: Sequence[str]) -> str | None:
    """`CLI.setNodeStatus`'s error text for the `-O` names that match no node (None: all
    match)."""
    _, wrong = offline_names([n.name for n in cluster.nodes], offline)
    return f"wrong node name(s) set as offline: {', '.join(wrong)}" if wrong else None


def set_node_status(cluster: Cluster, offline: Sequence[str]) -> Cluster:
    """`CLI.setNodeStatus`: the nodes `-O` names (each a name or the unique name it starts)
    set offline; a name matching no node is htools' error."""
    if not offline:
        return cluster
    wrong = wrong_offline_names(cluster, offline)
    if wrong is not None:  # exitErr of printf "...\n": the line and an empty one
        raise HtoolsError(wrong + "\n")
    names, _ = offline_names([n.name for n in cluster.nodes], offline)
    nodes = tuple(replace(n, offline=True) if n.name in names else n for n in cluster.nodes)
    return replace(cluster, nodes=nodes)


def group_members(state: ClusterState) -> list[tuple[str, list[str]]]:
    """`ClusterUtils.splitCluster`: (group uuid, its node names) for every group holding a
    node, in the groups' order (htools' group index); an instance belongs to its primary's."""
    order = {g.uuid: k for k, g in enumerate(state.cluster.groups)}
    members: dict[str, list[str]] = {}
    for name, st in state.nodes.items():
        members.setdefault(st.group_uuid, []).append(name)
    return sorted(members.items(), key=lambda item: order.get(item[0], len(order)))


def bad_items(state: ClusterState, nodes: Sequence[str]) -> tuple[list[str], set[str]]:
    """`Cluster.computeBadItems`: the online nodes of `nodes` failing N+1 and the instances
    (primary or secondary) on them."""
    bad = [n for n in nodes if state.nodes[n].fail_n1 and not state.nodes[n].offline]
    instances = {i for n in bad for i in (*state.nodes[n].primaries, *state.nodes[n].secondaries)}
    return bad, instances


def split_instances(state: ClusterState) -> list[Instance]:
    """`Cluster.findSplitInstances`: the instances whose nodes are in different groups."""
    group = {name: st.group_uuid for name, st in state.nodes.items()}
    return [
        i
        for i in state.cluster.instances
        if i.secondary and group.get(i.primary) != group.get(i.secondary)
    ]


def instance_map(cluster: Cluster) -> str:
    """`Cluster.printInsts`: one line per instance in input order."""
    rows = [
        [
            "R" if i.status in _RUNNING else " ",
            read_name(i.name),
            i.primary,
            i.secondary or "",
            "Y" if i.auto_balance else "N",
            f"{i.vcpus:3d}",
            f"{i.memory_mib:5d}",
            f"{i.disk_mib // 1024:5d}",
            *(printf_fixed(u, 3).rjust(5) for u in i.util),
        ]
        for i in cluster.instances
    ]
    header = ["F", "Name", "Pri_node", "Sec_node", "Auto_bal", "vcpu", "mem", "dsk"]
    header += ["lCpu", "lMem", "lDsk", "lNet"]
    return table(header, rows, [False] * 5 + [True] * 7)


def coefficients(state: ClusterState) -> str:
    """`Metrics.printStats "  "`: every metric's value and weight; none without an online
    node (`compClusterStatistics` zips the online nodes' columns, and the transpose of no
    node is no column: every node offline, e.g. by `-O`, prints the header alone)."""
    if all(st.offline for st in state.nodes.values()):
        return table(["Field", "Value", "Weight"], [], [False, True, True], prefix="  ")
    values = cluster_metrics(state)
    rows = [[m.name, printf_fixed(values[m.name], 8), f"x{m.weight:.2f}"] for m in METRICS]
    return table(["Field", "Value", "Weight"], rows, [False, True, True], prefix="  ")


@dataclass(frozen=True)
class HinfoOptions:
    """hinfo's options: verbosity (1 = none given), `-p[FIELDS]` (None: not asked),
    `--print-instances`, the `-O` names."""

    verbose: int = 1
    print_nodes: Sequence[str] | None = None
    print_instances: bool = False
    offline: Sequence[str] = ()


@dataclass(frozen=True)
class HinfoOutput:
    stdout: str
    stderr: str
    exit_code: int = 0


def hinfo(cluster: Cluster, options: HinfoOptions, *, merged_twice: bool = False) -> HinfoOutput:
    """`Hinfo.main` after loading (the loader's warning is the caller's: it comes first).
    `merged_twice`: a request's cluster (-I), which htools merges twice: every instance on its
    nodes twice (the state, its scores and node list), the instance list once (the counts,
    the instance map)."""
    v = options.verbose
    out = [f"Loaded cluster tags: {','.join(cluster.cluster_tags)}\n"]
    err = []
    if v > 2:
        out.append(f"Loaded cluster ipolicy: {show_ipolicy(cluster.cluster_policy)}\n")
    wrong = wrong_offline_names(cluster, options.offline)
    if wrong is not None:  # exitErr of printf "...\n": the line and an empty one
        return HinfoOutput("".join(out), f"Error: {wrong}\n\n", 1)
    cluster = set_node_status(cluster, options.offline)
    if merged_twice:
        from model.htools.loader import merged_twice as doubled

        state = node_states(doubled(cluster))
    else:
        state = node_states(cluster)
    # commonInfo
    if not cluster.instances and v > 1:
        out.append("Cluster is empty.\n")
    n_nodes, n_insts, n_groups = len(cluster.nodes), len(cluster.instances), len(cluster.groups)
    out.append(
        f"Loaded {n_nodes} {'node' if n_nodes == 1 else 'nodes'}, "
        f"{n_insts} {'instance' if n_insts == 1 else 'instances'}, "
        f"{n_groups} {'node group' if n_groups == 1 else 'node groups'}\n"
    )
    note = suffix_note(cluster)
    if note is not None and v > 2:
        out.append(note + "\n")
    # splitInstancesInfo
    split = split_instances(state)
    if split:
        out.append("Found instances belonging to multiple node groups:\n")
        err += [f"  {read_name(i.name)}\n" for i in split]
    elif v > 1:
        out.append("No split instances found\n")
    # showGroupInfo
    rows, happy = [], True
    for uuid, nodes in group_members(state):
        bad, bad_insts = bad_items(state, nodes)
        members = set(nodes)
        happy = happy and not bad
        rows.append(
            [
                cluster.group(uuid).name,
                str(len(nodes)),
                str(sum(1 for i in cluster.instances if i.primary in members)),
                str(len(bad)),
                str(len(bad_insts)),
                str(not bad),
                printf_fixed(cluster_score(state, uuid), 8),
            ]
        )
    if v > 1:
        header = ["Group", "Nodes", "Instances", "Bad_Nodes", "Bad_Instances", "N+1", "Score"]
        numeric = [False, True, True, True, True, False, True]
        out.append("Node group information:\n" + table(header, rows, numeric, prefix="  "))
    out.append(f"Cluster is N+1 {'happy' if happy else 'unhappy'}\n")
    if options.print_instances:
        err.append("\nInstances instance map:\n" + instance_map(cluster))
    if options.print_nodes is not None:
        listing = NodeList(cluster).text(state, options.print_nodes)
        err.append(f"\nCluster status:\n{listing}\n")
    out.append("Cluster coefficients:\n" + coefficients(state))
    out.append(f"Cluster score: {printf_fixed(cluster_score(state), 8)}\n")
    return HinfoOutput("".join(out), "".join(err))
