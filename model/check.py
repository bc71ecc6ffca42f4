"""The independent checker: does a proposed answer respect every htools constraint?

It recomputes everything from the input cluster with `model.resources` (never from solver
variables), lists each violated constraint, and computes the objectives the formulations
claim so that a claimed optimum can be compared with what the answer really achieves.

Entry points:
* `check_allocation(cluster, placements)`: new instances on chosen nodes (hail allocate /
  multi-allocate, dedicated or not), objectives include the dedicated lost-allocation
  vectors (docs/htools-facts.md §3);
* `check_moves(cluster, moves, powered_off=..., powered_on=..., probe=...)`: a rebalancing or
  squeeze plan; `check_squeeze` is its hsqueeze-shaped wrapper;
* `check_space(problem, answer, n1_plans)`: hspace's new instances of one spec (model/space.py),
  replayed one by one, with global N+1 by evacuation plans replayed on the final state.

Placements and moves are applied in order; moved instances first leave their old nodes, so
the check is on the final configuration, with htools' strict `addPri` / `addSec` semantics.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import zip_longest
from typing import Any

from model.balance import BalanceProblem, Step, allowed_step
from model.cluster import Cluster, Instance, ISpec
from model.dedicated import allocation_vector
from model.errors import CheckFailedError
from model.n1 import EvacuationPlan, replay
from model.policy import minmax_shortfall
from model.resources import (
    FailMode,
    InstanceDemand,
    Shortfall,
    check_migration,
    primary_shortfalls,
    probe_demand,
)
from model.score import cluster_score
from model.space import SpaceAnswer, SpaceProblem, new_instance, non_redundant_of, space_problem
from model.space_moves import MoveOptions, replay_moves
from model.state import (
    PRIMARY,
    SECONDARY,
    ClusterState,
    StateEdit,
    node_states,
    placement_shortfalls,
)
from model.validate import refuse_ambiguous


@dataclass(frozen=True, slots=True)
class Violation:
    """One violated constraint.

    `kind` is one of: memory, n1, disk, disk_reserve, spindles, spindle_ratio, vcpu,
    exclusion_tags, template, ipolicy, unknown_node, unknown_instance, duplicate_instance,
    offline_node, drained_node, not_vm_capable, same_node, secondary, group, not_movable,
    master_offline, not_online, not_offline, migration, unallocable_group, primary_offline,
    secondary_offline, probe.
    """

    kind: str
    message: str
    node: str | None = None
    instance: str | None = None
    forthcoming: bool = False  # found on the *_forth counters

    def __str__(self) -> str:
        where = ", ".join(
            x for x in (f"node {self.node}" if self.node else "", self.instance or "") if x
        )
        return f"{self.kind}: {self.message}" + (f" ({where})" if where else "")


@dataclass(frozen=True)
class CheckReport:
    violations: tuple[Violation, ...]
    objectives: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset(v.kind for v in self.violations)

    def text(self) -> str:
        if self.ok:
            return "no violations"
        return "\n".join(str(v) for v in self.violations)

    def raise_if_failed(self) -> None:
        """Raise CheckFailedError listing the violations (an answer must never be printed)."""
        if not self.ok:
            raise CheckFailedError(
                "independent check failed: " + "; ".join(map(str, self.violations))
            )


@dataclass(frozen=True, slots=True)
class Placement:
    """A new instance and the nodes chosen for it (secondary only for drbd)."""

    instance: Instance | InstanceDemand
    primary: str
    secondary: str | None = None


@dataclass(frozen=True, slots=True)
class Move:
    """An existing instance's new nodes.

    For a drbd instance `secondary=None` keeps the current secondary, except when the new
    primary is the current secondary: then the old primary becomes the secondary (failover).
    """

    instance: str
    primary: str
    secondary: str | None = None


def _shortfall_violation(s: Shortfall, node: str, instance: str, role: str) -> Violation:
    return Violation(s.kind, f"as {role}: {s.message} ({s.mode})", node, instance, s.forthcoming)


def _target_violations(
    states: ClusterState, name: str | None, instance: str, role: str
) -> list[Violation]:
    """Node existence and usability as a target."""
    if name is None:
        return []
    if name not in states.nodes:
        return [Violation("unknown_node", f"{role} node {name!r} does not exist", name, instance)]
    st = states.nodes[name]
    out = []
    if st.offline:
        out.append(Violation("offline_node", f"{role} node is offline", name, instance))
    if st.drained:
        out.append(Violation("drained_node", f"{role} node is drained", name, instance))
    if not states.cluster.node(name).vm_capable:
        out.append(Violation("not_vm_capable", f"{role} node is not vm_capable", name, instance))
    return out


def _pair_violations(
    states: ClusterState, d: InstanceDemand, primary: str, secondary: str | None
) -> list[Violation]:
    out: list[Violation] = []
    if d.has_secondary and secondary is None:
        out.append(Violation("secondary", f"{d.disk_template} needs a secondary", None, d.name))
    if not d.has_secondary and secondary is not None:
        out.append(Violation("secondary", f"{d.disk_template} has no secondary", secondary, d.name))
    if secondary is not None and secondary == primary:
        out.append(Violation("same_node", "primary equals secondary", primary, d.name))
    if (
        secondary is not None
        and primary in states.nodes
        and secondary in states.nodes
        and states.nodes[primary].group_uuid != states.nodes[secondary].group_uuid
    ):
        out.append(
            Violation("group", "primary and secondary are in different groups", secondary, d.name)
        )
    return out


def _policy_violations(states: ClusterState, d: InstanceDemand, primary: str) -> list[Violation]:
    """The primary's group ipolicy: specs within a min/max pair, template allowed."""
    if primary not in states.nodes:
        return []
    ipolicy = states.ipolicy_of(primary)
    out: list[Violation] = []
    fail = minmax_shortfall(d, ipolicy, states.nodes[primary].exclusive_storage)
    if fail is not None:
        out.append(
            Violation(
                "ipolicy", f"instance spec outside every min/max pair ({fail})", primary, d.name
            )
        )
    if d.disk_template not in ipolicy.disk_templates:
        out.append(
            Violation(
                "template",
                f"template {d.disk_template} not allowed by the group policy",
                primary,
                d.name,
            )
        )
    return out


