"""The fewest reboot rounds, proven (docs/roll.md, "How it is solved").

1. Every node must be able to reboot on its own (a round of one): a node that cannot makes
   the question impossible, said as hroller says it, with the reason.
2. Lower bounds: the largest clique of conflicting nodes found, and the rounds a receiving
   node's memory forces (`model.roll.memory_bound`).
3. Plans: a first-fit colouring under the round rules (`greedy_rounds`) and the plans the
   caller knows (hroller's rounds, restricted to the considered nodes), each round packed
   exactly; the fewest rounds among them is the start.
4. When the start does not meet the bound, the colouring model (formulations/roll.py) is
   solved (CP-SAT unless `--solver` says otherwise), hinted with the start; each round of its
   answer is packed (first fit, else the exact packing model) and a round that cannot be
   packed is cut off and the model solved again.

A plan is proven optimal when its rounds meet a bound: the combinatorial one, or the solver's.
"""

from __future__ import annotations

import heapq
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from formulations import roll as form
from formulations import roll_sat
from model.roll import (
    PRIMARY,
    RollProblem,
    RoundPlan,
    Step,
    first_fit_round,
    infeasible,
    largest_clique,
    memory_bound,
    peel,
    rooms_after_migrations,
    round_items,
)
from solvers import Status, Stopwatch, solve_lexicographic
from solvers.lexicographic import open_session
from solvers.options import DEFAULT_OPTIONS, SolverOptions
from solvers.sat_backend import LABEL as SAT_LABEL
from solvers.sat_backend import SatSession

BOUND = "bound"  # the start meets the lower bound: no model needed
MODEL = "model"


@dataclass(frozen=True)
class RollPlan:
    """The rounds (each packed), how good they are and how that was shown."""

    rounds: tuple[RoundPlan, ...]  # in the order found (the program orders them for output)
    status: str
    bound: int
    clique: tuple[str, ...]
    memory_bound: int
    memory_node: str | None
    start_rounds: int  # the best plan before the model
    method: str
    solver: str | None = None
    build_s: float = 0.0
    solve_s: float = 0.0
    cuts: int = 0
    packings: int = 0  # rounds packed by the exact packing model (first fit stuck)
    restarts: int = 0  # CP-SAT attempts stopped by their work limit, restarted with a new seed
    peeled: int = 0  # nodes the last model left out, put back into its rounds after it
    seconds: float = 0.0
    notes: tuple[str, ...] = field(default=())

    @property
    def objective(self) -> int:
        return len(self.rounds)

    @property
    def gap(self) -> float:
        return (self.objective - self.bound) / max(self.objective, 1)


@dataclass
class _Packer:
    """Packs rounds: first fit, else the exact packing model; counts what it did."""

    problem: RollProblem
    options: SolverOptions
    exact: int = 0
    unproven: int = 0  # packings the time limit stopped undecided (taken as impossible)

    def pack(self, members: Sequence[str]) -> RoundPlan | None:
        plan = first_fit_round(self.problem, members)
        if plan is not None:
            return plan
        return self._exact(members)

    def _exact(self, members: Sequence[str]) -> RoundPlan | None:
        after = rooms_after_migrations(self.problem, members)
        if after is None:
            return None
        rooms, steps = after
        rooms = rooms.all()
        items = round_items(self.problem, members)
        self.exact += 1
        with Stopwatch() as sw:
            m, shapes = form.build_packing(items, rooms, self.problem.groups)
        lex = solve_lexicographic(
            m, form.packing_objectives(m), **_kwargs(self.options), build_s=sw.seconds
        )
        placed_all = lex.has_solution and round(lex.objective[0]) == len(items)
        if not placed_all:
            if lex.status is not Status.OPTIMAL and lex.status is not Status.INFEASIBLE:
                self.unproven += 1
            return None
        placed = form.packing_solution(m, shapes)
        order = {id(i): k for k, i in enumerate(items)}
        placed.sort(key=lambda p: order[id(p[0])])
        steps += [Step(i.kind, i.index, i.name, i.source, t) for i, t in placed]
        return RoundPlan(tuple(members), tuple(steps))


