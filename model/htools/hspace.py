"""hspace 3.0.2's allocation (Program/Hspace.hs, Cluster.hs iterateAlloc, tieredAlloc), ported for
`exalloc space --greedy` (docs/space.md).

hspace's `tryAlloc` is hail's allocate without the group choice (model/htools/allocate.py
`try_alloc`): the candidates of every allocatable group at once, scored over all nodes of all
groups, ties to the later candidate. Around it:

* `iterate_alloc_small_step`: `new-N` instances one by one until one fails or `-l` is met; the
  failure counts are those of the last `tryAlloc` (the failing one, or the one past `-l`).
  For drbd the global N+1 check is off (only the secondaries' reservations hold).
* `iterate_alloc` (iterateAlloc'): with the capacity check on, a big step of
  `guess_bigstep_size` instances (then 10, then 1) without the check, kept when the result is
  globally redundant.
* `tiered_alloc`: allocate, shrink the most frequent failure by one unit and recurse; when
  that places no more, `suffices_shrinking` along each failure mode (the big step); `-l`
  compared with the cumulative count (ganeti issue 495, kept).
* `combine_tiered`: the tier specs one after another.
* `hspace`: Hspace.main's gates (bad nodes and groups, `--independent-groups`,
  `--accept-existing-errors`), both phases, as data for model/htools/hspace_output.py.

The state is a `ClusterState` (model/state.py); the node rows of the score are cached across
calls (`metrics.RowCache`), pruned to the live states as the run goes on.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from model.cluster import Cluster, Instance
from model.htools.allocate import AllocOptions, Pairs, Singles, gen_alloc_nodes, try_alloc
from model.htools.capacity import CapacityCheck, N1Check, NoCapacityCheck
from model.htools.global_n1 import GreedyN1Check, redundant
from model.htools.metrics import RowCache
from model.htools.solutions import AllocSolution
from model.resources import FailMode
from model.space import Spec, demand_of_spec, new_instance
from model.state import ClusterState

DRBD = "drbd"
#: Types.unitMem, unitDsk, unitCpu, unitSpindle: hspace's shrink steps
UNIT_MEM_MIB = 64
UNIT_DSK_MIB = 256
UNIT_CPU = 1
UNIT_SPINDLE = 1
#: FailMode's order (minBound..maxBound), the order collapseFailures lists them in
MODES: tuple[FailMode, ...] = tuple(FailMode)

FailStats = tuple[tuple[FailMode, int], ...]


def required_nodes(template: str) -> int:
    """Instance.requiredNodes: two for drbd, one otherwise."""
    return 2 if template == DRBD else 1


def collapse_failures(failures: Counter) -> FailStats:
    """collapseFailures: every mode in Ganeti's order with its count."""
    return tuple((m, int(failures.get(m, 0))) for m in MODES)


def sort_reasons(reasons: FailStats) -> FailStats:
    """Hspace.sortReasons: by count, descending, stable."""
    return tuple(sorted(reasons, key=lambda mc: -mc[1]))


@dataclass(frozen=True)
class HspaceAlgOptions:
    """The AlgorithmOptions hspace's allocation reads."""

    capacity: bool = True  # algCapacity (not --no-capacity-checks)
    ignore_groups: frozenset[str] = frozenset()  # algCapacityIgnoreGroups (group uuids)
    accept_existing: bool = False  # algAcceptExisting


def checked_nodes(opts: HspaceAlgOptions, state: ClusterState, names: Sequence[str]) -> list[str]:
    """GlobalN1.redundant's node filter: offline nodes out under --accept-existing-errors,
    the ignored groups out."""
    out = []
    for n in names:
        st = state.nodes[n]
        if opts.accept_existing and st.offline:
            continue
        if st.group_uuid in opts.ignore_groups:
            continue
        out.append(n)
    return out


@dataclass(frozen=True)
class HspaceN1:
    """allocGlobalN1: the placement's cluster must be `redundant` (the greedy walk) on the
    nodes `checked_nodes` keeps, scored over the whole node list. `run` keeps the check of
    the last cluster asked about for the next tryAlloc on it."""

    opts: HspaceAlgOptions
    run: Run | None = field(default=None, compare=False)
    name: str = "greedy"

    def prepare(self, base: ClusterState, scope: Sequence[str]) -> N1Check:
        return _Lazy(self.opts, base, scope, self.run)


