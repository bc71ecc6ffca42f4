"""`exalloc balance`: hbal's question (which moves bring the group's score down), answered by
hbal's own search with `--greedy` (model/htools/hbal.py, hbal_program.py): its output, `-C`
commands and script, `-S` files and exit code byte for byte the real hbal 3.0.2's
(docs/balance.md).

With `-X` the moves run on the cluster read through LUXI, job set by job set, as hbal's own
`-X` (programs/execute.py, model/backends/jobs.py). Without `--greedy` the exact mode answers
(programs/balance_exact.py: the least score within K moves, proven, or the fewest moves); its
-S files and -X job sets are hbal's shapes for the exact steps, run by the same code.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from programs.output import ProgramOutput

if TYPE_CHECKING:  # the program's modules load when it runs, not when cli.py adds its options
    from collections.abc import Sequence

    from model.backends.jobs import JobSet
    from model.cluster import Cluster
    from model.htools.hbal_program import HbalOptions, HbalRun

#: Ganeti's job priorities as `--priority` names them (`parseSubmitPriority`)
PRIORITIES = ("low", "normal", "high")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """hbal 3.0.2's options (backends, -S, -C, -X shared with the other programs), exalloc's
    `--greedy` and `--json`."""
    from programs.hbal_options import hbal_loader_options, hbal_search_options
    from programs.options import (
        exec_option,
        greedy_option,
        htools_source_options,
        ignore_dynu_option,
        json_option,
        max_length_option,
        offline_option,
        print_commands_option,
        print_nodes_option,
        save_option,
        verbosity_options,
    )
    from programs.parser import standard_options
    from programs.space_options import htools_int

    htools_source_options(p)  # none, or more than one: hbal's own errors
    standard_options(p, "hbal", ())
    p.add_argument("arguments", nargs="*", help=argparse.SUPPRESS)  # hbal's own error
    print_nodes_option(
        p, text="print the node list before and after (-pFIELDS, +FIELDS adds to the defaults)"
    )
    p.add_argument(
        "--print-instances",
        dest="print_instances",
        action="store_true",
        help="print the instance map before and after",
    )
    print_commands_option(p, "print the commands (or write a script to FILE)", to_file=True)
    p.add_argument(
        "--restricted-migration",
        dest="restricted_migration",
        action="store_true",
        help="no moves that need a migration off a node that is not offline",
    )
    exec_option(p, "run the moves through LUXI (-L), job set by job set, as hbal -X")
    p.add_argument(
        "--first-job-group",
        dest="first_job_group",
        action="store_true",
        help="only the first job set",
    )
    p.add_argument("--reason", dest="reason", metavar="REASON", help="the reason for -X's jobs")
    p.add_argument("-G", "--group", dest="group", metavar="GROUP", help="the group to balance")
    max_length_option(p, "at most N moves", htools_int("max solution length"))
    verbosity_options(p)
    offline_option(p)
    hbal_search_options(p)
    hbal_loader_options(p)
    ignore_dynu_option(p)
    save_option(p, "write FILE.original (as read) and FILE.balanced (the group after balancing)")
    p.add_argument(
        "--priority",
        dest="priority",
        metavar="PRIO",
        help="the priority of -X's jobs: low, normal or high",
    )
    greedy_option(p, "hbal's own search, its output byte for byte (no model)")
    json_option(p)
    from programs.balance_exact import add_exact_arguments

    add_exact_arguments(p)
    from programs.balance_groups import add_arguments as add_across_arguments

    add_across_arguments(p)


def options_of(args: argparse.Namespace) -> HbalOptions:
    from model.htools.hbal import BalanceOptions
    from model.htools.hbal_program import HbalOptions
    from model.htools.nodelist import parse_fields

    search = BalanceOptions(
        disk_moves=args.disk_moves,
        instance_moves=args.instance_moves,
        restricted_migration=args.restricted_migration,
        ignore_soft_errors=args.ignore_soft_errors,
        evac_mode=args.evac_mode,
        min_gain=args.min_gain,
        min_gain_limit=args.min_gain_limit,
    )
    return HbalOptions(
        search=search,
        group=args.group,
        max_length=args.max_length,
        min_score=args.min_score,
        print_nodes=None if args.print_nodes is None else tuple(parse_fields(args.print_nodes)),
        print_instances=args.print_instances,
        print_commands=args.print_commands,
        first_job_group=args.first_job_group,
        save=args.save,
        verbose=args.verbose,
        offline=tuple(reversed(args.offline)),  # htools prepends each -O
        max_cpu=args.max_cpu,
        min_disk=args.min_disk,
        selected=tuple(args.select_instances),
        excluded=tuple(args.exclude_instances),
        exec_jobs=args.exec_jobs,
    )


class BalanceReport(ProgramOutput):
    """What `exalloc balance --greedy` prints: hbal's stdout, stderr and exit code."""


