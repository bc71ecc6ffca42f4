"""Seeded random clusters for the squeeze tests and benchmarks.

Externally mirrored (ext) instances of a few flavours on nodes of a few hardware types, with
consistent reported free memory, so both htools and exalloc load them without warnings.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from model.cluster import (
    DEFAULT_ISPEC_MAX,
    Cluster,
    Disk,
    Instance,
    IPolicy,
    ISpec,
    MinMax,
    Node,
    NodeGroup,
)

# (memory MiB, physical CPUs): hardware types
NODE_TYPES: tuple[tuple[int, int], ...] = ((16384, 8), (32768, 16), (65536, 24))
# bigger hardware for the scale benchmarks (about ten instances per node)
LARGE_NODE_TYPES: tuple[tuple[int, int], ...] = ((65536, 24), (98304, 32), (131072, 48))
# (memory MiB, vcpus): instance flavours
FLAVOURS: tuple[tuple[int, int], ...] = (
    (512, 1),
    (1024, 1),
    (1536, 1),
    (2048, 2),
    (3072, 2),
    (4096, 2),
    (6144, 4),
    (8192, 4),
)
STD = ISpec(1024, 1, 1024, 1, 1, 1)
POLICY = IPolicy(
    minmax=(MinMax(ISpec(128, 1, 0, 0, 1, 1), DEFAULT_ISPEC_MAX),),
    std=STD,
    disk_templates=("ext", "drbd", "plain", "diskless"),
    vcpu_ratio=4.0,
    spindle_ratio=32.0,
)


@dataclass(frozen=True)
class SqueezeSpec:
    """Shape of a generated cluster; the seed names it for good."""

    nodes: int = 8
    instances: int = 32
    node_types: tuple[tuple[int, int], ...] = NODE_TYPES
    flavours: tuple[tuple[int, int], ...] = FLAVOURS
    node_memory_mib: int = 1024
    max_fill: float = 0.6  # a node is filled to at most this share of its memory
    standby: int = 0  # offline nodes tagged htools:standby:auto, at the end
    seed: int = 0


def ext_cluster(spec: SqueezeSpec) -> Cluster:
    """Nodes `node-NNNN` (the first is master), instances `inst-NNNNN` placed at random."""
    rng = random.Random(spec.seed)
    group = NodeGroup("default", "uuid-default", ipolicy=POLICY)
    hw = [rng.choice(spec.node_types) for _ in range(spec.nodes)]
    used = [0] * spec.nodes
    online = spec.nodes - spec.standby
    placed: list[Instance] = []
    for k in range(spec.instances):
        mem, vcpus = rng.choice(spec.flavours)
        tries = [rng.randrange(online) for _ in range(20)] + rng.sample(range(online), online)
        fitting = (
            n for n in tries if used[n] + mem <= hw[n][0] * spec.max_fill - spec.node_memory_mib
        )
        n = next(fitting, -1)
        if n < 0:
            continue  # the cluster is full: fewer instances than asked
        used[n] += mem
        placed.append(
            Instance(
                name=f"inst-{k:05d}",
                memory_mib=mem,
                disks=(Disk(10240),),
                vcpus=vcpus,
                status="running",
                auto_balance=True,
                primary=f"node-{n:04d}",
                secondary=None,
                disk_template="ext",
            )
        )
    nodes = []
    for n, (mem, cpus) in enumerate(hw):
        standby = n >= online
        nodes.append(
            Node(
                name=f"node-{n:04d}",
                total_memory_mib=float(mem),
                node_memory_mib=spec.node_memory_mib,
                free_memory_mib=mem - spec.node_memory_mib - used[n],
                total_disk_mib=1048576.0,
                free_disk_mib=1048576,
                total_cpus=float(cpus),
                group_uuid=group.uuid,
                offline=standby,
                master=n == 0,
                tags=("htools:standby:auto",) if standby else (),
            )
        )
    return Cluster(
        groups=(group,),
        nodes=tuple(nodes),
        instances=tuple(placed),
        cluster_policy=POLICY,
    )


def mixed_cluster(spec: SqueezeSpec) -> Cluster:
    """`ext_cluster` plus a few DRBD pairs, plain instances, exclusion tags and an instance
    with auto_balance off: the cases where identity matters."""
    rng = random.Random(spec.seed + 7919)
    base = ext_cluster(spec)
    insts = list(base.instances)
    nodes = {n.name: n for n in base.nodes}
    online = [n.name for n in base.nodes if n.online]
    _add_drbd(rng, insts, nodes, online, rng.randint(0, 4) if len(online) > 1 else 0)
    for k in range(rng.randint(0, 2)):
        p = rng.choice(online)
        auto = rng.random() < 0.5
        insts.append(
            Instance(f"plain-{k}", 512, (Disk(10240),), 1, "running", auto, p, None, "plain")
        )
        nodes[p] = replace(
            nodes[p],
            free_memory_mib=nodes[p].free_memory_mib - 512,
            free_disk_mib=nodes[p].free_disk_mib - 10240,
        )
    tags: tuple[str, ...] = ()
    if insts and rng.random() < 0.5:
        tags = ("htools:iextags:svc",)
        for k in rng.sample(range(len(insts)), min(4, len(insts))):
            insts[k] = replace(insts[k], tags=(rng.choice(("svc:a", "svc:b")),))
    if insts and rng.random() < 0.3:
        k = rng.randrange(len(insts))
        insts[k] = replace(insts[k], auto_balance=False)
    return replace(
        base,
        instances=tuple(insts),
        nodes=tuple(nodes[n.name] for n in base.nodes),
        cluster_tags=tags,
    )


def drbd_cluster(spec: SqueezeSpec, count: int) -> Cluster:
    """`ext_cluster` plus `count` DRBD instances on random pairs of online nodes (for
    `squeeze --move drbd` at scale, benchmarks/bench_squeeze.py --drbd)."""
    rng = random.Random(spec.seed + 104729)
    base = ext_cluster(spec)
    insts = list(base.instances)
    nodes = {n.name: n for n in base.nodes}
    online = [n.name for n in base.nodes if n.online]
    _add_drbd(rng, insts, nodes, online, count if len(online) > 1 else 0)
    return replace(base, instances=tuple(insts), nodes=tuple(nodes[n.name] for n in base.nodes))


def _add_drbd(
    rng: random.Random, insts: list[Instance], nodes: dict, online: list[str], count: int
) -> None:
    """`count` DRBD instances on random (primary, secondary) pairs, the nodes' free memory
    and disk reduced to match."""
    for k in range(count):
        p, s = rng.sample(online, 2)
        mem, disk = rng.choice((512, 1024, 2048)), rng.choice((10240, 40960))
        status = rng.choice(("running", "ADMIN_down"))
        insts.append(Instance(f"drbd-{k}", mem, (Disk(disk),), 1, status, True, p, s, "drbd"))
        used = mem if status == "running" else 0
        nodes[p] = replace(
            nodes[p],
            free_memory_mib=nodes[p].free_memory_mib - used,
            free_disk_mib=nodes[p].free_disk_mib - disk,
        )
        nodes[s] = replace(nodes[s], free_disk_mib=nodes[s].free_disk_mib - disk)
