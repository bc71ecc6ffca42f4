"""exalloc squeeze: hsqueeze's question (which nodes to power down, or which standby nodes to
power up) answered exactly, in hsqueeze's output forms.

Flow: load → decide the mode as hsqueeze does (expand when some node, offline ones included,
cannot host the minimal probe) → build `formulations.squeeze` → lexicographic solve (nodes,
then moves, then evenness) → turn counts into named migrations → order them so every step
passes htools' strict checks → independent check → report. Very large clusters go through a
node-type decomposition (`_decomposed`) whose gap to the type aggregate's bound is reported.
"""

from __future__ import annotations

import math
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyomo.environ as pyo

from formulations.squeeze import (
    EXPAND,
    SHRINK,
    MirroredInstance,
    PairChoice,
    Shape,
    SqueezeNode,
    SqueezeProblem,
    build_model,
    build_type_aggregate,
    evenness_cut,
    objectives,
)
from model.backends.text import dump_text, load_text
from model.capacity import (
    DISK,
    DISK_FORTH,
    MEMORY,
    MEMORY_FORTH,
    N1,
    VCPU,
    VCPU_FORTH,
    rooms_beside,
    spindle_ratio_room,
)
from model.check import Move, Violation, check_squeeze
from model.cluster import Cluster, Instance
from model.errors import CheckFailedError, InputError, SolverError
from model.files import write_files
from model.resources import (
    FailMode,
    InstanceDemand,
    NodeState,
    add_primary,
    probe_demand,
    remove_primary,
    remove_secondary,
)
from model.state import ClusterState, node_states
from solvers import (
    LexResult,
    Objective,
    SolveResult,
    Status,
    Stopwatch,
    solve,
    solve_lexicographic,
)
from solvers.result import relative_gap

STANDBY_PREFIX = "htools:standby:"
STANDBY_AUTO = "htools:standby:auto"
#: Above this many nodes the single MIP is replaced by the node-type decomposition.
DECOMPOSE_NODES = 1200
SH_TEMPLATE = (
    "#!/bin/sh\n\n"
    "# Auto-generated script for executing cluster rebalancing\n\n"
    "# To stop, touch the file /tmp/stop-htools\n\n"
    "set -e\n\n"
    "check() {\n"
    "  if [ -f /tmp/stop-htools ]; then\n"
    "    echo 'Stop requested, exiting'\n"
    "    exit 0\n"
    "  fi\n"
    "}\n\n"
)


# -- which instances move, which nodes are candidates ------------------------------------------


def movable(inst: Instance, move: str) -> bool:
    """Instances the plan may relocate: htools moves only auto-balanced, movable instances.

    ext: externally mirrored (live migration, as hsqueeze); drbd: also DRBD instances
    (failover, new secondary, or both); all: ext, DRBD and diskless/file instances
    (`gnt-instance move`, with downtime). Plain instances never move.
    """
    if not inst.auto_balance or inst.forthcoming:
        return False
    if inst.mirrored:
        return move in ("drbd", "all") and inst.secondary is not None
    if inst.secondary:
        return False
    if move == "all":
        return not inst.uses_local_storage
    return inst.externally_mirrored


def offline_candidates(cluster: Cluster, move: str = "ext") -> list[str]:
    """hsqueeze's list: online, not master, no secondaries, only non-local primaries; sorted by
    primary count descending (stable, so ties keep node order). With --move drbd/all a node
    qualifies when every instance on it (primary or secondary) may move."""
    has_secondary = {i.secondary for i in cluster.instances if i.secondary}
    prim: dict[str, list[Instance]] = defaultdict(list)
    sec: dict[str, list[Instance]] = defaultdict(list)
    for i in cluster.instances:
        prim[i.primary].append(i)
        if i.secondary:
            sec[i.secondary].append(i)

    def emptiable(name: str) -> bool:
        if move == "ext":
            return name not in has_secondary and not any(i.uses_local_storage for i in prim[name])
        return all(movable(i, move) for i in prim[name] + sec[name])

    out = [n for n in cluster.nodes if n.online and not n.master and emptiable(n.name)]
    out.sort(key=lambda n: -len(prim[n.name]))
    return [n.name for n in out]


def online_candidates(cluster: Cluster) -> list[str]:
    """Offline nodes carrying a `htools:standby:` tag, in node order."""
    return [
        n.name
        for n in cluster.nodes
        if n.offline and any(t.startswith(STANDBY_PREFIX) for t in n.tags)
    ]


def fits(state: NodeState, probe: InstanceDemand) -> bool:
    """htools `Node.addPri` (strict) succeeds."""
    return isinstance(add_primary(state, probe), NodeState)


# -- rooms: what movable instances may use on a node with the probe still fitting --------------


@dataclass(frozen=True)
class Rooms:
    memory_mib: int  # bound on Σ counted memory of movable primaries
    memory_forth_mib: int  # bound on Σ memory (all statuses) of movable primaries
    vcpus: int
    min_memory_mib: int  # lower bound (keeps an N+1-failing node failing, see `rooms`)
    disk_mib: int  # bound on Σ local disk of new primaries and secondaries (DRBD moves)


