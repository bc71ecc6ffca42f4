"""`exalloc hail`: a drop-in Ganeti iallocator for dedicated (exclusive-storage) groups.

Pipeline: IAllocator request → hail's candidate screening (policy, strict `addPri`/`addSec`,
failure counts; spec §3, `Dedicated.hs`) → exact lexicographic MIP (`formulations/dedicated`)
→ independent checker (`model.check`) → hail's response JSON. allocate answers exactly as
hail does (same node(s), same info); multi-allocate places the whole batch jointly.
Requests hail would not handle with the dedicated algorithm get `success:false` saying so,
or, with $EXALLOC_HAIL_DELEGATE set, the real hail's answer. See docs/hail.md.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from formulations import batch as batch_form
from formulations import dedicated as form
from model.backends.iallocator import (
    AllocateRequest,
    IAllocatorInput,
    MultiAllocateRequest,
    format_failure_counts,
    load_request,
    multi_allocate_response,
    new_instance,
    parse_request,
    response_json,
)
from model.batch import BatchProblem, NewInstance, NodeData
from model.capacity import capacity_rows
from model.capacity import primary_usage as row_primary_usage
from model.capacity import secondary_usage as row_secondary_usage
from model.check import CheckReport, check_allocation
from model.cluster import Cluster, NodeGroup
from model.dedicated import format_metric, minimal_instances, vector_of
from model.dedicated import test_usage as row_test_usage
from model.errors import CheckFailedError, InputError, SolverError
from model.resources import (
    FailMode,
    InstanceDemand,
    NodeState,
    add_primary,
    add_secondary,
    demand_of,
    policy_shortfall,
)
from model.state import ClusterState, node_states
from programs import hail_client
from solvers import LexResult, Status, Stopwatch, solve_lexicographic

REAL_HAIL = Path(os.environ.get("EXALLOC_REAL_HAIL", "/usr/lib/ganeti/iallocators/hail"))


def real_hail() -> Path:
    """The real hail as the call's environment names it, looked up per call: a hail-server
    worker runs with the client's EXALLOC_* variables, not those it was started with."""
    return Path(os.environ.get("EXALLOC_REAL_HAIL", "/usr/lib/ganeti/iallocators/hail"))


POLICY_ORDER = {"preferred": 0, "last_resort": 1, "unallocable": 2}
NO_PRIMARY = ""  # a primary name no node has: the secondary's peer reservation is 0
DELEGATE_ENV = "EXALLOC_HAIL_DELEGATE"
# multi-allocate with drbd: rounds of adding shared (primary, secondary) pairs before the
# model sums the failover reservation on every pair
MAX_PAIR_ROUNDS = 4
REQUEST_TYPES = {
    "RelocateRequest": "relocate",
    "NodeEvacuateRequest": "node-evacuate",
    "ChangeGroupRequest": "change-group",
    "AllocateSecondaryRequest": "allocate-secondary",
}


# --------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SolverRun:
    """What the MIP said, for the info suffix and --json."""

    solver: str
    status: str
    gap: float | None
    build_s: float
    solve_s: float
    objective: tuple[float | None, ...] = ()
    names: tuple[str, ...] = ()

    @classmethod
    def of(cls, solver: str, lex: LexResult) -> SolverRun:
        gaps = [g for g in lex.gap if g is not None]
        return cls(
            solver=solver,
            status=str(lex.status),
            gap=max(gaps) if gaps else None,
            build_s=lex.build_s,
            solve_s=lex.solve_s,
            objective=lex.objective,
            names=lex.names,
        )

    def summary(self) -> str:
        gap = "gap 0" if not self.gap else f"gap {self.gap:.3g}"
        return f"{self.status}, {gap}"


@dataclass(frozen=True)
class GroupOutcome:
    """One group's answer to one instance, as hail's AllocSolution."""

    group: NodeGroup
    error: str | None = None  # hail's `Bad` for the group (network, no online nodes)
    failures: Counter = field(default_factory=Counter)
    successes: int = 0
    nodes: tuple[str, ...] = ()  # chosen primary [, secondary]
    lost: tuple[int, ...] = ()
    disk_mib: int = 0
    run: SolverRun | None = None

    @property
    def solved(self) -> bool:
        return bool(self.nodes)

    def description(self) -> str:
        """hail's `genericDescribeSolution` (without the `Group ...:` prefix)."""
        n_fail = sum(self.failures.values())
        reasons = format_failure_counts({str(k): v for k, v in self.failures.items()})
        if not self.solved:
            return "No valid allocation solutions, failure reasons: " + (
                reasons if n_fail else "unknown reasons"
            )
        return (
            f"score: {format_metric(self.lost, self.disk_mib)}, successes {self.successes}, "
            f"failures {n_fail} ({reasons}) for node(s) {'/'.join(self.nodes)}"
        )

    def message(self) -> str:
        """hail's `solutionDescription`: the group-prefixed line."""
        if self.error is not None:
            return f"Group {self.group.name}: error {self.error}"
        return f"Group {self.group.name} ({self.group.alloc_policy}): {self.description()}"


@dataclass(frozen=True)
class HailReport:
    """The response line plus what --json / --compare show; exit code 0 like hail."""

    response: str
    kind: str  # allocate | multi-allocate | unsupported
    placements: tuple[tuple[str, tuple[str, ...]], ...] = ()
    runs: tuple[SolverRun, ...] = ()
    objectives: Mapping[str, Any] = field(default_factory=dict)
    compare: Mapping[str, Any] | None = None
    exit_code: int = 0
    timing: Mapping[str, float] = field(default_factory=dict)  # load_s, answer_s (in process)

    def text(self) -> str:
        if self.compare is None:
            return self.response
        return compare_text(self)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "response": json.loads(self.response),
            "request": self.kind,
            "placements": {n: list(nodes) for n, nodes in self.placements},
            "solver": [r.__dict__ for r in self.runs],
            "objectives": _jsonable(self.objectives),
            "timing": dict(self.timing),
        }
        if self.compare is not None:
            out["compare"] = _jsonable(self.compare)
        return out


