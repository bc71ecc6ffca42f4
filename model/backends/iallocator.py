"""IAllocator v2 JSON, hail's input, read exactly as htools 3.0.2 reads it.

Input: the cluster (groups, nodes, instances in JSON key order, which fixes htools' indices)
plus one typed request. htools' quirks are kept: the top-level `ipolicy` is ignored (the
cluster policy is the built-in default), every instance is auto_balance, an unreadable
`admin_state` means running, a node is offline unless `vm_capable and not offline and not
drained`, nodes get `enabled_hypervisors[0]` as hypervisor (kvm nodes then use a static node
memory), and multi-allocate takes `group_name` from the outer request. Errors carry hail's
own message plus the JSON key path.

hail's output (its response line and the opcodes in it) is model/backends/iallocator_response.py.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

from model.backends.text import alias, cluster_suffix, show_list, show_string
from model.cluster import (
    ALLOC_POLICIES,
    DEFAULT_IPOLICY,
    DISK_TEMPLATES,
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
from model.state import ClusterState, node_states
from model.validate import (
    MAX_COUNT,
    MAX_MIB,
    NESTING_MESSAGE,
    cluster_problem,
    deep_nesting_line,
    quantity_message,
    quantity_problem,
)

ADMIN_STATE_STATUS = {"up": "running", "down": "ADMIN_down", "offline": "ADMIN_offline"}
EVAC_MODES = ("primary-only", "secondary-only", "all")
NIC_MODES = ("bridged", "routed", "openvswitch")
NIC_KEYS = ("mac", "ip", "mode", "link", "bridge", "network")

# ---------------------------------------------------------------------------------------------
# Typed requests.


@dataclass(frozen=True)
class AllocateRequest:
    """`allocate`, also one entry of `multi-allocate` (then `group_name` is the outer one)."""

    name: str
    required_nodes: int
    memory: int
    disk_space_total: int
    disks: tuple[Disk, ...]
    disk_template: str
    vcpus: int
    spindle_use: int
    tags: tuple[str, ...] = ()
    nics: tuple[dict, ...] = ()
    admin_state: str = "up"  # the status is ADMIN_STATE_STATUS[admin_state]
    forthcoming: bool = False
    group_name: str | None = None
    restrict_to_nodes: tuple[str, ...] | None = None

    type = "allocate"


@dataclass(frozen=True)
class MultiAllocateRequest:
    instances: tuple[AllocateRequest, ...]
    group_name: str | None = None

    type = "multi-allocate"


@dataclass(frozen=True)
class RelocateRequest:
    """`relocate_from` holds node names, resolved like htools' findByName (name or alias)."""

    name: str
    required_nodes: int
    relocate_from: tuple[str, ...]

    type = "relocate"


@dataclass(frozen=True)
class NodeEvacuateRequest:
    instances: tuple[str, ...]
    evac_mode: str  # one of EVAC_MODES

    type = "node-evacuate"


@dataclass(frozen=True)
class ChangeGroupRequest:
    """`target_groups` as given; `target_group_uuids` resolved (empty means any other group)."""

    instances: tuple[str, ...]
    target_groups: tuple[str, ...]
    target_group_uuids: tuple[str, ...]

    type = "change-group"


@dataclass(frozen=True)
class AllocateSecondaryRequest:
    name: str

    type = "allocate-secondary"


Request = (
    AllocateRequest
    | MultiAllocateRequest
    | RelocateRequest
    | NodeEvacuateRequest
    | ChangeGroupRequest
    | AllocateSecondaryRequest
)


@dataclass(frozen=True)
class IAllocatorInput:
    cluster: Cluster
    request: Request
    enabled_hypervisors: tuple[str, ...] = ()


def new_instance(
    request: AllocateRequest, primary: str = "", secondary: str | None = None
) -> Instance:
    """The instance an allocate request asks for, not yet placed (primary "") unless given."""
    fields = {k: getattr(request, k) for k in _BASE_KEYS}
    return _instance(request.name, fields, primary, secondary)


def with_cluster(inp: IAllocatorInput, cluster: Cluster, source: str) -> IAllocatorInput:
    """The request on another cluster (hail's `-t FILE`, `--simulate`), which must hold what
    the request names: its instances, the nodes to relocate from, the target groups."""
    req = inp.request
    names: tuple[str, ...] = ()
    if isinstance(req, (RelocateRequest, AllocateSecondaryRequest)):
        names = (req.name,)
    elif isinstance(req, (NodeEvacuateRequest, ChangeGroupRequest)):
        names = req.instances
    missing = [("instance", n) for n in names if n not in cluster.instance_index]
    if isinstance(req, RelocateRequest):
        missing += [("node", n) for n in req.relocate_from if n not in cluster.node_index]
    if isinstance(req, ChangeGroupRequest):
        missing += [("group", g) for g in req.target_group_uuids if g not in cluster.group_index]
    if missing:
        kind, name = missing[0]
        raise InputError(f"the request names {kind} '{name}', which {source} does not have")
    return IAllocatorInput(cluster, req, inp.enabled_hypervisors)


