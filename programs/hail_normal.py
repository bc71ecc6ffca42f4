"""`exalloc hail` for everything but dedicated allocation: normal and shared-storage groups,
and relocate, node-evacuate, change-group and allocate-secondary on any group.

Pipeline: IAllocator request → htools' own algorithms (`model.htools.requests.process`, with
the N+1 check `--capacity-checks` names) → independent checker (`model.check`) → hail's
response line. See docs/hail.md, "The htools core".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from model.backends.iallocator import IAllocatorInput, response_json
from model.check import CheckReport, Move, Violation, check_allocation, check_moves
from model.htools.allocate import AllocOptions
from model.htools.capacity import capacity_check
from model.htools.requests import Answer, NewPlacement, process
from model.state import ClusterState, node_states

#: violations that mean hail chose a node Ganeti cannot use (exalloc then declines)
UNUSABLE = frozenset({"offline_node", "drained_node", "not_vm_capable"})


def answer_normal(
    inp: IAllocatorInput,
    capacity_checks: str = "exact",
    ignore_soft_errors: bool = False,
    restrict_to_nodes: Sequence[str] | None = None,
) -> tuple[Answer, str, dict[str, Any]]:
    """hail's answer (checked), its response line, and the checker's objectives."""
    opts = AllocOptions(
        capacity_check(capacity_checks),
        ignore_soft_errors,
        tuple(restrict_to_nodes) if restrict_to_nodes is not None else None,
    )
    ans = process(inp, opts)
    objectives: dict[str, Any] = {}
    if ans.success:
        report = check_answer(inp, ans)
        unusable = [v for v in report.violations if v.kind in UNUSABLE]
        if unusable and len(unusable) == len(report.violations):
            # hail's allocate-secondary does not filter offline nodes; exalloc does not
            # print a node Ganeti cannot use (docs/hail.md, "Allocate-secondary")
            why = "; ".join(str(v) for v in unusable)
            info = f"{ans.info}; exalloc declines: {why}"
            return ans, response_json(False, info, []), {}
        report.raise_if_failed()
        objectives = {k: v for k, v in report.objectives.items() if k in ("score", "moves")}
    return ans, response_json(ans.success, ans.info, ans.result), objectives


def check_answer(inp: IAllocatorInput, ans: Answer) -> CheckReport:
    """The independent checker on hail's answer: new instances with `check_allocation`
    (on the nodes they use), moves one instance at a time with `check_moves`."""
    states = node_states(inp.cluster)
    if ans.kind == "allocate-secondary":
        pl = ans.placements[0]
        return _check_new(states.remove(pl.instance.name), ans.placements, ans, (pl.primary,))
    if ans.placements:
        return _check_new(states, ans.placements, ans)
    violations: list[Violation] = []
    for mv in ans.moves:
        report = check_moves(
            states,
            [Move(mv.instance, mv.primary, mv.secondary)],
            strict=not mv.forced,
            evacuation=True,
        )
        violations += report.violations
        states = states.relocated(mv.instance, mv.primary, mv.secondary)
    return CheckReport(tuple(violations), {"moves": len(ans.moves)})


def _check_new(
    states: ClusterState,
    placements: Sequence[NewPlacement],
    ans: Answer,
    hosting: Sequence[str] = (),
) -> CheckReport:
    used = {n for p in placements for n in (p.primary, p.secondary) if n is not None}
    view = replace(states, nodes={n: st for n, st in states.nodes.items() if n in used})
    report = check_allocation(
        view,
        [(p.instance, p.primary, p.secondary) for p in placements],
        strict=ans.strict,
        requested_group=ans.requested_group,
        hosting=hosting,
    )
    return CheckReport(report.violations, {})