_IMPLIED_BY = {"disk_reserve": "disk", "n1": "memory"}


def _distinct(shortfalls: Iterable[Shortfall]) -> list[Shortfall]:
    """Drop checks implied by an earlier one (a reserve under a negative free disk, the
    N+1 reserve under negative memory, a *_forth check repeating a real one)."""
    out: list[Shortfall] = []
    kinds: set[str] = set()
    for s in shortfalls:
        if s.kind in kinds or _IMPLIED_BY.get(s.kind) in kinds:
            continue
        kinds.add(s.kind)
        out.append(s)
    return out


def _place(
    state: ClusterState | StateEdit,
    d: InstanceDemand,
    primary: str,
    secondary: str | None,
    strict: bool,
    unchecked: frozenset[str] = frozenset(),
    disk_unchecked: frozenset[str] = frozenset(),
    hard_only: frozenset[str] = frozenset(),
) -> tuple[ClusterState | StateEdit, list[Violation]]:
    """Add an instance on its nodes, listing every failed check; apply it regardless (a
    StateEdit is changed in place and returned).
    Roles in `unchecked` (a node keeping its role in a move) are not checked again, roles in
    `disk_unchecked` not for disk (htools' failover off an offline primary), roles in
    `hard_only` for the hard checks alone (what htools adds with force: a primary added
    back, a node taking an instance off an offline node)."""
    if primary not in state.nodes or (secondary is not None and secondary not in state.nodes):
        return state, []
    if secondary == primary or not d.has_secondary:
        secondary = None
    found = placement_shortfalls(state.nodes, d, primary, secondary, strict=strict)
    if hard_only:
        hard = placement_shortfalls(state.nodes, d, primary, secondary, strict=False)
        found = (
            *(f for f in hard if f[0] in hard_only),
            *(f for f in found if f[0] not in hard_only),
        )
    out: list[Violation] = []
    for role in (PRIMARY, SECONDARY):
        if role in unchecked:
            continue
        shortfalls = [s for r, _, s in found if r == role and s.kind != "template"]
        if role in disk_unchecked:
            shortfalls = [s for s in shortfalls if s.kind not in ("disk", "disk_reserve")]
        node = primary if role == PRIMARY else secondary
        out += [_shortfall_violation(x, node, d.name, role) for x in _distinct(shortfalls)]
    return state.placed(d, primary, secondary), out