def requested_instances(request: Request) -> list[AllocateRequest]:
    """The new instances an allocate or multi-allocate asks for, in request order."""
    if isinstance(request, AllocateRequest):
        return [request]
    if isinstance(request, MultiAllocateRequest):
        return list(request.instances)
    return []


def state_after(inp: IAllocatorInput, where: Mapping[str, Sequence[str]]) -> ClusterState:
    """The cluster after an answer (instance -> its nodes, in answer order), by htools'
    arithmetic without checks: new instances placed, known ones moved or, for
    allocate-secondary, given their secondary."""
    state = node_states(inp.cluster)
    new = {r.name: r for r in requested_instances(inp.request)}
    for name, nodes in where.items():
        p, s = nodes[0], (nodes[1] if len(nodes) > 1 else None)
        if name in new:
            state = state.placed(new_instance(new[name]), p, s)
        else:
            state = state.relocated(name, p, s)
    return state


def cluster_after(inp: IAllocatorInput, where: Mapping[str, Sequence[str]]) -> Cluster:
    """The cluster as hail saves it after its answer (`-S FILE`: FILE.post-ialloc): the
    nodes' free disk and spindles after the adds, moved instances on their new nodes, new
    ones in htools' index order (an allocate's, index -1, first; a multi-allocate's after
    the known ones, as placed)."""
    state = state_after(inp, where)
    requested = requested_instances(inp.request)
    nodes = tuple(
        replace(
            n,
            free_memory_mib=state.nodes[n.name].reported_free_memory_mib,
            free_disk_mib=state.nodes[n.name].free_disk_mib,
            free_spindles=state.nodes[n.name].free_spindles,
        )
        for n in inp.cluster.nodes
    )
    moves = {} if requested else where
    # allocate-secondary makes its instance drbd (AllocateSecondary.hs)
    template = (
        {"disk_template": "drbd"} if isinstance(inp.request, AllocateSecondaryRequest) else {}
    )
    known = tuple(
        replace(
            i, primary=moves[i.name][0], secondary=(list(moves[i.name]) + [None])[1], **template
        )
        if i.name in moves
        else i
        for i in inp.cluster.instances
    )
    new = tuple(
        new_instance(r, where[r.name][0], (list(where[r.name]) + [None])[1])
        for r in requested
        if r.name in where
    )
    instances = new + known if isinstance(inp.request, AllocateRequest) else known + new
    return replace(inp.cluster, nodes=nodes, instances=instances)


#: The fields parseBaseInstance reads, as `_parse_base` returns them.
_BASE_KEYS = (
    "memory",
    "disk_space_total",
    "disks",
    "disk_template",
    "vcpus",
    "spindle_use",
    "tags",
    "nics",
    "admin_state",
    "forthcoming",
)


def _instance(name: str, base: dict[str, Any], primary: str, secondary: str | None) -> Instance:
    return Instance(
        name=name,
        memory_mib=base["memory"],
        disks=base["disks"],
        vcpus=base["vcpus"],
        status=ADMIN_STATE_STATUS.get(base["admin_state"], "running"),
        auto_balance=True,
        primary=primary,
        secondary=secondary,
        disk_template=base["disk_template"],
        tags=base["tags"],
        spindle_use=base["spindle_use"],
        forthcoming=base["forthcoming"],
        nics=base["nics"],
        disk_total_mib=base["disk_space_total"],
    )


# ---------------------------------------------------------------------------------------------
# Text.JSON-style readers: each raises _Bad with hail's wording; the path is added on the way.


class _Bad(Exception):
    def __init__(self, message: str, path: str = ""):
        super().__init__(message)
        self.message = message
        self.path = path


class _OutOfRange(_Bad):
    """A number htools would read but exalloc's limits refuse (model.validate): never read
    as a missing value's default, which would answer for another cluster."""


_NUMBER_TYPES = (int, float, Decimal)


def _is_number(value: Any) -> bool:
    """JSON numbers arrive as int or Decimal (exact, like Text.JSON's rationals)."""
    return isinstance(value, _NUMBER_TYPES) and not isinstance(value, bool)


