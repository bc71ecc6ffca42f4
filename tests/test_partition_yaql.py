"""yaql sandbox: untrusted expressions are bounded in iterations, memory and time."""

from __future__ import annotations

import threading
import time

import pytest

from model.bareon.schema import problem_from_data, read_problem
from model.bareon.yaql_sandbox import YaqlError, YaqlLimits, YaqlSandbox, yaql_expression
from model.errors import InputError

HW = {"ram": 20, "disks": [{"id": "sda", "size": 100, "type": "hdd"},
                           {"id": "sdb", "size": 100, "type": "hdd"},
                           {"id": "sdc", "size": 10, "type": "ssd"}]}  # fmt: skip


def test_prefix_detection_matches_the_original_regex():
    assert yaql_expression("yaql=$.ram") == "$.ram"
    assert yaql_expression("  yaql = $.ram * 2\n") == "$.ram * 2"
    assert yaql_expression("not yaql=$.ram") is None
    assert yaql_expression(42) is None


@pytest.mark.parametrize(
    "expression,value",
    [
        ("$.ram * 2", 40),
        ('$.disks.where($.type = "hdd").skip(1).select($.id)', ["sdb"]),
        ("len($.disks)", 3),
        ("$.disks.select($.size).sum()", 210),
        ("16385 / 2", 8192),
    ],
)
def test_expressions_evaluate_like_the_spec(expression, value):
    assert YaqlSandbox().evaluate(expression, HW) == value


def test_unbounded_collection_is_stopped_with_space_key_and_expression(tmp_path):
    schema = tmp_path / "schema.yaml"
    schema.write_text(
        "- id: root\n  type: lv\n  min_size: 10\n"
        "- id: swap\n  type: lv\n  size: yaql=range(0, 100000000).toList().len()\n"
    )
    hw = tmp_path / "hw.yaml"
    hw.write_text("disks:\n  - {id: sda, size: 100}\n")
    start = time.perf_counter()
    with pytest.raises(InputError) as err:
        read_problem(str(schema), str(hw))
    assert time.perf_counter() - start < 30  # the iteration limit, not a clock: a hang guard
    text = str(err.value)
    assert "space 'swap'" in text and "key 'size'" in text
    assert "range(0, 100000000)" in text and "iteration limit" in text
    assert err.value.line == 6


def test_memory_bomb_is_stopped():
    with pytest.raises(YaqlError, match="memory quota"):
        YaqlSandbox().evaluate("'x' * 10000000", HW)


def test_cpu_burn_under_the_iterator_limit_is_stopped_by_the_clock():
    sandbox = YaqlSandbox(YaqlLimits(time_limit_s=0.3))
    start = time.perf_counter()
    with pytest.raises(YaqlError, match="time limit"):
        sandbox.evaluate("range(0, 9000).select(range(0, 9000).sum()).sum()", HW)
    assert time.perf_counter() - start < 15  # its 0.3 s, with room for a loaded machine


def test_time_bound_also_holds_off_the_main_thread():
    sandbox = YaqlSandbox(YaqlLimits(time_limit_s=0.3))
    outcome: list[object] = []

    def work() -> None:
        try:
            outcome.append(
                sandbox.evaluate("range(0, 9000).select(range(0, 9000).sum()).sum()", HW)
            )
        except YaqlError as err:
            outcome.append(err)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=30)
    assert isinstance(outcome[0], YaqlError) and "time limit" in outcome[0].reason
    ok: list[object] = []
    thread = threading.Thread(target=lambda: ok.append(sandbox.evaluate("$.ram * 2", HW)))
    thread.start()
    thread.join(timeout=30)
    assert ok == [40]


def test_python_objects_are_out_of_reach():
    with pytest.raises(YaqlError):
        YaqlSandbox().evaluate("$.ram.__class__", HW)


def test_missing_key_error_says_how_to_default():
    with pytest.raises(InputError) as err:
        problem_from_data([{"id": "swap", "type": "lv", "size": "yaql=$.memory * 2"}], HW)
    assert "space 'swap'" in str(err.value) and "$.get" in str(err.value)


def test_best_with_disks_from_yaql_selects_disk_ids():
    problem = problem_from_data(
        [{"id": "j", "type": "lv", "best_with_disks": 'yaql=$.disks.where($.type = "ssd")'}], HW
    )
    assert problem.spaces[0].best_disks == frozenset({"sdc"})


def test_more_than_a_hundred_disks_is_fine():
    hw = {"disks": [{"id": f"d{i}", "size": 10, "type": "hdd"} for i in range(150)]}
    problem = problem_from_data(
        [{"id": "a", "type": "lv", "best_with_disks": 'yaql=$.disks.where($.type = "hdd")'}], hw
    )
    assert len(problem.spaces[0].best_disks) == 150