def _kwargs(options: SolverOptions) -> dict:
    kw = options.kwargs()
    if not options.solver_given:
        kw["solver"] = "cpsat"
    return kw


def greedy_rounds(
    problem: RollProblem, packer: _Packer, target: int | None = None
) -> list[RoundPlan]:
    """A DSatur colouring under the round rules: next the node whose conflicting nodes are
    in the most rounds (then the most conflicts, the most migration memory), into the first
    round it conflicts with nobody in and whose receiving nodes and groups still have the
    room, or, with `target` rounds open from the start, into the one that leaves its
    receiving nodes the most room (a balanced colouring, which meets tight memory bounds
    first fit misses). Each round is then packed, a round that cannot be packed giving up
    its last nodes to later rounds."""
    adj = problem.neighbours()
    loads = problem.loads() if problem.rules.migrations else {}
    by_primary: dict[str, list[tuple[str, int]]] = {}
    for s, per in loads.items():
        for p, w in per.items():
            by_primary.setdefault(p, []).append((s, w))
    need: dict[str, tuple[str, int, int]] = {}
    for v in problem.nodes:
        items = problem.items.get(v, ())
        mem = sum(i.memory_mib for i in items if i.kind == PRIMARY)
        dsk = sum(i.disk_mib for i in items)
        need[v] = (problem.rooms[v].group, mem, dsk)
    totals: dict[str, list[int]] = {}
    for g, ns in problem.groups.items():
        totals[g] = [
            sum(max(0, problem.rooms[n].memory_mib) for n in ns),
            sum(max(0, problem.rooms[n].disk_mib) for n in ns),
        ]
    position = {v: k for k, v in enumerate(problem.nodes)}
    order = sorted(
        problem.nodes,
        key=lambda v: (-len(adj[v]), -sum(w for _, w in by_primary.get(v, ())), position[v]),
    )

    @dataclass
    class Round:
        members: list[str] = field(default_factory=list)
        used: dict[str, int] = field(default_factory=dict)
        room: dict[str, list[int]] = field(default_factory=dict)

    def fits_in(r: Round, v: str) -> bool:
        if adj[v] & set(r.members):
            return False
        for s, w in by_primary.get(v, ()):
            if r.used.get(s, 0) + w > problem.rooms[s].memory_mib:
                return False
        g, mem, dsk = need[v]
        room = r.room.get(g, totals.get(g, [0, 0]))
        own = problem.rooms[v]
        return mem + max(0, own.memory_mib) <= room[0] and dsk + max(0, own.disk_mib) <= room[1]

    def add(r: Round, v: str) -> None:
        r.members.append(v)
        for s, w in by_primary.get(v, ()):
            r.used[s] = r.used.get(s, 0) + w
            gs = problem.rooms[s].group
            r.room.setdefault(gs, list(totals.get(gs, [0, 0])))[0] -= w
        g, mem, dsk = need[v]
        own = problem.rooms[v]
        room = r.room.setdefault(g, list(totals.get(g, [0, 0])))
        room[0] -= mem + max(0, own.memory_mib)
        room[1] -= dsk + max(0, own.disk_mib)

    def slack(r: Round, v: str) -> float:
        rooms = [
            (problem.rooms[s].memory_mib - r.used.get(s, 0) - w)
            / max(problem.rooms[s].memory_mib, 1)
            for s, w in by_primary.get(v, ())
        ]
        return min(rooms, default=0.0) - len(r.members) * 1e-9

    def place(rounds: list[Round], v: str, start: int = 0) -> None:
        fitting = [r for r in rounds[start:] if fits_in(r, v)]
        if fitting:
            add(max(fitting, key=lambda r: slack(r, v)) if target else fitting[0], v)
            return
        r = Round()
        add(r, v)
        rounds.append(r)

    rounds: list[Round] = [Round() for _ in range(target or 0)]
    round_of: dict[str, int] = {}
    seen: dict[str, set[int]] = {v: set() for v in problem.nodes}
    rank = {v: k for k, v in enumerate(order)}
    heap = [(0, rank[v], v) for v in order]  # DSatur: most distinct neighbour rounds first
    while heap:
        neg, _, v = heapq.heappop(heap)
        if v in round_of or -neg != len(seen[v]):
            continue
        place(rounds, v)
        k = next(i for i, r in enumerate(rounds) if r.members and r.members[-1] == v)
        round_of[v] = k
        for w in adj[v]:
            if w not in round_of and k not in seen[w]:
                seen[w].add(k)
                heapq.heappush(heap, (-len(seen[w]), rank[w], w))
    plans: list[RoundPlan] = []
    k = 0
    rounds = [r for r in rounds if r.members]
    while k < len(rounds):
        r = rounds[k]
        members = sorted(r.members, key=position.__getitem__)
        plan = packer.pack(members)
        spill: list[str] = []
        kept = list(r.members)
        while plan is None:
            spill.append(kept.pop())
            members = sorted(kept, key=position.__getitem__)
            plan = packer.pack(members)
        plans.append(plan)
        for v in spill:  # into a later round (rounds after k were not packed yet)
            place(rounds, v, start=k + 1)
        k += 1
    return plans