def _quantity(value: Any, limit: int, signed: bool = False) -> Any:
    """exalloc's rule for every number it reads (model.validate): finite, from 0 (free
    amounts: -limit) to `limit` (MAX_MIB for sizes, MAX_COUNT for counts and ratios)."""
    problem = quantity_problem(value, limit=limit, signed=signed)
    if problem is not None:
        raise _OutOfRange(quantity_message("value", value, problem, limit=limit, signed=signed))
    return value


def _read_int(value: Any, signed: bool = False, limit: int = MAX_COUNT) -> int:
    if type(value) is int and 0 <= value <= limit:  # the common case, fast
        return value
    if not _is_number(value):
        raise _Bad("Unable to read Int")
    # checked before rounding: Text.JSON would wrap an out-of-range Int modulo 2^64; then
    # Text.JSON rounds the rational, halves to even
    return int(round(_quantity(value, limit, signed)))


def _read_free_int(value: Any) -> int:
    """A free count: negative when the node is overcommitted (model.validate)."""
    return _read_int(value, signed=True)


def _read_mib(value: Any) -> int:
    """A size in MiB (model.validate.MAX_MIB)."""
    return _read_int(value, limit=MAX_MIB)


def _read_free_mib(value: Any) -> int:
    """A free size in MiB: negative when the node is overcommitted (model.validate)."""
    return _read_int(value, signed=True, limit=MAX_MIB)


def _read_double(value: Any, limit: int = MAX_COUNT) -> float:
    if not _is_number(value):
        raise _Bad("Unable to read Double")
    return float(_quantity(value, limit))


def _read_mib_double(value: Any) -> float:
    return _read_double(value, MAX_MIB)


def _read_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Bad("Unable to read Bool")
    return value


