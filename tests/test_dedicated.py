"""Dedicated metric as linear capacities, and the two MIP builders, without the real hail.

* `model.dedicated.vector_of` (closed form over capacity rows) equals the checker's
  `model.dedicated.allocation_vector` (repeated strict adds) on many random node states,
  including states after new primaries and drbd secondaries;
* the count-variable batch model with one instance gives the same lost vector and disk as the
  constant-coefficient single model (whose answers the hail tests compare with the real hail).
"""

from __future__ import annotations

import json
import random
from dataclasses import replace

import dedicated_gen as gen
import pytest

from formulations import batch as batch_form
from formulations import dedicated as form
from model.backends.iallocator import new_instance, parse_request
from model.capacity import max_total_vcpus
from model.dedicated import allocation_vector as checker_vector
from model.dedicated import format_metric, minimal_instances, vector_of
from model.errors import SolverError
from model.resources import FailMode, add_primary, add_secondary, demand_of
from model.state import node_states
from solvers import Status, solve_lexicographic
from solvers.strategies.iallocator import IAllocatorOptions, answer

DED_1 = {
    "node1-empty": (1, 2, 4),
    "node2-quarter": (0, 1, 3),
    "node3-half": (0, 1, 2),
    "node4-full": (0, 0, 0),
}


def _load(data: dict) -> tuple:
    inp = parse_request(json.dumps(data))
    return inp, node_states(inp.cluster)


def test_vcpu_limit_matches_float_division() -> None:
    for t_cpu in (1, 3, 5, 7, 16, 24.0, 0.5):
        for ratio in (0.3, 1.0, 1.1, 2.5, 4.0, 0.0):
            v = max_total_vcpus(t_cpu, ratio)
            assert v / t_cpu <= ratio
            assert (v + 1) / t_cpu > ratio
    assert max_total_vcpus(8, -1.0) is None


def test_format_metric_is_haskell_show() -> None:
    assert format_metric((0, 0, 1), 20490) == "([0,0,1],20490)"
    assert format_metric((), 5) == "([],5)"


def test_closed_form_vectors_of_spec_3_3(ganeti) -> None:
    """The hand-checked table of docs/htools-facts.md §3 (hail-alloc-dedicated-1.json)."""
    text = (ganeti.data_dir / "hail-alloc-dedicated-1.json").read_text()
    inp = parse_request(text)
    states = node_states(inp.cluster)
    tests = minimal_instances(inp.cluster.groups[0].ipolicy)
    got = {n: vector_of(tests)(st) for n, st in states.nodes.items()}
    assert got == DED_1


@pytest.mark.parametrize("seed", range(40))
def test_closed_form_equals_repeated_adds(seed: int) -> None:
    rng = random.Random(seed)
    data = gen.allocate(
        rng,
        6,
        template="drbd",
        slices=("full", "threequarter", "half", "quarter"),
        vcpu_ratio=rng.choice((1.0, 1.5, 3.0)),
        drbd_share=0.5,
    )
    inp, states = _load(data)
    d = demand_of(new_instance(inp.request), states.rules)
    for name, st in states.nodes.items():
        ipolicy = states.ipolicy_of(name)
        tests = minimal_instances(ipolicy)
        assert vector_of(tests)(st) == checker_vector(st, ipolicy), name
        after = add_primary(st, d)
        if not isinstance(after, FailMode):
            assert vector_of(tests)(after) == checker_vector(after, ipolicy)
        for p in states.nodes:
            if p == name:
                continue
            sec = add_secondary(st, d, p)
            if not isinstance(sec, FailMode):
                assert vector_of(tests)(sec) == checker_vector(sec, ipolicy)


@pytest.mark.parametrize("seed", range(30))
def test_batch_model_agrees_with_single_model(seed: int) -> None:
    """One instance through the count-variable model: same lost vector and remaining disk."""
    rng = random.Random(1000 + seed)
    template = "drbd" if seed % 3 == 0 else "plain"
    data = gen.allocate(rng, rng.choice((4, 6, 8)), template=template, drbd_share=0.4)
    inp, states = _load(data)
    single = answer(inp, IAllocatorOptions())
    resp = json.loads(single.response)
    batch_req = dict(data)
    req = dict(data["request"], type="multi-allocate")
    batch_req["request"] = {"type": "multi-allocate", "instances": [req]}
    multi = answer(parse_request(json.dumps(batch_req)), IAllocatorOptions())
    mresp = json.loads(multi.response)
    if not resp["success"]:
        assert mresp["result"][0] == []
        return
    assert mresp["result"][1] == []
    lost_single = single.objectives["lost_allocations_total"]
    lost_multi = multi.objectives["lost_allocations_total"]
    assert lost_multi == lost_single
    assert multi.objectives["remaining_disk_mib"] == single.objectives["remaining_disk_mib"]