def _alone(problem: RollProblem, packer: _Packer) -> list[RoundPlan]:
    """Every node in a round of its own (each one packs: `plan` checked it first)."""
    return [p for v in problem.nodes if (p := packer.pack([v])) is not None]


def _packed(packer: _Packer, rounds: Sequence[Sequence[str]]) -> list[RoundPlan] | None:
    out = []
    for r in rounds:
        plan = packer.pack(r)
        if plan is None:
            return None
        out.append(plan)
    return out


def pack_rounds(
    problem: RollProblem,
    rounds: Sequence[Sequence[str]],
    options: SolverOptions = DEFAULT_OPTIONS,
) -> list[RoundPlan] | None:
    """Another tool's rounds (hroller's) with the moves that clear each, so that
    `model.roll.check_plan` can judge them; None when some round cannot be cleared."""
    return _packed(_Packer(problem, options), rounds)


def complete_rounds(
    problem: RollProblem,
    core_rounds: Sequence[Sequence[str]],
    peeled: Sequence[str],
    rounds: int,
    options: SolverOptions = DEFAULT_OPTIONS,
) -> list[RoundPlan] | None:
    """Rounds of the core `model.roll.peel` left (a local search's,
    solvers/strategies/roll_search.py) packed, then the peeled nodes put back: a plan of
    every node in at most `rounds` rounds, or None when a round cannot be packed or a
    peeled node finds no round."""
    packed = _packed(_Packer(problem, options), [r for r in core_rounds if r])
    return None if packed is None else _put_back(problem, packed, peeled, rounds)


def plan(
    problem: RollProblem,
    options: SolverOptions = DEFAULT_OPTIONS,
    *,
    known: Sequence[Sequence[Sequence[str]]] = (),
    starts: bool = True,
) -> RollPlan:
    """The fewest rounds for `problem`, proven when the bound is met; `known` are plans
    to start from (rounds of considered nodes), used when every round of one can be packed.
    starts=False: no greedy start, every node alone instead, so that the model decides
    every count of rounds from the bound up (the tests' way to hold the model to brute
    force on small clusters, where a start usually meets the bound)."""
    started = time.perf_counter()
    deadline = options.deadline()
    packer = _Packer(problem, options)
    blocked = [v for v in problem.nodes if packer.pack([v]) is None]
    if blocked:
        raise infeasible(problem, blocked)
    clique = largest_clique(problem)
    mem_rounds, mem_node = memory_bound(problem)
    bound = max(len(clique), mem_rounds, 1 if problem.nodes else 0)
    best = greedy_rounds(problem, packer) if starts else _alone(problem, packer)
    for target in range(bound, len(best) if starts else 0):
        balanced = greedy_rounds(problem, packer, target)
        if len(balanced) < len(best):
            best = balanced
            break
    for rounds in known if starts else ():
        if sorted(v for r in rounds for v in r) != sorted(problem.nodes):
            continue  # not a plan of these nodes (hroller gave up, or rounds of others)
        packed = _packed(packer, [r for r in rounds if r])
        if packed is not None and len(packed) < len(best):
            best = packed
    common = dict(
        bound=bound,
        clique=clique,
        memory_bound=mem_rounds,
        memory_node=mem_node,
        start_rounds=len(best),
    )
    if len(best) <= bound:
        return RollPlan(
            tuple(best),
            str(Status.OPTIMAL),
            method=BOUND,
            packings=packer.exact,
            seconds=time.perf_counter() - started,
            **common,
        )
    return _solve(problem, options, packer, best, deadline, started, common)