#: Room for vCPUs on a node without a vCPU limit (negative vcpu ratio).
UNLIMITED_VCPUS = 10**9


def rooms(base: NodeState, probe: InstanceDemand) -> Rooms:
    """Rooms of a node emptied of its movable primaries (`base`), for a probe: its capacity
    rows (`model.capacity`) minus what the probe takes.

    A node that passes N+1 must keep `unallocated − probe > rMem` (the N1 row). A node that
    already fails N+1 is exempt from that test only while it keeps failing (htools
    recomputes the flag after every move), so its load is kept at or above
    `unallocated − rMem`.
    """
    left = rooms_beside(base, probe)
    memory = left[MEMORY]
    if N1 in left:
        memory = min(memory, left[N1] - base.reserved_memory_mib)
    low = base.unallocated_memory_mib - base.reserved_memory_mib if base.fail_n1 else 0
    vcpus = min((left[k] for k in (VCPU, VCPU_FORTH) if k in left), default=UNLIMITED_VCPUS)
    disk = min(left[DISK], left[DISK_FORTH])
    return Rooms(memory, left[MEMORY_FORTH], vcpus, max(low, 0), disk)


# -- building the problem ----------------------------------------------------------------------


@dataclass(frozen=True)
class Built:
    """A problem plus what is needed to read its solution back into instance names."""

    problem: SqueezeProblem
    members: dict[tuple[int, int], list[str]]  # (shape, node) -> instances there now
    homeless: dict[int, list[str]]  # shape -> instances on nodes outside the problem
    node_names: list[str]


def build_problem(
    cluster: Cluster,
    state: ClusterState,
    mode: str,
    probe: InstanceDemand,
    move: str,
    *,
    decided: Sequence[str],
    always_on: Sequence[str] = (),
    soft_probe: bool = False,
) -> Built:
    """Nodes: online ones plus `always_on`; `decided` are the candidates (or standby nodes)."""
    bare_probe = replace(probe, memory_mib=0, vcpus=0)
    decided_set, forced = set(decided), set(always_on)
    names = [n.name for n in cluster.nodes if n.online or n.name in decided_set or n.name in forced]
    index = {name: k for k, name in enumerate(names)}
    moving = [i for i in cluster.instances if movable(i, move)]
    pairs = [i for i in moving if i.mirrored]
    moving_names = {i.name for i in moving}
    bases = {name: state.node(name) for name in names}
    for inst in moving:
        d = state.demands[inst.name]
        if inst.primary in bases:
            bases[inst.primary] = remove_primary(bases[inst.primary], d)
        if inst.secondary in bases:
            bases[inst.secondary] = remove_secondary(bases[inst.secondary], d, inst.primary)
    # keep the N+1 exemption only where both the load-time flag and the recomputed one say
    # the node fails N+1, so that moved and untouched nodes are judged alike (conservative);
    # with DRBD moves the reserve itself moves, so every node passes N+1 strictly
    for name in names:
        if bases[name] is not state.node(name) or pairs:
            b = bases[name]
            failing = b.unallocated_memory_mib <= b.reserved_memory_mib
            keep = failing and state.node(name).fail_n1 and not pairs
            bases[name] = replace(b, fail_n1=keep)

    shape_key: dict[tuple, int] = {}
    shapes_raw: list[dict] = []
    members: dict[tuple[int, int], list[str]] = defaultdict(list)
    homeless: dict[int, list[str]] = defaultdict(list)
    for inst in moving:
        if inst.mirrored:
            continue
        d = state.demands[inst.name]
        mem = d.memory_mib if d.uses_memory else 0
        group = cluster.node(inst.primary).group_uuid
        key: tuple = (mem, d.memory_mib, d.counted_vcpus, d.exclusion_tags, group)
        if d.exclusion_tags:
            key = (*key, inst.name)  # identity matters: a shape of its own
        if key not in shape_key:
            shape_key[key] = len(shapes_raw)
            shapes_raw.append(
                dict(
                    mem=mem,
                    mem_all=d.memory_mib,
                    cpu=d.counted_vcpus,
                    tags=d.exclusion_tags,
                    key=inst.name,
                    group=group,
                )
            )
        s = shape_key[key]
        if inst.primary in index:
            members[s, index[inst.primary]].append(inst.name)
        else:
            homeless[s].append(inst.name)

    mirrored, max_reserve = _pair_choices(cluster, state, pairs, names, index)
    nodes: list[SqueezeNode] = []
    for name in names:
        base = bases[name]
        r, bare = rooms(base, probe), rooms(base, bare_probe)
        if name in decided_set:
            st = "candidate" if mode == SHRINK else "standby"
        else:
            st = "on"
        # a DRBD secondary needs its failover memory below the *_forth free memory
        forth_cut = max_reserve.get(name, 0)
        nodes.append(
            SqueezeNode(
                name=name,
                state=st,
                room_memory_mib=r.memory_mib,
                room_memory_forth_mib=min(r.memory_forth_mib, bare.memory_forth_mib - forth_cut),
                room_vcpus=r.vcpus,
                min_memory_mib=r.min_memory_mib,
                total_memory_mib=base.total_memory_mib,
                fixed_used_memory_mib=base.total_memory_mib - base.unallocated_memory_mib,
                bare_room_memory_mib=bare.memory_mib,
                bare_room_memory_forth_mib=bare.memory_forth_mib - forth_cut,
                bare_room_vcpus=bare.vcpus,
                group=base.group_uuid,
                n1_room_memory_mib=base.unallocated_memory_mib
                - (probe.memory_mib if probe.uses_memory else 0)
                - 1,
                room_disk_mib=r.disk_mib,
                room_spindles=spindle_ratio_room(base),
                fixed_peers=tuple((index[p], mem) for p, mem in base.peers if p in index and mem),
            )
        )
    shapes = []
    for s, raw in enumerate(shapes_raw):
        counts = tuple(sorted((n, len(v)) for (ss, n), v in members.items() if ss == s))
        shapes.append(
            Shape(
                key=raw["key"],
                memory_mib=raw["mem"],
                memory_forth_mib=raw["mem_all"],
                vcpus=raw["cpu"],
                exclusion_tags=raw["tags"],
                counts=counts,
                homeless=len(homeless.get(s, ())),
                group=raw["group"],
            )
        )
    fixed_tags: dict[tuple[int, str], int] = {}
    for name in names:
        for tag, cnt in state.node(name).exclusion_tag_counts:
            moved_here = sum(
                1
                for i in state.node(name).primaries_forth
                if i in moving_names and tag in state.demands[i].exclusion_tags
            )
            if cnt - moved_here > 0:
                fixed_tags[index[name], tag] = cnt - moved_here
    problem = SqueezeProblem(
        mode=mode,
        nodes=tuple(nodes),
        shapes=tuple(shapes),
        fixed_tag_counts=fixed_tags,
        soft_probe=soft_probe,
        mirrored=tuple(mirrored),
    )
    return Built(problem, dict(members), dict(homeless), names)


