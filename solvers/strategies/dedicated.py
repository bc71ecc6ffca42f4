"""Exact dedicated allocation (solvers for docs/hail.md "Dedicated allocation").

allocate: per group, hail's candidates (model.htools.dedicated.screen) with their constant
lost vectors become formulations/dedicated.py's single model, solved lexicographically; the
checker confirms the metric the model claims. multi-allocate: the batch model of
formulations/batch.py, in rounds that add the drbd pairs a solution shares until the model is
exact on every pair it uses (each round first asked to reach the previous round's values), and,
when a time limit stops it unproven, hail's one-by-one batch kept if the checker ranks it better.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from formulations import dedicated as form
from formulations.deadline import OutOfTime
from model.backends.iallocator import AllocateRequest, MultiAllocateRequest, new_instance
from model.backends.iallocator_response import (
    format_failure_counts,
    multi_allocate_response,
    response_json,
)
from model.batch import BatchProblem, NewInstance
from model.capacity import capacity_rows
from model.capacity import primary_usage as row_primary_usage
from model.capacity import secondary_usage as row_secondary_usage
from model.cluster import Cluster
from model.dedicated import format_metric, vector_of
from model.errors import CheckFailedError, InputError, SolverError
from model.htools.answer import HailAnswer, SolverRun, solver_note
from model.htools.dedicated import (
    GroupOutcome,
    Screen,
    best_group,
    check_local,
    find_group,
    groups_with_nodes,
    interchangeable,
    lost_of,
    node_data,
    screen,
    shown_objectives,
)
from model.resources import FailMode, InstanceDemand, demand_of
from model.state import ClusterState, node_states
from solvers import LexResult, Status, Stopwatch
from solvers.options import DEFAULT_OPTIONS, SolverOptions


def solve_lexicographic(*args: Any, **kwargs: Any) -> LexResult:
    """solvers.solve_lexicographic, imported when a model is solved: it imports Pyomo, which a
    single allocate's exhaustive choice does without (issue 40, item 12)."""
    from solvers.lexicographic import solve_lexicographic as solve

    return solve(*args, **kwargs)


# multi-allocate with drbd: rounds of adding shared (primary, secondary) pairs before the
# model sums the failover reservation on every pair
MAX_PAIR_ROUNDS = 4

#: Under a time limit, the share of it a multi-allocate's model may use; the rest is for
#: hail's one-by-one batch (one exact single allocate per instance: 50 drbd instances on 200
#: nodes took seconds) and the checker, so the answer keeps the limit (issue 40, item 4).
MODEL_SHARE = 0.6
#: Seconds kept for the checker and the response after hail's batch.
CHECK_RESERVE_S = 0.25


def solver_run(solver: str, lex: LexResult) -> SolverRun:
    """A lexicographic run's figures for the info suffix and --json."""
    gaps = [g for g in lex.gap if g is not None]
    return SolverRun(
        solver=solver,
        status=str(lex.status),
        gap=max(gaps) if gaps else None,
        build_s=lex.build_s,
        solve_s=lex.solve_s,
        objective=lex.objective,
        names=lex.names,
    )


def solve_group(
    states: ClusterState, sc: Screen, d: InstanceDemand, drbd: bool, opts: SolverOptions
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
            p: (None if isinstance(v, FailMode) else lost_of(before, vec(v)))
            for p, v in sc.secondary_with.get(n, {}).items()
        }
        cands.append(
            form.SingleCandidate(
                name=n,
                rank=rank[n],
                group=sc.group.uuid,
                primary_lost=None
                if isinstance(p_after, FailMode)
                else lost_of(before, vec(p_after)),
                primary_disk_mib=0 if isinstance(p_after, FailMode) else p_after.free_disk_mib,
                secondary_lost=(
                    None
                    if s_after is None or isinstance(s_after, FailMode)
                    else lost_of(before, vec(s_after))
                ),
                secondary_disk_mib=(
                    0 if s_after is None or isinstance(s_after, FailMode) else s_after.free_disk_mib
                ),
                secondary_lost_with=with_p,
            )
        )
    problem = form.SingleProblem(tuple(cands), len(tests), drbd)
    if not opts.solver_given:  # every choice compared: exact, and no model to build
        p, s, run_ = exhaustive_choice(problem)
        return _group_outcome(sc, problem, p, s, run_)
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
        # drbd's pair model (a few hundred binaries) solves faster without presolve (30 ms
        # against 49 ms on a 1,000-node group), the plain one with it (6 ms against 10 ms)
        presolve=not drbd,
    )
    if lex.names and lex.names[0] == form.LOST_AND_DISK:
        lex = _split_first_stage(problem, lex)
    run_ = solver_run(opts.solver, lex)
    if not lex.has_solution:
        raise SolverError(
            f"group {sc.group.name}: {sc.successes} valid placement(s) exist but the solver "
            f"stopped with {lex.status} (raise --time-limit?)"
        )
    p, s = form.single_solution(m, problem)
    outcome = _group_outcome(sc, problem, p, s, run_)
    claimed = form.single_lost_claim(problem, lex.objective)
    if lex.status == Status.OPTIMAL and claimed != outcome.lost:
        raise CheckFailedError(f"solver claims lost {claimed}, the pair gives {outcome.lost}")
    return outcome


