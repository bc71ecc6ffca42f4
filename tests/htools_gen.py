"""Random normal (non-exclusive-storage) clusters and IAllocator requests, for the tests and
benchmarks of the htools port (model/htools). Test and benchmark helper only.

Clusters are heterogeneous: node sizes drawn from a few machine shapes (and optionally jittered),
fills from empty to nearly full, existing instances of every template (plain, drbd, ext, rbd,
sharedfile, diskless, file, blockdev) with secondaries in the same group, some down, offline or
forthcoming instances, offline and drained nodes, node reserved memory and CPUs, exclusion tags,
location and migration tags, group policies (narrow specs, restricted templates, vCPU and
spindle ratios) and several groups with different allocation policies. The reported free
values include the instances (plus, on some nodes, memory or disk "missing"), so hail reads
them as a real cluster.

Every request type is generated: allocate (any template, with or without group_name,
restrict-to-nodes), multi-allocate, relocate, node-evacuate (three modes), change-group and
allocate-secondary.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SHARED_TEMPLATES = ("ext", "rbd", "sharedfile", "gluster", "diskless", "blockdev")
ALL_TEMPLATES = ("plain", "drbd", "file", *SHARED_TEMPLATES)


@dataclass(frozen=True)
class Shape:
    """A machine type: memory and disk in MiB, CPUs."""

    memory_mib: int
    disk_mib: int
    cpus: int


SHAPES = (
    Shape(32768, 512000, 8),
    Shape(65536, 1048576, 16),
    Shape(131072, 2097152, 24),
    Shape(262144, 4194304, 48),
)

INSTANCE_SIZES = (  # memory MiB, disk MiB, vcpus
    (512, 10240, 1),
    (1024, 20480, 1),
    (2048, 51200, 2),
    (4096, 102400, 2),
    (8192, 204800, 4),
    (16384, 409600, 8),
)


def _spec(mem: int, cpu: int, disk: int, count: int, nics: int, su: int) -> dict[str, int]:
    return {
        "memory-size": mem,
        "cpu-count": cpu,
        "disk-size": disk,
        "disk-count": count,
        "nic-count": nics,
        "spindle-use": su,
    }


def ipolicy(rng: random.Random, kind: str = "default") -> dict[str, Any]:
    """A group policy: Ganeti's default, or a narrower / odder one."""
    templates = list(ALL_TEMPLATES)
    minmax = [{"min": _spec(128, 1, 1024, 1, 1, 1), "max": _spec(32768, 8, 1048576, 16, 8, 12)}]
    vcpu_ratio, spindle_ratio = 4.0, 32.0
    if kind == "narrow":
        minmax = [{"min": _spec(512, 1, 10240, 1, 1, 1), "max": _spec(8192, 4, 204800, 4, 8, 4)}]
        templates = rng.sample(templates, k=rng.randint(3, len(templates)))
    elif kind == "two":
        minmax = [
            {"min": _spec(128, 1, 1024, 1, 1, 1), "max": _spec(2048, 2, 51200, 2, 8, 2)},
            {"min": _spec(4096, 2, 102400, 1, 1, 1), "max": _spec(32768, 8, 1048576, 16, 8, 12)},
        ]
    elif kind == "tight":
        vcpu_ratio = rng.choice((1.0, 1.5, 2.0))
        spindle_ratio = rng.choice((2.0, 4.0, 8.0))
    return {
        "minmax": minmax,
        "std": _spec(1024, 1, 10240, 1, 1, 1),
        "disk-templates": templates,
        "vcpu-ratio": vcpu_ratio,
        "spindle-ratio": spindle_ratio,
    }


