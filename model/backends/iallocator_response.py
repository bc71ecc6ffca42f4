"""hail's output, written byte for byte as htools 3.0.2 writes it (`encodeStrict`): the
one-line compact response `{"success":..,"info":..,"result":..}`, the failure counts and
results of each request type, the opcodes of a node evacuation's or a squeeze's jobs, and
the Haskell `show` of a group that one change-group error prints. Reading the request is
model/backends/iallocator.py.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from model.backends.text import show_list, show_string
from model.cluster import IPolicy, ISpec, NodeGroup
from model.resources import FailMode

FAILURE_MODES = tuple(mode.value for mode in FailMode)  # hail's order of failure counts


def _encode(value: Any) -> str:
    def check(v: Any) -> None:
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError("non-finite number in an IAllocator response")

    if isinstance(value, float):
        check(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def response_json(success: bool, info: str, result: Any) -> str:
    """hail's response line (no newline). `info` is given without hail's prefix, which is
    added here; on failure the result is always `[]`, as hail writes it."""
    prefix = "Request successful: " if success else "Request failed: "
    body = {"success": success, "info": prefix + info, "result": result if success else []}
    return _encode(body)


def format_failure_counts(counts: Mapping[str, int]) -> str:
    """`FailMem: 2, FailDisk: 1` for the non-zero modes, in hail's order."""
    unknown = set(counts) - set(FAILURE_MODES)
    if unknown:
        raise ValueError(f"unknown failure modes: {sorted(unknown)}")
    return ", ".join(f"{m}: {counts[m]}" for m in FAILURE_MODES if counts.get(m, 0))


def multi_allocate_response(
    allocated: Sequence[tuple[str, Sequence[str]]], failed: Sequence[tuple[str, str]]
) -> tuple[str, list]:
    """(info, result) of a multi-allocate answer, to pass to `response_json`."""
    info = (
        f"{len(failed)} instances failed to allocate and "
        f"{len(allocated)} were allocated successfully"
    )
    return info, [[[n, list(nodes)] for n, nodes in allocated], [[n, r] for n, r in failed]]


def evacuate_response(
    moved: Sequence[tuple[str, str, Sequence[str]]],
    failed: Sequence[tuple[str, str]],
    jobs: Sequence[Sequence[Mapping[str, Any]]],
) -> tuple[str, list]:
    """(info, result) of node-evacuate / change-group: `[moved, failed, jobs]`."""
    info = f"{len(failed)} instances failed to move and {len(moved)} were moved successfully"
    result = [
        [[i, g, list(nodes)] for i, g, nodes in moved],
        [[i, m] for i, m in failed],
        [[dict(op) for op in job] for job in jobs],
    ]
    return info, result


def replace_disks_opcode(instance: str, remote_node: str) -> dict[str, Any]:
    """OP_INSTANCE_REPLACE_DISKS as hail emits it (new secondary)."""
    return {
        "OP_ID": "OP_INSTANCE_REPLACE_DISKS",
        "instance_name": instance,
        "early_release": False,
        "ignore_ipolicy": False,
        "mode": "replace_new_secondary",
        "disks": [],
        "remote_node": remote_node,
    }


def migrate_opcode(instance: str, target_node: str | None = None) -> dict[str, Any]:
    """OP_INSTANCE_MIGRATE as hail emits it (`target_node` only for externally mirrored)."""
    op: dict[str, Any] = {"OP_ID": "OP_INSTANCE_MIGRATE", "instance_name": instance}
    if target_node is not None:
        op["target_node"] = target_node
    op.update(
        {
            "allow_runtime_changes": False,
            "ignore_ipolicy": False,
            "cleanup": False,
            "allow_failover": True,
            "ignore_hvversions": True,
        }
    )
    return op


def failover_opcode(instance: str, target_node: str | None = None) -> dict[str, Any]:
    """OP_INSTANCE_FAILOVER as hail emits it for forthcoming instances (instead of a migrate)."""
    op: dict[str, Any] = {
        "OP_ID": "OP_INSTANCE_FAILOVER",
        "instance_name": instance,
        "shutdown_timeout": 120,
        "ignore_consistency": False,
    }
    if target_node is not None:
        op["target_node"] = target_node
    op.update({"ignore_ipolicy": False, "cleanup": False})
    return op


