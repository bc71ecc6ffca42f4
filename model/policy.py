"""Whether an instance matches an instance policy, as htools' `instMatchesPolicy` decides it
(Instance.hs): the min/max specs, then the allowed disk templates. Apart from the node
arithmetic (model/resources.py) because a policy is a group's, not a node's: allocation asks it
before any node is tried.
"""

from __future__ import annotations

from model.cluster import IPolicy, ISpec
from model.resources import FailMode, InstanceDemand


def spec_shortfall(
    d: InstanceDemand, spec: ISpec, *, above: bool, exclusive_storage: bool
) -> FailMode | None:
    """Is the instance below `spec` (above=True: checking a min) or over it (a max)?"""

    def bad(value: int, bound: int) -> bool:
        return value < bound if above else value > bound

    if bad(d.memory_mib, spec.memory_size):
        return FailMode.MEM
    if any(bad(size, spec.disk_size) for size in d.disk_sizes_mib):
        return FailMode.DISK
    if bad(d.vcpus, spec.cpu_count):
        return FailMode.CPU
    if exclusive_storage:
        if d.disk_spindles is None or bad(d.disk_spindles, spec.spindle_use):
            return FailMode.SPINDLES
    elif bad(d.spindle_use, spec.spindle_use):
        return FailMode.SPINDLES
    if d.disk_template != "diskless" and bad(len(d.disk_sizes_mib), spec.disk_count):
        return FailMode.DISK_COUNT
    return None


def minmax_shortfall(
    d: InstanceDemand, ipolicy: IPolicy, exclusive_storage: bool
) -> FailMode | None:
    """htools `instMatchesSpecs`: None if the instance fits some min/max pair.

    When no pair fits, the failure of the first pair is reported, as htools does.
    """
    first: FailMode | None = None
    for i, mm in enumerate(ipolicy.minmax):
        fail = spec_shortfall(
            d, mm.min, above=True, exclusive_storage=exclusive_storage
        ) or spec_shortfall(d, mm.max, above=False, exclusive_storage=exclusive_storage)
        if fail is None:
            return None
        if i == 0:
            first = fail
    return first


def policy_shortfall(
    d: InstanceDemand, ipolicy: IPolicy, exclusive_storage: bool
) -> FailMode | None:
    """htools `instMatchesPolicy`: the min/max specs, then the allowed disk templates."""
    fail = minmax_shortfall(d, ipolicy, exclusive_storage)
    if fail is not None:
        return fail
    if d.disk_template not in ipolicy.disk_templates:
        return FailMode.DISK
    return None
