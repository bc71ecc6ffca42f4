"""Joint placement by cluster score (model/placement.py, formulations/placement.py,
solvers/strategies/placement.py) against a brute force: on small random clusters (plain, ext and
drbd instances, uneven nodes), every combination of placements of a batch is tried and judged by
the independent checker; the strategy places as many instances and reaches the least score, and
says it proved it.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest
from conftest import sampled

from formulations.placement import reserve_may_rise
from model.backends.text import parse_text
from model.check import check_allocation
from model.cluster import Disk, Instance
from model.placement import candidates, new_instance, placement_problem, sd_of, tangent
from model.state import ClusterState, node_states
from solvers.strategies.placement import place_jointly


def _snapshot(rng: random.Random, n_nodes: int, templates: tuple[str, ...]) -> str:
    lines = ["group-01|fake-uuid-01|preferred||", ""]
    for k in range(n_nodes):
        mem = rng.choice((8192, 16384, 32768))
        disk = rng.choice((100000, 200000))
        free_disk = disk - rng.randrange(0, disk // 2)
        cpus = rng.choice((4, 8, 16))
        free_mem = mem - rng.randrange(0, mem // 2)
        lines.append(f"n{k}|{mem}|0|{free_mem}|{disk}|{free_disk}|{cpus}|N|fake-uuid-01|1")
    lines.append("")
    for k in range(rng.randrange(0, 6)):
        t = rng.choice(templates)
        p = rng.randrange(n_nodes)
        s = f"n{(p + 1 + rng.randrange(n_nodes - 1)) % n_nodes}" if t == "drbd" else ""
        mem, dsk = rng.choice((512, 1024, 2048)), rng.choice((1024, 10240))
        lines.append(f"e{k}|{mem}|{dsk}|{rng.randrange(1, 3)}|running|Y|n{p}|{s}|{t}||1")
    return "\n".join([*lines, "", "", ""])


def _best_by_brute_force(state, demands) -> tuple[int, float]:
    """Every node as primary (and every node as secondary), not only exalloc's candidates():
    the checker alone says which plans are valid."""
    names = list(demands)
    nodes = list(state.nodes)
    options = []
    for name in names:
        pairs = (
            itertools.product(nodes, nodes)
            if demands[name].has_secondary
            else ((p, None) for p in nodes)
        )
        options.append([None, *pairs])
    best: tuple[int, float] | None = None
    for combo in itertools.product(*options):
        placements = [(demands[n], c[0], c[1]) for n, c in zip(names, combo, strict=True) if c]
        report = check_allocation(state, placements)
        if report.violations:
            continue
        key = (-len(placements), report.objectives["score"])
        if best is None or key < best:
            best = key
    assert best is not None  # placing nothing is always valid
    return -best[0], best[1]


def _batch(
    rng: random.Random, state: ClusterState, templates: tuple[str, ...], crowded: bool = False
) -> dict:
    """1-3 new instances of the given templates (2-3 of up to 24 GiB each when `crowded`, so
    that a batch often cannot be placed whole): name -> demand."""
    demands = {}
    for j in range(rng.randrange(2, 4) if crowded else rng.randrange(1, 4)):
        template = rng.choice(templates)
        disk = Disk(rng.choice((1024, 20480, 60000)))
        memory = rng.choice((8192, 16384, 24576) if crowded else (1024, 4096, 8192))
        inst = Instance(f"new{j}", memory, (disk,), rng.randrange(1, 4), "running", True, "",
                        None, template)  # fmt: skip
        demands[inst.name] = state.demand(inst)
    return demands


def random_case(
    seed: int, drbd_every: int, crowded: bool = False
) -> tuple[ClusterState, dict, dict]:
    """A small random cluster (drbd among the templates for every `drbd_every`-th seed), a
    batch for it and each instance's candidates: (state, name -> demand, name -> candidates)."""
    rng = random.Random(seed)
    templates = ("plain", "ext", "drbd") if seed % drbd_every == 0 else ("plain", "ext")
    state = node_states(parse_text(_snapshot(rng, rng.randrange(3, 5), templates), "<test>"))
    group = state.cluster.groups[0]
    demands = _batch(rng, state, templates, crowded)
    return state, demands, {n: candidates(state, d, [group]) for n, d in demands.items()}


def _kinds(state: ClusterState, demands: dict, cands: dict) -> list:
    return [
        (d, new_instance(state, d, *cands[n], order=i)) for i, (n, d) in enumerate(demands.items())
    ]


# Crowded batches of which the best plan places some but not all instances, so the "most
# placed" stage meets the brute force (uncrowded, every one of seeds 0-29 places all).
CROWDED_SEEDS = (1, 3, 4, 6, 7, 8, 10, 14, 16, 18, 19, 20, 22, 25, 26)