def move_opcode(instance: str, target_node: str) -> dict[str, Any]:
    """OP_INSTANCE_MOVE as `gnt-instance move -f -n TARGET` sends it (Ganeti's defaults)."""
    return {
        "OP_ID": "OP_INSTANCE_MOVE",
        "instance_name": instance,
        "target_node": target_node,
        "compress": "none",
        "shutdown_timeout": 120,
        "ignore_consistency": False,
        "ignore_ipolicy": False,
    }


def tags_opcode(node: str, tags: Sequence[str]) -> dict[str, Any]:
    """OP_TAGS_SET on a node, as htools' genAddTagsOpCode."""
    return {"OP_ID": "OP_TAGS_SET", "kind": "node", "tags": list(tags), "name": node}


def power_opcodes(nodes: Sequence[str], *, on: bool) -> tuple[dict[str, Any], ...]:
    """htools' genPowerOnOpCodes / genPowerOffOpCodes: each node marked online or offline,
    then one out-of-band power command for them all (Ganeti's oobTimeout 60 s, power delay
    2 s)."""
    marks = tuple(
        {
            "OP_ID": "OP_NODE_SET_PARAMS",
            "node_name": n,
            "force": False,
            "offline": not on,
            "auto_promote": False,
        }
        for n in nodes
    )
    power = {
        "OP_ID": "OP_OOB_COMMAND",
        "node_names": list(nodes),
        "command": "power-on" if on else "power-off",
        "timeout": 60,
        "ignore_status": False,
        "power_delay": 2,
    }
    return (*marks, power)


#: Ganeti's DiskTemplate and AllocPolicy constructors (Types.hs), as Haskell `show` names them.
HASKELL_TEMPLATES = {
    "diskless": "DTDiskless",
    "file": "DTFile",
    "sharedfile": "DTSharedFile",
    "plain": "DTPlain",
    "blockdev": "DTBlock",
    "drbd": "DTDrbd8",
    "rbd": "DTRbd",
    "ext": "DTExt",
    "gluster": "DTGluster",
}
HASKELL_ALLOC_POLICIES = {
    "preferred": "AllocPreferred",
    "last_resort": "AllocLastResort",
    "unallocable": "AllocUnallocable",
}


def _show_ispec(spec: ISpec) -> str:
    return (
        f"ISpec {{iSpecMemorySize = {spec.memory_size}, iSpecCpuCount = {spec.cpu_count}, "
        f"iSpecDiskSize = {spec.disk_size}, iSpecDiskCount = {spec.disk_count}, "
        f"iSpecNicCount = {spec.nic_count}, iSpecSpindleUse = {spec.spindle_use}}}"
    )


def show_ipolicy(policy: IPolicy) -> str:
    """Haskell `show` of htools' IPolicy record (hinfo's `Loaded cluster ipolicy:` line)."""
    from model.backends.text import show_double

    minmax = ",".join(
        f"MinMaxISpecs {{minMaxISpecsMinSpec = {_show_ispec(mm.min)}, "
        f"minMaxISpecsMaxSpec = {_show_ispec(mm.max)}}}"
        for mm in policy.minmax
    )
    templates = ",".join(HASKELL_TEMPLATES[t] for t in policy.disk_templates)
    return (
        f"IPolicy {{iPolicyMinMaxISpecs = [{minmax}], iPolicyStdSpec = {_show_ispec(policy.std)}, "
        f"iPolicyDiskTemplates = [{templates}], "
        f"iPolicyVcpuRatio = {show_double(policy.vcpu_ratio)}, "
        f"iPolicySpindleRatio = {show_double(policy.spindle_ratio)}}}"
    )


def show_group(group: NodeGroup, index: int) -> str:
    """Haskell `show` of htools' Group record (hail prints it in one change-group error)."""
    ipolicy = show_ipolicy(group.ipolicy)
    return (
        f"Group {{name = {show_string(group.name)}, uuid = {show_string(group.uuid)}, "
        f"idx = {index}, allocPolicy = {HASKELL_ALLOC_POLICIES[group.alloc_policy]}, "
        f"networks = {show_list(group.networks)}, iPolicy = {ipolicy}, "
        f"allTags = {show_list(group.tags)}}}"
    )