def _read_string(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # Text.JSON reads a String from an array of characters too
        if all(isinstance(c, str) and len(c) == 1 for c in value):
            return "".join(value)
        raise _Bad("Unable to read Char")
    raise _Bad("Unable to read String")


def _read_object(value: Any) -> dict:
    if not isinstance(value, dict):
        raise _Bad("Unable to read JSObject")
    return value


def _read_list(item: Callable[[Any], Any]) -> Callable[[Any], tuple]:
    def read(value: Any) -> tuple:
        if not isinstance(value, list):
            raise _Bad("Unable to read list")
        return tuple(item(v) for v in value)

    return read


def _read_enum(type_name: str, allowed: Sequence[str]) -> Callable[[Any], str]:
    def read(value: Any) -> str:
        text = _read_string(value)
        if text not in allowed:
            raise _Bad(f"Invalid string value for type {type_name}: {show_string(text)}")
        return text

    return read


_read_strings = _read_list(_read_string)


def _get(obj: dict, key: str, read: Callable[[Any], Any], path: str, desc: str = "") -> Any:
    """Ganeti's `tryFromObj desc obj key` (or `fromObj` when desc is empty)."""
    # the messages are built only on failure: this runs ~30 times per node
    if key not in obj:
        prefix = f"{desc}: " if desc else ""
        where = f"{path}.{key}" if path else key
        keys = show_list(list(obj))
        raise _Bad(f"{prefix}key '{key}' not found, object contains only {keys}", where)
    try:
        return read(obj[key])
    except _Bad as exc:
        prefix = f"{desc}: " if desc else ""
        where = f"{path}.{key}" if path else key
        raise _Bad(f"{prefix}key '{key}': {exc.message}", exc.path or where) from None


def _maybe(obj: dict, key: str, read: Callable[[Any], Any], path: str, desc: str = "") -> Any:
    """Ganeti's `maybeFromObj`: a missing key or null is None."""
    if obj.get(key) is None:
        return None
    return _get(obj, key, read, path, desc)


def _in(path: str, key: str) -> str:
    return f"{path}.{key}"


# ---------------------------------------------------------------------------------------------
# Cluster parts.


def _ispec(value: Any) -> ISpec:
    obj = _read_object(value)
    return ISpec(
        *(_get(obj, k, _read_mib if k in _ISPEC_MIB else _read_int, "") for k in _ISPEC_KEYS)
    )


_ISPEC_KEYS = ("memory-size", "cpu-count", "disk-size", "disk-count", "nic-count", "spindle-use")
_ISPEC_MIB = ("memory-size", "disk-size")


def ispec_json(spec: ISpec) -> dict[str, int]:
    """An ispec as IAllocator (and `gnt-cluster info`) writes it."""
    return dict(
        zip(
            _ISPEC_KEYS,
            (
                spec.memory_size,
                spec.cpu_count,
                spec.disk_size,
                spec.disk_count,
                spec.nic_count,
                spec.spindle_use,
            ),
            strict=True,
        )
    )


def ipolicy_json(policy: IPolicy) -> dict[str, Any]:
    """A group ipolicy in IAllocator's shape; `_ipolicy` reads it back."""
    return {
        "minmax": [{"min": ispec_json(m.min), "max": ispec_json(m.max)} for m in policy.minmax],
        "std": ispec_json(policy.std),
        "disk-templates": list(policy.disk_templates),
        "vcpu-ratio": policy.vcpu_ratio,
        "spindle-ratio": policy.spindle_ratio,
    }


def _minmax(value: Any) -> MinMax:
    obj = _read_object(value)
    return MinMax(_get(obj, "min", _ispec, ""), _get(obj, "max", _ispec, ""))


def _ipolicy(value: Any) -> IPolicy:
    obj = _read_object(value)
    minmax = _get(obj, "minmax", _read_list(_minmax), "")
    std = _get(obj, "std", _ispec, "")
    if "disk-templates" not in obj:
        _get(obj, "disk-templates", _read_strings, "")
    try:
        templates = _read_list(_read_enum("DiskTemplate", DISK_TEMPLATES))(obj["disk-templates"])
    except _Bad as exc:
        raise _Bad(f"Can't parse value for 'disk-templates': {exc.message}") from None
    vcpu = _get(obj, "vcpu-ratio", _read_double, "")
    spindle = _get(obj, "spindle-ratio", _read_double, "")
    return IPolicy(minmax, std, templates, vcpu, spindle)


def _parse_group(uuid: str, obj: dict, path: str) -> NodeGroup:
    desc = f"invalid data for group '{uuid}'"
    name = _get(obj, "name", _read_string, path, desc)
    policy = _get(obj, "alloc_policy", _read_enum("AllocPolicy", ALLOC_POLICIES), path, desc)
    networks = _get(obj, "networks", _read_strings, path, desc)
    ipolicy = _get(obj, "ipolicy", _ipolicy, path, desc)
    tags = _get(obj, "tags", _read_strings, path, desc)
    return NodeGroup(name, uuid, policy, tags, networks, ipolicy)


def _parse_node(
    name: str,
    obj: dict,
    path: str,
    group_uuids: set[str],
    hypervisor: str | None,
    static_kvm_node_memory: int,
) -> Node:
    fields = _quick_node(obj, group_uuids)
    if fields is None:
        fields = _checked_node(name, obj, path, group_uuids)
    if hypervisor == "kvm" and static_kvm_node_memory > 0:
        fields["node_memory_mib"] = static_kvm_node_memory
    return Node(name=name, master=False, cpu_speed=1.0, hypervisor=hypervisor, **fields)


def _node_fields(
    offline: bool,
    drained: bool,
    group: str,
    vm_capable: bool,
    tags: tuple[str, ...],
    excl: bool,
    spindles: int,
    live: dict[str, Any],
) -> dict[str, Any]:
    """Node's keyword arguments; `live` holds the reported values (zeros when not live)."""
    return dict(
        total_memory_mib=live["total_memory"],
        node_memory_mib=live["reserved_memory"],
        free_memory_mib=live["free_memory"],
        total_disk_mib=live["total_disk"],
        free_disk_mib=live["free_disk"],
        total_cpus=live["total_cpus"],
        group_uuid=group,
        offline=offline or not vm_capable or drained,
        drained=drained,
        spindles=spindles,
        tags=tags,
        exclusive_storage=excl,
        free_spindles=live["free_spindles"],
        reserved_cpus=live["reserved_cpus"],
        vm_capable=vm_capable,
    )


#: What a live node reports: (key, reader, value when the node is not live).
_LIVE_INTS = ("free_spindles", "reserved_memory", "free_memory", "free_disk", "reserved_cpus")
_LIVE_DOUBLES = ("total_memory", "total_disk", "total_cpus")
#: The keys whose values are sizes in MiB (model.validate.MAX_MIB); the others are counts.
_MIB_KEYS = frozenset(("reserved_memory", "free_memory", "free_disk", "total_memory", "total_disk"))
_LIVE_KEYS = (
    ("free_spindles", _read_free_int, 0),
    ("total_memory", _read_mib_double, 0.0),
    ("reserved_memory", _read_mib, 0),
    ("free_memory", _read_free_mib, 0),
    ("total_disk", _read_mib_double, 0.0),
    ("free_disk", _read_free_mib, 0),
    ("total_cpus", _read_double, 0.0),
    ("reserved_cpus", _read_int, 0),
)


def _quick_node(obj: dict, group_uuids: set[str]) -> dict[str, Any] | None:
    """`_checked_node` for the well-formed node Ganeti writes, in one pass; anything
    unusual returns None and the checked reader runs (it alone words the errors)."""
    get = obj.get
    offline, drained, group, nd = get("offline"), get("drained"), get("group"), get("ndparams")
    vm_capable = get("vm_capable")
    if vm_capable is None:
        vm_capable = True
    if type(offline) is not bool or type(drained) is not bool or type(vm_capable) is not bool:
        return None
    if type(group) is not str or group not in group_uuids or type(nd) is not dict:
        return None
    tags = _strings_or_none(obj["tags"]) if "tags" in obj else ()
    excl = nd.get("exclusive_storage")
    if tags is None or type(excl) is not bool:
        return None
    live = not offline and vm_capable
    values: dict[str, Any] = {}
    for key in _LIVE_INTS:
        limit = MAX_MIB if key in _MIB_KEYS else MAX_COUNT
        value = _int_or_none(get(key), key.startswith("free_"), limit) if live else 0
        if value is None:
            return None
        values[key] = value
    for key in _LIVE_DOUBLES:
        value = get(key) if live else 0.0
        limit = MAX_MIB if key in _MIB_KEYS else MAX_COUNT
        if type(value) not in (int, float, Decimal) or quantity_problem(value, limit=limit):
            return None
        values[key] = float(value)
    if excl:
        spindles = _int_or_none(get("total_spindles")) if live else 0
    else:
        spindles = _int_or_none(nd.get("spindle_count"))
    if spindles is None:
        return None
    return _node_fields(offline, drained, group, vm_capable, tags, excl, spindles, values)


def _checked_node(name: str, obj: dict, path: str, group_uuids: set[str]) -> dict[str, Any]:
    """htools' parseNode with its error messages, key by key."""
    desc = f"invalid data for node '{name}'"
    offline = _get(obj, "offline", _read_bool, path, desc)
    drained = _get(obj, "drained", _read_bool, path, desc)
    group = _get(obj, "group", _read_string, path, desc)
    vm_capable = _maybe(obj, "vm_capable", _read_bool, path, desc)
    vm_capable = True if vm_capable is None else vm_capable
    if group not in group_uuids:
        raise _Bad(f"Unknown group '{group}' for node {name}", _in(path, "group"))
    ndparams = _get(obj, "ndparams", _read_object, path, desc)
    tags = _get(obj, "tags", _read_strings, path, desc) if "tags" in obj else ()
    nd_path = _in(path, "ndparams")
    excl = _get(ndparams, "exclusive_storage", _read_bool, nd_path, desc)
    live = not offline and vm_capable

    if excl:
        spindles = _get(obj, "total_spindles", _read_int, path, desc) if live else 0
    else:
        spindles = _get(ndparams, "spindle_count", _read_int, nd_path, desc)
    values = {
        key: _get(obj, key, read, path, desc) if live else default
        for key, read, default in _LIVE_KEYS
    }
    return _node_fields(offline, drained, group, vm_capable, tags, excl, spindles, values)


def _nic(instance: str, path: str) -> Callable[[Any], dict]:
    def read(value: Any) -> dict:
        obj = _read_object(value)
        nic = {k: _maybe(obj, k, _read_string, path) for k in NIC_KEYS}
        if nic["mode"] is not None and nic["mode"] not in NIC_MODES:
            raise _Bad(f"invalid NIC mode in instance {instance}", _in(path, "mode"))
        return nic

    return read


def _disk(desc: str, path: str) -> Callable[[Any], Disk]:
    def read(value: Any) -> Disk:
        obj = _read_object(value)
        size = _get(obj, "size", _read_mib, path, desc)
        return Disk(size, _maybe(obj, "spindles", _read_int, path, desc))

    return read


def _int_or_none(value: Any, signed: bool = False, limit: int = MAX_COUNT) -> int | None:
    low = -limit if signed else 0
    return value if type(value) is int and low <= value <= limit else None


def _strings_or_none(value: Any) -> tuple[str, ...] | None:
    if type(value) is not list or any(type(v) is not str for v in value):
        return None
    return tuple(value)


def _quick_base(obj: dict) -> dict[str, Any] | None:
    """`_parse_base` for the well-formed instance Ganeti writes, in one pass (a 1,000-node
    request has a thousand of them). Anything unusual returns None, and the checked reader
    runs instead: it alone words the errors, and on input accepted here both agree."""
    get = obj.get
    ints = [
        _int_or_none(get(k), limit=limit)
        for k, limit in (
            ("disk_space_total", MAX_MIB),
            ("memory", MAX_MIB),
            ("vcpus", MAX_COUNT),
            ("spindle_use", MAX_COUNT),
        )
    ]
    tags = _strings_or_none(get("tags"))
    template, disk_objs, nic_objs = get("disk_template"), get("disks"), get("nics")
    if None in ints or tags is None or type(template) is not str:
        return None
    if template not in DISK_TEMPLATES or type(disk_objs) is not list or type(nic_objs) is not list:
        return None
    disks = []
    for d in disk_objs:
        if type(d) is not dict:
            return None
        size, spindles = _int_or_none(d.get("size"), limit=MAX_MIB), d.get("spindles")
        if size is None or (spindles is not None and _int_or_none(spindles) is None):
            return None
        disks.append(Disk(size, spindles))
    nics = []
    for n in nic_objs:
        if type(n) is not dict:
            return None
        nic = {k: n.get(k) for k in NIC_KEYS}
        if any(v is not None and type(v) is not str for v in nic.values()):
            return None
        if nic["mode"] is not None and nic["mode"] not in NIC_MODES:
            return None
        nics.append(nic)
    total, memory, vcpus, spindle_use = ints
    return _base_fields(
        obj, memory, total, tuple(disks), template, vcpus, spindle_use, tags, tuple(nics)
    )


def _parse_base(name: str, obj: dict, path: str) -> dict[str, Any]:
    """htools' parseBaseInstance: the fields shared by cluster instances and allocate requests."""
    quick = _quick_base(obj)
    if quick is not None:
        return quick
    desc = f"invalid data for instance '{name}'"
    disk_space_total = _get(obj, "disk_space_total", _read_mib, path, desc)
    disk_objs = _get(obj, "disks", _read_list(_read_object), path, desc)
    disks = tuple(_disk(desc, f"{path}.disks[{k}]")(d) for k, d in enumerate(disk_objs))
    memory = _get(obj, "memory", _read_mib, path, desc)
    vcpus = _get(obj, "vcpus", _read_int, path, desc)
    tags = _get(obj, "tags", _read_strings, path, desc)
    template = _get(obj, "disk_template", _read_enum("DiskTemplate", DISK_TEMPLATES), path, desc)
    spindle_use = _get(obj, "spindle_use", _read_int, path, desc)
    nic_objs = _get(obj, "nics", _read_list(_read_object), path, desc)
    nics = tuple(_nic(name, f"{path}.nics[{k}]")(n) for k, n in enumerate(nic_objs))
    return _base_fields(
        obj, memory, disk_space_total, disks, template, vcpus, spindle_use, tags, nics
    )


def _base_fields(
    obj: dict,
    memory: int,
    disk_space_total: int,
    disks: tuple[Disk, ...],
    template: str,
    vcpus: int,
    spindle_use: int,
    tags: tuple[str, ...],
    nics: tuple[dict, ...],
) -> dict[str, Any]:
    state = obj.get("admin_state")
    known = isinstance(state, str) and state in ADMIN_STATE_STATUS
    admin_state = state if known else "up"  # any failure means "up"
    forthcoming = obj.get("forthcoming")
    return {
        "memory": memory,
        "disk_space_total": disk_space_total,
        "disks": disks,
        "disk_template": template,
        "vcpus": vcpus,
        "spindle_use": spindle_use,
        "tags": tags,
        "nics": nics,
        "admin_state": admin_state,
        "forthcoming": forthcoming if isinstance(forthcoming, bool) else False,
    }


def _parse_instance(name: str, obj: dict, path: str, node_names: set[str]) -> Instance:
    base = _parse_base(name, obj, path)
    nodes = _get(obj, "nodes", _read_list(lambda v: v), path)
    if not nodes:
        raise _Bad(f"empty node list for instance {name}", _in(path, "nodes"))
    names = [_read_string(n) for n in nodes[:2]]
    for node in names:
        if node not in node_names:
            raise _Bad(f"Unknown node '{node}' for instance {name}", _in(path, "nodes"))
    return _instance(name, base, names[0], names[1] if len(names) > 1 else None)


# ---------------------------------------------------------------------------------------------
# Requests.


def _find_by_name(items: Sequence[tuple[str, ...]], wanted: str) -> int:
    """htools' Container.findByName: exactly one element must have `wanted` among its names."""
    matches = [i for i, names in enumerate(items) if wanted in names]
    if len(matches) != 1:
        raise _Bad(f"Wrong number of elems found with name {wanted}")
    return matches[0]


def _allocate(
    obj: dict, path: str, group_name: str | None, restrict: tuple[str, ...] | None
) -> AllocateRequest:
    desc = "invalid request dict"
    name = _get(obj, "name", _read_string, path, desc)
    required = _get(obj, "required_nodes", _read_int, path, desc)
    base = _parse_base(name, obj, path)
    return AllocateRequest(
        name=name,
        required_nodes=required,
        group_name=group_name,
        restrict_to_nodes=restrict,
        **base,
    )


def _parse_request(req: dict, cluster: Cluster) -> Request:
    desc = "invalid request dict"
    path = "request"
    rtype = _get(req, "type", _read_string, path, desc)
    suffix = cluster_suffix(cluster)
    instance_names = {i.name for i in cluster.instances}

    def lookup_instance(name: str) -> str:
        if name not in instance_names:
            raise _Bad(f"Unknown instance '{name}'", _in(path, "name"))
        return name

    def find(kind: str, wanted: str) -> str:
        if kind == "node":
            names = [(n.name, alias(n.name, suffix)) for n in cluster.nodes]
            return cluster.nodes[_find_by_name(names, wanted)].name
        if kind == "instance":
            names = [(i.name, alias(i.name, suffix)) for i in cluster.instances]
            return cluster.instances[_find_by_name(names, wanted)].name
        names = [(g.name, g.uuid) for g in cluster.groups]
        return cluster.groups[_find_by_name(names, wanted)].uuid

    if rtype == "allocate":
        group_name = _maybe(req, "group_name", _read_string, path, desc)
        restrict = _maybe(req, "restrict-to-nodes", _read_strings, path, desc)
        return _allocate(req, path, group_name, restrict)
    if rtype == "relocate":
        name = lookup_instance(_get(req, "name", _read_string, path, desc))
        required = _get(req, "required_nodes", _read_int, path, desc)
        excluded = _get(req, "relocate_from", _read_strings, path, desc)
        return RelocateRequest(name, required, tuple(find("node", n) for n in excluded))
    if rtype == "change-group":
        names = _get(req, "instances", _read_strings, path, desc)
        instances = tuple(find("instance", n) for n in names)
        groups = _get(req, "target_groups", _read_strings, path, desc)
        return ChangeGroupRequest(instances, groups, tuple(find("group", g) for g in groups))
    if rtype == "node-evacuate":
        names = _get(req, "instances", _read_strings, path, desc)
        instances = tuple(find("instance", n) for n in names)
        mode = _get(req, "evac_mode", _read_enum("EvacMode", EVAC_MODES), path, desc)
        return NodeEvacuateRequest(instances, mode)
    if rtype == "multi-allocate":
        entries = _get(req, "instances", _read_list(_read_object), path, desc)
        group_name = _maybe(req, "group_name", _read_string, path, desc)
        return MultiAllocateRequest(
            tuple(
                _allocate(e, f"{path}.instances[{k}]", group_name, None)
                for k, e in enumerate(entries)
            ),
            group_name,
        )
    if rtype == "allocate-secondary":
        return AllocateSecondaryRequest(
            lookup_instance(_get(req, "name", _read_string, path, desc))
        )
    raise _Bad(f"Invalid request type '{rtype}'", _in(path, "type"))


# ---------------------------------------------------------------------------------------------
# Entry points.


class _Repeated(dict):
    """An object that had duplicate keys: the first value of each, and which keys repeated."""

    repeated: tuple[str, ...] = ()


def _first_wins(pairs: list[tuple[str, Any]]) -> dict:
    """Text.JSON keeps duplicate keys and looks up the first; keep that one. Where keys are
    names (nodes, instances, groups) a repeated key is rejected later (`_unique_names`)."""
    out = dict(pairs)
    if len(out) == len(pairs):  # no duplicate keys: the usual case
        return out
    first = _Repeated()
    for key, value in pairs:
        if key in first:
            first.repeated += (key,)
        else:
            first[key] = value
    return first


def _unique_names(objects: dict, path: str, kind: str) -> None:
    """Two nodes (instances, groups) of one name are no cluster (model.validate)."""
    for name in getattr(objects, "repeated", ()):
        raise _Bad(f"duplicate {kind} name '{name}'", f"{path}.{name}")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid token in this context {name}")


def _decode(text: str, source: str) -> Any:
    prefix = "Parsing input IAllocator message"
    try:
        return json.loads(
            text,
            object_pairs_hook=_first_wins,
            parse_constant=_reject_constant,
            parse_float=Decimal,
        )
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{prefix}: Invalid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
            source=source,
            line=exc.lineno,
        ) from None
    except ValueError as exc:
        raise InputError(f"{prefix}: Malformed JSON: {exc}", source=source) from None
    except RecursionError:  # Python's reader recurses once per level of [ and {
        line = deep_nesting_line(text)
        raise InputError(f"{prefix}: {NESTING_MESSAGE}", source=source, line=line) from None


