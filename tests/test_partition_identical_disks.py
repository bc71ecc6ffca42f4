"""Identical disks with LVM overheads: stages 1-4 on disk classes, proven optimal (issue 5)."""

from __future__ import annotations

import random

import pytest
from conftest import sampled

from formulations.partition import disk_classes, spread_pvs
from model.bareon.check import check_layout, diagnose_infeasible
from model.bareon.schema import BAREON_OVERHEADS, IRONIC_OVERHEADS, problem_from_data
from model.errors import InfeasibleError
from solvers.strategies.partition import solve_layout

LEX = ("off_preferred_mib", "right_disk_mib", "allocated_mib", "space_order")


def server(n_hdd: int = 6, n_ssd: int = 2):
    """SSDs first, then identical HDDs; big fair LVs need several PVs each."""
    disks = [{"id": f"ssd{i}", "type": "ssd", "size": 8000} for i in range(n_ssd)]
    disks += [{"id": f"hdd{i}", "type": "hdd", "size": 40000} for i in range(n_hdd)]
    schema = [
        {"id": "boot", "type": "partitions", "size": 500},
        {"id": "root", "type": "lv", "min_size": 5000, "max_size": 20000},
        {"id": "journal", "type": "partitions", "min_size": 1000, "max_size": 4000,
         "best_with_disks": 'yaql=$.disks.where($.type = "ssd")'},
        {"id": "cache", "type": "lv", "min_size": 2000,
         "best_with_disks": 'yaql=$.disks.where($.type = "ssd")'},
        {"id": "data1", "type": "lv"},
        {"id": "data2", "type": "lv", "weight": 2},
        {"id": "spare", "type": "partitions"},
        {"id": "os", "type": "vg", "contains": ["root"]},
        {"id": "fast", "type": "vg", "contains": ["cache"]},
        {"id": "data", "type": "vg", "contains": ["data1", "data2"]},
    ]  # fmt: skip
    return problem_from_data(schema, {"disks": disks})


def stage_values(solved) -> tuple[int, ...]:
    return tuple(solved.check.stage_values[name] for name in LEX)


def test_disk_classes_group_same_size_and_same_preference():
    problem = server()
    classes = disk_classes(problem, BAREON_OVERHEADS)
    assert classes == (("ssd0", "ssd1"), tuple(f"hdd{i}" for i in range(6)))


def test_bareon_identical_disks_are_proven_optimal():
    problem = server()
    solved = solve_layout(problem, BAREON_OVERHEADS)
    assert solved.status == "optimal"
    assert all(g is None or g <= 1e-9 for g in solved.gap.values())
    check = check_layout(problem, solved.layout, BAREON_OVERHEADS)
    assert check.ok, check.violations
    assert check.stage_values == solved.check.stage_values
    # data1 and data2 share the HDDs 1:2, so each needs PVs on several disks
    pvs = solved.layout.pvs(problem)
    assert sum(1 for vg, _ in pvs if vg == "data") >= 3
    # the same stage 1-4 optimum as the disk model (one binary per VG and disk)
    on_disks = solve_layout(problem, BAREON_OVERHEADS, aggregate=False)
    assert on_disks.status == "optimal"
    assert stage_values(on_disks) == stage_values(solved)


def test_spread_gives_each_full_vg_disks_of_its_own():
    problem = server(n_hdd=3, n_ssd=0)
    counts = {("data", "hdd0"): 2, ("os", "hdd0"): 1}
    room = 40000 - BAREON_OVERHEADS.disk_mib - BAREON_OVERHEADS.pv_mib
    flags = spread_pvs(problem, BAREON_OVERHEADS, counts, {("data", "hdd0"): 2 * room})
    assert flags == {("data", "hdd0"): 1, ("data", "hdd1"): 1, ("os", "hdd2"): 1}


