"""Random dedicated (exclusive-storage) clusters and requests as IAllocator JSON, for tests and
benchmarks only (`exalloc generate` is another issue's job).

A node is cut into full / half / quarter (optionally three-quarter) slices, like the design
document's example. The policy has one minmax pair per slice, whose min spec sits a few MiB
below the slice so that slightly smaller instances still comply. Existing instances fill nodes
with random slice combinations; the reported free values include them, so hail loads the
cluster without warnings. Randomness: reserved memory, CPU totals (so the vCPU ratio bites),
drbd instances (so secondaries carry N+1 reserves), offline / drained nodes, several groups.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

# Slice of a node -> how many of them fit in a node.
SLICES: dict[str, float] = {"full": 1.0, "threequarter": 0.75, "half": 0.5, "quarter": 0.25}


@dataclass(frozen=True)
class NodeShape:
    """The physical size of one node of a dedicated group."""

    memory_mib: int = 65536
    disk_mib: int = 1048576
    cpus: int = 16
    spindles: int = 16


def _spec(shape: NodeShape, frac: float, shrink: int) -> dict[str, int]:
    return {
        "memory-size": int(shape.memory_mib * frac) - shrink,
        "cpu-count": max(1, int(shape.cpus * frac)),
        "disk-size": int(shape.disk_mib * frac) - shrink * 10,
        "disk-count": 1,
        "nic-count": 1,
        "spindle-use": max(1, int(shape.spindles * frac)),
    }


def ipolicy(shape: NodeShape, slices: tuple[str, ...], vcpu_ratio: float = 1.0) -> dict[str, Any]:
    """One minmax pair per slice; max = the slice, min = a little below it."""
    minmax = [
        {"min": _spec(shape, SLICES[s], 16), "max": _spec(shape, SLICES[s], 0)} for s in slices
    ]
    minmax[-1]["min"]["cpu-count"] = 1
    return {
        "minmax": minmax,
        "std": _spec(shape, SLICES[slices[-1]], 0),
        "disk-templates": ["plain", "drbd"],
        "vcpu-ratio": vcpu_ratio,
        "spindle-ratio": 32.0,
    }


def _instance(
    shape: NodeShape,
    frac: float,
    nodes: list[str],
    template: str,
    rng: random.Random,
    fits: bool = False,
) -> dict[str, Any]:
    """An instance of one slice; an exact slice (shrink 0) never fits its hole (memory must
    stay above 0), so `fits` shaves a few MiB off every new instance."""
    shrink = rng.choice((4, 8, 16) if fits else (0, 0, 4, 8, 16))
    mem = int(shape.memory_mib * frac) - shrink
    disk = int(shape.disk_mib * frac) - shrink * 10
    spindles = max(1, int(shape.spindles * frac))
    return {
        "disk_space_total": disk,
        "disk_template": template,
        "disks": [{"mode": "rw", "size": disk, "spindles": spindles}],
        "memory": mem,
        "nics": [],
        "nodes": nodes,
        "spindle_use": spindles,
        "tags": [],
        "vcpus": max(1, int(shape.cpus * frac)),
    }


def _fill(rng: random.Random, slices: tuple[str, ...]) -> list[float]:
    """A random set of slice fractions summing to at most one node."""
    used = 0.0
    out: list[float] = []
    for _ in range(rng.choice((0, 0, 1, 1, 2, 3, 4))):
        frac = SLICES[rng.choice(slices)]
        if used + frac <= 1.0:
            out.append(frac)
            used += frac
    return out


def cluster(
    rng: random.Random,
    n_nodes: int,
    *,
    groups: int = 1,
    shape: NodeShape | None = None,
    slices: tuple[str, ...] = ("full", "half", "quarter"),
    drbd_share: float = 0.2,
    odd_nodes: bool = True,
    vcpu_ratio: float = 1.0,
) -> dict[str, Any]:
    """A random dedicated cluster (no request yet) as an IAllocator dict."""
    shape = shape or NodeShape()
    nodegroups = {
        f"uuid-g{g}": {
            "name": f"group{g}",
            "alloc_policy": "preferred",
            "networks": [],
            "tags": [],
            "ipolicy": ipolicy(shape, slices, vcpu_ratio),
        }
        for g in range(1, groups + 1)
    }
    names = [f"node{i:04d}" for i in range(1, n_nodes + 1)]
    group_of = {n: f"uuid-g{1 + i * groups // n_nodes}" for i, n in enumerate(names)}
    used = {n: {"mem": 0, "disk": 0, "sp": 0, "cpu": 0} for n in names}
    instances: dict[str, Any] = {}
    for n in names:
        for k, frac in enumerate(_fill(rng, slices)):
            same_group = [m for m in names if m != n and group_of[m] == group_of[n]]
            drbd = rng.random() < drbd_share and same_group
            sec = rng.choice(same_group) if drbd else None
            if sec is not None:
                spare = shape.disk_mib - used[sec]["disk"]
                if spare < shape.disk_mib * frac or used[sec]["sp"] + shape.spindles * frac > (
                    shape.spindles
                ):
                    sec = None
            inst = _instance(
                shape, frac, [n] + ([sec] if sec else []), "drbd" if sec else "plain", rng
            )
            instances[f"inst-{n}-{k}"] = inst
            used[n]["mem"] += inst["memory"]
            used[n]["cpu"] += inst["vcpus"]
            for m in inst["nodes"]:
                used[m]["disk"] += inst["disk_space_total"]
                used[m]["sp"] += inst["disks"][0]["spindles"]
    nodes: dict[str, Any] = {}
    for n in names:
        reserved = rng.choice((0, 0, 0, 512, 1024)) if odd_nodes else 0
        cpus = shape.cpus + (rng.choice((0, 0, 0, -4, 2, 8)) if odd_nodes else 0)
        state = rng.random() if odd_nodes else 1.0
        total_mem = shape.memory_mib + reserved
        nodes[n] = {
            "drained": 0.02 < state < 0.04,
            "offline": state < 0.02,
            "group": group_of[n],
            "ndparams": {"exclusive_storage": True, "spindle_count": 1},
            "vm_capable": True,
            "tags": [],
            "total_memory": total_mem,
            "reserved_memory": reserved,
            "free_memory": max(0, total_mem - reserved - used[n]["mem"]),
            "total_disk": shape.disk_mib,
            "free_disk": max(0, shape.disk_mib - used[n]["disk"]),
            "total_cpus": cpus,
            "reserved_cpus": rng.choice((0, 0, 1)) if odd_nodes else 0,
            "total_spindles": shape.spindles,
            "free_spindles": shape.spindles - used[n]["sp"],
        }
    return {
        "cluster_tags": [],
        "cluster_name": "dedicated.example.com",
        "enabled_hypervisors": ["xen-pvm"],
        "nodegroups": nodegroups,
        "nodes": nodes,
        "instances": instances,
        "version": 2,
    }


def instance_request(
    rng: random.Random,
    name: str,
    *,
    shape: NodeShape | None = None,
    slices: tuple[str, ...] = ("full", "half", "quarter"),
    template: str = "plain",
    fits: bool = False,
) -> dict[str, Any]:
    """Fields of one new instance (allocate-like), sized to one of the slices."""
    shape = shape or NodeShape()
    inst = _instance(shape, SLICES[rng.choice(slices)], [], template, rng, fits)
    inst.pop("nodes")
    inst.update(name=name, required_nodes=2 if template == "drbd" else 1)
    return inst


def allocate(
    rng: random.Random,
    n_nodes: int,
    *,
    template: str = "plain",
    groups: int = 1,
    group_name: str | None = None,
    fits: bool = False,
    **kw: Any,
) -> dict[str, Any]:
    """A random dedicated cluster plus one allocate request."""
    data = cluster(rng, n_nodes, groups=groups, **kw)
    req = instance_request(
        rng,
        "new-instance",
        slices=kw.get("slices", ("full", "half", "quarter")),
        template=template,
        shape=kw.get("shape"),
        fits=fits,
    )
    req["type"] = "allocate"
    if group_name is not None:
        req["group_name"] = group_name
    data["request"] = req
    return data


def multi_allocate(
    rng: random.Random,
    n_nodes: int,
    n_instances: int,
    *,
    template: str = "plain",
    group_name: str | None = None,
    fits: bool = False,
    **kw: Any,
) -> dict[str, Any]:
    """A random dedicated cluster plus a multi-allocate batch of n_instances."""
    data = cluster(rng, n_nodes, **kw)
    slices = kw.get("slices", ("full", "half", "quarter"))
    insts = [
        instance_request(
            rng,
            f"new-{k:03d}",
            slices=slices,
            template=template,
            shape=kw.get("shape"),
            fits=fits,
        )
        for k in range(n_instances)
    ]
    data["request"] = {"type": "multi-allocate", "instances": insts}
    if group_name is not None:
        data["request"]["group_name"] = group_name
    return data


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1)


def perturb(rng: random.Random, data: dict[str, Any]) -> dict[str, Any]:
    """Rarer htools paths on top of a generated request (in place): kvm static node memory,
    exclusion tags, down / offline / forthcoming instances, nodes missing memory, spindles or
    disk, restrict-to-nodes, two disks, unknown spindles, a down or forthcoming new instance."""
    if rng.random() < 0.3:
        data["enabled_hypervisors"] = ["kvm"]
    req = data["request"]
    if rng.random() < 0.4:
        data["cluster_tags"] = ["htools:iextags:svc"]
        req["tags"] = ["svc:db"]
        for inst in data["instances"].values():
            if rng.random() < 0.3:
                inst["tags"] = ["svc:db"]
    for inst in data["instances"].values():
        r = rng.random()
        if r < 0.1:
            inst["admin_state"] = "down"
        elif r < 0.15:
            inst["admin_state"] = "offline"
        elif r < 0.2:
            inst["forthcoming"] = True
    for node in data["nodes"].values():
        r = rng.random()
        if r < 0.15:
            node["free_memory"] = max(0, node["free_memory"] - rng.choice((100, 2000, 20000)))
        elif r < 0.25:
            node["free_spindles"] = max(0, node["free_spindles"] - rng.choice((1, 4)))
        elif r < 0.3:
            node["free_disk"] = max(0, node["free_disk"] - 300000)
    r = rng.random()
    if r < 0.15:
        req["restrict-to-nodes"] = rng.sample(sorted(data["nodes"]), k=min(3, len(data["nodes"])))
    elif r < 0.25:
        size = req["disks"][0]["size"] // 2
        req["disks"] = [{"mode": "rw", "size": size, "spindles": 1} for _ in range(2)]
    elif r < 0.3:
        for disk in req["disks"]:
            disk.pop("spindles", None)
    elif r < 0.35:
        req["admin_state"] = "down"
    elif r < 0.4:
        req["forthcoming"] = True
    return data
