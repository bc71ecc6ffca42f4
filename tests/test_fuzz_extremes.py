"""The fuzz run of tests/test_fuzz_readers.py at the readers' limits (issue 40): Bareon weight
ratios up to 1e15 and IAllocator quantities up to 2^53 MiB, each through both solvers. Every
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
MAX_QUANTITY = 2**53  # model.validate's limit for every quantity a reader accepts

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
        if clean(run, path, stats=stats):
            _layout_checked(run, lambda: read_problem(str(path)), stats)


def _huge(data: st.DataObject, label: str) -> int:
    exponent = data.draw(st.integers(20, 53), label=f"{label} exponent")
    return min(MAX_QUANTITY, 2**exponent - data.draw(st.integers(0, 2**19), label=label))


def quantities_case(folder: Path, data: st.DataObject, stats: Counter) -> None:
    """A dedicated request whose nodes' disk and memory reach 2^53 MiB: the default solver
    (CP-SAT past 2^40 MiB), and each one asked for."""
    from programs.judging import judge_allocation, response_placements

    dedicated = [t for t in REQUEST_SEEDS if t["request"]["type"] in ("allocate", "multi-allocate")]
    tree = copy.deepcopy(data.draw(st.sampled_from(dedicated), label="seed"))
    names = sorted(tree["nodes"])
    grown = data.draw(
        st.lists(st.sampled_from(names), min_size=1, max_size=len(names), unique=True),
        label="grown nodes",
    )
    for name in grown:
        node = tree["nodes"][name]
        for total, free in (("total_disk", "free_disk"), ("total_memory", "free_memory")):
            if data.draw(st.booleans(), label=f"{name} {total}"):
                used = max(0, node[total] - node[free])
                node[total] = _huge(data, f"{name} {total}")
                node[free] = max(0, node[total] - used)
    path = _write(folder, "quantities.json", json.dumps(tree))
    for chosen in ((), *(("--solver", solver) for solver in SOLVERS)):  # () : exalloc's pick
        run = Outcome(["hail", *chosen, *SOLVE_LIMIT, str(path)])
        if run.code == 2 and _usage_refusal(run):
            stats["refused as usage errors"] += 1  # issue 40, item 3: the option's fault
            continue
        if clean(run, path, stats=stats):
            response = json.loads(run.out)
            if response["success"] and response["result"]:
                placements = response_placements(str(path), response)
                judged = judge_allocation(str(path), placements)
                assert judged["violations"] == 0, (tree, response, judged)
                stats["answers checked"] += 1


def _usage_refusal(run: Outcome) -> bool:
    """A model CP-SAT cannot take (continuous), or HiGHS past its exact range when asked for:
    the usage line, then one error line naming the option."""
    lines = run.err.rstrip("\n").splitlines()
    return (
        lines[0].startswith("usage: exalloc ")
        and "Traceback" not in run.err
        and lines[-1].startswith(
            ("exalloc: error: --solver cpsat", "exalloc: error: --solver highs")
        )
    )


CASES = {"weight ratios": weights_case, "quantities to 2^53": quantities_case}


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