class _Lazy:
    """The greedy check made on the first verdict asked for: most of hspace's tryAlloc calls
    (the failing ones of the tiered phase) ask none. The check of a cluster (what each node's
    evacuation needs there, `GreedyN1Check`) depends on that cluster alone, so the one made
    for the last cluster is taken again for it: the tiered phase's sufficesShrinking asks
    about many sizes on one cluster, each with global N+1 (for drbd too)."""

    def __init__(
        self, opts: HspaceAlgOptions, base: ClusterState, scope: Sequence[str], run: Run | None
    ):
        self.opts, self.base, self.scope, self.run = opts, base, scope, run
        self.check: GreedyN1Check | None = None

    def verdict(self, placement):  # noqa: ANN001, ANN201
        if self.check is None:
            key = (self.opts, tuple(self.scope))
            kept = None if self.run is None else self.run.n1_check
            if kept is not None and kept[0] is self.base and kept[1] == key:
                self.check = kept[2]
            else:
                checked = checked_nodes(self.opts, self.base, self.scope)
                self.check = GreedyN1Check(self.base, self.scope, checked)
                if self.run is not None:
                    self.run.n1_check = (self.base, key, self.check)
        return self.check.verdict(placement)


def is_redundant(opts: HspaceAlgOptions, state: ClusterState, run: Run) -> bool:
    """GlobalN1.redundant over the whole cluster (kept for the last state asked about: the
    tiered phase asks again about a cluster its failed step left unchanged)."""
    key = (opts, id(state))
    if run.redundant_memo is not None and run.redundant_memo[0] == key:
        return run.redundant_memo[2]
    names = list(state.nodes)
    verdict = redundant(state, names, checked_nodes(opts, state, names), run.cache)
    run.redundant_memo = (key, state, verdict)
    return verdict


def redundant_grp(opts: HspaceAlgOptions, state: ClusterState, group_uuid: str) -> bool:
    """GlobalN1.redundantGrp: `redundant` on the group's nodes alone."""
    names = [n for n, st in state.nodes.items() if st.group_uuid == group_uuid]
    return redundant(state, names, checked_nodes(opts, state, names))


# --- the instance being allocated ---------------------------------------------------------


@dataclass(frozen=True)
class NewInst:
    """The instance hspace allocates (instFromSpec), by its spec."""

    spec: Spec
    template: str
    spindle_use: int

    def record(self, name: str) -> Instance:
        return new_instance(self.spec, self.template, self.spindle_use, name)


def shrink_by_type(inst: NewInst, mode: FailMode) -> NewInst | None:
    """Instance.shrinkByType: one unit less of the failing resource; None (Bad) below one
    unit or for a mode that does not shrink."""
    s = inst.spec
    m, d, c, p = s.memory_mib, s.disk_mib, s.vcpus, s.spindles
    if mode == FailMode.MEM:
        m -= UNIT_MEM_MIB
        if m < UNIT_MEM_MIB:
            return None
    elif mode == FailMode.DISK:
        d -= UNIT_DSK_MIB
        if d < UNIT_DSK_MIB:
            return None
    elif mode == FailMode.CPU:
        c -= UNIT_CPU
        if c < UNIT_CPU:
            return None
    elif mode == FailMode.SPINDLES:
        p -= UNIT_SPINDLE
        if p < UNIT_SPINDLE:
            return None
    else:
        return None
    return NewInst(Spec(m, d, c, p), inst.template, inst.spindle_use)


def iterate_ok(f: Callable[[NewInst], NewInst | None], a: NewInst) -> Iterator[NewInst]:
    """BasicTypes.iterateOk: a, f a, ... up to (without) the first whose f fails."""
    while True:
        b = f(a)
        if b is None:
            return
        yield a
        a = b


# --- one allocation -------------------------------------------------------------------------


Targets = Singles | Pairs


@dataclass
class Run:
    """What one hspace run shares between its allocations: the node rows of the score."""

    cache: RowCache = field(default_factory=RowCache)
    calls: int = 0  # tryAlloc calls made (benchmarks)
    asked: int = 0  # tryAlloc calls htools makes
    redundant_memo: tuple | None = None  # (key, the state, its verdict)
    # tryAlloc's answers on the cluster they were asked on (the state kept, so that its id
    # stays its own): the tiered phase shrinks one field a level, and each level's big step
    # walks the sizes the level below walks again, on a cluster the failed levels left as it
    # was (2,048 levels on hspace-tiered.data)
    answers: tuple | None = None  # (the state, {key: answer})
    demands: dict = field(default_factory=dict)
    walks: tuple | None = None  # (the state, sufficesShrinking's outcomes on it)
    n1_check: tuple | None = None  # (the state, (options, nodes), its GreedyN1Check)

    def walks_on(self, state: ClusterState) -> dict:
        if self.walks is None or self.walks[0] is not state:
            self.walks = (state, {})
        return self.walks[1]

    def fresh(self, state: ClusterState) -> None:
        """Drop cached rows of states no longer in the cluster (each tryAlloc adds some)."""
        if self.cache.size() > 8 * len(state.nodes) + 64:
            self.cache = RowCache()


