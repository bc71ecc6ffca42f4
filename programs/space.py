"""`exalloc space`: hspace's question (how many more instances of this size fit, and how much
can still be handed out) answered exactly, in hspace's output (docs/space.md).

With `--greedy` it is hspace 3.0.2 itself (model/htools/hspace.py, hspace_output.py): output,
`-S` files and exit code byte for byte. Without, the standard count proven and the tiered
ladder of exact counts (solvers/strategies/space.py), each answer judged by
`model.check.check_space` before it is printed, in hspace's layout with exalloc's numbers; the
proof (status, bound, gap, times) and why no more fit go to stderr as notes, and into `--json`.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from programs.output import ProgramOutput

if TYPE_CHECKING:  # the program's modules load when it runs, not when cli.py adds its options
    from model.cluster import Cluster
    from model.space import Spec

NO_ARGUMENTS = "This program doesn't take any arguments."


def add_arguments(p: argparse.ArgumentParser) -> None:
    """hspace 3.0.2's options, exalloc's `--greedy`, `--compare`, `--json` and solver
    options."""
    from programs.options import (
        greedy_option,
        htools_source_options,
        json_option,
        max_length_option,
        no_arguments_option,
        number_type,
        offline_option,
        print_nodes_option,
        save_option,
        solver_options,
        verbosity_options,
    )
    from programs.parser import standard_options
    from programs.space_options import (
        disk_template,
        htools_double,
        htools_int,
        max_cpu_ratio,
        spec_type,
        spindle_use,
        yes_no,
    )

    print_nodes_option(
        p, text="print the node list before and after each phase on stderr (-pFIELDS: these)"
    )
    htools_source_options(p)
    kvm = p._option_string_actions["--static-kvm-node-memory"]  # noqa: SLF001 - no argparse API
    kvm.type = htools_int("static node memory")
    p.add_argument(
        "--simulate",
        dest="simulate",
        action="append",
        metavar="SPEC",
        help="empty simulated groups instead of a cluster, one per SPEC "
        "(policy,count,disk,memory,cpus[,spindles[,exclusive_storage]]), e.g. p,4,8T,64g,16",
    )
    p.add_argument(
        "--disk-template", dest="disk_template", type=disk_template, metavar="TEMPLATE",
        help="the new instances' disk template (default: the cluster's first enabled one)",
    )  # fmt: skip
    p.add_argument(
        "--spindle-use",
        dest="spindle_use",
        type=spindle_use,
        metavar="SPINDLES",
        help="spindles a new instance uses (default: the cluster's std spec)",
    )
    verbosity_options(p)
    p.add_argument(
        "--independent-groups",
        dest="independent_groups",
        action="store_true",
        help="a group that is not N+1 redundant takes nothing; the others go on",
    )
    p.add_argument(
        "--accept-existing-errors",
        dest="accept_existing",
        action="store_true",
        help="allocate even where nodes fail N+1 already",
    )
    offline_option(p)
    p.add_argument(
        "--no-capacity-checks",
        dest="capacity_checks",
        action="store_false",
        help="no global N+1 check of the placements",
    )
    p.add_argument(
        "--machine-readable",
        dest="machine_readable",
        nargs="?",
        const=True,
        default=False,
        type=yes_no,
        metavar="CHOICE",
        help="HTS_* lines for the shell (=yes or =no)",
    )
    p.add_argument(
        "--max-cpu", dest="max_cpu", type=max_cpu_ratio, metavar="RATIO", help="vCPU ratio of nodes"
    )
    max_length_option(
        p, "place at most N instances in each phase", htools_int("max solution length")
    )
    p.add_argument(
        "--min-disk",
        dest="min_disk",
        type=htools_double("min free disk space", finite=True),
        default=0.0,
        metavar="RATIO",
        help="disk each node keeps free (0..1)",
    )
    p.add_argument(
        "--standard-alloc",
        dest="standard_alloc",
        type=spec_type("standard"),
        metavar="DISK,RAM,CPU[,SPINDLES]",
        help="the standard spec (default: the cluster's std spec)",
    )
    p.add_argument(
        "--tiered-alloc",
        dest="tiered_alloc",
        type=spec_type("tiered"),
        metavar="DISK,RAM,CPU[,SPINDLES]",
        help="the tiered phase's first spec (default: each policy max spec)",
    )
    save_option(p, "write the cluster after each phase to FILE.tiered and FILE.standard")
    p.add_argument(
        "--move-existing",
        dest="move_existing",
        action="store_true",
        help="standard phase: the most instances after moving existing ones first with hbal's "
        "moves (ganeti issue 597); the moves in a note and in --json",
    )
    p.add_argument(
        "--max-moves",
        dest="max_moves",
        type=number_type(0, strict=False, integer=True),
        metavar="N",
        help="with --move-existing: at most N moves (default 1; implies --move-existing)",
    )
    standard_options(p, "hspace", ())
    no_arguments_option(p)  # hspace's own error
    greedy_option(p, "hspace's own algorithm, its output byte for byte (no model)")
    p.add_argument(
        "--compare",
        action="store_true",
        help="run the real hspace on the same question beside (hspace's port when it is not "
        "installed): its counts in a note and in --json",
    )
    solver_options(p)
    json_option(p)


class SpaceReport(ProgramOutput):
    """What `exalloc space` prints."""


def _fail(message: str, warning: str = "", stdout: str = "") -> SpaceReport:
    return SpaceReport(stdout, f"{warning}Error: {message}\n", 1, json={"error": message.strip()})


def _load(args: argparse.Namespace) -> tuple[Cluster | None, str]:
    """ExtLoader.loadExternalData's choice of backend (one of rapi, luxi, file; a simulation
    before the file; then an IAllocator request); None with htools' error."""
    given = [args.master is not None, args.luxi is not None, args.text_data is not None]
    if sum(given) > 1:
        return None, "Only one of the rapi, luxi, and data files options should be given."
    if args.master is not None or args.luxi is not None:
        from programs.sources import cluster_of

        cluster, source = cluster_of(args)
        return cluster, source.label
    if args.simulate:
        from model.backends.simu import simulated_cluster

        return simulated_cluster(args.simulate[::-1]), "the simulated cluster"
    if args.text_data is not None:
        from model.backends.text import load_text

        kvm = args.static_kvm_node_memory
        return load_text(args.text_data, static_kvm_node_memory=kvm), args.text_data
    if args.ialloc_src is not None:
        from model.backends.iallocator import load_request
        from model.errors import InputError

        try:
            return load_request(args.ialloc_src).cluster, args.ialloc_src
        except InputError as e:
            if not args.greedy or not hasattr(e, "htools_message"):
                raise
            return None, e.htools_message  # as hspace says it (exitErr, exit 1)
    return None, "failed to load data, aborting: No backend selected! Exiting."


