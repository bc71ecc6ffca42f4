"""Integer Bareon layouts: upstream fixtures, the design document's examples, probes, properties.

The cases and what bareon-allocator makes of them: docs/partition.md, "bareon-allocator, the
original".
"""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from conftest import sampled

from model.bareon.check import check_layout, diagnose_infeasible
from model.bareon.outputs import bareon_document, ironic_document
from model.bareon.schema import (
    ALLOCATOR_OVERHEADS,
    BAREON_OVERHEADS,
    IRONIC_OVERHEADS,
    problem_from_data,
    read_problem,
)
from model.errors import InfeasibleError, InputError
from programs.partition import run
from solvers.options import SolverOptions
from solvers.strategies.partition import solve_layout

DATA = Path(__file__).resolve().parent.parent / "data" / "bareon"
FIXTURES = sorted((DATA / "fixtures").glob("*.yaml"))
PROBES = DATA / "probes"


def args(schema: Path | str, **kw) -> SimpleNamespace:
    base = dict(
        schema=str(schema),
        hw_info=None,
        output_format="allocator",
        svg=None,
        baseline=None,
        leave_preferred_empty=False,
        solver="highs",
        time_limit=None,
        gap=0.0,
        threads=1,
        json=False,
    )
    base.update(kw)
    base["solver_options"] = SolverOptions(
        base["solver"], base["time_limit"], base["gap"], base["threads"]
    )
    return SimpleNamespace(**base)


def sizes(report) -> dict[str, dict[str, int]]:
    """{disk: {space: MiB}} from an allocator-format layout (zeros dropped)."""
    return {
        disk["disk_id"]: {s["space_id"]: s["size"] for s in disk["spaces"] if s["size"]}
        for disk in report.layout
    }


def totals(report) -> dict[str, int]:
    out: dict[str, int] = {}
    for disk in report.layout:
        for s in disk["spaces"]:
            out[s["space_id"]] = out.get(s["space_id"], 0) + s["size"]
    return out


# --------------------------------------------------------------------------- upstream fixtures


def test_sixteen_upstream_fixtures_are_present():
    assert len(FIXTURES) == 16


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_upstream_fixture_reproduces_exactly(fixture):
    expected = yaml.safe_load(fixture.read_text())["expected"]
    report = run(args(fixture))
    assert report.status == "optimal"
    assert report.layout == expected


# Only these two fixtures have preferred disks, where --leave-preferred-empty changes the model.
@pytest.mark.parametrize("name", ["two_disks_yaql_disk_selection", "three_disks_ceph_example"])
def test_upstream_fixture_reproduces_with_leave_preferred_empty(name):
    fixture = DATA / "fixtures" / f"{name}.yaml"
    expected = yaml.safe_load(fixture.read_text())["expected"]
    report = run(args(fixture, leave_preferred_empty=True))
    assert report.status == "optimal"
    assert report.layout == expected


@pytest.mark.parametrize(
    "name", ["single_disk_min_max_size", "three_disks_ceph_example", "two_disks_none_size"]
)
def test_cpsat_gives_the_same_objective_as_highs(name):
    highs = run(args(DATA / "fixtures" / f"{name}.yaml"))
    cpsat = run(args(DATA / "fixtures" / f"{name}.yaml", solver="cpsat"))
    assert cpsat.status == "optimal"
    assert cpsat.objective == highs.objective
    assert cpsat.layout == highs.layout


@pytest.mark.parametrize("name", ["x02", "x06", "x07", "x09"])
def test_cpsat_and_highs_agree_on_probes(name):
    highs = run(args(PROBES / f"{name}.yaml"))
    cpsat = run(args(PROBES / f"{name}.yaml", solver="cpsat"))
    assert cpsat.objective == highs.objective


# --------------------------------------------------------------- the design document's examples


def solve_data(schema, hw, **kw):
    problem = problem_from_data(schema, hw)
    solved = solve_layout(problem, kw.pop("overheads", ALLOCATOR_OVERHEADS), **kw)
    return problem, solved


def layout_dict(problem, solved) -> dict[str, dict[str, int]]:
    return {
        disk.disk_id: {
            space.space_id: solved.layout.sizes_mib[d][s]
            for s, space in enumerate(problem.spaces)
            if solved.layout.sizes_mib[d][s]
        }
        for d, disk in enumerate(problem.disks)
    }


def test_seed_single_disk_fills_root():
    schema = [
        {"id": "root", "type": "lv", "min_size": 50},
        {"id": "swap", "type": "lv", "size": 10},
    ]
    problem, solved = solve_data(schema, {"disks": [{"id": "sda", "size": 100}]})
    assert layout_dict(problem, solved) == {"sda": {"root": 90, "swap": 10}}


