"""The iallocator: every request on every group, each answer checked (docs/hail.md).

`answer` is what `exalloc hail`, `exalloc-hail`, the hail server and the allocation service all
call. Dedicated allocate and multi-allocate go to the exact dedicated allocator
(solvers/strategies/dedicated.py); everything else to htools' own algorithms (model/htools/),
with the global N+1 check `capacity_checks` names: `exact` (the default, an exact packing per
node, solvers/strategies/n1.py), `greedy` (htools' GlobalN1, decision by decision) or `none`.
The independent checker (model/check.py) judges every answer before it is returned.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from model.backends.iallocator import (
    AllocateRequest,
    ChangeGroupRequest,
    IAllocatorInput,
    MultiAllocateRequest,
    NodeEvacuateRequest,
)
from model.backends.iallocator_response import response_json
from model.htools.allocate import OUT_OF_TIME, AllocOptions
from model.htools.answer import HailAnswer, SolverRun, solver_note
from model.htools.capacity import CapacityCheck, NoCapacityCheck
from model.htools.dedicated import is_dedicated
from model.htools.evacuate import EvacSolution
from model.htools.global_n1 import GreedyGlobalN1
from model.htools.requests import Answer, process
from model.htools.verify import check_answer
from solvers.options import DEFAULT_OPTIONS, SolverOptions

CAPACITY_CHECKS = ("exact", "greedy", "none")


@dataclass(frozen=True)
class IAllocatorOptions:
    solver: SolverOptions = DEFAULT_OPTIONS
    capacity_checks: str = "exact"  # exact | greedy | none
    ignore_soft_errors: bool = False
    restrict_to_nodes: tuple[str, ...] | None = None  # hail's --restrict-allocation-to
    #: `--greedy`: hail's own answer to every request type (`greedy_answer`)
    greedy: bool = False

    @property
    def joint(self) -> bool:
        """Batches placed or moved jointly (docs/placement.md) in exalloc's own mode; `greedy`
        and `none` give hail's answers with its N+1 check or without, and
        --ignore-soft-errors hail's relaxed walk."""
        return self.capacity_checks == "exact" and not self.ignore_soft_errors


def capacity_check(name: str, options: SolverOptions = DEFAULT_OPTIONS) -> CapacityCheck:
    """The global N+1 check a `--capacity-checks` value names."""
    if name == "exact":
        from solvers.strategies.n1 import ExactGlobalN1

        return ExactGlobalN1(options=options)
    if name == "greedy":
        return GreedyGlobalN1()
    if name == "none":
        return NoCapacityCheck()
    raise ValueError(f"unknown capacity check {name!r} (exact, greedy or none)")


def answer(inp: IAllocatorInput, opts: IAllocatorOptions = IAllocatorOptions()) -> HailAnswer:
    """The exalloc answer to a parsed request (checked before it is returned)."""
    if opts.greedy:
        return greedy_answer(inp, opts)
    req = inp.request
    cluster = inp.cluster
    if isinstance(req, AllocateRequest) and is_dedicated(cluster, req.group_name):
        if opts.restrict_to_nodes is not None:  # hail: the option wins over the request's
            req = replace(req, restrict_to_nodes=opts.restrict_to_nodes)
        # the exact allocators import Pyomo (0.3 s and more): only a request that needs a
        # model pays for it (issue 40, item 12; most of Ganeti's shell-test requests need none)
        from solvers.strategies.dedicated import allocate

        return allocate(cluster, req, opts.solver)
    if isinstance(req, MultiAllocateRequest):
        if is_dedicated(cluster, _one_group(req)):
            from solvers.strategies.dedicated import multi_allocate

            return multi_allocate(cluster, req, opts.solver)
        return _normal_multi_allocate(inp, opts)
    if isinstance(req, NodeEvacuateRequest) and opts.joint:
        # hail's node-evacuate checks no N+1: only the moves' strict adds bind
        from solvers.strategies.joint_evacuate import joint_node_evacuate

        return joint_node_evacuate(
            inp, lambda walked: one_by_one_answer(inp, opts, walked), opts.solver
        )
    if isinstance(req, ChangeGroupRequest) and opts.joint:
        from solvers.strategies.joint_change_group import joint_change_group

        started = time.perf_counter()
        ans, line, objectives = answer_normal(inp, opts)
        hail = _as_hail(ans, line, objectives)
        return joint_change_group(inp, hail, ans, _rest(opts.solver, started))
    return one_by_one_answer(inp, opts)


