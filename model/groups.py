"""Node groups as one super cluster: storage pools, peer groups and moves between groups.

Ganeti exports no storage pools, so exalloc reads them from tags (docs/groups.md, "Storage
pools"): a node tag (or group tag) `pool:NAME` says the node's group reaches shared pool NAME,
the same tag on a shared-storage instance (ext, rbd, sharedfile, gluster, blockdev) says where
its disks live. Groups that share a storage method are *peers* (the design's "partitions"):
a common pool, or a template both policies enable for instances that move by copying (drbd and
plain through the lvm volume group, file, diskless).

How an instance changes group (docs/groups.md, "Moving between groups"):

* drbd: to a new (primary, secondary) pair of the other group, by replace-disks, migrate and
  replace-disks, exactly the steps of `gnt-instance change-group` (Evacuate.hs, ChangeAll);
* shared storage and diskless: migrated (or failed over) to a node of a group reaching its
  pool (hail's change-group does `FailoverToAny`; Ganeti checks no group there);
* plain and file: copied with `gnt-instance move` (Ganeti's copyable templates); htools'
  change-group refuses them ("Instances of type plain cannot be relocated").

Everything here is a pure function of a `ClusterState`. `check_relocations` is the independent
check of a plan: every moving instance leaves its nodes, then arrives with htools' strict adds
(the check of `model.check.check_moves`, on the final layout), plus the rules above.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from model.backends.jobs import JobSet, moving
from model.check import Violation
from model.check import _distinct as distinct_shortfalls  # the checker's own dedup rule
from model.cluster import EXTERNALLY_MIRRORED_TEMPLATES, MEMORY_USING_STATUSES
from model.operations import Step, command, opcode
from model.policy import policy_shortfall
from model.resources import (
    NodeState,
    apply_primary,
    apply_secondary,
    check_migration,
    pair_location_score,
    primary_shortfalls,
    remove_primary,
    remove_secondary,
    secondary_shortfalls,
)
from model.state import ClusterState

POOL_TAG_PREFIX = "pool:"
#: Templates whose disks live outside the nodes: they need a group reaching their pool.
SHARED_TEMPLATES = EXTERNALLY_MIRRORED_TEMPLATES
#: Ganeti's copyable templates (`dtsCopyable`): `gnt-instance move` copies their disks.
COPIED_TEMPLATES = frozenset({"plain", "file"})

# How an instance changes nodes.
DRBD_MOVE = "drbd"  # a new (primary, secondary): replace-disks, migrate, replace-disks
MIGRATION = "migrate"  # shared storage, diskless: migrate (or failover) -n NODE
COPY = "copy"  # plain, file: gnt-instance move -n NODE

# Storage methods (the design's "storage type and storage pool" pairs).
LVM = "lvm"  # drbd and plain: the nodes' volume group, reached by copying
FILE = "file"
DISKLESS = "diskless"
POOL = "pool"
Method = tuple[str, str]


def move_kind(template: str) -> str:
    """How an instance of `template` changes nodes."""
    if template == "drbd":
        return DRBD_MOVE
    if template in COPIED_TEMPLATES:
        return COPY
    return MIGRATION


def pools_of(tags: Iterable[str], prefix: str = POOL_TAG_PREFIX) -> frozenset[str]:
    """The pools named by tags `PREFIX NAME`."""
    return frozenset(
        t[len(prefix) :] for t in tags if t.startswith(prefix) and len(t) > len(prefix)
    )


@dataclass(frozen=True)
class Storage:
    """What each group reaches and where each shared-storage instance's disks live."""

    prefix: str
    group_pools: Mapping[str, frozenset[str]]  # group uuid -> pools its nodes reach
    instance_pool: Mapping[str, str | None]  # shared-storage instance -> its pool (None: unknown)
    methods: Mapping[str, frozenset[Method]]  # group uuid -> storage methods

    def peers(self, group: str) -> tuple[str, ...]:
        """Groups sharing at least one storage method with `group` (its partitions)."""
        mine = self.methods.get(group, frozenset())
        return tuple(g for g, m in self.methods.items() if g != group and m & mine)

    def alone(self, group: str) -> bool:
        return not self.peers(group)


