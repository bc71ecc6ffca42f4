"""Resource arithmetic of a node exactly as htools counts it (Node.hs), in one place.

A `NodeState` is the immutable per-node bookkeeping htools derives after loading
(`Loader.mergeData`, docs/htools-facts.md §1): unallocated memory (the `min` of recorded and
reported free memory), the N+1 reserve `rMem`, used vCPUs counting `n_cpu`, spindles, the
`*_forth` counters, tag maps. `add_primary` / `add_secondary` are the strict "does it fit"
checks of docs/htools-facts.md §2 (`addPriEx` / `addSecExEx`) and return either the new state
or a `FailMode`; `remove_primary` / `remove_secondary` undo them; `apply_move` performs hbal's
moves (failover, replace primary/secondary, failover to any node) with htools' force rules
(`model.state.ClusterState` is the one place that applies them to a cluster). Everything is in
MiB.

Instances enter this module as an `InstanceDemand`: what an instance asks of a node. It
is built from a model `Instance` (`demand_of`) or directly, e.g. for the dedicated
allocator's test instances, whose disk total differs from the sum of their (empty) disk list.

One module, over 1,000 lines, because it is one concept: what a node holds and can take, as
htools' Node.hs computes it. Every function is a transition of the immutable `NodeState` or a
check on one, and they stay side by side because they must agree term by term: `apply_primary`
and `remove_primary` (and their secondary twins) mirror each other, loading (`loaded_states`)
accumulates the same terms, the shortfall iterators are exactly the checks the adds make, and a
move (`apply_move`, Moves.hs) is those adds and removes on two or three nodes under htools'
force rules. Whether an instance matches a policy (Instance.hs) is not node arithmetic: that is
model/policy.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import MISSING, dataclass, field, fields
from enum import StrEnum
from typing import Any

from model.cluster import (
    LOCAL_STORAGE_TEMPLATES,
    MEMORY_USING_STATUSES,
    MIRRORED_TEMPLATES,
    Cluster,
    Instance,
    IPolicy,
    ISpec,
    Node,
)

EXCLUSION_TAG_PREFIX = "htools:iextags:"
LOCATION_TAG_PREFIX = "htools:nlocation:"
DESIRED_LOCATION_TAG_PREFIX = "htools:desiredlocation:"
MIGRATION_TAG_PREFIX = "htools:migration:"
ALLOW_MIGRATION_PREFIX = "htools:allowmigration:"


class FailMode(StrEnum):
    """htools' failure modes (Types.FailMode), named as hail prints them and in Ganeti's
    order, the order hail lists failure counts in."""

    MEM = "FailMem"
    DISK = "FailDisk"
    CPU = "FailCPU"
    N1 = "FailN1"
    TAGS = "FailTags"
    MIG = "FailMig"
    DISK_COUNT = "FailDiskCount"
    SPINDLES = "FailSpindles"
    INTERNAL = "FailInternal"


@dataclass(frozen=True, slots=True)
class Shortfall:
    """One failed check: htools' failure mode, a finer kind for the checker, and why."""

    mode: FailMode
    kind: str  # memory, n1, disk, disk_reserve, spindles, spindle_ratio, vcpu, exclusion_tags
    message: str
    forthcoming: bool = False  # the check ran on the *_forth counters


@dataclass(frozen=True, slots=True)
class Utilisation:
    """Dynamic utilisation (Types.DynUtil); htools defaults every instance to 1 each."""

    cpu: float = 1.0
    mem: float = 1.0
    dsk: float = 1.0
    net: float = 1.0

    def __add__(self, other: Utilisation) -> Utilisation:
        return Utilisation(
            self.cpu + other.cpu, self.mem + other.mem, self.dsk + other.dsk, self.net + other.net
        )

    def __sub__(self, other: Utilisation) -> Utilisation:
        return Utilisation(
            self.cpu - other.cpu, self.mem - other.mem, self.dsk - other.dsk, self.net - other.net
        )


ZERO_UTIL = Utilisation(0.0, 0.0, 0.0, 0.0)
UNIT_UTIL = Utilisation()


_NO_TAGS: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class TagRules:
    """What the cluster tags make of instance and node tags (docs/htools-facts.md §1)."""

    exclusion_prefixes: tuple[str, ...] = ()
    location_prefixes: tuple[str, ...] = ()
    desired_location_prefixes: tuple[str, ...] = ()
    migration_prefixes: tuple[str, ...] = ()
    allowed_migrations: tuple[tuple[str, str], ...] = ()  # (source tag, target tag)

    @classmethod
    def of(cls, cluster: Cluster) -> TagRules:
        def stripped(prefix: str) -> tuple[str, ...]:
            return tuple(t[len(prefix) :] for t in cluster.cluster_tags if t.startswith(prefix))

        return cls(
            exclusion_prefixes=tuple(p for p in stripped(EXCLUSION_TAG_PREFIX) if p),
            location_prefixes=stripped(LOCATION_TAG_PREFIX),
            desired_location_prefixes=tuple(p for p in stripped(DESIRED_LOCATION_TAG_PREFIX) if p),
            migration_prefixes=stripped(MIGRATION_TAG_PREFIX),
            allowed_migrations=tuple(
                (src, dst)
                for src, sep, dst in (t.partition("::") for t in stripped(ALLOW_MIGRATION_PREFIX))
                if sep and "::" not in dst
            ),
        )

    # Each returns at once for untagged objects or a cluster without such rules (the usual
    # case; loading 1,000 nodes asks these 5,000 times).

    def exclusion_tags(self, tags: Iterable[str]) -> tuple[str, ...]:
        """An instance's tags starting with an exclusion prefix (raw prefix, no colon)."""
        if not tags or not self.exclusion_prefixes:
            return ()
        return tuple(t for t in tags if any(t.startswith(p) for p in self.exclusion_prefixes))

    def desired_locations(self, tags: Iterable[str]) -> frozenset[str]:
        if not tags or not self.desired_location_prefixes:
            return _NO_TAGS
        return frozenset(
            t for t in tags if any(t.startswith(p) for p in self.desired_location_prefixes)
        )

    def node_locations(self, node_tags: Iterable[str]) -> frozenset[str]:
        """A node's location tags: node tags starting with `P:` for a location prefix P."""
        if not node_tags or not self.location_prefixes:
            return _NO_TAGS
        tags = tuple(node_tags)
        return frozenset(t for p in self.location_prefixes for t in tags if t.startswith(p + ":"))

    def migration_tags(self, node_tags: Iterable[str]) -> frozenset[str]:
        """Node tags starting with `P:` for a migration prefix P (htools:migration:P)."""
        if not node_tags or not self.migration_prefixes:
            return _NO_TAGS
        tags = tuple(node_tags)
        return frozenset(t for p in self.migration_prefixes for t in tags if t.startswith(p + ":"))

    def receivable_migration_tags(self, node_tags: Iterable[str]) -> frozenset[str]:
        """Its own migration tags plus every A allowed by htools:allowmigration:A::B for its B."""
        own = self.migration_tags(node_tags)
        if not self.allowed_migrations:
            return own
        return own | frozenset(src for src, dst in self.allowed_migrations if dst in own)