def _choice_metric(
    problem: form.SingleProblem, p: str, s: str | None
) -> tuple[tuple[int, ...], int]:
    """(lost vector, remaining disk) of primary p (and secondary s), from the candidates."""
    by = problem.candidate
    lost = by[p].primary_lost
    disk = by[p].primary_disk_mib
    assert lost is not None, f"{p} cannot be primary"
    if s is not None:
        sl = by[s].secondary_lost_with.get(p, by[s].secondary_lost)
        if sl is None:
            raise CheckFailedError(f"solver chose the failing pair {p}/{s}")
        lost = tuple(a + b for a, b in zip(lost, sl, strict=True))
        disk += by[s].secondary_disk_mib
    return lost, disk


def _group_outcome(
    sc: Screen, problem: form.SingleProblem, p: str, s: str | None, run_: SolverRun
) -> GroupOutcome:
    lost, disk = _choice_metric(problem, p, s)
    return GroupOutcome(
        sc.group,
        failures=sc.failures,
        successes=sc.successes,
        nodes=(p,) if s is None else (p, s),
        lost=lost,
        disk_mib=disk,
        run=run_,
    )


#: The name the answers give the exhaustive single choice in place of a solver's.
EXHAUSTIVE = "exhaustive"


def exhaustive_choice(problem: form.SingleProblem) -> tuple[str, str | None, SolverRun]:
    """The single model's optimum found by comparing every choice it allows, without a model:
    least (lost vector, remaining disk), then hail's tie-break (the later primary, then the
    later secondary), over the same representatives and pairs (`SingleProblem`). Proven by
    exhaustion, so `optimal` with gap 0 (issue 40, item 12: no Pyomo for an allocate).

    For drbd, a primary p's best generic secondary is the first of its group's secondaries in
    (secondary lost vector, disk, later first) order that is not p and holds no reservation
    for p (the lexicographic order is unchanged by adding p's own vector); the pairs whose
    secondary already reserves for p are compared with their own vectors."""
    t0 = time.perf_counter()
    prim, sec = problem.representatives
    by = problem.candidate

    def key(p: str, s: str | None) -> tuple:
        lost, disk = _choice_metric(problem, p, s)
        return (lost, disk, -by[p].rank, 0 if s is None else -by[s].rank)

    choices: list[tuple[str, str | None]] = []
    if not problem.drbd:
        choices = [(p, None) for p in prim]
    else:
        in_group: dict[str, list[str]] = {}
        for s in sorted(
            sec, key=lambda n: (by[n].secondary_lost, by[n].secondary_disk_mib, -by[n].rank)
        ):
            in_group.setdefault(by[s].group, []).append(s)
        reserving: dict[str, list[str]] = {}  # p -> the secondaries reserving for p
        for s in sec:
            for p in by[s].secondary_lost_with:
                reserving.setdefault(p, []).append(s)
        for p in prim:
            own = set(reserving.get(p, ()))
            generic = next(
                (s for s in in_group.get(by[p].group, ()) if s != p and s not in own), None
            )
            if generic is not None:
                choices.append((p, generic))
            choices += [
                (p, s)
                for s in sorted(own)
                if s != p
                and by[s].group == by[p].group
                and by[s].secondary_lost_with[p] is not None
            ]
    if not choices:
        raise SolverError("no placement the screen admitted passes its own rows")
    p, s = min(choices, key=lambda c: key(*c))
    lost, disk = _choice_metric(problem, p, s)
    run_ = SolverRun(
        solver=EXHAUSTIVE,
        status=str(Status.OPTIMAL),
        gap=0.0,
        build_s=0.0,
        solve_s=time.perf_counter() - t0,
        objective=(*map(float, lost), float(disk)),
        names=(*(f"lost_{t}" for t in range(problem.n_tests)), "remaining_disk_mib"),
    )
    return p, s, run_


