"""`exalloc info`: hinfo byte for byte (model/htools/hinfo.py); `--summary` and `--json` give
exalloc's own view of the cluster: its groups with their policies and scores, the free and
total resources, the instance policies (docs/info.md)."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from typing import Any

from model.backends.iallocator import ipolicy_json
from model.cluster import Cluster, IPolicy, ISpec
from model.htools.nodelist import parse_fields
from model.resources import NodeState
from model.score import METRICS, cluster_metrics, cluster_score, score_of_metrics
from model.state import ClusterState, node_states
from programs.options import (
    htools_source_options,
    ignore_dynu_option,
    json_option,
    no_arguments_option,
    offline_option,
    print_nodes_option,
    refuse_arguments,
    save_option,
    verbosity_options,
)
from programs.parser import standard_options


@dataclass(frozen=True, slots=True)
class Totals:
    """Free and total resources over a set of online nodes (MiB, cpus, spindles)."""

    memory_free_mib: int
    memory_total_mib: int
    disk_free_mib: int
    disk_total_mib: int
    vcpus_used: int
    vcpus_limit: int
    pcpus: float
    spindles_total: int
    spindles_free: int  # exclusive-storage nodes only
    spindles_used: float  # instSpindles on shared-storage nodes

    @classmethod
    def of(cls, states: list[NodeState]) -> Totals:
        online = [s for s in states if not s.offline]
        return cls(
            memory_free_mib=sum(s.unallocated_memory_mib for s in online),
            memory_total_mib=sum(int(s.total_memory_mib) for s in online),
            disk_free_mib=sum(s.free_disk_mib for s in online),
            disk_total_mib=sum(int(s.total_disk_mib) for s in online),
            vcpus_used=sum(s.used_vcpus for s in online),
            vcpus_limit=sum(s.hi_cpu for s in online),
            pcpus=sum(s.total_cpus for s in online),
            spindles_total=sum(s.total_spindles for s in online),
            spindles_free=sum(s.free_spindles for s in online if s.exclusive_storage),
            spindles_used=sum(s.instance_spindles for s in online),
        )

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class GroupInfo:
    name: str
    uuid: str
    alloc_policy: str
    nodes: int
    instances: int  # instances whose primary is in the group
    bad_nodes: int  # online nodes failing N+1
    bad_instances: int  # instances with a node failing N+1
    exclusive_storage: bool
    score: float
    totals: Totals
    ipolicy: IPolicy

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "uuid": self.uuid,
            "alloc_policy": self.alloc_policy,
            "nodes": self.nodes,
            "instances": self.instances,
            "bad_nodes": self.bad_nodes,
            "bad_instances": self.bad_instances,
            "n1_happy": self.bad_nodes == 0,
            "exclusive_storage": self.exclusive_storage,
            "score": _finite(self.score),
            "not_finite": _not_finite({"score": self.score}),
            "resources": self.totals.to_json(),
            "ipolicy": ipolicy_json(self.ipolicy),
        }


def _spec_text(s: ISpec) -> str:
    return (
        f"mem {s.memory_size} MiB, {s.cpu_count} cpu, disk {s.disk_count}×{s.disk_size} MiB, "
        f"{s.nic_count} nic, {s.spindle_use} spindle"
    )


def _finite(x: float) -> float | None:
    """JSON has no NaN/Inf: such a value is null, and `not_finite` says why (issue 40, item
    10: it was the string "NaN")."""
    return x if math.isfinite(x) else None


def _why_not_finite(name: str, x: float) -> str:
    shown = "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")
    if name.startswith("spindles"):
        why = "a node with 0 spindles divides 0 by 0, as in htools"
    elif name == "score":
        why = "a metric it sums is not finite"
    else:
        why = "the metric divides by a capacity of 0, as in htools"
    return f"{shown} (as hinfo prints it): {why}"


def _not_finite(values: dict[str, float]) -> dict[str, str]:
    """Every null the JSON has for a NaN or an infinity, with its reason."""
    return {k: _why_not_finite(k, v) for k, v in values.items() if not math.isfinite(v)}


@dataclass(frozen=True)
class InfoReport:
    path: str
    cluster: Cluster
    groups: tuple[GroupInfo, ...]
    totals: Totals
    metrics: dict[str, float]
    score: float
    bad_nodes: tuple[str, ...]
    offline_nodes: tuple[str, ...]
    drained_nodes: tuple[str, ...]
    master: str | None
    exclusion_prefixes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        c = self.cluster
        return {
            "file": self.path,
            "groups": len(c.groups),
            "nodes": len(c.nodes),
            "instances": len(c.instances),
            "score": _finite(self.score),
            "metrics": {k: _finite(v) for k, v in self.metrics.items()},
            # why a score or metric above is null: {"spindles_cv": "NaN (...): ..."}
            "not_finite": _not_finite({"score": self.score, **self.metrics}),
            "weights": {m.name: m.weight for m in METRICS},
            "n1_happy": not self.bad_nodes,
            "bad_nodes": list(self.bad_nodes),
            "offline_nodes": list(self.offline_nodes),
            "drained_nodes": list(self.drained_nodes),
            "master": self.master,
            "resources": self.totals.to_json(),
            "cluster_ipolicy": ipolicy_json(c.cluster_policy),
            "cluster_tags": list(c.cluster_tags),
            "exclusion_tag_prefixes": list(self.exclusion_prefixes),
            "group_list": [g.to_json() for g in self.groups],
        }

    def text(self) -> str:
        c = self.cluster
        out = [
            f"Cluster {self.path}",
            f"Loaded {len(c.nodes)} nodes, {len(c.instances)} instances, "
            f"{len(c.groups)} node group{'s' if len(c.groups) != 1 else ''}",
        ]
        if self.master:
            out.append(f"Master node: {self.master}")
        if self.offline_nodes:
            out.append(f"Offline nodes: {', '.join(self.offline_nodes)}")
        if self.drained_nodes:
            out.append(f"Drained nodes: {', '.join(self.drained_nodes)}")
        if self.exclusion_prefixes:
            out.append(f"Exclusion tag prefixes: {', '.join(self.exclusion_prefixes)}")
        out.append("Node group information:")
        rows = [("Group", "Policy", "Nodes", "Instances", "Bad_Nodes", "Bad_Instances", "N+1")]
        rows[0] += ("Excl", "Score")
        for g in self.groups:
            rows.append(
                (
                    g.name,
                    g.alloc_policy,
                    str(g.nodes),
                    str(g.instances),
                    str(g.bad_nodes),
                    str(g.bad_instances),
                    str(g.bad_nodes == 0),
                    "Y" if g.exclusive_storage else "N",
                    f"{g.score:.8f}",
                )
            )
        out += _table(rows, left=2)
        out.append("Resources of online nodes (free / total):")
        t = self.totals
        out += [
            f"   memory   {t.memory_free_mib} / {t.memory_total_mib} MiB (unallocated)",
            f"   disk     {t.disk_free_mib} / {t.disk_total_mib} MiB",
            f"   vcpus    {t.vcpus_used} used of {t.vcpus_limit} allowed on {t.pcpus:g} pcpus",
            f"   spindles {t.spindles_free} free (exclusive storage), "
            f"{t.spindles_used:g} used (shared), {t.spindles_total} total",
        ]
        out.append("Instance policies:")
        for name, pol in [("cluster", c.cluster_policy)] + [
            (f"group {g.name}", g.ipolicy) for g in self.groups
        ]:
            out.append(
                f"   {name}: templates {','.join(pol.disk_templates)}; "
                f"vcpu ratio {pol.vcpu_ratio:g}; spindle ratio {pol.spindle_ratio:g}"
            )
            out.append(f"      std {_spec_text(pol.std)}")
            for mm in pol.minmax:
                out.append(f"      min {_spec_text(mm.min)}")
                out.append(f"      max {_spec_text(mm.max)}")
        out.append(f"Cluster is N+1 {'happy' if not self.bad_nodes else 'unhappy'}")
        out.append("Cluster coefficients:")
        rows = [("Field", "Value", "Weight")]
        for m in METRICS:
            rows.append((m.name, f"{self.metrics[m.name]:.8f}", f"x{m.weight:.2f}"))
        out += _table(rows, left=1)
        out.append(f"Cluster score: {self.score:.8f}")
        return "\n".join(out)


def _table(rows: list[tuple[str, ...]], left: int) -> list[str]:
    """Rows padded like htools' printTable: the first `left` columns left-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "   "
        + " ".join(
            cell.ljust(w) if i < left else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def summarise(cluster: Cluster, path: str = "") -> InfoReport:
    """Everything `exalloc info` shows about a loaded cluster."""
    states: ClusterState = node_states(cluster)
    bad = tuple(n for n, s in states.nodes.items() if s.fail_n1 and not s.offline)
    bad_set = set(bad)
    groups = []
    for g in cluster.groups:
        members = [s for s in states.nodes.values() if s.group_uuid == g.uuid]
        names = {s.name for s in members}
        groups.append(
            GroupInfo(
                name=g.name,
                uuid=g.uuid,
                alloc_policy=g.alloc_policy,
                nodes=len(members),
                instances=sum(1 for i in cluster.instances if i.primary in names),
                bad_nodes=sum(1 for s in members if s.name in bad_set),
                bad_instances=sum(
                    1
                    for i in cluster.instances
                    if i.primary in names and ({i.primary, i.secondary} & bad_set)
                ),
                exclusive_storage=bool(members) and all(s.exclusive_storage for s in members),
                score=cluster_score(states, g.uuid),
                totals=Totals.of(members),
                ipolicy=g.ipolicy,
            )
        )
    metrics = cluster_metrics(states)
    return InfoReport(
        path=path,
        cluster=cluster,
        groups=tuple(groups),
        totals=Totals.of(list(states.nodes.values())),
        metrics=metrics,
        score=score_of_metrics(metrics),
        bad_nodes=bad,
        offline_nodes=tuple(n.name for n in cluster.nodes if n.offline),
        drained_nodes=tuple(n.name for n in cluster.nodes if n.drained),
        master=next((n.name for n in cluster.nodes if n.master), None),
        exclusion_prefixes=states.rules.exclusion_prefixes,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """hinfo 3.0.2's options (its output by default), and exalloc's own view (--summary,
    --json)."""
    parser.description = (
        "hinfo, byte for byte (model/htools/hinfo.py); --summary or --json: exalloc's "
        "richer view (groups' policies, resources, scores). See docs/info.md."
    )
    print_nodes_option(parser, " on stderr")
    parser.add_argument(
        "--print-instances",
        dest="print_instances",
        action="store_true",
        help="print the instance map on stderr",
    )
    htools_source_options(parser)
    verbosity_options(parser, "increase the verbosity level")
    offline_option(parser)
    ignore_dynu_option(parser)
    standard_options(parser, "hinfo", ())
    no_arguments_option(parser)
    parser.add_argument(
        "--summary",
        action="store_true",
        help="exalloc's view instead of hinfo's: groups with their policies, exclusive "
        "storage and scores, free and total resources, instance policies",
    )
    save_option(parser, "also write the cluster as read to FILE (htools text format)")
    json_option(parser)


@dataclass(frozen=True)
class HinfoReport:
    """hinfo's output, as it prints it (`--json` prints exalloc's view, InfoReport)."""

    stdout: str
    stderr: str
    exit_code: int = 0

    def text(self) -> str:
        return self.stdout

    def to_json(self) -> dict[str, Any]:
        return {"stdout": self.stdout, "stderr": self.stderr, "exit_code": self.exit_code}


def run(args: Any) -> InfoReport | HinfoReport:
    """`exalloc info`: hinfo's output from -t, -m, -L or -I (`-O` nodes set offline), or,
    with --summary, exalloc's view; `-S FILE` first freezes the cluster into FILE."""
    from model.errors import InputError
    from model.htools.hinfo import HinfoOptions, hinfo, set_node_status
    from programs.sources import htools_cluster, save_snapshot

    refuse_arguments(args)
    try:
        cluster, label, warning = htools_cluster(args)
    except InputError as e:  # a request htools refuses: hinfo's words (not exalloc's views)
        if args.summary or args.json or not hasattr(e, "htools_message"):
            raise
        return HinfoReport("", f"Error: {e.htools_message}\n", 1)
    if args.ignore_dynu:
        cluster = cluster.without_dynamic_util()
    if args.save:
        save_snapshot(cluster, args.save)
    if args.summary or args.json:
        return summarise(set_node_status(cluster, args.offline), label)
    fields = None if args.print_nodes is None else parse_fields(args.print_nodes)
    options = HinfoOptions(args.verbose, fields, args.print_instances, tuple(args.offline))
    twice = args.ialloc_src is not None  # htools' -I merges the request twice
    if twice:
        from model.htools.loader import request_warnings

        warning = request_warnings(cluster) if args.verbose != 0 else ""
    # hinfo's own error for a wrong -O name, as it prints it
    out = hinfo(cluster, options, merged_twice=twice)
    return HinfoReport(out.stdout, warning + out.stderr, out.exit_code)
