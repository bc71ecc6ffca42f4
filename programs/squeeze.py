"""`exalloc squeeze`: hsqueeze's question (which nodes to power down, or which standby nodes to
power up) answered exactly, in hsqueeze's output forms (docs/squeeze.md).

Read the snapshot, ask the strategy (`solvers.strategies.squeeze.plan`: mode, solve, order,
check), then print the plan as hsqueeze does and write the `-C` script and `-S` snapshots; with
`-X`, run the plan's jobs on the cluster read through LUXI (model/backends/jobs.py).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from model.backends.text import dump_text
from model.cluster import Cluster
from model.errors import about
from model.files import write_files
from model.squeeze import (
    SH_TEMPLATE,
    Migration,
    SqueezeRequest,
    plan_commands,
    plan_job_sets,
    squeezed_cluster,
)
from model.state import node_states
from programs.execute import Executed, check_luxi, run_plan
from programs.options import (
    cluster_source,
    exec_option,
    json_option,
    print_commands_option,
    save_option,
    solver_options,
    static_kvm_option,
)
from programs.parser import standard_options

if TYPE_CHECKING:  # the strategy imports Pyomo: loaded by `run`, not by the parser
    from solvers.strategies.squeeze import SqueezePlan


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cluster_source(parser, "cluster snapshot in the htools text format")
    parser.add_argument(
        "--minimal-resources",
        dest="minimal_resources",
        type=float,
        default=2.0,
        metavar="F",
        help="every node must host F x std spec, else expand (default 2.0)",
    )
    parser.add_argument(
        "--target-resources",
        dest="target_resources",
        type=float,
        default=2.0,
        metavar="F",
        help="after shrinking every node hosts F x std spec (default 2.0)",
    )
    parser.add_argument(
        "--move",
        choices=("ext", "drbd", "all"),
        default="ext",
        help="which instances may move (default ext: externally mirrored only)",
    )
    print_commands_option(parser, "print the commands (or write a script to FILE)", to_file=True)
    save_option(parser, "write FILE.original and FILE.squeezed in the text format")
    parser.add_argument(
        "-v",
        "--verbose",
        dest="verbose",
        action="count",
        default=1,
        help="more output (-v shows the candidates)",
    )
    parser.add_argument(
        "--no-headers", dest="no_headers", action="store_true", help="omit the header line"
    )
    exec_option(
        parser,
        "run the plan's jobs on the cluster read with -L, job set by job set, as hsqueeze -X "
        "(docs/squeeze.md)",
    )
    standard_options(parser, "hsqueeze", ())
    static_kvm_option(
        parser,
        "node memory assumed on kvm nodes (default 4096, as hsqueeze); text snapshots (-t)"
        " name no hypervisor, so it has no effect on them",
    )
    solver_options(parser)
    json_option(parser)


@dataclass(frozen=True)
class SqueezeReport:
    """What `exalloc squeeze` prints: the plan in hsqueeze's forms, plus the solver figures."""

    plan: SqueezePlan
    verbose: int = 1
    no_headers: bool = False
    commands: str | None = None  # the command script body (None without -C)
    commands_file: str | None = None

    def text(self) -> str:
        p = self.plan
        out: list[str] = []
        if self.verbose > 1:
            out.append("Offline candidates: " + ",".join(p.offline_candidates))
            out.append("Online candidates: " + ",".join(p.online_candidates))
        header = {"offline": "'Nodes to offline'", "online": "'Nodes to online'"}.get(
            p.mode, "'No action'"
        )
        if not self.no_headers:
            out.append(header)
        out += list(p.nodes)
        if self.verbose > 1 and p.not_enough_capacity:
            out.append("Onlining all nodes will not yield enough capacity")
        if self.commands is not None:
            if self.commands_file is None:
                out += ["", "Commands to run:"]
                out += ["  " + line for line in self.commands.splitlines() if line != "  check"]
            else:
                out.append(f"The commands have been written to file '{self.commands_file}'")
        return "\n".join(out) + "\n"

    @property
    def notes(self) -> tuple[str, ...]:
        """A line on stderr when the answer is not proven (hsqueeze's output has no place for
        it): the status, why, and each stage's value beside its bound."""
        p = self.plan
        if p.status in ("optimal", "infeasible"):
            return ()
        stages = "; ".join(
            f"{name} {_figure(v)}, bound {_figure(b)}"
            for name, v, b in zip(p.stage_names, p.objective, p.bound, strict=False)
        )
        return (
            f"squeeze: {p.status}"
            + (f", {p.note}" if p.note else "")
            + (f"; {stages}" if stages else "")
            + "; allow more time with --time-limit",
        )

    def to_json(self) -> dict[str, Any]:
        p = self.plan
        return {
            "mode": p.mode,
            "nodes": list(p.nodes),
            "moves": [_move_json(m) for m in p.moves],
            "status": p.status,
            "objective": list(p.objective),
            "bound": list(p.bound),
            "gap": list(p.gap),
            "build_s": p.build_s,
            "solve_s": p.solve_s,
            "stages": list(p.stage_names),
            "method": p.method,
            "solver": p.solver,
            "jobsets": [[m.instance for m in js] for js in p.jobsets],
            "offline_candidates": list(p.offline_candidates),
            "online_candidates": list(p.online_candidates),
            "not_enough_capacity": p.not_enough_capacity,
            "checker": dict(p.checker),
            "note": p.note or None,
        }


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _move_json(m: Migration) -> dict[str, str]:
    out = {"instance": m.instance, "from": m.source, "to": m.target}
    if m.secondary is not None:
        out["secondary_from"] = m.old_secondary or ""
        out["secondary"] = m.secondary
    return out


