"""The dedicated (exclusive-storage) allocation metric (docs/hail.md, "dedicated allocation").

A node's *allocation vector* counts, for each minimally compliant instance of its group's
policy (largest minimum disk first), how many copies still fit on it one after another with
htools' strict `addPri` checks; placing an instance loses some of them (its *lost-allocations
vector*). hail minimises (lost vector, remaining disk) lexicographically.

Two ways to count, held equal by tests/test_dedicated.py:

* `allocation_vector(state, ipolicy)`: the reference, by repeated strict adds
  (`repeat_count`); the independent checker uses it;
* `vector_of(tests)`: closed form over the node's capacity rows (`model.capacity`), fast
  enough to ask for every node before and after every candidate placement.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable
from dataclasses import replace

from model.capacity import MAX_REPEAT, ROW_KINDS, caps_left, copies_that_fit, primary_usage
from model.cluster import IPolicy
from model.resources import InstanceDemand, NodeState, primary_shortfalls


def minimal_instances(ipolicy: IPolicy) -> tuple[InstanceDemand, ...]:
    """The minimally compliant instances: each minmax min spec, largest min disk first."""
    mins = sorted((mm.min for mm in ipolicy.minmax), key=lambda s: -s.disk_size)
    return tuple(
        InstanceDemand(
            name=f"test-{i}",
            memory_mib=s.memory_size,
            disk_mib=s.disk_size,
            vcpus=s.cpu_count,
            disk_template="plain",
            disk_sizes_mib=(),
            disk_spindles=0,
            spindle_use=s.spindle_use,
        )
        for i, s in enumerate(mins)
    )


def _scaled(d: InstanceDemand, k: int) -> InstanceDemand:
    return replace(
        d,
        memory_mib=d.memory_mib * k,
        disk_mib=d.disk_mib * k,
        vcpus=d.vcpus * k,
        spindle_use=d.spindle_use * k,
        disk_spindles=None if d.disk_spindles is None else d.disk_spindles * k,
    )


def repeat_count(state: NodeState, d: InstanceDemand) -> int:
    """How many copies of a tagless instance fit one after another as primaries (strict).

    Every check of `addPriEx` is monotone in the number of copies, and k copies pass the
    k-th add exactly when one k-fold instance passes. A closed-form estimate is confirmed
    with two checks; if it is off (float rounding), a bisection gives htools' count.
    """

    def fails(k: int) -> bool:
        return bool(primary_shortfalls(state, _scaled(d, k)))

    if d.exclusion_tags:
        return 1 if not primary_shortfalls(state, d) else 0
    if fails(1):
        return 0
    guess = copies_that_fit(state, d)
    if guess >= 1 and not fails(guess) and (guess >= MAX_REPEAT or fails(guess + 1)):
        return guess
    lo, hi = 1, 2
    while hi < MAX_REPEAT and not fails(hi):
        lo, hi = hi, min(hi * 2, MAX_REPEAT)
    if hi >= MAX_REPEAT and not fails(hi):
        return MAX_REPEAT
    # invariant: lo fits, hi does not
    return lo + bisect.bisect_left(range(lo + 1, hi), True, key=fails)


def allocation_vector(state: NodeState, ipolicy: IPolicy) -> tuple[int, ...]:
    """The node's dedicated allocation vector: repeat counts of each test instance."""
    return tuple(repeat_count(state, t) for t in minimal_instances(ipolicy))


@functools.lru_cache(maxsize=4096)
def test_usage(kind: str, t: InstanceDemand) -> int:
    """What one test instance (running, plain, no disks, no tags) takes from a row (cached:
    a group has a handful of test instances, asked about for every node)."""
    return primary_usage(kind, t)


def vector_of(tests: tuple[InstanceDemand, ...]) -> Callable[[NodeState], tuple[int, ...]]:
    """The allocation vector from the capacity rows, for fixed test instances whose row usages
    are taken once (hail asks for the vector of every node, before and after each candidate
    placement)."""
    usages = [{kind: test_usage(kind, t) for kind in ROW_KINDS} for t in tests]
    zeros = (0,) * len(tests)
    known: dict[tuple, tuple[int, ...]] = {}  # caps -> vector: nodes alike share one

    def vector(state: NodeState) -> tuple[int, ...]:
        caps = caps_left(state)
        if caps is None:
            return zeros
        hit = known.get(caps)
        if hit is not None:
            return hit
        out = []
        for usage in usages:
            best = MAX_REPEAT
            for kind, cap in caps:
                use = usage[kind]
                if use > 0 and cap // use < best:
                    best = cap // use
            out.append(best)
        known[caps] = vec = tuple(out)
        return vec

    return vector


def format_metric(lost: tuple[int, ...], disk_mib: int) -> str:
    """Haskell `show` of the dedicated metric, as hail prints it: `([0,0,1],20490)`."""
    return f"([{','.join(str(x) for x in lost)}],{disk_mib})"
