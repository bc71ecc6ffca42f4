"""hspace's tiered allocation exactly: a ladder of the exact standard allocations of
`solvers.strategies.space`, each rung's spec shrunk in hspace's units along the check that
stopped most nodes (docs/space.md "Tiered").

Apart from the standard allocation because the ladder is its own strategy over it: which spec
comes next (the node checks' probe, the search that walks to the first spec global N+1
admits, the policy's limits) and when the ladder ends (-l, the deadline, the rung cap); each
rung is a standard answer, solved and checked as one.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import replace as evolve
from typing import Any

from model.space import SpaceOptions, SpaceProblem, Spec, non_redundant_of, space_problem
from model.state import ClusterState
from solvers.options import DEFAULT_OPTIONS, SolverOptions
from solvers.strategies.space import SpaceResult, problem_of, solve_problem
from solvers.strategies.space_n1 import InputFailures, seconds_left

#: hspace's shrink units (`Instance.shrinkByType`): memory 64 MiB, disk 256 MiB, one vCPU.
SHRINK = {"memory_mib": 64, "disk_mib": 256, "vcpus": 1, "spindles": 1}
#: Which spec field a binding check shrinks (the others, e.g. the policy, shrink memory).
SHRINKS = {
    "memory": "memory_mib",
    "n1": "memory_mib",
    "global_n1": "memory_mib",
    "secondary": "memory_mib",
    "disk": "disk_mib",
    "disk_reserve": "disk_mib",
    "vcpu": "vcpus",
    "spindles": "spindles",
    "spindle_ratio": "spindles",
}


#: The rungs of a tiered ladder at most: the whole ladder of a 200-node group (96 rungs, until
#: no smaller spec fits) takes about 11 s; the cap only bounds a pathological one.
MAX_TIERS = 1000


@dataclass(frozen=True)
class TieredResult:
    """Tiered allocation: each tier's spec and its proven-largest count on top of the tiers
    before it (a ladder of standard allocations, docs/space.md "Tiered")."""

    stages: tuple[SpaceResult, ...]
    seconds: float
    # why the ladder ended early: "time limit", "-l", "tiers" (max_tiers); None when no
    # smaller spec fits any more
    stopped: str | None = None

    @property
    def count(self) -> int:
        return sum(s.count for s in self.stages)

    @property
    def final(self) -> ClusterState | None:
        return self.stages[-1].final if self.stages else None

    def spec_counts(self) -> list[tuple[Spec, int]]:
        """hspace's `tieredSpecMap`: consecutive equal specs merged."""
        out: list[tuple[Spec, int]] = []
        for s in self.stages:
            if not s.count:
                continue
            if out and out[-1][0] == s.answer.spec:
                out[-1] = (s.answer.spec, out[-1][1] + s.count)
            else:
                out.append((s.answer.spec, s.count))
        return out

    def handed_out(self) -> dict[str, int]:
        """Memory, disk and vCPUs of all tiered instances."""
        totals = {"memory_mib": 0, "disk_mib": 0, "vcpus": 0}
        for spec, k in self.spec_counts():
            for f in totals:
                totals[f] += getattr(spec, f) * k
        return totals

    def to_json(self) -> dict[str, Any]:
        return {
            "instances": self.count,
            "specs": [
                {"memory_mib": s.memory_mib, "disk_mib": s.disk_mib, "vcpus": s.vcpus,
                 "spindles": s.spindles, "count": k}
                for s, k in self.spec_counts()
            ],
            "handed_out": self.handed_out(),
            "status": "optimal" if all(s.status == "optimal" for s in self.stages) else "feasible",
            "seconds": round(self.seconds, 4),
            "stopped": self.stopped,
            "stages": [s.to_json() | {"placements": None} for s in self.stages],
        }  # fmt: skip