def report_of(
    cluster: Cluster,
    result: SqueezePlan,
    *,
    verbose: int = 1,
    no_headers: bool = False,
    print_commands: str | None = None,
) -> SqueezeReport:
    """The report of a plan; `print_commands` is -C's value (None: no commands, "-": print
    them, else the file the script goes to)."""
    commands = None
    if print_commands is not None:
        commands = plan_commands(cluster, result.mode, result.nodes, result.jobsets)
    return SqueezeReport(
        result,
        verbose=verbose,
        no_headers=no_headers,
        commands=commands,
        commands_file=None if print_commands in (None, "-") else print_commands,
    )


def run(args: Any) -> SqueezeReport | Executed:
    """`exalloc squeeze`: load (-t, -m or -L), plan, then write the -S and -C files hsqueeze
    would write; with -X, print the plan, run its jobs, and only then write FILE.squeezed (the
    state the jobs reach)."""
    from programs.sources import cluster_of
    from solvers.strategies.squeeze import plan

    check_luxi(args)  # hsqueeze finds out after its plan; nothing is read or solved here
    cluster, source = cluster_of(args)
    if args.verbose != 0:  # loadExternalData's warning on inconsistent data, first
        from model.htools.loader import loading_warning

        sys.stderr.write(loading_warning(cluster))
    request = SqueezeRequest(args.minimal_resources, args.target_resources, args.move)
    state = node_states(cluster)
    with about(source.label):
        result = plan(state, request, args.solver_options)
    report = report_of(
        cluster,
        result,
        verbose=args.verbose,
        no_headers=args.no_headers,
        print_commands=args.print_commands,
    )
    # written only once the plan succeeded, all together (model.files): a failing plan or an
    # unwritable target leaves none of them behind
    before: dict[str, str] = {}
    if report.commands is not None and report.commands_file is not None:
        before[report.commands_file] = SH_TEMPLATE + report.commands
    after: dict[str, str] = {}
    if args.save:
        off = result.nodes if result.mode == "offline" else ()
        on = result.nodes if result.mode == "online" else ()
        before[args.save + ".original"] = dump_text(cluster)
        after[args.save + ".squeezed"] = dump_text(squeezed_cluster(state, off, on, result.moves))
    if not getattr(args, "exec_jobs", False):
        write_files({**before, **after})
        _say_saved(args.save, ("original", "squeezed"), result.mode)
        return report
    write_files(before)
    _say_saved(args.save, ("original",))
    what = {"offline": "condensing", "online": "expanding"}.get(result.mode, "squeezing")
    outcomes = run_plan(  # the plan first, as hsqueeze prints it before its jobs run
        source,
        plan_job_sets(cluster, result.mode, result.nodes, result.jobsets),
        command="squeeze",
        comment=f"{what} by {len(result.nodes)} nodes",
        plan_text=report.text(),
        json_out=args.json,
    )
    write_files(after)
    _say_saved(args.save, ("squeezed",), result.mode)
    return Executed(report, outcomes, printed=not args.json)


#: hsqueeze's words for FILE.squeezed, by the plan's mode (Hsqueeze.main's three branches)
SQUEEZED_SAID = {
    "online": "after hsqueeze expansion",
    "none": "after hsqueeze doing nothing",
}


def _say_saved(save: str | None, which: tuple[str, ...], mode: str = "offline") -> None:
    """htools' lines on stderr for the -S files written."""
    said = {
        "original": "before hsqueeze run",
        "squeezed": SQUEEZED_SAID.get(mode, "after hsqueeze run"),
    }
    for kind in which if save else ():
        print(
            f"The cluster state {said[kind]} has been written to file '{save}.{kind}'",
            file=sys.stderr,
        )
