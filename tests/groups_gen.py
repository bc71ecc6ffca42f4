"""Seeded super clusters for the tests and benchmarks of docs/groups.md: several node groups of
mixed storage (shared pools named by `pool:` tags, drbd and plain on the nodes' disks), nodes
of mixed sizes and uneven fills, and optionally offline nodes still hosting instances.

Snapshots are consistent (reported free memory and disk include the instances placed), so
htools loads them as they are; `dump_text` writes them for the real tools.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from model.cluster import Cluster, Disk, Instance, IPolicy, ISpec, MinMax, Node, NodeGroup

# memory MiB, disk MiB, CPUs: hardware generations an operator keeps side by side
NODE_TYPES: tuple[tuple[int, int, int], ...] = (
    (32768, 409600, 8),
    (65536, 819200, 16),
    (98304, 1048576, 24),
    (131072, 1638400, 32),
)
# memory MiB, disk MiB, vCPUs: the flavours instances come in
FLAVOURS: tuple[tuple[int, int, int], ...] = (
    (1024, 10240, 1),
    (2048, 20480, 1),
    (4096, 40960, 2),
    (8192, 81920, 4),
    (16384, 163840, 8),
)
NODE_MEMORY_MIB = 1024

# group kinds: the templates their instances use and whether they reach a shared pool
KINDS: dict[str, tuple[str, ...]] = {
    "ext": ("ext",),
    "rbd": ("rbd",),
    "lvm": ("drbd", "plain"),
    "mixed": ("ext", "drbd", "plain"),
    "drbd": ("drbd",),
}


def policy_for(templates: tuple[str, ...]) -> IPolicy:
    return IPolicy(
        minmax=(MinMax(ISpec(512, 1, 1024, 1, 1, 1), ISpec(65536, 16, 1048576, 4, 8, 4)),),
        std=ISpec(2048, 1, 20480, 1, 1, 1),
        disk_templates=(*templates, "diskless"),
        vcpu_ratio=4.0,
        spindle_ratio=32.0,
    )


@dataclass(frozen=True)
class GroupSpec:
    nodes: int
    kind: str = "ext"  # a key of KINDS
    pool: str | None = "a"  # the shared pool its nodes reach (shared kinds)
    fill: float = 0.6  # memory of the group's nodes used by instances, on average
    offline: int = 0  # nodes switched off while still hosting instances


@dataclass
class _Room:
    name: str
    group: int
    mem: int
    dsk: int
    cpus: int
    fill: float
    used_mem: int = 0
    used_dsk: int = 0
    used_cpu: int = 0
    sec_mem: dict[str, int] | None = None

    def free_mem(self) -> int:
        return self.mem - NODE_MEMORY_MIB - self.used_mem

    def reserve(self) -> int:
        return max(self.sec_mem.values()) if self.sec_mem else 0


def super_cluster(
    seed: int,
    groups: tuple[GroupSpec, ...],
    *,
    node_types: tuple[tuple[int, int, int], ...] = NODE_TYPES,
    flavours: tuple[tuple[int, int, int], ...] = FLAVOURS,
    prefix: str = "pool:",
) -> Cluster:
    """Groups filled one by one: each node draws its own target fill around the group's, then
    instances of random flavours go onto random nodes below their target (drbd secondaries on
    another node of the group keeping htools' N+1 reserve)."""
    rng = random.Random(seed)
    node_groups = []
    for g, spec in enumerate(groups):
        templates = KINDS[spec.kind]
        shared = set(templates) & {"ext", "rbd"}
        tags = (f"{prefix}{spec.pool}",) if shared and spec.pool else ()
        node_groups.append(
            NodeGroup(f"g{g + 1}", f"uuid-g{g + 1}", "preferred", tags, (), policy_for(templates))
        )
    rooms: list[_Room] = []
    instances: list[Instance] = []
    offline: set[str] = set()
    for g, spec in enumerate(groups):
        mine = []
        for k in range(spec.nodes):
            mem, dsk, cpus = rng.choice(node_types)
            fill = min(0.98, max(0.05, rng.gauss(spec.fill, 0.12)))
            mine.append(_Room(f"g{g + 1}-n{k + 1:03d}", g, mem, dsk, cpus, fill, sec_mem={}))
        rooms += mine
        templates = KINDS[spec.kind]
        failures = 0
        while failures < 30:
            mem, dsk, cpu = rng.choice(flavours)
            template = rng.choice(templates)
            open_rooms = [r for r in mine if r.used_mem + mem <= r.fill * (r.mem - NODE_MEMORY_MIB)]
            inst = _place(rng, open_rooms, mine, (mem, dsk, cpu), template, len(instances) + 1)
            if inst is None:
                failures += 1
                continue
            if template in ("ext", "rbd") and spec.pool:
                inst = Instance(**{**_fields(inst), "tags": (f"{prefix}{spec.pool}",)})
            instances.append(inst)
        for r in rng.sample(mine, min(spec.offline, len(mine))):
            offline.add(r.name)
    nodes = tuple(
        Node(
            name=r.name,
            total_memory_mib=float(r.mem),
            node_memory_mib=NODE_MEMORY_MIB,
            free_memory_mib=r.free_mem(),
            total_disk_mib=float(r.dsk),
            free_disk_mib=r.dsk - r.used_dsk,
            total_cpus=float(r.cpus),
            group_uuid=node_groups[r.group].uuid,
            offline=r.name in offline,
            master=i == 0,
        )
        for i, r in enumerate(rooms)
    )
    return Cluster(groups=tuple(node_groups), nodes=nodes, instances=tuple(instances))


def _fields(inst: Instance) -> dict:
    return {f: getattr(inst, f) for f in inst.__dataclass_fields__}


def _place(
    rng: random.Random,
    candidates: list[_Room],
    group: list[_Room],
    flavour: tuple[int, int, int],
    template: str,
    n: int,
) -> Instance | None:
    mem, dsk, cpu = flavour
    local = template in ("plain", "drbd")
    for p in rng.sample(candidates, len(candidates)):
        if p.free_mem() - mem <= p.reserve() or (local and p.dsk - p.used_dsk <= dsk):
            continue
        if 1 + p.used_cpu + cpu > 4 * p.cpus:
            continue
        secondary = None
        if template == "drbd":
            peers = [
                s
                for s in rng.sample(group, len(group))
                if s is not p
                and s.dsk - s.used_dsk > dsk
                and s.free_mem() > max(s.reserve(), s.sec_mem.get(p.name, 0) + mem)
            ]
            if not peers:
                continue
            secondary = peers[0]
        p.used_mem += mem
        p.used_cpu += cpu
        if local:
            p.used_dsk += dsk
        if secondary is not None:
            secondary.used_dsk += dsk
            secondary.sec_mem[p.name] = secondary.sec_mem.get(p.name, 0) + mem
        return Instance(
            name=f"i{n:05d}",
            memory_mib=mem,
            disks=(Disk(dsk),),
            vcpus=cpu,
            status="running",
            auto_balance=True,
            primary=p.name,
            secondary=secondary.name if secondary else None,
            disk_template=template,
        )
    return None
