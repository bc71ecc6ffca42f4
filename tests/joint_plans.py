"""Every plan of a small multi-allocate or change-group, for the joint answer to be judged
against (benchmarks/joint_brute.py, tests/test_joint.py).

multi-allocate: each instance unplaced or on any node (pair) of a group hail may use, kept when
the checker passes the plan in request order and every group it touches stays N+1 redundant by
the exact check; ranked by the most placed, the fewest on last-resort groups, the least score
(the named group's, else the whole cluster's, as hail scores). change-group: each instance
unmoved or on a node (pair) of an allocable target group that hail's allocation admits (the
policy, a strict add; a move off an offline primary forced, held to the hard checks), kept when
the checker passes the moves, htools' change-group steps make them and every target group
touched stays N+1 redundant; ranked by the most moved, the fewest on last-resort groups, then
the target groups' score together.
"""

from __future__ import annotations

import itertools

from model.backends.iallocator import IAllocatorInput, new_instance, parse_request
from model.check import Move, check_allocation, check_moves
from model.htools.evacuate import CHANGE_ALL
from model.placement import _networks_ok
from model.policy import policy_shortfall
from model.resources import FailMode, add_primary
from model.score import cluster_score
from model.state import ClusterState, node_states
from solvers.strategies.joint_moves import _replay
from solvers.strategies.n1 import check_cluster

Target = tuple[str, str | None]
Plan = dict[str, Target]
#: how a plan ranks, smaller is better: (-placed, on last-resort groups, score)
Key = tuple[int, int, float]
TOL = 1e-6


def _redundant(state: ClusterState, groups: set[str]) -> bool:
    """Every node of each group can fail, by the exact N+1 check (undecided: no)."""
    if not groups:
        return True
    return check_cluster(state, groups=sorted(groups)).redundant is True


class Brute:
    """One request's options per instance and its feasibility test."""

    kind: str
    names: list[str]
    options: list[list[Target | None]]
    _passed: list[tuple[Key, int, Plan]] | None = None

    def plans(self) -> int:
        count = 1
        for opts in self.options:
            count *= len(opts)
        return count

    def check(self, plan: Plan) -> Key | None:
        """The plan's key when the checker passes it (no N+1 check yet), else None."""
        raise NotImplementedError

    def n1_ok(self, plan: Plan) -> bool:
        raise NotImplementedError

    def why_not(self, plan: Plan) -> str:
        raise NotImplementedError

    def best(self) -> tuple[Key, Plan, int, int]:
        """The best feasible plan: its key, the plan, how many plans
        pass the checker and how many of the best of those the exact N+1 check was asked
        about."""
        if self._passed is None:
            self._passed = []
            for i, targets in enumerate(itertools.product(*self.options)):
                plan = {n: t for n, t in zip(self.names, targets, strict=True) if t is not None}
                key = self.check(plan)
                if key is not None:
                    self._passed.append((key, i, plan))
        passed = sorted(self._passed, key=lambda x: (x[0], x[1]))
        for asked, (key, _, plan) in enumerate(passed, 1):
            if self.n1_ok(plan):
                return key, plan, len(passed), asked
        raise AssertionError("the empty plan is always feasible")