def test_batch_objectives_are_exact_counts() -> None:
    """At the optimum every count variable sits on its bound (the checker's count)."""
    rng = random.Random(7)
    data = gen.multi_allocate(rng, 8, 5, odd_nodes=True)
    inp, states = _load(data)
    report = answer(inp, IAllocatorOptions())
    assert json.loads(report.response)["success"]
    assert report.runs[0].status == Status.OPTIMAL


def test_build_single_tie_break_takes_the_later_node() -> None:
    cands = tuple(
        form.SingleCandidate(
            name=f"n{i}", rank=i, group="g", primary_lost=(0, 1), primary_disk_mib=5
        )
        for i in range(4)
    )
    problem = form.SingleProblem(cands, 2, drbd=False)
    m = form.build_single(problem)
    lex = solve_lexicographic(m, form.single_objectives(m, problem))
    assert lex.status == Status.OPTIMAL
    assert form.single_solution(m, problem) == ("n3", None)


def test_build_single_drbd_peer_reservation_changes_the_pair() -> None:
    """s1 already reserves memory for p0: as p0's secondary it loses more, so p0/s2 wins."""
    cands = (
        form.SingleCandidate("p0", 0, "g", primary_lost=(0, 1), primary_disk_mib=10),
        form.SingleCandidate(
            "s1",
            1,
            "g",
            secondary_lost=(0, 0),
            secondary_disk_mib=5,
            secondary_lost_with={"p0": (1, 1)},
        ),
        form.SingleCandidate("s2", 2, "g", secondary_lost=(0, 1), secondary_disk_mib=5),
    )
    problem = form.SingleProblem(cands, 2, drbd=True)
    m = form.build_single(problem)
    lex = solve_lexicographic(m, form.single_objectives(m, problem, blend=False))
    assert lex.status == Status.OPTIMAL
    assert form.single_solution(m, problem) == ("p0", "s2")
    assert form.single_lost_claim(problem, lex.objective) == (0, 2)


def _random_candidates(rng: random.Random, drbd: bool) -> tuple[form.SingleCandidate, ...]:
    """Nodes of a few types (identical metrics: the classes), two groups, some failing
    roles and, for drbd, existing failover reservations (some of which fail)."""
    lost_choices = [(0, 1), (1, 1), (0, 2), (1, 0)]
    types = [
        (
            rng.choice([None, *lost_choices]),
            rng.choice([5, 7]),
            rng.choice([None, *lost_choices]) if drbd else None,
            rng.choice([5, 7]),
        )
        for _ in range(rng.randint(1, 3))
    ]
    n = rng.randint(2, 16)
    cands = []
    for i in range(n):
        p_lost, p_disk, s_lost, s_disk = rng.choice(types)
        with_p: dict[str, tuple[int, ...] | None] = {}
        if drbd and s_lost is not None and rng.random() < 0.4:
            p = f"n{n - 1 - rng.randrange(min(n, 2))}"  # several reserve for a late primary
            if p != f"n{i}":  # a reservation for p only ever costs more
                with_p[p] = rng.choice([None, tuple(x + 1 for x in s_lost)])
        cands.append(
            form.SingleCandidate(
                name=f"n{i}",
                rank=i,
                group=rng.choice("aab"),
                primary_lost=p_lost,
                primary_disk_mib=p_disk,
                secondary_lost=s_lost,
                secondary_disk_mib=s_disk,
                secondary_lost_with=with_p,
            )
        )
    return tuple(cands)


def _brute_force_single(cands: tuple[form.SingleCandidate, ...], drbd: bool) -> tuple | None:
    """Every primary (and secondary) tried: least (lost, disk), then the later node/pair."""
    best = None
    for p in cands:
        if p.primary_lost is None:
            continue
        pairs = [(p, None)]
        if drbd:
            pairs = [(p, s) for s in cands if s is not p and s.group == p.group]
        for _, s in pairs:
            lost, disk, tie = p.primary_lost, p.primary_disk_mib, (p.rank,)
            if s is not None:
                s_lost = s.secondary_lost_with.get(p.name, s.secondary_lost)
                if s_lost is None or s.secondary_lost is None:
                    continue
                lost = tuple(a + b for a, b in zip(lost, s_lost, strict=True))
                disk, tie = disk + s.secondary_disk_mib, (p.rank, s.rank)
            key = (lost, disk, tuple(-t for t in tie))
            if best is None or key < best[0]:
                best = (key, p.name, None if s is None else s.name)
    return None if best is None else best[1:]


