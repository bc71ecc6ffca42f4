"""What the super-cluster programs share (`exalloc n1`, `redistribute`, `compress`, `evacuate`;
docs/groups.md): their typed options, reading the cluster, the independent checks every printed
plan passes, and the lines and JSON of plans and group health."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from model.backends import load_cluster
from model.cluster import Cluster
from model.errors import CheckFailedError, InputError, UsageError
from model.groups import (
    Relocation,
    Storage,
    check_relocations,
    crosses_groups,
    format_commands,
    job_commands,
    jobsets,
    move_kind,
    plan_job_sets,
    storage_of,
)
from model.state import ClusterState, node_states, unique_instance_names
from programs.execute import Executed, run_plan
from programs.options import (
    exec_option,
    group_cluster_source,
    json_option,
    print_commands_option,
    solver_options,
)
from programs.sources import ClusterSource
from solvers.options import DEFAULT_OPTIONS, SolverOptions

if TYPE_CHECKING:  # the strategies import Pyomo: loaded when a plan is checked, not by the parser
    from solvers.strategies import groups as strategy
    from solvers.strategies.relocation import Outcome


def add_super_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """What redistribute, compress and evacuate share (docs/groups.md)."""
    group_cluster_source(parser)
    print_commands_option(
        parser, "print the Ganeti commands of the plan, in jobsets, as hbal -C", to_file=False
    )
    parser.add_argument(
        "--n1",
        choices=("hard", "strict"),
        default="hard",
        help="N+1 checks: hard (Ganeti's, default) or strict (also vCPU ratio, exclusion tags)",
    )
    parser.add_argument(
        "--offline-targets",
        dest="offline_targets",
        action="store_true",
        help="let offline nodes take instances in the N+1 check, as htools does",
    )
    parser.add_argument(
        "--pool-prefix",
        dest="pool_prefix",
        default="pool:",
        metavar="PREFIX",
        help="tag prefix naming storage pools on nodes, groups and instances (default pool:)",
    )
    parser.add_argument(
        "--no-greedy",
        dest="no_greedy",
        action="store_true",
        help="skip the greedy baseline (the design's algorithm on htools' allocation)",
    )
    parser.set_defaults(group=None, compare=False, verbose=False)  # compress adds them
    solver_options(parser)
    json_option(parser)


def add_exec_argument(parser: argparse.ArgumentParser) -> None:
    """redistribute's and evacuate's -X."""
    exec_option(
        parser,
        "run the plan's jobs on the cluster read with -L, jobset by jobset, as the -C "
        "commands (docs/groups.md)",
    )


@dataclass(frozen=True)
class GroupOptions:
    """The command line of the super-cluster programs, typed (their `add_arguments` set every
    field on each of their commands; `exalloc batch` builds it directly)."""

    solver: SolverOptions = DEFAULT_OPTIONS
    mode: str = "hard"  # --n1: Ganeti's hard checks, or strict (also vCPU ratio, exclusion tags)
    offline_targets: bool = False  # offline nodes take instances in the N+1 check (htools)
    pool_prefix: str = "pool:"
    greedy: bool = True  # run the greedy baseline beside (not --no-greedy)
    compare: bool = False  # also run the real tool (hcheck, hail's change-group)
    print_commands: bool = False
    verbose: bool = False
    groups: tuple[str, ...] = ()  # -G: only these groups (n1, compress)
    static_kvm_node_memory: int = 4096  # a live cluster's kvm nodes (htools' option)

    @classmethod
    def of(cls, args: Any) -> GroupOptions:
        return cls(
            solver=args.solver_options,
            mode=args.n1,
            offline_targets=args.offline_targets,
            pool_prefix=args.pool_prefix or "pool:",
            greedy=not args.no_greedy,
            compare=args.compare,
            print_commands=args.print_commands,
            verbose=args.verbose,
            groups=tuple(args.group or ()),
            static_kvm_node_memory=args.static_kvm_node_memory,
        )

    def strategy_kwargs(self) -> dict[str, Any]:
        """What every solvers.strategies.groups entry point takes."""
        return {"mode": self.mode, "offline_targets": self.offline_targets, "options": self.solver}

    def exact_kwargs(self) -> dict[str, Any]:
        """`strategy_kwargs` for the exact answer: what is left of the limit, less the greedy
        baseline's share (GREEDY_SHARE of the limit, when it runs) and the output's reserve."""
        solver = self.solver
        reserve = OUTPUT_RESERVE_S
        if solver.deadline_at is not None and solver.started_at is not None:
            share = CHECK_SHARE + (GREEDY_SHARE if self.greedy else 0.0)
            reserve += share * (solver.deadline_at - solver.started_at)
        return {**self.strategy_kwargs(), "options": solver.left(reserve)}

    def greedy_deadline(self) -> float | None:
        """When the greedy baseline and its judging stop (perf_counter; None: no limit)."""
        end = self.solver.deadline_at
        return None if end is None else end - OUTPUT_RESERVE_S


class Stages:
    """Seconds per stage of a program's answer, for --json's `timing`: each `stage(name)`
    records the time since the previous one."""

    def __init__(self) -> None:
        import time

        self._clock = time.perf_counter
        self._last = self._clock()
        self.seconds: dict[str, float] = {}

    def stage(self, name: str) -> None:
        now = self._clock()
        self.seconds[name] = round(now - self._last, 4)
        self._last = now


#: Under --time-limit the greedy baseline (htools' global N+1 group by group for each
#: instance it removes: minutes on 500 nodes) and its judging by the exact N+1 check get
#: GREEDY_SHARE of the limit after the exact answer, the independent check of the exact plan
#: (`verify`: 0.8-4.7 s of evacuate's 10 / 30 s on bench_groups' 500 nodes, load 6)
#: CHECK_SHARE, the output OUTPUT_RESERVE_S; the exact answer has the rest (issue 40, item 4).
GREEDY_SHARE = 0.2
CHECK_SHARE = 0.15
OUTPUT_RESERVE_S = 0.5


def refuse_cpsat(args: Any, command: str) -> None:
    """The relocation models hold N+1 reserves and averages as continuous variables
    (formulations/relocation.py), which CP-SAT cannot take: the option is refused before
    anything is read (issue 40, item 3)."""
    if args.solver_options.solver == "cpsat":
        raise UsageError(
            f"--solver cpsat cannot solve {command}'s model (its N+1 reserves are continuous "
            "variables): use --solver highs, the default"
        )


def as_source(where: ClusterSource | str) -> ClusterSource:
    """A file path (a text snapshot or an IAllocator request, as `exalloc batch` passes
    them) or the source the command line names."""
    return where if isinstance(where, ClusterSource) else ClusterSource("text", where)


def read(where: ClusterSource | str, options: GroupOptions) -> Cluster:
    """The cluster: a file's (text or request), or a running one's through RAPI or LUXI."""
    source = as_source(where)
    if source.kind == "text":
        return load_cluster(source.where)
    return source.load(static_kvm_node_memory=options.static_kvm_node_memory)


def load(
    where: ClusterSource | str, options: GroupOptions, what: str
) -> tuple[ClusterState, Storage]:
    cluster = read(where, options)
    unique_instance_names(cluster, what)
    known_groups(cluster, options.groups)
    state = node_states(cluster)
    return state, storage_of(state, options.pool_prefix)


def known_groups(cluster: Cluster, names: Sequence[str]) -> None:
    """-G names groups of the cluster (by name or uuid), or the user hears which do not."""
    unknown = [g for g in names if g not in cluster.group_index]
    if unknown:
        have = ", ".join(sorted(g.name for g in cluster.groups))
        raise InputError(f"-G/--group: no such group: {', '.join(unknown)} (the groups: {have})")


def group_name(state: ClusterState, uuid: str) -> str:
    return state.cluster.group(uuid).name


def verify(state: ClusterState, storage: Storage, outcome: Outcome | None, mode: str) -> None:
    """The independent checks every printed plan passed: each relocation replayed with the
    strict adds, then every node that must stay evacuable has its evacuation plan replayed on
    the cluster after them."""
    from solvers.strategies.relocation import replay_verdicts

    if outcome is None or outcome.plan is None:
        return
    after, broken = check_relocations(state, storage, outcome.plan.relocations)
    if broken:
        raise CheckFailedError(
            "plan fails the independent check: " + "; ".join(map(str, broken[:3]))
        )
    bad = replay_verdicts(after, outcome.plan.verdicts, mode)
    if bad:
        raise CheckFailedError("a node loses its evacuation plan: " + "; ".join(bad[:3]))


def relocation_json(state: ClusterState, r: Relocation) -> dict[str, Any]:
    return {
        "instance": r.instance,
        "from": [n for n in (r.old_primary, r.old_secondary) if n],
        "to": [n for n in (r.primary, r.secondary) if n],
        "from_group": group_name(state, state.nodes[r.old_primary].group_uuid),
        "to_group": group_name(state, state.nodes[r.primary].group_uuid),
        "kind": move_kind(state.demands[r.instance].disk_template),
        "commands": [f"gnt-instance {c}" for c in job_commands(state, r)],
    }


def relocation_lines(
    state: ClusterState, relocs: tuple[Relocation, ...] | list[Relocation]
) -> list[str]:
    if not relocs:
        return []
    width = max(len(r.instance) for r in relocs)
    out = []
    for r in relocs:
        src = ":".join(n for n in (r.old_primary, r.old_secondary) if n)
        dst = ":".join(n for n in (r.primary, r.secondary) if n)
        sg = group_name(state, state.nodes[r.old_primary].group_uuid)
        dg = group_name(state, state.nodes[r.primary].group_uuid)
        where = f"{sg} {src} -> {dg} {dst}" if crosses_groups(state, r) else f"{src} -> {dst}"
        kind = move_kind(state.demands[r.instance].disk_template)
        out.append(f"  {r.instance:<{width}}  {where}  ({kind})")
    return out


def outcome_json(outcome: Outcome | None) -> dict[str, Any]:
    return {} if outcome is None else outcome.to_json()


def _fmt_number(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def outcome_line(outcome: Outcome) -> str:
    timing = (
        f"{outcome.rounds} round(s), {outcome.scenarios} failure packing(s), "
        f"{outcome.cuts} cut(s); build {outcome.build_s:.2f} s, solve {outcome.solve_s:.2f} s, "
        f"N+1 checks {outcome.check_s:.2f} s"
    )
    if outcome.status == "infeasible" or not outcome.objective:
        return f"{outcome.status}; {timing}"
    objective = ", ".join(
        f"{n} {_fmt_number(v)}" for n, v in zip(outcome.stages, outcome.objective, strict=False)
    )
    bound = ", ".join(_fmt_number(b) for b in outcome.bound)
    gaps = ", ".join(_fmt_number(g) for g in outcome.gap)
    return f"{outcome.status} ({objective}; bound {bound}; gap {gaps}); {timing}"


def health_lines(state: ClusterState, h: strategy.Health) -> list[str]:
    out = []
    for g in h.groups.values():
        verdict = {True: "healthy", False: "unhealthy", None: "undecided"}[g.healthy]
        details = []
        if g.verdict.offline_hosts:
            details.append("offline nodes hosting instances: " + ", ".join(g.verdict.offline_hosts))
        if g.failing:
            details.append("not evacuable: " + ", ".join(g.failing))
        peers = ", ".join(group_name(state, p) for p in g.peers) or "none (alone)"
        extra = f" ({'; '.join(details)})" if details else ""
        out.append(f"  group {g.name}: {verdict}{extra}; peers: {peers}")
    return out


def health_json(state: ClusterState, h: strategy.Health) -> list[dict[str, Any]]:
    return [
        {
            "name": g.name,
            "healthy": g.healthy,
            "redundant": g.verdict.redundant,
            "offline_hosts": list(g.verdict.offline_hosts),
            "not_evacuable": list(g.failing),
            "peers": [group_name(state, p) for p in g.peers],
        }
        for g in h.groups.values()
    ]


def commands_text(state: ClusterState, relocs: tuple[Relocation, ...]) -> str:
    return format_commands(state, jobsets(state, relocs))


def judged(problems: list[str]) -> str:
    if not problems:
        return "every group healthy, every check passed"
    more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
    return problems[0] + more


def greedy_json(state: ClusterState, g: Any) -> dict[str, Any]:
    return {
        "moves": g.moves,
        "relocations": [relocation_json(state, x) for x in g.relocations],
        "groups": {group_name(state, k): v for k, v in g.groups.items()},
        "failed": [{"instance": i, "reason": why} for i, why in g.failed],
    }


def execute(report: Any, source: ClusterSource, command: str, json_out: bool) -> Executed:
    """-X: a checked plan's relocations run through LUXI, jobset by jobset (as its -C prints
    them)."""
    state = report.state
    sets = plan_job_sets(state, jobsets(state, report.relocations))
    outcomes = run_plan(
        source,
        sets,
        command=command,
        comment=f"{command}: {len(report.relocations)} relocations",
        plan_text=report.text(),
        json_out=json_out,
    )
    return Executed(report, outcomes, printed=not json_out)