def _split_first_stage(problem: form.SingleProblem, lex: LexResult) -> LexResult:
    """The blended stage (lost vector and disk as one integer, `form.single_key`) as the two
    stages it stands for, so that reports and claims read as without the blend."""
    first = lex.stages[0]
    if first.objective is None:
        return lex
    lost, disk = form.split_lost_and_disk(problem, first.objective)
    proven = first.status is Status.OPTIMAL
    names = ("lost_vector" if problem.n_tests > 1 else "lost_0", "remaining_disk_mib")
    split = tuple(
        replace(first, objective=float(v), bound=float(v) if proven else None, solve_s=t)
        for v, t in ((lost, first.solve_s), (disk, 0.0))
    )
    return LexResult.from_stages((*names, *lex.names[1:]), split + lex.stages[1:], lex.build_s)


def allocate_one(
    states: ClusterState,
    d: InstanceDemand,
    required_nodes: int,
    nics: Sequence[Mapping[str, Any]],
    group_name: str | None,
    restrict: Sequence[str] | None,
    opts: SolverOptions,
) -> tuple[GroupOutcome | None, str, list[GroupOutcome]]:
    """hail's findAllocation / findMGAllocation: (winner or None, info, every group)."""
    cluster = states.cluster
    drbd = required_nodes == 2
    if group_name is not None:
        group = find_group(cluster, group_name)
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
        for g in groups_with_nodes(cluster)
    ]
    messages = [o.message() for o in outcomes]
    best = best_group(outcomes)
    if best is None:
        return None, ", ".join(messages), outcomes
    return best, ", ".join([f"Selected group: {best.group.name}", *messages]), outcomes


def allocate(
    cluster: Cluster, req: AllocateRequest, opts: SolverOptions = DEFAULT_OPTIONS
) -> HailAnswer:
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
        return HailAnswer(response_json(False, info, []), "allocate", runs=runs)
    p, s = best.nodes[0], (best.nodes[1] if len(best.nodes) > 1 else None)
    report = check_local(states, [(inst, p, s)])
    report.raise_if_failed()
    metric = report.objectives["placement_metrics"][0]
    if (tuple(metric[0]), metric[1]) != (best.lost, best.disk_mib):
        raise CheckFailedError(
            f"checker computes metric {format_metric(*metric)} for {'/'.join(best.nodes)}, "
            f"the model claims {format_metric(best.lost, best.disk_mib)}"
        )
    return HailAnswer(
        response_json(True, info, list(best.nodes)),
        "allocate",
        placements=((req.name, best.nodes),),
        runs=runs,
        note=solver_note(runs),
        objectives=shown_objectives(report.objectives),
    )


