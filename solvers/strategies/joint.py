"""Joint multi-allocate on normal groups (docs/placement.md, docs/hail.md "Multi-allocate").

hail places a batch one instance at a time. With `--capacity-checks exact`, exalloc places it
jointly: its one-by-one answer (htools' algorithm with the exact N+1 check) is computed first
and handed to the joint model as the plan to beat; the joint model maximises the instances
placed, then minimises those on last-resort groups, then the cluster score after the whole
batch (solvers/strategies/placement.py), and every plan it keeps leaves the groups it touches N+1
redundant by the exact check. The better of the two plans, as the checker ranks them, is the
answer, so it is never worse than the one-by-one batch.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial

from model.backends.iallocator import (
    ChangeGroupRequest,
    IAllocatorInput,
    MultiAllocateRequest,
    NodeEvacuateRequest,
    multi_allocate_response,
    new_instance,
    response_json,
)
from model.batch import NewInstance, NodeData
from model.capacity import N1, CapacityRow, row_caps
from model.check import Move, check_allocation, check_moves
from model.cluster import NodeGroup
from model.htools.answer import HailAnswer, SolverRun, run_note
from model.htools.evacuate import (
    CHANGE_ALL,
    CHANGE_PRIMARY,
    CHANGE_SECONDARY,
    EvacSolution,
    Evacuated,
    Step,
    apply_evacuated,
    drbd_all_pair,
    node_evac_instance,
    nodes_to_evacuate,
    try_node_evac,
)
from model.htools.metrics import RowCache
from model.htools.requests import EVAC_MODES, Answer, evac_answer
from model.htools.verify import check_answer
from model.placement import NO_PRIMARY, PlacementProblem, candidates, placement_problem
from model.placement import new_instance as batch_item
from model.resources import (
    FailMode,
    InstanceDemand,
    MoveKind,
    add_primary,
    add_secondary,
    apply_move,
    check_migration,
    secondary_shortfalls,
)
from model.score import cluster_score
from model.state import ClusterState, node_states
from solvers.aside import Aside, Flag, can_fork
from solvers.options import SolverOptions
from solvers.strategies.descent import Verdict, improve
from solvers.strategies.n1 import decide, still_valid
from solvers.strategies.placement import (
    NO_TIME_FOR_MODEL,
    OVERSCORED,
    UNDERCUT,
    JointPlan,
    Plan,
    place_jointly,
    spread_seconds,
    with_plan,
)

#: Time the joint model gets when no --time-limit is given: an iallocator must answer.
DEFAULT_SECONDS = 20.0


@dataclass
class GroupRedundancy:
    """Exact N+1 of the groups a plan touches, re-deciding only what the plan can affect."""

    base: ClusterState
    options: SolverOptions

    def __post_init__(self) -> None:
        self._verdicts: dict = {}

    def _base(self, node: str):  # noqa: ANN202
        if node not in self._verdicts:
            self._verdicts[node] = decide(self.base, node, options=self.options)
        return self._verdicts[node]

    def group_nodes(self, uuid: str) -> list[str]:
        return [n for n, st in self.base.nodes.items() if st.group_uuid == uuid]

    def redundant_group(self, uuid: str) -> bool:
        return all(self._base(n).evacuable is True for n in self.group_nodes(uuid))

    def breaks(self, after: ClusterState, changed: set[str]) -> list[str]:
        """The nodes of the first group the change leaves non-redundant (empty: none)."""
        for uuid in sorted({self.base.nodes[n].group_uuid for n in changed}):
            for node in self.group_nodes(uuid):
                v = self._base(node)
                if node not in changed and still_valid(after, v, changed):
                    continue
                if decide(after, node, options=self.options).evacuable is not True:
                    return self.group_nodes(uuid)
        return []


def _groups(inp: IAllocatorInput, req: MultiAllocateRequest) -> list[NodeGroup]:
    cluster = inp.cluster
    if req.group_name is not None:
        return [g for g in cluster.groups if g.name == req.group_name]
    return [g for g in cluster.groups if g.alloc_policy != "unallocable"]


def _key(  # noqa: ANN202
    state: ClusterState,
    demands: Mapping[str, InstanceDemand],
    plan: Plan,
    last: set[str],
    group: str | None,
):
    """How the checker ranks a plan: (−placed, on last-resort groups, score); None if it
    fails the checker."""
    placements = [(demands[n], p, s) for n, (p, s) in plan.items()]
    report = check_allocation(state, placements, group=group, requested_group=group)
    if report.violations:
        return None
    on_last = sum(1 for p, _ in plan.values() if p in last)
    return (-len(plan), on_last, report.objectives["score"])


def _last_resort_nodes(inp: IAllocatorInput, state: ClusterState) -> frozenset[str]:
    """The nodes of last-resort groups: hail's allocation uses them only when no preferred
    group can take an instance."""
    return frozenset(
        n
        for n, st in state.nodes.items()
        if inp.cluster.group(st.group_uuid).alloc_policy == "last_resort"
    )


def joint_multi_allocate(
    inp: IAllocatorInput, one_by_one: HailAnswer, options: SolverOptions
) -> HailAnswer:
    """The joint answer, or `one_by_one` when the joint model finds nothing better; every
    group the plan touches stays N+1 redundant by the exact check."""
    req = inp.request
    assert isinstance(req, MultiAllocateRequest)
    state = node_states(inp.cluster)
    if any(r.name in state.demands for r in req.instances):
        return one_by_one  # hail's own words for clashing names
    groups = _groups(inp, req)
    redundancy = GroupRedundancy(state, options)
    # a group that is not redundant refuses every placement (as hail's check does)
    usable = [g for g in groups if redundancy.redundant_group(g.uuid)]
    demands: dict[str, InstanceDemand] = {}
    kinds = []
    alone: set[str] = set()  # instances some node could take on its own
    for order, r in enumerate(req.instances):
        d = state.demand(new_instance(r))
        demands[r.name] = d
        prims, secs, forbidden = candidates(state, d, usable, r.restrict_to_nodes, r.nics)
        item = batch_item(state, d, prims, secs, forbidden, order=order)
        if item.primaries and (not item.drbd or item.secondaries):
            kinds.append((d, item))
            alone.add(r.name)
    start = {
        name: (nodes[0], nodes[1] if len(nodes) > 1 else None)
        for name, nodes in one_by_one.placements
    }
    if not kinds:
        return one_by_one
    in_groups = {g.uuid for g in groups}
    # hail scores over the whole cluster without group_name, over the group with it
    scope = [
        n for n, st in state.nodes.items() if req.group_name is None or st.group_uuid in in_groups
    ]
    last = _last_resort_nodes(inp, state)
    problem = placement_problem(state, kinds, scope, last_resort=last)
    budget = options if options.time_limit is not None else options.within(DEFAULT_SECONDS)

    def capacity(s: ClusterState, plan: Plan) -> list[str]:
        after = s
        for name, (p, sec) in plan.items():
            after = after.placed(demands[name], p, sec)
        changed = {n for p, sec in plan.values() for n in (p, sec) if n is not None}
        return redundancy.breaks(after, changed)

    group = None if req.group_name is None else groups[0].name if groups else None
    joint: JointPlan = place_jointly(
        state,
        problem,
        demands,
        {k.name: [k.name] for _, k in kinds},
        group=group,
        options=budget,
        start=start or None,
        capacity_check=capacity,
    )
    mine = _key(state, demands, joint.placements, last, group) if joint.placements else None
    theirs = _key(state, demands, start, last, group) if start else (0, 0, float("inf"))
    run = _run_of(options, joint)
    note = _note(len(joint.placements), joint.score, len(start), theirs[2] if theirs else None)
    if mine is None or theirs is None or not mine < theirs:
        # hail's plan stands, with what the model proved (its bound holds for hail's plan)
        return _kept_hails(one_by_one, [run], note)
    allocated = [
        (r.name, [x for x in joint.placements[r.name] if x])
        for r in req.instances
        if r.name in joint.placements
    ]
    crowded = "no room left by the joint plan, which places the most instances that fit together"
    nowhere = "no node of the groups considered can take it, even alone"
    failed = [
        (r.name, crowded if r.name in alone else nowhere)
        for r in req.instances
        if r.name not in joint.placements
    ]
    info, result = multi_allocate_response(allocated, failed)
    return HailAnswer(
        response_json(True, info + run_note((run,), note), result),
        "multi-allocate",
        placements=tuple((n, tuple(nodes)) for n, nodes in allocated),
        runs=(run,),
        objectives={"score": joint.score, "score_bound": joint.bound, "placed": joint.placed},
    )


# --- node-evacuate ---------------------------------------------------------------------------


def _migratable(state: ClusterState, source: str, targets: list[str]) -> list[str]:
    """The targets that accept a live migration (or failover) from `source`: its migration
    tags receivable there (htools' check; the checker refuses a new primary that does not)."""
    return [t for t in targets if check_migration(state.nodes[source], state.nodes[t]) is None]


def _evacuation_targets(
    base: ClusterState,
    d: InstanceDemand,
    avail: list[str],
    source: str,
    fixed_primary: str | None,
    forced: frozenset[str] = frozenset(),
) -> tuple[list[str], list[str], set[tuple[str, str]]]:
    """Where an evacuated instance may go, by htools' strict adds on the cluster without the
    instances being moved (its hard checks alone for the roles it moves with force off an
    offline node, `forced`): a new primary (shared storage), a new secondary beside a primary
    that stays (drbd, secondary-only), or both (drbd, all). A new primary must accept the
    migration from `source`, the primary now (shared storage migrates there, drbd fails over
    to it). Moves are not held to the instance policy: hail's moves are not."""
    if fixed_primary is not None:
        # htools adds the primary back with force: a node short of memory for it (offline,
        # overcommitted) fails every new secondary
        if isinstance(add_primary(base.nodes[fixed_primary], d, strict=False), FailMode):
            return [], [], set()
        prims = [fixed_primary]
    else:
        strict = "p" not in forced
        prims = [
            t
            for t in avail
            if not isinstance(add_primary(base.nodes[t], d, strict=strict), FailMode)
        ]
        prims = _migratable(base, source, prims)
    if not d.has_secondary:
        return prims, [], set()
    strict = "s" not in forced
    secs = [
        t
        for t in avail
        if not isinstance(add_secondary(base.nodes[t], d, NO_PRIMARY, strict=strict), FailMode)
    ]
    # pairs failing only together (the peer reserve): a soft check
    forbidden = {
        (p, s)
        for s in secs
        for p, _ in base.nodes[s].peers
        if strict
        and p in prims
        and p != s
        and isinstance(add_secondary(base.nodes[s], d, p), FailMode)
    }
    return prims, secs, forbidden


def _no_way_back(state1: ClusterState, turn: ClusterState, name: str) -> bool:
    """Whether hail's steps cannot move a drbd instance in mode `all` (a node evacuation's,
    or a change-group's) at all: they fail it over to its new primary, making the node it
    was on (its primary, or its secondary when the primary is offline and was failed over
    first) its secondary for a moment, and that node refuses it even with the instance and
    every moving one before it gone (`turn`; the later ones are still there, nothing added),
    the most room it can have then: for disk, spindles or the failover memory, checks that
    only grow with what is on the node (not the N+1 check, which a node failing N+1 already
    skips)."""
    d = state1.demands[name]
    p, s = state1.locations[name]
    through = p if not state1.nodes[p].offline else s
    if d.disk_template != "drbd" or through is None:
        return False
    refused = secondary_shortfalls(turn.nodes[through], d, NO_PRIMARY)
    return any(f.kind != "n1" for f in refused)


def _evacuated(
    cur: ClusterState, name: str, mode: str, target: tuple[str, str | None]
) -> Evacuated | str:
    """The instance moved to `target` by hail's own steps for its template and mode."""
    d = cur.demands[name]
    p, s = cur.locations[name]
    tp, ts = target
    if d.disk_template == "drbd" and mode == CHANGE_ALL:
        assert s is not None and ts is not None
        return drbd_all_pair(cur.nodes, d, p, s, tp, ts, False)
    kind, to = (
        (MoveKind.REPLACE_SECONDARY, ts)
        if d.disk_template == "drbd"
        else (MoveKind.FAILOVER_TO_ANY, tp)
    )
    r = apply_move(cur.nodes, d, p, s, kind, to, force=False)
    if isinstance(r, FailMode):
        return str(r)
    return Evacuated(r.nodes, r.primary, r.secondary, (Step(kind, to),))


def _replay(
    state: ClusterState, mode: str, order: list[str], plan: Plan
) -> tuple[ClusterState, list, list] | str:
    """The plan's moves in request order through htools' moves: the cluster after, the moved
    records and the jobs; or why a step fails."""
    cur = state
    moved, jobs = [], []
    for name in order:
        if name not in plan:
            continue
        ev = _evacuated(cur, name, mode, plan[name])
        if isinstance(ev, str):
            return f"{name}: {ev}"
        cur = apply_evacuated(cur, name, ev)
        nodes = (ev.primary,) if ev.secondary is None else (ev.primary, ev.secondary)
        if cur.demands[name].disk_template != "drbd":
            nodes = (ev.primary,)
        moved.append((name, cur.nodes[ev.primary].group_uuid, nodes))
        jobs.append((name, ev.steps))
    return cur, moved, jobs


def _group_score(state: ClusterState, groups: set[str]) -> float:
    return sum(cluster_score(state, group=g) for g in sorted(groups))


def _together_score(state: ClusterState, groups: Collection[str]) -> float:
    """The cluster score of the groups' nodes taken together (the model's scope)."""
    return cluster_score(st for st in state.nodes.values() if st.group_uuid in groups)


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
    # beside it in a forked child and the narrow walk is the start (`_walk_aside`)
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
        if not _walk_aside(walk_s, total, _placement_variables(avail_of, state, mode)):
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
                partial(_narrow_walk, state1, mode, moving, avail_of),
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
        narrow = _narrow_walk(state1, mode, moving, avail_of)
        search = partial(_search_groups, narrow, state1, names, groups, search_end, enough, 1)
        aside = Aside(lambda: (None, search()))  # no walk
    plan: Plan = {}
    runs: list[SolverRun] = []
    searched: dict[str, Plan] = {}
    try:
        if hail is not None:
            start = _plan_of(hail)
        else:  # the narrow walk, if not walked before the fork already
            start = narrow if narrow is not None else _narrow_walk(state1, mode, moving, avail_of)
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


Judge = Verdict  # the checker's verdict on a plan's moves


@dataclass(frozen=True)
class _Group:
    """One group's part of a node evacuation: its instances with a choice, as batch kinds (one
    per instance, named as it), on the group without them."""

    uuid: str
    base: ClusterState
    scope: list[str]  # the group's nodes, which its score is taken over
    kinds: list[tuple[InstanceDemand, NewInstance]]
    problem: PlacementProblem  # built once, before the walk's child is forked: it inherits it

    @property
    def members(self) -> list[str]:
        return [k.name for _, k in self.kinds]


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


def _here(state1: ClusterState, name: str) -> tuple[str, str | None]:
    """Where an instance is now, as a plan's entry (shared storage has no secondary)."""
    p, s = state1.locations[name]
    return (p, s if state1.demands[name].disk_template == "drbd" else None)


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


#: A node evacuation's score bound when instances stay (the most moves are still proven).
LEFT_IN_PLACE = "no score bound: instances left in place are not in the model"
#: A node evacuation off offline nodes (htools moves with force: no N+1 check) onto a node
#: whose reserve its free memory does not cover although it does not fail N+1 as loaded, and
#: where instances may also be placed back: the model, which takes a node to fail N+1 exactly
#: when its free memory falls to the reserve, tells "nothing lands there" (the loaded flag
#: kept) from "something does" only where nothing may stay (`BatchProblem.short_of_reserve`).
FORCED = "no bound: a node taking forced moves is short of its N+1 reserve without failing N+1"


#: A node evacuation that may place back, on a node whose N+1 row it raised to hold them, the
#: instances on it, where the node fails N+1 without them as htools recomputes it but not as
#: loaded: a plan leaving the node as it is keeps the loaded flag and scores less there than
#: the model, which counts the node failing (`_n1_miscounted`).
FAILS_N1 = "no bound: a node instances may stay on fails N+1 without them but not as loaded"
#: Why a joint answer claims no bound, as its status reports it.
NO_BOUND = (LEFT_IN_PLACE, FORCED, FAILS_N1, OVERSCORED, UNDERCUT, NO_TIME_FOR_MODEL)


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


def _forced_roles(state1: ClusterState, name: str, mode: str) -> frozenset[str]:
    """The roles htools adds with force when it moves the instance (applyMoveEx: a move off
    an offline node): shared storage's new primary off an offline primary, a secondary-only
    evacuation's new secondary off an offline secondary (its primary, added back with force
    whatever the nodes, is on its node all along: `NewInstance.kept_primary`). A drbd pair in
    mode `all` is forced only on its way (a failover off an offline primary, a secondary replaced
    off an offline one): its final primary and secondary come by a failover and a replacement
    off online nodes, with every check (model/htools/evacuate.py `drbd_all_pair`)."""
    p, s = state1.locations[name]
    if state1.demands[name].disk_template != "drbd":
        return frozenset({"p"}) if state1.nodes[p].offline else frozenset()
    if mode == CHANGE_SECONDARY and s is not None and state1.nodes[s].offline:
        return frozenset({"s"})
    return frozenset()


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
        return None, _search_groups(narrow_walk(), state1, names, groups, deadline, enough, 1)
    return hail, _search_groups(_plan_of(hail), state1, names, groups, deadline, enough)


def _search_groups(
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


def _walk_aside(walk_s: float, total: float, variables: int) -> bool:
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


def _plan_of(walk: EvacSolution) -> Plan:
    """hail's walk as a plan: instance -> (primary, secondary)."""
    return {n: (nodes[0], nodes[1] if len(nodes) > 1 else None) for n, _, nodes in walk.moved}


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


def _narrow_walk(
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


def _better_moves(
    inp: IAllocatorInput,
    state: ClusterState,
    names: list[str],
    kind: str,
    joint: tuple[list, list, ClusterState],
    hail: EvacSolution | None,
    runs: list[SolverRun],
    one_by_one: Callable[[], HailAnswer],
    refused: Mapping[str, str] = {},
    *,
    why_alone: str = "proven",
    scored: set[str] | None = None,
    last: frozenset[str] = frozenset(),
    aside_note: str = "",
) -> HailAnswer:
    """The joint moves as hail's answer when they beat hail's (more instances moved, or as
    many and fewer primaries on `last` (last-resort nodes), or as many of both and a lower
    score: the sum of the scores of the groups either touches, or the score of `scored`, the
    groups the model scores, together), else `one_by_one()`. `hail` None: nothing to compare
    (`why_alone` says why); `refused` gives the reasons of instances no plan could move;
    `aside_note` ends the note (what failed beside the model)."""
    moved, jobs, after = joint
    if scored is None:  # every group either plan touches, each scored apart
        touched = {g for _, g, _ in moved} | {g for _, g, _ in (hail.moved if hail else ())}
        touched |= {state.nodes[state.locations[n][0]].group_uuid for n in names}
        score_of = partial(_group_score, groups=touched)
    else:
        score_of = partial(_together_score, groups=scored)

    def rank(moves: Sequence[tuple[str, str, tuple[str, ...]]], s: ClusterState):  # noqa: ANN202
        return (-len(moves), sum(1 for _, _, nodes in moves if nodes[0] in last), score_of(s))

    mine = rank(moved, after)
    if hail is not None:
        theirs = rank(hail.moved, hail.state or state)
        if not (mine[:2] < theirs[:2] or (mine[:2] == theirs[:2] and mine[2] < theirs[2] - 1e-9)):
            note = _note(-mine[0], mine[2], -theirs[0], theirs[2]) + aside_note
            return _kept_hails(one_by_one(), runs, note)
    reasons = {**refused, **(dict(hail.failed) if hail else {})}
    crowded = "no room left by the joint plan, which moves the most instances that fit together"
    moved_names = {n for n, _, _ in moved}
    failed = tuple((n, reasons.get(n, crowded)) for n in names if n not in moved_names)
    sol = EvacSolution(tuple(moved), failed, tuple(jobs), after)
    ans = evac_answer(kind, state, sol, False)
    check_answer(inp, ans).raise_if_failed()
    note = (
        _note(-mine[0], mine[2], -theirs[0], theirs[2])
        if hail is not None
        else f"; joint plan {-mine[0]}, score {mine[2]:.8f}; not compared: {why_alone}"
    ) + aside_note
    return HailAnswer(
        response_json(True, ans.info + run_note(tuple(runs), note), ans.result),
        kind,
        placements=tuple((n, tuple(nodes)) for n, _, nodes in moved),
        runs=tuple(runs),
        objectives={"score": mine[2], "moved": len(moved)},
    )


def _kept_hails(ans: HailAnswer, runs: list[SolverRun], note: str) -> HailAnswer:
    """hail's answer, kept because the joint model found nothing better, with the model's
    runs: started from hail's plan, their bound is a bound for it too (the gap says how far
    hail's plan can be from the best)."""
    if not runs or not ans.response:
        return ans
    line = json.loads(ans.response)
    if not line.get("success"):
        return ans
    info = line["info"].removeprefix("Request successful: ")
    if any(run.unbounded == NO_TIME_FOR_MODEL for run in runs):
        note = f"{note}; kept hail's plan, no better one found without the joint model"
    else:
        note = f"{note}; kept hail's plan, the joint model found none better"
    response = response_json(True, info + run_note(tuple(runs), note), line["result"])
    return replace(ans, response=response, runs=tuple(runs))


def _note(done: int, score: float | None, hail_done: int, hail_score: float | None) -> str:
    """What `info` adds: both plans' counts and scores (the scores of different counts are
    not comparable: more instances come first). A joint model that found no plan (its time
    ran out first) has no score."""
    mine = f"; joint plan {done}" + ("" if score is None else f", score {score:.8f}")
    if not hail_done or hail_score is None or hail_score == float("inf"):
        return f"{mine}; one by one 0"
    return f"{mine}; one by one {hail_done}, score {hail_score:.8f}"


def _run_of(options: SolverOptions, joint: JointPlan) -> SolverRun:
    return SolverRun(
        solver=options.solver,
        status=joint.status,
        gap=joint.gap,
        build_s=joint.build_s,
        solve_s=joint.solve_s,
        objective=(float(joint.placed), joint.score),
        names=("placed", "score"),
        unbounded=next((n for n in NO_BOUND if n in joint.notes), None),
    )


def _moves_judge(
    state: ClusterState,
    names: list[str],
    scored: Collection[str],
    avoid: frozenset[str] = frozenset(),
    mode: str | None = None,
) -> Callable[[Plan], tuple[float | None, list[str]]]:
    """The independent checker on a plan's moves in request order (htools' strict moves; in
    a node evacuation (`mode`) also hail's steps for them), and the score of the groups
    `scored` together after them. A node evacuation's moves never land on `avoid`
    (the nodes evacuated, offline ones): in mode `all` neither node of a moved drbd pair is
    one (htools' pairs are of the other nodes), elsewhere no node a move changes to."""

    def landing(name: str, to: tuple[str, str | None]) -> list[str]:
        now = state.locations[name]
        if mode == CHANGE_ALL:
            return [n for n in to if n is not None]
        return [n for n, old in zip(to, now, strict=True) if n is not None and n != old]

    def judge(plan: Plan) -> tuple[float | None, list[str]]:
        moves = [Move(n, *plan[n]) for n in names if n in plan]
        off = [f"{n} moves onto {t}, a node evacuated or offline" for n in names if n in plan
               for t in landing(n, plan[n]) if t in avoid]  # fmt: skip
        if off:
            return None, off
        report = check_moves(state, moves, strict=True, evacuation=True)
        if report.violations:
            return None, [str(v) for v in report.violations]
        if mode is not None:  # and hail's own steps make it (a drbd pair's steps pass through
            # states the final layout does not show)
            replay = _replay(state, mode, names, plan)
            if isinstance(replay, str):
                return None, [replay]
        after = state
        for mv in moves:
            after = after.relocated(mv.instance, mv.primary, mv.secondary)
        return _together_score(after, scored), []

    return judge


# --- change-group ------------------------------------------------------------------------------


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


def _evac_solution(ans: Answer, state: ClusterState) -> EvacSolution:
    """hail's answer (with the exact N+1 check) as the plan to beat."""
    if not ans.success:
        return EvacSolution(state=state)
    moved, failed, _jobs = ans.result
    uuid = {g.name: g.uuid for g in state.cluster.groups}
    return EvacSolution(
        tuple((name, uuid[group], tuple(nodes)) for name, group, nodes in moved),
        tuple((name, why) for name, why in failed),
        (),
        ans.state,
    )
