"""The dedicated (exclusive-storage) allocation metric as linear capacities (spec §3.2).

htools counts a node's allocation vector by adding each test instance again and again with
the strict `addPri` checks. Every one of those checks is a linear capacity of the node:
"memory of the primaries must stay below the unallocated memory", "disk must stay above the
reserve", "(used + new vCPUs) / t_cpu ≤ ratio", the same on the `*_forth` counters, and the
N+1 reserve. `capacity_rows` writes them out once per node, so that

* the count of a test instance is `min(cap // demand)` over the rows (`vector_of`), and
* the MIP in `formulations/dedicated.py` can keep per-node counts as integer variables bounded
  by the same rows after any combination of new primaries and secondaries.

`model.resources.repeat_count` (the checker's count, by repeated strict adds) is the reference;
the tests hold both equal. Everything is in MiB.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

from model.resources import MAX_REPEAT, InstanceDemand, NodeState

# Row kinds, in the order htools runs the corresponding checks.
MEMORY = "memory"
DISK = "disk"
SPINDLES = "spindles"
SPINDLE_RATIO = "spindle_ratio"
N1 = "n1"
VCPU = "vcpu"
MEMORY_FORTH = "memory_forth"
DISK_FORTH = "disk_forth"
SPINDLES_FORTH = "spindles_forth"
SPINDLE_RATIO_FORTH = "spindle_ratio_forth"
VCPU_FORTH = "vcpu_forth"
ROW_KINDS = (
    MEMORY,
    DISK,
    SPINDLES,
    SPINDLE_RATIO,
    N1,
    VCPU,
    MEMORY_FORTH,
    DISK_FORTH,
    SPINDLES_FORTH,
    SPINDLE_RATIO_FORTH,
    VCPU_FORTH,
)


@dataclass(frozen=True, slots=True)
class CapacityRow:
    """One strict check as `Σ usage ≤ cap_mib` (cap in the row's unit: MiB, vCPUs, spindles).

    For the `n1` row the node's N+1 reserve is moved out of `cap`: the check is
    `Σ primary memory + reserve ≤ cap`, because drbd secondaries raise the reserve.
    """

    kind: str
    cap: int


def max_total_vcpus(total_cpus: float, vcpu_ratio: float) -> int | None:
    """The largest used-vCPU total u with `u / t_cpu ≤ ratio` in IEEE doubles (as htools);
    None when the ratio is negative (no limit). A node without CPUs allows only 0 (0/0 = NaN
    passes the check, anything else is +Inf)."""
    if vcpu_ratio < 0:
        return None
    if total_cpus <= 0:
        return 0
    v = math.floor(vcpu_ratio * total_cpus)
    while (v + 1) / total_cpus <= vcpu_ratio:
        v += 1
    while v >= 0 and v / total_cpus > vcpu_ratio:
        v -= 1
    return v


def capacity_rows(state: NodeState) -> tuple[CapacityRow, ...]:
    """The linear capacities behind every strict `addPri` check of a node (§5.2)."""
    unalloc = state.unallocated_memory_mib
    disk_floor = max(1, state.lo_disk_mib)
    rows = [
        CapacityRow(MEMORY, unalloc - 1),
        CapacityRow(DISK, state.free_disk_mib - disk_floor),
    ]
    if state.exclusive_storage:
        rows.append(CapacityRow(SPINDLES, state.free_spindles))
    else:
        rows.append(
            CapacityRow(SPINDLE_RATIO, math.floor(state.hi_spindles - state.instance_spindles))
        )
    if not state.fail_n1:
        rows.append(CapacityRow(N1, unalloc - 1))
    vmax = max_total_vcpus(state.total_cpus, state.vcpu_ratio)
    if vmax is not None:
        rows.append(CapacityRow(VCPU, vmax - state.used_vcpus))
    rows.append(CapacityRow(MEMORY_FORTH, state.free_memory_forth_mib - 1))
    rows.append(CapacityRow(DISK_FORTH, state.free_disk_forth_mib - disk_floor))
    if state.exclusive_storage:
        rows.append(CapacityRow(SPINDLES_FORTH, state.free_spindles_forth))
    else:
        rows.append(
            CapacityRow(
                SPINDLE_RATIO_FORTH,
                math.floor(state.hi_spindles - state.instance_spindles_forth),
            )
        )
    if vmax is not None:
        rows.append(CapacityRow(VCPU_FORTH, vmax - state.used_vcpus_forth))
    return tuple(rows)


def primary_usage(kind: str, d: InstanceDemand) -> int:
    """What one new primary takes from a row (as `apply_primary` changes the counters)."""
    local = d.uses_local_storage
    forth = d.forthcoming
    if kind in (MEMORY, N1):
        return d.memory_mib if d.uses_memory else 0
    if kind == DISK:
        return d.disk_mib if local and not forth else 0
    if kind == VCPU:
        return 0 if forth else d.counted_vcpus
    if kind == MEMORY_FORTH:
        return d.memory_mib
    if kind == DISK_FORTH:
        return d.disk_mib if local else 0
    if kind == VCPU_FORTH:
        return d.counted_vcpus
    if kind in (SPINDLES, SPINDLES_FORTH):
        if not local or (forth and kind == SPINDLES):
            return 0
        return d.disk_spindles if d.disk_spindles is not None else MAX_REPEAT
    if kind in (SPINDLE_RATIO, SPINDLE_RATIO_FORTH):
        return 0 if (not local or (forth and kind == SPINDLE_RATIO)) else d.spindle_use
    raise ValueError(kind)


def secondary_usage(kind: str, d: InstanceDemand) -> int:
    """What one new drbd secondary takes from a row (`apply_secondary`); its failover
    memory enters through the N+1 reserve, not through a row."""
    forth = d.forthcoming
    if kind == DISK:
        return 0 if forth else d.disk_mib
    if kind == DISK_FORTH:
        return d.disk_mib
    if kind in (SPINDLES, SPINDLES_FORTH):
        if forth and kind == SPINDLES:
            return 0
        return d.disk_spindles if d.disk_spindles is not None else MAX_REPEAT
    if kind in (SPINDLE_RATIO, SPINDLE_RATIO_FORTH):
        return 0 if (forth and kind == SPINDLE_RATIO) else d.spindle_use
    return 0


@functools.lru_cache(maxsize=4096)
def test_usage(kind: str, t: InstanceDemand) -> int:
    """What one test instance (running, plain, no disks, no tags) takes from a row (cached:
    a group has a handful of test instances, asked about for every node)."""
    return primary_usage(kind, t)


def allocation_vector(state: NodeState, tests: tuple[InstanceDemand, ...]) -> tuple[int, ...]:
    """The node's allocation vector from its capacity rows (equal to repeated strict adds)."""
    return vector_of(tests)(state)


def vector_of(tests: tuple[InstanceDemand, ...]) -> Callable[[NodeState], tuple[int, ...]]:
    """`allocation_vector` for fixed test instances, their row usages taken once (hail asks
    for the vector of every node, before and after each candidate placement)."""
    usages = [{kind: test_usage(kind, t) for kind in ROW_KINDS} for t in tests]
    zeros = (0,) * len(tests)

    def vector(state: NodeState) -> tuple[int, ...]:
        reserve = state.reserved_memory_mib
        caps = []
        for row in capacity_rows(state):
            cap = row.cap - reserve if row.kind == N1 else row.cap
            if cap < 0:
                return zeros
            caps.append((row.kind, cap))
        out = []
        for usage in usages:
            best = MAX_REPEAT
            for kind, cap in caps:
                use = usage[kind]
                if use > 0 and cap // use < best:
                    best = cap // use
            out.append(best)
        return tuple(out)

    return vector


def format_metric(lost: tuple[int, ...], disk_mib: int) -> str:
    """Haskell `show` of the dedicated metric, as hail prints it: `([0,0,1],20490)`."""
    return f"([{','.join(str(x) for x in lost)}],{disk_mib})"
