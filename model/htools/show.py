"""Haskell's derived `show` of htools' records: what `hail -v -v` prints on stderr.

hail 3.0.2 (Program/Hail.hs, `main`) prints, with its verbosity above 1 (`-v`; htools counts
from 1), `Received request: ` and `show` of the request (Loader.RqType), above 2 (`-v -v`)
`Received cluster data: ` and `show` of the cluster it parsed (Loader.ClusterData: groups,
nodes and instances as `IntMap`s by index, the cluster tags and policy), and, above 1 again,
`Allocation on a dedicated cluster; using lost-allocations metrics.` for an allocation on a
dedicated cluster. Each record is shown as GHC derives `Show`: `Name {field = value, ...}`,
constructor arguments in parentheses when they are applications or negative, `fromList [...]`
for maps and sets (in key order), doubles as `show :: Double` writes them.

The values are the loaded records (`Loader.mergeData` + `updateMissing`, IAlloc.parseData),
read off exalloc's node states (model/resources.py) and htools' quirks of 3.0.2 kept:
`failN1Forth` stays `True`, `rMemForth` 0 and `pRemForth` 0.0 (Node.hs leaves them as `create`
sets them, "TODO"), lists of instances are most recently added first, a requested instance
has index -1 and primary and secondary 0, and its alias is its full name.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from model.backends.iallocator import (
    AllocateRequest,
    AllocateSecondaryRequest,
    ChangeGroupRequest,
    IAllocatorInput,
    MultiAllocateRequest,
    NodeEvacuateRequest,
    RelocateRequest,
    Request,
    new_instance,
)
from model.backends.iallocator_response import HASKELL_TEMPLATES, show_group, show_ipolicy
from model.backends.text import alias, cluster_suffix, show_double, show_string
from model.cluster import (
    MOVABLE_TEMPLATES,
    Cluster,
    Instance,
    read_name,
)
from model.htools.dedicated import is_dedicated
from model.resources import TagRules, Utilisation
from model.state import ClusterState, node_states

DEDICATED_NOTE = "Allocation on a dedicated cluster; using lost-allocations metrics."

#: Ganeti's constructor names (Types.hs `declareLADT`s) by exalloc's raw values.
STATUSES = {
    "ADMIN_down": "StatusDown",
    "ADMIN_offline": "StatusOffline",
    "ERROR_down": "ErrorDown",
    "ERROR_up": "ErrorUp",
    "ERROR_nodedown": "NodeDown",
    "ERROR_nodeoffline": "NodeOffline",
    "running": "Running",
    "USER_down": "UserDown",
    "ERROR_wrongnode": "WrongNode",
}
HYPERVISORS = {
    "kvm": "Kvm",
    "xen-pvm": "XenPvm",
    "chroot": "Chroot",
    "xen-hvm": "XenHvm",
    "lxc": "Lxc",
    "fake": "Fake",
}
NIC_MODES = {"bridged": "Bridged", "routed": "Routed", "openvswitch": "OpenVSwitch"}
EVAC_MODES = {
    "primary-only": "ChangePrimary",
    "secondary-only": "ChangeSecondary",
    "all": "ChangeAll",
}
#: Types.AutoRepairType, least destructive first (its Ord: `minimum` picks the first).
AUTO_REPAIR_TYPES = {
    "fix-storage": "ArFixStorage",
    "migrate": "ArMigrate",
    "failover": "ArFailover",
    "reinstall": "ArReinstall",
}
AUTO_REPAIR_PREFIX = "ganeti:watcher:autorepair:"  # Tags/Constants.hs autoRepairTagEnabled
AUTO_REPAIR_SUSPEND_PREFIX = AUTO_REPAIR_PREFIX + "suspend:"
NOT_ENABLED = "ArNotEnabled"


# ---------------------------------------------------------------------------------------------
# The pieces of a derived `show`.


def record(name: str, fields: Iterable[tuple[str, str]]) -> str:
    """`Name {f1 = v1, f2 = v2}` (each value shown at precedence 0)."""
    return name + " {" + ", ".join(f"{k} = {v}" for k, v in fields) + "}"


def show_list(items: Iterable[str]) -> str:
    """A list of values already shown (model.backends.text.show_list shows strings)."""
    return "[" + ",".join(items) + "]"


def from_list(items: Iterable[str]) -> str:
    """`show` of a Data.Map, Data.Set or IntMap: its elements in key order."""
    return "fromList " + show_list(items)


def pair(a: str, b: str) -> str:
    return f"({a},{b})"


def show_bool(value: bool) -> str:
    return "True" if value else "False"


def show_int(value: int, precedence: int = 0) -> str:
    """An Int; negative ones in parentheses as a constructor's argument (precedence 11)."""
    return f"({value})" if value < 0 and precedence > 6 else str(value)