def storage_of(state: ClusterState, prefix: str = POOL_TAG_PREFIX) -> Storage:
    """Pools, instance pools and storage methods read from the tags (docs/groups.md).

    A group reaches a pool when the group or one of its nodes carries the pool tag (htools
    assumes every node of a group reaches the group's storage). A shared-storage instance
    lives in the pool of its tag; without one, in the pool of its group when that group
    reaches exactly one, else nowhere known (it cannot leave its group)."""
    cluster = state.cluster
    group_pools: dict[str, set[str]] = {
        g.uuid: set(pools_of(g.tags, prefix)) for g in cluster.groups
    }
    for node in cluster.nodes:
        group_pools.setdefault(node.group_uuid, set()).update(pools_of(node.tags, prefix))
    frozen = {g: frozenset(p) for g, p in group_pools.items()}
    records = {**cluster.instance_index, **state.added}
    instance_pool: dict[str, str | None] = {}
    for name, d in state.demands.items():
        if d.disk_template not in SHARED_TEMPLATES:
            continue
        tagged = sorted(pools_of(getattr(records.get(name), "tags", ()), prefix))
        if tagged:
            instance_pool[name] = tagged[0]
            continue
        primary = state.locations[name][0]
        own = frozen.get(state.nodes[primary].group_uuid, frozenset())
        instance_pool[name] = next(iter(own)) if len(own) == 1 else None
    methods: dict[str, frozenset[Method]] = {}
    for g in cluster.groups:
        enabled = set(g.ipolicy.disk_templates)
        found: set[Method] = set()
        if enabled & {"drbd", "plain"}:
            found.add((LVM, ""))
        if "file" in enabled:
            found.add((FILE, ""))
        if "diskless" in enabled:
            found.add((DISKLESS, ""))
        if enabled & SHARED_TEMPLATES:
            found.update((POOL, p) for p in frozen.get(g.uuid, ()))
        methods[g.uuid] = frozenset(found)
    return Storage(prefix, frozen, instance_pool, methods)


def group_of(state: ClusterState, instance: str) -> str:
    """The group of an instance: the group of its primary node."""
    return state.nodes[state.locations[instance][0]].group_uuid


def group_refusal(state: ClusterState, storage: Storage, instance: str, group: str) -> str | None:
    """Why `instance` cannot move into `group` (another group than its own), or None.

    The group must accept allocations, enable the template, and (shared storage) reach the
    instance's pool; the policy's min/max specs are checked per node (`node_refusal`)."""
    g = state.cluster.group(group)
    d = state.demands[instance]
    if g.alloc_policy == "unallocable":
        return f"group {g.name} is unallocable"
    if d.disk_template not in g.ipolicy.disk_templates:
        return f"group {g.name} does not enable {d.disk_template}"
    if d.disk_template in SHARED_TEMPLATES:
        pool = storage.instance_pool.get(instance)
        if pool is None:
            return f"the pool of {instance} is unknown (no {storage.prefix}NAME tag)"
        if pool not in storage.group_pools.get(group, ()):
            return f"group {g.name} does not reach pool {pool}"
    record = state.cluster.instance_index.get(instance) or state.added.get(instance)
    for nic in getattr(record, "nics", ()) or ():
        net = nic.get("network") if isinstance(nic, Mapping) else None
        if net is not None and net not in g.networks:
            return f"group {g.name} is not connected to network {net}"
    return None