def test_seed_two_disks():
    report = run(args(PROBES / "x04.yaml"))
    assert sizes(report) == {"sda": {"root": 100}, "sdb": {"root": 190, "swap": 10}}


def test_seed_ordering_puts_root_first():
    report = run(args(PROBES / "x03.yaml"))
    assert sizes(report) == {"sda": {"root": 100}, "sdb": {"var": 100}}


def test_seed_weight_half():
    report = run(args(PROBES / "x02.yaml"))
    assert totals(report) == {"root": 67, "var": 33, "unallocated": 0}


def test_seed_best_with_disks_puts_journal_on_ssd():
    schema = [
        {
            "id": "ceph-journal",
            "type": "partitions",
            "best_with_disks": 'yaql=$.disks.where($.type = "ssd")',
        },
        {"id": "root", "type": "lv", "min_size": 10},
    ]
    hw = {
        "disks": [
            {"id": "sda", "size": 100, "type": "hdd"},
            {"id": "sdb", "size": 10, "type": "ssd"},
        ]
    }
    problem, solved = solve_data(schema, hw)
    assert layout_dict(problem, solved) == {"sda": {"root": 100}, "sdb": {"ceph-journal": 10}}


SWAP = (
    "yaql=let(ram => $.get(ram, 1024)) -> selectCase($ram <= 2048, $ram > 2048 and $ram < 8192, "
    "$ram > 8192 and $ram < 65536).switchCase($ram * 2, $ram, $ram / 2, 4096)"
)


@pytest.mark.parametrize(
    "ram,swap",
    [(None, 2048), (512, 1024), (2048, 4096), (3000, 3000), (8192, 4096), (16384, 8192),
     (65536, 4096)],
)  # fmt: skip
def test_seed_swap_expression_table(ram, swap):
    hw = {"disks": [{"id": "sda", "size": 100000}]}
    if ram is not None:
        hw["ram"] = ram
    problem = problem_from_data([{"id": "swap", "type": "lv", "size": SWAP}], hw)
    assert (problem.spaces[0].min_mib, problem.spaces[0].max_mib) == (swap, swap)


# --------------------------------------------------------------------------- probe cases


@pytest.mark.parametrize(
    "name,expected_totals",
    [
        ("x01", {"a": 34, "b": 33, "c": 33}),
        ("x02", {"root": 67, "var": 33}),
        ("x06", {"a": 706, "b": 705}),
        ("x07", {"a": 167, "b": 333, "c": 500}),
        ("y05", {"swap": 301, "root": 699}),
        ("y06", {"journal": 10, "root": 90}),
        ("x12", {"a": 50, "b": 50}),
        ("y02", {"swap": 0, "root": 100}),
    ],
)
def test_probe_loses_nothing_and_breaks_nothing(name, expected_totals):
    report = run(args(PROBES / f"{name}.yaml"))
    assert report.unallocated_mib == 0
    got = totals(report)
    assert {k: got[k] for k in expected_totals} == expected_totals
    problem = read_problem(str(PROBES / f"{name}.yaml"))
    from model.bareon.schema import Layout

    check = check_layout(problem, Layout(report.sizes_mib), ALLOCATOR_OVERHEADS)
    assert check.ok and check.unallocated_mib == 0


def test_probe_x08_infeasible_names_spaces_and_deficit():
    with pytest.raises(InfeasibleError) as err:
        run(args(PROBES / "x08.yaml"))
    text = str(err.value)
    assert "a, b" in text and "by 10 MiB" in text and "\n" not in text


def test_probe_y01_fixed_sizes_are_not_tied_by_weight():
    report = run(args(PROBES / "y01.yaml"))
    assert totals(report) == {"root": 10, "var": 10, "unallocated": 80}
    assert "max_size" in report.unallocated_why[0][2]


def test_leave_preferred_empty_keeps_the_original_behaviour():
    report = run(args(PROBES / "y06.yaml", leave_preferred_empty=True))
    assert totals(report) == {"journal": 10, "root": 0, "unallocated": 90}
    assert "--leave-preferred-empty" in report.unallocated_why[0][2]


def test_leave_preferred_empty_reproduces_the_original_nvme_waste():
    report = run(args(PROBES / "nvme_large.yaml", leave_preferred_empty=True))
    assert report.unallocated_mib == 949_773
    report = run(args(PROBES / "x09.yaml", leave_preferred_empty=True))
    assert sizes(report)["sdc"] == {"journal": 300, "unallocated": 200}