def show_maybe(value: str | None) -> str:
    """`Maybe a` at precedence 0: `Nothing` or `Just x`, x already shown at precedence 11."""
    return "Nothing" if value is None else f"Just {value}"


def argument(text: str) -> str:
    """A value shown as a constructor's argument (precedence 11): an application or record in
    parentheses."""
    return f"({text})" if " " in text and text[0] not in '[("' else text


def show_strings(items: Iterable[str]) -> str:
    return show_list(show_string(s) for s in items)


def show_set(items: Iterable[str]) -> str:
    return from_list(show_string(s) for s in sorted(items))


# ---------------------------------------------------------------------------------------------
# Utilisation (policies and groups: model/backends/iallocator_response.py).


def show_util(util: Utilisation | Sequence[float]) -> str:
    cpu, mem, dsk, net = (
        (util.cpu, util.mem, util.dsk, util.net) if isinstance(util, Utilisation) else util
    )
    return record(
        "DynUtil",
        (
            ("cpuWeight", show_double(cpu)),
            ("memWeight", show_double(mem)),
            ("dskWeight", show_double(dsk)),
            ("netWeight", show_double(net)),
        ),
    )


BASE_UTIL = show_util((1.0, 1.0, 1.0, 1.0))  # Types.baseUtil, every node's utilPool


# ---------------------------------------------------------------------------------------------
# The auto-repair policy (Loader.setArPolicy, getArPolicy).


def _chomp(prefix: str, tag: str) -> str | None:
    """Utils.chompPrefix: the rest after `prefix`, also "" for `prefix` without its last
    character."""
    if tag.startswith(prefix) or tag == prefix[:-1]:
        return tag[len(prefix) :]
    return None


def _read_integer(text: str) -> int | None:
    """`tryRead` of an Integer: `reads` taking all of it (leading blanks, a minus sign)."""
    body = text.lstrip(" \t\n\r\f\v")
    digits = body[1:] if body.startswith("-") else body
    return int(body) if digits.isascii() and digits.isdigit() else None


def _clock_time(seconds: int) -> str:
    """old-time's `show :: ClockTime`: `%c` of the local calendar time."""
    return time.strftime("%a %b %e %H:%M:%S %Z %Y", time.localtime(seconds))


def ar_policy(tags: Sequence[str], now: float) -> str | None:
    """`getArPolicy`: the policy the tags set, None (not ArNotEnabled) when they set none."""
    enabled = [
        AUTO_REPAIR_TYPES[rest]
        for rest in (_chomp(AUTO_REPAIR_PREFIX, t) for t in tags)
        if rest in AUTO_REPAIR_TYPES
    ]
    suspended = [rest for t in tags if (rest := _chomp(AUTO_REPAIR_SUSPEND_PREFIX, t)) is not None]
    future = [s for s in map(_read_integer, suspended) if s is not None and s > now]
    if "" in suspended:
        return "ArSuspended Forever"
    if future:
        return f"ArSuspended (Until {_clock_time(max(future))})"
    if enabled:
        order = list(AUTO_REPAIR_TYPES.values())
        return "ArEnabled " + min(enabled, key=order.index)
    return None


# ---------------------------------------------------------------------------------------------
# Instances.


@dataclass(frozen=True)
class Placement:
    """What loading makes of an instance beside its own fields (Loader.mergeData)."""

    alias: str
    primary: int  # pNode
    secondary: int  # sNode, -1 for none
    index: int  # idx, -1 for a requested instance
    movable: bool
    exclusion_tags: tuple[str, ...]
    desired_locations: frozenset[str]
    location_score: int
    ar_policy: str


def show_nic(nic: Mapping[str, str | None]) -> str:
    def text(key: str) -> str:
        value = nic.get(key)
        return show_maybe(None if value is None else show_string(value))

    mode = nic.get("mode")
    return record(
        "Nic",
        (
            ("mac", text("mac")),
            ("ip", text("ip")),
            ("mode", show_maybe(None if mode is None else NIC_MODES[mode])),
            ("link", text("link")),
            ("bridge", text("bridge")),
            ("network", text("network")),
        ),
    )