def multi_allocate(
    cluster: Cluster, req: MultiAllocateRequest, opts: SolverOptions = DEFAULT_OPTIONS
) -> HailAnswer:
    """Place the batch jointly: most instances, then the least lost-allocations vector,
    then the least remaining disk on the nodes used.

    With a time limit the whole answer keeps it (issue 40, item 4: 72-81 s under
    --time-limit 60): the model ends by MODEL_SHARE of it, hail's one-by-one batch (compared
    when the model is unproven) and the checker take the rest, and each is timed in
    `HailAnswer.timing`."""
    from formulations import batch as batch_form  # Pyomo: loaded when a batch is modelled

    started = time.perf_counter()
    end = None if opts.time_limit is None else started + opts.time_limit
    stages: dict[str, float] = {}
    states = node_states(cluster)
    group_name = req.group_name
    if group_name is not None:
        g = find_group(cluster, group_name)
        if g is None:
            return HailAnswer(
                response_json(False, f"Wrong number of elems found with name {group_name}", []),
                "multi-allocate",
            )
        if g.alloc_policy == "unallocable":  # hail would still use it (see allocate_one)
            why = f"group {g.name} is unallocable; exalloc does not place instances there"
            info, result = multi_allocate_response([], [(r.name, why) for r in req.instances])
            return HailAnswer(response_json(True, info, result), "multi-allocate")
        groups = [g]
    else:
        groups = [g for g in groups_with_nodes(cluster) if g.alloc_policy != "unallocable"]
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
    no_batch = False  # the time ran out before the solver found any batch
    if new_instances:
        with Stopwatch() as sw:
            data = {n: node_data(states, n, rank[n]) for n in node_names}
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
        stages_note = ""  # why the model was not solved in time, when it was not
        shared: frozenset[tuple[str, str]] | None = frozenset()
        target: tuple[float, ...] | None = None
        build_s, solve_s = sw.seconds, 0.0
        deadline = None if end is None else started + MODEL_SHARE * opts.time_limit
        stages["screen_s"] = time.perf_counter() - started - sw.seconds

        def solve_batch(m: Any, objs: list) -> Any:
            nonlocal solve_s
            left = None if deadline is None else max(deadline - time.perf_counter(), 0.01)
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
            if attempt and deadline is not None and time.perf_counter() >= deadline:
                break  # no time for a tighter round: the earlier round's batch, if checked
            sw = Stopwatch()
            try:
                with sw:
                    problem = BatchProblem(nodes, pruned, last_resort=last, shared_pairs=shared)
                    m = batch_form.build_batch(problem, deadline=deadline)
            except OutOfTime as stop:
                stopped = str(stop)
            else:
                stopped = _no_time_to_solve(deadline, sw.seconds)
            build_s += sw.seconds
            if stopped is not None:  # the model's share is spent before it could be solved
                if earlier is None:  # no batch at all: hail's one-by-one batch, below
                    no_batch = True
                    run = SolverRun(opts.solver, str(Status.TIME_LIMIT), None, 0.0, 0.0,
                                    unbounded=stopped)  # fmt: skip
                else:  # the earlier round's batch, if the checker accepts it
                    run = runs[0]
                runs = (replace(run, build_s=build_s, solve_s=solve_s),)
                stages_note = f"; {stopped}"
                break
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
                if earlier is None:  # no batch at all: hail's one-by-one batch, below
                    no_batch = True
                    run = solver_run(opts.solver, lex)
                else:  # out of time: the earlier round's batch, if the checker accepts it
                    run = runs[0]
                runs = (replace(run, build_s=build_s, solve_s=solve_s),)
                break
            runs = (replace(solver_run(opts.solver, lex), build_s=build_s, solve_s=solve_s),)
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
        stages["model_s"] = build_s + solve_s
        stages["model_build_s"], stages["model_solve_s"] = build_s, solve_s
        if no_batch:
            solution = {}
        elif earlier is not None:
            solution = earlier
        else:
            solution = batch_form.batch_solution(m, problem)
        chosen = {
            name: where
            for kind, spots in solution.items()
            for name, where in zip(members[kind], spots, strict=False)
        }
        complete = not no_batch and earlier is None and lex.status == Status.OPTIMAL
        if complete and len(lex.objective) == len(objs):
            claimed = tuple(
                int(round(v))
                for name, v in zip(lex.names, lex.objective, strict=True)
                if name.startswith("lost_")
            )
            claimed_disk = int(round(lex.objective[-1]))
    kept_greedy = False
    cut: list[str] = []  # instances hail's batch had no time for
    if runs and runs[0].status != str(Status.OPTIMAL):
        # not proven: hail's one-by-one batch may still be better than the best found (or
        # than none, or than an earlier round's batch the checker refuses), so that a time
        # limit never answers worse than hail
        model_end = time.perf_counter()
        until = end
        if end is not None and no_batch:  # a build past its share: hail's batch still gets
            until = max(end, model_end + 0.1 * opts.time_limit)  # a tenth, not an error
        left = None if until is None else max(until - model_end - CHECK_RESERVE_S, 0.01)
        greedy = greedy_batch(states, demands, req.group_name, opts.within(left), until, cut)
        stages["greedy_s"] = time.perf_counter() - model_end
        if greedy is not None and _batch_key(states, demands, greedy, last) < _batch_key(
            states, demands, chosen, last
        ):
            chosen, earlier, claimed, kept_greedy = greedy, None, None, True
    if no_batch and not kept_greedy:
        why = runs[0].unbounded or (
            f"the solver stopped with {runs[0].status} before finding any batch"
        )
        raise SolverError(
            f"multi-allocate: {why}, and hail's one-by-one batch places none (raise --time-limit?)"
        )
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
        elif kept_greedy and r.name in cut:
            failed.append(
                (r.name, f"out of time: the {opts.time_limit:g} s limit ran out before it")
            )
        else:
            failed.append(
                (
                    r.name,
                    f"No joint placement leaves room for it: exalloc places at most "
                    f"{len(chosen)} of the {n_alone_ok} instances that fit alone",
                )
            )
    checking = time.perf_counter()
    report = check_local(states, placements)
    stages["check_s"] = time.perf_counter() - checking
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
    note = ""
    if kept_greedy:
        found = "better than the best found"
        if no_batch:
            unbuilt = runs[0].unbounded is not None
            found = (
                "the model was not solved in time" if unbuilt else "the solver found none in time"
            )
        note = f"; kept the one-by-one batch, {found}"
    if new_instances and stages_note and not (no_batch and runs[0].unbounded):
        note += stages_note  # (a run without a batch says it in its summary already)
    return HailAnswer(
        response_json(True, info, result),
        "multi-allocate",
        placements=tuple((n, tuple(nodes)) for n, nodes in allocated),
        runs=runs,
        note=solver_note(runs, note),
        objectives=shown_objectives(report.objectives),
        stages={k: round(v, 6) for k, v in stages.items()},
    )


