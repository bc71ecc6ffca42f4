"""Seeded synthetic inputs: cluster snapshots, IAllocator requests, Bareon schema/hardware pairs.

They are the inputs of the benchmarks, property tests and `exalloc batch`. Everything is drawn
from one `random.Random(seed)`, so a seed names an input for good. Snapshots are built
consistently (reported free memory, disk and spindles include the instances placed on a node,
DRBD secondaries keep the N+1 reserve) so that htools loads them without warnings.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from typing import Any

from model.backends.iallocator import ipolicy_json
from model.cluster import (
    Cluster,
    Disk,
    Instance,
    IPolicy,
    ISpec,
    MinMax,
    Node,
    NodeGroup,
)
from model.errors import InputError

TEMPLATES = ("ext", "plain", "drbd")
STANDBY_TAG = "htools:standby:auto"

# (memory MiB, disk MiB, physical CPUs): small, medium and large node types.
NODE_TYPES: tuple[tuple[int, int, int], ...] = (
    (32768, 512000, 8),
    (65536, 1048576, 16),
    (131072, 2097152, 32),
)

# A policy whose std spec is small enough for a few dozen instances per node type.
GENERATED_IPOLICY = IPolicy(
    minmax=(MinMax(ISpec(1024, 1, 10240, 1, 1, 1), ISpec(32768, 8, 524288, 4, 8, 4)),),
    std=ISpec(2048, 1, 20480, 1, 1, 1),
    disk_templates=("drbd", "ext", "plain", "diskless"),
    vcpu_ratio=4.0,
    spindle_ratio=32.0,
)


# Dedicated groups as Ganeti's own test data has them: three size classes, so the
# lost-allocation vectors (one entry per min spec) say which sizes a placement costs.
DEDICATED_IPOLICY = IPolicy(
    minmax=(
        MinMax(ISpec(1024, 1, 10240, 1, 1, 1), ISpec(4096, 2, 40960, 1, 1, 1)),
        MinMax(ISpec(4096, 2, 40960, 1, 1, 1), ISpec(16384, 4, 163840, 1, 1, 1)),
        MinMax(ISpec(16384, 4, 163840, 1, 1, 1), ISpec(65536, 8, 655360, 1, 1, 1)),
    ),
    std=ISpec(2048, 1, 20480, 1, 1, 1),
    disk_templates=("plain", "drbd", "diskless"),
    vcpu_ratio=4.0,
    spindle_ratio=32.0,
)


@dataclass(frozen=True)
class ClusterSpec:
    """What a generated snapshot looks like; every draw inside is seeded."""

    nodes: int = 8
    groups: int = 1
    node_types: tuple[tuple[int, int, int], ...] = NODE_TYPES
    templates: tuple[str, ...] = TEMPLATES
    exclusive_storage: bool = False
    fill: float = 0.5
    standby: int = 0
    node_memory_mib: int = 2048
    spindles: int = 12
    ipolicy: IPolicy = GENERATED_IPOLICY

    def validate(self) -> None:
        """Reject specs that cannot give a loadable snapshot, with a one-line reason."""
        if self.nodes < 1 or self.groups < 1:
            raise InputError("need at least one node and one group")
        if self.groups > self.nodes:
            raise InputError(f"{self.groups} groups need at least as many nodes ({self.nodes})")
        if not 0.0 <= self.fill <= 1.0:
            raise InputError(f"fill must be within 0..1, not {self.fill}")
        if self.standby < 0 or self.standby >= self.nodes:
            raise InputError(f"standby nodes must be 0..{self.nodes - 1}, not {self.standby}")
        bad = [t for t in self.templates if t not in TEMPLATES]
        if bad or not self.templates:
            raise InputError(f"templates must be among {', '.join(TEMPLATES)}: {bad or 'none'}")
        if not self.node_types:
            raise InputError("need at least one node type")


def _within(shape: ISpec, mm: MinMax) -> bool:
    fields = ("memory_size", "cpu_count", "disk_size", "disk_count", "nic_count", "spindle_use")
    return all(getattr(mm.min, f) <= getattr(shape, f) <= getattr(mm.max, f) for f in fields)


def instance_shapes(policy: IPolicy) -> tuple[ISpec, ...]:
    """Instance shapes the policy allows: the std spec times 1, 2, 4, ... within a min/max."""
    std = policy.std
    shapes = []
    for k in (1, 2, 4, 8, 16):
        mem, cpu, dsk = std.memory_size * k, max(1, std.cpu_count * k // 2), std.disk_size * k
        shape = ISpec(mem, cpu, dsk, 1, 1, 1)
        if any(_within(shape, mm) for mm in policy.minmax):
            shapes.append(shape)
    return tuple(shapes) or (std,)


@dataclass
class _Room:
    """Mutable bookkeeping while placing instances; frozen `Node`s are built at the end."""

    name: str
    group: int
    mem: int
    dsk: int
    cpus: int
    used_mem: int = 0
    used_dsk: int = 0
    used_cpu: int = 0
    used_spindles: int = 0
    offline: bool = False
    # memory of this node's DRBD secondaries, per primary: the N+1 reserve is the max.
    sec_mem: dict[str, int] | None = None

    def free_mem(self, node_memory: int) -> int:
        return self.mem - node_memory - self.used_mem

    def reserve(self) -> int:
        return max(self.sec_mem.values()) if self.sec_mem else 0


def generate_cluster(spec: ClusterSpec, seed: int) -> Cluster:
    """A consistent snapshot: instances placed at random until `fill` of the memory is used."""
    spec.validate()
    rng = random.Random(seed)
    groups = tuple(
        NodeGroup(
            name=f"group-{g + 1:02d}",
            uuid=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            ipolicy=spec.ipolicy,
        )
        for g in range(spec.groups)
    )
    rooms: list[_Room] = []
    for i in range(spec.nodes):
        mem, dsk, cpus = rng.choice(spec.node_types)
        rooms.append(_Room(f"node-{i + 1:03d}", i % spec.groups, mem, dsk, cpus, sec_mem={}))
    for room in rooms[len(rooms) - spec.standby :] if spec.standby else ():
        room.offline = True
    shapes = instance_shapes(spec.ipolicy)
    online = [r for r in rooms if not r.offline]
    capacity = sum(r.mem - spec.node_memory_mib for r in online)
    target = spec.fill * capacity
    used = 0
    instances: list[Instance] = []
    failures = 0
    while used < target and failures < 50:
        shape = rng.choice(shapes)
        template = rng.choice(spec.templates)
        placed = _place(spec, rng, online, shape, template, len(instances) + 1)
        if placed is None:
            failures += 1
            continue
        instances.append(placed)
        used += shape.memory_size
    nodes = tuple(_node(spec, r, groups[r.group], i == 0) for i, r in enumerate(rooms))
    return Cluster(groups=groups, nodes=nodes, instances=tuple(instances))


def _fits(spec: ClusterSpec, r: _Room, shape: ISpec, primary: bool, template: str) -> bool:
    local = template in ("plain", "drbd")
    if local and r.dsk - r.used_dsk < shape.disk_size:
        return False
    if spec.exclusive_storage and local and spec.spindles - r.used_spindles < 1:
        return False
    if primary:
        cpu_limit = spec.ipolicy.vcpu_ratio * r.cpus
        if r.free_mem(spec.node_memory_mib) - shape.memory_size < r.reserve():
            return False
        if 1 + r.used_cpu + shape.cpu_count > cpu_limit:
            return False
    return True


def _place(
    spec: ClusterSpec, rng: random.Random, online: list[_Room], shape: ISpec, template: str, n: int
) -> Instance | None:
    """Put one instance on a random node that fits (and a secondary for DRBD), or give up."""
    order = rng.sample(online, len(online))
    for p in order:
        if not _fits(spec, p, shape, True, template):
            continue
        secondary = None
        if template == "drbd":
            peers = [
                s
                for s in order
                if s is not p
                and s.group == p.group
                and _fits(spec, s, shape, False, template)
                and s.free_mem(spec.node_memory_mib)
                >= max(s.reserve(), s.sec_mem.get(p.name, 0) + shape.memory_size)
            ]
            if not peers:
                continue
            secondary = peers[0]
        p.used_mem += shape.memory_size
        p.used_cpu += shape.cpu_count
        if template in ("plain", "drbd"):
            p.used_dsk += shape.disk_size
            p.used_spindles += 1
        if secondary is not None:
            secondary.used_dsk += shape.disk_size
            secondary.used_spindles += 1
            secondary.sec_mem[p.name] = secondary.sec_mem.get(p.name, 0) + shape.memory_size
        spindles = 1 if spec.exclusive_storage and template in ("plain", "drbd") else None
        return Instance(
            name=f"inst-{n:04d}",
            memory_mib=shape.memory_size,
            disks=(Disk(shape.disk_size, spindles),),
            vcpus=shape.cpu_count,
            status="running",
            auto_balance=True,
            primary=p.name,
            secondary=secondary.name if secondary else None,
            disk_template=template,
            spindle_use=shape.spindle_use,
        )
    return None


def _node(spec: ClusterSpec, r: _Room, group: NodeGroup, master: bool) -> Node:
    return Node(
        name=r.name,
        total_memory_mib=float(r.mem),
        node_memory_mib=spec.node_memory_mib,
        free_memory_mib=r.free_mem(spec.node_memory_mib),
        total_disk_mib=float(r.dsk),
        free_disk_mib=r.dsk - r.used_dsk,
        total_cpus=float(r.cpus),
        group_uuid=group.uuid,
        offline=r.offline,
        master=master,
        spindles=spec.spindles,
        tags=(STANDBY_TAG,) if r.offline else (),
        exclusive_storage=spec.exclusive_storage,
        free_spindles=spec.spindles - r.used_spindles if spec.exclusive_storage else 0,
        reserved_cpus=1,
    )


# -- IAllocator requests ------------------------------------------------------------------------


def _instance_json(
    shape: ISpec, template: str, exclusive: bool, nodes: list[str] | None = None
) -> dict[str, Any]:
    disk: dict[str, Any] = {"mode": "rw", "size": shape.disk_size}
    if exclusive:
        disk["spindles"] = 1
    out: dict[str, Any] = {
        "disk_space_total": shape.disk_size,
        "disk_template": template,
        "disks": [disk],
        "memory": shape.memory_size,
        "nics": [],
        "spindle_use": shape.spindle_use,
        "tags": [],
        "vcpus": shape.cpu_count,
    }
    if nodes is not None:
        out["nodes"] = nodes
    return out


def cluster_json(cluster: Cluster) -> dict[str, Any]:
    """The cluster part of an IAllocator v2 request (keys in htools' index order)."""
    nodes: dict[str, Any] = {}
    for n in cluster.nodes:
        nodes[n.name] = {
            "drained": n.drained,
            "free_disk": n.free_disk_mib,
            "free_memory": n.free_memory_mib,
            "free_spindles": n.free_spindles if n.exclusive_storage else n.spindles,
            "group": n.group_uuid,
            "master_candidate": True,
            "master_capable": True,
            "ndparams": {"exclusive_storage": n.exclusive_storage, "spindle_count": n.spindles},
            "offline": n.offline,
            "reserved_cpus": n.reserved_cpus,
            "reserved_memory": n.node_memory_mib,
            "tags": list(n.tags),
            "total_cpus": int(n.total_cpus),
            "total_disk": int(n.total_disk_mib),
            "total_memory": int(n.total_memory_mib),
            "total_spindles": n.spindles,
            "vm_capable": True,
        }
    instances: dict[str, Any] = {}
    for i in cluster.instances:
        shape = ISpec(i.memory_mib, i.vcpus, i.disk_mib, 1, 1, i.spindle_use)
        nodes_of = [i.primary] + ([i.secondary] if i.secondary else [])
        exclusive = cluster.node(i.primary).exclusive_storage
        instances[i.name] = _instance_json(shape, i.disk_template, exclusive, nodes_of)
    groups = {
        g.uuid: {
            "alloc_policy": g.alloc_policy,
            "ipolicy": ipolicy_json(g.ipolicy),
            "name": g.name,
            "networks": list(g.networks),
            "tags": list(g.tags),
        }
        for g in cluster.groups
    }
    return {
        "cluster_tags": list(cluster.cluster_tags),
        "enabled_hypervisors": ["xen-pvm"],
        "instances": instances,
        "nodegroups": groups,
        "nodes": nodes,
    }


def generate_request(
    cluster: Cluster, seed: int, kind: str = "allocate", count: int = 3
) -> dict[str, Any]:
    """An IAllocator request on `cluster`: one new instance, or `count` of them for multi."""
    if kind not in ("allocate", "multi-allocate"):
        raise InputError(f"unknown request type {kind!r} (allocate, multi-allocate)")
    rng = random.Random(seed)
    policy = cluster.groups[0].ipolicy
    shapes = instance_shapes(policy)
    exclusive = any(n.exclusive_storage for n in cluster.nodes)
    templates = [t for t in TEMPLATES if t in policy.disk_templates]
    if exclusive:
        templates = [t for t in templates if t in ("plain", "drbd")] or ["plain"]
    used_templates = {i.disk_template for i in cluster.instances} & set(templates)
    templates = sorted(used_templates) or templates

    def one(name: str) -> dict[str, Any]:
        template = rng.choice(templates)
        body = _instance_json(rng.choice(shapes), template, exclusive)
        body.update(
            name=name,
            required_nodes=2 if template == "drbd" else 1,
            hypervisor="xen-pvm",
            os="debootstrap",
        )
        return body

    if kind == "allocate":
        request = one("new-0001")
        request["type"] = "allocate"
    else:
        request = {
            "type": "multi-allocate",
            "instances": [one(f"new-{k + 1:04d}") for k in range(count)],
        }
    return {**cluster_json(cluster), "request": request}


# -- Bareon schema / hardware pairs -------------------------------------------------------------


def generate_bareon(seed: int, disks: int = 3, spaces: int = 5) -> dict[str, Any]:
    """A fixture-format document (`dynamic_schema`, `hw_info`) that is always feasible."""
    if disks < 1 or spaces < 1:
        raise InputError("need at least one disk and one space")
    rng = random.Random(seed)
    hw = []
    for d in range(disks):
        kind = rng.choice(("hdd", "hdd", "ssd"))
        name = f"sd{chr(ord('a') + d)}" if d < 26 else f"disk{d}"
        size = (
            rng.choice((10240, 20480, 51200, 102400))
            if kind == "hdd"
            else rng.choice((4096, 10240))
        )
        hw.append(
            {
                "id": name,
                "path": f"/dev/disk/by-path/{name}",
                "dev": f"/dev/{name}",
                "type": kind,
                "size": size,
            }
        )
    total = sum(d["size"] for d in hw)
    budget = total // 2  # minimum sizes use at most half of the disks: always feasible
    schema: list[dict[str, Any]] = [{"id": "os", "type": "vg", "contains": []}]
    for k in range(spaces):
        space: dict[str, Any] = {"id": f"lv{k + 1}", "type": rng.choice(("lv", "lv", "partitions"))}
        share = budget // spaces
        choice = rng.random()
        if choice < 0.25:
            space["size"] = rng.randint(1, max(1, share // 1024)) * 512
        elif choice < 0.5:
            space["min_size"] = rng.randint(1, max(1, share // 1024)) * 512
        elif choice < 0.75:
            space["max_size"] = rng.randint(1, max(1, share // 512)) * 1024
        if rng.random() < 0.3:
            space["weight"] = rng.randint(1, 3)
        if rng.random() < 0.2 and any(d["type"] == "ssd" for d in hw):
            space["best_with_disks"] = 'yaql=$.disks.where($.type = "ssd")'
        if space["type"] == "lv":
            schema[0]["contains"].append({"id": space["id"]})
        schema.append(space)
    return {
        "name": f"generated bareon layout, seed {seed}",
        "dynamic_schema": schema,
        "hw_info": {"ram": rng.choice((2048, 4096, 8192)), "disks": hw},
    }
