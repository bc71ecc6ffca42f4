"""One IAllocator request in, hail's answer out (Backend/IAlloc.hs processRequest and its
formatters; docs/hail.md, one section per request type).

`process` answers allocate, multi-allocate, relocate, node-evacuate, change-group and
allocate-secondary with htools' algorithms (`model.htools`), and returns hail's `info` and
`result` plus what the independent checker needs to re-check the answer: the placements of new
instances, or the moves of existing ones in the order hail makes them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from model.backends.iallocator import (
    AllocateRequest,
    AllocateSecondaryRequest,
    ChangeGroupRequest,
    IAllocatorInput,
    MultiAllocateRequest,
    NodeEvacuateRequest,
    RelocateRequest,
    new_instance,
)
from model.backends.iallocator_response import (
    evacuate_response,
    failover_opcode,
    migrate_opcode,
    multi_allocate_response,
    replace_disks_opcode,
    show_group,
)
from model.cluster import Instance, NodeGroup
from model.htools.allocate import (
    SAME_NAME_MARK,
    AllocOptions,
    alloc_list,
    allocate,
    internal_name,
    ranked,
)
from model.htools.allocate_secondary import try_allocate_secondary
from model.htools.evacuate import (
    CHANGE_ALL,
    CHANGE_PRIMARY,
    CHANGE_SECONDARY,
    EvacSolution,
    Step,
    relocate,
    try_change_group,
    try_node_evac,
)
from model.htools.solutions import AllocSolution
from model.resources import FailMode, InstanceDemand, MoveKind
from model.state import ClusterState, node_states

EVAC_MODES = {"primary-only": CHANGE_PRIMARY, "secondary-only": CHANGE_SECONDARY, "all": CHANGE_ALL}


@dataclass(frozen=True)
class NewPlacement:
    """A new instance and its nodes, for `check_allocation`."""

    instance: Instance | InstanceDemand
    primary: str
    secondary: str | None

    @property
    def name(self) -> str:
        """The name the request gave (internally marked if the cluster already had it)."""
        return self.instance.name.split(SAME_NAME_MARK, 1)[0]


@dataclass(frozen=True)
class InstanceMove:
    """An existing instance's nodes after hail's moves, for `check_moves`; `forced` when
    hail skipped the soft checks (the instance left an offline node, or soft errors are
    ignored)."""

    instance: str
    primary: str
    secondary: str | None
    forced: bool = False


@dataclass(frozen=True)
class Answer:
    """hail's answer to one request, and what the checker re-checks."""

    success: bool
    info: str
    result: Any
    kind: str
    placements: tuple[NewPlacement, ...] = ()
    moves: tuple[InstanceMove, ...] = ()
    requested_group: str | None = None  # allocate's group_name (hail may use it even if
    # unallocable)
    strict: bool = True
    solutions: tuple[AllocSolution, ...] = field(default=(), compare=False)
    state: ClusterState | None = field(default=None, compare=False)
    # an allocate's every group tried, ranked as hail ranks them (seed 001: "return the
    # entire list to Ganeti"; hail puts it only into its info text)
    groups: tuple[dict[str, Any], ...] = field(default=(), compare=False)


def _fail(kind: str, info: str) -> Answer:
    return Answer(False, info, [], kind)


def _info(sol: AllocSolution) -> str:
    """describeSolution: the log joined with ", "."""
    return ", ".join(sol.log)


def process(inp: IAllocatorInput, opts: AllocOptions, walked: EvacSolution | None = None) -> Answer:
    """IAlloc.processRequest for every request type (a node-evacuate from `walked`, the walk
    `try_node_evac` made with these options, when the caller has it already)."""
    req = inp.request
    state = node_states(inp.cluster)
    if isinstance(req, AllocateRequest):
        return _allocate(state, req, opts)
    if isinstance(req, MultiAllocateRequest):
        return _multi_allocate(state, req, opts)
    if isinstance(req, RelocateRequest):
        return _relocate(state, req, opts)
    if isinstance(req, NodeEvacuateRequest):
        sol = (
            walked
            if walked is not None
            else try_node_evac(
                state,
                EVAC_MODES[req.evac_mode],
                req.instances,
                ignore_soft_errors=opts.ignore_soft_errors,
            )
        )
        return evac_answer("node-evacuate", state, sol, opts.ignore_soft_errors)
    if isinstance(req, ChangeGroupRequest):
        return _change_group(state, req, opts)
    if isinstance(req, AllocateSecondaryRequest):
        return _allocate_secondary(state, req, opts)
    raise TypeError(f"unknown request {type(req).__name__}")


