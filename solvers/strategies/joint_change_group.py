"""Joint change-group (docs/placement.md, "change-group"): the instances moved into the target
groups hail may use, the most moved, then the fewest on last-resort groups, then the least
score of the target groups together, each kept N+1 redundant by the exact check.
"""

from __future__ import annotations

from model.backends.iallocator import (
    ChangeGroupRequest,
    IAllocatorInput,
)
from model.htools.answer import HailAnswer
from model.htools.evacuate import (
    CHANGE_ALL,
)
from model.htools.requests import Answer
from model.placement import candidates, placement_problem
from model.placement import new_instance as batch_item
from model.resources import (
    FailMode,
    add_primary,
)
from model.state import ClusterState, node_states
from solvers.options import SolverOptions
from solvers.strategies.joint import DEFAULT_SECONDS, GroupRedundancy, _last_resort_nodes, _run_of
from solvers.strategies.joint_moves import (
    _better_moves,
    _evac_solution,
    _forced_roles,
    _migratable,
    _moves_judge,
    _no_way_back,
    _replay,
)
from solvers.strategies.placement import (
    Plan,
    place_jointly,
)


def joint_change_group(
    inp: IAllocatorInput, one_by_one: HailAnswer, hail_answer: Answer, options: SolverOptions
) -> HailAnswer:
    """Change-group jointly into the target groups hail may use (htools' allocation drops
    unallocable ones and ranks last-resort ones after the others): the most instances moved
    (proven), then the fewest on last-resort groups, then the least score of the target
    groups taken together, each kept N+1 redundant by the exact check (each moving instance
    counted at its new place only). docs/placement.md, "change-group"."""
    req = inp.request
    assert isinstance(req, ChangeGroupRequest)
    state = node_states(inp.cluster)
    names = list(req.instances)
    sources = {state.nodes[state.locations[n][0]].group_uuid for n in names}
    pool = [u for u in (req.target_group_uuids or [g.uuid for g in inp.cluster.groups])]
    targets = [inp.cluster.group(u) for u in dict.fromkeys(pool) if u not in sources]
    targets = [g for g in targets if g.alloc_policy != "unallocable"]
    if not targets:
        return one_by_one
    hail = _evac_solution(hail_answer, state)
    movable = [n for n in names if state.demands[n].disk_template not in ("plain", "file")]
    base = state
    for name in movable:
        base = base.remove(name)
    redundancy = GroupRedundancy(base, options)
    # a group that is not redundant takes nothing (as hail's check refuses it)
    usable = [g for g in targets if redundancy.redundant_group(g.uuid)]
    if not usable:
        return one_by_one
    scored = {g.uuid for g in targets}
    group_nodes = [n for n, st in state.nodes.items() if st.group_uuid in scored]
    in_usable = {g.uuid for g in usable}
    online = [n for n in group_nodes if base.nodes[n].group_uuid in in_usable]
    online = [n for n in online if not base.nodes[n].offline]
    last = _last_resort_nodes(inp, state)
    nics = {i.name: i.nics for i in inp.cluster.instances if i.name in set(movable)}
    kinds = []
    turn = state
    for order, name in enumerate(movable):
        d = state.demands[name]
        source = state.locations[name][0]
        turn = turn.remove(name)  # it and the moving ones before it gone
        prims, secs, forbidden = candidates(base, d, usable, None, nics.get(name, ()))
        if _no_way_back(state, turn, name):  # drbd moves as in a node evacuation in mode all
            prims, secs, forbidden = [], [], set()
        # hail moves it into a group only where its allocation finds a node (the policy,
        # strict adds); off an offline primary its move is forced (htools' applyMoveEx), the
        # new primary held to the hard checks alone, as in a node evacuation
        forced = _forced_roles(state, name, CHANGE_ALL) if prims else frozenset()
        if "p" in forced:
            found = {base.nodes[p].group_uuid for p in prims}
            prims = [
                t
                for t in online
                if base.nodes[t].group_uuid in found
                and not isinstance(add_primary(base.nodes[t], d, strict=False), FailMode)
            ]
        prims = _migratable(base, source, prims)  # the new primary
        item = batch_item(base, d, prims, secs, forbidden, order=order, forced=forced)
        if item.primaries and (not item.drbd or item.secondaries):
            kinds.append((d, item))
    if not kinds:
        return one_by_one
    demands = {d.name: d for d, _ in kinds}

    def capacity(s: ClusterState, plan: Plan) -> list[str]:
        after = s
        for name, (p, sec) in plan.items():
            after = after.placed(demands[name], p, sec)
        changed = {n for p, sec in plan.values() for n in (p, sec) if n is not None}
        return redundancy.breaks(after, changed)

    start = {n: (nodes[0], nodes[1] if len(nodes) > 1 else None) for n, _, nodes in hail.moved}
    budget = options if options.time_limit is not None else options.within(DEFAULT_SECONDS)
    joint = place_jointly(
        base,
        placement_problem(base, kinds, group_nodes, last_resort=last),
        demands,
        {k.name: [k.name] for _, k in kinds},
        group=None,  # the judge scores the plans
        options=budget,
        start=start or None,
        capacity_check=capacity,
        judge=_moves_judge(state, names, scored, mode=CHANGE_ALL),
    )
    replay = _replay(state, CHANGE_ALL, names, joint.placements)
    if isinstance(replay, str):
        return one_by_one
    after, moved, jobs = replay
    runs = [_run_of(options, joint)]
    # hail checks N+1 where its allocation would put the instance, not where its moves land:
    # a plan of hail's that leaves a target group not redundant is no answer here
    where = "group " + targets[0].name if len(targets) == 1 else "a target group"
    broken = f"moving it leaves {where} not N+1 redundant by the exact check"
    if start and capacity(base, start):
        return _better_moves(
            inp, state, names, "change-group", (moved, jobs, after), None, runs,
            lambda: one_by_one, {n: broken for n in start}, scored=scored, last=last,
            why_alone=f"hail's moves leave {where} not N+1 redundant",
        )  # fmt: skip
    return _better_moves(
        inp, state, names, "change-group", (moved, jobs, after), hail, runs,
        lambda: one_by_one, scored=scored, last=last,
    )  # fmt: skip
