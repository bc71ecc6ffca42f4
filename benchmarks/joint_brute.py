"""Small generated multi-allocate and change-group requests against every plan: is the joint
answer the best one?

    python benchmarks/joint_brute.py FIRST_SEED LAST_SEED [--plans 3000] [--time-limit 20]

For each multi-allocate and change-group that tests/htools_gen.py generates in the seed range
(change-groups with one target group only: with several, hail's answer stands), every plan is
tried: each instance unplaced (not moved) or on any node (plain / shared storage) or ordered
(primary, secondary) pair of one group (drbd) it may use, the options that the checker refuses
on their own left out (adding instances only takes room away, so such an option fails in every
plan). Requests with more than `--plans` plans are skipped. A plan is feasible when

* multi-allocate: the checker (`check_allocation`, the request's group for the score, in
  request order) passes it, on the groups hail may use (the named one, else every allocable
  group; a group not N+1 redundant now by the exact check takes nothing), and every group it
  touches stays N+1 redundant by the exact check (`solvers.strategies.n1.check_cluster`);
* change-group (into the one target group): the new primary passes the target group's
  instance policy, the checker (`check_moves`, strict, as an evacuation, which holds the
  migration tags) passes the moves, htools' own change-group steps make them in request
  order (`joint._replay`), and the target group stays N+1 redundant by the exact check.

Best plan = the most instances placed (moved), then the fewest on last-resort groups
(multi-allocate), then the least score (multi-allocate: over the named group, else over the
whole cluster, as hail scores; change-group: the target group's). exalloc's answer (`answer`,
`--time-limit` seconds) is scored the same way and judged by the same feasibility test. One
line per request (seed, type, plans, best, ours, exalloc's status) and the counts at the end.
"WRONG" marks an answer worse than the best plan, or better than every feasible plan (then
the line says which test the answer fails), or one that claims "optimal" without being the
best; "beyond" marks hail's answer standing (no joint model) outside the plans above;
"RANKING" a change-group answer that is the best plan only as exalloc ranks its plan against
hail's (the score summed over the target group and the groups the instances leave).
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

import htools_gen as gen  # noqa: E402
from joint_status import status  # noqa: E402

from model.backends.iallocator import (  # noqa: E402
    IAllocatorInput,
    new_instance,
    parse_request,
)
from model.check import Move, check_allocation, check_moves  # noqa: E402
from model.htools.evacuate import CHANGE_ALL  # noqa: E402
from model.placement import _networks_ok  # noqa: E402
from model.resources import FailMode, add_primary, policy_shortfall  # noqa: E402
from model.score import cluster_score  # noqa: E402
from model.state import ClusterState, node_states  # noqa: E402
from solvers.options import SolverOptions  # noqa: E402
from solvers.strategies.iallocator import IAllocatorOptions, answer  # noqa: E402
from solvers.strategies.joint import _replay  # noqa: E402
from solvers.strategies.n1 import check_cluster  # noqa: E402

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

    def alt_key(self, plan: Plan) -> Key:
        """Another ranking to report beside `key` (the same one unless overridden)."""
        return self.key(plan)

    def best(self, alt: bool = False) -> tuple[Key, Plan, int, int]:
        """The best feasible plan (by `alt_key` with `alt`): its key, the plan, how many plans
        pass the checker and how many of the best of those the exact N+1 check was asked
        about."""
        if self._passed is None:
            self._passed = []
            for i, targets in enumerate(itertools.product(*self.options)):
                plan = {n: t for n, t in zip(self.names, targets, strict=True) if t is not None}
                key = self.check(plan)
                if key is not None:
                    self._passed.append((key, i, plan))
        passed = [(self.alt_key(p) if alt else k, i, p) for k, i, p in self._passed]
        passed.sort(key=lambda x: (x[0], x[1]))
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

    def __init__(self, inp: IAllocatorInput, state: ClusterState, target: str) -> None:
        self.state = state
        self.target = target
        req = inp.request
        self.names = list(req.instances)
        sources = {state.nodes[state.locations[n][0]].group_uuid for n in self.names}
        self.groups = sources | {target}
        group = inp.cluster.group(target)
        nodes = [n for n, st in state.nodes.items() if st.group_uuid == target and not st.offline]
        nics = {i.name: i.nics for i in inp.cluster.instances}
        self.options = []
        for name in self.names:
            d = state.demands[name]
            opts: list[Target | None] = [None]
            movable = d.disk_template not in ("plain", "file")
            if movable and group.alloc_policy != "unallocable" and _networks_ok(group, nics[name]):
                # the new primary within the target group's policy and htools' strict add (hail's
                # allocation picks the group; the checker alone would force a move off an
                # offline node, which hail's change-group does not)
                prims = [
                    p
                    for p in nodes
                    if policy_shortfall(d, state.ipolicy_of(p), state.nodes[p].exclusive_storage)
                    is None
                    and not isinstance(add_primary(state.nodes[p], d), FailMode)
                ]
                if d.disk_template == "drbd":
                    pairs = [(p, s) for p in prims for s in nodes if s != p]
                else:
                    pairs = [(p, None) for p in prims]
                opts += [t for t in pairs if not self.report({name: t}).violations]
            self.options.append(opts)

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
        return not plan or _redundant(self.after(plan), {self.target})

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
            why.append("the target group is not N+1 redundant by the exact check")
        return "; ".join(why) or "feasible"

    def ours(self, response: dict) -> Plan:
        if not response["success"]:
            return {}
        return {name: (nodes[0], nodes[1] if len(nodes) > 1 else None)
                for name, _group, nodes in response["result"][0]}  # fmt: skip

    def key(self, plan: Plan) -> Key:
        return (-len(plan), 0, cluster_score(self.after(plan), self.target))

    def alt_key(self, plan: Plan) -> Key:
        """As exalloc compares the joint plan with hail's (`joint._better_moves`): the score
        summed over the target group and the groups the instances leave."""
        after = self.after(plan)
        return (-len(plan), 0, sum(cluster_score(after, g) for g in sorted(self.groups)))


def brute_of(text: str) -> Brute | None:
    """The brute force of a request, or None when it does not apply (another type, or a
    change-group with no single target group)."""
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
    if len(pool) != 1:
        return None
    return ChangeGroupBrute(inp, state, pool[0])


def _show(key: Key) -> str:
    return f"{-key[0]}{f' ({key[1]} last-resort)' if key[1] else ''} {key[2]:.6f}"


def judge(best: Key, ours: Key) -> str:
    """'best', 'worse' or 'better' (than the best feasible plan)."""
    if ours[:2] != best[:2]:
        return "worse" if ours[:2] > best[:2] else "better"
    if ours[0] == 0 or abs(ours[2] - best[2]) <= TOL:
        return "best"
    return "worse" if ours[2] > best[2] else "better"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("first", type=int)
    p.add_argument("last", type=int)
    p.add_argument("--plans", type=int, default=3000)
    p.add_argument("--time-limit", type=float, default=20.0)
    args = p.parse_args()
    options = IAllocatorOptions(solver=SolverOptions(time_limit=args.time_limit))
    counts: collections.Counter = collections.Counter()
    for seed in range(args.first, args.last):
        data = gen.for_seed(seed)
        kind = data["request"]["type"]
        if kind not in ("multi-allocate", "change-group"):
            continue
        text = gen.dumps(data)
        brute = brute_of(text)
        if brute is None:
            counts[kind, "skipped: several target groups"] += 1
            continue
        count = brute.plans()
        if count > args.plans:
            counts[kind, f"skipped: over {args.plans} plans"] += 1
            continue
        began = time.perf_counter()
        best, best_plan, passed, asked = brute.best()
        brute_s = time.perf_counter() - began
        began = time.perf_counter()
        try:
            response = json.loads(answer(parse_request(text), options).response)
        except Exception as e:  # noqa: BLE001 - a crash is a finding, not the end of the run
            counts[kind, "CRASH"] += 1
            print(f"{seed:6d} {kind:14s} {count:5d} plans, best {_show(best)}, "
                  f"CRASH {type(e).__name__}: {e}", flush=True)  # fmt: skip
            continue
        answer_s = time.perf_counter() - began
        plan = brute.ours(response)
        ours = brute.key(plan)
        verdict = judge(best, ours)
        alt_line = ""
        if brute.kind == "change-group" and plan:
            # exalloc ranks its plan against hail's by the groups both touch
            # (`joint._better_moves`): where that ranking and the target group's disagree
            alt, alt_plan, _, _ = brute.best(alt=True)
            alt_verdict = judge(alt, brute.alt_key(plan))
            if alt_verdict != verdict:
                alt_line = (f"       by target + source groups: best {_show(alt)} "
                            f"{sorted(alt_plan.items())}, ours {_show(brute.alt_key(plan))}: "
                            f"{alt_verdict}")  # fmt: skip
                if alt_verdict == "best":
                    verdict = "ranking"
        end = status(response)
        claim = end.startswith("optimal")
        wrong = verdict == "worse" or (verdict == "better" and end != "no model")
        mark = (
            {"best": "", "ranking": "RANKING ", "better": "beyond "}[verdict]
            if not wrong
            else "WRONG "
        )
        outcome = "best plan" if verdict == "best" else mark.strip()
        counts[kind, f"{outcome}: {end.split(',')[0]}"] += 1
        print(f"{seed:6d} {kind:14s} {count:5d} plans ({passed} pass, {asked} N+1), "
              f"best {_show(best)}, ours {_show(ours)} {mark}"
              f"{'(claims optimal) ' if claim else ''}{end} [{brute_s:.1f}+{answer_s:.1f} s]",
              flush=True)  # fmt: skip
        if alt_line:
            print(alt_line)
        if verdict != "best":
            print(f"       ours: {sorted(plan.items())}: {brute.why_not(plan)}")
            print(f"       best: {sorted(best_plan.items())}")
            print(f"       info: {response['info']}", flush=True)
    for key, n in sorted(counts.items()):
        print(f"{n:4d} {key[0]} {key[1]}")


if __name__ == "__main__":
    main()