def _allocate(state: ClusterState, req: AllocateRequest, opts: AllocOptions) -> Answer:
    inst = new_instance(req)
    inst = replace(inst, name=internal_name(inst.name, state.demands))
    d = state.demand(inst)
    restrict = opts.restrict_to_nodes
    if restrict is None:
        restrict = req.restrict_to_nodes
    opts = replace(opts, restrict_to_nodes=restrict)
    tried: list = []
    sol = allocate(opts, state, d, req.required_nodes, req.group_name, req.nics, tried)
    groups = ranked_groups(tried)
    if isinstance(sol, str):
        return replace(_fail("allocate", sol), groups=groups)
    if sol.solution is None:
        return Answer(False, _info(sol), [], "allocate", solutions=(sol,), groups=groups)
    pl = sol.solution
    return Answer(
        True,
        _info(sol),
        list(pl.node_names),
        "allocate",
        placements=(NewPlacement(inst, pl.primary, pl.secondary),),
        requested_group=req.group_name,
        strict=not opts.ignore_soft_errors,
        solutions=(sol,),
        groups=groups,
    )


def ranked_groups(tried: Sequence[tuple[NodeGroup, AllocSolution | str]]) -> tuple[dict, ...]:
    """Every group an allocate tried: those with an answer first, ranked as hail ranks them
    (`rank` 1 is the one chosen), then the others in the order tried, each with its policy,
    score, nodes, successes and failure counts (or the error that ruled it out)."""
    order = {id(sol): k for k, (_, sol) in enumerate(ranked(tried), 1)}
    rows = []
    for group, sol in tried:
        row: dict[str, Any] = {"group": group.name, "uuid": group.uuid}
        row["policy"] = group.alloc_policy
        if isinstance(sol, str):
            row.update(rank=None, error=sol)
        else:
            pl = sol.solution
            row.update(
                rank=order.get(id(sol)),
                score=None if pl is None else pl.score,
                nodes=None if pl is None else list(pl.node_names),
                successes=sol.allocs,
                failures={str(m): sol.failures[m] for m in FailMode if sol.failures.get(m)},
            )
        rows.append(row)
    rows.sort(key=lambda r: (r["rank"] is None, r["rank"] or 0))
    return tuple(rows)


def _multi_allocate(state: ClusterState, req: MultiAllocateRequest, opts: AllocOptions) -> Answer:
    taken: dict[str, None] = dict.fromkeys(state.demands)
    records = []
    for r in req.instances:
        inst = new_instance(r)
        inst = replace(inst, name=internal_name(inst.name, taken))
        taken[inst.name] = None
        records.append((r, inst))
    wanted = [(state.demand(inst), r.required_nodes, r.nics, inst) for r, inst in records]
    got = alloc_list(opts, state, wanted, req.group_name)
    if isinstance(got, str):
        return _fail("multi-allocate", got)
    sols, final = got
    allocated, failed, placements = [], [], []
    for (r, inst), (name, sol) in zip(records, sols, strict=True):
        if sol.solution is None:
            failed.append((name, _info(sol)))
            continue
        pl = sol.solution
        allocated.append((r.name, list(pl.node_names)))
        placements.append(NewPlacement(inst, pl.primary, pl.secondary))
    info, result = multi_allocate_response(allocated, failed)
    return Answer(
        True,
        info,
        result,
        "multi-allocate",
        placements=tuple(placements),
        requested_group=req.group_name,
        strict=not opts.ignore_soft_errors,
        solutions=tuple(s for _, s in sols),
        state=final,
    )