def test_pvs_that_do_not_spread_fall_back_to_the_disk_model():
    # 2 x 1000 MiB: the class model counts one PV per VG on the pair, but the VGs' MiB
    # (319, 750, 689 plus 64 each) cannot be packed into two disks as counted.
    disks = [{"id": f"d{i}", "size": 300} for i in range(6)]
    disks[1:1] = [{"id": "big0", "size": 1000}]
    disks[3:3] = [{"id": "big1", "size": 1000}]
    schema = [
        {"id": "vg0", "type": "vg", "contains": ["lv0", "lv3"]},
        {"id": "vg1", "type": "vg", "contains": ["lv1"]},
        {"id": "vg2", "type": "vg", "contains": ["lv2"]},
        {"id": "lv0", "type": "lv", "max_size": 88},
        {"id": "lv1", "type": "lv", "min_size": 508, "max_size": 1003},
        {"id": "lv2", "type": "lv", "min_size": 689},
        {"id": "lv3", "type": "lv", "min_size": 231},
        {"id": "p1", "type": "partitions"},
        {"id": "p2", "type": "partitions", "max_size": 613, "weight": 2},
    ]
    problem = problem_from_data(schema, {"disks": disks})
    solved = solve_layout(problem, BAREON_OVERHEADS)
    assert solved.status == "optimal"
    assert check_layout(problem, solved.layout, BAREON_OVERHEADS).ok
    on_disks = solve_layout(problem, BAREON_OVERHEADS, aggregate=False)
    assert stage_values(on_disks) == stage_values(solved)


def random_lvm_server(rng: random.Random):
    sizes = [rng.choice([150, 300, 600, 1000]) for _ in range(rng.randint(1, 3))]
    disks = [{"id": f"d{i}", "size": rng.choice(sizes)} for i in range(rng.randint(2, 7))]
    lvs = [f"lv{j}" for j in range(rng.randint(1, 6))]
    n_vgs = rng.randint(1, 3)
    schema: list[dict] = [
        {"id": f"vg{k}", "type": "vg", "contains": lvs[k::n_vgs]} for k in range(n_vgs)
    ]
    for name in [*lvs, "p1", "p2"]:
        space: dict = {"id": name, "type": "lv" if name.startswith("lv") else "partitions"}
        if rng.random() < 0.5:
            space["min_size"] = rng.randint(0, 700)
        if rng.random() < 0.5:
            space["max_size"] = space.get("min_size", 0) + rng.randint(0, 900)
        if rng.random() < 0.3:
            space["weight"] = rng.choice([0.5, 2, 3])
        if rng.random() < 0.25:
            space["best_with_disks"] = rng.sample([d["id"] for d in disks], rng.randint(1, 2))
        schema.append(space)
    return problem_from_data(schema, {"disks": disks})


@pytest.mark.parametrize("seed", sampled(range(16)))
def test_classes_and_disks_give_the_same_stage_values(seed):
    problem = random_lvm_server(random.Random(seed))
    if diagnose_infeasible(problem, IRONIC_OVERHEADS) is not None:
        return
    try:
        solved = solve_layout(problem, IRONIC_OVERHEADS)
    except InfeasibleError:
        with pytest.raises(InfeasibleError):
            solve_layout(problem, IRONIC_OVERHEADS, aggregate=False)
        return
    assert solved.status == "optimal"
    assert check_layout(problem, solved.layout, IRONIC_OVERHEADS).ok
    on_disks = solve_layout(problem, IRONIC_OVERHEADS, aggregate=False)
    assert stage_values(on_disks) == stage_values(solved)


def test_multi_terabyte_case_gets_every_mib_of_space_order():
    # HiGHS closed stage 4 of the class model 1 MiB short here (p1 at 1029120 of its max
    # 1029121, p2 one more); the LP with the integers fixed repairs it.
    disks = [
        {"id": f"d{i}", "size": size}
        for i, size in enumerate([3815447, 1907729, 3815447, 1907729, 3815447])
    ]
    schema = [
        {"id": "vg0", "type": "vg", "contains": ["lv0", "lv3"]},
        {"id": "vg1", "type": "vg", "contains": ["lv1"]},
        {"id": "vg2", "type": "vg", "contains": ["lv2"]},
        {"id": "lv0", "type": "lv"},
        {"id": "lv1", "type": "lv", "min_size": 1264148},
        {"id": "lv2", "type": "lv", "max_size": 1673543, "weight": 0.5, "best_with_disks": ["d2"]},
        {"id": "lv3", "type": "lv", "min_size": 1641546},
        {"id": "p1", "type": "partitions", "max_size": 1029121, "weight": 3},
        {"id": "p2", "type": "partitions", "min_size": 1722817, "max_size": 3545922},
    ]
    problem = problem_from_data(schema, {"disks": disks})
    solved = solve_layout(problem, BAREON_OVERHEADS)
    assert solved.status == "optimal"
    assert check_layout(problem, solved.layout, BAREON_OVERHEADS).ok
    assert solved.layout.total_mib(4) == 1029121  # p1 at its max
    assert stage_values(solved) == stage_values(
        solve_layout(problem, BAREON_OVERHEADS, aggregate=False)
    )