@pytest.mark.parametrize(
    ("seed", "crowded"),
    sampled([(s, False) for s in range(30)] + [(s, True) for s in CROWDED_SEEDS], unpack=True),
)
def test_joint_placement_equals_brute_force(seed: int, crowded: bool) -> None:
    state, demands, cands = random_case(seed, drbd_every=3, crowded=crowded)
    placed, score = _best_by_brute_force(state, demands)
    assert (0 < placed < len(demands)) if crowded else placed == len(demands)
    kinds = [
        (d, k)
        for d, k in _kinds(state, demands, cands)
        if k.primaries and (not k.drbd or k.secondaries)
    ]
    if not kinds:
        assert placed == 0
        return
    problem = placement_problem(state, kinds, list(state.nodes))
    plan = place_jointly(state, problem, demands, {k.name: [k.name] for _, k in kinds}, group=None)
    assert plan.placed == placed
    assert plan.status == "optimal"
    if placed:
        assert plan.score == pytest.approx(score, abs=1e-9)
        assert plan.bound is not None and plan.bound <= plan.score + 1e-9
        report = check_allocation(
            state, [(demands[n], p, s) for n, (p, s) in plan.placements.items()]
        )
        assert not report.violations


def test_tangent_planes_lie_under_the_spread() -> None:
    rng = random.Random(1)
    for _ in range(200):
        at = [rng.uniform(0, 1) for _ in range(rng.randrange(1, 8))]
        sd, grad = tangent(at)
        assert sd == pytest.approx(sd_of(at))
        other = [v + rng.uniform(-0.5, 0.5) for v in at]
        plane = sd + sum(g * (o - a) for g, o, a in zip(grad, other, at, strict=True))
        assert sd_of(other) >= plane - 1e-12


def test_reserves_exact_without_their_rows_above_sixteen_nodes() -> None:
    """Up to 16 nodes a reserve raised above its true value can lower the reserves' spread by
    more than it adds to their total, and the model keeps the rows that pin it."""
    state, demands, cands = random_case(0, drbd_every=1)
    kinds = _kinds(state, demands, cands)
    small = placement_problem(state, kinds, list(state.nodes))
    assert reserve_may_rise(small)
    assert reserve_may_rise(replace(small, scored=tuple(f"n{k}" for k in range(16))))
    assert not reserve_may_rise(replace(small, scored=tuple(f"n{k}" for k in range(17))))


def _plans_by_score(state, demands) -> list[tuple[float, dict]]:
    """Every valid plan placing the whole batch, by the checker's score: every node (pair) is
    tried, the checker alone says which are valid."""
    names = list(demands)
    nodes = list(state.nodes)
    options = [
        list(itertools.product(nodes, nodes))
        if demands[name].has_secondary
        else [(p, None) for p in nodes]
        for name in names
    ]
    plans = []
    for combo in itertools.product(*options):
        report = check_allocation(
            state, [(demands[n], *c) for n, c in zip(names, combo, strict=True)]
        )
        if not report.violations:
            plans.append((report.objectives["score"], dict(zip(names, combo, strict=True))))
    return sorted(plans, key=lambda sp: sp[0])


@pytest.mark.parametrize("seed", sampled(range(6)))
def test_joint_placement_on_seventeen_nodes_equals_brute_force(seed: int) -> None:
    """Above 16 nodes the model bounds the new reserves from below only
    (formulations/placement.py `reserve_may_rise`): from a middling known plan (as hail's
    one-by-one plan starts it), the least score is still reached, exact and proven, with a drbd
    instance raising the reserve of its secondary. (Without a known plan, tangent planes alone
    bound 17 nodes too slowly: 42 rounds in 20 s leave 2.197 below the least 2.559.)"""
    rng = random.Random(1000 + seed)
    state = node_states(parse_text(_snapshot(rng, 17, ("plain", "drbd")), "<test>"))
    group = state.cluster.groups[0]
    disk = Disk(rng.choice((1024, 20480)))
    inst = Instance("new0", rng.choice((1024, 4096, 8192)), (disk,), 2, "running", True, "", None,
                    "drbd")  # fmt: skip
    demands = {inst.name: state.demand(inst)}  # one drbd instance: 272 (primary, secondary) pairs
    cands = {n: candidates(state, d, [group]) for n, d in demands.items()}
    plans = _plans_by_score(state, demands)
    kinds = _kinds(state, demands, cands)
    problem = placement_problem(state, kinds, list(state.nodes))
    assert not reserve_may_rise(problem)
    plan = place_jointly(state, problem, demands, {k.name: [k.name] for _, k in kinds},
                         group=None, start=plans[len(plans) // 2][1])  # fmt: skip
    assert (plan.placed, plan.status) == (len(demands), "optimal")
    assert plan.score == pytest.approx(plans[0][0], abs=1e-9)
    assert plan.bound is not None and plan.bound <= plan.score + 1e-9
