"""Joint node-evacuate (docs/placement.md, "node-evacuate"): the most instances moved off the
nodes, proven, then the least score of their groups; each group its own placement problem
(an instance never leaves its group), with room for the instances that stay where they are,
and a bound claimed only where it holds for the true score.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial

from model.backends.iallocator import (
    IAllocatorInput,
    NodeEvacuateRequest,
)
from model.batch import NewInstance, NodeData
from model.capacity import N1, CapacityRow, row_caps
from model.htools.answer import HailAnswer, SolverRun
from model.htools.evacuate import (
    CHANGE_ALL,
    CHANGE_PRIMARY,
    CHANGE_SECONDARY,
    EvacSolution,
    node_evac_instance,
    nodes_to_evacuate,
    try_node_evac,
)
from model.htools.requests import EVAC_MODES
from model.placement import PlacementProblem, placement_problem
from model.placement import new_instance as batch_item
from model.resources import (
    InstanceDemand,
)
from model.state import ClusterState, node_states
from solvers.aside import Aside, Flag, can_fork
from solvers.options import SolverOptions
from solvers.strategies import joint_search
from solvers.strategies.joint import DEFAULT_SECONDS, FAILS_N1, FORCED, LEFT_IN_PLACE, _run_of
from solvers.strategies.joint_moves import (
    Judge,
    _better_moves,
    _evacuation_targets,
    _forced_roles,
    _Group,
    _here,
    _moves_judge,
    _no_way_back,
    _plan_of,
    _replay,
)
from solvers.strategies.joint_search import (
    FINISH_S,
    SEARCH_MARGIN_S,
    WALK_ASIDE_SECONDS,
    _offered,
    _placement_variables,
    _walk_and_search,
)
from solvers.strategies.placement import (
    JointPlan,
    Plan,
    place_jointly,
)

#: What one (instance, target) trial of hail's walk costs, to tell whether the walk ends in
#: half a request's time (drbd in mode `all` tries every ordered pair of nodes: 40 instances on
#: 200 nodes are 1.3 million pairs, 8.5-11 s on the machine of docs/placement.md, where hail
#: itself takes 108-119 s); set high, as the walk then runs and stops at half the time
SECONDS_PER_TRIAL = 1.2e-5


def joint_node_evacuate(
    inp: IAllocatorInput,
    one_by_one: Callable[[EvacSolution | None], HailAnswer],
    options: SolverOptions,
) -> HailAnswer:
    """Node-evacuate jointly: the most instances moved off the nodes (proven), then the least
    score of their groups after all moves; hail's answer (`one_by_one(walk)`, made of hail's
    walk when it was done here) when it is not beaten. An instance never leaves its group, so
    each group is its own problem. hail's plan is the starting point and the plan to beat when
    its walk ends in half the time."""
    started = time.perf_counter()  # the request's bound covers everything from here
    req = inp.request
    assert isinstance(req, NodeEvacuateRequest)
    state = node_states(inp.cluster)
    mode = EVAC_MODES[req.evac_mode]
    names = list(req.instances)
    excluded = nodes_to_evacuate(state, mode, names) | {
        n for n, st in state.nodes.items() if st.offline
    }
    # drbd failovers (primary-only) have no choice: done first, as hail does them
    fixed = [
        n for n in names if state.demands[n].disk_template == "drbd" and mode == CHANGE_PRIMARY
    ]
    done = try_node_evac(state, mode, fixed) if fixed else None
    state1 = done.state if done is not None and done.state is not None else state
    chosen: dict[str, list[str]] = {}
    refused: dict[str, str] = dict(done.failed) if done is not None else {}
    avail_of: dict[str, list[str]] = {}
    for name in names:
        t = state.demands[name].disk_template
        if name in fixed:
            continue
        if t in ("plain", "file") or (t != "drbd" and mode == CHANGE_SECONDARY):
            p, sec = state1.locations[name]
            why = node_evac_instance(
                state1.nodes, state1.demands[name], p, sec, mode, [], [], False
            )
            refused[name] = why if isinstance(why, str) else "cannot be moved"
            continue
        p = state1.locations[name][0]
        uuid = state1.nodes[p].group_uuid
        chosen.setdefault(uuid, []).append(name)
        avail_of[name] = [
            n for n, st in state1.nodes.items() if st.group_uuid == uuid and n not in excluded
        ]
        avail_of[name] = [n for n in avail_of[name] if n != p]
    if not chosen:
        return one_by_one(None)
    trials = sum(
        len(a) ** 2 if state.demands[n].disk_template == "drbd" and mode == CHANGE_ALL else len(a)
        for n, a in avail_of.items()
    )
    budget = options if options.time_limit is not None else options.within(DEFAULT_SECONDS)
    total = budget.time_limit or DEFAULT_SECONDS
    # hail's own walk: the model's start and the plan to beat, when it can end in half the
    # time (it stops at that deadline otherwise); else the narrow walk as the start, and no
    # comparison. When walking first would leave the model too little time, the walk runs
    # beside it in a forked child and the narrow walk is the start (`joint_search.walk_aside`)
    hail = None
    aside: Aside | None = None
    enough = Flag()  # set when every group's plan is proven: the search beside may stop
    walk_s = trials * SECONDS_PER_TRIAL
    deadline = started + total - FINISH_S
    groups = _evacuation_groups(state1, mode, chosen, avail_of)
    search_end = deadline - SEARCH_MARGIN_S
    moving = [n for ms in chosen.values() for n in ms]
    narrow: Plan | None = None
    if walk_s <= total / 2:
        walk = partial(try_node_evac, deadline=started + total / 2)
        if not joint_search.walk_aside(walk_s, total, _placement_variables(avail_of, state, mode)):
            hail = walk(state, mode, names)
        if can_fork() and (hail is None or walk_s >= WALK_ASIDE_SECONDS):
            # on the other core, beside the model: the walk if not done (the model then
            # starts from the narrow walk, and so does the search if the walk is cut at half
            # the time), and the search from hail's plan until the model ends (a short walk's
            # request is answered in a moment: no process to wait for)
            aside = Aside(
                _walk_and_search,
                walk,
                hail,
                partial(joint_search.narrow_walk, state1, mode, moving, avail_of),
                state,
                mode,
                names,
                state1,
                groups,
                search_end,
                enough,
            )
    elif walk_s >= WALK_ASIDE_SECONDS and can_fork():
        # hail's walk would not end in time: the search runs beside the model from the narrow
        # walk's plan instead (the model's start too), with other random moves than the
        # search the model runs itself when it has no time to be built
        narrow = joint_search.narrow_walk(state1, mode, moving, avail_of)
        search = partial(
            joint_search.search_groups, narrow, state1, names, groups, search_end, enough, 1
        )
        aside = Aside(lambda: (None, search()))  # no walk
    plan: Plan = {}
    runs: list[SolverRun] = []
    searched: dict[str, Plan] = {}
    try:
        if hail is not None:
            start = _plan_of(hail)
        else:  # the narrow walk, if not walked before the fork already
            start = (
                narrow
                if narrow is not None
                else joint_search.narrow_walk(state1, mode, moving, avail_of)
            )
        joints = _evacuate_groups(
            inp, state1, names, mode, groups, start, budget, deadline, frozenset(excluded)
        )
    except BaseException:
        if aside is not None:
            aside.cancel()
        raise
    aside_note = ""
    if aside is not None:
        enough.set()  # the model is done: the search beside stops
        beside = aside.result()  # the walk ended by half the time, the search by now
        if beside is not None:
            hail, searched = beside
        elif aside.failure is not None:  # a bug: the answer stands without it, but says so
            aside_note = f"; the search beside the model failed ({aside.failure})"
    for joint, group, judge in joints:
        # hail's plan, or the search's from it, if better: with the model's bound
        if hail is not None:
            joint = _offered(joint, _plan_of(hail), group.members, judge)
        if group.uuid in searched:
            joint = _offered(joint, searched[group.uuid], group.members, judge)
        plan.update(joint.placements)
        runs.append(_run_of(options, joint))
    replay = _replay(state1, mode, names, plan)
    if isinstance(replay, str):
        return one_by_one(hail)  # the model's plan cannot be made of hail's steps
    after, moved, jobs = replay
    if done is not None:
        moved = [*done.moved, *moved]
        jobs = [*done.jobs, *jobs]
    return _better_moves(
        inp,
        state,
        names,
        "node-evacuate",
        (moved, jobs, after),
        hail,
        runs,
        lambda: one_by_one(hail),  # hail's answer made of the walk done, not walked again
        refused,
        why_alone=(
            "proven"
            if all(r.status == "optimal" for r in runs)
            else "hail's walk does not end within half the time"
        ),
        aside_note=aside_note,
    )


def _evacuation_groups(
    state1: ClusterState,
    mode: str,
    chosen: Mapping[str, list[str]],
    avail_of: Mapping[str, list[str]],
) -> list[_Group]:
    """Each group's instances, placed again only within it (an instance never leaves its
    group). An instance that no node can take stays where it is, as in the moves' result:
    the group is modelled with it in place (without it, the model scored every plan on a
    cluster the moves do not leave, and its bounds did not hold for the true score)."""
    out = []
    for uuid, members in chosen.items():
        group_nodes = [n for n, st in state1.nodes.items() if st.group_uuid == uuid]
        moving = list(members)
        while True:  # the instances with somewhere to go, on the group without them
            base = state1
            for name in moving:
                base = base.remove(name)
            kinds = []
            turn = state1
            for order, name in enumerate(moving):
                d = state1.demands[name]
                p, _ = state1.locations[name]
                turn = turn.remove(name)  # it and the moving ones before it gone
                keep = p if d.disk_template == "drbd" and mode == CHANGE_SECONDARY else None
                forced = _forced_roles(state1, name, mode)
                prims, secs, forbidden = _evacuation_targets(
                    base, d, avail_of[name], p, keep, forced
                )
                if mode == CHANGE_ALL and _no_way_back(state1, turn, name):
                    prims, secs, forbidden = [], [], set()
                item = batch_item(
                    base, d, prims, secs, forbidden,
                    order=order, kept_primary=keep is not None, forced=forced,
                )  # fmt: skip
                if item.primaries and (not item.drbd or item.secondaries):
                    kinds.append((d, item))
            if len(kinds) == len(moving):
                break
            moving = [k.name for _, k in kinds]  # the others stay: fewer leave, less room
        if kinds:
            problem = _group_problem(state1, base, kinds, group_nodes, mode, set())
            out.append(_Group(uuid, base, group_nodes, kinds, problem))
    return out


def _with_stays(group: _Group, state1: ClusterState, mode: str) -> PlacementProblem:
    """The group's problem where each instance may also stay where it is, placed back on its
    nodes (`NewInstance.stay`): then every instance is placed, the fewest stay (a stage before
    the score) and the score counts the ones that stay, so the model's bound is one of the
    true score. A drbd instance in mode `all` stays as its pair: its primary now takes only
    its secondary now, and that secondary, if no move could take it, only that primary."""
    genuine = {n for _, k in group.kinds for n in (*k.primaries, *k.secondaries)}
    kinds = []
    for d, k in group.kinds:
        p, s = here = _here(state1, k.name)
        prims, secs, forbidden = list(k.primaries), list(k.secondaries), set(k.forbidden_pairs)
        if s is None:  # shared storage: its primary now
            prims = _plus(prims, p)
        elif mode == CHANGE_SECONDARY:  # the primary stays in any case: its secondary now
            secs = _plus(secs, s)
        else:
            forbidden |= {(p, t) for t in secs if t != s}
            if s not in secs:
                forbidden |= {(q, s) for q in prims if q != p}
            prims, secs = _plus(prims, p), _plus(secs, s)
        item = batch_item(
            group.base, d, prims, secs, forbidden,
            order=k.order, stay=here, kept_primary=k.kept_primary, forced=k.forced,
        )  # fmt: skip
        kinds.append((d, item))
    return _group_problem(state1, group.base, kinds, group.scope, mode, genuine)


def _plus(nodes: list[str], node: str) -> list[str]:
    return nodes if node in nodes else [*nodes, node]


def _group_problem(
    state1: ClusterState,
    base: ClusterState,
    kinds: list[tuple[InstanceDemand, NewInstance]],
    scope: list[str],
    mode: str,
    genuine: set[str],
) -> PlacementProblem:
    """The group's placement problem, with room for what is placed back where it was: the
    instances that may stay (`_with_stays`) on nodes no move may take (`genuine`: the moves'
    candidates). A node already past a capacity row with them on it (a policy ratio: htools
    checks nothing of an instance that stays) keeps them, the row raised to what they use, so
    that nothing else fits there. On an offline (or drained) node hail's score counts them
    (the offline counts): so does the model's (model/placement.py SUM_METRICS). A
    secondary-only evacuation's drbd primaries (their only candidate) are on their node all
    along, every row raised likewise but the N+1 row: htools adds them back with force, so
    their node may end failing N+1 where it fails as it is (formulations/batch.py,
    `BatchProblem.may_fail_n1`)."""
    back: dict[str, list[tuple[NewInstance, str]]] = {}
    for _, k in kinds:
        if mode == CHANGE_SECONDARY:
            back.setdefault(k.primaries[0], []).append((k, "p"))
        elif k.stay is not None and k.stay[0] not in genuine:
            back.setdefault(k.stay[0], []).append((k, "p"))
        if k.stay is not None and k.stay[1] is not None and k.stay[1] not in genuine:
            back.setdefault(k.stay[1], []).append((k, "s"))

    def use_of(name: str, kind: str) -> int:
        """What everything placed back on the node takes of the row (the N+1 row: primary
        memory and the reserve as it was)."""
        here = back.get(name, ())
        use = sum(
            k.count * (k.primary_usage if role == "p" else k.secondary_usage).get(kind, 0)
            for k, role in here
        )
        if kind == N1:
            secondary = any(role == "s" for _, role in here)
            use += (state1 if secondary else base).nodes[name].reserved_memory_mib
        return use

    def kept(name: str) -> bool:  # a primary added back: the node may fail N+1 instead
        return any(k.kept_primary and role == "p" for k, role in back.get(name, ()))

    # a node that fails N+1 with what is placed back on it, but not without it: its N+1 row
    # is not raised, the node may fail N+1 instead (`NodeData.n1_with_stays`), with its
    # loaded flag where nothing leaves it; one that fails without it keeps a raised row
    # (its count is `base`'s, `_n1_miscounted`)
    with_stays = {
        n: state1.nodes[n].fail_n1
        for n in back
        if not kept(n)
        and not base.nodes[n].fail_n1
        and (cap := dict(row_caps(base.nodes[n])).get(N1)) is not None
        and use_of(n, N1) > cap
    }

    def row(node: NodeData, r: CapacityRow) -> CapacityRow:
        if r.kind == N1 and (kept(node.name) or node.name in with_stays):
            return r
        use = use_of(node.name, r.kind)
        return r if use <= r.cap else replace(r, cap=use)

    # the N+1 flag of a node with everything on it, loaded or as htools recomputes it
    failing = frozenset(
        n
        for n, st in ((n, state1.nodes[n]) for n in back)
        if st.fail_n1 or st.unallocated_memory_mib <= st.reserved_memory_mib
    )
    problem = placement_problem(base, kinds, scope, failing_as_is=failing, with_stays=with_stays)
    batch = problem.batch
    nodes = tuple(
        replace(n, rows=tuple(row(n, r) for r in n.rows)) if n.name in back else n
        for n in batch.nodes
    )
    # drbd instances that may stay on one pair reserve their sum there: summed exactly
    pairs = Counter(k.stay for _, k in kinds if k.drbd and k.stay is not None)
    shared = frozenset(pair for pair, count in pairs.items() if count > 1)
    if batch.shared_pairs is not None:
        shared |= batch.shared_pairs
    return replace(problem, batch=replace(batch, nodes=nodes, shared_pairs=shared))


def _evacuate_groups(
    inp: IAllocatorInput,
    state1: ClusterState,
    names: list[str],
    mode: str,
    groups: list[_Group],
    start_plan: Plan,
    budget: SolverOptions,
    deadline: float,
    avoid: frozenset[str],
) -> list[tuple[JointPlan, _Group, Judge]]:
    """The joint model of each group's instances, from `start_plan`: (its result, the group,
    the judge of its moves) per group. Where the start leaves instances where they are, the
    model may too (`_with_stays`); its plans then name them at their nodes, which are no
    moves: the judge and the result see only the moves."""
    joints = []
    for group in groups:
        start = {n: start_plan[n] for n in group.members if n in start_plan}
        judge = _moves_judge(state1, names, {group.uuid}, avoid, mode)
        problem, verdict = group.problem, judge
        if not _expressible(problem, start):
            start = {}  # htools' forced moves off offline nodes: offered beside the model
        if len(start) < len(group.members):
            problem = _with_stays(group, state1, mode)
            stays = len(group.members) - len(start)
            start = {n: start.get(n) or _here(state1, n) for n in group.members}
            verdict = partial(_staying_judge, judge, state1, stays)
        joint = place_jointly(
            group.base,
            problem,
            {d.name: d for d, _ in group.kinds},
            {name: [name] for name in group.members},
            group=inp.cluster.group(group.uuid).name,
            options=budget.within(max(deadline - time.perf_counter(), 0.1)),
            start=start or None,
            judge=verdict,
        )
        placed = joint.placed  # moves, and instances placed back where they are
        moves = _moves_only(state1, joint.placements)
        joint = replace(joint, placements=moves, placed=len(moves))
        unbounded = _unbounded(group, problem, state1, mode, placed)
        if unbounded is not None and joint.score is not None:
            joint = replace(joint, bound=None, status="feasible", notes=(*joint.notes, unbounded))
        joints.append((joint, group, judge))
    return joints


def _expressible(problem: PlacementProblem, plan: Plan) -> bool:
    """Whether the model has every placement of the plan among its candidates."""
    batch = problem.batch
    return all(
        p in batch.primaries[name] and (s is None or s in batch.secondaries[name])
        for name, (p, s) in plan.items()
    )


def _moves_only(state1: ClusterState, plan: Plan) -> Plan:
    """A plan without the instances it places back where they are."""
    return {n: to for n, to in plan.items() if to != _here(state1, n)}


def _staying_judge(
    judge: Judge, state1: ClusterState, stays: int, plan: Plan
) -> tuple[float | None, list[str]]:
    """The judge of a plan naming instances that stay, at their nodes: its moves judged, and
    refused when more stay than in the start (a descent from the start ranks plans by score
    alone, and must not trade a move for score)."""
    moves = _moves_only(state1, plan)
    if len(plan) - len(moves) > stays:
        return None, [f"{len(plan) - len(moves)} instances stay, more than {stays}"]
    return judge(moves)


def _unbounded(
    group: _Group, problem: PlacementProblem, state1: ClusterState, mode: str, placed: int
) -> str | None:
    """Why the model's bound is not one of the true score (`NO_BOUND`), or None when it is;
    `placed` counts the moves and the instances placed back."""
    if placed < len(group.kinds):  # left where they are, unscored: the model placed neither
        return LEFT_IN_PLACE
    if _short_of_reserve(problem):
        return FORCED
    if _n1_miscounted(problem, group.base, state1):
        return FAILS_N1
    return None


def _n1_miscounted(problem: PlacementProblem, base: ClusterState, state1: ClusterState) -> bool:
    """Whether a node whose N+1 row `_group_problem` raised to hold what is placed back there
    may score less than the model counts it. Nothing but what stays lands there (it is no
    move's candidate), and the model counts the node's N+1 failures as in `base` (everything
    moving taken off). Where some instance leaves it, htools recomputes its flag with at least
    `base`'s load: failing if `base` fails, with at least `base`'s instances counted, never less
    than the model; where none leaves, the flag is the loaded one (`state1`): less only where
    `base` fails and the loaded flag does not. Elsewhere the model's count is a lower bound
    (it does not count a node that fails with what stays: a valid, if weaker, bound)."""
    for node in problem.batch.nodes:
        cap = dict(row_caps(base.nodes[node.name])).get(N1)
        if cap is not None and any(r.kind == N1 and r.cap > cap for r in node.rows):
            if base.nodes[node.name].fail_n1 and not state1.nodes[node.name].fail_n1:
                return True
    return False


def _short_of_reserve(problem: PlacementProblem) -> bool:
    """Whether a node that may fail N+1 is short of its reserve already and may have
    instances placed back on it: it keeps its loaded flag while nothing lands there, which
    the model tells only where nothing may stay (`BatchProblem.short_of_reserve`)."""
    batch = problem.batch
    return any(n in batch.stays_on for n in batch.short_of_reserve)