#: CP-SAT's deterministic work per attempt at a question "k rounds?" on 400 nodes (more in
#: proportion to the nodes): two short attempts, then a long one, each with a fresh seed, the
#: long one doubled each time round (docs/roll.md, "How it is solved").
SHORT_WORK, LONG_WORK = 0.5, 3.0
FOUND, IMPOSSIBLE, STOPPED = "found", "impossible", "stopped"


@dataclass
class _Effort:
    build_s: float = 0.0
    solve_s: float = 0.0
    cuts: int = 0
    restarts: int = 0
    peeled: int = 0  # nodes left out of the last model (put back after it)
    solver: str | None = None  # what decided the last question (minisat or the model's solver)


def _works(scale: float) -> Iterator[float]:
    """The work of each attempt: short, short, long, short, short, twice as long, ..."""
    long = LONG_WORK
    while True:
        yield SHORT_WORK * scale
        yield SHORT_WORK * scale
        yield long * scale
        long *= 2


def _colour(
    problem: RollProblem,
    rounds: int,
    clique: Sequence[str],
    kw: dict,
    packer: _Packer,
    deadline: float | None,
    effort: _Effort,
) -> tuple[str, list[RoundPlan]]:
    """Is there a plan of `rounds` rounds for `problem`? (FOUND, its packed rounds),
    (IMPOSSIBLE, []) proven, or (STOPPED, []) at the deadline. CP-SAT runs a
    deterministic amount of work per attempt (`_works`), each attempt with a fresh seed:
    near the colourability threshold the work to find a colouring is bimodal in the seed
    (on the 400-node benchmark either under 0.1 or 4-8 units), while a proof that none
    exists costs about the same whatever the seed (2-3 units there), so two short attempts
    catch most colourings and the long one holds the proof. A round that cannot be packed
    is cut off and the model solved again."""
    works = _works(max(1.0, len(problem.nodes) / 400))
    keep = set(problem.nodes)
    layout = form.layout_of(problem, [v for v in clique if v in keep], rounds, rounds)
    with Stopwatch() as sw:
        m = form.build(problem, layout)
        objective = form.objectives(m, problem)[0]
    effort.build_s += sw.seconds
    sliced = kw["solver"] == "cpsat"
    seed, work = 0, next(works)
    session = open_session(kw["solver"], m, kw["mip_gap"], kw["threads"], 0)
    try:
        session.set_objective(objective.expr, objective.sense)
        while True:
            left = None if deadline is None else max(deadline - time.perf_counter(), 0.01)
            if sliced:
                res = session.solve(time_limit=left, build_s=0.0, seed=seed, work_limit=work)
            else:
                res = session.solve(time_limit=left, build_s=0.0)
            effort.solve_s += res.solve_s
            if res.status is Status.INFEASIBLE:
                return IMPOSSIBLE, []
            late = deadline is not None and time.perf_counter() >= deadline - 0.01
            if not res.has_solution:
                if not sliced or late:
                    return STOPPED, []
                seed, work = seed + 1, next(works)
                effort.restarts += 1
                continue
            packed, failed = [], None
            for r in form.solution(m, problem):
                p = packer.pack(r)
                if p is None:
                    failed = r
                    break
                packed.append(p)
            if failed is None:
                return FOUND, packed
            for expr, lb, ub in form.cut_rows(m, failed):
                session.add_bound(expr, lb, ub)
            effort.cuts += 1
            if late:
                return STOPPED, []
    finally:
        session.close()


