"""hail's dedicated (exclusive-storage) allocation: candidates, failure counts, group choice and
texts (Dedicated.hs; docs/htools-facts.md §3, docs/hail.md "Dedicated allocation").

The domain half of the exact dedicated allocator: which nodes (pairs) pass the policy and the
strict adds, how hail counts failures and successes, how it picks a group and words its
answer. The exact choice among the candidates is solvers/strategies/dedicated.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from model.backends.iallocator_response import format_failure_counts
from model.batch import NewInstance, NodeData
from model.capacity import capacity_rows
from model.check import CheckReport, check_allocation
from model.cluster import Cluster, NodeGroup
from model.dedicated import format_metric, minimal_instances, vector_of
from model.dedicated import test_usage as row_test_usage
from model.htools.allocate import networks_ok
from model.htools.answer import SolverRun
from model.policy import policy_shortfall
from model.resources import FailMode, InstanceDemand, NodeState, add_primary, add_secondary
from model.state import ClusterState

POLICY_ORDER = {"preferred": 0, "last_resort": 1, "unallocable": 2}

NO_PRIMARY = ""  # a primary name no node has: the secondary's peer reservation is 0


@dataclass(frozen=True)
class GroupOutcome:
    """One group's answer to one instance, as hail's AllocSolution."""

    group: NodeGroup
    error: str | None = None  # hail's `Bad` for the group (network, no online nodes)
    failures: Counter = field(default_factory=Counter)
    successes: int = 0
    nodes: tuple[str, ...] = ()  # chosen primary [, secondary]
    lost: tuple[int, ...] = ()
    disk_mib: int = 0
    run: SolverRun | None = None

    @property
    def solved(self) -> bool:
        return bool(self.nodes)

    def description(self) -> str:
        """hail's `genericDescribeSolution` (without the `Group ...:` prefix)."""
        n_fail = sum(self.failures.values())
        reasons = format_failure_counts({str(k): v for k, v in self.failures.items()})
        if not self.solved:
            return "No valid allocation solutions, failure reasons: " + (
                reasons if n_fail else "unknown reasons"
            )
        return (
            f"score: {format_metric(self.lost, self.disk_mib)}, successes {self.successes}, "
            f"failures {n_fail} ({reasons}) for node(s) {'/'.join(self.nodes)}"
        )

    def message(self) -> str:
        """hail's `solutionDescription`: the group-prefixed line."""
        if self.error is not None:
            return f"Group {self.group.name}: error {self.error}"
        return f"Group {self.group.name} ({self.group.alloc_policy}): {self.description()}"


def is_dedicated(cluster: Cluster, group_name: str | None) -> bool:
    """`Dedicated.isDedicated`: every node of the requested (or every allocatable) group has
    exclusive storage; vacuously true for an empty cluster."""
    if group_name is None:
        wanted = {g.uuid for g in cluster.groups if g.alloc_policy != "unallocable"}
    else:
        wanted = {g.uuid for g in cluster.groups if g.name == group_name}
    return all(n.exclusive_storage for n in cluster.nodes if n.group_uuid in wanted)


@dataclass(frozen=True)
class Screen:
    """Every candidate of one group for one instance, as hail enumerates them."""

    group: NodeGroup
    error: str | None
    tests: tuple[InstanceDemand, ...]
    candidates: tuple[str, ...]  # online nodes of the group, in index order
    primary: Mapping[str, NodeState | FailMode]  # after addPri, or its failure
    secondary: Mapping[str, NodeState | FailMode]  # after addSec with no peer reservation
    secondary_with: Mapping[str, Mapping[str, NodeState | FailMode]]  # s -> p -> after
    failures: Counter
    successes: int


def screen(
    states: ClusterState,
    group: NodeGroup,
    d: InstanceDemand,
    required_nodes: int,
    nics: Sequence[Mapping[str, Any]],
    restrict: Sequence[str] | None = None,
) -> Screen:
    """Policy check, strict addPri (and addSec) per candidate, hail's failure counting."""
    cluster = states.cluster
    tests = minimal_instances(group.ipolicy)
    if not networks_ok(group, nics):
        msg = f"The group {group.name} is not connected to a network required by instance {d.name}"
        return Screen(group, msg, tests, (), {}, {}, {}, Counter(), 0)
    cands = tuple(
        n.name
        for n in cluster.nodes
        if n.group_uuid == group.uuid and not n.offline and (restrict is None or n.name in restrict)
    )
    if required_nodes not in (1, 2):
        return Screen(
            group,
            "Unsupported number of nodes, only one or two  supported",
            tests,
            (),
            {},
            {},
            {},
            Counter(),
            0,
        )
    if required_nodes == 1 and not cands:
        return Screen(group, "No online nodes", tests, (), {}, {}, {}, Counter(), 0)
    if required_nodes == 2 and len(cands) < 2:
        return Screen(group, "Not enough online nodes", tests, (), {}, {}, {}, Counter(), 0)
    failures: Counter = Counter()
    primary: dict[str, NodeState | FailMode] = {}
    # the policy verdict depends on the node only through its exclusive-storage flag
    verdict = {e: policy_shortfall(d, group.ipolicy, e) for e in (False, True)}
    for p in cands:
        st = states.nodes[p]
        fail = verdict[st.exclusive_storage]
        primary[p] = fail if fail is not None else add_primary(st, d)
    if required_nodes == 1:
        for p in cands:
            if isinstance(primary[p], FailMode):
                failures[primary[p]] += 1
        ok = sum(1 for p in cands if not isinstance(primary[p], FailMode))
        return Screen(group, None, tests, cands, primary, {}, {}, failures, ok)
    secondary: dict[str, NodeState | FailMode] = {}
    secondary_with: dict[str, dict[str, NodeState | FailMode]] = {}
    cand_set = set(cands)
    for s in cands:
        st = states.nodes[s]
        secondary[s] = add_secondary(st, d, NO_PRIMARY)
        special = {p: add_secondary(st, d, p) for p, _ in st.peers if p in cand_set and p != s}
        if special:
            secondary_with[s] = special
    # count pairs (p, s), p != s, without enumerating all of them
    generic = Counter(
        (v if isinstance(v, FailMode) else None) for v in secondary.values()
    )  # None counts successes
    reserved_for: dict[str, list[str]] = {}  # p -> secondaries holding a reservation for p
    for s, special in secondary_with.items():
        for p in special:
            reserved_for.setdefault(p, []).append(s)
    successes = 0
    n_other = len(cands) - 1
    for p in cands:
        if isinstance(primary[p], FailMode):
            failures[primary[p]] += n_other
            continue
        per = generic.copy()
        own = secondary[p]
        per[own if isinstance(own, FailMode) else None] -= 1
        for s in reserved_for.get(p, ()):
            g, sp = secondary[s], secondary_with[s][p]
            per[g if isinstance(g, FailMode) else None] -= 1
            per[sp if isinstance(sp, FailMode) else None] += 1
        successes += per.pop(None, 0)
        failures.update({k: v for k, v in per.items() if v})
    return Screen(
        group, None, tests, cands, primary, secondary, secondary_with, failures, successes
    )