def _pair_choices(
    cluster: Cluster,
    state: ClusterState,
    pairs: Sequence[Instance],
    names: Sequence[str],
    index: dict[str, int],
) -> tuple[list[MirroredInstance], dict[str, int]]:
    """Every (primary, secondary) a DRBD instance may end on, with hbal's move costs.

    With p, s the current pair and t any other node of the group (not exclusive storage):
    stay (p,s) 0; failover (s,p) 1; replace secondary (p,t) 2; failover and replace (s,t) 3;
    replace and failover (t,p) 3; replace primary (t,s) 4. A pair with a node outside the
    problem (offline) is never kept.
    """
    out: list[MirroredInstance] = []
    max_reserve: dict[str, int] = defaultdict(int)
    for inst in pairs:
        d = state.demands[inst.name]
        p, s = inst.primary, inst.secondary or ""
        group = cluster.node(p).group_uuid
        others = [
            n
            for n in names
            if n not in (p, s)
            and cluster.node(n).group_uuid == group
            and not cluster.node(n).exclusive_storage
        ]
        raw = [(p, s, 0), (s, p, 1)]
        for t in others:
            raw += [(p, t, 2), (s, t, 3), (t, p, 3), (t, s, 4)]
        choices = tuple(
            PairChoice(index[a], index[b], c) for a, b, c in raw if a in index and b in index
        )
        for c in choices:
            max_reserve[names[c.secondary]] = max(
                max_reserve[names[c.secondary]], d.secondary_memory_mib
            )
        local = not cluster.node(p).exclusive_storage
        out.append(
            MirroredInstance(
                name=inst.name,
                memory_mib=d.memory_mib if d.uses_memory else 0,
                memory_forth_mib=d.memory_mib,
                vcpus=d.counted_vcpus,
                reserve_mib=d.secondary_memory_mib,
                disk_mib=d.disk_mib,
                spindle_use=float(d.spindle_use) if local else 0.0,
                exclusion_tags=d.exclusion_tags,
                choices=choices,
                current=(index.get(p, -1), index.get(s, -1)),
            )
        )
    return out, dict(max_reserve)


# -- solving -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Solution:
    """Counts per (shape, node) and power states, with the run's figures."""

    on: dict[int, bool]
    y: dict[tuple[int, int], int]
    status: str
    objective: tuple[float | None, ...]
    bound: tuple[float | None, ...]
    gap: tuple[float | None, ...]
    names: tuple[str, ...]
    build_s: float
    solve_s: float
    method: str = "mip"
    pairs: dict[int, int] = field(default_factory=dict)  # DRBD instance -> chosen pair