class MultiBrute(Brute):
    kind = "multi-allocate"

    def __init__(self, inp: IAllocatorInput, state: ClusterState) -> None:
        req = inp.request
        cluster = inp.cluster
        self.state = state
        self.group = req.group_name
        if req.group_name is not None:
            groups = [g for g in cluster.groups if g.name == req.group_name]
        else:
            groups = [g for g in cluster.groups if g.alloc_policy != "unallocable"]
        # a group not N+1 redundant now takes nothing (hail's check refuses it)
        self.usable = [g for g in groups if _redundant(state, {g.uuid})]
        self.last = {
            n
            for n, st in state.nodes.items()
            if cluster.group(st.group_uuid).alloc_policy == "last_resort"
        }
        self.names = [r.name for r in req.instances]
        self.demands = {r.name: state.demand(new_instance(r)) for r in req.instances}
        self.options = []
        for r in req.instances:
            d = self.demands[r.name]
            nodes = [
                n
                for n, st in state.nodes.items()
                if not st.offline
                and any(g.uuid == st.group_uuid and _networks_ok(g, r.nics) for g in self.usable)
                and (r.restrict_to_nodes is None or n in r.restrict_to_nodes)
            ]
            if d.has_secondary:
                pairs = [
                    (p, s)
                    for p in nodes
                    for s in nodes
                    if p != s and state.nodes[p].group_uuid == state.nodes[s].group_uuid
                ]
            else:
                pairs = [(p, None) for p in nodes]
            self.options.append([None, *(t for t in pairs if self.check({r.name: t}))])

    def report(self, plan: Plan):  # noqa: ANN201
        placements = [(self.demands[n], *plan[n]) for n in self.names if n in plan]
        return check_allocation(
            self.state, placements, group=self.group, requested_group=self.group
        )

    def check(self, plan: Plan) -> Key | None:
        report = self.report(plan)
        if report.violations:
            return None
        on_last = sum(1 for p, _ in plan.values() if p in self.last)
        return (-len(plan), on_last, report.objectives["score"])

    def after(self, plan: Plan) -> ClusterState:
        after = self.state
        for n in self.names:
            if n in plan:
                after = after.placed(self.demands[n], *plan[n])
        return after

    def n1_ok(self, plan: Plan) -> bool:
        touched = {self.state.nodes[p].group_uuid for p, _ in plan.values()}
        return _redundant(self.after(plan), touched)

    def why_not(self, plan: Plan) -> str:
        usable = {g.uuid for g in self.usable}
        off = [n for n, (p, _) in plan.items() if self.state.nodes[p].group_uuid not in usable]
        if off:
            return f"placed outside the usable groups: {off}"
        report = self.report(plan)
        if report.violations:
            return "checker: " + "; ".join(map(str, report.violations))
        if not self.n1_ok(plan):
            return "a touched group is not N+1 redundant by the exact check"
        return "feasible"

    def ours(self, response: dict) -> Plan:
        if not response["success"]:
            return {}
        return {name: (nodes[0], nodes[1] if len(nodes) > 1 else None)
                for name, nodes in response["result"][0]}  # fmt: skip

    def key(self, plan: Plan) -> Key:
        """The key of any plan (feasible or not): its count, last-resort count and score."""
        on_last = sum(1 for p, _ in plan.values() if p in self.last)
        return (-len(plan), on_last, cluster_score(self.after(plan), self.group))