def test_large_nvme_is_used_not_left_empty():
    report = run(args(PROBES / "nvme_large.yaml"))
    nvme = next(d for d in report.layout if d["disk_id"] == "nvme0n1")
    by_space = {s["space_id"]: s["size"] for s in nvme["spaces"]}
    assert by_space["swap"] == 4096 and by_space["unallocated"] == 0
    assert report.unallocated_mib == 0


def test_baseline_shows_what_the_lp_floor_loses():
    report = run(args(PROBES / "y05.yaml", baseline="lp-floor"))
    assert report.baseline.lost_mib == 1
    assert any("swap: 300 MiB < min 300.3" in b for b in report.baseline.broken)
    assert report.unallocated_mib == 0


# --------------------------------------------------------------------------- overheads and VGs


def test_bareon_overheads_are_accounted_in_documents():
    problem = read_problem(
        str(DATA / "examples" / "server_lvm_schema.yaml"),
        str(DATA / "examples" / "server_2ssd_4hdd_hw.yaml"),
    )
    solved = solve_layout(problem, BAREON_OVERHEADS)
    doc = bareon_document(problem, solved.layout, BAREON_OVERHEADS)
    for disk, parted in zip(problem.disks, doc["parteds"], strict=True):
        parts = parted["partitions"]
        assert parts[0]["flags"] == ["bios_grub"] and parts[0]["end"] - parts[0]["begin"] == 24
        assert all(a["end"] == b["begin"] for a, b in zip(parts, parts[1:], strict=False))
        assert parts[-1]["end"] <= disk.size_mib
    pv_size = {
        p["name"]: p["end"] - p["begin"] for parted in doc["parteds"] for p in parted["partitions"]
    }
    for vg in doc["vgs"]:
        lv_total = sum(lv["size"] for lv in doc["lvs"] if lv["vgname"] == vg["name"])
        assert sum(pv_size[n] - 64 for n in vg["pvnames"]) == lv_total
    ironic = ironic_document(problem, solved.layout, IRONIC_OVERHEADS)
    assert ironic["partitions"][0]["type"] == "disk"


def test_overheads_make_a_tight_schema_infeasible_with_a_reason():
    problem = problem_from_data(
        [{"id": "vg0", "type": "vg", "contains": ["lv"]}, {"id": "lv", "type": "lv", "size": 50}],
        {"disks": [{"id": "sda", "size": 100}]},
    )
    assert diagnose_infeasible(problem, ALLOCATOR_OVERHEADS) is None
    reason = diagnose_infeasible(problem, BAREON_OVERHEADS)
    assert reason is not None and "by 39 MiB" in reason


def test_lvs_of_a_vg_pay_one_pv_per_disk():
    schema = [
        {"id": "vg0", "type": "vg", "contains": ["a", "b"]},
        {"id": "a", "type": "lv", "min_size": 100},
        {"id": "b", "type": "lv", "min_size": 100},
    ]
    hw = {"disks": [{"id": "sda", "size": 300}, {"id": "sdb", "size": 300}]}
    problem, solved = solve_data(schema, hw, overheads=IRONIC_OVERHEADS)
    check = check_layout(problem, solved.layout, IRONIC_OVERHEADS)
    assert check.ok
    # two disks: 2*24 bios_grub; one PV per used disk: 64 each; everything else allocated
    used_disks = sum(1 for row in solved.layout.sizes_mib if sum(row))
    assert check.unallocated_mib == 0
    assert sum(map(sum, solved.layout.sizes_mib)) == 600 - 48 - 64 * used_disks


# --------------------------------------------------------------------------- input errors


def test_bad_yaml_names_file_and_line(tmp_path):
    bad = tmp_path / "schema.yaml"
    bad.write_text("- id: root\n  type: lv\n  size: [1, 2\n- id: x\n")
    with pytest.raises(InputError) as err:
        read_problem(str(bad), str(PROBES / "x01.yaml"))
    assert err.value.source == str(bad) and err.value.line is not None
    assert str(err.value).startswith(f"{bad}:")


def test_missing_hw_info_is_an_input_error(tmp_path):
    schema = tmp_path / "s.yaml"
    schema.write_text("- {id: root, type: lv}\n")
    with pytest.raises(InputError, match="hardware info"):
        read_problem(str(schema))


def test_min_above_max_is_an_input_error():
    with pytest.raises(InputError, match="exceeds max_size"):
        problem_from_data(
            [{"id": "a", "type": "lv", "min_size": 20, "max_size": 10}],
            {"disks": [{"id": "sda", "size": 100}]},
        )