def _jsonable(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


# --------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    solver: str = "highs"
    time_limit: float | None = None
    gap: float = 0.0
    threads: int = 1


#: Every request is answered within a bound, even without --time-limit: Ganeti waits for its
#: iallocator, and no input may keep it waiting (docs/reliability.md, "Time"). The client and
#: the server share the number (programs.hail_client, which imports nothing heavy).
DEFAULT_TIME_LIMIT_S = hail_client.DEFAULT_TIME_LIMIT_S


def run(args: Any) -> HailReport:
    """CLI entry: `exalloc hail REQUEST.json [-t FILE] [--compare]`."""
    time_limit = getattr(args, "time_limit", None)
    opts = Options(
        solver=getattr(args, "solver", "highs"),
        time_limit=DEFAULT_TIME_LIMIT_S if time_limit is None else time_limit,
        gap=getattr(args, "gap", 0.0),
        threads=getattr(args, "threads", 1),
    )
    kvm = getattr(args, "static_kvm_node_memory", 4096)
    request_path = args.request
    text = None
    # the backend would be imported at the first solve; importing it here keeps the start-up
    # cost (highspy or ortools) out of the per-request timing
    importlib.import_module(f"solvers.{'cpsat' if opts.solver == 'cpsat' else 'highs'}_backend")
    start = time.perf_counter()
    if request_path == "-":
        text = sys.stdin.read()
        inp = parse_request(text, "<stdin>", static_kvm_node_memory=kvm)
    else:
        inp = load_request(request_path, static_kvm_node_memory=kvm)
    if getattr(args, "text_data", None):
        from model.backends.text import load_text

        inp = IAllocatorInput(load_text(args.text_data), inp.request, inp.enabled_hypervisors)
    loaded = time.perf_counter()
    report = answer(inp, opts)
    timing = {"load_s": loaded - start, "answer_s": time.perf_counter() - loaded}
    report = replace(report, timing=timing)
    if (
        report.kind == "unsupported"
        and os.environ.get(DELEGATE_ENV)
        and not getattr(args, "compare", False)
    ):
        report = delegated(report, request_path, text, args, kvm)
    if getattr(args, "compare", False):
        report = with_comparison(report, inp, request_path, text, args, kvm)
    return report


def answer(inp: IAllocatorInput, opts: Options = Options()) -> HailReport:
    """The exalloc answer to a parsed request (checked before it is returned)."""
    req = inp.request
    cluster = inp.cluster
    if isinstance(req, AllocateRequest):
        if not is_dedicated(cluster, req.group_name):
            return _unsupported("allocate on a group without exclusive storage")
        return allocate(cluster, req, opts)
    if isinstance(req, MultiAllocateRequest):
        names = {i.group_name for i in req.instances}
        group = names.pop() if len(names) == 1 else None
        if not is_dedicated(cluster, group):
            return _unsupported("multi-allocate on a group without exclusive storage")
        return multi_allocate(cluster, req, opts)
    kind = REQUEST_TYPES.get(type(req).__name__, type(req).__name__)
    return _unsupported(f"{kind} requests")


def _unsupported(what: str) -> HailReport:
    info = (
        f"exalloc handles only allocate and multi-allocate on dedicated (exclusive-storage) "
        f"groups yet, not {what}; use hail for it"
    )
    return HailReport(response_json(False, info, []), "unsupported")


def delegated(
    report: HailReport, request_path: str, text: str | None, args: Any, kvm: int
) -> HailReport:
    """With $EXALLOC_HAIL_DELEGATE set, requests exalloc does not handle go to the real hail
    and its answer is printed unchanged: `exalloc-hail` can then be a cluster's only
    iallocator (exact for dedicated allocations, hail for everything else)."""
    extra = ["--static-kvm-node-memory", str(kvm)]
    if getattr(args, "text_data", None):
        extra += ["-t", str(args.text_data)]
    real = _real_hail_on(request_path, text, extra)
    line = json.dumps(real["response"], separators=(",", ":"), ensure_ascii=False)
    return replace(report, response=line, kind="delegated")


def is_dedicated(cluster: Cluster, group_name: str | None) -> bool:
    """`Dedicated.isDedicated`: every node of the requested (or every allocatable) group has
    exclusive storage; vacuously true for an empty cluster."""
    if group_name is None:
        wanted = {g.uuid for g in cluster.groups if g.alloc_policy != "unallocable"}
    else:
        wanted = {g.uuid for g in cluster.groups if g.name == group_name}
    return all(n.exclusive_storage for n in cluster.nodes if n.group_uuid in wanted)


# --------------------------------------------------------------------------------------
# candidate screening (hail's enumeration, with failure counts)
# --------------------------------------------------------------------------------------


def _networks_ok(group: NodeGroup, inst_nics: Sequence[Mapping[str, Any]]) -> bool:
    return all(nic.get("network") in (None, *group.networks) for nic in inst_nics)


@dataclass(frozen=True)
class Screen:
    """Every candidate of one group for one instance, as hail enumerates them."""

    group: NodeGroup
    error: str | None
    tests: tuple[InstanceDemand, ...]
    candidates: tuple[str, ...]  # online nodes of the group, in index order
    primary: Mapping[str, NodeState | FailMode]  # after addPri, or its failure
    secondary: Mapping[str, NodeState | FailMode]  # after addSec with no peer reservation
    secondary_with: Mapping[str, Mapping[str, NodeState | FailMode]]  # s -> p -> after
    failures: Counter
    successes: int


def screen(
    states: ClusterState,
    group: NodeGroup,
    d: InstanceDemand,
    required_nodes: int,
    nics: Sequence[Mapping[str, Any]],
    restrict: Sequence[str] | None = None,
) -> Screen:
    """Policy check, strict addPri (and addSec) per candidate, hail's failure counting."""
    cluster = states.cluster
    tests = minimal_instances(group.ipolicy)
    if not _networks_ok(group, nics):
        msg = f"The group {group.name} is not connected to a network required by instance {d.name}"
        return Screen(group, msg, tests, (), {}, {}, {}, Counter(), 0)
    cands = tuple(
        n.name
        for n in cluster.nodes
        if n.group_uuid == group.uuid and not n.offline and (restrict is None or n.name in restrict)
    )
    if required_nodes not in (1, 2):
        return Screen(
            group,
            "Unsupported number of nodes, only one or two  supported",
            tests,
            (),
            {},
            {},
            {},
            Counter(),
            0,
        )
    if required_nodes == 1 and not cands:
        return Screen(group, "No online nodes", tests, (), {}, {}, {}, Counter(), 0)
    if required_nodes == 2 and len(cands) < 2:
        return Screen(group, "Not enough online nodes", tests, (), {}, {}, {}, Counter(), 0)
    failures: Counter = Counter()
    primary: dict[str, NodeState | FailMode] = {}
    # the policy verdict depends on the node only through its exclusive-storage flag
    verdict = {e: policy_shortfall(d, group.ipolicy, e) for e in (False, True)}
    for p in cands:
        st = states.nodes[p]
        fail = verdict[st.exclusive_storage]
        primary[p] = fail if fail is not None else add_primary(st, d)
    if required_nodes == 1:
        for p in cands:
            if isinstance(primary[p], FailMode):
                failures[primary[p]] += 1
        ok = sum(1 for p in cands if not isinstance(primary[p], FailMode))
        return Screen(group, None, tests, cands, primary, {}, {}, failures, ok)
    secondary: dict[str, NodeState | FailMode] = {}
    secondary_with: dict[str, dict[str, NodeState | FailMode]] = {}
    cand_set = set(cands)
    for s in cands:
        st = states.nodes[s]
        secondary[s] = add_secondary(st, d, NO_PRIMARY)
        special = {p: add_secondary(st, d, p) for p, _ in st.peers if p in cand_set and p != s}
        if special:
            secondary_with[s] = special
    # count pairs (p, s), p != s, without enumerating all of them
    generic = Counter(
        (v if isinstance(v, FailMode) else None) for v in secondary.values()
    )  # None counts successes
    reserved_for: dict[str, list[str]] = {}  # p -> secondaries holding a reservation for p
    for s, special in secondary_with.items():
        for p in special:
            reserved_for.setdefault(p, []).append(s)
    successes = 0
    n_other = len(cands) - 1
    for p in cands:
        if isinstance(primary[p], FailMode):
            failures[primary[p]] += n_other
            continue
        per = generic.copy()
        own = secondary[p]
        per[own if isinstance(own, FailMode) else None] -= 1
        for s in reserved_for.get(p, ()):
            g, sp = secondary[s], secondary_with[s][p]
            per[g if isinstance(g, FailMode) else None] -= 1
            per[sp if isinstance(sp, FailMode) else None] += 1
        successes += per.pop(None, 0)
        failures.update({k: v for k, v in per.items() if v})
    return Screen(
        group, None, tests, cands, primary, secondary, secondary_with, failures, successes
    )


def _lost(before: tuple[int, ...], after: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(b - a for b, a in zip(before, after, strict=True))


# --------------------------------------------------------------------------------------
# allocate
# --------------------------------------------------------------------------------------


def solve_group(
    states: ClusterState, sc: Screen, d: InstanceDemand, drbd: bool, opts: Options
) -> GroupOutcome:
    """The exact choice within one group: build_single → lexicographic solve."""
    if sc.error is not None:
        return GroupOutcome(sc.group, error=sc.error)
    if sc.successes == 0:
        return GroupOutcome(sc.group, failures=sc.failures)
    rank = {n.name: i for i, n in enumerate(states.cluster.nodes)}
    tests = sc.tests

    vec = vector_of(tests)
    cands = []
    for n in sc.candidates:
        st = states.nodes[n]
        before = vec(st)
        p_after = sc.primary.get(n)
        s_after = sc.secondary.get(n)
        with_p = {
            p: (None if isinstance(v, FailMode) else _lost(before, vec(v)))
            for p, v in sc.secondary_with.get(n, {}).items()
        }
        cands.append(
            form.SingleCandidate(
                name=n,
                rank=rank[n],
                group=sc.group.uuid,
                primary_lost=None if isinstance(p_after, FailMode) else _lost(before, vec(p_after)),
                primary_disk_mib=0 if isinstance(p_after, FailMode) else p_after.free_disk_mib,
                secondary_lost=(
                    None
                    if s_after is None or isinstance(s_after, FailMode)
                    else _lost(before, vec(s_after))
                ),
                secondary_disk_mib=(
                    0 if s_after is None or isinstance(s_after, FailMode) else s_after.free_disk_mib
                ),
                secondary_lost_with=with_p,
            )
        )
    problem = form.SingleProblem(tuple(cands), len(tests), drbd)
    with Stopwatch() as sw:
        m = form.build_single(problem)
    lex = solve_lexicographic(
        m,
        form.single_objectives(m, problem),
        solver=opts.solver,
        time_limit=opts.time_limit,
        mip_gap=opts.gap,
        threads=opts.threads,
        build_s=sw.seconds,
    )
    run_ = SolverRun.of(opts.solver, lex)
    if not lex.has_solution:
        raise SolverError(
            f"group {sc.group.name}: {sc.successes} valid placement(s) exist but the solver "
            f"stopped with {lex.status} (raise --time-limit?)"
        )
    p, s = form.single_solution(m, problem)
    by = {c.name: c for c in cands}
    lost = by[p].primary_lost
    disk = by[p].primary_disk_mib
    if s is not None:
        sl = by[s].secondary_lost_with.get(p, by[s].secondary_lost)
        if sl is None:
            raise CheckFailedError(f"solver chose the failing pair {p}/{s}")
        lost = tuple(a + b for a, b in zip(lost, sl, strict=True))
        disk += by[s].secondary_disk_mib
    claimed = form.single_lost_claim(problem, lex.objective)
    if lex.status == Status.OPTIMAL and claimed != lost:
        raise CheckFailedError(f"solver claims lost {claimed}, the pair gives {lost}")
    return GroupOutcome(
        sc.group,
        failures=sc.failures,
        successes=sc.successes,
        nodes=(p,) if s is None else (p, s),
        lost=lost,
        disk_mib=disk,
        run=run_,
    )


def _groups_with_nodes(cluster: Cluster) -> list[NodeGroup]:
    used = {n.group_uuid for n in cluster.nodes}
    return [g for g in cluster.groups if g.uuid in used]


def _find_group(cluster: Cluster, name: str) -> NodeGroup | None:
    found = [g for g in cluster.groups if g.name == name]
    return found[0] if len(found) == 1 else None


def best_group(outcomes: Sequence[GroupOutcome]) -> GroupOutcome | None:
    """hail's filterMGResults + sortMGResults: (policy, metric), ties to the later group."""
    good = [
        o
        for o in outcomes
        if o.error is None and o.solved and o.group.alloc_policy != "unallocable"
    ]
    good.reverse()
    good.sort(key=lambda o: (POLICY_ORDER.get(o.group.alloc_policy, 3), (list(o.lost), o.disk_mib)))
    return good[0] if good else None


def allocate_one(
    states: ClusterState,
    d: InstanceDemand,
    required_nodes: int,
    nics: Sequence[Mapping[str, Any]],
    group_name: str | None,
    restrict: Sequence[str] | None,
    opts: Options,
) -> tuple[GroupOutcome | None, str, list[GroupOutcome]]:
    """hail's findAllocation / findMGAllocation: (winner or None, info, every group)."""
    cluster = states.cluster
    drbd = required_nodes == 2
    if group_name is not None:
        group = _find_group(cluster, group_name)
        if group is None:
            return None, f"Wrong number of elems found with name {group_name}", []
        sc = screen(states, group, d, required_nodes, nics, restrict)
        if sc.error is not None:  # hail's `fail` inside findAllocation: the bare message
            return None, sc.error, []
        out = solve_group(states, sc, d, drbd, opts)
        if out.solved and group.alloc_policy == "unallocable":
            # hail places into an unallocable group when it is named; the checker (and
            # Ganeti's policy) forbid it, so exalloc reports hail's message and declines
            why = f"group {group.name} is unallocable; exalloc does not place instances there"
            return None, f"{out.message()}, {why}", [out]
        return (out if out.solved else None), out.message(), [out]
    outcomes = [
        solve_group(states, screen(states, g, d, required_nodes, nics, restrict), d, drbd, opts)
        for g in _groups_with_nodes(cluster)
    ]
    messages = [o.message() for o in outcomes]
    best = best_group(outcomes)
    if best is None:
        return None, ", ".join(messages), outcomes
    return best, ", ".join([f"Selected group: {best.group.name}", *messages]), outcomes


def _suffix(runs: Sequence[SolverRun], note: str = "") -> str:
    if not runs:
        return ""
    worst = next((r for r in runs if r.status != "optimal"), runs[0])
    return f" [exalloc {worst.solver}: {worst.summary()}{note}]"


def allocate(cluster: Cluster, req: AllocateRequest, opts: Options = Options()) -> HailReport:
    if req.name in cluster.instance_index:
        raise InputError(f"allocate: an instance named {req.name} already exists in the cluster")
    states = node_states(cluster)
    inst = new_instance(req)
    d = demand_of(inst, states.rules)
    best, info, outcomes = allocate_one(
        states, d, req.required_nodes, req.nics, req.group_name, req.restrict_to_nodes, opts
    )
    runs = tuple(o.run for o in outcomes if o.run is not None)
    if best is None:
        return HailReport(response_json(False, info, []), "allocate", runs=runs)
    p, s = best.nodes[0], (best.nodes[1] if len(best.nodes) > 1 else None)
    report = check_local(states, [(inst, p, s)])
    report.raise_if_failed()
    metric = report.objectives["placement_metrics"][0]
    if (tuple(metric[0]), metric[1]) != (best.lost, best.disk_mib):
        raise CheckFailedError(
            f"checker computes metric {format_metric(*metric)} for {'/'.join(best.nodes)}, "
            f"the model claims {format_metric(best.lost, best.disk_mib)}"
        )
    return HailReport(
        response_json(True, info + _suffix(runs), list(best.nodes)),
        "allocate",
        placements=((req.name, best.nodes),),
        runs=runs,
        objectives=_objectives(report.objectives),
    )


def check_local(states: ClusterState, placements: Sequence[tuple]) -> CheckReport:
    """The independent checker on the nodes the answer uses.

    Every check of a placement (policy, strict addPri/addSec, node usability) and the lost
    allocations only involve the nodes it uses, so the verdict is the checker's on the whole
    cluster; leaving the other nodes out skips the cluster-wide vector sums and score, which
    cost a second at 1 000 nodes.
    """
    used = {n for _, p, s in placements for n in (p, s) if n is not None}
    view = replace(states, nodes={n: st for n, st in states.nodes.items() if n in used})
    return check_allocation(view, placements)


def _objectives(obj: Mapping[str, Any]) -> dict[str, Any]:
    keys = (
        "lost_allocations_total",
        "remaining_disk_mib",
        "allocation_vector_before",
        "allocation_vector_after",
        "placement_metrics",
    )
    return {k: obj[k] for k in keys if k in obj}


# --------------------------------------------------------------------------------------
# multi-allocate: the joint model
# --------------------------------------------------------------------------------------


def _node_data(states: ClusterState, name: str, rank: int) -> NodeData:
    st = states.nodes[name]
    group = states.cluster.group_of(states.cluster.node(name))
    tests = minimal_instances(group.ipolicy)
    rows = capacity_rows(st)
    return NodeData(
        name=name,
        rank=rank,
        group=group.uuid,
        rows=rows,
        reserve_mib=st.reserved_memory_mib,
        peers_mib=dict(st.peers),
        free_disk_mib=st.free_disk_mib,
        before=vector_of(tests)(st),
        test_usage=tuple({r.kind: row_test_usage(r.kind, t) for r in rows} for t in tests),
        fails_n1=st.fail_n1,
        unallocated_mib=st.unallocated_memory_mib,
        free_memory_forth_mib=st.free_memory_forth_mib,
    )


def interchangeable(data: Mapping[str, NodeData], instances: tuple[NewInstance, ...]) -> set[str]:
    """The nodes the batch model needs.

    Two nodes are interchangeable when they have the same group, capacities, reserve, counts
    and candidacy for every instance, and no drbd failover reservation names them: swapping
    their loads changes no constraint and no objective. A batch of J instances uses at most
    J (2J with drbd) nodes of a class, so the rest of the class is left out: exact, and it
    removes most of the symmetry of homogeneous dedicated groups. (Ordering the loads within
    a class as well made HiGHS much slower to find full batches, so that is not done.)
    """
    drbd = any(i.drbd for i in instances)
    named = {p for d in data.values() for p in d.peers_mib} if drbd else set()
    prim = [set(i.primaries) for i in instances]
    sec = [set(i.secondaries) for i in instances]
    per_class: dict[tuple, list[str]] = {}
    for n, d in data.items():
        key = (
            d.group,
            d.rows,
            d.reserve_mib,
            tuple(sorted(d.peers_mib.items())) if drbd else (),
            d.fails_n1,
            d.unallocated_mib,
            d.free_memory_forth_mib,
            d.free_disk_mib,
            d.before,
            tuple(tuple(sorted(t.items())) for t in d.test_usage),
            tuple(n in p for p in prim),
            tuple(n in s for s in sec),
            n if n in named else "",
        )
        per_class.setdefault(key, []).append(n)
    limit = sum(i.count for i in instances) * (2 if drbd else 1)
    kept: set[str] = set()
    for members in per_class.values():
        kept.update(sorted(members, key=lambda n: data[n].rank)[:limit])
    return kept


def multi_allocate(
    cluster: Cluster, req: MultiAllocateRequest, opts: Options = Options()
) -> HailReport:
    """Place the batch jointly: most instances, then the least lost-allocations vector,
    then the least remaining disk on the nodes used."""
    states = node_states(cluster)
    group_name = req.group_name
    if group_name is not None:
        g = _find_group(cluster, group_name)
        if g is None:
            return HailReport(
                response_json(False, f"Wrong number of elems found with name {group_name}", []),
                "multi-allocate",
            )
        if g.alloc_policy == "unallocable":  # hail would still use it (see allocate_one)
            why = f"group {g.name} is unallocable; exalloc does not place instances there"
            info, result = multi_allocate_response([], [(r.name, why) for r in req.instances])
            return HailReport(response_json(True, info, result), "multi-allocate")
        groups = [g]
    else:
        groups = [g for g in _groups_with_nodes(cluster) if g.alloc_policy != "unallocable"]
    demands = []
    new_instances: list[NewInstance] = []
    failed_alone: dict[str, str] = {}
    # identical plain instances become one kind with a count (no symmetry among them)
    kind_of: dict[tuple, str] = {}
    twin_of: dict[tuple, str] = {}  # drbd: the last instance of each identical kind
    members: dict[str, list[str]] = {}
    row_kinds = sorted({r.kind for n in cluster.nodes for r in capacity_rows(states.nodes[n.name])})
    existing = {i.name for i in cluster.instances}
    seen = set(existing)
    for r in req.instances:
        inst = new_instance(r)
        d = demand_of(inst, states.rules)
        demands.append((r, inst, d))
        if r.name in seen:
            where = "already exists in the cluster" if r.name in existing else "is used twice"
            raise InputError(f"multi-allocate: instance name {r.name} {where}")
        seen.add(r.name)
        prims: list[str] = []
        secs: list[str] = []
        forbidden: set[tuple[str, str]] = set()
        fails: Counter = Counter()
        errors: list[str] = []
        for g in groups:
            sc = screen(states, g, d, r.required_nodes, r.nics)
            if sc.error is not None:
                errors.append(f"Group {g.name}: error {sc.error}")
                continue
            fails.update(sc.failures)
            if sc.successes == 0:
                continue
            prims += [p for p in sc.candidates if not isinstance(sc.primary[p], FailMode)]
            if r.required_nodes == 2:
                secs += [
                    s
                    for s in sc.candidates
                    if s in sc.secondary and not isinstance(sc.secondary[s], FailMode)
                ]
                for s, special in sc.secondary_with.items():
                    forbidden |= {(p, s) for p, v in special.items() if isinstance(v, FailMode)}
        if not prims or (r.required_nodes == 2 and not secs):
            reasons = format_failure_counts({str(k): v for k, v in fails.items()})
            msg = "No valid allocation solutions, failure reasons: " + (
                reasons if reasons else "unknown reasons"
            )
            failed_alone[r.name] = ", ".join([*errors, msg]) if errors and not reasons else msg
            continue
        drbd = r.required_nodes == 2
        key = (replace(d, name=""), tuple(prims), tuple(secs), frozenset(forbidden))
        same_as = twin_of.get(key) if drbd else None
        twin_key = key
        if drbd or d.exclusion_tags:  # one kind each: drbd twins are ordered instead, and
            key = (r.name,)  # exclusion tags are checked in request order
        if key in kind_of:
            kind = kind_of[key]
            members[kind].append(r.name)
            i = next(k for k, x in enumerate(new_instances) if x.name == kind)
            new_instances[i] = replace(new_instances[i], count=new_instances[i].count + 1)
            continue
        kind = kind_of[key] = f"kind-{len(kind_of)}"
        members[kind] = [r.name]
        if drbd:
            twin_of[twin_key] = kind
        new_instances.append(
            NewInstance(
                name=kind,
                drbd=drbd,
                primary_usage={k: row_primary_usage(k, d) for k in row_kinds},
                secondary_usage={k: row_secondary_usage(k, d) for k in row_kinds},
                failover_mib=d.secondary_memory_mib if r.required_nodes == 2 else 0,
                primaries=tuple(prims),
                secondaries=tuple(secs),
                forbidden_pairs=frozenset(forbidden),
                exclusion_tags=d.exclusion_tags,
                forthcoming=d.forthcoming,
                same_as=same_as,
                order=len(demands) - 1,
            )
        )
    rank = {n.name: i for i, n in enumerate(cluster.nodes)}
    wanted = {g.uuid for g in groups}
    node_names = [n.name for n in cluster.nodes if n.group_uuid in wanted and not n.offline]
    runs: tuple[SolverRun, ...] = ()
    chosen: dict[str, tuple[str, str | None]] = {}
    claimed: tuple[int, ...] | None = None
    claimed_disk = 0
    # drbd: a batch that shares a pair the model was not exact on (kept for when time runs out)
    earlier: dict[str, list[tuple[str, str | None]]] | None = None
    if new_instances:
        with Stopwatch() as sw:
            data = {n: _node_data(states, n, rank[n]) for n in node_names}
            kept = interchangeable(data, tuple(new_instances))
            pruned = tuple(
                replace(
                    i,
                    primaries=tuple(n for n in i.primaries if n in kept),
                    secondaries=tuple(n for n in i.secondaries if n in kept),
                )
                for i in new_instances
            )
            nodes = tuple(data[n] for n in node_names if n in kept)
            last = frozenset(
                n.name
                for n in cluster.nodes
                if cluster.group_of(n).alloc_policy == "last_resort" and n.name in kept
            )
        # drbd: start with one new instance per (primary, secondary) pair and add the pairs a
        # solution shares until it shares none it was not exact on (a few rounds at most).
        # A round's lexicographic optimum bounds the next, tighter model's: that model is first
        # asked only whether it reaches the same values (a feasibility question, usually much
        # faster than the proofs); only if it cannot is it solved in full.
        shared: frozenset[tuple[str, str]] | None = frozenset()
        target: tuple[float, ...] | None = None
        build_s, solve_s = sw.seconds, 0.0
        deadline = None if opts.time_limit is None else time.perf_counter() + opts.time_limit

        def solve_batch(m: Any, objs: list) -> Any:
            nonlocal solve_s
            left = None if deadline is None else max(deadline - time.perf_counter(), 0.5)
            lex = solve_lexicographic(
                m,
                objs,
                solver=opts.solver,
                time_limit=left,
                mip_gap=opts.gap,
                threads=opts.threads,
                build_s=build_s,
            )
            solve_s += lex.solve_s
            return lex

        for attempt in range(MAX_PAIR_ROUNDS + 1):
            with Stopwatch() as sw:
                problem = BatchProblem(nodes, pruned, last_resort=last, shared_pairs=shared)
                m = batch_form.build_batch(problem)
            build_s += sw.seconds
            objs = form.batch_objectives(m, problem)
            if target is not None:
                batch_form.pin_objectives(m, objs, target)
                lex = solve_batch(m, objs)
                batch_form.unpin_objectives(m)
                if lex.status != Status.OPTIMAL:  # the values are out of reach: solve in full
                    lex = solve_batch(m, objs)
            else:
                lex = solve_batch(m, objs)
            if not lex.has_solution:
                if earlier is None:
                    raise SolverError(
                        f"multi-allocate: the solver stopped with {lex.status} before finding "
                        f"any batch (raise --time-limit?)"
                    )
                runs = (replace(runs[0], build_s=build_s, solve_s=solve_s),)
                break  # out of time: the earlier round's batch, if the checker accepts it
            runs = (replace(SolverRun.of(opts.solver, lex), build_s=build_s, solve_s=solve_s),)
            earlier = None
            if shared is None:
                break
            missing = batch_form.shared_pairs_used(m) - shared
            if not missing:
                break
            shared = None if attempt + 1 == MAX_PAIR_ROUNDS else shared | missing
            complete = lex.status == Status.OPTIMAL and len(lex.objective) == len(objs)
            target = tuple(float(v) for v in lex.objective) if complete else None
            earlier = batch_form.batch_solution(m, problem)
            runs = (replace(runs[0], status=str(Status.FEASIBLE)),)  # until a round is exact
        chosen = {
            name: where
            for kind, spots in (
                batch_form.batch_solution(m, problem) if earlier is None else earlier
            ).items()
            for name, where in zip(members[kind], spots, strict=False)
        }
        if earlier is None and lex.status == Status.OPTIMAL and len(lex.objective) == len(objs):
            claimed = tuple(
                int(round(v))
                for name, v in zip(lex.names, lex.objective, strict=True)
                if name.startswith("lost_")
            )
            claimed_disk = int(round(lex.objective[-1]))
    kept_greedy = False
    if runs and runs[0].status != str(Status.OPTIMAL):
        # not proven: hail's one-by-one batch may still be better than the best found
        greedy = greedy_batch(states, demands, req.group_name, opts)
        if greedy is not None and _batch_key(states, demands, greedy, last) < _batch_key(
            states, demands, chosen, last
        ):
            chosen, earlier, claimed, kept_greedy = greedy, None, None, True
    placements = []
    allocated: list[tuple[str, list[str]]] = []
    failed: list[tuple[str, str]] = []
    n_alone_ok = sum(i.count for i in new_instances)
    for r, inst, _d in demands:
        if r.name in chosen:
            p, s = chosen[r.name]
            placements.append((inst, p, s))
            allocated.append((r.name, [p] if s is None else [p, s]))
        elif r.name in failed_alone:
            failed.append((r.name, failed_alone[r.name]))
        else:
            failed.append(
                (
                    r.name,
                    f"No joint placement leaves room for it: exalloc places at most "
                    f"{len(chosen)} of the {n_alone_ok} instances that fit alone",
                )
            )
    report = check_local(states, placements)
    if not report.ok and earlier is not None:
        raise SolverError(
            "multi-allocate: out of time before a batch the model is exact on; the last one "
            "found shares a drbd pair beyond its failover memory (raise --time-limit?)"
        )
    report.raise_if_failed()
    got = tuple(report.objectives["lost_allocations_total"])
    if claimed is not None and placements:
        got_padded = got + (0,) * (len(claimed) - len(got))
        if got_padded != claimed or report.objectives["remaining_disk_mib"] != claimed_disk:
            raise CheckFailedError(
                f"checker computes lost {got} and remaining disk "
                f"{report.objectives['remaining_disk_mib']}, the model claims {claimed} and "
                f"{claimed_disk}"
            )
    info, result = multi_allocate_response(allocated, failed)
    note = "; kept the one-by-one batch, better than the best found" if kept_greedy else ""
    return HailReport(
        response_json(True, info + _suffix(runs, note), result),
        "multi-allocate",
        placements=tuple((n, tuple(nodes)) for n, nodes in allocated),
        runs=runs,
        objectives=_objectives(report.objectives),
    )


def greedy_batch(
    states: ClusterState, demands: Sequence[tuple], group_name: str | None, opts: Options
) -> dict[str, tuple[str, str | None]] | None:
    """hail's way with a batch: each instance in request order gets hail's own choice (the
    exact single allocate) on the cluster as the ones before it left it; an instance that
    fits nowhere is skipped. A time-limited joint solve is compared with it. None when a
    single allocate itself runs out of time."""
    chosen: dict[str, tuple[str, str | None]] = {}
    for r, _inst, d in demands:
        try:
            best, _, _ = allocate_one(states, d, r.required_nodes, r.nics, group_name, None, opts)
        except SolverError:
            return None
        if best is None:
            continue
        p, s = best.nodes[0], (best.nodes[1] if len(best.nodes) > 1 else None)
        placed = states.place(d, p, s)
        if isinstance(placed, FailMode):
            continue
        states = placed
        chosen[r.name] = (p, s)
    return chosen


def _batch_key(
    states: ClusterState,
    demands: Sequence[tuple],
    chosen: Mapping[str, tuple[str, str | None]],
    last_resort: frozenset[str],
) -> tuple:
    """The joint objective, recomputed by the checker: (−placed, instances on last-resort
    groups, lost vector, remaining disk); a batch the checker rejects ranks last."""
    placements = [(inst, *chosen[r.name]) for r, inst, _ in demands if r.name in chosen]
    report = check_local(states, placements)
    if not report.ok:
        return (1,)
    on_last = sum(1 for _, p, _ in placements if p in last_resort)
    obj = report.objectives
    lost = tuple(obj["lost_allocations_total"])
    return (-len(placements), on_last, lost, obj["remaining_disk_mib"])


# --------------------------------------------------------------------------------------
# --compare: the real hail beside exalloc
# --------------------------------------------------------------------------------------


def run_real_hail(request_file: str | os.PathLike[str], extra: Sequence[str] = ()) -> dict:
    """Run the real hail; its parsed response plus wall time (raises InputError if absent)."""
    hail = real_hail()
    if not hail.exists():
        raise InputError(f"--compare needs the real hail at {hail} (EXALLOC_REAL_HAIL)")
    start = time.perf_counter()
    proc = subprocess.run(
        [str(hail), *extra, str(request_file)], capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0 or not proc.stdout.strip():
        raise InputError(f"real hail failed (exit {proc.returncode}): {proc.stderr.strip()}")
    return {"response": json.loads(proc.stdout), "wall_s": wall, "stderr": proc.stderr}


def _real_hail_on(request_path: str, text: str | None, extra: Sequence[str]) -> dict:
    """run_real_hail on the request file, or on a copy of what was read from stdin."""
    if text is None:
        return run_real_hail(request_path, extra)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write(text)
    try:
        return run_real_hail(f.name, extra)
    finally:
        os.unlink(f.name)


def hail_placements(inp: IAllocatorInput, response: Mapping[str, Any]) -> list[tuple]:
    """hail's answer as checker placements (instance, primary, secondary), request order."""
    req = inp.request
    if not response.get("success"):
        return []
    if isinstance(req, AllocateRequest):
        nodes = response["result"]
        return [(new_instance(req), nodes[0], nodes[1] if len(nodes) > 1 else None)]
    if isinstance(req, MultiAllocateRequest):
        where = {name: nodes for name, nodes in response["result"][0]}
        out = []
        for r in req.instances:
            if r.name in where:
                nodes = where[r.name]
                out.append((new_instance(r), nodes[0], nodes[1] if len(nodes) > 1 else None))
        return out
    return []


def with_comparison(
    report: HailReport,
    inp: IAllocatorInput,
    request_path: str,
    text: str | None,
    args: Any,
    kvm: int,
) -> HailReport:
    extra = ["--static-kvm-node-memory", str(kvm)]
    if getattr(args, "text_data", None):
        extra += ["-t", str(args.text_data)]
    real = _real_hail_on(request_path, text, extra)
    states = node_states(inp.cluster)
    ours = [
        (new_instance(r), *(list(nodes) + [None])[:2])
        for r in _requested(inp)
        for n, nodes in report.placements
        if n == r.name
    ]
    mine = check_allocation(states, ours)
    theirs_pl = hail_placements(inp, real["response"])
    theirs = check_allocation(states, theirs_pl)
    comp = {
        "hail": real,
        "hail_placements": {i.name: [p] + ([s] if s else []) for i, p, s in theirs_pl},
        "hail_check": [str(v) for v in theirs.violations],
        "hail_objectives": _objectives(theirs.objectives),
        "exalloc_objectives": _objectives(mine.objectives),
        "nodes": _vectors(states, ours, theirs_pl),
    }
    return replace(report, compare=comp)


def _requested(inp: IAllocatorInput) -> list[AllocateRequest]:
    req = inp.request
    if isinstance(req, AllocateRequest):
        return [req]
    if isinstance(req, MultiAllocateRequest):
        return list(req.instances)
    return []


def _vectors(states: ClusterState, ours: list, theirs: list) -> list[dict[str, Any]]:
    """Per node touched by either answer: allocation vector before / exalloc / hail."""

    def after(placements: list) -> Mapping[str, NodeState]:
        state = states
        for inst, p, s in placements:
            state = state.placed(inst, p, s)
        return state.nodes

    a, b = after(ours), after(theirs)
    touched = {p for _, p, _ in ours + theirs} | {s for _, _, s in ours + theirs if s}
    rows = []
    for n in [x for x in states.nodes if x in touched]:
        tests = minimal_instances(states.ipolicy_of(n))
        rows.append(
            {
                "node": n,
                "before": vector_of(tests)(states.nodes[n]),
                "exalloc": vector_of(tests)(a[n]),
                "hail": vector_of(tests)(b[n]),
                "disk_before": states.nodes[n].free_disk_mib,
                "disk_exalloc": a[n].free_disk_mib,
                "disk_hail": b[n].free_disk_mib,
            }
        )
    return rows


def _vec(v: Sequence[int]) -> str:
    return "[" + ",".join(str(x) for x in v) + "]"


def compare_text(report: HailReport) -> str:
    c = report.compare or {}
    real = c["hail"]
    run_ = report.runs[0] if report.runs else None
    timing = (
        f"{run_.solver} {run_.summary()}, build {run_.build_s:.3f} s, solve {run_.solve_s:.3f} s"
        if run_
        else "no solve"
    )
    lines = [
        f"exalloc ({timing}):",
        report.response,
        f"hail ({real_hail()}, {real['wall_s']:.3f} s):",
        json.dumps(real["response"], separators=(",", ":")),
        "",
    ]
    ours = dict(report.placements)
    theirs = c["hail_placements"]
    names = list(dict.fromkeys([*ours, *theirs]))
    if names:
        w = max(12, *(len(n) for n in names))
        lines.append(f"{'instance':<{w}}  {'exalloc':<28}  hail")
        for n in names:
            a = "/".join(ours.get(n, ())) or "-"
            b = "/".join(theirs.get(n, ())) or "-"
            mark = "" if a == b else "   *"
            lines.append(f"{n:<{w}}  {a:<28}  {b}{mark}")
        lines.append("")
    eo, ho = c["exalloc_objectives"], c["hail_objectives"]
    lines.append("allocation vectors (test instances by min disk, descending)")
    lines.append(f"{'':<22}{'exalloc':<24}hail")
    lines.append(
        f"{'lost, total':<22}{_vec(eo.get('lost_allocations_total', ())):<24}"
        f"{_vec(ho.get('lost_allocations_total', ()))}"
    )
    lines.append(
        f"{'cluster after':<22}{_vec(eo.get('allocation_vector_after', ())):<24}"
        f"{_vec(ho.get('allocation_vector_after', ()))}"
    )
    lines.append(
        f"{'remaining disk MiB':<22}{eo.get('remaining_disk_mib', 0)!s:<24}"
        f"{ho.get('remaining_disk_mib', 0)}"
    )
    if c["hail_check"]:
        lines.append("hail's answer fails the checker: " + "; ".join(c["hail_check"]))
    if c["nodes"]:
        lines.append("")
        w = max(8, *(len(r["node"]) for r in c["nodes"]))
        lines.append(
            f"{'node':<{w}}  {'before':<14}{'exalloc':<14}{'hail':<14}disk before/exalloc/hail"
        )
        for r in c["nodes"]:
            lines.append(
                f"{r['node']:<{w}}  {_vec(r['before']):<14}{_vec(r['exalloc']):<14}"
                f"{_vec(r['hail']):<14}{r['disk_before']}/{r['disk_exalloc']}/{r['disk_hail']}"
            )
    return "\n".join(lines)
