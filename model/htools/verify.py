"""The independent checker on an htools answer (model/check.py on what hail would print):
new instances with `check_allocation`, moves one instance at a time with `check_moves`,
recomputed from the request's cluster alone."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from model.backends.iallocator import IAllocatorInput
from model.check import CheckReport, Move, Violation, check_allocation, check_moves
from model.htools.requests import Answer, NewPlacement
from model.state import ClusterState, node_states


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