#: MiniSat's conflicts per attempt at a question "k rounds?" on 400 nodes (more in proportion
#: to the nodes), as CP-SAT's work below: two short attempts, each a fresh solver with the
#: clauses in another order from another DSatur colouring (the time to find a plan is
#: heavy-tailed in that order), then a long one, which goes on from the last long one's
#: learnt clauses (a proof is not started again), doubled each time round.
SAT_SHORT, SAT_LONG = 3000, 20000


def _budgets(scale: float) -> Iterator[tuple[bool, int]]:
    long = SAT_LONG
    while True:
        yield True, int(SAT_SHORT * scale)
        yield True, int(SAT_SHORT * scale)
        yield False, int(long * scale)
        long *= 2


#: Rounds the SAT relaxation may cut (memory covers and packings) before the question goes to
#: the full model, whose group rows may cut off in one what the clauses take one by one.
MAX_SAT_CUTS = 50


def _colour_sat(
    problem: RollProblem,
    rounds: int,
    clique: Sequence[str],
    packer: _Packer,
    deadline: float | None,
    effort: _Effort,
) -> tuple[str, list[RoundPlan]]:
    """The question "a plan of `rounds` rounds?" as clauses (formulations/roll_sat.py): no
    assignment is IMPOSSIBLE, proven (the clauses hold in every plan); an assignment whose
    rounds all fit their receiving nodes' memory and pack is FOUND; a round that does not
    adds its cover or cut clause and the solver goes on. STOPPED at the deadline or after
    MAX_SAT_CUTS cuts (the full model then decides)."""
    keep = set(problem.nodes)
    layout = form.layout_of(problem, [v for v in clique if v in keep], rounds, rounds)
    loads = problem.loads() if problem.rules.migrations else {}
    with Stopwatch() as sw:
        cnf = roll_sat.build_clauses(problem, layout)
    effort.build_s += sw.seconds
    budgets = _budgets(max(1.0, len(problem.nodes) / 400))
    added: list[tuple[int, ...]] = []  # covers and cuts, for the short attempts' solvers
    with SatSession(cnf.clauses) as session:
        with Stopwatch() as sw:
            session.set_phases(roll_sat.phases(problem, layout, cnf))
        effort.build_s += sw.seconds
        cut, seed = 0, 0
        while cut <= MAX_SAT_CUTS:
            left = None if deadline is None else max(deadline - time.perf_counter(), 0.01)
            short, budget = next(budgets)
            if short:  # a fresh solver, clauses in another order, from another colouring
                seed += 1
                with Stopwatch() as sw:
                    clauses = [*cnf.clauses, *added]
                    random.Random(seed).shuffle(clauses)
                    attempt = SatSession(clauses)
                    attempt.set_phases(roll_sat.phases(problem, layout, cnf, seed))
                effort.build_s += sw.seconds
                with attempt:
                    answer = attempt.solve(left, budget)
            else:  # the long attempts go on with what the last one learnt
                answer = session.solve(left, budget)
            effort.solve_s += answer.seconds
            if answer.satisfiable is False:
                return IMPOSSIBLE, []
            if answer.satisfiable is None:
                if deadline is not None and time.perf_counter() >= deadline - 0.01:
                    return STOPPED, []
                effort.restarts += 1
                continue
            cut += 1
            position = {v: i for i, v in enumerate(problem.nodes)}
            packed, cuts = [], []
            for r in cnf.rounds_of(answer.model):
                members = sorted(r, key=position.__getitem__)
                covers = roll_sat.memory_covers(problem, loads, members)
                if covers:
                    cuts += covers
                    continue
                p = packer.pack(members)
                if p is None:
                    cuts.append(members)
                    continue
                packed.append(p)
            if not cuts:
                return FOUND, packed
            new = [clause for c in cuts for clause in cnf.forbid(c)]
            session.add(new)
            added += new
            effort.cuts += len(cuts)
    return STOPPED, []


