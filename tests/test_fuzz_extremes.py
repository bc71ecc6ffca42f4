"""The fuzz run of tests/test_fuzz_readers.py at the readers' limits (issue 40): Bareon weight
ratios up to 1e15 and IAllocator quantities up to and just past the readers' limits (2^40 MiB,
2^20 CPUs; model.validate), each through both solvers. Every
run keeps the readers' properties (exit 0, 1 or 2, one line naming the file, no traceback),
and every answer passes the independent checker, which judges layouts with the weights as
written and placements from the request alone: a weight or a number a solver cannot represent
is refused, never answered wrong.

The default run tries a dozen inputs per case; `pytest -m fuzz` tries EXALLOC_FUZZ_EXAMPLES
(10,000) per case, with EXALLOC_FUZZ_STATS=FILE recording what it saw (docs/reliability.md).
"""

from __future__ import annotations

import copy
import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st
from test_fuzz_readers import (
    FUZZ,
    FUZZ_SEED,
    REQUEST_SEEDS,
    SMALL,
    SOLVE_LIMIT,
    Outcome,
    _layout_checked,
    _write,
    clean,
)

SOLVERS = ("highs", "cpsat")
from model.validate import MAX_COUNT, MAX_MIB  # noqa: E402

STATS: dict[str, Counter] = {}
#: Inputs per case in the default test run (each is solved twice, once per solver).
EXAMPLES = 6


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("extremes")
    report = os.environ.get("EXALLOC_FUZZ_STATS")
    if report:
        with open(report, "a", encoding="utf-8") as fh:
            for case, counts in STATS.items():
                fh.write(json.dumps({"case": case, **counts}) + "\n")


def _weight(data: st.DataObject, label: str) -> float | int:
    """A weight 10^e, e in -15..15 (ratios up to 1e30 between two, 1e15 from 1), with a few
    digits, or a small integer."""
    if data.draw(st.booleans(), label=f"{label} integer"):
        return data.draw(st.integers(1, 10**6), label=label)
    exponent = data.draw(st.integers(-15, 15), label=f"{label} exponent")
    digits = data.draw(st.sampled_from((1.0, 1.5, 3.0, 7.25, 1 / 3)), label=f"{label} digits")
    return digits * 10.0**exponent


def weights_case(folder: Path, data: st.DataObject, stats: Counter) -> None:
    """2-4 elastic spaces of equal min/max (one fairness group) with far-apart weights."""
    n = data.draw(st.integers(2, 4), label="spaces")
    min_mib = data.draw(st.sampled_from((0, 1, 10, 1000)), label="min_size")
    schema = [
        {"id": f"s{k}", "type": "lv", "min_size": min_mib, "weight": _weight(data, f"w{k}")}
        for k in range(n)
    ]
    if data.draw(st.booleans(), label="a space apart"):
        schema.append({"id": "other", "type": "lv", "min_size": 5, "weight": 1})
    sizes = data.draw(
        st.lists(st.integers(100, 4 * 2**20), min_size=1, max_size=3), label="disk sizes"
    )
    doc = {
        "dynamic_schema": schema,
        "hw_info": {"disks": [{"id": f"d{k}", "size": s} for k, s in enumerate(sizes)]},
    }
    from model.bareon.schema import read_problem

    path = _write(folder, "weights.yaml", json.dumps(doc))  # JSON is YAML: floats exact
    for solver in SOLVERS:
        run = Outcome(
            ["--json", "partition", "--schema", str(path), "--solver", solver, *SOLVE_LIMIT]
        )
        if run.code == 2 and _usage_refusal(run):
            stats["refused as usage errors"] += 1  # HiGHS past a weight sum of 2^19
            continue
        if clean(run, path, stats=stats):
            _layout_checked(run, lambda: read_problem(str(path)), stats)


