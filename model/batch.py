"""A batch of instances to place on candidate nodes, as plain data (docs/hail.md).

hail's multi-allocate places several new instances; exalloc places them jointly. The data
here is what every joint placement model needs (formulations/batch.py): the candidate nodes
with their capacity rows (`model.capacity`) and N+1 reserve, and the instances with their usage
of each row and the nodes that admit each of them alone. The dedicated allocation metric adds
each node's allocation vector (`NodeData.before`); the score-based model adds the placements'
effect on the cluster score (`model.placement`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

from model.capacity import CapacityRow


@dataclass(frozen=True)
class NodeData:
    """A candidate node: its capacities now and what test instances take from them."""

    name: str
    rank: int  # position in hail's iteration order (node index); larger wins ties
    group: str
    rows: tuple[CapacityRow, ...]
    reserve_mib: int  # the N+1 reserve rMem now
    peers_mib: Mapping[str, int]  # failover memory reserved per primary node now
    free_disk_mib: int  # f_dsk now
    fails_n1: bool  # already failing N+1: htools skips the N+1 checks
    unallocated_mib: int
    free_memory_forth_mib: int
    # dedicated groups: the allocation vector now, and what each test instance takes per row
    before: tuple[int, ...] = ()
    test_usage: tuple[Mapping[str, int], ...] = ()
    #: failing N+1 with everything on it now, by the flag htools loaded or as it recomputes
    #: the flag at a change (unallocated memory against the reserve): only then can a
    #: primary added back (`NewInstance.kept_primary`) leave the node failing
    fails_n1_as_is: bool = False
    #: what is placed back on it (`NewInstance.stay`) may make it fail N+1: its N+1 row is
    #: not raised to hold them (solvers/strategies/joint.py `_group_problem`); with its flag
    #: as htools loaded it, which it keeps where nothing leaves it
    n1_with_stays: bool = False
    fails_n1_untouched: bool = False


@dataclass(frozen=True)
class NewInstance:
    """A new instance (or `count` identical plain ones) and where it may go; each candidate
    passed hail's checks for it alone."""

    name: str
    drbd: bool
    primary_usage: Mapping[str, int]  # per row kind
    secondary_usage: Mapping[str, int]
    failover_mib: int  # memory its secondary must hold for a failover (usesSecMem)
    primaries: tuple[str, ...]
    secondaries: tuple[str, ...] = ()
    forbidden_pairs: frozenset[tuple[str, str]] = frozenset()  # fail only as this pair
    count: int = 1  # identical plain instances share one integer variable per node
    exclusion_tags: tuple[str, ...] = ()  # at most one primary per node carries each tag
    forthcoming: bool = False  # only the *_forth counters change; no failover reservation
    same_as: str | None = None  # an earlier drbd instance identical to this one
    order: int = 0  # request position of its first instance (tagged kinds have one instance)
    #: where the instance is now (primary, secondary), when it may stay there: a node
    #: evacuation's instance placed back on its nodes, not moved
    stay: tuple[str, str | None] | None = None
    #: its primary stays where it is (a secondary-only evacuation): placed back, not checked
    kept_primary: bool = False
    #: roles ("p", "s") added with force, as htools moves an instance off an offline node
    #: (applyMoveEx): only the hard checks hold for them (model.capacity.hard_rows)
    forced: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.count < 1 or (self.drbd and self.count != 1):
            raise ValueError(f"{self.name}: count {self.count} (drbd instances count 1 each)")


