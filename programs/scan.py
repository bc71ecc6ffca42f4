"""`exalloc scan`: hscan's snapshots of running clusters (Program/Hscan.hs), byte for byte.

For each cluster address (RAPI, as `-m` reads it; `file://DIR` reads saved answers), or the
local cluster through LUXI without addresses (named `LOCAL`): one summary line (nodes,
instances, nodes and instances failing N+1, total and free memory and disk, the cluster
score), the node list with `-p[FIELDS]`, and the cluster as read in the htools text format, in
`DIR/NAME.data` (`-d DIR`, default the current directory; `/` in the name becomes `_`). A
cluster that cannot be read gets hscan's `Error for NAME` paragraph on stdout and the run
exits 2 after the others, as hscan's.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from programs.options import print_nodes_option
from programs.parser import ArgumentKind, standard_options

if TYPE_CHECKING:
    from model.cluster import Cluster

LOCAL = "LOCAL"
HEADER = ("Name", "Nodes", "Inst", "BNode", "BInst", "t_mem", "f_mem", "t_disk", "f_disk", "Score")
EXIT_SOME_FAILED = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """hscan 3.0.2's options."""
    parser.add_argument(
        "clusters", nargs="*", metavar="CLUSTER", help="RAPI addresses (file://DIR: saved answers)"
    )
    print_nodes_option(parser)
    parser.add_argument(
        "-d",
        "--output-dir",
        dest="output_dir",
        default=".",
        metavar="PATH",
        help="where to write the .data files",
    )
    parser.add_argument(
        "-L",
        "--luxi",
        dest="luxi",
        nargs="?",
        const="",
        metavar="SOCKET",
        help="read the local cluster through LUXI when no address is given (-L/path: its socket)",
    )
    parser.add_argument(
        "-v", "--verbose", action="count", default=1, help="increase the verbosity level"
    )
    parser.add_argument(
        "--no-headers", dest="no_headers", action="store_true", help="no header line"
    )
    parser.add_argument(
        "--static-kvm-node-memory",
        dest="static_kvm_node_memory",
        type=int,
        default=4096,
        metavar="N",
        help="node memory assumed on kvm nodes (default 4096, as htools)",
    )
    standard_options(parser, "hscan", [ArgumentKind("host")])


def summary_line(cluster: Cluster) -> str:
    """`printCluster`: counts, memory and disk (MiB and GiB) and the score of all groups."""
    from model.backends.text import printf_fixed
    from model.score import cluster_score
    from model.state import node_states

    states = node_states(cluster)
    bad = {name for name, st in states.nodes.items() if st.fail_n1 and not st.offline}
    bad_instances = sum(1 for i in cluster.instances if {i.primary, i.secondary} & bad)
    nodes = cluster.nodes
    t_mem = printf_fixed(sum(n.total_memory_mib for n in nodes), 0)
    t_dsk = printf_fixed(sum(n.total_disk_mib for n in nodes) / 1024, 0)
    f_mem = sum(n.free_memory_mib for n in nodes)
    f_dsk = sum(n.free_disk_mib for n in nodes) // 1024
    score = printf_fixed(cluster_score(states), 8)
    return (
        f"{len(nodes):5d} {len(cluster.instances):5d} {len(bad):5d} {bad_instances:5d} "
        f"{t_mem:>6} {f_mem:6d} {t_dsk:>6} {f_dsk:6d} {score}"
    )


@dataclass(frozen=True)
class ScanReport:
    """What hscan printed; `exit_code` 2 when a cluster could not be read."""

    output: str
    saved: tuple[str, ...]
    failed: tuple[str, ...]

    @property
    def exit_code(self) -> int:
        return EXIT_SOME_FAILED if self.failed else 0

    def text(self) -> str:
        return self.output

    def to_json(self) -> dict[str, object]:
        return {"saved": list(self.saved), "failed": list(self.failed)}


def _load(name: str, args: argparse.Namespace) -> Cluster:
    from programs.sources import ClusterSource

    source = (
        ClusterSource("luxi", args.luxi or "") if name == LOCAL else ClusterSource("rapi", name)
    )
    return source.load(static_kvm_node_memory=args.static_kvm_node_memory)


def run(args: argparse.Namespace) -> ScanReport:
    """Read, summarise and save each cluster in turn (the parser is built without these
    imports: cli.py builds every command's)."""
    from model.backends.text import dump_text
    from model.errors import ExallocError
    from model.files import write_file
    from model.htools.nodelist import NodeList, parse_fields
    from model.state import node_states

    names = list(args.clusters) or [LOCAL]
    width = max(len(name) for name in names)
    out = []
    if not args.no_headers:
        first, *rest = HEADER
        widths = (5, 5, 5, 5, 6, 6, 6, 6, 10)
        out.append(
            f"{first:<{width}} "
            + " ".join(h.rjust(w) for h, w in zip(rest, widths, strict=True))
            + "\n"
        )
    saved, failed = [], []
    for name in names:
        try:
            cluster = _load(name, args)
        except ExallocError as err:
            out.append(f"\nError for {name}: failed to load data. Details:\n{err}\n")
            failed.append(name)
            continue
        out.append(f"{name:<{width}} {summary_line(cluster)}\n")
        if args.print_nodes is not None:
            out.append(NodeList(cluster).text(node_states(cluster), parse_fields(args.print_nodes)))
        path = os.path.join(args.output_dir, name.replace("/", "_") + ".data")
        write_file(path, dump_text(cluster))  # all or nothing; OutputError names the file
        saved.append(path)
    return ScanReport("".join(out), tuple(saved), tuple(failed))