def _probe(problem: SpaceProblem) -> tuple[bool, list[str]]:
    """One pass of htools' node checks over the candidates (the first failing check of each,
    a drbd primary's secondaries in group order): whether one more instance of the problem's
    spec passes them somewhere (global N+1 aside: the stage's solve decides that), and the
    spec fields by how many candidates fail first on a check they feed (a drbd primary that
    passes: its first failing secondary's check), most first; on a tie, the later in
    hspace's order."""
    from model.resources import first_primary_shortfall, first_secondary_shortfall

    d, nodes = problem.demand, problem.state.nodes
    by_group: dict[str, list[str]] = {}
    for room in problem.rooms:
        by_group.setdefault(room.group, []).append(room.name)
    counts: Counter[str] = Counter()
    fits = False
    for room in problem.rooms:
        if not room.primary_ok:
            continue
        first = first_primary_shortfall(nodes[room.name], d)
        if first is None and problem.drbd:
            backed = False
            for peer in by_group[room.group]:
                if peer == room.name:
                    continue
                failed = first_secondary_shortfall(nodes[peer], d, room.name)
                if failed is None:
                    backed = True
                elif first is None:
                    first = failed
                if backed and first is not None:
                    break
            fits = fits or backed
        elif first is None:
            fits = True
        if first is not None and (f := SHRINKS.get(first.kind)):
            counts[f] += 1
    # hspace's order of failure modes (Mem, Disk, CPU, ..., Spindles); on a tie the later
    # one is shrunk, as `Cluster.tieredAlloc` sorts the counts stably and takes the last
    order = ("memory_mib", "disk_mib", "vcpus", "spindles")
    ranked = sorted(counts, key=lambda f: (counts[f], order.index(f)), reverse=True)
    return fits and not problem.stopped, ranked + [f for f in order if f not in ranked]


def _shrunk(spec: Spec, field_name: str, units: int) -> Spec | None:
    """The spec with one field `units` shrink units smaller; None below hspace's floors."""
    value = getattr(spec, field_name) - units * SHRINK[field_name]
    if value < SHRINK[field_name]:
        return None
    return evolve(spec, **{field_name: value})


def tiered(
    state: ClusterState,
    specs: tuple[Spec, ...],
    options: SpaceOptions,
    solver: SolverOptions = DEFAULT_OPTIONS,
    *,
    max_tiers: int = MAX_TIERS,
    decided: InputFailures | None = None,
) -> TieredResult:
    """hspace's tiered allocation as a ladder of exact standard allocations: for each tier
    spec in order, the largest count of it on top of what earlier tiers placed (proven); then
    the spec shrunk, in hspace's units, along the check that stopped most nodes (the largest
    shrink found by bisection after which one more instance passes htools' node checks), and
    so on; a field that cannot shrink further hands over to the next (memory, disk, vCPUs);
    `-l` caps the total; the solver's time limit (and `max_tiers`) ends the ladder early,
    said in `stopped`. Each stage is checked like a standard answer."""
    start = time.perf_counter()
    deadline = solver.deadline()
    decided = InputFailures() if decided is None else decided
    first = problem_of(state, specs[0], options, solver)
    stages: list[SpaceResult] = []
    current = state
    placed = 0

    def stage_problem(spec: Spec) -> SpaceProblem:
        left = None if options.limit is None else options.limit - placed
        opts = options if left is None else _with_limit(options, left)
        return space_problem(current, spec, opts, non_redundant_of(first), placed)

    stopped = None
    for tier in specs:
        spec: Spec | None = tier
        while spec is not None and stopped is None:
            if options.limit is not None and placed >= options.limit:
                stopped = "-l"
            elif deadline is not None and time.perf_counter() > deadline:
                stopped = "time limit"
            elif len(stages) >= max_tiers:
                stopped = "tiers"
            if stopped is not None:
                break
            problem = stage_problem(spec)
            result = solve_problem(problem, solver.within(seconds_left(deadline)), decided=decided)
            stages.append(result)
            placed += result.count
            if result.count:
                current = _without_status(result.final, state)
            spec = _next_spec(spec, result, stage_problem, solver, deadline, decided=decided)
            if spec is None and deadline is not None and time.perf_counter() > deadline:
                stopped = "time limit"  # the walk to the next tier ran out of time
    return TieredResult(tuple(stages), time.perf_counter() - start, stopped)


