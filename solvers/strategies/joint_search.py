"""Beside a joint node-evacuate's model: hail's walk (or a narrow one, as the model's start)
and the iterated search from its plan (solvers/strategies/descent.py), group by group, in a
forked child (`solvers.aside.Aside`) while the model runs (docs/placement.md, "node-evacuate").
The timing constants below decide what runs where.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from model.htools.evacuate import (
    CHANGE_ALL,
    EvacSolution,
    apply_evacuated,
    node_evac_instance,
)
from model.htools.metrics import RowCache
from model.state import ClusterState
from solvers.aside import can_fork
from solvers.strategies.descent import improve
from solvers.strategies.joint_moves import Judge, _Group, _moves_judge, _plan_of
from solvers.strategies.placement import (
    JointPlan,
    Plan,
    spread_seconds,
    with_plan,
)


def _walk_and_search(
    walk: Callable[[ClusterState, str, list[str]], EvacSolution | None],
    hail: EvacSolution | None,
    narrow_walk: Callable[[], Plan],
    state: ClusterState,
    mode: str,
    names: list[str],
    state1: ClusterState,
    groups: list[_Group],
    deadline: float,
    enough: Callable[[], bool],
) -> tuple[EvacSolution | None, dict[str, Plan]]:
    """Beside the model (`Aside`): hail's walk (unless done before the model), then, until
    `deadline` or `enough()` (the model is done), the iterated search of
    solvers/strategies/descent.py from its plan, group by group. Returns the walk (None when
    it was cut at half the time) and each group's plan that the checker passed lower than the
    one the search started from: hail's, or the narrow walk's (the model's start, walked
    again here: the walk's own start is not delayed for it) where the walk was cut. The
    walk's time is only estimated (`SECONDS_PER_TRIAL`): beside the model it may take longer
    than alone, and until 2026-11-27 a cut walk left this core idle."""
    if hail is None:
        hail = walk(state, mode, names)
    if hail is None:  # other random moves than the model's own search (`seed`)
        return None, search_groups(narrow_walk(), state1, names, groups, deadline, enough, 1)
    return hail, search_groups(_plan_of(hail), state1, names, groups, deadline, enough)


def search_groups(
    plan: Plan,
    state1: ClusterState,
    names: list[str],
    groups: list[_Group],
    deadline: float,
    enough: Callable[[], bool],
    seed: int = 0,
) -> dict[str, Plan]:
    """The iterated search from `plan`, group by group, until `deadline` or `enough()`: each
    group's plan that the checker passed lower. `seed` draws the search's random moves."""
    found: dict[str, Plan] = {}
    for i, group in enumerate(groups):
        offer = {n: plan[n] for n in group.members if n in plan}
        if len(offer) != len(group.members):
            continue
        judge = _moves_judge(state1, names, {group.uuid})
        score, bad = judge(offer)
        if bad or score is None:
            continue
        seconds = (deadline - time.perf_counter()) / (len(groups) - i)
        identity = {name: name for name in group.members}
        better = improve(
            group.problem, offer, score, identity, judge, seconds, seed=seed, stop=enough
        )
        if better.score < score:
            found[group.uuid] = better.plan
    return found


def walk_aside(walk_s: float, total: float, variables: int) -> bool:
    """Whether hail's walk runs beside the model: when it takes long enough to matter and,
    walked first, it would leave the model too little time for the spread bound (the model
    then starts from the narrow walk: with the time, hail's plan is the better start)."""
    if walk_s < WALK_ASIDE_SECONDS or not can_fork():
        return False
    return total - FINISH_S - walk_s < spread_seconds(variables)


def _placement_variables(avail_of: Mapping[str, list[str]], state: ClusterState, mode: str) -> int:
    """About how many placement variables the joint model gets: a target per primary and
    per secondary the instance may take."""
    both = mode == CHANGE_ALL
    return sum(
        len(a) * (2 if both and state.demands[n].disk_template == "drbd" else 1)
        for n, a in avail_of.items()
    )


def _offered(joint: JointPlan, other: Plan, members: list[str], judge: Judge) -> JointPlan:
    """The joint result with another plan for its instances in place of its own when that
    moves as many and scores lower (hail's, or the search's from it, both beside the model,
    which started from the narrow walk): the model's bound stands for both."""
    offer = {n: other[n] for n in members if n in other}
    if len(offer) != joint.placed:  # the bound is for plans moving as many as the model's
        return joint
    score, bad = judge(offer)
    if bad or score is None or (joint.score is not None and score >= joint.score - 1e-12):
        return joint
    return with_plan(joint, offer, score)


#: hail's walk, when expected to take at least this long, runs in a forked process beside the
#: model instead of before it (2 cores: 40 instances on 200 nodes, a 10 s walk, leave the
#: model 28 s of a 30 s request instead of 18; docs/placement.md)
WALK_ASIDE_SECONDS = 2.0


#: Seconds of a node-evacuate's bound kept for what follows the model and hail's walk (the
#: replay through hail's moves, the checker, the answer).
FINISH_S = 1.0


#: Seconds before the model's deadline at which the search beside it stops, so that its plan
#: is back when the model ends.
SEARCH_MARGIN_S = 0.3


#: hail's walk for a start, with drbd pairs (mode `all`) drawn from this many nodes only.
#: 40 instances on 200 nodes in 30 s (docs/placement.md): 20 nodes gave a start 0.3-0.4 %
#: above hail's full walk, 40 nodes 0.1 % (and a gap of 0.5-0.8 %), 60 nodes left the model
#: too little time for a bound
NARROW_NODES = 40


def narrow_walk(
    state: ClusterState, mode: str, names: list[str], avail_of: Mapping[str, list[str]]
) -> Plan:
    """hail's own walk (each instance, in order, to the target its group scores best) with the
    drbd pairs of mode `all` drawn from the NARROW_NODES nodes with the largest free share of
    memory instead of every ordered pair: near hail's plan in a fraction of its time, to start
    the joint model from."""
    cur, plan = state, {}
    cache = RowCache()
    for name in names:
        d = cur.demands[name]
        p, s = cur.locations[name]
        avail = avail_of[name]
        if d.disk_template == "drbd" and mode == CHANGE_ALL:
            avail = sorted(avail, key=lambda n: -cur.nodes[n].p_mem)[:NARROW_NODES]
        group_nodes = [n for n, st in cur.nodes.items() if st.group_uuid == cur.nodes[p].group_uuid]
        ev = node_evac_instance(cur.nodes, d, p, s, mode, group_nodes, avail, False, cache)
        if isinstance(ev, str):
            continue
        cur = apply_evacuated(cur, name, ev)
        plan[name] = (ev.primary, ev.secondary if d.disk_template == "drbd" else None)
    return plan
