"""htools' node list, `-p[FIELDS]` (Cluster.printNodes, Node.showField in Ganeti 3.0).

hail prints it on stderr before and after its answer, hbal and hspace likewise; the columns
are padded as Utils.formatTable pads them (numbers to the right, text to the left). Node and
instance lists are shown by htools' indices (input order; -1 for a requested instance), most
recently added first, as htools prepends them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from model.backends.iallocator import (
    IAllocatorInput,
    MultiAllocateRequest,
    requested_instances,
    state_after,
)
from model.backends.text import alias, cluster_suffix, printf_0f, printf_fixed, show_double
from model.cluster import Cluster
from model.resources import NodeState
from model.state import ClusterState, node_states

#: Node.defaultFields
DEFAULT_FIELDS: tuple[str, ...] = (
    "status", "name", "tmem", "nmem", "imem", "xmem", "fmem", "umem",
    "rmem", "tdsk", "fdsk", "tcpu", "ucpu", "pcnt", "scnt",
    "pfmem", "pfdsk", "rcpu",
    "cload", "mload", "dload", "nload",
)  # fmt: skip

UNKNOWN_FIELD = "<unknown field>"  # Types.unknownField, as header and as value

#: The index of the instance an allocate asks for (IAlloc.hs creates it with index -1; a
#: multi-allocate's are indexed after the known instances)
NEW_INDEX = -1


def parse_fields(text: str) -> list[str]:
    """`-pFIELDS`: a comma-separated list; a leading `+` adds to the default fields."""
    if text.startswith("+"):
        return ["+", *_split(text[1:])]
    return _split(text)


def _split(text: str) -> list[str]:
    """Utils.sepSplit: `""` is no field, `"a,"` is `a` and an empty one."""
    return [] if not text else text.split(",")


class NodeList:
    """printNodes over a cluster: its nodes and instances give htools' indices and the suffix
    htools strips from names (computed once, at load)."""

    def __init__(
        self,
        cluster: Cluster,
        requested: Sequence[str] = (),
        *,
        indexed: bool = False,
        first_node: int = 0,
    ) -> None:
        """`requested`: the new instances placed, in request order, added after the known
        ones (even one named as a known one); `indexed`: they have the indices after the
        known ones (a multi-allocate's, which htools numbers as they are placed:
        `updateIl`), else -1 (an allocate's); `first_node`: the first node's index (1 for
        hspace --simulate's nodes, numbered from 1 by Simu.parseData)."""
        self.node_index = {n.name: i for i, n in enumerate(cluster.nodes, first_node)}
        self.instance_index = {i.name: k for k, i in enumerate(cluster.instances)}
        first = len(cluster.instances)
        self.new_index = {n: (first + k if indexed else NEW_INDEX) for k, n in enumerate(requested)}
        self.suffix = cluster_suffix(cluster)

    def text(
        self, state: ClusterState, fields: Sequence[str], nodes: Iterable[str] | None = None
    ) -> str:
        """Cluster.printNodes: the table, one line per node (of `nodes`, default all) in
        index order."""
        if not fields:
            fields = DEFAULT_FIELDS
        elif fields[0] == "+":
            fields = [*DEFAULT_FIELDS, *fields[1:]]
        header = [_HEADERS.get(f, (UNKNOWN_FIELD, False)) for f in fields]
        shown = state.nodes if nodes is None else nodes
        names = sorted(shown, key=lambda n: self.node_index.get(n, len(self.node_index)))
        rows = [[self._field(name, state.nodes[name], f) for f in fields] for name in names]
        return table([h for h, _ in header], rows, [num for _, num in header])

    def _field(self, name: str, st: NodeState, field: str) -> str:
        show = _SHOW.get(field)
        if show is not None:
            return show(st)
        if field == "idx":
            return f"{self.node_index.get(name, 0):4d}"
        if field == "name":
            return alias(name, self.suffix)
        if field == "fqdn":
            return name
        if field in ("plist", "slist"):
            names = st.primaries if field == "plist" else st.secondaries
            return _show_ints(self._indices(reversed(names)))
        if field == "peermap":
            peers = [(self.node_index[p], mem) for p, mem in st.peer_map]
            return "[" + ",".join(f"({p},{mem})" for p, mem in peers) + "]"
        return UNKNOWN_FIELD

    def _indices(self, newest_first: Iterable[str]) -> Iterator[int]:
        """Instance indices; a requested instance is the newest of its name on a node."""
        seen: set[str] = set()
        for name in newest_first:
            new = name in self.new_index and name not in seen
            seen.add(name)
            yield self.new_index[name] if new else self.instance_index.get(name, NEW_INDEX)


def _show_ints(values: Iterable[int]) -> str:
    return "[" + ",".join(str(v) for v in values) + "]"


def _width(text: str, width: int) -> str:
    return text.rjust(width)


def _status(st: NodeState) -> str:
    if st.offline:
        return "-"
    return "*" if st.fail_n1 else " "


#: Node.showField for the fields that need only the node
_SHOW: Mapping[str, Callable[[NodeState], str]] = {
    "status": _status,
    "tmem": lambda st: _width(printf_0f(st.total_memory_mib), 5),
    "nmem": lambda st: f"{st.node_memory_mib:5d}",
    "xmem": lambda st: f"{st.missing_memory_mib:5d}",
    "fmem": lambda st: f"{st.reported_free_memory_mib:5d}",
    "umem": lambda st: f"{st.unallocated_memory_mib:5d}",
    "imem": lambda st: f"{st.instance_memory_mib:5d}",
    "rmem": lambda st: f"{st.reserved_memory_mib:5d}",
    "amem": lambda st: f"{st.available_memory_mib:5d}",
    "tdsk": lambda st: _width(printf_0f(st.total_disk_mib / 1024), 5),
    "fdsk": lambda st: f"{st.free_disk_mib // 1024:5d}",
    "tcpu": lambda st: _width(printf_0f(st.total_cpus), 4),
    "ucpu": lambda st: f"{st.used_vcpus:4d}",
    "pcnt": lambda st: f"{len(st.primaries):3d}",
    "scnt": lambda st: f"{len(st.secondaries):3d}",
    "pfmem": lambda st: _width(printf_fixed(st.p_mem, 4), 6),
    "pfdsk": lambda st: _width(printf_fixed(st.p_dsk, 4), 6),
    "rcpu": lambda st: _width(printf_fixed(st.p_cpu, 2), 5),
    "cload": lambda st: _width(printf_fixed(st.util_load.cpu, 3), 5),
    "mload": lambda st: _width(printf_fixed(st.util_load.mem, 3), 5),
    "dload": lambda st: _width(printf_fixed(st.util_load.dsk, 3), 5),
    "nload": lambda st: _width(printf_fixed(st.util_load.net, 3), 5),
    "ptags": lambda st: ",".join(f"{t}={c}" for t, c in sorted(st.exclusion_tag_counts)),
    "spindle_count": lambda st: str(st.total_spindles),
    "hi_spindles": lambda st: show_double(st.hi_spindles),
    "inst_spindles": lambda st: show_double(st.instance_spindles),
}

#: Node.showHeader: (header, numeric)
_HEADERS: Mapping[str, tuple[str, bool]] = {
    "idx": ("Index", True),
    "name": ("Name", False),
    "fqdn": ("Name", False),
    "status": ("F", False),
    "tmem": ("t_mem", True),
    "nmem": ("n_mem", True),
    "xmem": ("x_mem", True),
    "fmem": ("f_mem", True),
    "umem": ("u_mem", True),
    "amem": ("a_mem", True),
    "imem": ("i_mem", True),
    "rmem": ("r_mem", True),
    "tdsk": ("t_dsk", True),
    "fdsk": ("f_dsk", True),
    "tcpu": ("pcpu", True),
    "ucpu": ("vcpu", True),
    "pcnt": ("pcnt", True),
    "scnt": ("scnt", True),
    "plist": ("primaries", True),
    "slist": ("secondaries", True),
    "pfmem": ("p_fmem", True),
    "pfdsk": ("p_fdsk", True),
    "rcpu": ("r_cpu", True),
    "cload": ("lCpu", True),
    "mload": ("lMem", True),
    "dload": ("lDsk", True),
    "nload": ("lNet", True),
    "ptags": ("PrimaryTags", False),
    "peermap": ("PeerMap", False),
    "spindle_count": ("NodeSpindles", True),
    "hi_spindles": ("MaxSpindles", True),
    "inst_spindles": ("InstSpindles", True),
}


def table(header: list[str], rows: list[list[str]], numeric: list[bool], prefix: str = "") -> str:
    """`Utils.printTable prefix`: every line the prefix, a space and the padded cells (numbers
    to the right) joined by spaces."""
    table = [header, *rows]
    widths = [max(len(row[c]) for row in table) for c in range(len(header))]
    lines = []
    for row in table:
        cells = [
            cell.rjust(w) if num else cell.ljust(w)
            for cell, w, num in zip(row, widths, numeric, strict=True)
        ]
        lines.append(prefix + " " + " ".join(cells) + "\n")
    return "".join(lines)


def hails_node_lists(
    inp: IAllocatorInput, where: Mapping[str, Sequence[str]], fields: str
) -> tuple[str, str]:
    """hail's `-p` output (Program/Hail.hs): the node list before an answer (instance -> its
    nodes) and the one after it, apart (hail prints what `-S` says between them). Into a
    named group, tryGroupAlloc's solution holds that group's nodes only, and hail shows what
    the last successful one holds (a multi-allocate goes on from it: allocList)."""
    chosen = parse_fields(fields)
    before = NodeList(inp.cluster).text(node_states(inp.cluster), chosen)
    requested = requested_instances(inp.request)
    placed = [r.name for r in requested if r.name in where]
    final = NodeList(inp.cluster, placed, indexed=isinstance(inp.request, MultiAllocateRequest))
    state = state_after(inp, where)
    shown = None
    if where and any(r.group_name for r in requested):
        group = state.nodes[list(where.values())[-1][0]].group_uuid
        shown = [n for n, st in state.nodes.items() if st.group_uuid == group]
    after = final.text(state, chosen, shown)
    return f"\nInitial cluster status:\n{before}\n", f"\nFinal cluster status:\n{after}\n"