def run(args: argparse.Namespace) -> SpaceReport:
    """`exalloc space`: read, set the nodes' status, then hspace's two phases (`--greedy`) or
    the exact ones, printed as hspace prints them."""
    import time

    from model.errors import about
    from model.files import write_files
    from model.htools.hroller import offline_names
    from model.htools.loader import loading_warning
    from model.space import with_node_status
    from model.state import node_states

    began = time.perf_counter()  # --time-limit holds for the whole answer, the read included
    if args.arguments:
        return _fail(NO_ARGUMENTS)
    cluster, source = _load(args)
    if cluster is None:
        return _fail(source)
    # htools' -I merges the request twice (IAlloc.parseData, then ExtLoader): every instance
    # on its nodes twice (docs/htools-facts.md §5); hspace's port reads it so, the exact
    # answer reads the request as it is
    merged = cluster
    if args.greedy and args.ialloc_src is not None:
        from dataclasses import replace

        merged = replace(cluster, instances=cluster.instances * 2)
    warning = ""
    if args.verbose != 0:  # each merge says what it finds inconsistent (-q -q: -1 warns)
        merges = (cluster,) if merged is cluster else (cluster, merged)
        warning = "".join(loading_warning(c) for c in merges)
    names = [n.name for n in cluster.nodes]
    offline, wrong = offline_names(names, args.offline)
    if wrong:
        return _fail(f"wrong node name(s) set as offline: {', '.join(wrong)}\n", warning)
    templates = cluster.cluster_policy.disk_templates
    if not templates:
        return _fail("null list of disk templates received from cluster", warning)
    template = args.disk_template or templates[0]
    su = args.spindle_use
    if su is None:
        su = cluster.cluster_policy.std.spindle_use
    with about(source):
        state = with_node_status(node_states(merged), sorted(offline), args.max_cpu, args.min_disk)
        if args.greedy:
            if args.compare:
                from model.errors import InputError

                raise InputError("--compare sets the exact answer beside hspace's: not --greedy")
            if args.move_existing or args.max_moves is not None:
                from model.errors import InputError

                raise InputError("--move-existing asks exalloc's question: not --greedy")
            out = greedy(cluster, state, template, su, args)
        else:
            out = _exact(cluster, state, template, su, args, began)
            if args.compare and not out.exit_code:
                from programs.space_compare import compare

                compare(out, cluster, state, template, su, args, greedy)
    write_files(out.files)
    return SpaceReport(
        "".join(out.stdout),
        warning + "".join(out.stderr),
        out.exit_code,
        notes=out.notes,
        json=out.json,
    )