@dataclass(frozen=True, slots=True)
class InstanceDemand:
    """What one instance asks of its nodes, in htools' terms (Instance.hs)."""

    name: str
    memory_mib: int
    disk_mib: int  # htools `dsk`: the total, charged to f_dsk of local-storage nodes
    vcpus: int
    disk_template: str
    disk_sizes_mib: tuple[int, ...] = ()  # the disk list, for the ipolicy check
    disk_spindles: int | None = 0  # sum of disk spindles, None when unknown
    spindle_use: int = 1
    status: str = "running"
    auto_balance: bool = True
    forthcoming: bool = False
    exclusion_tags: tuple[str, ...] = ()
    desired_locations: frozenset[str] = frozenset()
    util: Utilisation = UNIT_UTIL

    @property
    def offline(self) -> bool:
        return self.status == "ADMIN_offline"

    @property
    def uses_memory(self) -> bool:
        """Keeps memory allocated on its primary (htools `usesMemory`)."""
        return self.status in MEMORY_USING_STATUSES and not self.forthcoming

    @property
    def uses_local_storage(self) -> bool:
        return self.disk_template in LOCAL_STORAGE_TEMPLATES

    @property
    def has_secondary(self) -> bool:
        return self.disk_template in MIRRORED_TEMPLATES

    @property
    def secondary_memory_mib(self) -> int:
        """Memory its secondary must reserve for a failover (`usesSecMem`)."""
        return self.memory_mib if not self.offline and self.auto_balance else 0

    @property
    def counted_vcpus(self) -> int:
        """VCPUs counted on the primary: all but ADMIN_offline instances."""
        return 0 if self.offline else self.vcpus


def demand_of(instance: Instance, rules: TagRules = TagRules()) -> InstanceDemand:
    """The demand of a model instance; tags are interpreted with the cluster's rules."""
    return InstanceDemand(
        name=instance.name,
        memory_mib=instance.memory_mib,
        disk_mib=instance.disk_mib,
        vcpus=instance.vcpus,
        disk_template=instance.disk_template,
        disk_sizes_mib=tuple(d.size_mib for d in instance.disks),
        disk_spindles=total_spindles(instance),
        spindle_use=instance.spindle_use,
        status=instance.status,
        auto_balance=instance.auto_balance,
        forthcoming=instance.forthcoming,
        exclusion_tags=rules.exclusion_tags(instance.tags),
        desired_locations=rules.desired_locations(instance.tags),
        util=Utilisation(*instance.util),
    )


def total_spindles(instance: Instance) -> int | None:
    """Sum of disk spindles as htools' `getTotalSpindles`: 0 for no disks, None if unknown."""
    if any(d.spindles is None for d in instance.disks):
        return None
    return sum(d.spindles for d in instance.disks)  # type: ignore[misc]


def probe_demand(std: ISpec, factor: float, name: str = "probe") -> InstanceDemand:
    """hsqueeze's probe (docs/htools-facts.md §4): floor(F × std) memory, vCPUs and spindle
    use; ext, no disk."""
    return InstanceDemand(
        name=name,
        memory_mib=math.floor(factor * std.memory_size),
        disk_mib=0,
        vcpus=math.floor(factor * std.cpu_count),
        disk_template="ext",
        spindle_use=math.floor(factor * std.spindle_use),
    )


def safe_div(a: float, b: float) -> float:
    """IEEE division as Haskell does it: x/0 is ±Inf, 0/0 is NaN (never raises)."""
    if b:
        return a / b
    if a == 0 or math.isnan(a):
        return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)


def _pdsk(free: int, total: float) -> float:
    """htools `computePDsk`: no local storage counts as all free."""
    return 1.0 if total == 0 else free / total


def _add_count(counts: tuple[tuple[str, int], ...], keys: Iterable) -> tuple:
    table = dict(counts)
    for k in keys:
        table[k] = table.get(k, 0) + 1
    return tuple(sorted(table.items()))