def _sum_vectors(vectors: Iterable[Sequence[int]]) -> tuple[int, ...]:
    total: tuple[int, ...] = ()
    for v in vectors:
        total = tuple(a + b for a, b in zip_longest(total, v, fillvalue=0))
    return total


def _vector(state: ClusterState, name: str) -> tuple[int, ...]:
    return allocation_vector(state.nodes[name], state.ipolicy_of(name))


def check_allocation(
    cluster: Cluster | ClusterState,
    placements: Sequence[Placement | tuple],
    *,
    strict: bool = True,
    group: str | None = None,
    requested_group: str | None = None,
    hosting: Iterable[str] = (),
) -> CheckReport:
    """Check new instances placed on chosen nodes, in order (hail allocate/multi-allocate).

    `placements` holds `Placement`s or `(instance, primary, secondary)` tuples. `group`
    (name or uuid) restricts the score to that group, as hail's score with `group_name`.
    An unallocable group is allowed when it is `requested_group` (name or uuid): the policy
    keeps hail from *choosing* a group, a request naming it is served there (docs/hail.md).
    Nodes in `hosting` already host the instance (allocate-secondary's primary): whether
    they are online is not this placement's choice, so only their resources are checked.

    Objectives: `score` (after) and `score_before`; per placement, hail's dedicated metric
    `placement_metrics` = [(lost vector, remaining f_dsk of its nodes)] taken in sequence;
    `lost_allocations` per node that received instances and `lost_allocations_total`;
    `allocation_vector_before` / `_after` summed over the online nodes of the groups used;
    `remaining_disk_mib` summed over the nodes that received instances.
    """
    states = cluster if isinstance(cluster, ClusterState) else node_states(cluster)
    state = states
    violations: list[Violation] = []
    seen: set[str] = set(states.demands)
    touched: list[str] = []
    groups: set[str] = set()
    before: dict[str, tuple[int, ...]] = {}
    per_placement: list[tuple[tuple[int, ...], int]] = []
    for item in placements:
        pl = item if isinstance(item, Placement) else Placement(*item)
        d = states.demand(pl.instance)
        if d.name in seen:
            violations.append(
                Violation("duplicate_instance", "instance name already in use", None, d.name)
            )
        seen.add(d.name)
        kept = set(hosting)
        if pl.primary not in kept:
            violations += _target_violations(states, pl.primary, d.name, "primary")
        if pl.secondary not in kept:
            violations += _target_violations(states, pl.secondary, d.name, "secondary")
        violations += _pair_violations(states, d, pl.primary, pl.secondary)
        violations += _policy_violations(states, d, pl.primary)
        if pl.primary in state.nodes:
            owner = states.cluster.group(state.nodes[pl.primary].group_uuid)
            named = requested_group is not None and requested_group in (owner.name, owner.uuid)
            if owner.alloc_policy == "unallocable" and not named:
                violations.append(
                    Violation(
                        "unallocable_group",
                        f"group {owner.name} is unallocable",
                        pl.primary,
                        d.name,
                    )
                )
        used = [n for n in (pl.primary, pl.secondary) if n is not None and n in state.nodes]
        used = list(dict.fromkeys(used))
        step_before = {n: _vector(state, n) for n in used}
        for n in used:
            before.setdefault(n, step_before[n])
            if n not in touched:
                touched.append(n)
            groups.add(state.nodes[n].group_uuid)
        state, found = _place(state, d, pl.primary, pl.secondary, strict)
        violations += found
        lost = _sum_vectors(
            tuple(a - b for a, b in zip(step_before[n], _vector(state, n), strict=True))
            for n in used
        )
        per_placement.append((lost, sum(state.nodes[n].free_disk_mib for n in used)))

    after = {n: _vector(state, n) for n in touched}
    lost_per_node = {
        n: tuple(a - b for a, b in zip(before[n], after[n], strict=True)) for n in touched
    }
    in_groups = [n for n, st in state.nodes.items() if st.group_uuid in groups and not st.offline]
    objectives: dict[str, Any] = {
        "score_before": cluster_score(states, group),
        "score": cluster_score(state, group),
        "placement_metrics": per_placement,
        "lost_allocations": lost_per_node,
        "lost_allocations_total": _sum_vectors(lost_per_node.values()),
        "allocation_vector_before": _sum_vectors(_vector(states, n) for n in in_groups),
        "allocation_vector_after": _sum_vectors(_vector(state, n) for n in in_groups),
        "remaining_disk_mib": sum(state.nodes[n].free_disk_mib for n in touched),
        "remaining_disk_per_node_mib": {n: state.nodes[n].free_disk_mib for n in touched},
    }
    return CheckReport(tuple(violations), objectives)