def node_refusal(
    state: ClusterState, instance: str, node: str, *, role: str = "primary"
) -> str | None:
    """Why `node` cannot host `instance` in `role` whatever else happens (state, policy,
    migration tags of a migration), or None. Capacity is the strict adds' business."""
    st = state.nodes[node]
    record = state.cluster.node(node)
    if st.offline:
        return f"{node} is offline"
    if st.drained:
        return f"{node} is drained"
    if not record.vm_capable:
        return f"{node} is not vm_capable"
    d = state.demands[instance]
    if role == "primary":
        fail = policy_shortfall(d, state.ipolicy_of(node), st.exclusive_storage)
        if fail is not None:
            return f"the policy of {node}'s group refuses {instance} ({fail})"
        if move_kind(d.disk_template) == MIGRATION:
            source = state.nodes[state.locations[instance][0]]
            if check_migration(source, st) is not None:
                return f"{node} does not accept migrations from {source.name} (migration tags)"
    return None


# --- relocations ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Relocation:
    """An existing instance on new nodes (secondary only for drbd)."""

    instance: str
    primary: str
    secondary: str | None
    old_primary: str
    old_secondary: str | None

    def nodes(self) -> frozenset[str]:
        return frozenset(
            n for n in (self.primary, self.secondary, self.old_primary, self.old_secondary) if n
        )


def relocation(
    state: ClusterState, instance: str, primary: str, secondary: str | None
) -> Relocation:
    p, s = state.locations[instance]
    return Relocation(instance, primary, secondary, p, s)


def crosses_groups(state: ClusterState, r: Relocation) -> bool:
    return state.nodes[r.primary].group_uuid != state.nodes[r.old_primary].group_uuid


def _kept(r: Relocation) -> frozenset[str]:
    """Roles a relocation leaves where they were (same node, same peer): not re-checked,
    as htools re-adds them without checks."""
    kept = set()
    if r.primary == r.old_primary:
        kept.add("primary")
        if r.secondary == r.old_secondary:
            kept.add("secondary")
    return frozenset(kept)


def apply_relocations(
    state: ClusterState, relocations: Sequence[Relocation], *, strict: bool | None = None
) -> tuple[ClusterState, list[Violation]]:
    """The cluster after the relocations: every moving instance leaves its nodes first, then
    each arrives in order. With `strict` each arrival is held to htools' adds (strict: every
    check; False: the hard ones) and every failed check is listed; None applies without
    checks (a plan being built). Node states are changed in one dict (a plan may hold
    thousands of moves)."""
    nodes: dict[str, NodeState] = dict(state.nodes)
    locations = dict(state.locations)
    for r in relocations:
        d = state.demands[r.instance]
        p, s = locations[r.instance]
        loc = pair_location_score(nodes[p], nodes[s] if s else None)
        nodes[p] = remove_primary(nodes[p], d, loc)
        if s is not None:
            nodes[s] = remove_secondary(nodes[s], d, p)
    out: list[Violation] = []
    for r in relocations:
        d = state.demands[r.instance]
        prim = nodes[r.primary]
        sec = nodes[r.secondary] if r.secondary is not None else None
        loc = pair_location_score(prim, sec)
        kept = _kept(r)
        if strict is not None:
            if "primary" not in kept:
                for sf in distinct_shortfalls(primary_shortfalls(prim, d, strict=strict)):
                    out.append(
                        Violation(
                            sf.kind, f"as primary: {sf.message} ({sf.mode})", r.primary, d.name
                        )
                    )
            if sec is not None and "secondary" not in kept:
                found = secondary_shortfalls(sec, d, r.primary, strict=strict)
                for sf in distinct_shortfalls(x for x in found if x.kind != "template"):
                    out.append(
                        Violation(
                            sf.kind, f"as secondary: {sf.message} ({sf.mode})", r.secondary, d.name
                        )
                    )
        nodes[r.primary] = apply_primary(prim, d, loc)
        if sec is not None and r.secondary is not None:
            nodes[r.secondary] = apply_secondary(sec, d, r.primary)
        locations[r.instance] = (r.primary, r.secondary)
    after = ClusterState(state.cluster, state.rules, nodes, state.demands, locations, state.added)
    return after, out


