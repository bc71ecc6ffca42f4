"""hspace's question after moving existing instances first (`exalloc space --move-existing`,
ganeti issue 597; docs/space.md, "Moving existing instances first").

The question: the largest count of new instances of the standard spec that fit once at most
N existing instances' moves have been made, each move one of hbal's (model/balance.py `Step`,
the kinds `possibleMoves` offers: failover, replace secondary, replace primary, and the two
combinations for drbd, failover to any node for externally mirrored templates), offered to an
instance hbal may move (`model.balance.movable`) in its group and passing htools' per-step
checks on the state it meets (`ClusterState.move`, applyMoveEx). hspace's question is then
asked of the moved cluster as it is asked of a loaded one (model/space.py).

This module holds what the search and the checker share: the steps hbal offers in a state
(`offered_steps`, through model/htools/hbal.py as model/balance.py reads it), their replay
(`replay_moves`); the search skips states whose row bound (`model.space.count_bound`)
cannot beat the best found.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from model.balance import BalanceProblem, BalanceRules, Step, allowed_step, movable
from model.resources import FailMode
from model.state import ClusterState


@dataclass(frozen=True)
class MoveOptions:
    """`--move-existing [--max-moves N]`: at most `max_moves` hbal steps, with hbal's flags."""

    max_moves: int = 1
    rules: BalanceRules = field(default_factory=BalanceRules)


def location_key(state: ClusterState) -> frozenset:
    """Where every instance is: two move sequences ending in the same places end in the same
    cluster (a move's effect on the nodes depends only on where the instance was and goes)."""
    return frozenset(state.locations.items())


def offered_steps(state: ClusterState, rules: BalanceRules) -> Iterator[Step]:
    """Every step hbal would try in `state`, group by group in the cluster's order: each
    movable instance (`model.balance.movable`) with each move `checkInstanceMove` tries for
    it (model/htools/hbal.py `instance_moves`)."""
    from model.htools.hbal import instance_moves, movable_instances, scope_of

    search = rules.search()
    pool = movable_instances(state, rules.select_instances or (), rules.exclude_instances)
    for group in state.cluster.groups:
        scope = scope_of(state, group.uuid, pool)
        for name in movable(state, group.uuid, rules):
            for mv in instance_moves(state, scope, name, search):
                yield Step(name, mv.kind, mv.target)


def children(state: ClusterState, rules: BalanceRules) -> Iterator[tuple[Step, ClusterState]]:
    """Every state one offered step leads to (the steps htools' checks refuse left out)."""
    for step in offered_steps(state, rules):
        after = state.move(step.instance, step.kind, step.target, force=rules.ignore_soft_errors)
        if not isinstance(after, FailMode):
            yield step, after


def replay_moves(
    state: ClusterState, steps: Sequence[Step], options: MoveOptions
) -> ClusterState | str:
    """The steps made one by one, each checked as hbal would offer and make it: at most
    `max_moves`; the instance one hbal moves in its group now and the step one of the moves
    it tries (`model.balance.allowed_step`); htools' per-step checks on the state it meets.
    The moved cluster, or what failed first."""
    rules = options.rules
    if len(steps) > options.max_moves:
        return f"{len(steps)} moves, more than the {options.max_moves} allowed"
    for i, step in enumerate(steps, 1):
        if step.instance not in state.locations:
            return f"move {i}: no instance {step.instance}"
        group = state.nodes[state.locations[step.instance][0]].group_uuid
        why = allowed_step(BalanceProblem(state, group, options.max_moves, rules), state, step)
        if why is not None:
            return f"move {i} ({step.instance} {step.code}): {why}"
        after = state.move(step.instance, step.kind, step.target, force=rules.ignore_soft_errors)
        if isinstance(after, FailMode):
            return f"move {i} ({step.instance} {step.code}) fails htools' check {after}"
        state = after
    return state
