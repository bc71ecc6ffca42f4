"""Joint placements on normal groups, as plain data (docs/placement.md).

hail places or moves instances one at a time, each where the cluster score is lowest right
then. exalloc places a whole batch (multi-allocate) or re-places a set of instances (node
evacuation, change of group) jointly: most instances first, then the lowest cluster score after
the whole plan. This module turns a cluster state and the instances into the data the model
needs (formulations/placement.py), all of it read off htools' own arithmetic:

* which nodes each instance may use: the group's policy and the strict adds of
  `model.resources` for the instance alone (hail's candidates);
* the capacity rows of every candidate node (`model.capacity`), which the batch as a whole must
  respect, with drbd's failover reservation on secondaries as in the dedicated batch model;
* how each placement changes each score metric of `model.score` on each node: the metric's value
  after the strict add minus before. Every per-node value htools scores is additive over
  instances added to a node (memory, disk and vCPU ratios, loads, spindles, N+1 counts), except
  the N+1 reserve of a drbd secondary, which the model carries as its own variable.

The score is Σ_k w_k · sd_k(values) + Σ linear terms (`model.score`). Each standard deviation is a
convex function of the per-node values, so the model bounds it from below by tangent planes
(`tangent`), and the solve strategy adds planes at each solution until the bound meets the score
the checker computes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from model.capacity import CapacityRow, capacity_rows, primary_usage, secondary_usage
from model.cluster import NodeGroup
from model.resources import (
    FailMode,
    InstanceDemand,
    NodeState,
    add_primary,
    add_secondary,
    apply_primary,
    apply_secondary,
    policy_shortfall,
)
from model.score import METRICS, Metric
from model.state import ClusterState

#: The score's standard-deviation metrics that placements change, in `model.score` order.
#: reserved_mem_cv is handled apart (the reserve is a variable of the model).
RESERVED = "reserved_mem_cv"
RESERVED_TOTAL = "reserved_mem_rtotal"
SD_METRICS: tuple[Metric, ...] = tuple(
    m for m in METRICS if m.aggregation == "sd" and m.online and m.name != RESERVED
)
#: Summed metrics whose per-node value placements change additively.
SUM_METRICS: tuple[Metric, ...] = tuple(
    m
    for m in METRICS
    if m.aggregation == "sum" and m.online and m.name != RESERVED_TOTAL and m.value is not None
)
NO_PRIMARY = ""  # a primary no node has: a secondary's generic failover reservation


def _values(metrics: Sequence[Metric], st: NodeState) -> tuple[float, ...]:
    return tuple(float(m.value(st)) for m in metrics)  # type: ignore[misc]


def _delta(metrics: Sequence[Metric], before: NodeState, after: NodeState) -> tuple[float, ...]:
    return tuple(
        a - b for a, b in zip(_values(metrics, after), _values(metrics, before), strict=True)
    )


@dataclass(frozen=True)
class PlacementNode:
    """A node as the joint model sees it."""

    name: str
    rank: int  # position in the cluster (hail's iteration order)
    group: str
    scored: bool  # counts in the score (online and in the score's scope)
    rows: tuple[CapacityRow, ...]
    reserve_mib: int  # the N+1 reserve rMem now
    peers_mib: Mapping[str, int]  # failover memory reserved per primary node now
    fails_n1: bool
    unallocated_mib: int
    free_memory_forth_mib: int
    total_memory_mib: float
    sd_values: tuple[float, ...]  # each SD_METRICS value now
    sum_values: tuple[float, ...]  # each SUM_METRICS value now


@dataclass(frozen=True)
class PlacementItem:
    """An instance to place (or a kind of `count` identical ones) and what each of its
    placements does; every candidate passed hail's checks for it alone."""

    name: str
    drbd: bool
    primaries: tuple[str, ...]
    secondaries: tuple[str, ...] = ()
    forbidden_pairs: frozenset[tuple[str, str]] = frozenset()
    primary_usage: Mapping[str, int] = field(default_factory=dict)  # per row kind
    secondary_usage: Mapping[str, int] = field(default_factory=dict)
    failover_mib: int = 0
    forthcoming: bool = False
    exclusion_tags: tuple[str, ...] = ()
    count: int = 1
    # node -> change of every SD_METRICS / SUM_METRICS value when it takes the role
    primary_sd: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    primary_sum: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    secondary_sd: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    secondary_sum: Mapping[str, tuple[float, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class PlacementProblem:
    nodes: tuple[PlacementNode, ...]
    items: tuple[PlacementItem, ...]
    last_resort: frozenset[str] = frozenset()  # nodes of last-resort groups (used last)

    @property
    def scored_nodes(self) -> int:
        return sum(1 for n in self.nodes if n.scored)


def _networks_ok(group: NodeGroup, nics: Sequence[Mapping]) -> bool:
    return all(nic.get("network") in (None, *group.networks) for nic in nics)


def candidates(
    state: ClusterState,
    d: InstanceDemand,
    groups: Sequence[NodeGroup],
    restrict: Sequence[str] | None = None,
) -> tuple[list[str], list[str], set[tuple[str, str]]]:
    """hail's candidates for one instance: primaries passing the policy and the strict add,
    secondaries passing the generic strict add, and the pairs that fail only together (the
    secondary already reserving memory for that primary)."""
    wanted = {g.uuid for g in groups}
    online = [
        n
        for n, st in state.nodes.items()
        if st.group_uuid in wanted and not st.offline and (restrict is None or n in restrict)
    ]
    prims = []
    for n in online:
        st = state.nodes[n]
        policy = state.ipolicy_of(n)
        if policy_shortfall(d, policy, st.exclusive_storage) is None and not isinstance(
            add_primary(st, d), FailMode
        ):
            prims.append(n)
    if not d.has_secondary:
        return prims, [], set()
    secs = [
        n for n in online if not isinstance(add_secondary(state.nodes[n], d, NO_PRIMARY), FailMode)
    ]
    forbidden = {
        (p, s)
        for s in secs
        for p, _ in state.nodes[s].peers
        if p in prims and p != s and isinstance(add_secondary(state.nodes[s], d, p), FailMode)
    }
    return prims, secs, forbidden


def placement_node(state: ClusterState, name: str, rank: int, scored: bool) -> PlacementNode:
    st = state.nodes[name]
    return PlacementNode(
        name=name,
        rank=rank,
        group=st.group_uuid,
        scored=scored and not st.offline,
        rows=capacity_rows(st),
        reserve_mib=st.reserved_memory_mib,
        peers_mib=dict(st.peers),
        fails_n1=st.fail_n1,
        unallocated_mib=st.unallocated_memory_mib,
        free_memory_forth_mib=st.free_memory_forth_mib,
        total_memory_mib=st.total_memory_mib,
        sd_values=_values(SD_METRICS, st),
        sum_values=_values(SUM_METRICS, st),
    )


def placement_item(
    state: ClusterState,
    d: InstanceDemand,
    primaries: Sequence[str],
    secondaries: Sequence[str] = (),
    forbidden: set[tuple[str, str]] | frozenset[tuple[str, str]] = frozenset(),
    *,
    count: int = 1,
) -> PlacementItem:
    """The item's usages and its per-node metric changes in each role."""
    kinds = {r.kind for n in (*primaries, *secondaries) for r in capacity_rows(state.nodes[n])}
    p_sd, p_sum, s_sd, s_sum = {}, {}, {}, {}
    for n in primaries:
        st = state.nodes[n]
        after = apply_primary(st, d)
        p_sd[n], p_sum[n] = _delta(SD_METRICS, st, after), _delta(SUM_METRICS, st, after)
    for n in secondaries:
        st = state.nodes[n]
        after = apply_secondary(st, d, NO_PRIMARY)
        s_sd[n], s_sum[n] = _delta(SD_METRICS, st, after), _delta(SUM_METRICS, st, after)
    return PlacementItem(
        name=d.name,
        drbd=d.has_secondary,
        primaries=tuple(primaries),
        secondaries=tuple(secondaries),
        forbidden_pairs=frozenset(forbidden),
        primary_usage={k: primary_usage(k, d) for k in kinds},
        secondary_usage={k: secondary_usage(k, d) for k in kinds},
        failover_mib=d.secondary_memory_mib if d.has_secondary else 0,
        forthcoming=d.forthcoming,
        exclusion_tags=d.exclusion_tags,
        count=count,
        primary_sd=p_sd,
        primary_sum=p_sum,
        secondary_sd=s_sd,
        secondary_sum=s_sum,
    )


# --- the score and its tangent planes -------------------------------------------------------


def sd_of(values: Sequence[float]) -> float:
    """Population standard deviation (as model.score)."""
    n = len(values)
    if not n:
        return 0.0
    mean = math.fsum(values) / n
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / n)


def tangent(values: Sequence[float]) -> tuple[float, tuple[float, ...]]:
    """A plane under the standard deviation at `values`: (sd(v̄), gradient), so that for every
    v, sd(v) ≥ sd(v̄) + Σ_n g_n·(v_n − v̄_n) (sd is convex: a norm of v − mean(v)). At a point
    of zero spread any subgradient works; 0 is one."""
    n = len(values)
    sd = sd_of(values)
    if n == 0 or sd == 0.0 or not math.isfinite(sd):
        return (sd if math.isfinite(sd) else 0.0), tuple(0.0 for _ in values)
    mean = math.fsum(values) / n
    return sd, tuple((v - mean) / (n * sd) for v in values)


def sd_weights() -> tuple[float, ...]:
    return tuple(m.weight for m in SD_METRICS)


def sum_weights() -> tuple[float, ...]:
    return tuple(m.weight for m in SUM_METRICS)