@pytest.mark.parametrize("drbd", [False, True])
def test_build_single_with_representatives_is_exact(drbd: bool) -> None:
    """Leaving out interchangeable candidates never changes the answer (checked against
    trying every candidate and pair)."""
    rng = random.Random(11 + drbd)
    reduced = 0
    for _ in range(120):
        cands = _random_candidates(rng, drbd)
        expected = _brute_force_single(cands, drbd)
        if expected is None:  # hail finds no placement: the model is not built
            continue
        problem = form.SingleProblem(cands, 2, drbd)
        m = form.build_single(problem)
        reduced += len(m.P) + len(m.S) < sum(
            (c.primary_lost is not None) + (drbd and c.secondary_lost is not None) for c in cands
        )
        lex = solve_lexicographic(m, form.single_objectives(m, problem))
        assert lex.status == Status.OPTIMAL
        assert form.single_solution(m, problem) == expected
    assert reduced > 30  # the classes did leave candidates out


@pytest.mark.parametrize("drbd", [False, True])
def test_single_blended_stage_has_the_optimum_of_separate_stages(drbd: bool) -> None:
    """The lost vector and the disk read as one integer (`single_key`, issue 15) give the
    same choice, lost vector and disk as the two stages they replace, on random cases with
    disks of every size."""
    rng = random.Random(23 + drbd)
    blended = 0
    for _ in range(80):
        cands = tuple(
            replace(
                c,
                primary_disk_mib=rng.randint(0, 4_000_000),
                secondary_disk_mib=rng.randint(0, 4_000_000),
            )
            for c in _random_candidates(rng, drbd)
        )
        if _brute_force_single(cands, drbd) is None:
            continue
        problem = form.SingleProblem(cands, 2, drbd)
        answers = []
        for blend in (True, False):
            m = form.build_single(problem)
            objs = form.single_objectives(m, problem, blend=blend)
            lex = solve_lexicographic(m, objs)
            assert lex.status == Status.OPTIMAL
            first = lex.objective[0]
            if objs[0].name == form.LOST_AND_DISK:
                lost, disk = form.split_lost_and_disk(problem, first)
                blended += 1
            else:
                lost, disk = round(first), round(lex.objective[1])
            answers.append((form.single_solution(m, problem), lost, disk))
        assert answers[0] == answers[1]
    assert blended > 40


def _assert_as_the_every_pair_model(monkeypatch, inp, lazy) -> None:
    """`lazy` (pair rounds) has the objectives of the model that sums on every pair."""
    build = batch_form.build_batch
    monkeypatch.setattr(
        batch_form,
        "build_batch",
        lambda problem, **kw: build(replace(problem, shared_pairs=None), **kw),
    )
    exact = answer(inp, IAllocatorOptions())
    for key in ("lost_allocations_total", "remaining_disk_mib"):
        assert lazy.objectives[key] == exact.objectives[key]
    assert len(lazy.placements) == len(exact.placements) == 3


@pytest.mark.parametrize("seed", [2, 4, 5, 8])
def test_drbd_batches_shared_pairs_rounds_reach_the_exact_optimum(monkeypatch, seed) -> None:
    """Several drbd instances on one (primary, secondary) pair: the one-per-pair model is
    refined until exact; its answer equals the model that sums on every pair."""
    rng = random.Random(seed)
    data = gen.multi_allocate(
        rng, 4, 3, template="drbd", odd_nodes=False, fits=True, slices=("quarter",), drbd_share=0
    )
    inp = parse_request(json.dumps(data))
    lazy = answer(inp, IAllocatorOptions())
    assert lazy.runs[0].status == Status.OPTIMAL
    _assert_as_the_every_pair_model(monkeypatch, inp, lazy)