def _specs(cluster: Cluster, args: argparse.Namespace) -> tuple[list[Spec], Spec]:
    from model.space import standard_spec, tier_specs

    tspecs = [args.tiered_alloc] if args.tiered_alloc else list(tier_specs(cluster))
    ispec = args.standard_alloc or standard_spec(cluster)
    return tspecs, ispec


def _display(args: argparse.Namespace):  # noqa: ANN202
    from model.htools.hspace_output import Display

    return Display(
        args.machine_readable,
        args.verbose,
        args.print_nodes,
        args.save,
        merged_twice=args.greedy and args.ialloc_src is not None,
        first_node_index=1 if _simulated(args) else 0,
    )


def _simulated(args: argparse.Namespace) -> bool:
    """The cluster is --simulate's (loadExternalData prefers RAPI and LUXI to it, and it to
    a file or a request)."""
    return bool(args.simulate) and args.master is None and args.luxi is None


def greedy(cluster, state, template: str, su: int, args: argparse.Namespace):  # noqa: ANN001, ANN202
    """hspace itself."""
    from model.htools.hspace import Run, setup, standard_phase, tiered_phase
    from model.htools.hspace_output import hspace_text

    s = setup(
        state,
        cluster,
        template,
        su,
        capacity=args.capacity_checks,
        independent_groups=args.independent_groups,
        accept_existing=args.accept_existing,
        bad_groups=args.verbose > 3,  # htools evaluates them only to print them
    )
    limit = None if args.max_length == -1 else args.max_length
    tspecs, ispec = _specs(cluster, args)
    run = Run()
    out = hspace_text(
        cluster,
        state,
        s,
        tspecs[0] if tspecs else None,
        lambda: tiered_phase(s, tspecs, limit, run),
        ispec,
        lambda: standard_phase(s, ispec, limit, run),
        _display(args),
    )
    out.json = {"hspace": {"exit_code": out.exit_code}}
    return out