def _normal_multi_allocate(inp: IAllocatorInput, opts: IAllocatorOptions) -> HailAnswer:
    """hail's one-by-one walk (with the exact check: each step's placement hail's, found
    asking a few N+1 verdicts, `AllocOptions.placement_only`), then the joint model started
    from it and from the verdicts the walk decided. Both end by the request's deadline: the
    walk has half the limit, or all of it (less `WALK_RESERVE`) when the joint model could
    not be built and handed to HiGHS in the other half; the joint model runs only when it
    fits in what the walk left. Instances the walk had no time for fail "out of time" (a
    partial multi-allocate, as Ganeti reads it) and the answer says `time_limit`; `stages`
    says where the time went (issue 40)."""
    started = time.perf_counter()
    limit = opts.solver.time_limit
    need = _joint_seconds(inp) if opts.joint else 0.0
    until = None
    if limit is not None:
        walk = ONE_BY_ONE_SHARE * limit
        if need > limit - walk:
            walk = limit * (1 - WALK_RESERVE)
        until = started + max(walk, 1.0)
    capacity = capacity_check(opts.capacity_checks, opts.solver)
    ans, line, objectives = answer_normal(inp, opts, deadline=until, capacity=capacity)
    one_by_one = _as_hail(ans, line, objectives)
    walked = time.perf_counter()
    stages = {"greedy_s": walked - started}
    cut = sum(1 for sol in ans.solutions if sol.log == (OUT_OF_TIME,))
    left = None if limit is None else limit - (walked - started)
    if not opts.joint:
        return replace(one_by_one, stages=stages)
    if left is not None and left < max(need, MIN_JOINT_S):
        return replace(_no_joint(one_by_one, opts, ans, cut, need, left), stages=stages)
    from solvers.strategies.joint import joint_multi_allocate

    first = getattr(capacity, "first", None)
    known = None if first is None else (first.base, first.known())
    options = opts.solver if left is None else opts.solver.within(left)
    joint = joint_multi_allocate(inp, one_by_one, options, known)
    if cut:
        joint = _cut(joint, cut)
    return replace(joint, stages={**stages, "model_s": time.perf_counter() - walked})


#: The least time left after hail's walk for which the joint model is tried at all: less,
#: and its preparation alone (candidates, the deltas) would end past the deadline.
MIN_JOINT_S = 0.5

#: The share of the limit kept back from hail's walk when it has the whole limit: the
#: checker's replay of its answer and the response (0.3 s for 50 instances on 200 nodes).
WALK_RESERVE = 0.05

#: The joint model's time before its first solve against `MODEL_SECONDS_PER_VARIABLE`'s
#: estimate of its build and copy into HiGHS: its candidates and deltas, the build and the
#: copy took 4 s, 6 s and 9 s for 11,957 variables (estimated 4.8 s) at a load of 15-20.
JOINT_OVERHEAD = 3.0


def _joint_seconds(inp: IAllocatorInput) -> float:
    """The least time the joint model of a multi-allocate needs before its first solve: a
    primary (and a secondary for drbd) variable per instance and online node of the groups
    it may use (an upper estimate of the candidates), times the joint model's seconds per
    variable."""
    from solvers.strategies.placement import MODEL_SECONDS_PER_VARIABLE

    req = inp.request
    assert isinstance(req, MultiAllocateRequest)
    cluster = inp.cluster
    usable = {
        g.uuid
        for g in cluster.groups
        if (req.group_name is None and g.alloc_policy != "unallocable") or g.name == req.group_name
    }
    online = sum(1 for n in cluster.nodes if n.group_uuid in usable and not n.offline)
    variables = sum(online * (2 if r.required_nodes == 2 else 1) for r in req.instances)
    return JOINT_OVERHEAD * MODEL_SECONDS_PER_VARIABLE * variables


def _no_joint(
    one_by_one: HailAnswer, opts: IAllocatorOptions, ans: Answer, cut: int, need: float, left: float
) -> HailAnswer:
    """hail's walk as the answer (checked by `answer_normal`), the joint model not tried:
    the time left is shorter than its build and copy into HiGHS."""
    from solvers.strategies.placement import NO_TIME_FOR_MODEL

    asked = len(ans.solutions)
    placed = len(ans.placements)
    status = "time_limit" if cut else "feasible"
    score = one_by_one.objectives.get("score")
    run = SolverRun(
        solver=opts.solver.solver,
        status=status,
        gap=None,
        build_s=0.0,
        solve_s=0.0,
        objective=(float(placed), score),
        names=("placed", "score"),
        unbounded=NO_TIME_FOR_MODEL,
    )
    note = (
        f"; hail's walk placed {placed} of {asked}"
        + (f", {cut} out of time" if cut else "")
        + f"; bound: at most {asked} placed; no joint model (about {need:.1f} s to build and "
        f"hand to the solver, {max(left, 0.0):.1f} s left)"
    )
    return replace(one_by_one, runs=(run,), note=solver_note((run,), note))


def _cut(ans: HailAnswer, cut: int) -> HailAnswer:
    """A joint answer after a walk the deadline cut: unproven runs say `time_limit`."""
    said = f"hail's walk: {cut} instance(s) out of time"
    if not ans.runs:
        return replace(ans, note=f"{ans.note}; {said}" if ans.note else said)
    runs = tuple(r if r.status == "optimal" else replace(r, status="time_limit") for r in ans.runs)
    rest = ans.note.removeprefix(solver_note(ans.runs))
    return replace(ans, runs=runs, note=solver_note(runs, f"{rest}; {said}"))