def _relocate(state: ClusterState, req: RelocateRequest, opts: AllocOptions) -> Answer:
    got = relocate(
        state,
        req.name,
        req.required_nodes,
        req.relocate_from,
        ignore_soft_errors=opts.ignore_soft_errors,
    )
    if isinstance(got, str):
        return _fail("relocate", got)
    primary, secondary = state.locations[req.name]
    if secondary is not None and state.demands[req.name].disk_template == "drbd":
        new = (primary, got[0])
        left = secondary
    else:
        new = (got[0], None)
        left = primary
    forced = opts.ignore_soft_errors or state.nodes[left].offline
    return Answer(
        True,
        "success",
        list(got),
        "relocate",
        moves=(InstanceMove(req.name, new[0], new[1], forced),),
        strict=not opts.ignore_soft_errors,
    )


def _job(state: ClusterState, name: str, steps: Sequence[Step]) -> list[dict[str, Any]]:
    """iMoveToJob for each move of one instance: its opcodes."""
    forthcoming = state.demands[name].forthcoming
    ops: list[dict[str, Any]] = []
    for step in steps:
        if step.kind is MoveKind.REPLACE_SECONDARY:
            ops.append(replace_disks_opcode(name, step.target or ""))
        elif forthcoming:
            ops.append(failover_opcode(name, step.target))
        else:
            ops.append(migrate_opcode(name, step.target))
    return ops


def evac_answer(
    kind: str, state: ClusterState, sol: EvacSolution, ignore_soft_errors: bool
) -> Answer:
    """formatNodeEvac: moved (instance, group name, nodes), failed, jobs."""
    group_name = {g.uuid: g.name for g in state.cluster.groups}
    moved = [(i, group_name[g], list(nodes)) for i, g, nodes in sol.moved]
    jobs = [_job(state, name, steps) for name, steps in sol.jobs]
    info, result = evacuate_response(moved, list(sol.failed), jobs)
    moves = []
    for name, _, nodes in sol.moved:
        old_p, old_s = state.locations[name]
        left_offline = state.nodes[old_p].offline or (
            old_s is not None and state.nodes[old_s].offline
        )
        moves.append(
            InstanceMove(
                name,
                nodes[0],
                nodes[1] if len(nodes) > 1 else None,
                ignore_soft_errors or left_offline,
            )
        )
    return Answer(True, info, result, kind, moves=tuple(moves), state=sol.state)


def _no_groups(state: ClusterState):
    index = {g.uuid: i for i, g in enumerate(state.cluster.groups)}

    def message(allowed: Sequence[str] | None, groups: Sequence[Any]) -> str:
        shown = (
            "Nothing"
            if allowed is None
            else "Just [" + ",".join(str(index[u]) for u in allowed) + "]"
        )
        records = ",".join(show_group(g, index[g.uuid]) for g in groups)
        return f"no groups for evacuation: allowed groups was {shown}, all groups: [{records}]"

    return message


def _change_group(state: ClusterState, req: ChangeGroupRequest, opts: AllocOptions) -> Answer:
    nics: Mapping[str, Sequence[Mapping]] = {
        i.name: i.nics for i in state.cluster.instances if i.name in set(req.instances)
    }
    sol = try_change_group(
        opts, state, req.target_group_uuids, req.instances, nics, _no_groups(state)
    )
    return evac_answer("change-group", state, sol, False)


def _allocate_secondary(
    state: ClusterState, req: AllocateSecondaryRequest, opts: AllocOptions
) -> Answer:
    sol = try_allocate_secondary(opts, state, req.name)
    if isinstance(sol, str):
        return _fail("allocate-secondary", sol)
    if sol.solution is None or sol.solution.secondary is None:
        return Answer(False, _info(sol), [], "allocate-secondary", solutions=(sol,))
    pl = sol.solution
    return Answer(
        True,
        _info(sol),
        pl.secondary,
        "allocate-secondary",
        placements=(NewPlacement(pl.demand, pl.primary, pl.secondary),),
        # the instance stays in its group, whatever that group's allocation policy
        requested_group=state.nodes[pl.primary].group_uuid,
        strict=not opts.ignore_soft_errors,
        solutions=(sol,),
    )