def parse_request(
    text: str, source: str = "<json>", *, static_kvm_node_memory: int = 4096
) -> IAllocatorInput:
    """Parse an IAllocator request; every error is an InputError naming the JSON key path."""
    decoded = _decode(text, source)
    if not isinstance(decoded, dict | list):
        raise InputError(
            "Parsing input IAllocator message: Invalid JSON: a JSON text a serialized object "
            "or array at the top level.",
            source=source,
        )
    if not isinstance(decoded, dict):
        raise InputError("Parsing input IAllocator message: Unable to read JSObject", source=source)
    try:
        return _parse(decoded, static_kvm_node_memory)
    except _Bad as exc:
        where = f" (at {exc.path})" if exc.path else ""
        err = InputError(exc.message + where, source=source)
        err.htools_message = exc.message  # type: ignore[attr-defined]  # htools' own words
        raise err from None


def _parse(top: dict, static_kvm_node_memory: int) -> IAllocatorInput:
    desc = "invalid iallocator message"
    request = _get(top, "request", _read_object, "", desc)
    group_objs = _get(top, "nodegroups", _read_object, "", desc)
    _unique_names(group_objs, "nodegroups", "group uuid")
    groups = []
    for uuid, value in group_objs.items():
        path = f"nodegroups.{uuid}"
        groups.append(_parse_group(uuid, _as_object(value, path), path))
    node_objs = _get(top, "nodes", _read_object, "", desc)
    instance_objs = _get(top, "instances", _read_object, "", desc)
    _unique_names(node_objs, "nodes", "node")
    _unique_names(instance_objs, "instances", "instance")
    tags = _get(top, "cluster_tags", _read_strings, "", desc)
    hypervisors = _get(top, "enabled_hypervisors", _read_strings, "", desc)
    hypervisor = hypervisors[0] if hypervisors else None
    uuids = {g.uuid for g in groups}
    nodes = []
    for name, value in node_objs.items():
        path = f"nodes.{name}"
        obj = _as_object(value, path)
        nodes.append(_parse_node(name, obj, path, uuids, hypervisor, static_kvm_node_memory))
    node_names = {n.name for n in nodes}
    instances = []
    for name, value in instance_objs.items():
        path = f"instances.{name}"
        instances.append(_parse_instance(name, _as_object(value, path), path, node_names))
    cluster = Cluster(
        groups=tuple(groups),
        nodes=tuple(nodes),
        instances=tuple(instances),
        cluster_tags=tags,
        cluster_policy=DEFAULT_IPOLICY,
    )
    problem = cluster_problem(cluster)  # duplicates and cross-references (model.validate)
    if problem is not None:
        keys = {"group": list(group_objs), "node": list(node_objs), "instance": list(instance_objs)}
        section = {"group": "nodegroups", "node": "nodes", "instance": "instances"}[problem.kind]
        raise _Bad(problem.message, f"{section}.{keys[problem.kind][problem.index]}")
    return IAllocatorInput(cluster, _parse_request(request, cluster), hypervisors)


def _as_object(value: Any, path: str) -> dict:
    try:
        return _read_object(value)
    except _Bad as exc:
        raise _Bad(exc.message, path) from None


def load_request(
    path_or_text: str | os.PathLike[str], *, static_kvm_node_memory: int = 4096
) -> IAllocatorInput:
    """Load a request from a file, `-` (stdin), or JSON text (a str starting with `{` or `[`)."""
    if isinstance(path_or_text, str) and path_or_text.lstrip()[:1] in ("{", "["):
        return parse_request(path_or_text, static_kvm_node_memory=static_kvm_node_memory)
    source = str(path_or_text)
    if source == "-":
        text = sys.stdin.read()
    else:
        try:
            text = Path(path_or_text).read_text(encoding="utf-8", errors="surrogateescape")
        except OSError as exc:
            raise InputError(f"cannot read file: {exc.strerror}", source=source) from None
    return parse_request(text, source, static_kvm_node_memory=static_kvm_node_memory)