def _moves_cap(problem: SqueezeProblem) -> int:
    """An upper bound on the moves objective: every instance moves, DRBD at its dearest."""
    return sum(sh.total for sh in problem.shapes) + sum(
        max(c.cost for c in mi.choices) for mi in problem.mirrored if mi.choices
    )


def _blended(problem: SqueezeProblem, nodes: Objective, moves: Objective) -> Objective:
    """Nodes then moves as one objective, W·nodes ∓ moves with W above any moves value: the
    same optimum as the two stages, in one solve (a second stage with DRBD pair binaries
    starts without an incumbent and can stall)."""
    weight = _moves_cap(problem) + 1
    sign = -1 if nodes.sense == "max" else 1
    return Objective("nodes_then_moves", weight * nodes.expr + sign * moves.expr, nodes.sense)


def _unblend(
    problem: SqueezeProblem, res: LexResult, nodes: Objective, moves: Objective
) -> LexResult:
    """Split a blended first stage back into its two stages (values read off the plan)."""
    stage = res.stages[0]
    cap = _moves_cap(problem)
    weight = cap + 1
    n_val, m_val = float(round(pyo.value(nodes.expr))), float(round(pyo.value(moves.expr)))
    if stage.status is Status.OPTIMAL:
        n_bound, m_bound = n_val, m_val
    elif stage.bound is None:
        n_bound, m_bound = None, None
    elif nodes.sense == "max":
        n_bound, m_bound = float(math.floor((stage.bound + cap) / weight)), None
    else:
        n_bound, m_bound = float(max(math.ceil((stage.bound - cap) / weight), 0)), None
    split = tuple(
        replace(stage, objective=v, bound=b, gap=relative_gap(v, b), solve_s=t)
        for v, b, t in ((n_val, n_bound, stage.solve_s), (m_val, m_bound, 0.0))
    )
    names = (nodes.name, moves.name, *res.names[1:])
    return LexResult.from_stages(names, split + res.stages[1:], res.build_s)


def _read(model: pyo.ConcreteModel, built: Built) -> tuple[dict[int, bool], dict, dict]:
    on = {n: bool(round(pyo.value(model.on[n]))) for n in model.N}
    pairs = {i: k for i, k in model.IC if (model.x[i, k].value or 0) > 0.5}
    y = {}
    for s in model.S:
        for n in model.N:
            v = model.y[s, n].value
            k = int(round(v)) if v is not None else 0
            if k:
                y[s, n] = k
    return on, y, pairs


def solve_mip(built: Built, args: Any) -> Solution:
    """The single per-node MIP, solved lexicographically.

    With DRBD pairs, nodes and moves are one blended stage (same optimum). Once the node
    count is fixed, it bounds how many nodes are on, which makes the formulation's evenness
    cut valid for the later stages (same optimum, faster proof).
    """
    problem = built.problem
    with Stopwatch() as sw:
        model = build_model(problem)
        objs = objectives(model, problem)
    node_stage = bool(objs) and objs[0].name in ("nodes_freed", "nodes_powered_on")
    blend = node_stage and bool(problem.mirrored) and len(objs) > 1 and objs[1].name == "moves"
    stages = [_blended(problem, objs[0], objs[1]), *objs[2:]] if blend else objs

    def evenness_after_node_stage(k: int, _value: float) -> list:
        if k != 0 or not node_stage:
            return []
        count = round(pyo.value(objs[0].expr))  # the fixed stage's plan is loaded
        decided = len(problem.decided())
        n_fixed = len(problem.nodes) - decided
        nodes_on = n_fixed + (decided - count if problem.mode == SHRINK else count)
        row = evenness_cut(model, problem, nodes_on)
        return [row] if row is not None else []

    res = solve_lexicographic(
        model,
        stages,
        args.solver,
        time_limit=args.time_limit,
        mip_gap=args.gap,
        threads=args.threads,
        build_s=sw.seconds,
        stage_rows=evenness_after_node_stage,
    )
    if blend and res.has_solution:
        res = _unblend(problem, res, objs[0], objs[1])
    if not res.has_solution:
        return Solution(
            {},
            {},
            str(res.status),
            res.objective,
            res.bound,
            res.gap,
            res.names,
            res.build_s,
            res.solve_s,
        )
    on, y, pairs = _read(model, built)
    moves_const = sum(sh.homeless for sh in built.problem.shapes)
    obj = tuple(
        (v + moves_const) if (v is not None and name == "moves") else v
        for name, v in zip(res.names, res.objective, strict=True)
    )
    bound = tuple(
        (v + moves_const) if (v is not None and name == "moves") else v
        for name, v in zip(res.names, res.bound, strict=True)
    )
    return Solution(
        on,
        y,
        str(res.status),
        obj,
        bound,
        res.gap,
        res.names,
        res.build_s,
        res.solve_s,
        pairs=pairs,
    )


# -- from counts to named migrations, ordered and checked --------------------------------------


@dataclass(frozen=True)
class Migration:
    """One instance's move: to a new primary (and, for DRBD, possibly a new secondary)."""

    instance: str
    source: str
    target: str
    old_secondary: str | None = None
    secondary: str | None = None

    def nodes(self) -> set[str]:
        return {n for n in (self.source, self.target, self.old_secondary, self.secondary) if n}