def _exact(cluster, state, template: str, su: int, args: argparse.Namespace, began: float):  # noqa: ANN001, ANN202
    """exalloc's answers (checked by `model.check.check_space` in the strategy) in hspace's
    layout; the proof in the notes and in --json. `--time-limit` is one deadline from
    `began` (the program's start) for both phases, shared out by the strategy
    (`solvers.strategies.space_phases.phases`)."""
    from model.errors import InputError
    from model.htools.hspace import setup
    from model.htools.hspace_output import exact_phase, hspace_text
    from model.space import SpaceOptions
    from model.state import node_states
    from solvers.strategies.space_phases import phases

    if args.max_length < -1:
        raise InputError(f"-l {args.max_length}: the limit is -1 (none) or at least 0")
    limit = None if args.max_length == -1 else args.max_length
    offline = tuple(
        n for n, st in state.nodes.items() if st.offline and not _loaded_offline(cluster, n)
    )
    options = SpaceOptions(
        disk_template=template,
        spindle_use=su,
        offline=offline,
        max_cpu=args.max_cpu,
        min_disk=args.min_disk,
        capacity_checks=args.capacity_checks,
        independent_groups=args.independent_groups,
        accept_existing_errors=args.accept_existing,
        limit=limit,
    )
    loaded = node_states(cluster)
    s = setup(
        state,
        cluster,
        template,
        su,
        capacity=args.capacity_checks,
        independent_groups=False,
        accept_existing=args.accept_existing,
        bad_groups=args.verbose > 3,
    )
    tspecs, ispec = _specs(cluster, args)
    for what, spec, given in (
        ("tiered", tspecs[0] if tspecs else None, "--tiered-alloc or the policy's max spec"),
        ("standard", ispec, "--standard-alloc or the cluster's std spec"),
    ):
        if spec is not None and spec.memory_mib <= 0:  # the counts divide by it
            raise InputError(
                f"the {what} spec's memory is {spec.memory_mib} MiB ({given}): a new "
                "instance must take memory to be counted (hspace 3.0.2 dies here: "
                "'divide by zero')"
            )
    run = phases(
        loaded, tspecs, ispec, options, args.solver_options, began=began,
        move_existing=args.move_existing, max_moves=args.max_moves,
    )  # fmt: skip
    results: dict[str, Any] = {}

    def tiered_phase():  # noqa: ANN202
        tiers = results["tiered"] = run.tiered()
        return exact_phase(state, tiers.stages, tiers.final)

    def standard_phase():  # noqa: ANN202
        result = run.standard()
        if args.move_existing or args.max_moves is not None:
            results["moves"], result = result, result.result
        results["standard"] = result
        return exact_phase(state, (result,), result.final)

    out = hspace_text(
        cluster, state, s, tspecs[0] if tspecs else None, tiered_phase, ispec, standard_phase,
        _display(args),
    )  # fmt: skip
    notes = []
    data: dict[str, Any] = {}
    if "standard" in results:
        r = results["standard"]
        data["standard"] = r.to_json()
        if (share := run.share("standard")) is not None:  # how --time-limit was spent
            data["standard"]["time_share"] = share.to_json()
        per_group = ""
        if len(r.by_group) > 1:  # the answer per node group (beyond hspace's one count)
            per_group = " (" + ", ".join(f"{g} {k}" for g, k in r.by_group.items()) + ")"
        notes.append(
            f"standard: {r.count} instances{per_group}, {r.status}, bound {r.bound}, "
            f"gap {_gap(r.gap)}, build {r.build_s:.2f} s, solve {r.solve_s:.2f} s; "
            f"{r.binding_text()}"
        )
    if "moves" in results:
        data["move_existing"] = results["moves"].to_json()
        notes.append(results["moves"].text())
    if "tiered" in results:
        t = results["tiered"]
        data["tiered"] = t.to_json()
        if (share := run.share("tiered")) is not None:
            data["tiered"]["time_share"] = share.to_json()
        stopped = f", stopped by {t.stopped}" if t.stopped else ""
        notes.append(f"tiered: {t.count} instances in {len(t.stages)} exact stages{stopped}")
    if out.exit_code:
        data["error"] = "".join(out.stderr).strip().splitlines()[-1]
    out.json = data
    out.notes = tuple(notes)
    return out


def _gap(gap: float | None) -> str:
    return "-" if gap is None else f"{gap:.4g}"


def _loaded_offline(cluster, name: str) -> bool:  # noqa: ANN001
    return cluster.node(name).offline