def _next_spec(
    spec: Spec,
    result: SpaceResult,
    pose: Any,
    solver: SolverOptions,
    deadline: float | None = None,
    *,
    decided: InputFailures | None = None,
) -> Spec | None:
    """The next tier: the spec shrunk one of hspace's units at a time (`Instance.shrinkByType`:
    memory 64 MiB, disk 256 MiB, one vCPU, one spindle) until one more instance fits: first
    along the check most candidates fail first at each step, then, as hspace's big step, along
    one field alone at a time; None when the policy or hspace's floors stop every walk."""
    base = pose(spec)
    for only in (None, "memory_mib", "disk_mib", "vcpus", "spindles"):
        walk = _walk(spec, base, pose, solver, only, deadline=deadline, decided=decided)
        if walk is not None:
            return walk
    return None


def _light(base: SpaceProblem, spec: Spec) -> SpaceProblem:
    """The stage's problem for another spec, as far as the node-check probes read it: the
    demand and which candidates the policy admits as primaries (rows are not recomputed)."""
    from model.policy import policy_shortfall
    from model.space import demand_of_spec

    opts = base.options
    d = demand_of_spec(spec, opts.disk_template, opts.spindle_use)
    state = base.state
    sizes = Counter(r.group for r in base.rooms)
    verdicts: dict[tuple[str, bool], bool] = {}  # the policy is the group's (and storage's)

    def admits(r: Any) -> bool:
        excl = state.nodes[r.name].exclusive_storage
        key = (r.group, excl)
        if key not in verdicts:
            verdicts[key] = policy_shortfall(d, state.ipolicy_of(r.name), excl) is None
        return verdicts[key] and (not base.drbd or sizes[r.group] > 1)

    rooms = []
    for r in base.rooms:
        ok = admits(r)
        rooms.append(r if r.primary_ok == ok else evolve(r, primary_ok=ok))
    return evolve(base, spec=spec, demand=d, rooms=tuple(rooms))


def _walk(
    spec: Spec,
    base: SpaceProblem,
    pose: Any,
    solver: SolverOptions,
    only: str | None,
    steps: int = 4096,
    deadline: float | None = None,
    *,
    decided: InputFailures | None = None,
) -> Spec | None:
    """Shrink one unit at a time (along `only`, or the check most candidates fail first) until
    one more instance fits. Where the node checks pass and global N+1 refuses, memory and
    local disk (what re-placing a failed node's instances needs) shrink in proportion to
    their room above the policy's minimum."""
    current = spec
    problem = base
    fits, blocking = _probe(problem)
    over: dict[str, int] = {}  # above the policy's max: the nearest max below, per field
    if not any(r.primary_ok for r in problem.rooms):
        over = _over_limits(problem)  # the tier spec above the policy's max: shrink into it
        blocking = [f for f in POLICY_FIELDS if f in over]
    for _ in range(steps):
        if deadline is not None and time.perf_counter() > deadline:
            return None  # the time limit holds for the walk too: 4,096 steps with an N+1
            # solve each took 9 min on Ganeti's hbal-evac.data (issue 40, item 4)
        shrunk = None
        for field_name in [only] if only is not None else blocking:
            shrunk = _shrunk(current, field_name, _units_into(current, field_name, over))
            if shrunk is not None:
                break
        if shrunk is None:
            return None
        current = shrunk
        problem = _light(base, current)
        if not any(r.primary_ok for r in problem.rooms):
            over = _over_limits(problem)
            blocking = [f for f in POLICY_FIELDS if f in over]
            if not blocking:  # below every policy's min (or its templates): smaller is no use
                return None
            continue  # above a max: hspace's tryAlloc fails on the policy and shrinks that field
        over = {}
        fits, blocking = _probe(problem)
        if fits:
            if not base.global_n1 or _n1_admits_one(pose(current), solver, deadline, decided):
                return current
            # from here each step is fixed (`only`, or memory and disk in proportion): search
            if only is not None:
                return _first_admitted(
                    spec, current, base, pose, solver, only, steps, deadline, decided=decided
                )
            return _largest_admitted(
                spec, current, base, pose, solver, steps, deadline, decided=decided
            )
    return None


#: The spec's fields in hspace's order, as `_over_limits` reads them against a policy's max.
POLICY_FIELDS = ("memory_mib", "disk_mib", "vcpus", "spindles")