def migrations(cluster: Cluster, built: Built, sol: Solution) -> list[Migration]:
    """Which instances move where: of each shape, the last ones (file order) leave a node,
    and the arrivals are handed out in node order."""
    names = built.node_names
    out: list[Migration] = []
    for s, shape in enumerate(built.problem.shapes):
        now = dict(shape.counts)
        leaving: list[str] = list(built.homeless.get(s, ()))
        slots: list[int] = []
        for n in range(len(names)):
            c, y = now.get(n, 0), sol.y.get((s, n), 0)
            if c > y:
                leaving += built.members[s, n][y:]
            elif y > c:
                slots += [n] * (y - c)
        if len(leaving) != len(slots):
            raise SolverError(f"inconsistent solution for shape {shape.key}")
        for inst, n in zip(leaving, slots, strict=True):
            out.append(Migration(inst, cluster.instance_index[inst].primary, names[n]))
    for i, mi in enumerate(built.problem.mirrored):
        ch = mi.choices[sol.pairs[i]]
        inst = cluster.instance_index[mi.name]
        a, b = names[ch.primary], names[ch.secondary]
        if (a, b) != (inst.primary, inst.secondary):
            out.append(Migration(mi.name, inst.primary, a, inst.secondary, b))
    return out


def _step(state: ClusterState, mv: Migration) -> ClusterState | None:
    """The state after one migration, or None when htools' strict checks refuse it."""
    secondary = mv.secondary if mv.secondary else None
    after = state.relocate(mv.instance, mv.target, secondary)
    return None if isinstance(after, FailMode) else after


def order_moves(state: ClusterState, moves: list[Migration]) -> list[list[Migration]]:
    """Jobsets in which every migration passes htools' strict checks when it runs.

    Migrations in one jobset touch disjoint nodes, so they run in parallel. Greedy, one pass
    per jobset: take each pending migration whose nodes are still free in this jobset and
    which htools accepts at that point. Migrations that never become acceptable on their own
    (a swap) form the last jobsets; the checker judges the final layout either way.
    """
    pending = list(moves)
    jobsets: list[list[Migration]] = []
    while pending:
        busy: set[str] = set()
        jobset: list[Migration] = []
        rest: list[Migration] = []
        for mv in pending:
            touched = mv.nodes()
            if touched & busy:
                rest.append(mv)
                continue
            new = _step(state, mv)
            if new is None:
                rest.append(mv)
                continue
            state = new
            busy |= touched
            jobset.append(mv)
        if not jobset:
            jobsets += [[mv] for mv in rest]
            break
        jobsets.append(jobset)
        pending = rest
    return jobsets


def move_commands(cluster: Cluster, mv: Migration) -> list[str]:
    """The gnt-instance commands of one job, as hbal writes them."""
    inst = cluster.instance_index[mv.instance]
    name = mv.instance
    if not inst.mirrored:
        verb = "migrate" if inst.externally_mirrored else "move"
        return [f"gnt-instance {verb} -f -n {mv.target} {name}"]
    failover = f"gnt-instance migrate -f {name}"
    p, s, a, b = mv.source, mv.old_secondary, mv.target, mv.secondary
    if (a, b) == (s, p):
        return [failover]
    if a == p:
        return [f"gnt-instance replace-disks -n {b} {name}"]
    if a == s:
        return [failover, f"gnt-instance replace-disks -n {b} {name}"]
    if b == p:
        return [f"gnt-instance replace-disks -n {a} {name}", failover]
    return [failover, f"gnt-instance replace-disks -n {a} {name}", failover]


def format_jobs(cluster: Cluster, jobsets: Sequence[Sequence[Migration]]) -> str:
    """htools' `formatCmds`: an empty line and `echo jobset` per jobset, `check` per job."""
    lines: list[str] = []
    for jsn, js in enumerate(jobsets, 1):
        for sn, mv in enumerate(js, 1):
            if sn == 1:
                lines += ["", f"echo jobset {jsn}, {len(js)} jobs"]
            lines += [f"  echo job {jsn}/{sn}", "  check"]
            lines += ["  " + cmd for cmd in move_commands(cluster, mv)]
    return "".join(line + "\n" for line in lines)


def squeezed_cluster(
    state: ClusterState, off: Sequence[str], on: Sequence[str], moves: Sequence[Migration]
) -> Cluster:
    """The cluster after the plan; reported free memory and disk follow the moved instances."""
    after = state.powered(off=off, on=on)
    for mv in moves:
        after = after.relocated(
            mv.instance, mv.target, mv.secondary or after.location(mv.instance)[1]
        )
    return after.snapshot()