def _del_count(counts: tuple[tuple, ...], keys: Iterable) -> tuple:
    table = dict(counts)
    for k in keys:
        if k in table:
            if table[k] > 1:
                table[k] -= 1
            else:
                del table[k]
    return tuple(sorted(table.items()))


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node's resources and bookkeeping as htools holds them (Node.Node), MiB throughout.

    `reported_free_memory_mib` is the node's `f_mem`; it only matters through
    `missing_memory_mib` (xMem, fixed at load) and the load-time N+1 flag. The free memory
    htools allocates from is `unallocated_memory_mib`.
    """

    name: str
    group_uuid: str
    offline: bool
    master: bool
    drained: bool
    total_memory_mib: float  # tMem
    node_memory_mib: int  # nMem
    instance_memory_mib: int  # iMem: memory of primaries that use memory
    missing_memory_mib: int  # xMem
    reported_free_memory_mib: int  # fMem
    free_memory_forth_mib: int  # fMemForth
    total_disk_mib: float  # tDsk
    free_disk_mib: int  # fDsk
    free_disk_forth_mib: int  # fDskForth
    total_cpus: float  # tCpu
    cpu_speed: float
    node_cpus: int  # nCpu, counted as used
    used_vcpus: int  # uCpu, includes nCpu
    used_vcpus_forth: int
    exclusive_storage: bool
    total_spindles: int  # tSpindles
    free_spindles: int  # fSpindles (meaningful under exclusive storage)
    free_spindles_forth: int
    instance_spindles: float  # instSpindles (0 under exclusive storage)
    instance_spindles_forth: float
    reserved_memory_mib: int  # rMem: the N+1 reserve
    fail_n1: bool
    vcpu_ratio: float
    spindle_ratio: float
    lo_disk_mib: int = 0  # loDsk: floor(min-disk ratio × t_dsk), ratio 0 by default
    primaries: tuple[str, ...] = ()  # real (not forthcoming) primaries
    secondaries: tuple[str, ...] = ()
    primaries_forth: tuple[str, ...] = ()  # all primaries, forthcoming included
    secondaries_forth: tuple[str, ...] = ()
    peers: tuple[tuple[str, int], ...] = ()  # primary node -> memory to reserve for it
    exclusion_tag_counts: tuple[tuple[str, int], ...] = ()  # pTags (forthcoming included)
    location_tags: frozenset[str] = frozenset()
    migration_tags: frozenset[str] = frozenset()
    receivable_migration_tags: frozenset[str] = frozenset()
    location_score: int = 0
    location_exclusion_counts: tuple[tuple[tuple[str, str], int], ...] = ()
    util_load: Utilisation = ZERO_UTIL
    util_load_forth: Utilisation = ZERO_UTIL
    tags: tuple[str, ...] = field(default=(), compare=False)
    #: `peers` as htools' PeerMap list holds them (only printed: the node list's `peermap`):
    #: largest memory first, an added or updated entry before the others of its memory
    peer_map: tuple[tuple[str, int], ...] = field(default=(), compare=False)

    # --- derived quantities (Node.hs) -------------------------------------------------

    @property
    def recorded_free_memory_mib(self) -> int:
        return int(self.total_memory_mib) - self.node_memory_mib - self.instance_memory_mib

    @property
    def unallocated_memory_mib(self) -> int:
        """Free memory htools allocates from: min(recorded, reported) at load
        (docs/htools-facts.md §1)."""
        return self.recorded_free_memory_mib - max(0, self.missing_memory_mib)

    @property
    def available_memory_mib(self) -> int:
        """Unallocated memory beyond the N+1 reserve (htools `availMem`)."""
        return max(0, self.unallocated_memory_mib - self.reserved_memory_mib)

    @property
    def available_disk_mib(self) -> int:
        return max(0, self.free_disk_mib - self.lo_disk_mib)

    @property
    def hi_cpu(self) -> int:
        """Most vCPUs the policy allows: floor(vcpu_ratio × t_cpu)."""
        return math.floor(self.vcpu_ratio * self.total_cpus)

    @property
    def available_vcpus(self) -> int:
        return max(0, self.hi_cpu - self.used_vcpus)

    @property
    def hi_spindles(self) -> float:
        return self.spindle_ratio * self.total_spindles

    @property
    def p_mem(self) -> float:
        return safe_div(self.unallocated_memory_mib, self.total_memory_mib)

    @property
    def p_mem_forth(self) -> float:
        return safe_div(self.free_memory_forth_mib, self.total_memory_mib)

    @property
    def p_dsk(self) -> float:
        if self.exclusive_storage:
            return _pdsk(self.free_spindles, self.total_spindles)
        return _pdsk(self.free_disk_mib, self.total_disk_mib)

    @property
    def p_dsk_forth(self) -> float:
        if self.exclusive_storage:
            return _pdsk(self.free_spindles_forth, self.total_spindles)
        return _pdsk(self.free_disk_forth_mib, self.total_disk_mib)

    @property
    def p_rem(self) -> float:
        return safe_div(self.reserved_memory_mib, self.total_memory_mib)

    @property
    def p_cpu(self) -> float:
        return safe_div(self.used_vcpus, self.total_cpus)

    @property
    def p_cpu_forth(self) -> float:
        return safe_div(self.used_vcpus_forth, self.total_cpus)

    @property
    def conflicting_primaries(self) -> int:
        """Σ (count − 1) over exclusion tags of the primaries (pri_tags_score)."""
        return sum(c for _, c in self.exclusion_tag_counts) - len(self.exclusion_tag_counts)

    def peer_memory_mib(self, primary: str) -> int:
        return dict(self.peers).get(primary, 0)

    def hosts_exclusion_tag(self, tags: Iterable[str]) -> bool:
        present = dict(self.exclusion_tag_counts)
        return any(t in present for t in tags)


_NODE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(NodeState))


def _compile_evolve() -> Callable[..., NodeState]:
    """`dataclasses.replace` for NodeState, unrolled over its slots like dataclasses' own
    generated code (~20× faster; loading 1,000 nodes evolves each state three times).
    An unknown field is a TypeError, as with `replace`."""
    keep = object()
    scope: dict[str, Any] = {"_new": object.__new__, "_cls": NodeState, "_keep": keep}
    lines = [f"def _evolve(state, *, {', '.join(f'{n}=_keep' for n in _NODE_FIELDS)}):"]
    lines.append("    new = _new(_cls)")
    for n in _NODE_FIELDS:
        scope[f"_set_{n}"] = getattr(NodeState, n).__set__  # the slot, bypassing frozen
        lines.append(f"    _set_{n}(new, state.{n} if {n} is _keep else {n})")
    lines.append("    return new")
    exec("\n".join(lines), scope)  # noqa: S102 - fixed text built from the field names
    return scope["_evolve"]


_evolve = _compile_evolve()


# --- loading (Loader.mergeData) ---------------------------------------------------------


def _initial_fields(node: Node, ipolicy: IPolicy, rules: TagRules) -> dict[str, Any]:
    """A node's fields before any instance is added (`Node.create` + `setPolicy`, tags as
    loaded)."""
    return dict(
        name=node.name,
        group_uuid=node.group_uuid,
        offline=node.offline,
        master=node.master,
        drained=node.drained,
        total_memory_mib=node.total_memory_mib,
        node_memory_mib=node.node_memory_mib,
        instance_memory_mib=0,
        missing_memory_mib=0,
        reported_free_memory_mib=node.free_memory_mib,
        free_memory_forth_mib=node.free_memory_mib,
        total_disk_mib=node.total_disk_mib,
        free_disk_mib=node.free_disk_mib,
        free_disk_forth_mib=node.free_disk_mib,
        total_cpus=node.total_cpus,
        cpu_speed=node.cpu_speed,
        node_cpus=node.reserved_cpus,
        used_vcpus=node.reserved_cpus,
        used_vcpus_forth=node.reserved_cpus,
        exclusive_storage=node.exclusive_storage,
        total_spindles=node.spindles,
        free_spindles=node.free_spindles,
        free_spindles_forth=node.free_spindles,
        instance_spindles=0.0,
        instance_spindles_forth=0.0,
        reserved_memory_mib=0,
        fail_n1=True,
        vcpu_ratio=ipolicy.vcpu_ratio,
        spindle_ratio=ipolicy.spindle_ratio,
        location_tags=rules.node_locations(node.tags),
        migration_tags=rules.migration_tags(node.tags),
        receivable_migration_tags=rules.receivable_migration_tags(node.tags),
        tags=node.tags,
    )


def _spindle_use_delta(d: InstanceDemand) -> float:
    """instSpindles contribution (calcSpindleUse): spindle_use of local-storage instances."""
    return float(d.spindle_use) if d.uses_local_storage else 0.0


def _new_instance_spindles(state: NodeState, current: float, d: InstanceDemand, sign: int) -> float:
    if state.exclusive_storage:
        return 0.0
    return current + sign * _spindle_use_delta(d)


def peer_map_add(
    peer_map: tuple[tuple[str, int], ...], primary: str, mem: int
) -> tuple[tuple[str, int], ...]:
    """PeerMap.add: the entry of `primary` (if any) removed, then (primary, mem) inserted
    before the first entry whose memory is not larger (`insertBy` on reversed memory)."""
    rest = [e for e in peer_map if e[0] != primary]
    at = next((j for j, (_, m) in enumerate(rest) if m <= mem), len(rest))
    rest.insert(at, (primary, mem))
    return tuple(rest)


def _new_free_spindles(state: NodeState, current: int, d: InstanceDemand, sign: int) -> int:
    """calcNewFreeSpindles: only under exclusive storage; unknown spindles force a failure."""
    if not state.exclusive_storage:
        return 0
    if d.disk_spindles is None:
        return -1 if sign > 0 else current
    return current - sign * d.disk_spindles


def desired_location_misses(state: NodeState, d: InstanceDemand) -> int:
    """How many of the instance's desired locations the node does not have."""
    return len(d.desired_locations) - len(d.desired_locations & state.location_tags)