def _resolve_move(inst: Instance, mv: Move) -> tuple[str, str | None]:
    """The instance's (primary, secondary) after the move (see `Move`)."""
    if not inst.mirrored:
        return mv.primary, mv.secondary
    if mv.secondary is not None:
        return mv.primary, mv.secondary
    if mv.primary == inst.secondary:
        return mv.primary, inst.primary
    return mv.primary, inst.secondary


def _offline_failover(
    evacuation: bool,
    inst: Instance,
    primary: str,
    secondary: str | None,
    nodes: Mapping[str, Any],
) -> bool:
    """An evacuation's drbd failover off an offline primary (which becomes the secondary)."""
    return (
        evacuation
        and inst.mirrored
        and (primary, secondary) == (inst.secondary, inst.primary)
        and inst.primary in nodes
        and nodes[inst.primary].offline
    )


def check_moves(
    cluster: Cluster | ClusterState,
    moves: Sequence[Move | tuple],
    *,
    powered_off: Iterable[str] = (),
    powered_on: Iterable[str] = (),
    probe: InstanceDemand | None = None,
    probe_offline_nodes: bool = False,
    strict: bool = True,
    evacuation: bool = False,
    copy_moves: bool = False,
) -> CheckReport:
    """Check a plan of instance moves with nodes powered off or on (hbal / hsqueeze).

    `evacuation`: the moves of hail's relocate, node-evacuate or change-group (Evacuate.hs):
    every instance with a mirror may move (diskless too, by migration to any node), and a node
    that keeps its role (a drbd primary whose secondary is replaced) is not checked again, as
    htools re-adds it without checks; instances not moved may stay on offline nodes.
    `copy_moves`: `squeeze --move all` (docs/squeeze.md): an instance with neither a mirror nor
    local storage (diskless, file) may also move, by `gnt-instance move` (its disks copied).

    Powered-off nodes become offline before the moves, powered-on ones online. Afterwards
    no instance may keep its primary (or secondary) on an offline node, and with `probe`
    every online node must still host the probe instance with the strict checks
    (`probe_offline_nodes`: offline nodes too, hsqueeze's expand-mode capacity test).

    Objectives: `moves` (instances whose nodes changed), `nodes_powered_off`,
    `nodes_powered_on`, `score_before`, `score`, `max_memory_utilisation` (the largest
    1 − unallocated/total memory over online nodes) and `online_nodes`.
    """
    states = cluster if isinstance(cluster, ClusterState) else node_states(cluster)
    c = states.cluster
    refuse_ambiguous(
        c.ambiguous_instances,
        ((m if isinstance(m, Move) else Move(*m)).instance for m in moves),
        "a plan moving it",
    )
    nodes = states.nodes
    violations: list[Violation] = []
    off = [n for n in dict.fromkeys(powered_off)]
    on = [n for n in dict.fromkeys(powered_on)]
    for name in off:
        if name not in nodes:
            violations.append(Violation("unknown_node", "cannot power off: no such node", name))
            continue
        if nodes[name].master:
            violations.append(Violation("master_offline", "the master node must stay on", name))
        if nodes[name].offline:
            violations.append(Violation("not_online", "node is already offline", name))
    for name in on:
        if name not in nodes:
            violations.append(Violation("unknown_node", "cannot power on: no such node", name))
            continue
        if not nodes[name].offline:
            violations.append(Violation("not_offline", "node is already online", name))
        if name in off:
            violations.append(Violation("offline_node", "node both powered on and off", name))
    powered = states.powered(
        off=[n for n in off if n in nodes and n not in on], on=[n for n in on if n in nodes]
    )
    nodes = powered.nodes

    resolved: list[tuple[Instance, InstanceDemand, str, str | None]] = []
    forced: dict[str, frozenset[str]] = {}
    moved: set[str] = set()
    for item in moves:
        mv = item if isinstance(item, Move) else Move(*item)
        inst = c.instance_index.get(mv.instance)
        if inst is None:
            violations.append(Violation("unknown_instance", "no such instance", None, mv.instance))
            continue
        if mv.instance in moved:
            violations.append(
                Violation("duplicate_instance", "instance moved twice", None, mv.instance)
            )
            continue
        moved.add(mv.instance)
        primary, secondary = _resolve_move(inst, mv)
        if (primary, secondary) == (inst.primary, inst.secondary):
            continue
        d = states.demands[inst.name]
        movable = (
            inst.movable
            or (evacuation and inst.disk_template == "diskless")
            or (copy_moves and not inst.mirrored and not inst.uses_local_storage)
        )
        if not movable:
            violations.append(
                Violation(
                    "not_movable", f"{inst.disk_template} instances cannot move", None, d.name
                )
            )
        # an evacuation's failover makes the secondary the primary: hail (like Ganeti's
        # failover) does not ask whether that node is online
        keeps_primary = evacuation and primary in (inst.primary, inst.secondary)
        keeps_secondary = evacuation and secondary is not None and secondary == inst.secondary
        # a failover off an offline primary leaves it the secondary, disks not checked
        keeps_secondary |= _offline_failover(evacuation, inst, primary, secondary, nodes)
        if not keeps_primary:
            violations += _target_violations(powered, primary, d.name, "primary")
        if not keeps_secondary:
            violations += _target_violations(powered, secondary, d.name, "secondary")
        violations += _pair_violations(powered, d, primary, secondary)
        if primary != inst.primary and primary in nodes:
            if check_migration(nodes[inst.primary], nodes[primary]) is not None:
                violations.append(
                    Violation(
                        "migration",
                        f"migration tags of {inst.primary} not accepted by {primary}",
                        primary,
                        d.name,
                    )
                )
        resolved.append((inst, d, primary, secondary))
        # htools moves an instance off an offline node with force: the new node's soft checks
        # are skipped (applyMoveEx: the primary's when the old primary is offline, a new
        # secondary's when the old secondary is). A drbd pair moved whole (both nodes new) is
        # forced only on its way: its final primary and secondary come by a failover and a
        # replacement off online nodes, fully checked (Cluster/Evacuate.hs evacDrbdAllInner)
        whole_pair = inst.mirrored and primary != inst.primary and secondary != inst.secondary
        if evacuation and not whole_pair:
            forced[inst.name] = frozenset(
                role
                for role, old in ((PRIMARY, inst.primary), (SECONDARY, inst.secondary))
                if old is not None and old in nodes and nodes[old].offline
            )

    # Everything moving leaves first, then arrives: the check is on the final layout (one
    # working copy for all the changes: plans move tens of thousands of instances)
    edit = StateEdit(powered)
    for inst, _, _, _ in resolved:
        edit.remove(inst.name)
    for inst, d, primary, secondary in resolved:
        kept = frozenset()
        no_disk = frozenset()
        if _offline_failover(evacuation, inst, primary, secondary, nodes):
            no_disk = frozenset({SECONDARY})
        hard = frozenset()
        if evacuation:
            kept = frozenset(
                role
                for role, old, new in (
                    (PRIMARY, inst.primary, primary),
                    (SECONDARY, inst.secondary, secondary),
                )
                if old is not None and old == new
            )
            # a secondary replaced: htools adds the primary back with force (its hard checks
            # still apply: an offline primary short of memory fails every new secondary)
            if PRIMARY in kept and secondary != inst.secondary:
                kept, hard = kept - {PRIMARY}, frozenset({PRIMARY})
            hard |= forced.get(inst.name, frozenset()) - kept
        _, found = _place(edit, d, primary, secondary, strict, kept, no_disk, hard)
        violations += found
    state = edit.state()
    nodes = state.nodes

    final_of = {inst.name: (p, s) for inst, _, p, s in resolved}
    # an evacuation moves the requested instances only; others may stay on offline nodes
    for inst in () if evacuation else c.instances:
        p, s = final_of.get(inst.name, (inst.primary, inst.secondary))
        if p in nodes and nodes[p].offline:
            violations.append(
                Violation("primary_offline", "primary stays on an offline node", p, inst.name)
            )
        if s is not None and s in nodes and nodes[s].offline and inst.mirrored:
            violations.append(
                Violation("secondary_offline", "secondary stays on an offline node", s, inst.name)
            )
    if probe is not None:
        for name, st in nodes.items():
            if st.offline and not probe_offline_nodes:
                continue
            fails = primary_shortfalls(st, probe, strict=True)
            if fails:
                violations.append(
                    Violation(
                        "probe",
                        f"cannot host the probe instance: {fails[0].message} ({fails[0].mode})",
                        name,
                    )
                )

    online = [st for st in nodes.values() if not st.offline]
    objectives: dict[str, Any] = {
        "moves": len(resolved),
        "nodes_powered_off": len(off),
        "nodes_powered_on": len(on),
        "score_before": cluster_score(states),
        "score": cluster_score(state),
        "max_memory_utilisation": max((1.0 - st.p_mem for st in online), default=0.0),
        "online_nodes": len(online),
    }
    return CheckReport(tuple(violations), objectives)