# -- the report --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SqueezeReport:
    """What `exalloc squeeze` prints, in hsqueeze's forms, plus the solver figures."""

    mode: str  # "offline", "online" or "none"
    nodes: tuple[str, ...]
    moves: tuple[Migration, ...]
    jobsets: tuple[tuple[Migration, ...], ...]
    offline_candidates: tuple[str, ...]
    online_candidates: tuple[str, ...]
    status: str
    objective: tuple[float | None, ...]
    bound: tuple[float | None, ...]
    gap: tuple[float | None, ...]
    stage_names: tuple[str, ...]
    build_s: float
    solve_s: float
    method: str
    verbose: int = 1
    no_headers: bool = False
    commands: str | None = None  # the command script body (None without -C)
    commands_file: str | None = None
    not_enough_capacity: bool = False
    checker: dict[str, Any] = field(default_factory=dict)
    exit_code: int = 0

    def text(self) -> str:
        out: list[str] = []
        if self.verbose > 1:
            out.append("Offline candidates: " + ",".join(self.offline_candidates))
            out.append("Online candidates: " + ",".join(self.online_candidates))
        header = {"offline": "'Nodes to offline'", "online": "'Nodes to online'"}.get(
            self.mode, "'No action'"
        )
        if not self.no_headers:
            out.append(header)
        out += list(self.nodes)
        if self.verbose > 1 and self.not_enough_capacity:
            out.append("Onlining all nodes will not yield enough capacity")
        if self.commands is not None:
            if self.commands_file is None:
                out += ["", "Commands to run:"]
                out += ["  " + line for line in self.commands.splitlines() if line != "  check"]
            else:
                out.append(f"The commands have been written to file '{self.commands_file}'")
        return "\n".join(out) + "\n"

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "nodes": list(self.nodes),
            "moves": [_move_json(m) for m in self.moves],
            "status": self.status,
            "objective": list(self.objective),
            "bound": list(self.bound),
            "gap": list(self.gap),
            "build_s": self.build_s,
            "solve_s": self.solve_s,
            "stages": list(self.stage_names),
            "method": self.method,
            "jobsets": [[m.instance for m in js] for js in self.jobsets],
            "offline_candidates": list(self.offline_candidates),
            "online_candidates": list(self.online_candidates),
            "checker": self.checker,
        }


def _move_json(m: Migration) -> dict[str, str]:
    out = {"instance": m.instance, "from": m.source, "to": m.target}
    if m.secondary is not None:
        out["secondary_from"] = m.old_secondary or ""
        out["secondary"] = m.secondary
    return out


# -- the program -------------------------------------------------------------------------------


def _factor(value: float, option: str) -> float:
    if not math.isfinite(value) or value < 0:
        raise InputError(f"{option} must be a finite number >= 0, not {value!r}")
    return value


def _solve(built: Built, args: Any) -> Solution:
    if len(built.node_names) > DECOMPOSE_NODES and not built.problem.mirrored:
        return solve_decomposed(built, args)
    return solve_mip(built, args)


def plan(cluster: Cluster, args: Any) -> SqueezeReport:
    """Decide the mode, solve, check; everything `run` needs except file output."""
    f_min = _factor(args.minimal_resources, "--minimal-resources")
    f_target = _factor(args.target_resources, "--target-resources")
    state = node_states(cluster)
    std = cluster.cluster_policy.std
    min_probe, target_probe = probe_demand(std, f_min), probe_demand(std, f_target)
    off_cands = offline_candidates(cluster, args.move)
    on_cands = online_candidates(cluster)
    expand = not all(fits(st, min_probe) for st in state.nodes.values())
    not_enough = False
    if expand:
        probe = min_probe
        built = build_problem(cluster, state, EXPAND, probe, args.move, decided=on_cands)
        sol = _solve(built, args)
        if sol.status == "infeasible":
            not_enough = True
            built = build_problem(
                cluster,
                state,
                EXPAND,
                probe,
                args.move,
                decided=(),
                always_on=on_cands,
                soft_probe=True,
            )
            sol = _solve(built, args)
    else:
        probe = target_probe
        # candidates holding instances that may not move cannot be emptied
        fixed_nodes = {i.primary for i in cluster.instances if not movable(i, args.move)}
        decided = [n for n in off_cands if n not in fixed_nodes]
        built = build_problem(cluster, state, SHRINK, probe, args.move, decided=decided)
        sol = _solve(built, args)
    if not sol.on:
        if sol.status == "infeasible" and not expand:
            sol = replace(sol, on={}, y={})
        elif sol.status != "infeasible":
            raise SolverError(f"no plan found ({sol.status}); allow more time with --time-limit")

    names = built.node_names
    if expand:
        nodes = (
            on_cands if not_enough else [names[n] for n in built.problem.decided() if sol.on.get(n)]
        )
        off: list[str] = []
        on = list(nodes)
        mode = "online"
    else:
        freed = {names[n] for n in built.problem.decided() if sol.on and not sol.on[n]}
        nodes = [n for n in off_cands if n in freed]
        off, on = list(nodes), []
        mode = "offline" if nodes else "none"
    moves = migrations(cluster, built, sol) if (sol.on and (expand or nodes)) else []
    jobsets = order_moves(state.powered(off=off, on=on), moves)
    moves = [mv for js in jobsets for mv in js]

    report = check_squeeze(
        state,
        off,
        [Move(m.instance, m.target, m.secondary) for m in moves],
        probe,
        powered_on_nodes=on,
    )
    violations = _not_preexisting(cluster, report.violations, moves)
    if not_enough:  # the probe cannot fit everywhere: only the plan itself must hold
        violations = tuple(v for v in violations if v.kind != "probe")
    if violations and mode != "none":
        raise CheckFailedError("independent check failed: " + "; ".join(str(v) for v in violations))

    commands = None
    if args.print_commands is not None:
        if mode == "offline":
            commands = (
                format_jobs(cluster, jobsets)
                + "\necho Tagging Commands\n"
                + "".join(f"  gnt-node add-tags {n} {STANDBY_AUTO}\n" for n in nodes)
                + "\necho Power Commands\n"
                + "".join(f"  gnt-node power -f off {n}\n" for n in nodes)
            )
        elif mode == "online":
            commands = (
                "echo Power Commands\n"
                + "".join(f"  gnt-node power -f on {n}\n" for n in nodes)
                + format_jobs(cluster, jobsets)
            )
        else:
            commands = "echo Nothing to do"
    objective = sol.objective if (mode != "none" or sol.on) else ()
    return SqueezeReport(
        mode=mode,
        nodes=tuple(nodes),
        moves=tuple(moves),
        jobsets=tuple(tuple(js) for js in jobsets),
        offline_candidates=tuple(off_cands),
        online_candidates=tuple(on_cands),
        status=sol.status,
        objective=tuple(objective),
        bound=tuple(sol.bound),
        gap=tuple(sol.gap),
        stage_names=sol.names,
        build_s=sol.build_s,
        solve_s=sol.solve_s,
        method=sol.method,
        verbose=args.verbose,
        no_headers=args.no_headers,
        commands=commands,
        commands_file=None if args.print_commands in (None, "-") else args.print_commands,
        not_enough_capacity=not_enough,
        checker={"ok": not violations, "objectives": _jsonable(report.objectives)},
    )