def pair_location_score(primary: NodeState, secondary: NodeState | None) -> int:
    """An instance's location score: location tags its primary and secondary share."""
    if secondary is None:
        return 0
    return len(primary.location_tags & secondary.location_tags)


def _location_exclusion_pairs(state: NodeState, d: InstanceDemand) -> list[tuple[str, str]]:
    return [(loc, ex) for loc in sorted(state.location_tags) for ex in d.exclusion_tags]


def _forthcoming_storage(state: NodeState, d: InstanceDemand) -> dict[str, int]:
    """A loaded forthcoming instance reserves its local disk and spindles only in `*_forth`."""
    return {
        "free_disk_forth_mib": state.free_disk_forth_mib
        - (d.disk_mib if d.uses_local_storage else 0),
        "free_spindles_forth": _new_free_spindles(state, state.free_spindles_forth, d, +1),
    }


#: NodeState's defaults (the fields `_initial_fields` leaves out).
_NODE_DEFAULTS = {f.name: f.default for f in fields(NodeState) if f.default is not MISSING}


class _Loading:
    """A node's fields while its instances are loaded, changed in place: one NodeState per
    node at the end rather than one per instance loaded (half the loading time of a
    1,000-node request, which the iallocator pays on every call)."""

    def __init__(self, fields: dict[str, Any]):
        self.__dict__.update(_NODE_DEFAULTS)
        self.__dict__.update(fields)

    def state(self, **changes: Any) -> NodeState:
        return NodeState(**{**self.__dict__, **changes})


def _load_primary(node: _Loading, d: InstanceDemand, location_score: int = 0) -> None:
    """Register an existing primary (`setPri`): reported free memory/disk already include it.
    Each field's new value depends on its old value and on fields loading does not change."""
    if d.exclusion_tags:
        node.exclusion_tag_counts = _add_count(node.exclusion_tag_counts, d.exclusion_tags)
    node.primaries_forth += (d.name,)
    node.used_vcpus_forth += d.counted_vcpus
    node.util_load_forth += d.util
    node.free_memory_forth_mib -= 0 if d.uses_memory else d.memory_mib
    node.instance_spindles_forth = _new_instance_spindles(node, node.instance_spindles_forth, d, +1)
    if d.forthcoming:
        node.__dict__.update(_forthcoming_storage(node, d))
        return
    node.primaries += (d.name,)
    node.used_vcpus += d.counted_vcpus
    node.util_load += d.util
    node.instance_spindles = _new_instance_spindles(node, node.instance_spindles, d, +1)
    node.location_score += location_score + desired_location_misses(node, d)
    if d.exclusion_tags and node.location_tags:
        node.location_exclusion_counts = _add_count(
            node.location_exclusion_counts, _location_exclusion_pairs(node, d)
        )


def _load_secondary(node: _Loading, d: InstanceDemand) -> None:
    """Register an existing secondary (`setSec`): disk load and spindle use only."""
    dsk_util = Utilisation(0.0, 0.0, d.util.dsk, 0.0)
    node.secondaries_forth += (d.name,)
    node.util_load_forth += dsk_util
    node.instance_spindles_forth = _new_instance_spindles(node, node.instance_spindles_forth, d, +1)
    if d.forthcoming:
        node.__dict__.update(_forthcoming_storage(node, d))
        return
    node.secondaries += (d.name,)
    node.util_load += dsk_util
    node.instance_spindles = _new_instance_spindles(node, node.instance_spindles, d, +1)


def loaded_states(
    cluster: Cluster,
) -> tuple[TagRules, dict[str, NodeState], dict[str, InstanceDemand]]:
    """Every node's state after loading, as `Loader.mergeData` + `checkData` leave it, with
    the tag rules and every instance's demand (`model.state.node_states` wraps them)."""
    rules = TagRules.of(cluster)
    loading: dict[str, _Loading] = {}
    for node in cluster.nodes:
        group = cluster.group_of(node)
        loading[node.name] = _Loading(_initial_fields(node, group.ipolicy, rules))
    demands: dict[str, InstanceDemand] = {}
    peers: dict[str, dict[str, int]] = {name: {} for name in loading}
    # Node.buildPeers: PeerMap.accumArray (+) over sList, newest first, adds the oldest first
    ordered: dict[str, tuple[tuple[str, int], ...]] = {name: () for name in loading}
    for inst in cluster.instances:
        d = demand_of(inst, rules)
        demands[inst.name] = d
        p = loading[inst.primary]
        s = loading.get(inst.secondary) if inst.secondary else None
        _load_primary(p, d, pair_location_score(p, s))  # type: ignore[arg-type]
        if s is not None:
            _load_secondary(s, d)
            if not d.forthcoming:
                table = peers[s.name]
                table[inst.primary] = table.get(inst.primary, 0) + d.secondary_memory_mib
                ordered[s.name] = peer_map_add(ordered[s.name], inst.primary, table[inst.primary])
    states: dict[str, NodeState] = {}
    for name, st in loading.items():
        i_mem = sum(demands[i].memory_mib for i in st.primaries if demands[i].uses_memory)
        x_mem = int(st.total_memory_mib) - st.node_memory_mib - st.reported_free_memory_mib - i_mem
        r_mem = max(peers[name].values(), default=0)
        states[name] = st.state(
            instance_memory_mib=i_mem,
            missing_memory_mib=x_mem,
            peers=tuple(sorted(peers[name].items())),
            peer_map=ordered[name],
            reserved_memory_mib=r_mem,
            fail_n1=st.reported_free_memory_mib < r_mem,
        )
    return rules, states, demands


# --- the strict "does it fit" checks (docs/htools-facts.md §2) ----------------------------


def primary_shortfalls(
    state: NodeState, d: InstanceDemand, *, strict: bool = True
) -> tuple[Shortfall, ...]:
    """Every check `addPriEx` would fail, in htools' order (the first is what it reports)."""
    return tuple(_iter_primary_shortfalls(state, d, strict=strict))


def first_primary_shortfall(
    state: NodeState, d: InstanceDemand, *, strict: bool = True
) -> Shortfall | None:
    """The check `addPriEx` reports (the first it fails), None when it adds the primary."""
    return next(_iter_primary_shortfalls(state, d, strict=strict), None)