def test_partition_and_partitions_both_accepted_and_size_zero_is_zero():
    problem = problem_from_data(
        [
            {"id": "p1", "type": "partition", "size": 10},
            {"id": "p2", "type": "partitions", "size": 0},
            {"id": "odd", "type": "raid"},
        ],
        {"disks": [{"id": "sda", "size": 100}]},
    )
    assert [(s.space_id, s.kind, s.max_mib) for s in problem.spaces] == [
        ("p1", "partition", 10),
        ("p2", "partition", 0),
    ]
    assert any("raid" in n for n in problem.notes)


# --------------------------------------------------------------------------- property test


def random_case(rng: random.Random, full: bool):
    n_disks = rng.randint(1, 4)
    disks = [{"id": f"d{i}", "size": rng.randint(20, 400)} for i in range(n_disks)]
    spaces = []
    for j in range(rng.randint(1, 5)):
        space = {"id": f"s{j}", "type": rng.choice(["lv", "partitions"])}
        kind = rng.random()
        if kind < 0.2:
            space["size"] = rng.randint(0, 40)
        else:
            if rng.random() < 0.5:
                space["min_size"] = rng.randint(0, 30)
            if rng.random() < 0.4:
                space["max_size"] = space.get("min_size", 0) + rng.randint(0, 80)
        if rng.random() < 0.3:
            space["weight"] = rng.choice([0.5, 1, 2, 3])
        if rng.random() < 0.3:
            space["best_with_disks"] = rng.sample([d["id"] for d in disks], rng.randint(1, n_disks))
        spaces.append(space)
    if full:  # a space with no max and no preference can always take what is left
        spaces.append({"id": "rest", "type": "lv", "min_size": rng.randint(0, 5)})
    return spaces, {"disks": disks}


@pytest.mark.parametrize("seed", sampled(range(50)))
def test_random_schemas_pass_the_checker_and_fill_when_possible(seed):
    rng = random.Random(seed)
    full = seed % 2 == 0
    schema, hw = random_case(rng, full)
    problem = problem_from_data(schema, hw)
    reason = diagnose_infeasible(problem, ALLOCATOR_OVERHEADS)
    if reason is not None:
        mins = sum(s.min_mib for s in problem.spaces)
        assert "exceed" in reason or "weights" in reason
        assert mins > 0
        with pytest.raises(InfeasibleError):
            solve_layout(problem, ALLOCATOR_OVERHEADS)
        return
    solved = solve_layout(problem, ALLOCATOR_OVERHEADS)
    check = check_layout(problem, solved.layout, ALLOCATOR_OVERHEADS)
    assert check.ok, check.violations
    if full:
        assert check.unallocated_mib == 0
    # never more unallocated than the spaces' max sizes force
    capacity = sum(d.size_mib for d in problem.disks)
    if all(s.max_mib is not None for s in problem.spaces):
        assert check.stage_values["allocated_mib"] <= sum(s.max_mib for s in problem.spaces)
    assert check.stage_values["allocated_mib"] + check.unallocated_mib == capacity


@pytest.mark.parametrize("seed", range(12))
def test_random_lvm_schemas_with_ironic_overheads_pass_the_checker(seed):
    rng = random.Random(1000 + seed)
    disks = [{"id": f"d{i}", "size": rng.randint(150, 600)} for i in range(rng.randint(1, 3))]
    lvs = [f"lv{j}" for j in range(rng.randint(1, 4))]
    schema: list[dict] = [
        {"id": "vg_a", "type": "vg", "contains": lvs[::2]},
        {"id": "vg_b", "type": "vg", "contains": lvs[1::2]},
    ]
    for lv in lvs:
        space = {"id": lv, "type": "lv", "min_size": rng.randint(0, 60)}
        if rng.random() < 0.5:
            space["max_size"] = space["min_size"] + rng.randint(0, 200)
        schema.append(space)
    schema.append({"id": "boot", "type": "partitions", "size": rng.randint(0, 30)})
    problem = problem_from_data(schema, {"disks": disks})
    if diagnose_infeasible(problem, IRONIC_OVERHEADS) is not None:
        return
    try:
        solved = solve_layout(problem, IRONIC_OVERHEADS)
    except InfeasibleError as err:  # PV overheads can still conflict; then say so in one line
        assert "\n" not in str(err)
        return
    check = check_layout(problem, solved.layout, IRONIC_OVERHEADS)
    assert check.ok, check.violations
    doc = ironic_document(problem, solved.layout, IRONIC_OVERHEADS)
    for entry, disk in zip(doc["partitions"], problem.disks, strict=False):
        used = sum(int(v["size"].split()[0]) for v in entry["volumes"])
        assert used + IRONIC_OVERHEADS.disk_mib <= disk.size_mib