def _not_preexisting(
    cluster: Cluster, violations: Sequence[Violation], moves: Sequence[Migration]
) -> tuple[Violation, ...]:
    """The checker's verdict minus what the plan did not cause: an instance that may not move
    and already sat on an offline node stays there (htools' hsqueeze then does nothing;
    the exact plan still frees what it can around it)."""
    moved = {m.instance for m in moves}
    offline = {n.name for n in cluster.nodes if n.offline}

    def preexisting(v: Violation) -> bool:
        return (
            v.kind in ("primary_offline", "secondary_offline")
            and v.instance is not None
            and v.instance not in moved
            and v.node in offline
        )

    return tuple(v for v in violations if not preexisting(v))


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (v if isinstance(v, (int, str)) or v is None else float(v)) for k, v in d.items()}


def run(args: Any) -> SqueezeReport:
    """`exalloc squeeze`: load, plan, then write the -S and -C files hsqueeze would write.

    The files are written only once the plan succeeded, together (model.files.write_files):
    a failing plan or an unwritable target leaves none of them behind."""
    cluster = load_text(args.text_data)
    report = plan(cluster, args)
    files: dict[str, str] = {}
    if report.commands is not None and report.commands_file is not None:
        files[report.commands_file] = SH_TEMPLATE + report.commands
    if args.save:
        off = report.nodes if report.mode == "offline" else ()
        on = report.nodes if report.mode == "online" else ()
        after = squeezed_cluster(node_states(cluster), off, on, report.moves)
        files[args.save + ".original"] = dump_text(cluster)
        files[args.save + ".squeezed"] = dump_text(after)
    write_files(files)
    if args.save:
        print(
            f"The cluster state before hsqueeze run has been written to file "
            f"'{args.save}.original'",
            file=sys.stderr,
        )
        print(
            f"The cluster state after hsqueeze run has been written to file '{args.save}.squeezed'",
            file=sys.stderr,
        )
    return report


# -- decomposition for very large clusters -----------------------------------------------------