def _huge(data: st.DataObject, label: str, limit: int) -> int:
    """A number near 2^e up to twice `limit` (a quarter of the draws past it: refused)."""
    top = limit.bit_length()
    exponent = data.draw(st.integers(top - 21, top), label=f"{label} exponent")
    return max(1, 2**exponent - data.draw(st.integers(0, 2**10), label=label))


def quantities_case(folder: Path, data: st.DataObject, stats: Counter) -> None:
    """A request (dedicated and normal groups, every kind of tests/fuzz_inputs.py's seeds)
    whose nodes' disk, memory and CPUs reach the readers' limits and pass them: the default
    solver, and each one asked for. A placement or move plan is judged from the request."""
    from programs.judging import judge_allocation, judge_moves, response_placements
    from programs.tasks import MOVE_PROBLEMS

    tree = copy.deepcopy(data.draw(st.sampled_from(REQUEST_SEEDS), label="seed"))
    names = sorted(tree["nodes"])
    grown = data.draw(
        st.lists(st.sampled_from(names), min_size=1, max_size=len(names), unique=True),
        label="grown nodes",
    )
    for name in grown:
        node = tree["nodes"][name]
        for total, free in (("total_disk", "free_disk"), ("total_memory", "free_memory")):
            if total in node and data.draw(st.booleans(), label=f"{name} {total}"):
                used = max(0, node[total] - node[free])
                node[total] = _huge(data, f"{name} {total}", MAX_MIB)
                node[free] = max(0, node[total] - used)
        if "total_cpus" in node and data.draw(st.booleans(), label=f"{name} total_cpus"):
            node["total_cpus"] = _huge(data, f"{name} total_cpus", MAX_COUNT)
    path = _write(folder, "quantities.json", json.dumps(tree))
    for chosen in ((), *(("--solver", solver) for solver in SOLVERS)):  # () : exalloc's pick
        run = Outcome(["hail", *chosen, *SOLVE_LIMIT, str(path)])
        if run.code == 2 and _usage_refusal(run):
            stats["refused as usage errors"] += 1  # issue 40, item 3: the option's fault
            continue
        if clean(run, path, stats=stats):
            response = json.loads(run.out)
            if response["success"] and response["result"]:
                if tree["request"]["type"] in MOVE_PROBLEMS:
                    judged = judge_moves(str(path), response)
                else:
                    placements = response_placements(str(path), response)
                    judged = judge_allocation(str(path), placements)
                assert judged["violations"] == 0, (tree, response, judged)
                stats["answers checked"] += 1
            assert "unbounded" not in run.err, run.err  # the model was solved, not given up
        elif "larger than 2^" in run.err:
            stats["refused past the limit"] += 1


def _usage_refusal(run: Outcome) -> bool:
    """A model CP-SAT cannot take (continuous): the usage line, then one error line naming
    the option."""
    lines = run.err.rstrip("\n").splitlines()
    return (
        lines[0].startswith("usage: exalloc ")
        and "Traceback" not in run.err
        and lines[-1].startswith(
            ("exalloc: error: --solver cpsat", "exalloc: error: --solver highs")
        )
    )


CASES = {"weight ratios": weights_case, "quantities to the limits": quantities_case}


@pytest.mark.parametrize("case", list(CASES))
def test_extreme_inputs_are_answered_right_or_refused(folder: Path, case: str) -> None:
    stats = Counter()

    @settings(SMALL, max_examples=EXAMPLES)
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        CASES[case](folder, data, stats)

    run()
    STATS.setdefault(case, Counter()).update(stats)
    assert (
        stats["runs"] + stats["refused as usage errors"] >= 2 * EXAMPLES
        and stats["answers checked"] >= 1
    ), stats


@pytest.mark.fuzz
@pytest.mark.parametrize("case", list(CASES))
@seed(FUZZ_SEED)
@FUZZ
@given(data=st.data())
def test_fuzz_extremes(folder: Path, case: str, data: st.DataObject) -> None:
    stats = STATS.setdefault(case, Counter())
    stats["inputs"] += 1
    CASES[case](folder, data, stats)