def show_instance(inst: Instance, at: Placement) -> str:
    disks = (
        record(
            "Disk",
            (
                ("dskSize", show_int(d.size_mib)),
                (
                    "dskSpindles",
                    show_maybe(None if d.spindles is None else show_int(d.spindles, 11)),
                ),
            ),
        )
        for d in inst.disks
    )
    return record(
        "Instance",
        (
            ("name", show_string(read_name(inst.name))),
            ("alias", show_string(at.alias)),
            ("mem", show_int(inst.memory_mib)),
            ("dsk", show_int(inst.disk_mib)),
            ("disks", show_list(disks)),
            ("vcpus", show_int(inst.vcpus)),
            ("runSt", STATUSES[inst.status]),
            ("pNode", show_int(at.primary)),
            ("sNode", show_int(at.secondary)),
            ("idx", show_int(at.index)),
            ("util", show_util(inst.util)),
            ("movable", show_bool(at.movable)),
            ("autoBalance", show_bool(inst.auto_balance)),
            ("diskTemplate", HASKELL_TEMPLATES[inst.disk_template]),
            ("spindleUse", show_int(inst.spindle_use)),
            ("allTags", show_strings(inst.tags)),
            ("exclTags", show_strings(at.exclusion_tags)),
            ("dsrdLocTags", show_set(at.desired_locations)),
            ("locationScore", show_int(at.location_score)),
            ("arPolicy", at.ar_policy),
            ("nics", show_list(show_nic(n) for n in inst.nics)),
            ("forthcoming", show_bool(inst.forthcoming)),
        ),
    )


def show_requested(request: AllocateRequest, rules: TagRules) -> str:
    """An instance an allocate asks for, as IAlloc.parseData makes it (`parseBaseInstance`,
    then its exclusion and desired-location tags): not loaded, index -1, on node 0 twice."""
    inst = new_instance(request)
    at = Placement(
        alias=inst.name,
        primary=0,
        secondary=0,
        index=-1,
        movable=inst.disk_template in MOVABLE_TEMPLATES,
        exclusion_tags=rules.exclusion_tags(inst.tags),
        desired_locations=rules.desired_locations(inst.tags),
        location_score=0,
        ar_policy=NOT_ENABLED,
    )
    return show_instance(inst, at)


# ---------------------------------------------------------------------------------------------
# The cluster.


@dataclass(frozen=True)
class _Indices:
    groups: Mapping[str, int]  # by uuid
    nodes: Mapping[str, int]
    instances: Mapping[str, int]

    @classmethod
    def of(cls, cluster: Cluster, base: int = 0) -> _Indices:
        return cls(
            {g.uuid: k for k, g in enumerate(cluster.groups, base)},
            {n.name: k for k, n in enumerate(cluster.nodes, base)},
            {i.name: k for k, i in enumerate(cluster.instances)},
        )

    def newest_first(self, names: Iterable[str]) -> str:
        """A node's instance list: Node.setPri/setSec prepend, loading in index order."""
        return show_list(str(k) for k in sorted((self.instances[n] for n in names), reverse=True))


def _placements(state: ClusterState, at: _Indices, now: float) -> list[Placement]:
    cluster = state.cluster
    suffix = cluster_suffix(cluster)
    cluster_policy = ar_policy(cluster.cluster_tags, now) or NOT_ENABLED
    group_policy = {g.uuid: ar_policy(g.tags, now) or cluster_policy for g in cluster.groups}
    out = []
    for inst in cluster.instances:
        name = read_name(inst.name)
        primary = cluster.node(inst.primary)
        secondary = cluster.node(inst.secondary) if inst.secondary else primary
        split = primary.group_uuid != secondary.group_uuid  # Loader.disableSplitMoves
        demand = state.demands[inst.name]
        p_state = state.nodes[inst.primary]
        s_state = state.nodes[inst.secondary] if inst.secondary else None
        out.append(
            Placement(
                alias=alias(name, suffix),
                primary=at.nodes[inst.primary],
                secondary=at.nodes[inst.secondary] if inst.secondary else -1,
                index=at.instances[inst.name],
                movable=inst.disk_template in MOVABLE_TEMPLATES and not split,
                exclusion_tags=demand.exclusion_tags,
                desired_locations=demand.desired_locations,
                location_score=(
                    0 if s_state is None else len(p_state.location_tags & s_state.location_tags)
                ),
                ar_policy=ar_policy(inst.tags, now) or group_policy[primary.group_uuid],
            )
        )
    return out