def first_secondary_shortfall(
    state: NodeState, d: InstanceDemand, primary: str, *, strict: bool = True
) -> Shortfall | None:
    """The check `addSecExEx` reports (the first it fails), None when it adds the secondary."""
    return next(_iter_secondary_shortfalls(state, d, primary, strict=strict), None)


def secondary_shortfalls(
    state: NodeState,
    d: InstanceDemand,
    primary: str,
    *,
    strict: bool = True,
    ignore_disks: bool = False,
) -> tuple[Shortfall, ...]:
    """Every check `addSecExEx` would fail, in htools' order."""
    checks = _iter_secondary_shortfalls(state, d, primary, strict=strict, ignore_disks=ignore_disks)
    return tuple(checks)


def _iter_primary_shortfalls(
    state: NodeState, d: InstanceDemand, *, strict: bool = True
) -> Iterator[Shortfall]:
    """Every check `addPriEx` would fail, in htools' order (the first is what it reports)."""
    local = d.uses_local_storage
    new_dsk_forth = state.free_disk_forth_mib - (d.disk_mib if local else 0)
    new_sp_forth = _new_free_spindles(state, state.free_spindles_forth, d, +1)
    new_isp_forth = _new_instance_spindles(state, state.instance_spindles_forth, d, +1)
    new_cpu_forth = safe_div(state.used_vcpus_forth + d.counted_vcpus, state.total_cpus)
    new_mem_forth = state.free_memory_forth_mib - d.memory_mib
    limit = state.vcpu_ratio

    def forth_checks() -> list[Shortfall]:
        f: list[Shortfall] = []
        if new_mem_forth <= 0:
            f.append(
                Shortfall(
                    FailMode.MEM,
                    "memory",
                    f"free memory incl. forthcoming would be {new_mem_forth} MiB",
                    True,
                )
            )
        if local and new_dsk_forth <= 0:
            f.append(
                Shortfall(
                    FailMode.DISK,
                    "disk",
                    f"free disk incl. forthcoming would be {new_dsk_forth} MiB",
                    True,
                )
            )
        if local and new_dsk_forth < state.lo_disk_mib:
            f.append(
                Shortfall(
                    FailMode.DISK,
                    "disk_reserve",
                    f"free disk incl. forthcoming {new_dsk_forth} MiB below the reserve",
                    True,
                )
            )
        if local and state.exclusive_storage and new_sp_forth < 0:
            f.append(
                Shortfall(
                    FailMode.SPINDLES,
                    "spindles",
                    f"free spindles incl. forthcoming would be {new_sp_forth}",
                    True,
                )
            )
        if local and new_isp_forth > state.hi_spindles:
            f.append(
                Shortfall(
                    FailMode.DISK,
                    "spindle_ratio",
                    f"spindle use incl. forthcoming {new_isp_forth:g} > {state.hi_spindles:g}",
                    True,
                )
            )
        if limit >= 0 and limit < new_cpu_forth:
            f.append(
                Shortfall(
                    FailMode.CPU,
                    "vcpu",
                    f"vCPU ratio incl. forthcoming {new_cpu_forth:.4g} > {limit:g}",
                    True,
                )
            )
        return f

    if d.forthcoming:
        if strict:
            yield from forth_checks()
        return

    new_free = state.unallocated_memory_mib - (d.memory_mib if d.uses_memory else 0)
    new_dsk = state.free_disk_mib - (d.disk_mib if local else 0)
    new_sp = _new_free_spindles(state, state.free_spindles, d, +1)
    new_isp = _new_instance_spindles(state, state.instance_spindles, d, +1)
    new_cpu = safe_div(state.used_vcpus + d.counted_vcpus, state.total_cpus)
    new_failn1 = new_free <= state.reserved_memory_mib
    if new_free <= 0:
        yield Shortfall(FailMode.MEM, "memory", f"unallocated memory would be {new_free} MiB")
    if local and new_dsk <= 0:
        yield Shortfall(FailMode.DISK, "disk", f"free disk would be {new_dsk} MiB")
    if strict and local and new_dsk < state.lo_disk_mib:
        yield (
            Shortfall(
                FailMode.DISK,
                "disk_reserve",
                f"free disk {new_dsk} MiB below the {state.lo_disk_mib} MiB reserve",
            )
        )
    if local and state.exclusive_storage and new_sp < 0:
        why = "unknown disk spindles" if d.disk_spindles is None else f"free spindles {new_sp}"
        yield Shortfall(FailMode.SPINDLES, "spindles", f"would leave {why}")
    if strict and local and new_isp > state.hi_spindles:
        yield (
            Shortfall(
                FailMode.DISK,
                "spindle_ratio",
                f"spindle use {new_isp:g} > {state.hi_spindles:g} allowed",
            )
        )
    if strict and new_failn1 and not state.fail_n1:
        yield (
            Shortfall(
                FailMode.MEM,
                "n1",
                f"unallocated memory {new_free} MiB would not cover the N+1 reserve "
                f"{state.reserved_memory_mib} MiB",
            )
        )
    if strict and limit >= 0 and limit < new_cpu:
        yield Shortfall(FailMode.CPU, "vcpu", f"vCPU ratio would be {new_cpu:.4g} > {limit:g}")
    if strict and state.hosts_exclusion_tag(d.exclusion_tags):
        clash = sorted(set(d.exclusion_tags) & set(dict(state.exclusion_tag_counts)))
        yield (
            Shortfall(
                FailMode.TAGS,
                "exclusion_tags",
                f"a primary already carries exclusion tag(s) {', '.join(clash)}",
            )
        )
    if strict:
        yield from forth_checks()


def apply_primary(state: NodeState, d: InstanceDemand, location_score: int = 0) -> NodeState:
    """Add a *new* primary without any check (the success branch of `addPriEx`)."""
    local = d.uses_local_storage
    forth = dict(
        exclusion_tag_counts=_add_count(state.exclusion_tag_counts, d.exclusion_tags),
        primaries_forth=state.primaries_forth + (d.name,),
        free_memory_forth_mib=state.free_memory_forth_mib - d.memory_mib,
        free_disk_forth_mib=state.free_disk_forth_mib - (d.disk_mib if local else 0),
        used_vcpus_forth=state.used_vcpus_forth + d.counted_vcpus,
        util_load_forth=state.util_load_forth + d.util,
        instance_spindles_forth=_new_instance_spindles(state, state.instance_spindles_forth, d, +1),
        free_spindles_forth=_new_free_spindles(state, state.free_spindles_forth, d, +1),
    )
    if d.forthcoming:
        return _evolve(state, **forth)
    mem = d.memory_mib if d.uses_memory else 0
    # unallocated memory falls by exactly what instance memory grows by
    fail_n1 = state.unallocated_memory_mib - mem <= state.reserved_memory_mib
    return _evolve(
        state,
        **forth,
        fail_n1=fail_n1,
        primaries=state.primaries + (d.name,),
        instance_memory_mib=state.instance_memory_mib + mem,
        free_disk_mib=state.free_disk_mib - (d.disk_mib if local else 0),
        used_vcpus=state.used_vcpus + d.counted_vcpus,
        util_load=state.util_load + d.util,
        instance_spindles=_new_instance_spindles(state, state.instance_spindles, d, +1),
        free_spindles=_new_free_spindles(state, state.free_spindles, d, +1),
        location_score=state.location_score + location_score + desired_location_misses(state, d),
        location_exclusion_counts=_add_count(
            state.location_exclusion_counts, _location_exclusion_pairs(state, d)
        ),
    )