def hspace_try_alloc(
    run: Run,
    capacity: bool,
    opts: HspaceAlgOptions,
    state: ClusterState,
    inst: NewInst,
    name: str,
    targets: Targets,
) -> AllocSolution | str:
    """Cluster.tryAlloc on hspace's targets, scored over every node."""
    run.asked += 1
    if run.answers is None or run.answers[0] is not state:
        run.answers = (state, {})
    key = (capacity, opts, inst, name)
    known = run.answers[1].get(key)
    if known is not None:
        return known
    check: CapacityCheck = HspaceN1(opts, run) if capacity else NoCapacityCheck()
    dkey = (inst, name)
    d = run.demands.get(dkey)
    if d is None:
        if len(run.demands) > 4096:
            run.demands.clear()
        d = run.demands[dkey] = demand_of_spec(inst.spec, inst.template, inst.spindle_use, name)
    count = required_nodes(inst.template)
    run.calls += 1
    sol = try_alloc(
        AllocOptions(capacity=check),
        state,
        list(state.nodes),
        d,
        count,
        targets,
        run.cache,
        described=False,
    )
    run.answers[1][key] = sol
    return sol


@dataclass(frozen=True)
class AllocResult:
    """Cluster.AllocResult: the failure counts, the cluster, the instances placed (oldest
    first; htools keeps them newest first)."""

    failures: FailStats
    state: ClusterState
    placed: tuple[Instance, ...] = ()


def iterate_alloc_small_step(
    run: Run,
    opts: HspaceAlgOptions,
    state: ClusterState,
    limit: int | None,
    inst: NewInst,
    targets: Targets,
    placed: tuple[Instance, ...],
) -> AllocResult | str:
    """iterateAllocSmallStep: one instance at a time, `new-<count so far>`."""
    capacity = opts.capacity and inst.template != DRBD
    out = list(placed)
    while True:
        name = f"new-{len(out)}"
        sol = hspace_try_alloc(run, capacity, opts, state, inst, name, targets)
        if isinstance(sol, str):
            return sol
        pl = sol.solution
        if pl is None or limit == 0:
            return AllocResult(collapse_failures(sol.failures), state, tuple(out))
        record = inst.record(name)
        state = state.placed(record, pl.primary, pl.secondary)
        out.append(replace(record, primary=pl.primary, secondary=pl.secondary))
        run.fresh(state)
        if limit is not None:
            limit -= 1


class DivideByZero(Exception):
    """GHC's `divide by zero`, hspace's death on a spec of 0 MiB memory where the policy
    allows it: `guessBigstepSize` divides by the spec's memory. Being lazy, hspace forces
    the quotient only where the step's limit is compared, after an instance was placed;
    what it printed until then stays printed, then `hspace: divide by zero`, exit 1."""

    def __init__(self) -> None:
        super().__init__("divide by zero")


class _UnforcedQuotient:
    """The big step's size when it divides by zero: harmless until compared (as hspace's
    thunk), then `DivideByZero`."""

    def __eq__(self, other: object) -> bool:
        raise DivideByZero

    __hash__ = None  # type: ignore[assignment]


def guess_bigstep_size(state: ClusterState, inst: NewInst) -> int | _UnforcedQuotient:
    """guessBigstepSize: the memory's capacity less one instance per node, at least 20."""
    if inst.spec.memory_mib == 0:
        return _UnforcedQuotient()
    total = sum(st.available_memory_mib for st in state.nodes.values())
    guess = total // inst.spec.memory_mib - len(state.nodes)
    return max(20, guess)


def iterate_alloc(
    run: Run,
    opts: HspaceAlgOptions,
    state: ClusterState,
    limit: int | None,
    inst: NewInst,
    targets: Targets,
    placed: tuple[Instance, ...],
    huge: bool = True,
) -> AllocResult | str:
    """iterateAlloc': big steps without the capacity check, kept when the result is
    redundant; else a smaller step (10), else one by one. The same answer as
    `iterate_alloc_small_step`, faster."""
    if not opts.capacity:
        return iterate_alloc_small_step(run, opts, state, limit, inst, targets, placed)
    while True:
        big = guess_bigstep_size(state, inst) if huge else 10
        if limit is None:
            step, new_limit = big, None
        elif isinstance(big, _UnforcedQuotient):
            step, new_limit = big, big
        else:
            step, new_limit = min(big, limit), max(0, limit - big)
        res = iterate_alloc_small_step(
            run, replace(opts, capacity=False), state, step, inst, targets, placed
        )
        if isinstance(res, str):
            return res
        if is_redundant(opts, res.state, run):
            if new_limit == 0 or len(res.placed) == len(placed):
                return res
            state, limit, placed = res.state, new_limit, res.placed
            continue
        if huge:
            huge = False
            continue
        return iterate_alloc_small_step(run, opts, state, limit, inst, targets, placed)