def check_squeeze(
    cluster: Cluster | ClusterState,
    powered_off_nodes: Iterable[str],
    moves: Sequence[Move | tuple],
    probe_spec: ISpec | InstanceDemand,
    *,
    factor: float = 1.0,
    powered_on_nodes: Iterable[str] = (),
    probe_offline_nodes: bool = False,
    strict: bool = True,
    copy_moves: bool = False,
) -> CheckReport:
    """An hsqueeze plan: power nodes off (shrink) or on (expand), move instances, and keep
    every online node able to host F × the std spec (an ISpec is scaled by `factor`;
    `copy_moves`: `--move all`, check_moves)."""
    probe = (
        probe_spec if isinstance(probe_spec, InstanceDemand) else probe_demand(probe_spec, factor)
    )
    report = check_moves(
        cluster,
        moves,
        powered_off=powered_off_nodes,
        powered_on=powered_on_nodes,
        probe=probe,
        probe_offline_nodes=probe_offline_nodes,
        strict=strict,
        copy_moves=copy_moves,
    )
    objectives = dict(report.objectives)
    objectives["nodes_freed"] = objectives["nodes_powered_off"]
    return CheckReport(report.violations, objectives)


# --- hspace's standard allocation (model/space.py) --------------------------------------------


def check_space(
    problem: SpaceProblem,
    answer: SpaceAnswer,
    n1_plans: Mapping[str, EvacuationPlan] | None = None,
) -> CheckReport:
    """Check new instances of one spec on top of a cluster, as hspace would add them.

    From the input alone: every instance is new and named once; its primary is an online node
    of a group hspace allocates in (not unallocable, not closed by the N+1 gate), passing the
    group's policy; a drbd secondary is another online node of the same group; each instance
    is added in order with htools' strict adds (`Node.addPriEx` / `addSecExEx`), every failed
    check listed; at most `-l` instances, none when hspace stops for N+1. Under global N+1
    (templates other than drbd with capacity checks), every node of each group that received
    instances must have an evacuation plan that replays on the final state
    (`model.n1.replay`). Objectives: `instances`, `by_group` and `final_state` (the cluster
    the replay ends in).
    """
    state = problem.state
    opts = problem.options
    cluster = state.cluster
    closed = {name for name, _ in problem.unallocatable}
    violations: list[Violation] = []
    if problem.stopped and answer.placements:
        violations.append(
            Violation("n1", "hspace allocates nothing while a node fails N+1 already")
        )
    if opts.limit is not None and answer.count > opts.limit:
        violations.append(Violation("limit", f"{answer.count} instances exceed -l {opts.limit}"))
    seen = set(state.demands)
    edit = StateEdit(state)
    touched: set[str] = set()
    # every new instance asks the same of its nodes: its demand read once, renamed
    shape = state.demand(new_instance(answer.spec, opts.disk_template, opts.spindle_use))
    for pl in answer.placements:
        inst = new_instance(answer.spec, opts.disk_template, opts.spindle_use, pl.name)
        d = replace(shape, name=pl.name)
        if pl.name in seen:
            violations.append(Violation("duplicate_instance", "name already in use", None, pl.name))
        seen.add(pl.name)
        roles = [("primary", pl.primary)]
        if d.has_secondary:
            if pl.secondary is None or pl.secondary == pl.primary:
                violations.append(
                    Violation("secondary", "drbd needs another node", pl.primary, pl.name)
                )
                continue
            roles.append(("secondary", pl.secondary))
        elif pl.secondary is not None:
            violations.append(
                Violation("secondary", f"{d.disk_template} has none", pl.secondary, pl.name)
            )
        bad = False
        for role, node in roles:
            if node not in state.nodes:
                violations.append(Violation("unknown_node", f"no {role} node", node, pl.name))
                bad = True
                continue
            st = edit.nodes[node]
            group = cluster.group(st.group_uuid)
            if st.offline:
                violations.append(Violation("offline_node", f"{role} is offline", node, pl.name))
            if group.name in closed:
                violations.append(
                    Violation("unallocable_group", f"group {group.name} is closed", node, pl.name)
                )
        if bad:
            continue
        if len(roles) == 2:
            gp = edit.nodes[pl.primary].group_uuid
            if edit.nodes[pl.secondary].group_uuid != gp:  # type: ignore[index]
                violations.append(
                    Violation("group", "secondary in another group", pl.secondary, pl.name)
                )
        violations += _policy_violations(state, d, pl.primary)
        touched.add(edit.nodes[pl.primary].group_uuid)
        # htools' strict adds; only a refused one is listed check by check
        if edit.place(d, pl.primary, pl.secondary) is not None:
            _, found = _place(edit, d, pl.primary, pl.secondary, True)
            violations += found
        # the record, so that the final state's snapshot (-S) lists the instance
        edit.added[pl.name] = replace(inst, primary=pl.primary, secondary=pl.secondary)
    final = edit.state()
    if problem.global_n1:
        plans = n1_plans or {}
        for g in sorted(touched):
            for node in problem.n1_scope.get(g, ()):
                plan = plans.get(node)
                why = "no evacuation plan" if plan is None else replay(final, plan)
                if why is not None:
                    violations.append(
                        Violation("global_n1", f"its failure is not absorbed: {why}", node)
                    )
    objectives = {
        "instances": answer.count,
        "by_group": answer.by_group(state),
        "final_state": final,
    }
    return CheckReport(tuple(violations), objectives)