def _units_into(spec: Spec, field_name: str, over: Mapping[str, int]) -> int:
    """How many shrink units hspace's one-unit walk takes along `field_name` before the
    field reaches `over[field_name]`, the nearest policy max below it (1 when the field is
    not above a max): every spec on the way is above that max in the same pairs, refused
    by the policy alike, so the walk can take them at once. One unit at a time, a
    `--tiered-alloc` of 1 TiB memory over a 128 GiB max needed 14,336 units, more than the
    walk's 4,096 steps, and the ladder ended with 0 instances where hspace hands out 4 on
    Ganeti's hspace-tiered.data (tests/test_exact_edges.py)."""
    if field_name not in over or field_name == "spindles":  # spindle use is not the spec's
        return 1
    unit = SHRINK[field_name]
    return max(1, -(-(getattr(spec, field_name) - over[field_name]) // unit))


def _over_limits(problem: SpaceProblem) -> dict[str, int]:
    """The fields in which the problem's spec is above the max of a min/max pair whose min it
    meets, in some candidate's policy that allows its template, each with the nearest such
    max below its value: shrinking those can bring it into the policy (a tier spec above the
    max: `--tiered-alloc` larger than the policy, which hspace shrinks into it); empty when
    no policy admits a smaller instance either."""
    from model.policy import spec_shortfall

    d, state = problem.demand, problem.state
    fields = POLICY_FIELDS
    over: dict[str, int] = {}
    seen: set[tuple[str, bool]] = set()
    for r in problem.rooms:
        excl = state.nodes[r.name].exclusive_storage
        if (r.group, excl) in seen:
            continue
        seen.add((r.group, excl))
        ipolicy = state.ipolicy_of(r.name)
        if d.disk_template not in ipolicy.disk_templates:
            continue
        for mm in ipolicy.minmax:
            if spec_shortfall(d, mm.min, above=True, exclusive_storage=excl) is not None:
                continue
            limits = (mm.max.memory_size, mm.max.disk_size, mm.max.cpu_count, mm.max.spindle_use)
            values = (d.memory_mib, max(d.disk_sizes_mib, default=0), d.vcpus, d.spindle_use)
            if excl:
                values = (*values[:3], d.disk_spindles or 0)
            for f, v, m in zip(fields, values, limits, strict=True):
                if v > m:
                    over[f] = max(over.get(f, m), m)
    return over


def _largest_admitted(
    tier: Spec,
    refused: Spec,
    base: SpaceProblem,
    pose: Any,
    solver: SolverOptions,
    steps: int,
    deadline: float | None,
    *,
    decided: InputFailures | None = None,
) -> Spec | None:
    """Where global N+1 refuses a spec the node checks pass: the first admitted spec of the
    walks from it in proportion, along memory alone and along disk alone, the one handing out
    the most (memory, then disk, vCPUs, spindles). The proportional walk alone can shrink
    memory that a disk-only walk keeps: on `--simulate p,2,1T,64g,16 --simulate a,3,2T,32g,8
    --disk-template plain` it gave 29,696 MiB where hspace's tier (and the disk walk) keeps
    32,704 at the same disk."""
    found = [
        _first_admitted(tier, refused, base, pose, solver, only, steps, deadline, decided=decided)
        for only in (None, "memory_mib", "disk_mib")
    ]
    admitted = [f for f in found if f is not None]
    if not admitted:
        return None
    return max(admitted, key=lambda f: (f.memory_mib, f.disk_mib, f.vcpus, f.spindles))


def _first_admitted(
    tier: Spec,
    refused: Spec,
    base: SpaceProblem,
    pose: Any,
    solver: SolverOptions,
    only: str | None,
    steps: int,
    deadline: float | None,
    *,
    decided: InputFailures | None = None,
) -> Spec | None:
    """The first spec of the walk below `refused` (one unit of `only` a step, or memory and
    disk in proportion to their room, `_in_proportion`) at which the node checks pass and
    global N+1 admits one instance, found by galloping then bisection instead of one exact
    solve per unit: a smaller instance passes every check a larger one passes (capacity rows
    and the re-placement of a failed node's instances only get easier), so the admitted specs
    are a tail of the walk. The walk ends where no field can shrink or the policy admits no
    candidate, as the unit walk does. One solve a unit took 8 minutes on a 7-node plain
    cluster (tiered from the policy's largest spec, hundreds of refused units a tier)."""
    walk = [refused]
    while len(walk) <= steps:
        # each step's light problem is seconds of Python on 1,000 nodes: 10 s past a 30 s
        # limit's tiered share on bench_space's cluster (benchmarks/time_limits.py, issue 40)
        if deadline is not None and time.perf_counter() > deadline:
            return None
        nxt = None
        fields = [only] if only is not None else _in_proportion(tier, walk[-1], base)
        for field_name in fields:
            nxt = _shrunk(walk[-1], field_name, 1)
            if nxt is not None:
                break
        if nxt is None or not any(r.primary_ok for r in _light(base, nxt).rooms):
            break
        walk.append(nxt)
    verdicts: dict[int, bool] = {0: False}

    def admitted(i: int) -> bool:
        if i not in verdicts:
            verdicts[i] = _probe(_light(base, walk[i]))[0] and _n1_admits_one(
                pose(walk[i]), solver, deadline, decided
            )
        return verdicts[i]

    def late() -> bool:
        return deadline is not None and time.perf_counter() > deadline

    lo, hi, jump = 0, None, 1  # walk[lo] refused; walk[hi] admitted
    while hi is None:
        if late() or lo == len(walk) - 1:
            return None
        i = min(lo + jump, len(walk) - 1)
        if admitted(i):
            hi = i
        else:
            lo, jump = i, 2 * jump
    while hi - lo > 1:
        if late():
            return walk[hi]  # admitted, perhaps not the largest: the deadline is near
        mid = (lo + hi) // 2
        if admitted(mid):
            hi = mid
        else:
            lo = mid
    return walk[hi]


def _in_proportion(tier: Spec, current: Spec, problem: SpaceProblem) -> list[str]:
    """Memory and disk, the one with the larger share of its room (tier spec down to the
    policy's minimum, of the min/max pair holding the tier spec) still left first."""
    ipolicy = problem.state.ipolicy_of(problem.rooms[0].name) if problem.rooms else None
    low = {"memory_mib": SHRINK["memory_mib"], "disk_mib": SHRINK["disk_mib"]}
    if ipolicy is not None:
        for mm in ipolicy.minmax:
            if mm.min.memory_size <= tier.memory_mib <= mm.max.memory_size:
                low = {"memory_mib": mm.min.memory_size, "disk_mib": mm.min.disk_size}
                break

    def share(f: str) -> float:
        room = getattr(tier, f) - low[f]
        return (getattr(current, f) - low[f]) / room if room > 0 else -1.0

    return sorted(low, key=share, reverse=True)


def _n1_admits_one(
    problem: SpaceProblem,
    solver: SolverOptions,
    deadline: float | None = None,
    decided: InputFailures | None = None,
) -> bool:
    """Under global N+1, whether one instance is placeable at all (an exact solve capped at
    one, within what is left until the ladder's `deadline`: with the ladder's whole limit, a
    probe begun near the end ran a whole limit past it); always true where the node checks
    are all there is."""
    if not problem.global_n1:
        return True
    one = evolve(problem, options=evolve(problem.options, limit=1))
    return solve_problem(one, solver.within(seconds_left(deadline)), decided=decided).count >= 1


def _with_limit(options: SpaceOptions, left: int) -> SpaceOptions:
    return evolve(options, limit=max(left, 0))


def _without_status(final: ClusterState, loaded: ClusterState) -> ClusterState:
    """A stage's final state as the next stage's input: node status (-O, --max-cpu,
    --min-disk) is applied again by `space_problem`, so the loaded values come back; the
    load-time N+1 flags stay as loaded (hspace judges bad nodes once)."""
    nodes = {}
    for n, st in final.nodes.items():
        was = loaded.nodes[n]
        status = (was.offline, was.vcpu_ratio, was.lo_disk_mib)
        if (st.offline, st.vcpu_ratio, st.lo_disk_mib) != status:  # only the nodes it changes
            nodes[n] = evolve(st, offline=status[0], vcpu_ratio=status[1], lo_disk_mib=status[2])
    return final.with_nodes(nodes)