def greedy_answer(inp: IAllocatorInput, opts: IAllocatorOptions) -> HailAnswer:
    """`--greedy`: hail's answer to every request type, dedicated groups included, with hail's
    own N+1 check (none with `--no-capacity-checks`); no model is built. The checker still
    judges it; the one refusal printed anyway is the allocate-secondary onto an offline or
    drained node, which hail gives and the exact mode declines (docs/hail.md,
    "Allocate-secondary")."""
    req = inp.request
    if isinstance(req, (AllocateRequest, MultiAllocateRequest)):
        group = _one_group(req)
        if is_dedicated(inp.cluster, group):  # hail's own choice there is an exhaustive min
            from solvers.strategies import dedicated

            if isinstance(req, MultiAllocateRequest):
                return dedicated.one_by_one_multi_allocate(inp.cluster, req, opts.solver)
            if opts.restrict_to_nodes is not None:
                req = replace(req, restrict_to_nodes=opts.restrict_to_nodes)
            return dedicated.allocate(inp.cluster, req, opts.solver)
    check = NoCapacityCheck() if opts.capacity_checks == "none" else GreedyGlobalN1()
    restrict = opts.restrict_to_nodes
    alloc = AllocOptions(
        check, opts.ignore_soft_errors, tuple(restrict) if restrict is not None else None
    )
    ans = process(inp, alloc)
    objectives: dict[str, Any] = {}
    if ans.success:
        report = check_answer(inp, ans)
        hails_quirk = ans.kind == "allocate-secondary" and all(
            v.kind in UNUSABLE for v in report.violations
        )
        if not hails_quirk:
            report.raise_if_failed()
        objectives = {k: v for k, v in report.objectives.items() if k in ("score", "moves")}
    return _as_hail(ans, response_json(ans.success, ans.info, ans.result), objectives)


def _one_group(req: AllocateRequest | MultiAllocateRequest) -> str | None:
    """The group an allocate names, or the one every instance of a multi-allocate names."""
    if isinstance(req, AllocateRequest):
        return req.group_name
    names = {i.group_name for i in req.instances}
    return names.pop() if len(names) == 1 else None


#: Under a time limit, the share of it hail's one-by-one multi-allocate (with the exact N+1
#: check, seconds per instance on 200 nodes) may use on a normal group; the joint model has
#: the rest (issue 40: 50 instances on 200 nodes ran minutes under --time-limit 10). At
#: least a second, as the joint model's (`_rest`), so a tiny limit still tries.
ONE_BY_ONE_SHARE = 0.5


def _rest(options: SolverOptions, started: float) -> SolverOptions:
    """The time limit left after hail's one-by-one answer: the joint model shares the
    request's bound (at least a second, to try)."""
    if options.time_limit is None:
        return options
    return options.within(max(options.time_limit - (time.perf_counter() - started), 1.0))


def one_by_one_answer(
    inp: IAllocatorInput, opts: IAllocatorOptions, walked: EvacSolution | None = None
) -> HailAnswer:
    """htools' own answer on normal and shared-storage groups and for every non-allocation
    request (a node-evacuate's from `walked`, hail's walk when the caller has done it)."""
    return _as_hail(*answer_normal(inp, opts, walked))


def _as_hail(ans: Answer, line: str, objectives: dict) -> HailAnswer:
    placements = tuple(
        (p.name, (p.primary,) if p.secondary is None else (p.primary, p.secondary))
        for p in ans.placements
    ) + tuple(
        (m.instance, (m.primary,) if m.secondary is None else (m.primary, m.secondary))
        for m in ans.moves
    )
    return HailAnswer(
        line, ans.kind, placements=placements, objectives=objectives, groups=ans.groups
    )


#: violations that mean hail chose a node Ganeti cannot use (exalloc then declines)
UNUSABLE = frozenset({"offline_node", "drained_node", "not_vm_capable"})


def answer_normal(
    inp: IAllocatorInput,
    opts: IAllocatorOptions,
    walked: EvacSolution | None = None,
    deadline: float | None = None,
    capacity: CapacityCheck | None = None,
) -> tuple[Answer, str, dict]:
    """hail's answer (checked), its response line, and the checker's objectives; past
    `deadline` (time.perf_counter()) a multi-allocate tries no more instances. `capacity`:
    the N+1 check `opts` names, made by the caller (to read its verdicts after)."""
    alloc = AllocOptions(
        capacity or capacity_check(opts.capacity_checks, opts.solver),
        opts.ignore_soft_errors,
        tuple(opts.restrict_to_nodes) if opts.restrict_to_nodes is not None else None,
        deadline,
    )
    ans = process(inp, alloc, walked)
    objectives: dict[str, Any] = {}
    if ans.success:
        report = check_answer(inp, ans)
        unusable = [v for v in report.violations if v.kind in UNUSABLE]
        if unusable and len(unusable) == len(report.violations):
            # hail's allocate-secondary does not filter offline nodes; exalloc does not
            # print a node Ganeti cannot use (docs/hail.md, "Allocate-secondary")
            why = "; ".join(str(v) for v in unusable)
            info = f"{ans.info}; exalloc declines: {why}"
            return ans, response_json(False, info, []), {}
        report.raise_if_failed()
        objectives = {k: v for k, v in report.objectives.items() if k in ("score", "moves")}
    return ans, response_json(ans.success, ans.info, ans.result), objectives