def _put_back(
    problem: RollProblem, plans: Sequence[RoundPlan], peeled: Sequence[str], rounds: int
) -> list[RoundPlan] | None:
    """The peeled nodes put back, last peeled first, each into the smallest of `rounds`
    rounds (the core's plan may use fewer) holding none of its conflicting nodes whose
    packing (first fit) still succeeds; None when one finds no such round (the full model
    then decides)."""
    adj = problem.neighbours()
    position = {v: k for k, v in enumerate(problem.nodes)}
    plans = [*plans, *(RoundPlan((), ()) for _ in range(rounds - len(plans)))]
    where = {v: i for i, p in enumerate(plans) for v in p.nodes}
    for v in reversed(peeled):
        taken = {where[w] for w in adj[v] if w in where}
        free = sorted(
            (i for i in range(len(plans)) if i not in taken), key=lambda i: (len(plans[i].nodes), i)
        )
        for i in free:
            members = sorted((*plans[i].nodes, v), key=position.__getitem__)
            moved = problem.items.get(v) or problem.migrations.get(v)
            if moved or any(step.target == v for step in plans[i].steps):
                packed = first_fit_round(problem, members)
            else:  # nothing leaves v and nothing went to it: the round's packing holds
                packed = RoundPlan(tuple(members), plans[i].steps)
            if packed is not None:
                plans[i] = packed
                where[v] = i
                break
        else:
            return None
    return [p for p in plans if p.nodes]


def _solve(
    problem: RollProblem,
    options: SolverOptions,
    packer: _Packer,
    best: list[RoundPlan],
    deadline: float | None,
    started: float,
    common: dict,
) -> RollPlan:
    """Is there a plan of k rounds, for k from the bound up to one less than the best plan
    known? The first k with one is the optimum; each k without one raises the bound. (A
    feasibility question per k was measured faster than minimising over the best plan's
    rounds: docs/roll.md, "How it is solved".) Each question is first asked of the nodes
    left once those with fewer than k conflicting nodes are peeled off (`model.roll.peel`):
    no plan there is no plan at all (a relaxation); a plan there is completed by putting
    the peeled nodes back, or, when their rounds cannot then be packed, the question is
    asked of every node."""
    kw = _kwargs(options)
    effort = _Effort()

    def colour(p: RollProblem, k: int) -> tuple[str, list[RoundPlan]]:
        """SAT first (the solver not chosen), then the model if SAT stopped short."""
        if not options.solver_given:
            outcome, found = _colour_sat(p, k, common["clique"], packer, deadline, effort)
            late = deadline is not None and time.perf_counter() >= deadline - 0.01
            if outcome != STOPPED or late:
                effort.solver = SAT_LABEL
                return outcome, found
        effort.solver = kw["solver"]
        return _colour(p, k, common["clique"], kw, packer, deadline, effort)

    status, bound = Status.FEASIBLE, common["bound"]
    for k in range(bound, len(best)):
        core, peeled = peel(problem, k)
        effort.peeled = len(peeled)
        sub = problem.restricted(core) if peeled else problem
        if core:
            outcome, found = colour(sub, k)
        else:  # every node peeled: putting them back is the plan
            outcome, found = FOUND, []
        if outcome == FOUND and peeled:
            found = _put_back(problem, found, peeled, k) or []
            if not found:
                effort.peeled = 0
                outcome, found = colour(problem, k)
        if outcome == IMPOSSIBLE:
            bound = k + 1  # no plan of k rounds
            continue
        if outcome == FOUND:
            best = found
        break
    if len(best) <= bound and not packer.unproven:
        status = Status.OPTIMAL
    elif packer.unproven:
        status, bound = Status.FEASIBLE, common["bound"]  # a cut may rest on an undecided packing
    common = {**common, "bound": min(bound, len(best))}
    return RollPlan(
        tuple(best),
        str(status),
        method=MODEL,
        solver=effort.solver or kw["solver"],
        build_s=effort.build_s,
        solve_s=effort.solve_s,
        cuts=effort.cuts,
        packings=packer.exact,
        restarts=effort.restarts,
        peeled=effort.peeled,
        seconds=time.perf_counter() - started,
        **common,
    )