def add_primary(
    state: NodeState, d: InstanceDemand, *, strict: bool = True, location_score: int = 0
) -> NodeState | FailMode:
    """htools `addPriEx (not strict)`: the new state, or the first failure mode."""
    # only the first failure is wanted: the later checks and their messages are not made
    first = next(_iter_primary_shortfalls(state, d, strict=strict), None)
    if first is not None:
        return first.mode
    return apply_primary(state, d, location_score)


def _iter_secondary_shortfalls(
    state: NodeState,
    d: InstanceDemand,
    primary: str,
    *,
    strict: bool = True,
    ignore_disks: bool = False,
) -> Iterator[Shortfall]:
    """Every check `addSecExEx` would fail, in htools' order."""
    sec_mem = d.secondary_memory_mib
    new_peer = state.peer_memory_mib(primary) + sec_mem
    new_dsk_forth = state.free_disk_forth_mib - d.disk_mib
    new_sp_forth = _new_free_spindles(state, state.free_spindles_forth, d, +1)
    new_isp_forth = _new_instance_spindles(state, state.instance_spindles_forth, d, +1)

    def forth_checks() -> list[Shortfall]:
        f: list[Shortfall] = []
        if not d.has_secondary:
            f.append(Shortfall(FailMode.DISK, "template", "template has no secondary", True))
        if new_dsk_forth <= 0:
            f.append(
                Shortfall(
                    FailMode.DISK,
                    "disk",
                    f"free disk incl. forthcoming would be {new_dsk_forth} MiB",
                    True,
                )
            )
        if new_dsk_forth < state.lo_disk_mib:
            f.append(
                Shortfall(
                    FailMode.DISK,
                    "disk_reserve",
                    f"free disk incl. forthcoming {new_dsk_forth} MiB below the reserve",
                    True,
                )
            )
        if state.exclusive_storage and new_sp_forth < 0:
            f.append(
                Shortfall(
                    FailMode.SPINDLES,
                    "spindles",
                    f"free spindles incl. forthcoming would be {new_sp_forth}",
                    True,
                )
            )
        if new_isp_forth > state.hi_spindles:
            f.append(
                Shortfall(
                    FailMode.DISK,
                    "spindle_ratio",
                    f"spindle use incl. forthcoming {new_isp_forth:g} > {state.hi_spindles:g}",
                    True,
                )
            )
        if sec_mem >= state.free_memory_forth_mib:
            f.append(
                Shortfall(
                    FailMode.MEM,
                    "memory",
                    f"failover memory {sec_mem} MiB >= free memory incl. forthcoming "
                    f"{state.free_memory_forth_mib} MiB",
                    True,
                )
            )
        return f

    if d.forthcoming:
        if strict:
            yield from forth_checks()
        return

    old_mem = state.unallocated_memory_mib
    new_dsk = state.free_disk_mib - d.disk_mib
    new_sp = _new_free_spindles(state, state.free_spindles, d, +1)
    new_isp = _new_instance_spindles(state, state.instance_spindles, d, +1)
    new_rmem = max(state.reserved_memory_mib, new_peer)
    if not d.has_secondary:
        yield Shortfall(FailMode.DISK, "template", f"template {d.disk_template} has no secondary")
    if not ignore_disks and new_dsk <= 0:
        yield Shortfall(FailMode.DISK, "disk", f"free disk would be {new_dsk} MiB")
    if strict and new_dsk < state.lo_disk_mib:
        yield (
            Shortfall(
                FailMode.DISK,
                "disk_reserve",
                f"free disk {new_dsk} MiB below the {state.lo_disk_mib} MiB reserve",
            )
        )
    if state.exclusive_storage and new_sp < 0:
        why = "unknown disk spindles" if d.disk_spindles is None else f"free spindles {new_sp}"
        yield Shortfall(FailMode.SPINDLES, "spindles", f"would leave {why}")
    if strict and new_isp > state.hi_spindles:
        yield (
            Shortfall(
                FailMode.DISK,
                "spindle_ratio",
                f"spindle use {new_isp:g} > {state.hi_spindles:g} allowed",
            )
        )
    if strict and sec_mem >= old_mem:
        yield (
            Shortfall(
                FailMode.MEM,
                "memory",
                f"failover memory {sec_mem} MiB >= unallocated memory {old_mem} MiB",
            )
        )
    if strict and old_mem <= new_rmem and not state.fail_n1:
        yield (
            Shortfall(
                FailMode.MEM,
                "n1",
                f"unallocated memory {old_mem} MiB would not cover the N+1 reserve {new_rmem} MiB",
            )
        )
    if strict:
        yield from forth_checks()


def apply_secondary(state: NodeState, d: InstanceDemand, primary: str) -> NodeState:
    """Add a *new* secondary without any check (the success branch of `addSecExEx`)."""
    dsk_util = Utilisation(0.0, 0.0, d.util.dsk, 0.0)
    forth = dict(
        secondaries_forth=state.secondaries_forth + (d.name,),
        free_disk_forth_mib=state.free_disk_forth_mib - d.disk_mib,
        util_load_forth=state.util_load_forth + dsk_util,
        instance_spindles_forth=_new_instance_spindles(state, state.instance_spindles_forth, d, +1),
        free_spindles_forth=_new_free_spindles(state, state.free_spindles_forth, d, +1),
    )
    if d.forthcoming:
        return _evolve(state, **forth)
    peers = dict(state.peers)
    peers[primary] = peers.get(primary, 0) + d.secondary_memory_mib
    new_rmem = max(state.reserved_memory_mib, peers[primary])
    return _evolve(
        state,
        **forth,
        secondaries=state.secondaries + (d.name,),
        free_disk_mib=state.free_disk_mib - d.disk_mib,
        peers=tuple(sorted(peers.items())),
        peer_map=peer_map_add(state.peer_map, primary, peers[primary]),
        reserved_memory_mib=new_rmem,
        fail_n1=state.unallocated_memory_mib <= new_rmem,
        util_load=state.util_load + dsk_util,
        instance_spindles=_new_instance_spindles(state, state.instance_spindles, d, +1),
        free_spindles=_new_free_spindles(state, state.free_spindles, d, +1),
    )


