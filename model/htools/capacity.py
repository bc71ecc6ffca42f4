"""The pluggable global N+1 capacity check of allocation (docs/hail.md, "Global N+1").

hail keeps a placement only if the cluster stays *globally N+1 redundant* afterwards: every
node's instances could be moved off it if it failed. How that is decided is a policy:

* `none`: always redundant (hail's `--no-capacity-checks`);
* `greedy`: htools' own greedy simulation (`model.htools.global_n1`, GlobalN1.hs);
* `exact`: an exact packing (added later behind the same interface).

The interface is two steps, so that an implementation can reuse work across the many
candidates of one allocation (hail asks about them one by one, `solutions.choose`):

    check = capacity.prepare(base, scope)     # the cluster before the placement, node list
    verdict = check.verdict(placement)        # one candidate placement on that cluster

`scope` is the node list hail checks, in index order: the whole cluster when allocating
without `group_name` (one non-redundant group then blocks every allocation), the group's
nodes with it. `placement` carries the new instance, its node(s) and the changed node states;
`state_after(base, placement)` gives the whole cluster after it. The verdict says yes or no and
may carry the node that cannot be evacuated, a reason and a witness (for an exact check, the
packing that proves redundancy). Where hail consults the check, and how a "no" is counted as
`FailN1`, is written once, in `model.htools.solutions.choose`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from model.resources import InstanceDemand, NodeState
from model.state import ClusterState


@dataclass(frozen=True)
class Placement:
    """One candidate allocation (htools' AllocElement): the instance on its node(s), the
    node states it changes, and the score of the node list after it."""

    demand: InstanceDemand
    primary: str
    secondary: str | None
    nodes: Mapping[str, NodeState]
    score: float

    @property
    def node_names(self) -> tuple[str, ...]:
        return (self.primary,) if self.secondary is None else (self.primary, self.secondary)


@dataclass(frozen=True)
class N1Verdict:
    """Is the cluster globally N+1 redundant after a placement (and if not, where not)."""

    redundant: bool
    node: str | None = None  # a node whose failure could not be absorbed
    reason: str = ""
    witness: Any = field(default=None, compare=False)  # e.g. where each instance would go


class N1Check(Protocol):
    """A capacity check prepared on one cluster and node list."""

    def verdict(self, placement: Placement) -> N1Verdict: ...


class CapacityCheck(Protocol):
    """A global N+1 policy: `prepare` once per allocation, then a verdict per candidate."""

    name: str

    def prepare(self, base: ClusterState, scope: Sequence[str]) -> N1Check: ...


def state_after(base: ClusterState, placement: Placement) -> ClusterState:
    """The cluster after the placement. An instance `base` already knows keeps its record
    there (allocate-secondary: htools' check still sees the instance as it was)."""
    demands = dict(base.demands)
    demands.setdefault(placement.demand.name, placement.demand)
    locations = dict(base.locations)
    locations[placement.demand.name] = (placement.primary, placement.secondary)
    return replace(base.with_nodes(placement.nodes), demands=demands, locations=locations)


_REDUNDANT = N1Verdict(True)


class _Always:
    def verdict(self, placement: Placement) -> N1Verdict:
        return _REDUNDANT


@dataclass(frozen=True)
class NoCapacityCheck:
    """hail's `--no-capacity-checks`: every placement is accepted."""

    name: str = "none"

    def prepare(self, base: ClusterState, scope: Sequence[str]) -> N1Check:
        return _Always()


def capacity_check(name: str) -> CapacityCheck:
    """The check a `--capacity-checks` value names. `exact` is, until the exact packing
    check exists, the greedy one (docs/hail.md says so)."""
    from model.htools.global_n1 import GreedyGlobalN1

    if name == "none":
        return NoCapacityCheck()
    if name in ("greedy", "exact"):
        return GreedyGlobalN1()
    raise ValueError(f"unknown capacity check {name!r} (exact, greedy or none)")