def lost_of(before: tuple[int, ...], after: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(b - a for b, a in zip(before, after, strict=True))


def groups_with_nodes(cluster: Cluster) -> list[NodeGroup]:
    used = {n.group_uuid for n in cluster.nodes}
    return [g for g in cluster.groups if g.uuid in used]


def find_group(cluster: Cluster, name: str) -> NodeGroup | None:
    found = [g for g in cluster.groups if g.name == name]
    return found[0] if len(found) == 1 else None


def best_group(outcomes: Sequence[GroupOutcome]) -> GroupOutcome | None:
    """hail's filterMGResults + sortMGResults: (policy, metric), ties to the later group."""
    good = [
        o
        for o in outcomes
        if o.error is None and o.solved and o.group.alloc_policy != "unallocable"
    ]
    good.reverse()
    good.sort(key=lambda o: (POLICY_ORDER.get(o.group.alloc_policy, 3), (list(o.lost), o.disk_mib)))
    return good[0] if good else None


def check_local(states: ClusterState, placements: Sequence[tuple]) -> CheckReport:
    """The independent checker on the nodes the answer uses.

    Every check of a placement (policy, strict addPri/addSec, node usability) and the lost
    allocations only involve the nodes it uses, so the verdict is the checker's on the whole
    cluster; leaving the other nodes out skips the cluster-wide vector sums and score, which
    cost a second at 1 000 nodes.
    """
    used = {n for _, p, s in placements for n in (p, s) if n is not None}
    view = replace(states, nodes={n: st for n, st in states.nodes.items() if n in used})
    return check_allocation(view, placements)


def shown_objectives(obj: Mapping[str, Any]) -> dict[str, Any]:
    keys = (
        "lost_allocations_total",
        "remaining_disk_mib",
        "allocation_vector_before",
        "allocation_vector_after",
        "placement_metrics",
    )
    return {k: obj[k] for k in keys if k in obj}


def node_data(states: ClusterState, name: str, rank: int) -> NodeData:
    st = states.nodes[name]
    group = states.cluster.group_of(states.cluster.node(name))
    tests = minimal_instances(group.ipolicy)
    rows = capacity_rows(st)
    return NodeData(
        name=name,
        rank=rank,
        group=group.uuid,
        rows=rows,
        reserve_mib=st.reserved_memory_mib,
        peers_mib=dict(st.peers),
        free_disk_mib=st.free_disk_mib,
        before=vector_of(tests)(st),
        test_usage=tuple({r.kind: row_test_usage(r.kind, t) for r in rows} for t in tests),
        fails_n1=st.fail_n1,
        unallocated_mib=st.unallocated_memory_mib,
        free_memory_forth_mib=st.free_memory_forth_mib,
    )


def interchangeable(data: Mapping[str, NodeData], instances: tuple[NewInstance, ...]) -> set[str]:
    """The nodes the batch model needs.

    Two nodes are interchangeable when they have the same group, capacities, reserve, counts
    and candidacy for every instance, and no drbd failover reservation names them: swapping
    their loads changes no constraint and no objective. A batch of J instances uses at most
    J (2J with drbd) nodes of a class, so the rest of the class is left out: exact, and it
    removes most of the symmetry of homogeneous dedicated groups. (Ordering the loads within
    a class as well made HiGHS much slower to find full batches, so that is not done.)
    """
    drbd = any(i.drbd for i in instances)
    named = {p for d in data.values() for p in d.peers_mib} if drbd else set()
    prim = [set(i.primaries) for i in instances]
    sec = [set(i.secondaries) for i in instances]
    per_class: dict[tuple, list[str]] = {}
    for n, d in data.items():
        key = (
            d.group,
            d.rows,
            d.reserve_mib,
            tuple(sorted(d.peers_mib.items())) if drbd else (),
            d.fails_n1,
            d.unallocated_mib,
            d.free_memory_forth_mib,
            d.free_disk_mib,
            d.before,
            tuple(tuple(sorted(t.items())) for t in d.test_usage),
            tuple(n in p for p in prim),
            tuple(n in s for s in sec),
            n if n in named else "",
        )
        per_class.setdefault(key, []).append(n)
    limit = sum(i.count for i in instances) * (2 if drbd else 1)
    kept: set[str] = set()
    for members in per_class.values():
        kept.update(sorted(members, key=lambda n: data[n].rank)[:limit])
    return kept