def add_secondary(
    state: NodeState,
    d: InstanceDemand,
    primary: str,
    *,
    strict: bool = True,
    ignore_disks: bool = False,
) -> NodeState | FailMode:
    """htools `addSecExEx ignore_disks (not strict)`: the new state, or the first failure."""
    checks = _iter_secondary_shortfalls(state, d, primary, strict=strict, ignore_disks=ignore_disks)
    first = next(checks, None)
    if first is not None:
        return first.mode
    return apply_secondary(state, d, primary)


def remove_primary(state: NodeState, d: InstanceDemand, location_score: int = 0) -> NodeState:
    """htools `removePri`: give back what the primary used (its memory, disk, vCPUs...)."""
    local = d.uses_local_storage
    forth = dict(
        exclusion_tag_counts=_del_count(state.exclusion_tag_counts, d.exclusion_tags),
        primaries_forth=_without(state.primaries_forth, d.name),
        free_memory_forth_mib=state.free_memory_forth_mib + d.memory_mib,
        free_disk_forth_mib=state.free_disk_forth_mib + (d.disk_mib if local else 0),
        used_vcpus_forth=state.used_vcpus_forth - d.counted_vcpus,
        util_load_forth=state.util_load_forth - d.util,
        instance_spindles_forth=_new_instance_spindles(state, state.instance_spindles_forth, d, -1),
        free_spindles_forth=_new_free_spindles(state, state.free_spindles_forth, d, -1),
    )
    if d.forthcoming:
        return _evolve(state, **forth)
    i_mem = state.instance_memory_mib - (d.memory_mib if d.uses_memory else 0)
    new = _evolve(
        state,
        **forth,
        primaries=_without(state.primaries, d.name),
        instance_memory_mib=i_mem,
        free_disk_mib=state.free_disk_mib + (d.disk_mib if local else 0),
        used_vcpus=state.used_vcpus - d.counted_vcpus,
        util_load=state.util_load - d.util,
        instance_spindles=_new_instance_spindles(state, state.instance_spindles, d, -1),
        free_spindles=_new_free_spindles(state, state.free_spindles, d, -1),
        location_score=state.location_score - location_score - desired_location_misses(state, d),
        location_exclusion_counts=_del_count(
            state.location_exclusion_counts, _location_exclusion_pairs(state, d)
        ),
    )
    return _evolve(new, fail_n1=new.unallocated_memory_mib <= new.reserved_memory_mib)


def remove_secondary(state: NodeState, d: InstanceDemand, primary: str) -> NodeState:
    """htools `removeSec`: free the disk and the failover reservation for `primary`."""
    dsk_util = Utilisation(0.0, 0.0, d.util.dsk, 0.0)
    forth = dict(
        secondaries_forth=_without(state.secondaries_forth, d.name),
        free_disk_forth_mib=state.free_disk_forth_mib + (d.disk_mib if d.uses_local_storage else 0),
        util_load_forth=state.util_load_forth - dsk_util,
        instance_spindles_forth=_new_instance_spindles(state, state.instance_spindles_forth, d, -1),
        free_spindles_forth=_new_free_spindles(state, state.free_spindles_forth, d, -1),
    )
    if d.forthcoming:
        return _evolve(state, **forth)
    peers = dict(state.peers)
    old_peer = peers.get(primary, 0)
    new_peer = old_peer - d.secondary_memory_mib
    if new_peer > 0:
        peers[primary] = new_peer
        peer_map = peer_map_add(state.peer_map, primary, new_peer)
    else:
        peers.pop(primary, None)
        peer_map = tuple(e for e in state.peer_map if e[0] != primary)
    old_rmem = state.reserved_memory_mib
    new_rmem = old_rmem if old_peer < old_rmem else max(peers.values(), default=0)
    return _evolve(
        state,
        **forth,
        secondaries=_without(state.secondaries, d.name),
        free_disk_mib=state.free_disk_mib + (d.disk_mib if d.uses_local_storage else 0),
        peers=tuple(sorted(peers.items())),
        peer_map=peer_map,
        reserved_memory_mib=new_rmem,
        fail_n1=state.unallocated_memory_mib <= new_rmem,
        util_load=state.util_load - dsk_util,
        instance_spindles=_new_instance_spindles(state, state.instance_spindles, d, -1),
        free_spindles=_new_free_spindles(state, state.free_spindles, d, -1),
    )


def _without(names: tuple[str, ...], name: str) -> tuple[str, ...]:
    """Drop the first occurrence, like Haskell's `delete`."""
    if name not in names:
        return names
    i = names.index(name)
    return names[:i] + names[i + 1 :]


# --- instance moves (Cluster/Moves.hs `applyMoveEx`) --------------------------------------


class MoveKind(StrEnum):
    """hbal's move types, by the code hbal prints in `a=...`."""

    FAILOVER = "f"  # drbd: swap primary and secondary
    FAILOVER_TO_ANY = "fa"  # externally mirrored: migrate to any node
    REPLACE_PRIMARY = "f r f"  # drbd: new primary, same secondary
    REPLACE_SECONDARY = "r"  # drbd: same primary, new secondary
    REPLACE_AND_FAILOVER = "r f"  # drbd: new primary, the old primary becomes secondary
    FAILOVER_AND_REPLACE = "f r"  # drbd: the old secondary becomes primary, new secondary


def check_migration(source: NodeState, target: NodeState) -> FailMode | None:
    """A live migration needs the source's migration tags to be receivable by the target."""
    if source.migration_tags <= target.receivable_migration_tags:
        return None
    return FailMode.MIG


@dataclass(frozen=True, slots=True)
class MoveResult:
    """The changed node states and the instance's new (primary, secondary)."""

    nodes: Mapping[str, NodeState]
    primary: str
    secondary: str | None