def check_space_moves(
    state: ClusterState,
    steps: Sequence[Step],
    moves: MoveOptions,
    problem: SpaceProblem,
    answer: SpaceAnswer,
    n1_plans: Mapping[str, EvacuationPlan] | None = None,
) -> CheckReport:
    """Check `--move-existing`: hbal's steps replayed one by one on the cluster (`state`,
    hspace's node status applied), each one hbal offers there and passing htools' per-step
    checks (`model.space_moves.replay_moves`), at most `moves.max_moves`; then hspace's
    question posed again on the moved cluster from the spec and options alone (the
    `--independent-groups` verdicts as `problem` carries them) and the new instances checked
    on it as `check_space` checks them. Objectives: check_space's, and `moves`."""
    moved = replay_moves(state, steps, moves)
    if isinstance(moved, str):
        return CheckReport((Violation("move", moved),), {"moves": len(steps)})
    posed = space_problem(
        moved, problem.spec, problem.options, non_redundant_of(problem), problem.first_index
    )
    report = check_space(posed, answer, n1_plans)
    return CheckReport(report.violations, {**report.objectives, "moves": len(steps)})


# --- hbal's steps (model/balance.py) -----------------------------------------------------------


def check_balance(problem: BalanceProblem, steps: Sequence[Step]) -> CheckReport:
    """Replay ordered hbal steps one by one on the group as loaded: each instance must be one
    hbal may move (`model.balance.movable`), each step one of the moves hbal offers it where
    it is then (model/htools/hbal.py `instance_moves`, through `model.balance.allowed_step`:
    onto an online node of the group), and each must pass htools' per-step checks on the
    state it meets (`ClusterState.move`, applyMoveEx: add/remove rules, soft checks unless
    forced). At most `problem.max_steps` steps. The score is recomputed from the final state
    (`model.score` over the group), never taken from a formulation.

    Objectives: `steps`, `score_before`, `score`, and `scores` (the score after each step).
    """
    state = problem.state
    group = problem.group_uuid
    violations: list[Violation] = []
    if len(steps) > problem.max_steps:
        violations.append(
            Violation("steps", f"{len(steps)} steps, more than the {problem.max_steps} allowed")
        )
    movable = set(problem.movable)
    scores: list[float] = []
    force = problem.rules.ignore_soft_errors
    for i, step in enumerate(steps, 1):
        name = step.instance
        if name not in state.locations:
            violations.append(Violation("unknown_instance", f"step {i}", instance=name))
            break
        if name not in movable:
            violations.append(Violation("not_movable", f"step {i}: hbal does not move it",
                                        instance=name))  # fmt: skip
            break
        why = allowed_step(problem, state, step)
        if why is not None:
            violations.append(Violation("move", f"step {i} ({step.code}): {why}", instance=name))
            break
        after = state.move(name, step.kind, step.target, force=force)
        if isinstance(after, FailMode):
            violations.append(Violation(
                str(after).lower(), f"step {i} ({step.code}) fails htools' check {after}",
                node=step.target, instance=name,
            ))  # fmt: skip
            break
        state = after
        scores.append(cluster_score(state, group))
    objectives = {
        "steps": len(steps),
        "score_before": cluster_score(problem.state, group),
        "score": cluster_score(state, group),
        "scores": tuple(scores),
    }
    return CheckReport(tuple(violations), objectives)
