"""formulations.squeeze on hand-made problems whose optimum is known by hand."""

from __future__ import annotations

import pyomo.environ as pyo

from formulations.squeeze import (
    build,
    build_type_aggregate,
    interchangeable_runs,
    objectives,
    solution,
    type_aggregate_objectives,
    type_aggregate_solution,
)
from model.squeeze import SHRINK, Shape, SqueezeNode, SqueezeProblem
from solvers import Status, solve, solve_lexicographic


def node(name: str, state: str, room: int) -> SqueezeNode:
    return SqueezeNode(
        name=name,
        state=state,
        room_memory_mib=room,
        room_memory_forth_mib=room,
        room_vcpus=100,
        total_memory_mib=8192.0,
        fixed_used_memory_mib=1024.0,
    )


def shape(key: str, counts: tuple[tuple[int, int], ...], tags: tuple[str, ...] = ()) -> Shape:
    return Shape(key, 1024, 1024, 1, tags, counts)


def solved(problem: SqueezeProblem) -> tuple[pyo.ConcreteModel, tuple]:
    model = build(problem)
    res = solve_lexicographic(model, objectives(model, problem))
    assert res.status is Status.OPTIMAL
    return model, res.objective


def test_everything_fits_on_the_node_that_stays() -> None:
    problem = SqueezeProblem(
        SHRINK,
        (node("a", "on", 4096), node("b", "candidate", 4096), node("c", "candidate", 4096)),
        (shape("s", ((1, 2), (2, 1))),),
    )
    model, objective = solved(problem)
    assert objective[:2] == (2.0, 3.0)  # both candidates freed, three migrations
    assert round(pyo.value(model.y[0, 0])) == 3


def test_fewest_moves_frees_the_emptier_node() -> None:
    problem = SqueezeProblem(
        SHRINK,
        (node("a", "on", 2048), node("b", "candidate", 4096), node("c", "candidate", 4096)),
        (shape("s", ((1, 3), (2, 1))),),
    )
    model, objective = solved(problem)
    assert objective[:2] == (1.0, 1.0)
    assert round(pyo.value(model.on[2])) == 0 and round(pyo.value(model.on[1])) == 1


def test_exclusion_tags_keep_namesakes_apart() -> None:
    problem = SqueezeProblem(
        SHRINK,
        (node("a", "on", 8192), node("b", "candidate", 4096), node("c", "candidate", 4096)),
        (shape("t1", ((1, 1),), ("svc:db",)), shape("t2", ((2, 1),), ("svc:db",))),
    )
    _, objective = solved(problem)
    assert objective[0] == 1.0  # only one of the two db instances may join node a


def test_aggregate_bounds_the_node_count() -> None:
    problem = SqueezeProblem(
        SHRINK,
        (node("a", "on", 3000), *(node(f"n{k}", "candidate", 3000) for k in range(4))),
        (shape("s", ((1, 2), (2, 2), (3, 1), (4, 1))),),
    )
    _, objective = solved(problem)
    agg = build_type_aggregate(problem)
    res = solve_lexicographic(agg, type_aggregate_objectives(agg, problem))
    assert res.objective[0] >= objective[0] == 2.0  # 6 × 1 GiB, two per 3000 MiB node


def test_symmetry_only_between_equal_content() -> None:
    problem = SqueezeProblem(
        SHRINK,
        (node("a", "on", 4096), *(node(f"n{k}", "candidate", 4096) for k in range(3))),
        (shape("s", ((1, 1), (2, 1), (3, 2))),),
    )
    assert interchangeable_runs(problem) == [[1, 2]]
    model = build(problem)
    model.obj = pyo.Objective(expr=objectives(model, problem)[0].expr, sense=pyo.maximize)
    assert solve(model).status is Status.OPTIMAL


def test_solution_reads_back_power_counts_and_pairs() -> None:
    problem = SqueezeProblem(
        SHRINK,
        (node("a", "on", 4096), node("b", "candidate", 4096), node("c", "candidate", 4096)),
        (shape("s", ((1, 2), (2, 1))),),
    )
    model, _ = solved(problem)
    plan = solution(model, problem)
    assert dict(plan.on) == {0: True, 1: False, 2: False}
    assert dict(plan.counts) == {(0, 0): 3} and dict(plan.pairs) == {}


def test_type_aggregate_solution_shares_every_instance() -> None:
    problem = SqueezeProblem(
        SHRINK,
        (node("a", "on", 3000), *(node(f"n{k}", "candidate", 3000) for k in range(4))),
        (shape("s", ((1, 2), (2, 2), (3, 1), (4, 1))),),
    )
    agg = build_type_aggregate(problem)
    res = solve_lexicographic(agg, type_aggregate_objectives(agg, problem))
    shares = type_aggregate_solution(agg, problem)
    assert shares.types == ((0,), (1, 2, 3, 4))
    assert sum(shares.share.values()) == problem.shapes[0].total
    assert shares.powered_on[0] == 1
    assert shares.powered_on[1] == 4 - res.objective[0]