_NOTHING = object()


def suffices_shrinking(
    alloc: Callable[[NewInst], AllocSolution],
    inst: NewInst,
    mode: FailMode,
    memo: dict | None = None,
) -> NewInst | None:
    """sufficesShrinking: shrink along `mode` while it still fails for `mode` (or fits);
    the first size that fits.

    The walk from a size x is x's own verdict or the walk from the next size (iterateOk
    lists x only when x shrinks once more), so `memo` keeps each size's outcome for `alloc`'s
    cluster: the tiered levels, one unit apart, walk the same sizes again (quadratic in the
    levels without it; htools' cheap tryAlloc makes that 0.6 s, Python's would take
    minutes)."""
    memo = {} if memo is None else memo
    walked: list[NewInst] = []
    x: NewInst | None = inst
    found: Any = _NOTHING
    while x is not None:
        known = memo.get((mode, x), _NOTHING)
        if known is not _NOTHING:
            found = known
            break
        nxt = shrink_by_type(x, mode)
        if nxt is None:  # x is not in iterateOk's list: the walk ends before it
            found = None
            break
        walked.append(x)
        sol = alloc(x)
        if sol.solution is not None:
            found = x
            break
        if not sol.failures.get(mode, 0):
            found = None
            break
        x = nxt
    if found is _NOTHING:
        found = None
    for w in walked:
        memo[(mode, w)] = found
    return found


#: tiered recursion: one level per unit shrunk (64 MiB of memory a level)
_DEPTH = 100_000


@contextmanager
def _deep() -> Iterator[None]:
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, _DEPTH))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def tiered_alloc(
    run: Run,
    opts: HspaceAlgOptions,
    state: ClusterState,
    limit: int | None,
    inst: NewInst,
    targets: Targets,
    placed: tuple[Instance, ...],
) -> AllocResult | str:
    """tieredAlloc: allocate, then the spec shrunk by one unit of its most frequent failure
    (ties: the later mode); if that places nothing more, the big step along each mode, most
    frequent first."""
    res = iterate_alloc(run, opts, state, limit, inst, targets, placed)
    if isinstance(res, str):
        return res
    count = len(res.placed)
    if limit is not None and limit <= count:
        return res
    new_limit = None if limit is None else limit - count
    sorted_modes = [m for m, _ in sorted(res.failures, key=lambda mc: mc[1])]
    shrunk = shrink_by_type(inst, sorted_modes[-1])
    deeper: AllocResult | str = res
    if shrunk is not None:
        deeper = tiered_alloc(run, opts, res.state, new_limit, shrunk, targets, res.placed)
    if isinstance(deeper, AllocResult) and len(deeper.placed) > count:
        return deeper

    def alloc(x: NewInst) -> AllocSolution:
        sol = hspace_try_alloc(run, opts.capacity, opts, res.state, x, "new", targets)
        return AllocSolution() if isinstance(sol, str) else sol

    memo = run.walks_on(res.state)
    for mode in reversed(sorted_modes):
        big = suffices_shrinking(alloc, inst, mode, memo)
        if big is not None:
            return tiered_alloc(run, opts, res.state, new_limit, big, targets, res.placed)
    return res


def combine_tiered(
    run: Run,
    opts: HspaceAlgOptions,
    limit: int | None,
    targets: Targets,
    result: AllocResult,
    inst: NewInst,
) -> AllocResult | str:
    """Hspace.combineTiered: the next tier spec on what the earlier ones placed."""
    count = len(result.placed)
    if limit is not None and limit <= count:
        return result
    new_limit = None if limit is None else limit - count
    with _deep():
        return tiered_alloc(run, opts, result.state, new_limit, inst, targets, result.placed)


# --- Hspace.main ----------------------------------------------------------------------------


