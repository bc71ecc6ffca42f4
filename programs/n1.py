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
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from model.errors import InputError, about
from model.state import ClusterState, node_states, unique_instance_names
from programs.groups import GroupOptions, as_source, known_groups, read
from programs.options import (
    greedy_option,
    htools_source_options,
    ignore_dynu_option,
    json_option,
    max_length_option,
    no_arguments_option,
    offline_option,
    refuse_arguments,
    solver_options,
    verbosity_options,
)
from programs.parser import standard_options
from programs.sources import ClusterSource, source_of

if TYPE_CHECKING:  # the strategy imports Pyomo: loaded by `answer`, not by the parser
    from model.htools.hcheck import GroupStats, HcheckOptions, HcheckOutput
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
        "--greedy: hcheck 3.0.2 itself. See docs/n1.md."
    )
    htools_source_options(parser)
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
    verbosity_options(parser, "-v: every node, with its plan step by step (--greedy: hcheck's)")
    greedy_option(
        parser,
        "hcheck's own report, byte for byte: htools' greedy global N+1 and, when the "
        "cluster needs rebalancing, hbal's search (model/htools/hcheck.py)",
    )
    from programs.space_options import yes_no

    parser.add_argument(
        "--machine-readable",
        dest="machine_readable",
        nargs="?",
        const=True,
        default=False,
        type=yes_no,
        metavar="CHOICE",
        help="hcheck's HCHECK_* shell variables, =yes or =no (without --greedy: the exact "
        "verdicts)",
    )
    parser.add_argument(
        "--no-simulation",
        dest="no_simulation",
        action="store_true",
        help="--greedy: no rebalancing simulation (hcheck's option)",
    )
    parser.add_argument(
        "--no-capacity-checks",
        dest="capacity",
        action="store_false",
        help="--greedy: leave out the global N+1 check (hcheck's option)",
    )
    offline_option(parser)
    ignore_dynu_option(parser)
    _hbal_options(parser)
    standard_options(parser, "hcheck", ())
    no_arguments_option(parser)
    solver_options(parser)
    json_option(parser)
    parser.set_defaults(pool_prefix="pool:", no_greedy=False, print_commands=False)


def _hbal_options(parser: argparse.ArgumentParser) -> None:
    """hcheck's options for its rebalancing simulation (hbal's, `fromCLIOptions`)."""
    from programs.hbal_options import hbal_loader_options, hbal_search_options
    from programs.space_options import htools_int

    max_length_option(
        parser,
        "--greedy: at most N moves per group in the simulation (default: no limit)",
        htools_int("max solution length"),
    )
    hbal_search_options(parser, "--greedy: ")
    hbal_loader_options(parser, "--greedy: ")


#: hcheck's options read at load (`loadExternalData`, `setNodeStatus`), --greedy only
GREEDY_LOADER_OPTIONS = {
    "max_cpu": "--max-cpu",
    "min_disk": "--min-disk",
    "exclusion_tags": "--exclusion-tags",
    "select_instances": "--select-instances",
    "exclude_instances": "--exclude-instances",
    "dynu_file": "--dynu-file",
}


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


@dataclass(frozen=True)
class HcheckReport:
    """hcheck's output and exit code (`--json`: the counts per group, before and after)."""

    stdout: str
    stderr: str
    exit_code: int
    data: dict[str, Any]

    def text(self) -> str:
        return self.stdout

    def to_json(self) -> dict[str, Any]:
        return self.data


def _hcheck_options(
    args: Any, selected: Sequence[str] = (), excluded: Sequence[str] = ()
) -> HcheckOptions:
    from model.htools.hbal import BalanceOptions
    from model.htools.hcheck import HcheckOptions

    balance = BalanceOptions(
        disk_moves=args.disk_moves,
        instance_moves=args.instance_moves,
        ignore_soft_errors=args.ignore_soft_errors,
        evac_mode=args.evac_mode,
        min_gain=args.min_gain,
        min_gain_limit=args.min_gain_limit,
    )
    return HcheckOptions(
        selected=tuple(selected),
        excluded=tuple(excluded),
        verbose=args.verbose,
        machine_readable=args.machine_readable,
        no_simulation=args.no_simulation,
        capacity=args.capacity,
        balance=balance,
        max_rounds=args.max_length,
        min_score=args.min_score,
    )