def _node_fields(state: ClusterState, name: str, at: _Indices, suffix: str) -> list:
    cluster = state.cluster
    node = cluster.node(name)
    s = state.nodes[name]
    group = cluster.group_of(node)
    d = show_double
    i = show_int
    peers = peer_map(
        (at.nodes[state.location(i)[0]], state.demands[i].secondary_memory_mib)
        for i in s.secondaries
    )
    hypervisor = node.hypervisor
    return [
        ("name", show_string(name)),
        ("alias", show_string(alias(name, suffix))),
        ("tMem", d(s.total_memory_mib)),
        ("nMem", i(s.node_memory_mib)),
        ("iMem", i(s.instance_memory_mib)),
        ("fMem", i(s.reported_free_memory_mib)),
        ("fMemForth", i(s.free_memory_forth_mib)),
        ("xMem", i(s.missing_memory_mib)),
        ("tDsk", d(s.total_disk_mib)),
        ("fDsk", i(s.free_disk_mib)),
        ("fDskForth", i(s.free_disk_forth_mib)),
        ("tCpu", d(s.total_cpus)),
        ("tCpuSpeed", d(s.cpu_speed)),
        ("nCpu", i(s.node_cpus)),
        ("uCpu", i(s.used_vcpus)),
        ("uCpuForth", i(s.used_vcpus_forth)),
        ("tSpindles", i(s.total_spindles)),
        ("fSpindles", i(s.free_spindles)),
        ("fSpindlesForth", i(s.free_spindles_forth)),
        ("pList", at.newest_first(s.primaries)),
        ("pListForth", at.newest_first(s.primaries_forth)),
        ("sList", at.newest_first(s.secondaries)),
        ("sListForth", at.newest_first(s.secondaries_forth)),
        ("idx", i(at.nodes[name])),
        ("peers", show_list(pair(str(k), i(m)) for k, m in peers)),
        ("failN1", show_bool(s.fail_n1)),
        ("failN1Forth", "True"),
        ("rMem", i(s.reserved_memory_mib)),
        ("rMemForth", "0"),
        ("pMem", d(s.p_mem)),
        ("pMemForth", d(s.p_mem_forth)),
        ("pDsk", d(s.p_dsk)),
        ("pDskForth", d(s.p_dsk_forth)),
        ("pRem", d(s.p_rem)),
        ("pRemForth", "0.0"),
        ("pCpu", d(s.p_cpu)),
        ("pCpuForth", d(s.p_cpu_forth)),
        ("mDsk", d(0.0)),  # Types.defReservedDiskRatio
        ("loDsk", i(s.lo_disk_mib)),
        ("hiCpu", i(s.hi_cpu)),
        ("hiSpindles", d(s.hi_spindles)),
        ("instSpindles", d(s.instance_spindles)),
        ("instSpindlesForth", d(s.instance_spindles_forth)),
        ("offline", show_bool(s.offline)),
        ("isMaster", show_bool(s.master)),
        ("nTags", show_strings(node.tags)),
        ("utilPool", BASE_UTIL),
        ("utilLoad", show_util(s.util_load)),
        ("utilLoadForth", show_util(s.util_load_forth)),
        ("pTags", from_list(pair(show_string(t), i(c)) for t, c in s.exclusion_tag_counts)),
        ("group", i(at.groups[node.group_uuid])),
        ("iPolicy", show_ipolicy(group.ipolicy)),
        ("exclStorage", show_bool(s.exclusive_storage)),
        ("migTags", show_set(s.migration_tags)),
        ("rmigTags", show_set(s.receivable_migration_tags)),
        ("locationTags", show_set(s.location_tags)),
        ("locationScore", i(s.location_score)),
        (
            "instanceMap",
            from_list(
                pair(pair(show_string(loc), show_string(ex)), i(c))
                for (loc, ex), c in s.location_exclusion_counts
            ),
        ),
        ("hypervisor", show_maybe(None if hypervisor is None else _hypervisor(hypervisor))),
    ]