def placed_state(
    base: ClusterState,
    removed: Iterable[str],
    placed: Iterable[Relocation],
    relaxed: frozenset[str] = frozenset(),
) -> ClusterState:
    """`base` without the `removed` instances and with the `placed` relocations (every placed
    instance first leaves its nodes), no checks; `relaxed` instances arrive diskless on their
    primary alone (see `Cutter._state`)."""
    placed = list(placed)
    nodes = dict(base.nodes)
    locations = dict(base.locations)
    demands = dict(base.demands)
    for name in dict.fromkeys([*removed, *(r.instance for r in placed)]):
        d = demands[name]
        p, s = locations.pop(name)
        loc = pair_location_score(nodes[p], nodes[s] if s else None)
        nodes[p] = remove_primary(nodes[p], d, loc)
        if s is not None:
            nodes[s] = remove_secondary(nodes[s], d, p)
    arrived = set()
    for r in placed:
        d = demands[r.instance]
        secondary = r.secondary
        if r.instance in relaxed:
            d = replace(d, disk_template="diskless", disk_mib=0, disk_sizes_mib=(), disk_spindles=0)
            demands[r.instance] = d
            secondary = None
        prim = nodes[r.primary]
        sec = nodes[secondary] if secondary is not None else None
        nodes[r.primary] = apply_primary(prim, d, pair_location_score(prim, sec))
        if sec is not None and secondary is not None:
            nodes[secondary] = apply_secondary(sec, d, r.primary)
        locations[r.instance] = (r.primary, secondary)
        arrived.add(r.instance)
    for name in list(demands):
        if name not in locations:
            del demands[name]
    return ClusterState(base.cluster, base.rules, nodes, demands, locations, base.added)


def check_relocations(
    state: ClusterState,
    storage: Storage,
    relocations: Sequence[Relocation],
    *,
    strict: bool = True,
    allowed_groups: Mapping[str, Iterable[str]] | None = None,
) -> tuple[ClusterState, tuple[Violation, ...]]:
    """The independent check of a plan of relocations, from the input alone.

    Rules (docs/groups.md): each instance moved once and from where it is; targets online,
    not drained, vm_capable, in one group; drbd keeps two distinct nodes, other templates
    one; a move into another group passes `group_refusal` (and `allowed_groups[group]`, when
    given, names the groups it may enter); every new primary passes its group's policy and,
    for a migration, the migration tags. Capacity: htools' strict adds on the final layout
    (`apply_relocations`). Returns the final state and every violation."""
    violations: list[Violation] = []
    seen: set[str] = set()
    ok: list[Relocation] = []
    for r in relocations:
        name = r.instance
        if name not in state.demands:
            violations.append(Violation("unknown_instance", "no such instance", None, name))
            continue
        if name in seen:
            violations.append(Violation("duplicate_instance", "instance moved twice", None, name))
            continue
        seen.add(name)
        if state.locations[name] != (r.old_primary, r.old_secondary):
            violations.append(Violation("unknown_instance", "not where the plan says", None, name))
            continue
        d = state.demands[name]
        bad = False
        for role, node in (("primary", r.primary), ("secondary", r.secondary)):
            if node is None:
                continue
            if node not in state.nodes:
                violations.append(
                    Violation("unknown_node", f"{role} node does not exist", node, name)
                )
                bad = True
                continue
            kept = (role == "primary" and node in (r.old_primary, r.old_secondary)) or (
                role == "secondary" and node == r.old_secondary
            )
            why = None if kept else node_refusal(state, name, node, role=role)
            if why is not None:
                violations.append(Violation("target", why, node, name))
        if bad:
            continue
        if d.has_secondary != (r.secondary is not None):
            violations.append(
                Violation("secondary", f"{d.disk_template} secondary mismatch", r.secondary, name)
            )
        if r.secondary is not None and r.secondary == r.primary:
            violations.append(Violation("same_node", "primary equals secondary", r.primary, name))
        if r.secondary is not None and (
            state.nodes[r.primary].group_uuid != state.nodes[r.secondary].group_uuid
        ):
            violations.append(
                Violation("group", "primary and secondary in different groups", r.secondary, name)
            )
        if crosses_groups(state, r):
            target = state.nodes[r.primary].group_uuid
            why = group_refusal(state, storage, name, target)
            if why is None and allowed_groups is not None:
                source = state.nodes[r.old_primary].group_uuid
                if target not in set(allowed_groups.get(source, ())):
                    why = f"group {state.cluster.group(target).name} is not a destination here"
            if why is not None:
                violations.append(Violation("group", why, r.primary, name))
        elif move_kind(d.disk_template) == COPY and r.primary != r.old_primary:
            pass  # gnt-instance move within the group: allowed (docs/groups.md)
        ok.append(r)
    after, found = apply_relocations(state, ok, strict=strict)
    return after, tuple(violations + found)


