"""Space weights as the user wrote them (issue 40, item 1): honoured exactly through both
solvers, refused at reading when no solver can represent them, and judged by the checker with
the user's own weights."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

import cli
from model.bareon.check import check_layout, diagnose_infeasible
from model.bareon.schema import ALLOCATOR_OVERHEADS, Layout, exact_weight, problem_from_data


def _schema(tmp_path: Path, weights: tuple[float, float], min_mib: int, size: int) -> Path:
    path = tmp_path / "w.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "dynamic_schema": [
                    {"id": "root", "type": "lv", "min_size": min_mib, "weight": weights[0]},
                    {"id": "var", "type": "lv", "min_size": min_mib, "weight": weights[1]},
                ],
                "hw_info": {"disks": [{"id": "sda", "size": size}]},
            }
        )
    )
    return path


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["partition", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _totals(layout: list[dict]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for disk in layout:
        for space in disk["spaces"]:
            totals[space["space_id"]] = totals.get(space["space_id"], 0) + space["size"]
    return totals


def test_weights_are_read_as_written():
    assert exact_weight(1e-9) == Fraction(1, 10**9)
    assert exact_weight(0.1) == Fraction(1, 10)
    assert exact_weight(1 / 3) == Fraction(1, 3)  # a yaql quotient means the fraction
    assert exact_weight(10**6) == 10**6


@pytest.mark.parametrize("solver", [None, "cpsat"])
@pytest.mark.parametrize("weights", [(1e-7, 1.0), (1.0, 1e-7)])
def test_a_tiny_weight_is_honoured_not_dropped(tmp_path, capsys, solver, weights):
    """1e-7 was rounded to 0 and its space left the fairness group: it took 99,990 MiB. The
    weight sum 10^7 + 1 is past what HiGHS is given (2^19): without --solver, CP-SAT."""
    path = _schema(tmp_path, weights, 0, 100_000)
    chosen = ("--solver", solver) if solver else ()
    code, out, err = _run(capsys, "--schema", str(path), *chosen, "--json")
    assert code == 0, err
    assert json.loads(out)["solver"] == "cpsat"
    totals = _totals(json.loads(out)["layout"])
    small, big = ("root", "var") if weights[0] < weights[1] else ("var", "root")
    # the small share is 1e-7 * 100000 / (1 + 1e-7) = 0.01 MiB: within 1 MiB means 0 or 1
    assert totals[small] <= 1 and totals[small] + totals[big] == 100_000


@pytest.mark.parametrize("solver", ["highs", "cpsat"])
def test_weights_past_the_solvers_precision_are_refused_naming_them(tmp_path, capsys, solver):
    path = _schema(tmp_path, (1e-9, 1e6), 10, 100_000)
    code, out, err = _run(capsys, "--schema", str(path), "--solver", solver)
    assert code == 1 and out == ""
    line = err.strip()
    assert "\n" not in line
    assert "weights (1e-09, 1e+06) of spaces root, var" in line
    assert "2^53" in line and "100000 MiB" in line


def test_highs_past_its_exact_weight_sum_is_a_usage_error(tmp_path, capsys):
    """Weights 4095999, 4095998 and 1 on 1,000 MiB: HiGHS called the schema infeasible ("no
    whole-MiB layout meets every min_size, fairness tie ...") where CP-SAT answers; HiGHS is
    given weight sums up to 2^19 only (solvers.strategies.partition.HIGHS_FAIR_WEIGHT_SUM)."""
    path = tmp_path / "three.yaml"
    schema = [
        {"id": f"s{k}", "type": "lv", "min_size": 0, "weight": w}
        for k, w in enumerate((4095999, 4095998, 1))
    ]
    doc = {"dynamic_schema": schema, "hw_info": {"disks": [{"id": "sda", "size": 1000}]}}
    path.write_text(json.dumps(doc))
    code, out, err = _run(capsys, "--schema", str(path), "--solver", "highs")
    assert code == 2 and out == ""
    assert (
        err.rstrip("\n")
        .splitlines()[-1]
        .startswith(
            "exalloc: error: --solver highs: the weights (4.096e+06, 4.096e+06, 1) of spaces "
            "s0, s1, s2 scale to whole numbers summing to 8191998, past 2^19"
        )
    ), err
    code, out, err = _run(capsys, "--schema", str(path), "--json")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["solver"] == "cpsat" and answer["status"] == "optimal"
    assert sum(_totals(answer["layout"]).values()) == 1000  # the checker passed (else exit 1)


def test_weights_that_raise_the_minimums_are_named_in_the_infeasibility():
    problem = problem_from_data(
        [
            {"id": "root", "type": "lv", "min_size": 10, "weight": 1},
            {"id": "var", "type": "lv", "min_size": 10, "weight": 10**6},
        ],
        {"disks": [{"id": "sda", "size": 100_000}]},
    )
    why = diagnose_infeasible(problem, ALLOCATOR_OVERHEADS)
    assert why is not None
    assert "weights (1, 1e+06) of spaces root, var ask 9000010 MiB" in why
    assert "min_size asks 20 MiB" in why
    assert "exceed the disks' capacity (100000 MiB) by 8900010 MiB" in why


def test_the_checker_judges_with_the_users_weights():
    """The layout the rounded weights produced (root 99,990, var 10) breaks the weights."""
    problem = problem_from_data(
        [
            {"id": "root", "type": "lv", "min_size": 0, "weight": 1e-7},
            {"id": "var", "type": "lv", "min_size": 0, "weight": 1},
        ],
        {"disks": [{"id": "sda", "size": 100_000}]},
    )
    layout = Layout(sizes_mib=((99_990, 10),))
    report = check_layout(problem, layout, ALLOCATOR_OVERHEADS)
    assert not report.ok
    assert any("root" in v and "weighted share" in v for v in report.violations)


@pytest.mark.parametrize("solver", ["highs", "cpsat", "default"])
@pytest.mark.parametrize("k", [0, 5, 6, 10, 11, 15])
def test_weight_ratios_to_1e15_answer_fairly_or_are_refused_naming_the_limit(tmp_path, k, solver):
    """benchmarks/partition_weights.py's sweep, a ratio per decade of the limits: weights
    (1, 10^k, 10^k) on 100,000 MiB either answer with every space within 1 MiB of its share
    as the schema writes the weights (and the objective the checker recomputes), or are
    refused in one line naming the weights and 2^53 (the weight sum 2·10^k + 1 times the
    disk's MiB), or under --solver highs past a weight sum of 2^19 a usage error."""
    from benchmarks.partition_weights import run_case, schema

    weights = (1.0, 10.0**k, 10.0**k)
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema(weights, 100_000)))
    row = run_case(path, weights, solver, 60.0)
    assert not row["fault"], row
    whole = 2 * 10**k + 1
    if whole * 100_000 > 2**53:
        assert row["exit"] == 1 and "2^53" in row["refusal"]
    elif solver == "highs" and whole > 2**19:
        assert row["exit"] == 2 and "2^19" in row["refusal"]
    else:
        assert row["exit"] == 0 and row["used"] == (
            "highs" if whole <= 2**19 and solver != "cpsat" else "cpsat"
        )