def peer_map(loaded: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Node.buildPeers' PeerMap: (primary node, memory) of the secondaries in the order loading
    added them, summed per node (`PeerMap.accumArray`, which adds the last of `sList`, the
    first loaded, first) and kept sorted by memory, largest first, a new or updated entry
    before the others of its memory (`insertBy`)."""
    peers: list[tuple[int, int]] = []
    for node, mem in loaded:
        old = next((m for k, m in peers if k == node), None)
        if old is not None:
            peers = [(k, m) for k, m in peers if k != node]
            mem += old
        at = next((j for j, (_, m) in enumerate(peers) if m <= mem), len(peers))
        peers.insert(at, (node, mem))
    return peers


def _hypervisor(raw: str) -> str:
    """Types.Hypervisor's constructor; a name htools does not know (it refuses the request,
    exalloc reads it) shown as read."""
    return HYPERVISORS.get(raw, show_string(raw))


def show_cluster_data(cluster: Cluster, *, base: int = 0, now: float | None = None) -> str:
    """`show` of Loader.ClusterData for `cluster` as loaded; `base`: the index of its first
    group and node (1 for a `--simulate` cluster: Backend/Simu.hs counts from 1)."""
    now = time.time() if now is None else now
    state = node_states(cluster)
    at = _Indices.of(cluster, base)
    suffix = cluster_suffix(cluster)
    groups = (pair(str(k), show_group(g, k)) for k, g in enumerate(cluster.groups, base))
    nodes = (
        pair(str(k), record("Node", _node_fields(state, n.name, at, suffix)))
        for k, n in enumerate(cluster.nodes, base)
    )
    placements = _placements(state, at, now)
    instances = (
        pair(str(k), show_instance(inst, placements[k])) for k, inst in enumerate(cluster.instances)
    )
    return record(
        "ClusterData",
        (
            ("cdGroups", from_list(groups)),
            ("cdNodes", from_list(nodes)),
            ("cdInstances", from_list(instances)),
            ("cdTags", show_strings(cluster.cluster_tags)),
            ("cdIPolicy", show_ipolicy(cluster.cluster_policy)),
        ),
    )


# ---------------------------------------------------------------------------------------------
# The request.


def _alloc_details(request: AllocateRequest, group: str | None) -> str:
    wanted = show_maybe(None if group is None else show_string(group))
    return f"AllocDetails {show_int(request.required_nodes, 11)} {argument(wanted)}"


def _index_list(table: Mapping[str, int], names: Iterable[str]) -> str:
    return show_list(str(table[n]) for n in names)


def show_request(inp: IAllocatorInput) -> str:
    """`show` of Loader.RqType, indices those of the request's own cluster."""
    req: Request = inp.request
    cluster = inp.cluster
    at = _Indices.of(cluster)
    rules = TagRules.of(cluster)
    if isinstance(req, AllocateRequest):
        restrict = req.restrict_to_nodes
        return (
            f"Allocate ({show_requested(req, rules)}) ({_alloc_details(req, req.group_name)}) "
            + argument(show_maybe(None if restrict is None else show_strings(restrict)))
        )
    if isinstance(req, MultiAllocateRequest):
        entries = (
            pair(show_requested(r, rules), _alloc_details(r, r.group_name)) for r in req.instances
        )
        return "MultiAllocate " + show_list(entries)
    if isinstance(req, RelocateRequest):
        return (
            f"Relocate {at.instances[req.name]} {show_int(req.required_nodes, 11)} "
            + _index_list(at.nodes, req.relocate_from)
        )
    if isinstance(req, NodeEvacuateRequest):
        return (
            f"NodeEvacuate {_index_list(at.instances, req.instances)} {EVAC_MODES[req.evac_mode]}"
        )
    if isinstance(req, ChangeGroupRequest):
        # IAlloc.parseData builds `ChangeGroup rl_insts gr_idxes`: the instances first
        return f"ChangeGroup {_index_list(at.instances, req.instances)} " + _index_list(
            at.groups, req.target_group_uuids
        )
    assert isinstance(req, AllocateSecondaryRequest)
    return f"AllocateSecondary {at.instances[req.name]}"


def allocation_group(req: Request) -> tuple[bool, str | None]:
    """Loader.isAllocationRequest: (is an allocation, the one group it names or None)."""
    if isinstance(req, AllocateRequest):
        return True, req.group_name
    if isinstance(req, MultiAllocateRequest):
        groups = {r.group_name for r in req.instances if r.group_name is not None}
        return True, (groups.pop() if len(groups) == 1 else None)
    return False, None


def hail_dump(
    inp: IAllocatorInput, cluster: Cluster, verbosity: int, *, simulated: bool = False
) -> str:
    """What hail prints on stderr after reading its request, at htools' verbosity
    `verbosity` (1 by default, one more per `-v`): the request from `inp` (its indices are
    the request's cluster's), the cluster data from `cluster` (the request's, or the one
    `-t FILE` or `--simulate` put in its place)."""
    lines = []
    if verbosity > 1:
        lines.append("Received request: " + show_request(inp))
    if verbosity > 2:
        base = 1 if simulated else 0
        lines.append("Received cluster data: " + show_cluster_data(cluster, base=base))
    allocation, group = allocation_group(inp.request)
    if verbosity > 1 and allocation and is_dedicated(cluster, group):
        lines.append(DEDICATED_NOTE)
    return "".join(line + "\n" for line in lines)