def test_lost_radix_orders_like_the_lexicographic_order() -> None:
    """Read as one integer, lost vectors compare exactly as tuples do, and decode back."""
    rng = random.Random(5)
    for _ in range(50):
        n = rng.randint(1, 4)
        prim = [tuple(rng.randint(0, 9) for _ in range(n)) for _ in range(rng.randint(1, 6))]
        sec = [tuple(rng.randint(0, 5) for _ in range(n)) for _ in range(rng.randint(0, 6))]
        lo, weights = form.lost_radix(prim, sec, n)
        vectors = [
            tuple(a + b for a, b in zip(p, s, strict=True))
            for p in prim
            for s in (sec or [(0,) * n])
        ]
        ranks = {v: sum(w * x for w, x in zip(weights, v, strict=True)) for v in vectors}
        for a in vectors:
            for b in vectors:
                assert (ranks[a] < ranks[b]) == (a < b)
        problem = type("P", (), {"lost_radix": (lo, weights), "n_tests": n})()
        for v in vectors:
            assert form.single_lost_claim(problem, (float(ranks[v]),)) == v
    assert form.lost_radix([(10**7, 10**7, 0)], [(0, 0, 10**7)], 3) is not None
    wide = [(0, 0, 0), (10**5, 10**5, 10**5)]
    assert form.lost_radix(wide, [], 3) is None  # (10^5)^3 > 2^40: stages instead


@pytest.mark.parametrize("seed", [2, 4])
def test_drbd_rounds_fall_back_when_the_pinned_values_are_out_of_reach(monkeypatch, seed) -> None:
    """A refined round first asks for the previous round's values; when the tighter model
    cannot reach them (here: pinned one MiB of remaining disk too low) it is solved in full,
    and the answer is still the exact one."""
    rng = random.Random(seed)
    data = gen.multi_allocate(
        rng, 4, 3, template="drbd", odd_nodes=False, fits=True, slices=("quarter",), drbd_share=0
    )
    inp = parse_request(json.dumps(data))
    pin = batch_form.pin_objectives
    pinned: list[tuple[float, ...]] = []

    def unreachable(m, objs, values):
        pinned.append(values)
        pin(m, objs, (*values[:-1], values[-1] - 1))

    monkeypatch.setattr(batch_form, "pin_objectives", unreachable)
    lazy = answer(inp, IAllocatorOptions())
    assert pinned  # the rounds took the pinned path
    assert lazy.runs[0].status == Status.OPTIMAL
    _assert_as_the_every_pair_model(monkeypatch, inp, lazy)


def _out_of_time_after_the_first_round(monkeypatch) -> list[str]:
    """The dedicated strategy's solver: the first round solves, every later one finds nothing."""
    import solvers.strategies.dedicated as hail
    from solvers.result import LexResult, SolveResult

    calls: list[str] = []  # the models' names: batch rounds, and single allocates of the
    # one-by-one batch an unproven answer is compared with

    def solve(m, objs, **kw):
        calls.append(m.name)
        if len(calls) == 1:
            return solve_lexicographic(m, objs, **kw)
        stop = SolveResult(Status.TIME_LIMIT, None, None, None, 0.0, 0.0, "highs")
        return LexResult.from_stages(tuple(o.name for o in objs), (stop,), 0.0)

    monkeypatch.setattr(hail, "solve_lexicographic", solve)
    return calls


def test_drbd_rounds_out_of_time_keep_the_earlier_batch_if_it_checks(monkeypatch) -> None:
    """Seed 2's first round shares a pair (three quarters on one pair, which fit): when the
    refined rounds run out of time, that batch is the answer, labelled feasible, checked."""
    rng = random.Random(2)
    data = gen.multi_allocate(
        rng, 4, 3, template="drbd", odd_nodes=False, fits=True, slices=("quarter",), drbd_share=0
    )
    inp = parse_request(json.dumps(data))
    calls = _out_of_time_after_the_first_round(monkeypatch)
    report = answer(inp, IAllocatorOptions())
    rounds = [c for c in calls if c != "dedicated_single"]
    assert len(rounds) == 3  # round 1, round 2 pinned, round 2 in full
    assert report.runs[0].status == Status.FEASIBLE
    assert len(report.placements) == 3 and report.objectives["lost_allocations_total"]


def test_drbd_rounds_out_of_time_refuse_an_earlier_batch_that_fails(monkeypatch) -> None:
    import solvers.strategies.dedicated as hail
    from model.check import CheckReport, Violation

    rng = random.Random(2)
    data = gen.multi_allocate(
        rng, 4, 3, template="drbd", odd_nodes=False, fits=True, slices=("quarter",), drbd_share=0
    )
    inp = parse_request(json.dumps(data))
    _out_of_time_after_the_first_round(monkeypatch)
    bad = CheckReport((Violation("n1", "too little memory for the failovers", node="node0003"),))
    monkeypatch.setattr(hail, "check_local", lambda states, placements: bad)
    with pytest.raises(SolverError, match="out of time"):
        answer(inp, IAllocatorOptions())
