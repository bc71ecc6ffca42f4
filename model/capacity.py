"""The linear capacities of a node: every strict `addPri` / `addSec` check as a row.

htools decides "does it fit" with the strict checks of `Node.addPriEx` / `addSecExEx`
(`model.resources.add_primary` / `add_secondary`, docs/architecture.md). Every one of them
is a linear capacity of the node: "memory of the primaries must stay below the unallocated
memory", "disk must stay above the reserve", "(used + new vCPUs) / t_cpu <= ratio", the same
on the `*_forth` counters, and the N+1 reserve. This module writes them out once, so that

* how many copies of an instance still fit is `min(cap // usage)` over the rows
  (`copies_that_fit`; the dedicated allocation vectors of `model.dedicated`),
* the room left for movable instances once a probe is kept free (`model.squeeze`), and
* the count and placement MIPs in `formulations/` bound their variables by the same rows.

tests/test_capacity.py holds every row to the strict adds, for every kind of instance.
Everything is in MiB (memory, disk), vCPUs or spindles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from model.resources import InstanceDemand, NodeState

#: Upper bound of a count when an instance asks for nothing a row limits (htools would loop).
MAX_REPEAT = 2**31 - 1

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
    """The linear capacities behind every strict `addPri` check of a node
    (docs/htools-facts.md §2)."""
    return tuple(CapacityRow(kind, cap) for kind, cap in row_caps(state))


def row_caps(state: NodeState) -> list[tuple[str, int]]:
    """`capacity_rows` as (kind, cap) pairs: what the allocation vector of every candidate,
    before and after each placement, reads (no row objects)."""
    unalloc = state.unallocated_memory_mib
    disk_floor = max(1, state.lo_disk_mib)
    hi_spindles = state.hi_spindles
    rows = [(MEMORY, unalloc - 1), (DISK, state.free_disk_mib - disk_floor)]
    if state.exclusive_storage:
        rows.append((SPINDLES, state.free_spindles))
    else:
        rows.append((SPINDLE_RATIO, math.floor(hi_spindles - state.instance_spindles)))
    if not state.fail_n1:
        rows.append((N1, unalloc - 1))
    vmax = max_total_vcpus(state.total_cpus, state.vcpu_ratio)
    if vmax is not None:
        rows.append((VCPU, vmax - state.used_vcpus))
    rows.append((MEMORY_FORTH, state.free_memory_forth_mib - 1))
    rows.append((DISK_FORTH, state.free_disk_forth_mib - disk_floor))
    if state.exclusive_storage:
        rows.append((SPINDLES_FORTH, state.free_spindles_forth))
    else:
        rows.append((SPINDLE_RATIO_FORTH, math.floor(hi_spindles - state.instance_spindles_forth)))
    if vmax is not None:
        rows.append((VCPU_FORTH, vmax - state.used_vcpus_forth))
    return rows


def hard_rows(state: NodeState) -> tuple[CapacityRow, ...]:
    """The checks `addPriEx` keeps when soft errors are ignored (`force`, as in an evacuation or
    htools' global N+1 simulation): memory, local disk without its reserve, and free spindles
    under exclusive storage."""
    rows = [
        CapacityRow(MEMORY, state.unallocated_memory_mib - 1),
        CapacityRow(DISK, state.free_disk_mib - 1),
    ]
    if state.exclusive_storage:
        rows.append(CapacityRow(SPINDLES, state.free_spindles))
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


#: Rows on the counters that include forthcoming instances: the only ones htools checks when
#: the new instance is itself forthcoming.
FORTH_ROWS = frozenset({MEMORY_FORTH, DISK_FORTH, SPINDLES_FORTH, SPINDLE_RATIO_FORTH, VCPU_FORTH})
#: Rows htools checks only for instances with local storage (plain, drbd).
LOCAL_STORAGE_ROWS = frozenset(
    {DISK, DISK_FORTH, SPINDLES, SPINDLES_FORTH, SPINDLE_RATIO, SPINDLE_RATIO_FORTH}
)


def applies(kind: str, d: InstanceDemand) -> bool:
    """Whether htools checks row `kind` when `d` becomes a primary. Memory, N+1 and vCPU
    checks run even for an instance that takes nothing from them (a node already over its
    limit refuses everything); disk checks only for local storage; a forthcoming instance
    only meets the `*_forth` checks."""
    if d.forthcoming and kind not in FORTH_ROWS:
        return False
    return d.uses_local_storage or kind not in LOCAL_STORAGE_ROWS


def caps_left(state: NodeState) -> tuple[tuple[str, int], ...] | None:
    """Each row's cap with the N+1 reserve taken off (see `CapacityRow`); None when some row
    is already over its cap, so that nothing meeting every row fits."""
    reserve = state.reserved_memory_mib
    caps = []
    for kind, cap in row_caps(state):
        if kind == N1:
            cap -= reserve
        if cap < 0:
            return None
        caps.append((kind, cap))
    return tuple(caps)


def copies_that_fit(state: NodeState, d: InstanceDemand) -> int:
    """How many copies of `d` the rows admit as new primaries, one after another.

    For an instance without exclusion tags this equals htools' repeated strict adds
    (`model.dedicated.repeat_count` confirms it with the adds themselves).
    """
    best = MAX_REPEAT
    for row in capacity_rows(state):
        if not applies(row.kind, d):
            continue
        cap = row.cap - state.reserved_memory_mib if row.kind == N1 else row.cap
        if cap < 0:
            return 0
        use = primary_usage(row.kind, d)
        if use > 0 and cap // use < best:
            best = cap // use
    return best


def rooms_beside(state: NodeState, d: InstanceDemand) -> dict[str, int]:
    """What each row leaves for further primaries once `d` has been added (its cap minus
    what `d` takes; the N+1 row's reserve still to be taken off, as in `CapacityRow`)."""
    return {row.kind: row.cap - primary_usage(row.kind, d) for row in capacity_rows(state)}


def spindle_ratio_room(state: NodeState) -> float:
    """Spindle use still allowed by the spindle ratio on both counters (the SPINDLE_RATIO rows
    before rounding down): hi_spindles - max(instance spindles, incl. forthcoming)."""
    return state.hi_spindles - max(state.instance_spindles, state.instance_spindles_forth)
