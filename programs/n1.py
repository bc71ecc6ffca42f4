"""`exalloc n1`: the cluster's N+1 health, exactly (docs/n1.md).

Per group and per node: can the node's failure be absorbed by its group? Each yes comes with
the plan that shows it, each no with the reason (a bound, or the packing MIP's optimum).
`--compare` puts the real `hcheck`'s per-group count of nodes it cannot evacuate beside it.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from model.errors import InputError, about
from model.state import ClusterState, node_states, unique_instance_names
from programs.groups import GroupOptions, as_source, known_groups, read
from programs.options import group_cluster_source, json_option, solver_options
from programs.sources import ClusterSource, source_of

if TYPE_CHECKING:  # the strategy imports Pyomo: loaded by `answer`, not by the parser
    from solvers.strategies.n1 import N1Report, NodeVerdict

HCHECK = "hcheck"
_HCHECK_GROUP = re.compile(
    r"Statistics for group (\S+) initially\n(?:.*\n)*?\s+Nodes not directly evacuateable: (\d+)"
)


def _yes_no(value: bool | None) -> str:
    return {True: "yes", False: "no", None: "unknown"}[value]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "For every node: a plan that re-places its primaries on the rest of its "
        "group (drbd failover, migration, recreation), or the proof that none exists. "
        "See docs/n1.md."
    )
    group_cluster_source(parser)
    parser.add_argument(
        "--n1",
        choices=("hard", "strict"),
        default="hard",
        help="hard: Ganeti's hard checks only, as its global N+1 (default); strict: also the "
        "vCPU ratio and exclusion tags",
    )
    parser.add_argument(
        "--offline-targets",
        dest="offline_targets",
        action="store_true",
        help="let offline nodes take instances, as htools' check does (default: online only)",
    )
    parser.add_argument(
        "-G", "--group", action="append", metavar="GROUP", help="only this group (repeatable)"
    )
    parser.add_argument(
        "--compare", action="store_true", help="also run the real hcheck and show its counts"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="every node, with its plan step by step"
    )
    solver_options(parser)
    json_option(parser)
    parser.set_defaults(pool_prefix="pool:", no_greedy=False, print_commands=False)


def _node_line(v: NodeVerdict, width: int, verbose: bool) -> list[str]:
    from solvers.strategies.n1 import MIP

    how = v.method if v.method != MIP else f"mip, {v.status}"
    what = v.reason if v.reason is not None else f"{len(v.plan.steps) if v.plan else 0} step(s)"
    lines = [f"  {v.node:<{width}}  {_yes_no(v.evacuable):<8} {how:<20} {what}"]
    if verbose and v.plan is not None:
        lines += [f"      {s.action} {s.instance} -> {s.target}" for s in v.plan.steps]
    return lines


@dataclass(frozen=True)
class N1ProgramReport:
    source: str
    report: N1Report
    hcheck: dict[str, int] | None  # group -> nodes hcheck cannot evacuate
    verbose: bool
    greedy: frozenset[str] | None = None  # nodes htools' greedy walk cannot evacuate

    def greedy_misses(self, g) -> list[NodeVerdict]:  # noqa: ANN001
        """Nodes of group `g` the greedy walk gives up on although an exact plan exists."""
        if self.greedy is None:
            return []
        return [v for v in g.nodes if v.node in self.greedy and v.evacuable is True]

    def text(self) -> str:
        r = self.report
        targets = "offline nodes serve as targets" if r.offline_targets else "online targets only"
        lines = [
            f"Cluster {self.source}: N+1 redundant: {_yes_no(r.redundant)} "
            f"(exact, {r.mode} checks, {targets}, {r.seconds:.2f} s)"
        ]
        for g in r.groups:
            bad = [v for v in g.nodes if v.evacuable is not True]
            head = f"Group {g.name}: redundant: {_yes_no(g.redundant)}"
            if bad:
                head += f" ({len(bad)} of {len(g.nodes)} nodes cannot be evacuated or undecided)"
            if self.hcheck is not None:
                greedy = self.hcheck.get(g.name)
                head += f"; hcheck: {'-' if greedy is None else greedy} not evacuable"
                if greedy is not None and greedy > len(bad):
                    head += f" (exact plans exist for {greedy - len(bad)} of them)"
            lines.append(head)
            missed = self.greedy_misses(g)
            if missed:
                lines.append(
                    "  greedy (GlobalN1) says not evacuable, exact plan exists: "
                    + ", ".join(v.node for v in missed)
                )
            if g.offline_hosts:
                lines.append(
                    f"  offline nodes still hosting instances: {', '.join(g.offline_hosts)}"
                )
            width = max(len(v.node) for v in g.nodes)
            shown = g.nodes if self.verbose else tuple(bad)
            for v in shown:
                lines += _node_line(v, width, self.verbose)
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        r = self.report
        out: dict[str, Any] = {
            "redundant": r.redundant,
            "mode": r.mode,
            "offline_targets": r.offline_targets,
            "seconds": r.seconds,
            "groups": [
                {
                    "name": g.name,
                    "redundant": g.redundant,
                    "healthy": g.healthy,
                    "offline_hosts": list(g.offline_hosts),
                    "nodes": [self._node_json(v) for v in g.nodes],
                    **(
                        {"greedy_misses": [v.node for v in self.greedy_misses(g)]}
                        if self.greedy is not None
                        else {}
                    ),
                }
                for g in r.groups
            ],
        }
        if self.hcheck is not None:
            out["hcheck"] = self.hcheck
        return out

    def _node_json(self, v: NodeVerdict) -> dict[str, Any]:
        out = v.to_json()
        if self.greedy is not None:
            out["greedy_evacuable"] = v.node not in self.greedy
        return out


def greedy_failures(state: ClusterState) -> frozenset[str]:
    """Nodes htools' greedy GlobalN1 walk cannot evacuate, group by group as hcheck runs it
    (model/htools port; docs/groups.md)."""
    from model.groups_greedy import failing_nodes

    groups = {st.group_uuid for st in state.nodes.values()}
    return frozenset(n for g in groups for n in failing_nodes(state, g))


def hcheck_counts(where: ClusterSource | str) -> dict[str, int]:
    """The real hcheck's 'Nodes not directly evacuateable' per group (its global N+1), on
    the same snapshot or running cluster."""
    source = as_source(where)
    if source.kind == "text" and source.where.lower().endswith(".json"):
        raise InputError("--compare needs an htools text snapshot (hcheck reads no requests)")
    tool = shutil.which(HCHECK)
    if tool is None:
        raise InputError("--compare needs the real hcheck (scripts/get-ganeti-reference)")
    reads = {
        "text": ["-t", source.where],
        "rapi": ["-m", source.where],
        "luxi": [f"-L{source.where}"],
    }[source.kind]
    proc = subprocess.run(
        [tool, *reads, "--no-simulation"], capture_output=True, text=True, timeout=600
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise InputError(f"hcheck failed on {source.label} (exit {proc.returncode}): {last}")
    return {m.group(1): int(m.group(2)) for m in _HCHECK_GROUP.finditer(proc.stdout)}


def answer(where: ClusterSource | str, options: GroupOptions) -> N1ProgramReport:
    from solvers.strategies.n1 import check_cluster

    cluster = read(where, options)
    unique_instance_names(cluster, "exalloc n1")
    known_groups(cluster, options.groups)
    state = node_states(cluster)
    report = check_cluster(
        state,
        groups=list(options.groups) or None,
        mode=options.mode,
        offline_targets=options.offline_targets,
        options=options.solver,
    )
    counts = None
    greedy = None
    if options.compare:
        counts = hcheck_counts(where)
        greedy = greedy_failures(state)
    label = as_source(where).label
    return N1ProgramReport(label, report, counts, options.verbose, greedy)


def run(args: Any) -> N1ProgramReport:
    source = source_of(args)
    with about(source.label):
        return answer(source, GroupOptions.of(args))