@dataclass(frozen=True)
class SecondaryReplacement:
    """A replace-secondary split into what does not depend on the target (the primary and the
    old secondary giving the instance up) and what does, so that a walk over many targets
    (hail's drbd evacuation, every ordered pair of nodes) does the first part once."""

    d: InstanceDemand
    primary: str
    secondary: str
    old_primary: NodeState
    primary_without: NodeState  # the primary with the instance removed
    secondary_without: NodeState  # the old secondary with the instance removed
    force: bool

    @classmethod
    def of(
        cls,
        nodes: Mapping[str, NodeState],
        d: InstanceDemand,
        primary: str,
        secondary: str,
        *,
        force: bool = False,
    ) -> SecondaryReplacement:
        old_p, old_s = nodes[primary], nodes[secondary]
        old_loc = pair_location_score(old_p, old_s)
        int_p = remove_primary(old_p, d, old_loc)
        int_s = remove_secondary(old_s, d, primary)
        return cls(d, primary, secondary, old_p, int_p, int_s, force or old_s.offline)

    def new_secondary(self, tgt: NodeState) -> NodeState | FailMode:
        """The target with the instance's secondary added (depends on the target's state and
        its failover memory for the primary only)."""
        return add_secondary(tgt, self.d, self.primary, strict=not self.force)

    def primary_back(self, tgt: NodeState, memo: dict | None = None) -> NodeState | FailMode:
        """The primary with the instance back, scored for the pair it makes with the target
        (depends on the location tags the two share only: the same for most targets, made
        once per `memo`, see `apply_move`)."""
        loc = pair_location_score(self.old_primary, tgt)
        base = self.primary_without
        key = ("ap", id(base), id(self.d), False, loc)
        make = lambda: add_primary(base, self.d, strict=False, location_score=loc)  # noqa: E731
        return _once(memo, key, base, self.d, make)

    def to(self, target: str, tgt: NodeState, memo: dict | None = None) -> MoveResult | FailMode:
        new_s = self.new_secondary(tgt)
        if isinstance(new_s, FailMode):
            return new_s
        p_back = self.primary_back(tgt, memo)
        if isinstance(p_back, FailMode):
            return p_back
        return MoveResult(
            {self.primary: p_back, target: new_s, self.secondary: self.secondary_without},
            self.primary,
            target,
        )


def _once(
    memo: dict | None, key: tuple, node: NodeState, d: InstanceDemand, make: Callable[[], Any]
) -> Any:
    """`make()`, or its value from `memo` when it was made from the very same (immutable)
    node state and demand: the key names them by identity, and the entry keeps them, so a
    key is never matched by other objects that happen to get the same ids."""
    if memo is None:
        return make()
    hit = memo.get(key)
    if hit is not None and hit[0] is node and hit[1] is d:
        return hit[2]
    out = make()
    memo[key] = (node, d, out)
    return out


def apply_move(
    nodes: Mapping[str, NodeState],
    d: InstanceDemand,
    primary: str,
    secondary: str | None,
    kind: MoveKind,
    target: str | None = None,
    *,
    force: bool = False,
    memo: dict | None = None,
) -> MoveResult | FailMode:
    """One hbal move of instance `d` now on (primary, secondary), exactly as htools does it.

    Soft checks are skipped with `force` and whenever the node the instance leaves is
    offline (evacuation), as in htools. Returns the changed nodes or the first failure.

    `memo` (a dict the caller keeps while it tries many moves of the same states: hbal's
    round) shares the adds and removes that do not depend on the target (the instance
    leaving its nodes, re-added to its primary or secondary), each a pure function of its
    node state and arguments; the answer is the same with or without it.
    """

    def rp(node: NodeState, loc: int) -> NodeState:
        return _once(memo, ("rp", id(node), id(d), loc), node, d,
                     lambda: remove_primary(node, d, loc))  # fmt: skip

    def rs(node: NodeState, pnode: str) -> NodeState:
        return _once(memo, ("rs", id(node), id(d), pnode), node, d,
                     lambda: remove_secondary(node, d, pnode))  # fmt: skip

    def ap(node: NodeState, strict: bool, loc: int) -> NodeState | FailMode:
        return _once(memo, ("ap", id(node), id(d), strict, loc), node, d,
                     lambda: add_primary(node, d, strict=strict, location_score=loc))  # fmt: skip

    old_p = nodes[primary]
    old_s = nodes[secondary] if secondary is not None else None
    old_loc = pair_location_score(old_p, old_s)
    force_p = old_p.offline or force

    def fail_or(*checks: FailMode | None) -> FailMode | None:
        return next((c for c in checks if c is not None), None)

    if kind is MoveKind.FAILOVER_TO_ANY:
        assert target is not None
        tgt = nodes[target]
        if fail := check_migration(old_p, tgt):
            return fail
        new_p = add_primary(tgt, d, strict=not force_p, location_score=old_loc)
        if isinstance(new_p, FailMode):
            return new_p
        return MoveResult({target: new_p, primary: rp(old_p, old_loc)}, target, secondary)

    assert old_s is not None and secondary is not None, "only mirrored instances have moves"
    int_p = rp(old_p, old_loc)
    int_s = rs(old_s, primary)
    if kind is MoveKind.FAILOVER:
        if fail := check_migration(old_p, old_s):
            return fail
        new_p = ap(int_s, not force_p, old_loc)
        if isinstance(new_p, FailMode):
            return new_p
        new_s = add_secondary(int_p, d, secondary, strict=not force_p, ignore_disks=old_p.offline)
        if isinstance(new_s, FailMode):
            return new_s
        return MoveResult({secondary: new_p, primary: new_s}, secondary, primary)

    assert target is not None
    tgt = nodes[target]
    if kind is MoveKind.REPLACE_SECONDARY:
        return SecondaryReplacement(
            d, primary, secondary, old_p, int_p, int_s, force or old_s.offline
        ).to(target, tgt, memo)
    if kind is MoveKind.REPLACE_PRIMARY:
        loc = pair_location_score(tgt, int_s)
        if fail := fail_or(check_migration(old_p, old_s), check_migration(old_s, tgt)):
            return fail
        tmp_s = ap(int_s, not force_p, loc)
        if isinstance(tmp_s, FailMode):
            return tmp_s
        new_p = ap(tgt, not force_p, loc)
        if isinstance(new_p, FailMode):
            return new_p
        new_s = add_secondary(rp(tmp_s, loc), d, target, strict=not force_p)
        if isinstance(new_s, FailMode):
            return new_s
        return MoveResult({target: new_p, primary: int_p, secondary: new_s}, target, secondary)
    if kind is MoveKind.REPLACE_AND_FAILOVER:
        loc = pair_location_score(tgt, int_p)
        if fail := check_migration(old_p, tgt):
            return fail
        new_p = ap(tgt, not force, loc)
        if isinstance(new_p, FailMode):
            return new_p
        new_s = add_secondary(int_p, d, target, strict=not (old_s.offline or force))
        if isinstance(new_s, FailMode):
            return new_s
        return MoveResult({target: new_p, primary: new_s, secondary: int_s}, target, primary)
    if kind is MoveKind.FAILOVER_AND_REPLACE:
        loc = pair_location_score(int_s, tgt)
        if fail := check_migration(old_p, old_s):
            return fail
        new_p = ap(int_s, not force_p, loc)
        if isinstance(new_p, FailMode):
            return new_p
        new_s = add_secondary(tgt, d, secondary, strict=not force_p)
        if isinstance(new_s, FailMode):
            return new_s
        return MoveResult({secondary: new_p, target: new_s, primary: int_p}, secondary, target)
    raise ValueError(f"unknown move {kind}")