def solve_decomposed(built: Built, args: Any) -> Solution:
    """Aggregate by node type, then pack each type with its own small MIP.

    1. The type aggregate (lexicographic: node count, then instances changing type) gives
       the bound on the node count and each type's number of powered-on nodes and instances
       of every shape.
    2. Within a type the nodes are interchangeable but for their content, so the ones with
       the most movable instances stay on; a per-type MIP without power variables then places
       the type's share with the fewest moves. If that packing does not fit (the aggregate
       pools capacity), the next node of the type is kept on as well.
    The first stage's gap is to the aggregate's bound.
    """
    t0 = time.perf_counter()
    problem = built.problem
    with Stopwatch() as sw:
        agg = build_type_aggregate(problem)
    agg_res = solve_lexicographic(
        agg,
        agg.stages,
        args.solver,
        time_limit=args.time_limit,
        threads=args.threads,
        build_s=sw.seconds,
    )
    names = ("nodes_freed" if problem.mode == SHRINK else "nodes_powered_on", "moves")
    if not agg_res.has_solution:
        return Solution(
            {},
            {},
            str(agg_res.status),
            (None, None),
            (None, None),
            (None, None),
            names,
            sw.seconds,
            agg_res.solve_s,
            "decomposed",
        )
    stage0 = agg_res.stages[0]
    bound = float(stage0.bound if stage0.bound is not None else stage0.objective)
    moves_bound = agg_res.bound[1] if len(agg_res.bound) > 1 else None
    types = agg.types
    share = {(s, t): int(round(agg.Y[s, t].value or 0)) for s in agg.S for t in agg.T}
    budget = args.time_limit if args.time_limit is not None else 110.0
    budget = max(budget - (time.perf_counter() - t0), 1.0)
    total_nodes = sum(len(ns) for ns in types)
    content: dict[int, int] = defaultdict(int)
    for sh in problem.shapes:
        for n, c in sh.counts:
            content[n] += c
    on: dict[int, bool] = {}
    y: dict[tuple[int, int], int] = {}
    build_s, solve_s, all_optimal = agg_res.build_s, agg_res.solve_s, True
    moves = float(sum(sh.homeless for sh in problem.shapes))
    for t, members in enumerate(types):
        fixed = [n for n in members if problem.nodes[n].state == "on"]
        free = sorted(
            (n for n in members if problem.nodes[n].state != "on"),
            key=lambda n: (-content[n], n),
        )
        k = int(round(agg.w[t].value or 0)) - len(fixed)
        limit = max(budget * len(members) / total_nodes, 1.0)
        res, keep, model = None, [], None
        if not fixed and k <= 0 and not any(share[s, t] for s in agg.S):
            for n in members:
                on[n] = False
                moves += content[n]
            continue
        while k <= len(free):
            keep = fixed + free[:k]
            res, model, sub_s = _pack_type(problem, keep, share, t, args, limit)
            build_s += sub_s
            solve_s += res.solve_s
            if res.has_solution:
                break
            k += 1
        if res is None or model is None or not res.has_solution:
            return Solution(
                {},
                {},
                "infeasible",
                (None, None),
                (bound, None),
                (None, None),
                names,
                build_s,
                solve_s,
                "decomposed",
            )
        all_optimal &= res.status is Status.OPTIMAL
        kept = set(keep)
        for n in members:
            on[n] = n in kept
            if n not in kept:
                moves += content[n]
        for j, n in enumerate(keep):
            for s in model.S:
                v = int(round(model.y[s, j].value or 0))
                if v:
                    y[s, n] = v
        moves += float(res.objective or 0.0)
    decided = problem.decided()
    if problem.mode == SHRINK:
        first = float(sum(1 for n in decided if not on[n]))
    else:
        first = float(sum(1 for n in decided if on[n]))
    gap = abs(first - bound) / max(abs(first), 1.0)
    status = "optimal" if gap <= 1e-9 and all_optimal else "feasible"
    moves_gap = None if moves_bound is None else abs(moves - moves_bound) / max(moves, 1.0)
    return Solution(
        on,
        y,
        status,
        (first, moves),
        (bound, moves_bound),
        (gap, moves_gap),
        names,
        build_s,
        solve_s,
        "decomposed",
    )


def _pack_type(
    problem: SqueezeProblem,
    keep: list[int],
    share: dict[tuple[int, int], int],
    t: int,
    args: Any,
    time_limit: float,
) -> tuple[SolveResult, pyo.ConcreteModel, float]:
    """Place type t's share of every shape on the kept nodes with the fewest moves."""
    local = {n: j for j, n in enumerate(keep)}
    shapes = []
    for s, sh in enumerate(problem.shapes):
        counts = tuple((local[n], c) for n, c in sh.counts if n in local)
        shapes.append(replace(sh, counts=counts, homeless=share[s, t] - sum(c for _, c in counts)))
    sub = SqueezeProblem(
        mode=problem.mode,
        nodes=tuple(replace(problem.nodes[n], state="on") for n in keep),
        shapes=tuple(shapes),
        fixed_tag_counts={
            (local[n], e): c for (n, e), c in problem.fixed_tag_counts.items() if n in local
        },
    )
    with Stopwatch() as sw:
        model = build_model(sub)
        moves = [o for o in objectives(model, sub) if o.name == "moves"]
        if moves:
            model.obj = pyo.Objective(expr=moves[0].expr, sense=pyo.minimize)
        else:
            model.obj = pyo.Objective(expr=model.util, sense=pyo.minimize)
    res = solve(
        model,
        args.solver,
        time_limit=time_limit,
        mip_gap=args.gap,
        threads=args.threads,
        build_s=sw.seconds,
    )
    if res.has_solution and not moves:
        res = replace(res, objective=0.0)
    return res, model, sw.seconds
