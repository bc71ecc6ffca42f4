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
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from model.batch import BatchProblem, NewInstance, NodeData
from model.capacity import capacity_rows, primary_usage, secondary_usage
from model.cluster import NodeGroup
from model.policy import policy_shortfall
from model.resources import (
    FailMode,
    InstanceDemand,
    NodeState,
    add_primary,
    add_secondary,
    apply_primary,
    apply_secondary,
)
from model.score import METRICS, WEIGHTS, Metric, cluster_score
from model.state import ClusterState

#: The score's standard-deviation metrics that placements change, in `model.score` order.
#: reserved_mem_cv is handled apart (the reserve is a variable of the model).
RESERVED = "reserved_mem_cv"
RESERVED_TOTAL = "reserved_mem_rtotal"
TAGS = "pri_tags_score"  # Σ_t (count_t − 1) per node: not additive, carried by the model
SD_METRICS: tuple[Metric, ...] = tuple(
    m for m in METRICS if m.aggregation == "sd" and m.online and m.name != RESERVED
)
#: Summed metrics whose per-node value placements change additively: the online ones, and the
#: offline counts (a drbd secondary or a primary that stays on an offline node, as in a node
#: evacuation's instances that do not move); each counts only on the nodes htools scores it on.
SUM_METRICS: tuple[Metric, ...] = tuple(
    m for m in METRICS if m.aggregation == "sum" and m.name not in (RESERVED_TOTAL, TAGS)
)
NO_PRIMARY = ""  # a primary no node has: a secondary's generic failover reservation


def _values(metrics: Sequence[Metric], st: NodeState) -> tuple[float, ...]:
    return tuple(float(m.value(st)) for m in metrics)  # type: ignore[misc]


N1_COUNT = next(i for i, m in enumerate(SUM_METRICS) if m.name == "n1_cnt")


def _n1_apart(delta: tuple[float, ...], apart: bool) -> tuple[float, ...]:
    """A placement's summed-metric changes, n1_cnt left out where the model counts it per
    node (`PlacementProblem.n1_counts`)."""
    if not apart:
        return delta
    return tuple(0.0 if i == N1_COUNT else d for i, d in enumerate(delta))


def _delta(metrics: Sequence[Metric], before: NodeState, after: NodeState) -> tuple[float, ...]:
    """Each metric's change where htools counts it (online metrics on online nodes, the
    offline counts on offline ones), 0 elsewhere."""
    return tuple(
        a - b if m.online != before.offline else 0.0
        for m, a, b in zip(metrics, _values(metrics, after), _values(metrics, before), strict=True)
    )