# --- the Ganeti commands (hbal -C) ------------------------------------------------------


def _running(state: ClusterState, instance: str) -> bool:
    return state.demands[instance].status in MEMORY_USING_STATUSES


def relocation_steps(state: ClusterState, r: Relocation) -> list[Step]:
    """The Ganeti operations of one relocation in order, as hbal's -C writes its moves
    (`migrate` for a running instance, else `failover`; Cluster.hs computeMoves), with the
    steps `gnt-instance change-group` would run for drbd (Evacuate.hs evacDrbdAllInner) and
    `gnt-instance move` for copied templates (model/operations.py)."""
    name = r.instance
    d = state.demands[name]
    offline_source = state.nodes[r.old_primary].offline
    verb = "migrate" if _running(state, name) and not offline_source else "failover"
    kind = move_kind(d.disk_template)
    if kind == COPY:
        return [("move", r.primary)]
    if kind == MIGRATION:
        return [(verb, r.primary)]
    a, b, p, q = r.old_primary, r.old_secondary, r.primary, r.secondary
    mig: Step = (verb, None)
    later: Step = ("migrate" if _running(state, name) else "failover", None)

    def rep(node: str | None) -> Step:
        return ("replace", node)

    if (p, q) == (b, a):
        return [mig]
    if p == a:
        return [rep(q)]
    if p == b:
        return [mig, rep(q)]
    if q == a:
        return [rep(p), mig]
    if q == b:
        return [mig, rep(p), later]
    if offline_source:  # fail over first, then as from (b, a)
        return [mig, rep(p), later, rep(q)]
    return [rep(p), mig, rep(q)]


def job_commands(state: ClusterState, r: Relocation) -> list[str]:
    """The gnt-instance commands of one relocation (`relocation_steps`), as hbal -C."""
    return [command(r.instance, step) for step in relocation_steps(state, r)]


def job_opcodes(state: ClusterState, r: Relocation) -> tuple[dict[str, Any], ...]:
    """The opcodes of one relocation, as `-X` submits them."""
    return tuple(opcode(r.instance, step) for step in relocation_steps(state, r))


def plan_job_sets(state: ClusterState, sets: Sequence[Sequence[Relocation]]) -> list[JobSet]:
    """The jobsets of `jobsets` as LUXI job sets (`-X`)."""
    return [moving([r.instance for r in js], [job_opcodes(state, r) for r in js]) for js in sets]


def jobsets(state: ClusterState, relocations: Sequence[Relocation]) -> list[list[Relocation]]:
    """Relocations in jobsets of disjoint nodes, each relocation placed once every one it may
    need room from has run (htools' splitJobs keeps jobs on disjoint nodes together). A
    relocation runs after those that free its target nodes, when that order exists."""
    pending = list(relocations)
    freed_by: dict[str, set[int]] = {}
    for i, r in enumerate(pending):
        for n in (r.old_primary, r.old_secondary):
            if n is not None and n not in (r.primary, r.secondary):
                freed_by.setdefault(n, set()).add(i)
    needs = {
        i: {j for n in (r.primary, r.secondary) if n for j in freed_by.get(n, ()) if j != i}
        for i, r in enumerate(pending)
    }
    done: set[int] = set()
    out: list[list[Relocation]] = []
    left = list(range(len(pending)))
    while left:
        busy: set[str] = set()
        batch: list[int] = []
        for i in left:
            if not needs[i] <= done:
                continue
            nodes = pending[i].nodes()
            if nodes & busy:
                continue
            busy |= nodes
            batch.append(i)
        if not batch:  # a cycle: run the rest one by one
            batch = [left[0]]
        out.append([pending[i] for i in batch])
        done.update(batch)
        left = [i for i in left if i not in done]
    return out