def _instance(
    rng: random.Random,
    template: str,
    nodes: list[str],
    *,
    size: tuple[int, int, int] | None = None,
    tags: list[str] | None = None,
) -> dict[str, Any]:
    mem, disk, vcpus = size or rng.choice(INSTANCE_SIZES)
    if template == "diskless":
        disks: list[dict[str, Any]] = []
        disk = 0
    elif rng.random() < 0.15:
        disks = [{"mode": "rw", "size": disk // 2}, {"mode": "rw", "size": disk - disk // 2}]
    else:
        disks = [{"mode": "rw", "size": disk}]
    total = disk + (128 * len(disks) if template == "drbd" else 0)  # drbd metadata
    return {
        "disk_space_total": total,
        "disk_template": template,
        "disks": disks,
        "memory": mem,
        "nics": [{"mac": "aa:00:00:00:00:01", "ip": None, "mode": "bridged", "link": "br0"}],
        "nodes": nodes,
        "spindle_use": rng.choice((1, 1, 1, 2)),
        "tags": tags or [],
        "vcpus": vcpus,
    }


def cluster(
    rng: random.Random,
    n_nodes: int,
    *,
    groups: int = 1,
    fill: float | None = None,
    templates: tuple[str, ...] = ALL_TEMPLATES,
    shapes: tuple[Shape, ...] = SHAPES,
    odd: bool = True,
    tags: bool = True,
    policies: bool = True,
    fills: tuple[float, ...] = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9),
) -> dict[str, Any]:
    """A random normal cluster (no request yet) as an IAllocator dict.

    `fill` is the target share of each node's memory taken by its primaries (when None, one
    of `fills` per node); `templates` are the templates of existing instances; `odd` adds
    offline and drained nodes, reserved memory/CPUs, down/offline/forthcoming instances and
    missing memory.
    """
    group_names = [f"group{g}" for g in range(1, groups + 1)]
    nodegroups = {}
    kinds = ("default", "default", "narrow", "two", "tight")
    for name in group_names:
        kind = rng.choice(kinds) if policies else "default"
        policy = "preferred"
        if groups > 1 and odd:
            policy = rng.choice(("preferred", "preferred", "last_resort", "unallocable"))
        nodegroups[f"uuid-{name}"] = {
            "name": name,
            "alloc_policy": policy,
            "networks": [],
            "tags": [],
            "ipolicy": ipolicy(rng, kind),
        }
    names = [f"node-{i:04d}" for i in range(1, n_nodes + 1)]
    group_of = {n: f"uuid-group{1 + i * groups // n_nodes}" for i, n in enumerate(names)}
    shape_of = {n: rng.choice(shapes) for n in names}
    used = {n: {"mem": 0, "disk": 0, "cpu": 0} for n in names}
    cluster_tags: list[str] = []
    location = tags and rng.random() < 0.3
    exclusion = tags and rng.random() < 0.3
    migration = tags and rng.random() < 0.15
    if exclusion:
        cluster_tags.append("htools:iextags:svc")
    if location:
        cluster_tags.append("htools:nlocation:power")
    if migration:
        cluster_tags += ["htools:migration:hv", "htools:allowmigration:hv:old::hv:new"]
    if all(g["alloc_policy"] == "unallocable" for g in nodegroups.values()):
        # every group unallocable makes the cluster vacuously "dedicated" for hail
        next(iter(nodegroups.values()))["alloc_policy"] = "preferred"
    instances: dict[str, Any] = {}
    targets = {n: fill if fill is not None else rng.choice(fills) for n in names}
    failover: dict[tuple[str, str], int] = {}  # (secondary, primary) -> memory to take over

    def takes(sec: str, n: str, size: tuple[int, int, int]) -> bool:
        """Room on `sec` for the disk and, once its own fill is there, for failing over
        every drbd instance of `n` it backs (so most clusters are N+1 redundant)."""
        cap = shape_of[sec]
        if used[sec]["disk"] + size[1] + 1024 > cap.disk_mib:
            return False
        own = max(used[sec]["mem"], targets[sec] * cap.memory_mib)
        return own + failover.get((sec, n), 0) + size[0] < 0.9 * cap.memory_mib

    for n in names:
        shape = shape_of[n]
        target = targets[n]
        k = 0
        while used[n]["mem"] < target * shape.memory_mib and k < 40:
            template = rng.choice(templates)
            room = min(target * 1.1 * shape.memory_mib + 512, shape.memory_mib * 0.95)
            sizes = [z for z in INSTANCE_SIZES if used[n]["mem"] + z[0] <= room]
            if not sizes:
                break
            size = rng.choice(sizes)
            nodes = [n]
            if template == "drbd":
                peers = [m for m in names if m != n and group_of[m] == group_of[n]]
                if not peers:
                    template = "plain"
                else:
                    tries = [rng.choice(peers) for _ in range(4)]
                    sec = next((m for m in tries if takes(m, n, size)), None)
                    if sec is None:
                        template = "ext"
                    else:
                        nodes.append(sec)
                        failover[(sec, n)] = failover.get((sec, n), 0) + size[0]
            if template in ("plain", "drbd") and used[n]["disk"] + size[1] + 512 > shape.disk_mib:
                template, nodes = "ext", [n]
            local = template in ("plain", "drbd")
            itags = ["svc:web"] if exclusion and rng.random() < 0.2 else []
            inst = _instance(rng, template, nodes, size=size, tags=itags)
            if odd:
                r = rng.random()
                if r < 0.06:
                    inst["admin_state"] = "down"
                elif r < 0.08:
                    inst["admin_state"] = "offline"
                elif r < 0.1:
                    inst["forthcoming"] = True
            name = f"inst-{n[5:]}-{k}"
            instances[name] = inst
            k += 1
            offline_inst = inst.get("admin_state") == "offline"
            if inst.get("admin_state", "up") == "up" and not inst.get("forthcoming"):
                used[n]["mem"] += inst["memory"]
            if not offline_inst:
                used[n]["cpu"] += inst["vcpus"]
            if local and not inst.get("forthcoming"):
                for m in nodes:
                    used[m]["disk"] += inst["disk_space_total"]
    nodes: dict[str, Any] = {}
    for i, n in enumerate(names):
        shape = shape_of[n]
        jitter = rng.choice((0, 0, 0, 1024, -512)) if odd else 0
        total_mem = shape.memory_mib + jitter
        reserved = rng.choice((0, 512, 1024, 2048)) if odd else 1024
        state = rng.random() if odd else 1.0
        free_mem = total_mem - reserved - used[n]["mem"]
        free_disk = shape.disk_mib - used[n]["disk"]
        if odd and rng.random() < 0.05:
            free_mem -= rng.choice((256, 700, 4096))
        if odd and rng.random() < 0.03:
            free_disk -= rng.choice((2048, 10240))
        node_tags = []
        if location:
            node_tags.append(f"power:{'ab'[i % 2]}")
        if migration:
            node_tags.append(rng.choice(("hv:old", "hv:new", "hv:new")))
        nodes[n] = {
            "drained": 0.03 < state < 0.06,
            "offline": state < 0.03,
            "group": group_of[n],
            "ndparams": {"exclusive_storage": False, "spindle_count": rng.choice((1, 2, 4))},
            "vm_capable": True,
            "tags": node_tags,
            "total_memory": total_mem,
            "reserved_memory": reserved,
            "free_memory": max(0, free_mem),
            "total_disk": shape.disk_mib,
            "free_disk": max(0, free_disk),
            "total_cpus": shape.cpus,
            "reserved_cpus": rng.choice((0, 1, 1, 2)) if odd else 1,
            "free_spindles": 0,
            "master_candidate": True,
        }
    return {
        "cluster_tags": cluster_tags,
        "cluster_name": "cluster.example.com",
        "enabled_hypervisors": [rng.choice(("xen-pvm", "xen-pvm", "kvm"))] if odd else ["xen-pvm"],
        "nodegroups": nodegroups,
        "nodes": nodes,
        "instances": instances,
        "ipolicy": ipolicy(rng),
        "version": 2,
    }


def new_instance(
    rng: random.Random, name: str, template: str, data: dict[str, Any]
) -> dict[str, Any]:
    """Fields of one new instance (allocate-like)."""
    tags: list[str] = []
    if "htools:iextags:svc" in data["cluster_tags"] and rng.random() < 0.4:
        tags = ["svc:web"]
    inst = _instance(rng, template, [], tags=tags)
    inst.pop("nodes")
    r = rng.random()
    if r < 0.05:
        inst["admin_state"] = "down"
    elif r < 0.08:
        inst["forthcoming"] = True
    inst.update(name=name, required_nodes=2 if template == "drbd" else 1)
    return inst


def _group_names(data: dict[str, Any]) -> list[str]:
    return [g["name"] for g in data["nodegroups"].values()]


def allocate(rng: random.Random, data: dict[str, Any], template: str) -> dict[str, Any]:
    req = new_instance(rng, "new-instance", template, data)
    req["type"] = "allocate"
    if rng.random() < 0.3:
        req["group_name"] = rng.choice(_group_names(data))
    if rng.random() < 0.1:
        names = sorted(data["nodes"])
        req["restrict-to-nodes"] = rng.sample(names, k=max(2, len(names) // 2))
    data["request"] = req
    return data


def multi_allocate(rng: random.Random, data: dict[str, Any], count: int) -> dict[str, Any]:
    insts = [
        new_instance(rng, f"new-{k}", rng.choice(("plain", "drbd", "ext", "rbd", "diskless")), data)
        for k in range(count)
    ]
    data["request"] = {"type": "multi-allocate", "instances": insts}
    if rng.random() < 0.5:
        data["request"]["group_name"] = rng.choice(_group_names(data))
    return data


def _with_template(data: dict[str, Any], templates: tuple[str, ...]) -> list[str]:
    return [n for n, i in data["instances"].items() if i["disk_template"] in templates]


def relocate(rng: random.Random, data: dict[str, Any]) -> dict[str, Any] | None:
    names = _with_template(data, ("drbd", *SHARED_TEMPLATES, "plain"))
    if not names:
        return None
    name = rng.choice(names)
    inst = data["instances"][name]
    nodes = inst["nodes"]
    frm = [nodes[1]] if inst["disk_template"] == "drbd" else [nodes[0]]
    data["request"] = {
        "type": "relocate",
        "name": name,
        "required_nodes": 1,
        "relocate_from": frm,
    }
    return data


def heterogeneous(seed: int, n_nodes: int) -> dict[str, Any]:
    """One group of mixed machine sizes with uneven fills of drbd, ext and rbd instances
    (benchmarks/bench_joint.py's clusters)."""
    return cluster(
        random.Random(seed),
        n_nodes,
        templates=("drbd", "drbd", "ext", "rbd"),
        odd=False,
        tags=False,
        policies=False,
        fills=(0.1, 0.2, 0.3, 0.4, 0.5),
    )


def busiest_evacuation(seed: int, n_nodes: int, count: int) -> dict[str, Any]:
    """`heterogeneous` and a node-evacuate (mode all) of `count` instances of its busiest
    nodes (the most primaries, topped up from the next ones)."""
    data = heterogeneous(seed, n_nodes)
    hosted: dict[str, list[str]] = {}
    for name, inst in data["instances"].items():
        hosted.setdefault(inst["nodes"][0], []).append(name)
    busiest = sorted(hosted, key=lambda n: (-len(hosted[n]), n))
    names = [name for node in busiest for name in hosted[node]][:count]
    data["request"] = {"type": "node-evacuate", "instances": names, "evac_mode": "all"}
    return data


def group_change(seed: int, n_nodes: int, count: int) -> dict[str, Any]:
    """`heterogeneous` over three groups of about `n_nodes` / 3 nodes, and a change-group of
    `count` shared-storage or drbd instances of the first group into the other two (no
    target named: every other group)."""
    data = cluster(
        random.Random(seed),
        n_nodes,
        groups=3,
        templates=("drbd", "drbd", "ext", "rbd"),
        odd=False,
        tags=False,
        policies=False,
        fills=(0.1, 0.2, 0.3, 0.4, 0.5),
    )
    source = sorted(data["nodegroups"])[0]
    names = [
        name
        for name, inst in sorted(data["instances"].items())
        if data["nodes"][inst["nodes"][0]]["group"] == source
    ][:count]
    data["request"] = {"type": "change-group", "instances": names, "target_groups": []}
    return data


def node_evacuate(rng: random.Random, data: dict[str, Any]) -> dict[str, Any] | None:
    node = rng.choice(sorted(data["nodes"]))
    mode = rng.choice(("primary-only", "secondary-only", "all"))
    names = [
        n
        for n, i in data["instances"].items()
        if (mode != "secondary-only" and i["nodes"][0] == node)
        or (mode != "primary-only" and node in i["nodes"][1:])
    ]
    if not names:
        return None
    data["request"] = {"type": "node-evacuate", "instances": names, "evac_mode": mode}
    return data


def change_group(rng: random.Random, data: dict[str, Any]) -> dict[str, Any] | None:
    """1-3 instances of one group to any other group, a named group, or (rarely) their own."""
    if len(data["nodegroups"]) < 2 or not data["instances"]:
        return None
    group_of = {n: v["group"] for n, v in data["nodes"].items()}
    by_group: dict[str, list[str]] = {}
    for name, inst in sorted(data["instances"].items()):
        by_group.setdefault(group_of[inst["nodes"][0]], []).append(name)
    uuid = rng.choice(sorted(by_group))
    names = rng.sample(by_group[uuid], k=min(len(by_group[uuid]), rng.randint(1, 3)))
    others = [g["name"] for u, g in data["nodegroups"].items() if u != uuid]
    r = rng.random()
    targets = (
        [] if r < 0.5 else [rng.choice(others)] if r < 0.9 else [data["nodegroups"][uuid]["name"]]
    )
    data["request"] = {"type": "change-group", "instances": names, "target_groups": targets}
    return data


def allocate_secondary(rng: random.Random, data: dict[str, Any]) -> dict[str, Any] | None:
    names = _with_template(data, ("plain",))
    if not names:
        return None
    data["request"] = {"type": "allocate-secondary", "name": rng.choice(names)}
    return data


ALLOCATE_TEMPLATES = ("plain", "drbd", "drbd", "ext", "rbd", "sharedfile", "diskless", "file")
REQUEST_KINDS = (
    "allocate",
    "multi-allocate",
    "relocate",
    "node-evacuate",
    "change-group",
    "allocate-secondary",
)


#: request kinds by seed (`for_seed`): every kind, allocate four times as often
KIND_CYCLE = REQUEST_KINDS + ("allocate",) * 3


def for_seed(seed: int) -> dict[str, Any]:
    """The random request of a seed: its kind cycles through KIND_CYCLE."""
    return random_request(random.Random(seed), KIND_CYCLE[seed % len(KIND_CYCLE)])


def random_request(rng: random.Random, kind: str | None = None) -> dict[str, Any]:
    """One random cluster and request (of `kind`, or any)."""
    while True:
        k = kind or rng.choice(KIND_CYCLE)
        groups = rng.choice((1, 1, 2, 3))
        n_nodes = rng.randint(max(2, groups * 2), 14)
        templates = rng.choice(
            (ALL_TEMPLATES, ("plain", "drbd"), ("drbd",), ("ext", "rbd"), SHARED_TEMPLATES)
        )
        fill = rng.choice((0.1, 0.25, 0.4, None))
        if k == "allocate-secondary":  # the whole cluster must stay N+1 redundant
            fill = rng.choice((0.05, 0.1, 0.2))
        data = cluster(rng, n_nodes, groups=groups, templates=templates, fill=fill)
        if k == "allocate":
            t = rng.choice(ALLOCATE_TEMPLATES)
            return allocate(rng, data, t)
        if k == "multi-allocate":
            return multi_allocate(rng, data, rng.randint(2, 5))
        made = {
            "relocate": relocate,
            "node-evacuate": node_evacuate,
            "change-group": change_group,
            "allocate-secondary": allocate_secondary,
        }[k](rng, data)
        if made is not None:
            return made


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1)


def request_files(folder: Path, seeds: Iterable[int]) -> Iterator[tuple[int, dict[str, Any], Path]]:
    """Each seed's request (`for_seed`) written to FOLDER/request-SEED.json, as the sweeps
    hand it to the real hail: (seed, request, path)."""
    for seed in seeds:
        data = for_seed(seed)
        path = folder / f"request-{seed}.json"
        path.write_text(dumps(data))
        yield seed, data, path
