"""The Ganeti cluster as htools sees it: immutable domain objects, all sizes in MiB.

Field meanings follow htools' text backend (Backend/Text.hs) and the IAllocator loader;
derived quantities (unallocated memory, N+1 reserve, ...) live in `model.resources`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

# Instance statuses that keep memory allocated on the primary (htools' instanceRunning set).
MEMORY_USING_STATUSES = frozenset(
    {"running", "ERROR_up", "ERROR_nodedown", "ERROR_nodeoffline", "ERROR_wrongnode"}
)
INSTANCE_STATUSES = MEMORY_USING_STATUSES | {
    "ADMIN_down",
    "ADMIN_offline",
    "ERROR_down",
    "USER_down",
}
DISK_TEMPLATES = (
    "diskless",
    "file",
    "sharedfile",
    "plain",
    "blockdev",
    "drbd",
    "rbd",
    "ext",
    "gluster",
)
LOCAL_STORAGE_TEMPLATES = frozenset({"plain", "drbd"})
MIRRORED_TEMPLATES = frozenset({"drbd"})
EXTERNALLY_MIRRORED_TEMPLATES = frozenset({"blockdev", "sharedfile", "gluster", "rbd", "ext"})
MOVABLE_TEMPLATES = frozenset({"drbd"}) | EXTERNALLY_MIRRORED_TEMPLATES
ALLOC_POLICIES = ("preferred", "last_resort", "unallocable")


@dataclass(frozen=True, slots=True)
class ISpec:
    """One instance spec: the six fields of an ipolicy spec, in htools' order."""

    memory_size: int
    cpu_count: int
    disk_size: int
    disk_count: int
    nic_count: int
    spindle_use: int


@dataclass(frozen=True, slots=True)
class MinMax:
    min: ISpec
    max: ISpec


@dataclass(frozen=True, slots=True)
class IPolicy:
    minmax: tuple[MinMax, ...]
    std: ISpec
    disk_templates: tuple[str, ...]
    vcpu_ratio: float
    spindle_ratio: float


DEFAULT_ISPEC_MIN = ISpec(128, 1, 1024, 1, 1, 1)
DEFAULT_ISPEC_MAX = ISpec(32768, 8, 1048576, 16, 8, 12)
# htools' built-in default policy: used for 4-section text files, groups without a policy line
# and always as the cluster policy of IAllocator input.
DEFAULT_IPOLICY = IPolicy(
    minmax=(MinMax(DEFAULT_ISPEC_MIN, DEFAULT_ISPEC_MAX),),
    std=DEFAULT_ISPEC_MIN,
    disk_templates=DISK_TEMPLATES,
    vcpu_ratio=4.0,
    spindle_ratio=32.0,
)


@dataclass(frozen=True, slots=True)
class NodeGroup:
    name: str
    uuid: str
    alloc_policy: str = "preferred"
    tags: tuple[str, ...] = ()
    networks: tuple[str, ...] = ()
    ipolicy: IPolicy = DEFAULT_IPOLICY


@dataclass(frozen=True, slots=True)
class Node:
    """A node as loaded; `free_*` are the values the node reported (they include its instances)."""

    name: str
    total_memory_mib: float
    node_memory_mib: int
    free_memory_mib: int
    total_disk_mib: float
    free_disk_mib: int
    total_cpus: float
    group_uuid: str
    offline: bool = False
    master: bool = False
    drained: bool = False
    spindles: int = 1
    tags: tuple[str, ...] = ()
    exclusive_storage: bool = False
    free_spindles: int = 0
    reserved_cpus: int = 1
    cpu_speed: float = 1.0
    vm_capable: bool = True
    hypervisor: str | None = None

    @property
    def online(self) -> bool:
        return not self.offline


@dataclass(frozen=True, slots=True)
class Disk:
    size_mib: int
    spindles: int | None = None


