"""Joint placement of new instances on normal groups: multi-allocate (docs/placement.md,
docs/hail.md "Multi-allocate"), and what every joint answer shares: the exact N+1 of the groups a
plan touches, how a kept hail plan carries the model's runs, the note `info` adds.

hail places a batch one instance at a time. With `--capacity-checks exact`, exalloc places it
jointly: its one-by-one answer (htools' algorithm with the exact N+1 check) is computed first
and handed to the joint model as the plan to beat; the joint model maximises the instances
placed, then minimises those on last-resort groups, then the cluster score after the whole
batch (solvers/strategies/placement.py), and every plan it keeps leaves the groups it touches N+1
redundant by the exact check. The better of the two plans, as the checker ranks them, is the
answer, so it is never worse than the one-by-one batch.

Moving instances that exist is joint_moves.py (what node-evacuate and change-group share),
joint_evacuate.py, joint_search.py (hail's walk and the search beside the model) and
joint_change_group.py. The joint_* modules share their underscore helpers with each other.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from model.backends.iallocator import IAllocatorInput, MultiAllocateRequest, new_instance
from model.backends.iallocator_response import multi_allocate_response, response_json
from model.check import check_allocation
from model.cluster import NodeGroup
from model.htools.answer import HailAnswer, SolverRun, solver_note
from model.placement import candidates, placement_problem
from model.placement import new_instance as batch_item
from model.resources import (
    InstanceDemand,
)
from model.state import ClusterState, node_states
from solvers.options import SolverOptions
from solvers.strategies.n1 import NodeVerdict, decide, still_valid
from solvers.strategies.placement import (
    NO_TIME_FOR_MODEL,
    OVERSCORED,
    UNDERCUT,
    JointPlan,
    Plan,
    place_jointly,
)

#: Time the joint model gets when no --time-limit is given: an iallocator must answer.
DEFAULT_SECONDS = 20.0

#: Kept back from the joint model's solves under a time limit, a second and a share of the
#: time left: the checker's ranking of both plans after it (0.2 s for 50 instances on 200
#: nodes, load 5) and what the last round does past its solve's limit (reading the plan,
#: its exact N+1 check: 0.9 s of a 16.4 s budget there).
CHECK_RESERVE_S = 0.5
CHECK_RESERVE_SHARE = 0.05


class OutOfTime(Exception):
    """The deadline passed while the base verdicts were being decided (`GroupRedundancy`)."""


@dataclass
class GroupRedundancy:
    """Exact N+1 of the groups a plan touches, re-deciding only what the plan can affect.
    `known`: verdicts already decided on a state equal to `base` (hail's walk decided every
    node of the group before its first step: 2.3 s on 200 nodes, decided twice before);
    `until` (time.perf_counter()): no base verdict is decided past it (`OutOfTime`)."""

    base: ClusterState
    options: SolverOptions
    known: Mapping[str, NodeVerdict] = field(default_factory=dict)
    until: float | None = None

    def __post_init__(self) -> None:
        self._verdicts: dict = dict(self.known)

    def _base(self, node: str):  # noqa: ANN202
        if node not in self._verdicts:
            if self.until is not None and time.perf_counter() >= self.until:
                raise OutOfTime
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
    inp: IAllocatorInput,
    one_by_one: HailAnswer,
    options: SolverOptions,
    known: tuple[ClusterState, Mapping[str, NodeVerdict]] | None = None,
) -> HailAnswer:
    """The joint answer, or `one_by_one` when the joint model finds nothing better; every
    group the plan touches stays N+1 redundant by the exact check. `known`: a state and
    the verdicts hail's walk decided on it, reused where the state is the request's."""
    req = inp.request
    assert isinstance(req, MultiAllocateRequest)
    state = node_states(inp.cluster)
    if any(r.name in state.demands for r in req.instances):
        return one_by_one  # hail's own words for clashing names
    # the work before the model stops when the time left is gone (issue 40: 50 instances on
    # 200 nodes spent 9 s of a 10 s limit here on a loaded machine, then built the model)
    until = None if options.time_limit is None else time.perf_counter() + options.time_limit
    groups = _groups(inp, req)
    same = known is not None and known[0].nodes == state.nodes
    redundancy = GroupRedundancy(state, options, known[1] if same else {}, until)
    try:
        # a group that is not redundant refuses every placement (as hail's check does)
        usable = [g for g in groups if redundancy.redundant_group(g.uuid)]
    except OutOfTime:
        return out_of_time(one_by_one)
    redundancy.until = None  # the plans' checks below run in the model's own time
    demands: dict[str, InstanceDemand] = {}
    kinds = []
    alone: set[str] = set()  # instances some node could take on its own
    for order, r in enumerate(req.instances):
        if until is not None and time.perf_counter() >= until:
            return out_of_time(one_by_one)
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
    problem = placement_problem(state, kinds, scope, last_resort=last, until=until)
    if problem is None:
        return out_of_time(one_by_one)
    if until is None:
        budget = options.within(DEFAULT_SECONDS)
    else:  # what the candidates and deltas left (they were counted twice: 30 s took 34 s)
        left = until - time.perf_counter()
        budget = options.within(max(left - CHECK_RESERVE_S - CHECK_RESERVE_SHARE * left, 0.05))

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
        response_json(True, info, result),
        "multi-allocate",
        placements=tuple((n, tuple(nodes)) for n, nodes in allocated),
        runs=(run,),
        objectives={"score": joint.score, "score_bound": joint.bound, "placed": joint.placed},
        note=solver_note((run,), note),
    )


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


def out_of_time(one_by_one: HailAnswer) -> HailAnswer:
    """hail's plan, unproven: the time limit ran out before the joint model was built."""
    return replace(
        one_by_one, note="the time limit ran out before the joint model; kept hail's plan"
    )


def _kept_hails(ans: HailAnswer, runs: list[SolverRun], note: str) -> HailAnswer:
    """hail's answer, kept because the joint model found nothing better, with the model's
    runs: started from hail's plan, their bound is a bound for it too (the gap says how far
    hail's plan can be from the best)."""
    if not runs or not ans.response or not json.loads(ans.response).get("success"):
        return ans
    if any(run.unbounded == NO_TIME_FOR_MODEL for run in runs):
        note = f"{note}; kept hail's plan, no better one found without the joint model"
    else:
        note = f"{note}; kept hail's plan, the joint model found none better"
    return replace(ans, runs=tuple(runs), note=solver_note(runs, note))


def _note(done: int, score: float | None, hail_done: int, hail_score: float | None) -> str:
    """What the solver's note adds: both plans' counts and scores (the scores of different
    counts are not comparable: more instances come first). A joint model that found no plan
    (its time ran out first) has no score."""
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
