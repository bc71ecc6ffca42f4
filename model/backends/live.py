"""What the RAPI and LUXI readers share: htools' assembly of a running cluster.

Both readers (Backend/Rapi.hs, Backend/Luxi.hs) build groups, then nodes (each finds its group
by uuid), then instances (each finds its nodes by name), then read the cluster info; the master
it names must be a node and is marked, every node gets the cluster's default hypervisor, and
kvm nodes then take the static node memory (`--static-kvm-node-memory`, 4096 MiB; 0 keeps the
reported value). A node is "live" when online and vm_capable; only a live node's resources are
read, the others count as zero and are offline, as are drained nodes. See docs/live.md.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

# The private readers are the Text.JSON rules every htools JSON backend shares (one copy).
from model.backends.iallocator import _Bad, _first_wins, _reject_constant
from model.cluster import Cluster, Disk, Instance, IPolicy, Node, NodeGroup

# Ganeti's Hypervisor type (src/Ganeti/Types.hs), the values `default_hypervisor` may take.
HYPERVISORS = ("kvm", "xen-pvm", "chroot", "xen-hvm", "lxc", "fake")
# htools' defaultGroupID: the group of a RAPI node that does not say (Types.hs).
DEFAULT_GROUP_UUID = "00000000-0000-0000-0000-000000000000"


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """The four things htools takes from the cluster info (`/2/info`, QueryClusterInfo)."""

    master: str
    tags: tuple[str, ...]
    ipolicy: IPolicy
    default_hypervisor: str


@dataclass(frozen=True, slots=True)
class NodeReading:
    """One node as a backend read it; `live` decides whether its resources counted."""

    name: str
    group_uuid: str
    offline: bool
    drained: bool
    vm_capable: bool
    exclusive_storage: bool
    spindles: int
    free_spindles: int
    total_memory_mib: float
    node_memory_mib: int
    free_memory_mib: int
    total_disk_mib: float
    free_disk_mib: int
    total_cpus: float
    reserved_cpus: int
    tags: tuple[str, ...]
    cpu_speed: float = 1.0

    def node(self) -> Node:
        live = not self.offline and self.vm_capable
        return Node(
            name=self.name,
            total_memory_mib=self.total_memory_mib,
            node_memory_mib=self.node_memory_mib,
            free_memory_mib=self.free_memory_mib,
            total_disk_mib=self.total_disk_mib,
            free_disk_mib=self.free_disk_mib,
            total_cpus=self.total_cpus,
            group_uuid=self.group_uuid,
            offline=not live or self.drained,
            drained=self.drained,
            spindles=self.spindles,
            tags=self.tags,
            exclusive_storage=self.exclusive_storage,
            free_spindles=self.free_spindles,
            reserved_cpus=self.reserved_cpus,
            cpu_speed=self.cpu_speed,
            vm_capable=self.vm_capable,
        )


def instance_of(
    name: str,
    *,
    memory_mib: int,
    disk_usage_mib: int,
    disk_sizes: Sequence[int],
    disk_spindles: Sequence[int | None],
    vcpus: int,
    status: str,
    tags: tuple[str, ...],
    auto_balance: bool,
    primary: str,
    secondaries: Sequence[str],
    disk_template: str,
    spindle_use: int,
    forthcoming: bool,
) -> Instance:
    """htools' Instance.create from a live reading: `dsk` is the reported disk usage, the disks
    pair sizes with spindles (zipWith: the shorter list wins), the first secondary counts."""
    return Instance(
        name=name,
        memory_mib=memory_mib,
        disks=tuple(Disk(s, sp) for s, sp in zip(disk_sizes, disk_spindles, strict=False)),
        vcpus=vcpus,
        status=status,
        auto_balance=auto_balance,
        primary=primary,
        secondary=secondaries[0] if secondaries else None,
        disk_template=disk_template,
        tags=tags,
        spindle_use=spindle_use,
        forthcoming=forthcoming,
        disk_total_mib=disk_usage_mib,
    )


def group_lookup(groups: Sequence[NodeGroup]) -> dict[str, str]:
    """uuid -> uuid, the later of two equal uuids winning (htools' assignIndices)."""
    return {g.uuid: g.uuid for g in groups}


def check_group(known: dict[str, str], node: str, group_uuid: str) -> str:
    if group_uuid not in known:
        raise _Bad(f"Unknown group '{group_uuid}' for node {node}")
    return group_uuid


def check_node(known: set[str], instance: str, node: str) -> str:
    if node not in known:
        raise _Bad(f"Unknown node '{node}' for instance {instance}")
    return node


def assemble(
    groups: Sequence[NodeGroup],
    nodes: Sequence[NodeReading],
    instances: Sequence[Instance],
    info: ClusterInfo,
    static_kvm_node_memory: int,
) -> Cluster:
    """The cluster htools loads: master marked, hypervisor set, kvm node memory made static."""
    if info.master not in {n.name for n in nodes}:
        raise _Bad(f"Master node {info.master} unknown")
    static = info.default_hypervisor == "kvm" and static_kvm_node_memory > 0
    built = []
    for reading in nodes:
        node = reading.node()
        changes: dict[str, Any] = {"hypervisor": info.default_hypervisor}
        if node.name == info.master:
            changes["master"] = True
        if static:
            changes["node_memory_mib"] = static_kvm_node_memory
        built.append(dataclasses.replace(node, **changes))
    return Cluster(
        groups=tuple(groups),
        nodes=tuple(built),
        instances=tuple(instances),
        cluster_tags=info.tags,
        cluster_policy=info.ipolicy,
    )


def decode_json(text: str) -> Any:
    """Strict JSON as Text.JSON reads it (no NaN, first of duplicate keys, exact numbers);
    raises _Bad with the decoder's reason."""
    try:
        return json.loads(
            text,
            object_pairs_hook=_first_wins,
            parse_constant=_reject_constant,
            parse_float=Decimal,
        )
    except json.JSONDecodeError as exc:
        raise _Bad(f"not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except (ValueError, RecursionError) as exc:
        raise _Bad(f"not JSON: {exc}") from None
