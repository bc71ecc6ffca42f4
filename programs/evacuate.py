"""`exalloc evacuate --nodes A,B`: instances off nodes, inside their group first, then across
groups, proven (docs/groups.md); beside it hail's node-evacuate followed by the design's
inter-group allocation, judged by the same exact checks."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from model.errors import InputError, about
from model.groups import Relocation, crosses_groups, group_nodes
from model.state import ClusterState
from programs import groups as shared
from programs.execute import Executed, check_luxi
from programs.groups import GroupOptions
from programs.sources import ClusterSource, source_of

if TYPE_CHECKING:  # the strategy imports Pyomo: loaded by `answer`, not by the parser
    from solvers.strategies import groups as strategy


@dataclass(frozen=True)
class EvacuateReport:
    source: str
    state: ClusterState
    result: strategy.Evacuation
    greedy: Any
    print_commands: bool
    notes: list[str] = field(default_factory=list)
    timing: dict[str, float] = field(default_factory=dict)  # seconds per stage (--json)

    @property
    def relocations(self) -> tuple[Relocation, ...]:
        from solvers.strategies import groups as strategy

        return strategy.relocations_of(self.result.outcome)

    def _counts(self, relocs) -> tuple[int, int]:  # noqa: ANN001
        cross = sum(1 for r in relocs if crosses_groups(self.state, r))
        return len(relocs), cross

    def text(self) -> str:
        r = self.result
        st = self.state
        o = r.outcome
        moved, cross = self._counts(self.relocations)
        lines = [
            f"Cluster {self.source}: evacuate {', '.join(r.nodes)} "
            f"({len(r.instances)} instance(s))",
            f"Evacuation: {moved} of {len(r.instances)} instance(s), {cross} across groups; "
            + shared.outcome_line(o),
        ]
        lines += shared.relocation_lines(st, self.relocations)
        left = [n for n in r.instances if n not in {x.instance for x in self.relocations}]
        if left:
            lines.append("  left in place (no plan moves them): " + ", ".join(left))
        if self.greedy is not None:
            gm, gc = self._counts(self.greedy.relocations)
            lines.append(
                f"Greedy (hail's node-evacuate, then the design's inter-group allocation): "
                f"{gm} of {len(r.instances)}, {gc} across groups"
            )
            lines.append("  judged by exact checks: " + shared.judged(self.notes))
        if self.print_commands and self.relocations:
            lines.append("Commands:" + shared.commands_text(st, self.relocations).rstrip("\n"))
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        r = self.result
        st = self.state
        moved, cross = self._counts(self.relocations)
        out: dict[str, Any] = {
            "nodes": list(r.nodes),
            "instances": list(r.instances),
            "evacuated": moved,
            "cross_group": cross,
            **shared.outcome_json(r.outcome),
            "relocations": [shared.relocation_json(st, x) for x in self.relocations],
            "left": [n for n in r.instances if n not in {x.instance for x in self.relocations}],
        }
        if self.greedy is not None:
            gm, gc = self._counts(self.greedy.relocations)
            out["greedy"] = {
                **shared.greedy_json(st, self.greedy),
                "evacuated": gm,
                "cross_group": gc,
                "problems": self.notes[:20],
                "stopped": self.greedy.stopped,
            }
        out["timing"] = dict(self.timing)
        return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = "Node evacuation across groups (docs/groups.md)."
    shared.add_super_cluster_arguments(parser)
    parser.add_argument(
        "--nodes", required=True, metavar="A,B", help="the nodes to evacuate, comma-separated"
    )
    shared.add_exec_argument(parser)


def answer(
    where: ClusterSource | str, nodes: Sequence[str], options: GroupOptions
) -> EvacuateReport:
    from model import groups_greedy
    from solvers.strategies import groups as strategy

    if not nodes:
        raise InputError("--nodes: give at least one node")
    state, storage = shared.load(where, options, "exalloc evacuate")
    kw = options.strategy_kwargs()
    clock = shared.Stages()
    result = strategy.evacuate(state, storage, list(nodes), **options.exact_kwargs())
    clock.stage("exact_s")
    shared.verify(state, storage, result.outcome, options.mode)
    clock.stage("check_s")
    end = options.greedy_deadline()
    greedy = groups_greedy.evacuate(state, storage, list(nodes), end) if options.greedy else None
    clock.stage("greedy_s")
    notes: list[str] = []
    if greedy is not None and greedy.stopped:
        notes = [f"greedy baseline: not judged: {greedy.stopped}"]
    elif greedy is not None:
        evacuable = result.health.evacuable() - set(nodes)
        groups = {state.nodes[n].group_uuid for r in greedy.relocations for n in r.nodes()}
        required = [n for g in groups for n in group_nodes(state, g) if n in evacuable]
        notes = strategy.judge(state, storage, greedy.relocations, required, **kw, deadline=end)
    clock.stage("judge_s")
    label = shared.as_source(where).label
    return EvacuateReport(
        label, state, result, greedy, options.print_commands, notes, clock.seconds
    )


def run(args: Any) -> EvacuateReport | Executed:
    shared.refuse_cpsat(args, "evacuate")
    check_luxi(args)
    nodes = [n for n in args.nodes.split(",") if n]
    source = source_of(args)
    with about(source.label):
        report = answer(source, nodes, GroupOptions.of(args))
    if not args.exec_jobs:
        return report
    return shared.execute(report, source, "evacuate", args.json)
