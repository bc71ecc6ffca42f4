"""The htools cluster score (Cluster/Metrics.hs, docs/htools-facts.md §5): 20 weighted metrics.

Lower is better. Every metric is taken over the online nodes except the two `offline_*`
counts, which use the offline nodes; with no online node at all the score is 0. "sd" is the
population standard deviation, computed in two passes as htools does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from model.cluster import Cluster
from model.resources import NodeState, safe_div
from model.state import ClusterState, node_states


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    weight: float
    aggregation: str  # "sd", "sum" or "pooled"
    online: bool  # over online (True) or offline (False) nodes
    value: Callable[[NodeState], float] | None = None


def _n1(n: NodeState) -> float:
    return float(len(n.primaries) + len(n.secondaries)) if n.fail_n1 else 0.0


# In the order hinfo prints them.
METRICS: tuple[Metric, ...] = (
    Metric("free_mem_cv", 0.5, "sd", True, lambda n: n.p_mem),
    Metric("free_disk_cv", 0.5, "sd", True, lambda n: n.p_dsk),
    Metric("n1_cnt", 1.0, "sum", True, _n1),
    Metric("reserved_mem_cv", 1.0, "sd", True, lambda n: n.p_rem),
    Metric("offline_all_cnt", 4.0, "sum", False, lambda n: len(n.primaries) + len(n.secondaries)),
    Metric("offline_pri_cnt", 16.0, "sum", False, lambda n: len(n.primaries)),
    Metric("vcpu_ratio_cv", 0.5, "sd", True, lambda n: safe_div(n.p_cpu, n.cpu_speed)),
    Metric("cpu_load_cv", 1.0, "sd", True, lambda n: n.util_load.cpu),
    Metric("mem_load_cv", 1.0, "sd", True, lambda n: n.util_load.mem),
    Metric("disk_load_cv", 1.0, "sd", True, lambda n: n.util_load.dsk),
    Metric("net_load_cv", 1.0, "sd", True, lambda n: n.util_load.net),
    Metric("pri_tags_score", 2.0, "sum", True, lambda n: n.conflicting_primaries),
    Metric("spindles_cv", 0.5, "sd", True, lambda n: safe_div(n.instance_spindles, n.hi_spindles)),
    Metric("free_mem_cv_forth", 0.5, "sd", True, lambda n: n.p_mem_forth),
    Metric("free_disk_cv_forth", 0.5, "sd", True, lambda n: n.p_dsk_forth),
    Metric("vcpu_ratio_cv_forth", 0.5, "sd", True, lambda n: safe_div(n.p_cpu_forth, n.cpu_speed)),
    Metric(
        "spindles_cv_forth",
        0.5,
        "sd",
        True,
        lambda n: safe_div(n.instance_spindles_forth, n.hi_spindles),
    ),
    Metric("location_score", 1.0, "sum", True, lambda n: n.location_score),
    Metric("location_exclusion_score", 1.0, "pooled", True),
    Metric("reserved_mem_rtotal", 0.25, "sum", True, lambda n: n.p_rem),
)
WEIGHTS: dict[str, float] = {m.name: m.weight for m in METRICS}


def _sd(values: Sequence[float]) -> float:
    """Population standard deviation, two-pass (Utils/Statistics.hs)."""
    n = len(values)
    mean = math.fsum(values) / n
    total = 0.0
    for v in values:
        total += (v - mean) * (v - mean)
    return math.sqrt(total / n)


def _pooled_conflicts(nodes: Iterable[NodeState]) -> float:
    """Σ (count − 1) over (location, exclusion tag) pairs pooled over the nodes."""
    pooled: dict[tuple[str, str], int] = {}
    for n in nodes:
        for key, count in n.location_exclusion_counts:
            pooled[key] = pooled.get(key, 0) + count
    return float(sum(pooled.values()) - len(pooled))


def _states(
    source: Cluster | ClusterState | Iterable[NodeState], group: str | None
) -> list[NodeState]:
    """Node states of the source, restricted to one group (name or uuid) when given."""
    if isinstance(source, Cluster):
        source = node_states(source)
    if isinstance(source, ClusterState):
        cluster = source.cluster
        states = list(source.nodes.values())
        if group is not None:
            uuid = cluster.group(group).uuid
            states = [s for s in states if s.group_uuid == uuid]
        return states
    states = list(source)
    if group is not None:
        states = [s for s in states if s.group_uuid == group]
    return states


def cluster_metrics(
    source: Cluster | ClusterState | Iterable[NodeState], group: str | None = None
) -> dict[str, float]:
    """Each metric's value (unweighted), by name in hinfo's order.

    `group` restricts the nodes to one group (a group score); with node states it is a
    group uuid, with a cluster a name or uuid.
    """
    states = _states(source, group)
    online = [s for s in states if not s.offline]
    offline = [s for s in states if s.offline]
    if not online:
        return {m.name: 0.0 for m in METRICS}
    values: dict[str, float] = {}
    for m in METRICS:
        if m.aggregation == "pooled":
            values[m.name] = _pooled_conflicts(online)
            continue
        assert m.value is not None
        xs = [float(m.value(s)) for s in (online if m.online else offline)]
        if m.aggregation == "sd":
            values[m.name] = _sd(xs) if xs else 0.0
        else:
            values[m.name] = math.fsum(xs)
    return values


def score_of_metrics(metrics: dict[str, float]) -> float:
    return sum(metrics[m.name] * m.weight for m in METRICS)


def cluster_score(
    source: Cluster | ClusterState | Iterable[NodeState], group: str | None = None
) -> float:
    """The cluster score htools minimises (hinfo's `Cluster score`)."""
    return score_of_metrics(cluster_metrics(source, group))