@dataclass(frozen=True)
class HspaceSetup:
    """hspace's inputs after its gates (Hspace.main, up to genAllocNodes)."""

    state: ClusterState  # after setNodeStatus
    template: str
    spindle_use: int
    opts: HspaceAlgOptions  # algOpts' (the ignored groups set)
    bad_nodes: tuple[str, ...]
    bad_groups: tuple[str, ...]  # names
    unallocable: frozenset[str]  # group uuids marked unallocable
    stop: bool  # stop_allocation: FailN1 without allocating
    targets: Targets


def setup(
    state: ClusterState,
    cluster: Cluster,
    template: str,
    spindle_use: int,
    *,
    capacity: bool = True,
    independent_groups: bool = False,
    accept_existing: bool = False,
    bad_groups: bool = True,
) -> HspaceSetup:
    """Hspace.main's gates: bad nodes (failN1 online nodes), bad groups (redundantGrp; judged
    only when `bad_groups` or `independent_groups`), the groups marked unallocable, the stop,
    and the targets (genAllocNodes)."""
    from model.space import bad_nodes as find_bad_nodes

    opts = HspaceAlgOptions(capacity=capacity, accept_existing=accept_existing)
    bad = tuple(find_bad_nodes(state))
    judge = bad_groups or independent_groups  # otherwise only -v -v -v -v prints them
    bad_grps = [g for g in cluster.groups if judge and not redundant_grp(opts, state, g.uuid)]
    unalloc = {g.uuid for g in cluster.groups if g.alloc_policy == "unallocable"}
    if not accept_existing:
        unalloc |= {state.nodes[n].group_uuid for n in bad}
    if independent_groups:
        unalloc |= {g.uuid for g in bad_grps}
        opts = replace(opts, ignore_groups=frozenset(g.uuid for g in bad_grps))
    remaining = any(g.uuid not in unalloc for g in cluster.groups)
    stop = not (accept_existing or (independent_groups and remaining) or not bad)
    names = [n for n, st in state.nodes.items() if st.group_uuid not in unalloc]
    targets = gen_alloc_nodes(state, names, required_nodes(template), None)
    assert not isinstance(targets, str)  # one or two nodes
    return HspaceSetup(
        state,
        template,
        spindle_use,
        opts,
        bad,
        tuple(g.name for g in bad_grps),
        frozenset(unalloc),
        stop,
        targets,
    )


@dataclass(frozen=True)
class Phase:
    """One phase's outcome (runAllocation): the sorted failure reasons, the cluster after it,
    the instances placed (oldest first); `error` when tryAlloc failed."""

    reasons: FailStats
    state: ClusterState
    placed: tuple[Instance, ...]
    error: str | None = None

    def spec_map(self) -> list[tuple[Spec, int]]:
        """tieredSpecMap: consecutive instances of one spec counted together."""
        out: list[tuple[Spec, int]] = []
        for inst in self.placed:
            spec = spec_of_instance(inst)
            if out and out[-1][0] == spec:
                out[-1] = (spec, out[-1][1] + 1)
            else:
                out.append((spec, 1))
        return out


def spec_of_instance(inst: Instance) -> Spec:
    """Instance.specOf: one disk's spindles, else 0."""
    spn = 0
    if len(inst.disks) == 1 and inst.disks[0].spindles is not None:
        spn = inst.disks[0].spindles
    return Spec(inst.memory_mib, inst.disk_mib, inst.vcpus, spn)


def _phase(s: HspaceSetup, result: AllocResult | str) -> Phase:
    if s.stop:
        return Phase(((FailMode.N1, 1),), s.state, ())
    if isinstance(result, str):
        return Phase((), s.state, (), error=result)
    return Phase(sort_reasons(result.failures), result.state, result.placed)


def tiered_phase(s: HspaceSetup, specs: Sequence[Spec], limit: int | None, run: Run) -> Phase:
    """The tiered phase: combineTiered over the tier specs (not run under the stop: htools
    never evaluates it)."""
    if s.stop:
        return _phase(s, "")
    result: AllocResult | str = AllocResult((), s.state, ())
    for spec in specs:
        assert isinstance(result, AllocResult)
        result = combine_tiered(
            run, s.opts, limit, s.targets, result, NewInst(spec, s.template, s.spindle_use)
        )
        if isinstance(result, str):
            break
    return _phase(s, result)


def standard_phase(s: HspaceSetup, spec: Spec, limit: int | None, run: Run) -> Phase:
    """The standard phase: iterateAlloc of the spec from the initial cluster."""
    if s.stop:
        return _phase(s, "")
    inst = NewInst(spec, s.template, s.spindle_use)
    return _phase(s, iterate_alloc(run, s.opts, s.state, limit, inst, s.targets, ()))
