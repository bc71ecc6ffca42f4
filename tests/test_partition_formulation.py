"""formulations/partition.py keeps the formulation contract (formulations/__init__.py).

build/objectives/solution, the polish step that must leave the model as it found it, and the
LP-floor baseline's objective against bareon-allocator's own coefficients (docs/partition.md,
"bareon-allocator, the original").
"""

from __future__ import annotations

from fractions import Fraction

import pyomo.environ as pyo
import pytest
from pyomo.repn import generate_standard_repn

from formulations import partition as form
from formulations.partition import LayoutProblem
from model.bareon.schema import ALLOCATOR_OVERHEADS, BAREON_OVERHEADS, problem_from_data
from solvers import solve_lexicographic

JOURNAL_EXAMPLE = (
    [
        {"id": "journal", "type": "partitions", "best_with_disks": ["sdb"]},
        {"id": "root", "type": "lv", "min_size": 10},
    ],
    {"disks": [{"id": "sda", "size": 100, "type": "hdd"}, {"id": "sdb", "size": 10}]},
)


def lvm_server() -> LayoutProblem:
    disks = [{"id": f"d{i}", "size": 3000} for i in range(3)] + [{"id": "ssd", "size": 800}]
    schema = [
        {"id": "os", "type": "vg", "contains": ["root", "var"]},
        {"id": "root", "type": "lv", "min_size": 500, "max_size": 2000},
        {"id": "var", "type": "lv", "weight": 2},
        {"id": "data", "type": "lv"},
        {"id": "cache", "type": "partitions", "max_size": 700, "best_with_disks": ["ssd"]},
        {"id": "images", "type": "vg", "contains": ["data"]},
    ]
    return LayoutProblem(problem_from_data(schema, {"disks": disks}), BAREON_OVERHEADS)


def _attributes(m: pyo.ConcreteModel) -> set[str]:
    return {k for k in vars(m) if not k.startswith("_")}


@pytest.mark.parametrize("aggregate", [False, True])
def test_nothing_but_pyomo_components_on_the_model(aggregate):
    p = lvm_server()
    m = form.build(p, aggregate=aggregate, integer_placement=False)
    plain = _attributes(pyo.ConcreteModel())
    loose = {k for k in _attributes(m) - plain if not isinstance(getattr(m, k), pyo.base.Component)}
    assert loose == set()
    assert all(m.component(st.name) is not None for st in p.stages)


def test_objectives_leave_out_stages_without_a_variable():
    # no space prefers a disk: stage 1 (off preferred) and, when preferred disks are left
    # empty, stage 3 (wrong disk) are constants
    problem = problem_from_data(
        [{"id": "a", "type": "lv"}, {"id": "b", "type": "lv"}],
        {"disks": [{"id": "sda", "size": 9}]},
    )
    plain = LayoutProblem(problem, ALLOCATOR_OVERHEADS)
    names = [o.name for o in form.objectives(form.build(plain), plain)]
    assert names == ["right_disk_mib", "allocated_mib", "space_order"]
    empty = LayoutProblem(problem, ALLOCATOR_OVERHEADS, leave_preferred_empty=True)
    names = [o.name for o in form.objectives(form.build(empty), empty)]
    assert names == ["right_disk_mib", "space_order"]


def test_solution_reads_back_consistent_plain_numbers():
    p = lvm_server()
    m = form.build(p)
    lex = solve_lexicographic(m, form.objectives(m, p))
    assert lex.has_solution
    values = form.solution(m, p)
    assert set(values.total_mib) == set(p.space_ids)
    for s in p.space_ids:
        placed = sum(values.mib[d.disk_id, s] for d in p.problem.disks)
        assert placed == pytest.approx(values.total_mib[s])
    assert set(values.pv_count) == {(g, d.disk_id) for g in p.vg_lvs for d in p.problem.disks}
    # every MiB of an LV lies in a PV of its VG on that disk
    for g, lvs in p.vg_lvs.items():
        for d in p.problem.disks:
            if any(values.mib[d.disk_id, s] > 0.5 for s in lvs):
                assert values.pv_count[g, d.disk_id] == pytest.approx(1)


def test_polish_rows_leave_the_model_as_they_found_it():
    p = lvm_server()
    m = form.build(p, aggregate=True, integer_placement=False, integer_totals=False)
    solve_lexicographic(m, form.objectives(m, p))
    components = [c.name for c in m.component_objects()]
    domains = {s: m.total_mib[s].domain for s in m.S}
    stage = p.stages[2]
    form.add_polish_rows(m, [(stage, round(pyo.value(m.component(stage.name))))])
    assert len(list(m.component_data_objects(pyo.Objective, active=True))) == 1
    form.remove_polish_rows(m)
    assert [c.name for c in m.component_objects()] == components
    assert {s: m.total_mib[s].domain for s in m.S} == domains
    assert not any(v.fixed for v in m.component_data_objects(pyo.Var))


def test_lp_floor_objective_is_bareon_allocators():
    # The design document's coefficient example: variables journal@sda, root@sda, U@sda,
    # journal@sdb, root@sdb, U@sdb; c = [1/2, 2+1/4, 1, 2+1/9, 1/12, 1].
    problem = problem_from_data(*JOURNAL_EXAMPLE)
    m = form.build_lp_floor(problem)
    (objective,) = form.lp_floor_objectives(m, problem)
    assert objective.sense == "max"
    repn = generate_standard_repn(objective.expr)
    coefficient = {v.index(): c for v, c in zip(repn.linear_vars, repn.linear_coefs, strict=True)}
    expected = {
        ("sda", "journal"): Fraction(1, 2),
        ("sda", "root"): 2 + Fraction(1, 4),
        ("sda", "unallocated"): 1,
        ("sdb", "journal"): 2 + Fraction(1, 9),
        ("sdb", "root"): Fraction(1, 12),
        ("sdb", "unallocated"): 1,
    }
    assert coefficient == pytest.approx({k: float(v) for k, v in expected.items()})


def test_lp_floor_solution_fills_each_disk():
    problem = problem_from_data(*JOURNAL_EXAMPLE)
    m = form.build_lp_floor(problem)
    assert solve_lexicographic(m, form.lp_floor_objectives(m, problem)).has_solution
    rows = form.lp_floor_solution(m, problem)
    # per disk: journal, root, then unallocated; the journal on the SSD, root on the HDD
    assert [pytest.approx(row) for row in rows] == [(0.0, 100.0, 0.0), (10.0, 0.0, 0.0)]
