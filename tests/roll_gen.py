"""Seeded random clusters for the roll tests and benchmarks (docs/roll.md).

Heterogeneous nodes (a few hardware types, some storage-heavy), DRBD instances whose
secondaries are drawn at random, concentrated on the storage-heavy nodes, or (a second
family) in the next rack of racks of one hardware type each, plain instances
(the non-redundant ones hroller moves away), stopped instances, offline nodes, node tags, one
or two groups and one master. Reported free memory and disk are consistent with the
instances, so htools loads the clusters without warnings.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from model.cluster import Cluster, Disk, Instance, Node, NodeGroup

# (memory MiB, disk MiB, CPUs)
NODE_TYPES = ((32768, 512000, 8), (65536, 1048576, 16), (131072, 2097152, 24))
STORAGE_TYPE = (65536, 8388608, 16)  # where concentrated secondaries go
# (memory MiB, disk MiB, vcpus)
FLAVOURS = (
    (512, 10240, 1),
    (1024, 20480, 1),
    (2048, 40960, 2),
    (4096, 81920, 2),
    (8192, 102400, 4),
)
TAGS = ("rack:a", "rack:b", "red", "blue")


@dataclass(frozen=True)
class RollSpec:
    nodes: int = 8
    instances: int = 16
    drbd_share: float = 0.7  # of the instances
    concentrated: int = 0  # storage-heavy nodes taking every drbd secondary (0: at random)
    groups: int = 1
    offline: int = 0
    fill: float = 0.6  # each node's memory filled to at most this share by its primaries
    stopped_share: float = 0.1
    tags: bool = True
    seed: int = 0
    # racks of one hardware type each, a drbd secondary in the rack after its primary's
    # (0: no racks; takes precedence over `concentrated`'s pool but not its storage nodes)
    racks: int = 0


def generate(spec: RollSpec) -> Cluster:
    rng = random.Random(spec.seed)
    groups = tuple(NodeGroup(f"group-{g}", f"uuid-{g}") for g in range(spec.groups))
    shapes = []
    for k in range(spec.nodes):
        storage = k < spec.concentrated
        if storage:
            mem, dsk, cpus = STORAGE_TYPE
        elif spec.racks:
            mem, dsk, cpus = NODE_TYPES[(k % spec.racks) % len(NODE_TYPES)]
        else:
            mem, dsk, cpus = rng.choice(NODE_TYPES)
        group = groups[0].uuid if storage else rng.choice(groups).uuid
        shapes.append((f"node-{k:04d}", mem, dsk, cpus, group, storage))
    if not spec.racks:
        rng.shuffle(shapes)
    rack = [k % spec.racks if spec.racks else 0 for k in range(spec.nodes)]
    master = rng.randrange(spec.nodes)
    offline = set(
        rng.sample([k for k in range(spec.nodes) if k != master], min(spec.offline, spec.nodes - 1))
    )
    used_mem = [0] * spec.nodes
    used_dsk = [0] * spec.nodes
    storage_nodes = [k for k, s in enumerate(shapes) if s[5]]
    instances = []
    for i in range(spec.instances):
        mem, dsk, vcpus = rng.choice(FLAVOURS)
        drbd = rng.random() < spec.drbd_share and spec.nodes > 1
        candidates = (
            [
                k
                for k in range(spec.nodes)
                if used_mem[k] + mem <= spec.fill * shapes[k][1]
                and used_dsk[k] + dsk < shapes[k][2]
                and not shapes[k][5]
            ]
            or [k for k in range(spec.nodes) if not shapes[k][5]]
            or list(range(spec.nodes))
        )
        p = rng.choice(candidates)
        s = None
        if drbd:
            nearby = (
                [k for k in range(spec.nodes) if rack[k] == (rack[p] + 1) % spec.racks]
                if spec.racks
                else []
            )
            pool = [
                k
                for k in (storage_nodes or nearby or range(spec.nodes))
                if k != p and shapes[k][4] == shapes[p][4] and used_dsk[k] + dsk < shapes[k][2]
            ]
            if not pool:
                drbd = False
            else:
                s = rng.choice(pool)
        status = "ADMIN_down" if rng.random() < spec.stopped_share else "running"
        if status == "running":
            used_mem[p] += mem
        used_dsk[p] += dsk
        if s is not None:
            used_dsk[s] += dsk
        instances.append(
            Instance(
                name=f"inst-{i:05d}",
                memory_mib=mem,
                disks=(Disk(dsk),),
                vcpus=vcpus,
                status=status,
                auto_balance=True,
                primary=shapes[p][0],
                secondary=shapes[s][0] if s is not None else None,
                disk_template="drbd" if drbd else "plain",
            )
        )
    nodes = []
    for k, (name, mem, dsk, cpus, group, _) in enumerate(shapes):
        tags = tuple(t for t in TAGS if spec.tags and rng.random() < 0.3)
        nodes.append(
            Node(
                name=name,
                total_memory_mib=float(mem),
                node_memory_mib=1024,
                free_memory_mib=mem - 1024 - used_mem[k],
                total_disk_mib=float(dsk),
                free_disk_mib=dsk - used_dsk[k],
                total_cpus=float(cpus),
                group_uuid=group,
                offline=k in offline,
                master=k == master,
                tags=tags,
            )
        )
    return Cluster(groups=groups, nodes=tuple(nodes), instances=tuple(instances))