def _stats_json(output: HcheckOutput) -> dict[str, Any]:
    def groups(stats: Sequence[GroupStats]) -> list[dict[str, Any]]:
        return [{"name": g.name, "score": g.score, "counts": list(g.counts)} for g in stats]

    return {
        "needs_rebalance": output.needs_rebalance,
        "initial": groups(output.initial),
        "final": groups(output.final),
        "exit_code": output.exit_code,
    }


def greedy_report(args: Any) -> HcheckReport:
    """`exalloc n1 --greedy`: hcheck 3.0.2 (model/htools/hcheck.py), its loader's warning
    first."""
    from model.backends.text import show_list
    from model.htools.hbal_program import lookup_names, with_exclusion_tags
    from model.htools.hcheck import hcheck
    from model.htools.hinfo import set_node_status, wrong_offline_names
    from model.space import with_node_status
    from programs.balance import _load

    try:
        loaded, warning = _load(args)  # the backend, then --ignore-dynu or -U's loads
    except InputError as e:  # a request htools refuses, in hcheck's words (exitErr)
        if not hasattr(e, "htools_message"):
            raise
        return HcheckReport("", f"Error: {e.htools_message}\n", 1, {"error": str(e)})
    if args.ialloc_src is not None:  # htools' -I merges the request twice
        from model.htools.loader import merged_twice, request_warnings

        warning = request_warnings(loaded) if args.verbose != 0 else ""
        loaded = merged_twice(loaded)
    known = [i.name for i in loaded.instances]
    selected, wrong_sel = lookup_names(known, args.select_instances)
    excluded, wrong_ex = lookup_names(known, args.exclude_instances)
    if wrong_sel or wrong_ex:  # mergeData's error, before checkData's warning
        wrong = f"Unknown instance(s): {show_list([*wrong_sel, *wrong_ex])}"
        text = f"Error: failed to load data, aborting: {wrong}\n"
        return HcheckReport("", text, 1, {"error": wrong})
    cluster = with_exclusion_tags(loaded, args.exclusion_tags or ())
    wrong = wrong_offline_names(cluster, args.offline)
    if wrong is not None:  # after the loader's warning, as hcheck prints it
        return HcheckReport("", f"{warning}Error: {wrong}\n\n", 1, {"error": wrong})
    state = node_states(set_node_status(cluster, args.offline))
    state = with_node_status(state, (), args.max_cpu, args.min_disk)
    output = hcheck(state, _hcheck_options(args, selected, excluded))
    return HcheckReport(output.stdout, warning, output.exit_code, _stats_json(output))


def exact_keys(report: N1Report, state: ClusterState, args: Any) -> HcheckReport:
    """`--machine-readable` without --greedy: hcheck's keys with the exact verdicts (the
    nodes no plan evacuates for GN1_FAIL), no rebalancing simulation (the after phase is
    the initial one, as hcheck's `--no-simulation --machine-readable`)."""
    from model.htools.hcheck import hcheck

    failing = {
        state.cluster.group(g.name).uuid: sum(1 for v in g.nodes if v.evacuable is not True)
        for g in report.groups
    }
    options = replace(_hcheck_options(args), no_simulation=True, capacity=True)
    output = hcheck(state, options, gn1_failures=failing)
    return HcheckReport(output.stdout, "", output.exit_code, _stats_json(output))


def run(args: Any) -> N1ProgramReport | HcheckReport:
    refuse_arguments(args)
    if args.greedy:
        return greedy_report(args)
    given = [flag for dest, flag in GREEDY_LOADER_OPTIONS.items() if getattr(args, dest)]
    if given:
        raise InputError(f"{', '.join(given)}: hcheck's options, read with --greedy only")
    if args.text_data is None and args.master is None and args.luxi is None:
        from programs.sources import htools_cluster

        if args.ialloc_src is not None:
            raise InputError("-I (an IAllocator request's cluster) is read by --greedy; use -t")
        htools_cluster(args)  # htools' error: no backend
    source = source_of(args)
    options = replace(GroupOptions.of(args), verbose=args.verbose > 1)
    with about(source.label):
        report = answer(source, options)
    if args.machine_readable:
        with about(source.label):
            state = node_states(read(source, options))
            return exact_keys(report.report, state, args)
    return report