@dataclass(frozen=True)
class PlacementProblem:
    """A batch to place (model.batch) and what each placement does to the score.

    `scored` are the online nodes of the score's scope (a group, or the whole cluster as
    hail's allocate without a group); `base_sd` holds every scored node's SD_METRICS values now
    (candidates or not: each is one term of the spread); `*_sd` / `*_sum` hold, per
    (kind, node), the change of the SD_METRICS / SUM_METRICS values when the node takes the
    kind as primary or secondary. `reserved_base` is each scored node's N+1 reserve share
    (p_rem) now; a node whose reserve may grow gets it from the model's reserve variable.
    """

    batch: BatchProblem
    scored: tuple[str, ...]
    base_sd: Mapping[str, tuple[float, ...]]
    reserved_base: Mapping[str, float]
    total_memory_mib: Mapping[str, float]
    primary_sd: Mapping[tuple[str, str], tuple[float, ...]] = field(default_factory=dict)
    primary_sum: Mapping[tuple[str, str], tuple[float, ...]] = field(default_factory=dict)
    secondary_sd: Mapping[tuple[str, str], tuple[float, ...]] = field(default_factory=dict)
    secondary_sum: Mapping[tuple[str, str], tuple[float, ...]] = field(default_factory=dict)
    #: the score's part no placement changes (summed metrics as they stand, the offline
    #: counts, the pooled exclusion score): the true score now minus the model's terms now
    score_constant: float = 0.0
    #: primaries carrying exclusion tag t on node n now, for every (t, n) a new primary with
    #: tag t may reach (pri_tags_score counts max(0, count − 1) per tag and node)
    tag_counts: Mapping[tuple[str, str], int] = field(default_factory=dict)
    #: location_exclusion_score pools (location tag, exclusion tag) over the scored nodes:
    #: the pooled count now per reachable key, and the keys each (kind, primary) adds to
    location_pool: Mapping[tuple[str, str], int] = field(default_factory=dict)
    location_keys: Mapping[tuple[str, str], tuple[tuple[str, str], ...]] = field(
        default_factory=dict
    )
    #: the location tags of every candidate node that has some: a drbd instance's primary
    #: scores (location_score) the tags it shares with its secondary, a pair-dependent term
    #: (formulations/placement.py `define_pair_locations`, solvers/strategies/descent.py)
    location_tags: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: nodes a forced placement (`NewInstance.forced`: no N+1 check; a primary added back,
    #: `kept_primary`) may make fail N+1, with
    #: the instances on them now: htools' n1_cnt then counts every instance there, what the
    #: model adds per node (formulations/placement.py `define_n1_failures`); their
    #: placements' own n1_cnt changes are 0 here
    n1_counts: Mapping[str, int] = field(default_factory=dict)


def score_is_finite(problem: PlacementProblem) -> bool:
    """Whether every number the score model is built from is finite. A node whose metric is
    0/0 (e.g. a spindle count of 0 on a non-exclusive node) has a NaN score, as in htools;
    no tangent plane bounds it, so such a problem is not given to the score model."""
    tables = (
        problem.base_sd.values(),
        problem.primary_sd.values(),
        problem.primary_sum.values(),
        problem.secondary_sd.values(),
        problem.secondary_sum.values(),
    )
    return (
        math.isfinite(problem.score_constant)
        and all(math.isfinite(x) for table in tables for values in table for x in values)
        and all(math.isfinite(x) for x in problem.reserved_base.values())
    )


def _networks_ok(group: NodeGroup, nics: Sequence[Mapping]) -> bool:
    return all(nic.get("network") in (None, *group.networks) for nic in nics)


def candidates(
    state: ClusterState,
    d: InstanceDemand,
    groups: Sequence[NodeGroup],
    restrict: Sequence[str] | None = None,
    nics: Sequence[Mapping] = (),
) -> tuple[list[str], list[str], set[tuple[str, str]]]:
    """hail's candidates for one instance: primaries passing the policy and the strict add,
    secondaries passing the generic strict add, and the pairs that fail only together (the
    secondary already reserving memory for that primary). Groups not connected to a network
    the instance needs offer none."""
    wanted = {g.uuid for g in groups if _networks_ok(g, nics)}
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


def node_data(state: ClusterState, name: str, rank: int, failing_as_is: bool = False) -> NodeData:
    """A candidate node for the batch model (no dedicated counts)."""
    st = state.nodes[name]
    return NodeData(
        name=name,
        rank=rank,
        group=st.group_uuid,
        rows=capacity_rows(st),
        reserve_mib=st.reserved_memory_mib,
        peers_mib=dict(st.peers),
        free_disk_mib=st.free_disk_mib,
        fails_n1=st.fail_n1,
        unallocated_mib=st.unallocated_memory_mib,
        free_memory_forth_mib=st.free_memory_forth_mib,
        fails_n1_as_is=failing_as_is,
    )


def new_instance(
    state: ClusterState,
    d: InstanceDemand,
    primaries: Sequence[str],
    secondaries: Sequence[str] = (),
    forbidden: set[tuple[str, str]] | frozenset[tuple[str, str]] = frozenset(),
    *,
    count: int = 1,
    order: int = 0,
    stay: tuple[str, str | None] | None = None,
    kept_primary: bool = False,
    forced: frozenset[str] = frozenset(),
) -> NewInstance:
    """One kind of the batch: its usage of each row and where it may go."""
    kinds = {r.kind for n in (*primaries, *secondaries) for r in capacity_rows(state.nodes[n])}
    return NewInstance(
        name=d.name,
        drbd=d.has_secondary,
        primary_usage={k: primary_usage(k, d) for k in sorted(kinds)},
        secondary_usage={k: secondary_usage(k, d) for k in sorted(kinds)},
        failover_mib=d.secondary_memory_mib if d.has_secondary else 0,
        primaries=tuple(primaries),
        secondaries=tuple(secondaries),
        forbidden_pairs=frozenset(forbidden),
        count=count,
        exclusion_tags=d.exclusion_tags,
        forthcoming=d.forthcoming,
        order=order,
        stay=stay,
        kept_primary=kept_primary,
        forced=forced,
    )


def placement_problem(
    state: ClusterState,
    kinds: Sequence[tuple[InstanceDemand, NewInstance]],
    scope: Sequence[str],
    *,
    last_resort: frozenset[str] = frozenset(),
    failing_as_is: frozenset[str] = frozenset(),
    with_stays: Mapping[str, bool] | None = None,
    until: float | None = None,
) -> PlacementProblem | None:
    """The batch of `kinds` (each with its demand) on their candidates, scored over the online
    nodes of `scope`; `failing_as_is`: the nodes failing N+1 with everything on them now
    (`NodeData.fails_n1_as_is`), where `state` lacks what is placed back; `with_stays`: the
    nodes what is placed back may make fail N+1, with their loaded flag
    (`NodeData.n1_with_stays`). None once `until` (time.perf_counter()) has passed: the
    deltas of 50 instances on 200 nodes took 9 s on a loaded machine (issue 40)."""
    with_stays = with_stays or {}
    rank = {n: i for i, n in enumerate(state.nodes)}
    used = sorted(
        {n for _, k in kinds for n in (*k.primaries, *k.secondaries)}, key=lambda n: rank[n]
    )
    batch = BatchProblem(
        tuple(
            replace(
                node_data(state, n, rank[n], n in failing_as_is),
                n1_with_stays=n in with_stays,
                fails_n1_untouched=with_stays.get(n, False),
            )
            for n in used
        ),
        tuple(k for _, k in kinds),
        last_resort=last_resort,
    )
    scored = tuple(n for n in scope if not state.nodes[n].offline)
    in_scope = set(scored)
    failing = {n for n in batch.may_fail_n1 if n in in_scope}
    p_sd, p_sum, s_sd, s_sum = {}, {}, {}, {}
    for d, k in kinds:
        if until is not None and time.perf_counter() >= until:
            return None
        for n in k.primaries:
            st = state.nodes[n]
            after = apply_primary(st, d)
            p_sd[k.name, n] = _delta(SD_METRICS, st, after)
            p_sum[k.name, n] = _n1_apart(_delta(SUM_METRICS, st, after), n in failing)
        for n in k.secondaries:
            st = state.nodes[n]
            after = apply_secondary(st, d, NO_PRIMARY)
            s_sd[k.name, n] = _delta(SD_METRICS, st, after)
            s_sum[k.name, n] = _n1_apart(_delta(SUM_METRICS, st, after), n in failing)
    base_sd = {n: _values(SD_METRICS, state.nodes[n]) for n in scored}
    tag_counts = {
        (t, n): dict(state.nodes[n].exclusion_tag_counts).get(t, 0)
        for _, k in kinds
        for t in k.exclusion_tags
        for n in k.primaries
        if n in in_scope
    }
    location_keys = {  # a forthcoming primary adds no location exclusion (htools' addPri)
        (k.name, n): keys
        for _, k in kinds
        for n in k.primaries
        if n in in_scope
        and not k.forthcoming
        and (
            keys := tuple(
                (loc, t) for loc in sorted(state.nodes[n].location_tags) for t in k.exclusion_tags
            )
        )
    }
    pooled: dict[tuple[str, str], int] = {}
    for n in scored:
        for key, count in state.nodes[n].location_exclusion_counts:
            pooled[key] = pooled.get(key, 0) + count
    location_pool = {key: pooled.get(key, 0) for keys in location_keys.values() for key in keys}
    reserved_base = {n: state.nodes[n].p_rem for n in scored}
    return PlacementProblem(
        batch=batch,
        scored=scored,
        base_sd=base_sd,
        reserved_base=reserved_base,
        tag_counts=tag_counts,
        location_pool=location_pool,
        location_keys=location_keys,
        location_tags={
            n: frozenset(state.nodes[n].location_tags) for n in used if state.nodes[n].location_tags
        },
        score_constant=cluster_score([state.nodes[n] for n in scope])
        - modelled_score(base_sd, reserved_base),
        total_memory_mib={n: state.nodes[n].total_memory_mib for n in used},
        primary_sd=p_sd,
        primary_sum=p_sum,
        secondary_sd=s_sd,
        secondary_sum=s_sum,
        n1_counts={
            n: len(state.nodes[n].primaries) + len(state.nodes[n].secondaries)
            for n in sorted(failing, key=lambda n: rank[n])
        },
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


def modelled_score(
    base_sd: Mapping[str, tuple[float, ...]], reserved_base: Mapping[str, float]
) -> float:
    """What the model's score terms come to with nothing placed (its σ at the spread of now,
    no linear change): the part of the score it carries."""
    per_metric = list(zip(*base_sd.values(), strict=True)) if base_sd else []
    spread = sum(w * sd_of(xs) for w, xs in zip(sd_weights(), per_metric, strict=True))
    reserve = list(reserved_base.values())
    return (
        spread + WEIGHTS[RESERVED] * sd_of(reserve) + WEIGHTS[RESERVED_TOTAL] * math.fsum(reserve)
    )


def sd_weights() -> tuple[float, ...]:
    return tuple(m.weight for m in SD_METRICS)


def sum_weights() -> tuple[float, ...]:
    return tuple(m.weight for m in SUM_METRICS)