@dataclass(frozen=True)
class BatchProblem:
    """A multi-allocate batch on dedicated nodes.

    `shared_pairs`: the (primary, secondary) pairs whose failover reservation is summed over
    several new drbd instances; elsewhere one new instance per pair is assumed, which keeps
    the model O(instances × nodes). None sums on every pair (exact, O(instances × nodes²)).
    `shared_pairs_used` tells which pairs a solution shares, so a strategy can add them and
    solve again until the answer uses no pair it was not exact on (then it is optimal too:
    a relaxation's optimum that is feasible for the exact model is its optimum).

    `last_resort` names the nodes of last-resort groups: hail uses them only when no
    preferred group can take an instance, so the batch puts as few instances there as it can
    (a stage right after `placed`).
    """

    nodes: tuple[NodeData, ...]
    instances: tuple[NewInstance, ...]
    last_resort: frozenset[str] = frozenset()
    shared_pairs: frozenset[tuple[str, str]] | None = frozenset()

    @cached_property
    def node(self) -> dict[str, NodeData]:
        return {n.name: n for n in self.nodes}

    @cached_property
    def instance(self) -> dict[str, NewInstance]:
        return {i.name: i for i in self.instances}

    @cached_property
    def n_tests(self) -> int:
        return max((len(n.before) for n in self.nodes), default=0)

    @cached_property
    def primaries(self) -> dict[str, list[str]]:
        """Kind -> the candidate nodes of its primary."""
        return {i.name: [p for p in i.primaries if p in self.node] for i in self.instances}

    @cached_property
    def secondaries(self) -> dict[str, list[str]]:
        return {
            i.name: [s for s in i.secondaries if s in self.node] if i.drbd else []
            for i in self.instances
        }

    @cached_property
    def touched(self) -> list[str]:
        """Nodes that may receive something (only they get count variables), in node order."""
        names = {n for v in self.primaries.values() for n in v}
        names |= {n for v in self.secondaries.values() for n in v}
        return sorted(names, key=lambda n: self.node[n].rank)

    @cached_property
    def kinds_on(self) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        """Node -> kinds that may take it as primary, and as secondary."""
        prim: dict[str, list[str]] = {n: [] for n in self.touched}
        sec: dict[str, list[str]] = {n: [] for n in self.touched}
        for j, nodes in self.primaries.items():
            for n in nodes:
                prim[n].append(j)
        for j, nodes in self.secondaries.items():
            for n in nodes:
                sec[n].append(j)
        return prim, sec

    @cached_property
    def reserve_nodes(self) -> list[str]:
        """Nodes whose N+1 reserve may grow: secondaries not already failing N+1."""
        secondary = {n for v in self.secondaries.values() for n in v}
        return [n for n in self.touched if not self.node[n].fails_n1 and n in secondary]

    @cached_property
    def may_fail_n1(self) -> list[str]:
        """Nodes a forced placement (or a primary added back, `kept_primary`) may make fail
        N+1 (htools checks no N+1 for it): their N+1 row holds only where the node ends up
        not failing (formulations/batch.py). A primary added back changes no number of its
        node, only the flag, recomputed: its node may end failing only where it fails as it
        is (`NodeData.fails_n1_as_is`); elsewhere the strict adds keep it from failing. So may
        a node with what is placed back on it (`NodeData.n1_with_stays`)."""
        names = {
            n
            for i in self.instances
            for role, nodes in (("p", i.primaries), ("s", i.secondaries))
            for n in nodes
            if role in i.forced or (role == "p" and i.kept_primary and self.node[n].fails_n1_as_is)
        }
        names |= {n.name for n in self.nodes if n.n1_with_stays}
        return [n for n in self.touched if n in names and not self.node[n].fails_n1]

    @cached_property
    def short_of_reserve(self) -> list[str]:
        """Nodes that may fail N+1 and are short of their reserve already (unallocated memory
        at or below it) without failing N+1 as loaded (htools' flag compares the reported free
        memory): they keep that flag while nothing lands on them, and fail once anything
        does (htools recomputes the flag at a change)."""
        return [
            n
            for n in self.may_fail_n1
            if self.node[n].reserve_mib > self.node[n].unallocated_mib - 1
        ]

    @cached_property
    def short_without_stays(self) -> frozenset[str]:
        """The nodes short of their reserve (`short_of_reserve`) where nothing may be placed
        back: the model's N+1 row binds there only where something lands (formulations/
        batch.py u[n]); with stays there the model claims no bound (solvers/strategies/joint.py
        FORCED)."""
        return frozenset(n for n in self.short_of_reserve if n not in self.stays_on)

    @cached_property
    def stays_on(self) -> dict[str, list[tuple[str, str]]]:
        """Node -> (kind, role) of the instances that may be placed back there."""
        out: dict[str, list[tuple[str, str]]] = {}
        for i in self.instances:
            if i.stay is None:
                continue
            for role, n in zip("ps", i.stay, strict=True):
                if n is not None and n in self.node:
                    out.setdefault(n, []).append((i.name, role))
        return out

    @property
    def has_stays(self) -> bool:
        return any(i.stay is not None for i in self.instances)

    @property
    def has_last_resort(self) -> bool:
        return any(n in self.last_resort for v in self.primaries.values() for n in v)