def format_commands(state: ClusterState, sets: Sequence[Sequence[Relocation]]) -> str:
    """htools' `formatCmds`: `echo jobset`, then per job `echo job`, `check` and its commands."""
    lines: list[str] = []
    for jsn, js in enumerate(sets, 1):
        for sn, r in enumerate(js, 1):
            if sn == 1:
                lines += ["", f"echo jobset {jsn}, {len(js)} jobs"]
            lines += [f"  echo job {jsn}/{sn}", "  check"]
            lines += [f"  gnt-instance {cmd}" for cmd in job_commands(state, r)]
    return "".join(line + "\n" for line in lines)


# --- resources of groups (the design's compression arithmetic) ------------------------------


@dataclass(frozen=True, slots=True)
class Resources:
    """Memory (MiB), disk (MiB) and vCPUs."""

    memory_mib: int
    disk_mib: int
    vcpus: int

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.memory_mib + other.memory_mib,
            self.disk_mib + other.disk_mib,
            self.vcpus + other.vcpus,
        )

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            self.memory_mib - other.memory_mib,
            self.disk_mib - other.disk_mib,
            self.vcpus - other.vcpus,
        )

    def fits_in(self, other: Resources) -> bool:
        return (
            self.memory_mib <= other.memory_mib
            and self.disk_mib <= other.disk_mib
            and self.vcpus <= other.vcpus
        )

    def key(self) -> tuple[int, int, int]:
        return (self.memory_mib, self.disk_mib, self.vcpus)


NO_RESOURCES = Resources(0, 0, 0)


def group_nodes(state: ClusterState, group: str, *, online: bool = False) -> list[str]:
    return [
        n for n, st in state.nodes.items() if st.group_uuid == group and not (online and st.offline)
    ]


def used_and_free(state: ClusterState, group: str) -> tuple[Resources, Resources]:
    """(used, free) resources of a group's online nodes: memory of its primaries and what is
    unallocated, disk used and free, vCPUs used and the vCPU ratio's headroom."""
    used = free = NO_RESOURCES
    for n in group_nodes(state, group, online=True):
        st = state.nodes[n]
        disk_used = max(int(st.total_disk_mib) - st.free_disk_mib, 0)
        used += Resources(st.instance_memory_mib, disk_used, st.used_vcpus - st.node_cpus)
        free += Resources(
            max(st.unallocated_memory_mib, 0), max(st.free_disk_mib, 0), st.available_vcpus
        )
    return used, free


def instances_in(state: ClusterState, group: str) -> list[str]:
    """Instances whose primary is in the group, in the cluster's order."""
    return [name for name, (p, _) in state.locations.items() if state.nodes[p].group_uuid == group]


def hosts(state: ClusterState, nodes: Iterable[str]) -> list[str]:
    """Instances with their primary or secondary on one of `nodes`, in the cluster's order."""
    wanted = set(nodes)
    return [
        name
        for name, (p, s) in state.locations.items()
        if p in wanted or (s is not None and s in wanted)
    ]


def count_by_group(state: ClusterState, relocations: Iterable[Relocation]) -> Counter:
    """(from group, to group) -> relocations (for summaries)."""
    return Counter(
        (state.nodes[r.old_primary].group_uuid, state.nodes[r.primary].group_uuid)
        for r in relocations
    )