@dataclass(frozen=True, slots=True)
class Instance:
    name: str
    memory_mib: int
    disks: tuple[Disk, ...]
    vcpus: int
    status: str
    auto_balance: bool
    primary: str
    secondary: str | None
    disk_template: str
    tags: tuple[str, ...] = ()
    spindle_use: int = 1
    forthcoming: bool = False
    nics: tuple[dict, ...] = field(default=(), compare=False, hash=False)
    # IAllocator `disk_space_total`: htools' `dsk` there, which may exceed the sum of the disks
    # (drbd metadata); None when it is that sum (text backend, where one disk holds the total).
    disk_total_mib: int | None = None
    # htools' dynamic utilisation (cpu, mem, dsk, net): `baseUtil`, 1 each, as every loader
    # gives it; 0 each after hail's `-t FILE --ignore-dynu` (`clearDynU`)
    util: tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1.0)

    @property
    def disk_mib(self) -> int:
        """Total disk, as htools' `dsk` (the text backend stores only this sum)."""
        if self.disk_total_mib is not None:
            return self.disk_total_mib
        return sum(d.size_mib for d in self.disks)

    @property
    def disk_spindles(self) -> int | None:
        """Sum of the disks' spindles, None when any is unknown (text backend `-`)."""
        if not self.disks or any(d.spindles is None for d in self.disks):
            return None
        return sum(d.spindles for d in self.disks)  # type: ignore[misc]

    @property
    def uses_memory(self) -> bool:
        return self.status in MEMORY_USING_STATUSES and not self.forthcoming

    @property
    def offline(self) -> bool:
        return self.status == "ADMIN_offline"

    @property
    def uses_local_storage(self) -> bool:
        return self.disk_template in LOCAL_STORAGE_TEMPLATES

    @property
    def mirrored(self) -> bool:
        return self.disk_template in MIRRORED_TEMPLATES

    @property
    def externally_mirrored(self) -> bool:
        return self.disk_template in EXTERNALLY_MIRRORED_TEMPLATES

    @property
    def movable(self) -> bool:
        return self.disk_template in MOVABLE_TEMPLATES


#: Joins a name read more than once to its occurrence (`new-1|2`): exalloc keys instances by
#: name, htools by index, and `|` is the text format's separator, in no name read from it.
OCCURRENCE_MARK = "|"


def read_name(key: str) -> str:
    """The name an instance was read with (its key without the occurrence a repeated name
    got); what writers write and messages say."""
    return key.split(OCCURRENCE_MARK, 1)[0]


@dataclass(frozen=True)
class Cluster:
    """A whole snapshot. Order of groups, nodes and instances is significant (htools' indices).

    `ambiguous_instances`: names the input gave to more than one instance (htools reads such
    files, Ganeti's hroller-full.data and multiple-tags.data among them); the second and later
    of each are keyed `NAME|K`, and no answer may name one (`model.validate.refuse_ambiguous`).
    """

    groups: tuple[NodeGroup, ...]
    nodes: tuple[Node, ...]
    instances: tuple[Instance, ...]
    cluster_tags: tuple[str, ...] = ()
    cluster_policy: IPolicy = DEFAULT_IPOLICY
    ambiguous_instances: tuple[str, ...] = ()

    @cached_property
    def node_index(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    @cached_property
    def group_index(self) -> dict[str, NodeGroup]:
        """Groups by uuid and by name, as htools looks them up."""
        index = {g.name: g for g in self.groups}
        index.update({g.uuid: g for g in self.groups})
        return index

    @cached_property
    def instance_index(self) -> dict[str, Instance]:
        return {i.name: i for i in self.instances}

    def node(self, name: str) -> Node:
        return self.node_index[name]

    def without_dynamic_util(self) -> Cluster:
        """Every instance's dynamic utilisation at 0 (htools' `clearDynU`: `--ignore-dynu` on
        data loaded from a file), so that the four load metrics score nothing."""
        cleared = tuple(replace(i, util=(0.0, 0.0, 0.0, 0.0)) for i in self.instances)
        return replace(self, instances=cleared)

    def group(self, name_or_uuid: str) -> NodeGroup:
        return self.group_index[name_or_uuid]

    def group_of(self, node: Node) -> NodeGroup:
        return self.group_index[node.group_uuid]

    def nodes_in(self, group: NodeGroup) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.group_uuid == group.uuid)

    def primaries_of(self, node_name: str) -> tuple[Instance, ...]:
        return tuple(i for i in self.instances if i.primary == node_name)

    def secondaries_of(self, node_name: str) -> tuple[Instance, ...]:
        return tuple(i for i in self.instances if i.secondary == node_name)

    def is_dedicated(self, group: NodeGroup) -> bool:
        """A group is dedicated when every node of it has exclusive storage (vacuously true)."""
        return all(n.exclusive_storage for n in self.nodes_in(group))

    def tags_with_prefix(self, prefix: str) -> tuple[str, ...]:
        return tuple(t[len(prefix) :] for t in self.cluster_tags if t.startswith(prefix))