class ChangeGroupBrute(Brute):
    kind = "change-group"

    def __init__(self, inp: IAllocatorInput, state: ClusterState, targets: list[str]) -> None:
        self.state = state
        req = inp.request
        self.names = list(req.instances)
        # htools' allocation drops unallocable groups and ranks last-resort ones last
        groups = [inp.cluster.group(u) for u in targets]
        groups = [g for g in groups if g.alloc_policy != "unallocable"]
        self.targets = {g.uuid for g in groups}
        self.last = {
            n
            for n, st in state.nodes.items()
            if st.group_uuid in self.targets
            and inp.cluster.group(st.group_uuid).alloc_policy == "last_resort"
        }
        nics = {i.name: i.nics for i in inp.cluster.instances}
        self.options = []
        for name in self.names:
            d = state.demands[name]
            opts: list[Target | None] = [None]
            if d.disk_template not in ("plain", "file"):
                for group in groups:
                    if _networks_ok(group, nics[name]):
                        opts += self._into(name, group.uuid)
            self.options.append(opts)

    def _into(self, name: str, uuid: str) -> list[Target]:
        """Where hail's allocation may move the instance in group `uuid`: the new primary
        within the group's policy and htools' strict add; off an offline primary a
        shared-storage move is forced (applyMoveEx), the new primary held to the hard checks
        alone, once the allocation finds the group a node."""
        state = self.state
        d = state.demands[name]
        nodes = [n for n, st in state.nodes.items() if st.group_uuid == uuid and not st.offline]
        prims = [
            p
            for p in nodes
            if policy_shortfall(d, state.ipolicy_of(p), state.nodes[p].exclusive_storage) is None
            and not isinstance(add_primary(state.nodes[p], d), FailMode)
        ]
        source = state.nodes[state.locations[name][0]]
        if prims and source.offline and d.disk_template != "drbd":
            prims = [
                p
                for p in nodes
                if not isinstance(add_primary(state.nodes[p], d, strict=False), FailMode)
            ]
        if d.disk_template == "drbd":
            pairs = [(p, s) for p in prims for s in nodes if s != p]
        else:
            pairs = [(p, None) for p in prims]
        return [t for t in pairs if not self.report({name: t}).violations]

    def moves(self, plan: Plan) -> list[Move]:
        return [Move(n, *plan[n]) for n in self.names if n in plan]

    def report(self, plan: Plan):  # noqa: ANN201
        return check_moves(self.state, self.moves(plan), strict=True, evacuation=True)

    def after(self, plan: Plan) -> ClusterState:
        after = self.state
        for mv in self.moves(plan):
            after = after.relocated(mv.instance, mv.primary, mv.secondary)
        return after

    def check(self, plan: Plan) -> Key | None:
        if self.report(plan).violations:
            return None
        if isinstance(_replay(self.state, CHANGE_ALL, self.names, plan), str):
            return None
        return self.key(plan)

    def n1_ok(self, plan: Plan) -> bool:
        touched = {self.state.nodes[p].group_uuid for p, _ in plan.values()}
        return _redundant(self.after(plan), touched)

    def why_not(self, plan: Plan) -> str:
        allowed = {n: set(o) for n, o in zip(self.names, self.options, strict=True)}
        outside = [n for n, t in plan.items() if t not in allowed.get(n, ())]
        why = []
        if outside:
            why.append(f"not an option (policy, group or checker alone): {outside}")
        report = self.report(plan)
        if report.violations:
            why.append("checker: " + "; ".join(map(str, report.violations)))
        replay = _replay(self.state, CHANGE_ALL, self.names, plan)
        if isinstance(replay, str):
            why.append(f"htools' steps: {replay}")
        if plan and not self.n1_ok(plan):
            why.append("a target group is not N+1 redundant by the exact check")
        return "; ".join(why) or "feasible"

    def ours(self, response: dict) -> Plan:
        if not response["success"]:
            return {}
        return {name: (nodes[0], nodes[1] if len(nodes) > 1 else None)
                for name, _group, nodes in response["result"][0]}  # fmt: skip

    def key(self, plan: Plan) -> Key:
        """The most moved, the fewest on last-resort groups, the target groups' score together."""
        on_last = sum(1 for p, _ in plan.values() if p in self.last)
        after = self.after(plan)
        nodes = (st for st in after.nodes.values() if st.group_uuid in self.targets)
        return (-len(plan), on_last, cluster_score(nodes))


def brute_of(text: str) -> Brute | None:
    """The brute force of a request, or None when it does not apply (another type, or a
    change-group with no target group)."""
    inp = parse_request(text)
    state = node_states(inp.cluster)
    kind = inp.request.type
    if kind == "multi-allocate":
        return MultiBrute(inp, state)
    if kind != "change-group":
        return None
    req = inp.request
    names = list(req.instances)
    sources = {state.nodes[state.locations[n][0]].group_uuid for n in names}
    pool = list(req.target_group_uuids or [g.uuid for g in inp.cluster.groups])
    pool = [u for u in dict.fromkeys(pool) if u not in sources]
    if not pool:
        return None
    return ChangeGroupBrute(inp, state, pool)


def show(key: Key) -> str:
    return f"{-key[0]}{f' ({key[1]} last-resort)' if key[1] else ''} {key[2]:.6f}"


def judge(best: Key, ours: Key) -> str:
    """'best', 'worse' or 'better' (than the best feasible plan)."""
    if ours[:2] != best[:2]:
        return "worse" if ours[:2] > best[:2] else "better"
    if ours[0] == 0 or abs(ours[2] - best[2]) <= TOL:
        return "best"
    return "worse" if ours[2] > best[2] else "better"
