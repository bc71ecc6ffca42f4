"""`exalloc redistribute`: the fewest relocations into healthy peer groups that make every group
healthy again, proven (docs/groups.md). Read the cluster, ask the strategy
(solvers/strategies/groups.py), have the independent checks judge the plan, run the greedy
baseline (the design's algorithm on htools' allocation) beside it, print."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from model.errors import about
from model.groups import Relocation, group_nodes
from model.state import ClusterState
from programs import groups as shared
from programs.execute import Executed, check_luxi
from programs.groups import GroupOptions
from programs.sources import ClusterSource, source_of

if TYPE_CHECKING:  # the strategy imports Pyomo: loaded by `answer`, not by the parser
    from solvers.strategies import groups as strategy


@dataclass(frozen=True)
class RedistributeReport:
    source: str
    state: ClusterState
    result: strategy.Redistribution
    greedy: Any  # model.groups_greedy.GreedyResult or None
    print_commands: bool
    greedy_problems: list[str] = field(default_factory=list)  # its result by exact checks
    timing: dict[str, float] = field(default_factory=dict)  # seconds per stage (--json)

    @property
    def relocations(self) -> tuple[Relocation, ...]:
        from solvers.strategies import groups as strategy

        return strategy.relocations_of(self.result.outcome)

    def text(self) -> str:
        r = self.result
        lines = [f"Cluster {self.source}: {len(r.health.groups)} groups, exact N+1 per node"]
        lines += shared.health_lines(self.state, r.health)
        if r.outcome is None:
            lines.append(f"Redistribution: {r.reason}")
        else:
            o = r.outcome
            if o.status == "infeasible":
                lines.append(f"Redistribution: no plan exists (proven): {o.reason}")
            else:
                moves = len(self.relocations)
                lines.append(f"Redistribution: {moves} relocation(s), {shared.outcome_line(o)}")
                lines += shared.relocation_lines(self.state, self.relocations)
        if self.greedy is not None:
            g = self.greedy
            done = (
                ", ".join(f"{shared.group_name(self.state, k)} {v}" for k, v in g.groups.items())
                or "nothing to do"
            )
            stopped = f"; stopped: {g.stopped}" if g.stopped else ""
            lines.append(
                f"Greedy (the design's algorithm, htools' allocation): {g.moves} "
                f"relocation(s); {done}{stopped}"
            )
            lines.append("  judged by exact checks: " + shared.judged(self.greedy_problems))
        if self.print_commands and self.relocations:
            lines.append(
                "Commands:" + shared.commands_text(self.state, self.relocations).rstrip("\n")
            )
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        r = self.result
        out: dict[str, Any] = {
            "groups": shared.health_json(self.state, r.health),
            "unhealthy": [shared.group_name(self.state, g) for g in r.unhealthy],
            "healthy_after": r.outcome is not None and r.outcome.plan is not None,
            **shared.outcome_json(r.outcome),
            "moves": len(self.relocations),
            "relocations": [shared.relocation_json(self.state, x) for x in self.relocations],
        }
        if r.outcome is None:
            out["status"] = (
                "infeasible"
                if r.reason and r.reason.startswith("no plan")
                # an undecided node: a solve the time limit stopped, or a node it never reached
                else "time_limit"
                if r.reason and r.reason.startswith("N+1 undecided")
                else "optimal"
            )
            out["reason"] = r.reason
        if self.greedy is not None:
            out["greedy"] = {
                **shared.greedy_json(self.state, self.greedy),
                "healthy_after": not self.greedy_problems,
                "problems": self.greedy_problems[:20],
                "stopped": self.greedy.stopped,
            }
        out["timing"] = dict(self.timing)
        return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = "Super-cluster redistribution (docs/groups.md)."
    shared.add_super_cluster_arguments(parser)
    shared.add_exec_argument(parser)


def answer(where: ClusterSource | str, options: GroupOptions) -> RedistributeReport:
    from model import groups_greedy
    from solvers.strategies import groups as strategy

    state, storage = shared.load(where, options, "exalloc redistribute")
    kw = options.strategy_kwargs()
    clock = shared.Stages()
    result = strategy.redistribute(state, storage, **options.exact_kwargs())
    clock.stage("exact_s")
    shared.verify(state, storage, result.outcome, options.mode)
    clock.stage("check_s")
    end = options.greedy_deadline()
    greedy = groups_greedy.redistribute(state, storage, end) if options.greedy else None
    clock.stage("greedy_s")
    problems: list[str] = []
    if greedy is not None and greedy.stopped:
        problems = [f"not judged: {greedy.stopped}"]
    elif greedy is not None:
        groups = list(result.health.groups)
        everyone = [n for g in groups for n in group_nodes(state, g)]
        problems = strategy.judge(
            state, storage, greedy.relocations, everyone, groups, **kw, deadline=end
        )
    clock.stage("judge_s")
    label = shared.as_source(where).label
    return RedistributeReport(
        label, state, result, greedy, options.print_commands, problems, clock.seconds
    )


def run(args: Any) -> RedistributeReport | Executed:
    shared.refuse_cpsat(args, "redistribute")
    check_luxi(args)
    source = source_of(args)
    with about(source.label):
        report = answer(source, GroupOptions.of(args))
    if not args.exec_jobs:
        return report
    return shared.execute(report, source, "redistribute", args.json)