#: How long the solver's copy of a built batch model takes, as a multiple of the build: HiGHS's
#: copy of the 50-instance drbd batch on 200 nodes took 5.3 s after a 4.7 s build (loaded
#: machine), before its first iteration (CP-SAT's translation is of the same order).
COPY_PER_BUILD = 1.0


def _no_time_to_solve(deadline: float | None, build_s: float) -> str | None:
    """Why a built model is not handed to the solver: its copy alone would pass the model's
    share of the time limit (`COPY_PER_BUILD`); None when there is time."""
    if deadline is None:
        return None
    left = deadline - time.perf_counter()
    if left >= COPY_PER_BUILD * build_s:
        return None
    return (
        f"the model was built in {build_s:.2f} s with {max(left, 0.0):.2f} s of its share of "
        "the time limit left, too little for the solver's copy of it"
    )


def greedy_batch(
    states: ClusterState,
    demands: Sequence[tuple],
    group_name: str | None,
    opts: SolverOptions,
    until: float | None = None,
    cut: list[str] | None = None,
) -> dict[str, tuple[str, str | None]] | None:
    """hail's way with a batch: each instance in request order gets hail's own choice (the
    exact single allocate) on the cluster as the ones before it left it; an instance that
    fits nowhere is skipped. A time-limited joint solve is compared with it. None when a
    single allocate itself runs out of time, unless `until` (the perf_counter time the whole
    answer must end by) is given: then the instances placed by then, the others named in
    `cut` (a time limit answers part of a batch rather than late, issue 40, item 4)."""
    chosen: dict[str, tuple[str, str | None]] = {}
    for k, (r, _inst, d) in enumerate(demands):
        if until is not None:
            left = until - time.perf_counter() - CHECK_RESERVE_S
            if left <= 0:
                if cut is not None:
                    cut.extend(x.name for x, _, _ in demands[k:])
                return chosen
            opts = opts.within(left)
        try:
            best, _, _ = allocate_one(states, d, r.required_nodes, r.nics, group_name, None, opts)
        except SolverError:
            if until is None:
                return None
            if cut is not None:
                cut.extend(x.name for x, _, _ in demands[k:])
            return chosen
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


def one_by_one_multi_allocate(
    cluster: Cluster, req: MultiAllocateRequest, opts: SolverOptions = DEFAULT_OPTIONS
) -> HailAnswer:
    """hail's own multi-allocate on dedicated groups (`--greedy`, docs/hail.md): each instance
    in request order gets hail's single allocate on the cluster the ones before it left, and
    one that fits nowhere fails with that allocate's description (IAlloc.hs allocList)."""
    states = node_states(cluster)
    allocated: list[tuple[str, list[str]]] = []
    failed: list[tuple[str, str]] = []
    placements = []
    runs: list[SolverRun] = []
    for r in req.instances:
        inst = new_instance(r)
        d = demand_of(inst, states.rules)
        best, info, outcomes = allocate_one(
            states, d, r.required_nodes, r.nics, req.group_name, None, opts
        )
        runs += [o.run for o in outcomes if o.run is not None]
        if best is None:
            failed.append((r.name, info))
            continue
        p, s = best.nodes[0], (best.nodes[1] if len(best.nodes) > 1 else None)
        placed = states.place(d, p, s)
        if isinstance(placed, FailMode):
            failed.append((r.name, info))
            continue
        states = placed
        placements.append((inst, p, s))
        allocated.append((r.name, list(best.nodes)))
    report = check_local(node_states(cluster), placements)
    report.raise_if_failed()
    info, result = multi_allocate_response(allocated, failed)
    return HailAnswer(
        response_json(True, info, result),
        "multi-allocate",
        placements=tuple((n, tuple(nodes)) for n, nodes in allocated),
        runs=tuple(runs),
        note=solver_note(tuple(runs)),
        objectives=shown_objectives(report.objectives),
    )