def _load(args: argparse.Namespace) -> tuple[Cluster, str]:
    """The cluster as `loadExternalData` reads it (a backend, or htools' error), then
    --ignore-dynu (or -U's loads); with the loader's warning."""
    from model.errors import InputError
    from programs.sources import htools_cluster

    cluster, _, warning = htools_cluster(args)
    if args.ignore_dynu:
        cluster = cluster.without_dynamic_util()
    elif args.dynu_file is not None:
        from model.htools.hbal_program import read_dynu, with_dynu

        try:
            with open(args.dynu_file, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror}", source=args.dynu_file) from None
        cluster = with_dynu(cluster, read_dynu(text, args.dynu_file))
    return cluster, warning


def run(args: argparse.Namespace) -> BalanceReport | Any:
    """`exalloc balance --greedy`: read, run hbal's main (model.htools.hbal_program.hbal), write its
    files, then -X's jobs."""
    from model.files import write_files
    from model.htools.hbal_program import hbal, with_exclusion_tags

    if args.priority is not None and args.priority not in PRIORITIES:  # parseSubmitPriority
        text = f"Error while parsing command line arguments:\nUnknown priority '{args.priority}'\n"
        return BalanceReport("", text, 1, {"error": f"Unknown priority '{args.priority}'"})
    if args.arguments:
        message = "This program doesn't take any arguments."
        return BalanceReport("", f"Error: {message}\n", 1, {"error": message})
    loaded, warning = _load(args)
    cluster = with_exclusion_tags(loaded, args.exclusion_tags or ())
    if args.across_groups:  # between the groups of each pool (programs/balance_groups.py)
        return _across(args, cluster)
    if not args.greedy:  # the exact mode (programs/balance_exact.py)
        from programs.balance_exact import run_exact

        exact = run_exact(args, cluster, loaded)
        write_files(exact.files)
        exact = replace(exact, stderr=warning + exact.stderr)
        if not args.exec_jobs or exact.exit_code or not exact.job_sets:
            return exact
        return _execute(args, exact.job_sets, exact)  # the exact steps, as hbal -X runs its own
    result = hbal(cluster, options_of(args), loaded)
    write_files(result.files)
    if result.merge_failed:  # mergeData's error comes before checkData's warning
        warning = ""
    report = BalanceReport(result.stdout, warning + result.stderr, result.exit_code, _json(result))
    if not args.exec_jobs or result.exit_code or result.final is None:
        return report
    if not result.final.placements:
        return report
    from model.htools.hbal_program import job_sets

    return _execute(args, job_sets(result), report)


def _across(args: argparse.Namespace, cluster: Cluster) -> Any:
    """--across-groups: the checked migrations; with -X run through LUXI as redistribute's."""
    from programs import groups as shared
    from programs.balance_groups import run_across
    from programs.execute import check_luxi
    from programs.sources import source_of

    if args.greedy:
        from model.errors import UsageError

        raise UsageError("--across-groups has no greedy counterpart (htools has none)")
    check_luxi(args)
    source = source_of(args)
    report = run_across(args, cluster, source.label)
    if not args.exec_jobs or not report.relocations:
        return report
    return shared.execute(report, source, "balance --across-groups", args.json)


def _execute(args: argparse.Namespace, sets: Sequence[JobSet], report: ProgramOutput) -> Any:
    """-X: the plan's jobs (hbal's, or the exact mode's steps in the same shapes) through
    LUXI, job set by job set; refused as hbal refuses it on any other backend (after its
    output, exit 1)."""
    from programs.execute import Executed, run_plan
    from programs.sources import source_of

    if args.luxi is None:
        message = "hbal: Execution of commands possible only on LUXI"
        return replace(report, stderr=report.stderr + f"Error: {message}\n", exit_code=1)
    outcomes = run_plan(
        source_of(args),
        sets,
        command="balance",
        comment="rebalancing via hbal",
        plan_text=report.text(),
        json_out=getattr(args, "json", False),
    )
    return Executed(report, outcomes, printed=not getattr(args, "json", False))


def _json(result: HbalRun) -> dict[str, Any]:
    if result.exit_code:
        lines = result.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else "", "exit_code": result.exit_code}
    initial, final = result.initial, result.final
    data: dict[str, Any] = {"status": "greedy"}
    if initial is not None:
        data["score_before"] = initial.score
    if final is not None:
        data["score_after"] = final.score
        data["steps"] = [
            {
                "instance": p.instance,
                "from": [p.old_primary, p.old_secondary],
                "to": [p.primary, p.secondary],
                "move": p.move.kind.value,
                "target": p.move.target,
                "score": p.score,
            }
            for p in final.placements
        ]
        data["jobsets"] = [[final.placements[k].instance for k in js] for js in result.job_sets]
    return data
