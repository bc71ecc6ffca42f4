"""The model's build keeps the time limit (issue 40, item 4): a dedicated multi-allocate whose
model's share of --time-limit is spent before the model is built, or before the solver could
take its copy, answers with hail's one-by-one batch (the real hail's answer) and says where
the time went, instead of building and solving past the limit.

The shares are set to what a slow build would leave (no clock is waited for): MODEL_SHARE 0
puts the model's deadline at the start, COPY_PER_BUILD huge makes any build too slow to copy."""

from __future__ import annotations

import json
import random
import subprocess
import time
from pathlib import Path

import dedicated_gen as gen
import pytest

import cli
import formulations.batch as batch_form
import solvers.strategies.dedicated as dedicated
from formulations.deadline import OutOfTime, build_families
from model.backends.iallocator import parse_request
from model.check import check_allocation
from model.state import node_states
from programs.hail_compare import hail_placements
from solvers.options import SolverOptions
from solvers.strategies.iallocator import IAllocatorOptions, answer


def _request(tmp_path: Path, seed: int) -> Path:
    data = gen.multi_allocate(random.Random(7300 + seed), 8, 4, template="drbd", fits=True)
    path = tmp_path / f"multi-{seed}.json"
    path.write_text(json.dumps(data))
    return path


def _placed(path: Path, response: dict) -> tuple:
    inp = parse_request(path.read_text())
    placements = hail_placements(inp, response)
    report = check_allocation(node_states(inp.cluster), placements)
    assert report.ok, report.text()
    return len(placements), tuple(report.objectives["lost_allocations_total"])


def test_build_families_stop_between_families_once_the_deadline_passed() -> None:
    done: list[str] = []
    with pytest.raises(OutOfTime, match="stopped before a after") as stop:
        build_families((("a", lambda: done.append("a")), ("b", lambda: done.append("b"))), 0.0)
    assert done == [] and stop.value.family == "a"
    done.clear()
    build_families((("a", lambda: done.append("a")), ("b", lambda: done.append("b"))), None)
    assert done == ["a", "b"]


def test_a_build_past_its_share_answers_with_hails_batch(htools, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(dedicated, "MODEL_SHARE", 0.0)
    built: list[str] = []
    real = batch_form.define_capacities
    monkeypatch.setattr(
        batch_form, "define_capacities", lambda *a, **k: built.append("capacities") or real(*a, **k)
    )
    compared = 0
    for seed in range(1, 5):
        path = _request(tmp_path, seed)
        opts = IAllocatorOptions(solver=SolverOptions(time_limit=30.0))
        ans = answer(parse_request(path.read_text()), opts)
        mine = json.loads(ans.response)
        assert ans.runs[0].status == "time_limit", ans.note
        assert "the model's build stopped before its sets" in ans.note, ans.note
        assert ans.stages["model_solve_s"] == 0.0 and "greedy_s" in ans.stages
        assert built == []  # no family after the deadline was built
        proc = subprocess.run([str(htools.hail), str(path)], capture_output=True, text=True)
        theirs = json.loads(proc.stdout)
        if theirs["success"] and mine["success"]:
            compared += 1
            assert _placed(path, mine) == _placed(path, theirs)
    assert compared >= 1


def test_a_model_too_slow_to_copy_is_not_solved(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(dedicated, "COPY_PER_BUILD", 1e9)
    path = _request(tmp_path, 1)
    assert cli.main(["--json", "hail", "--time-limit", "30", str(path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "too little for the solver's copy of it" in doc["solver_note"]
    stages = doc["timing"]["stages"]
    assert stages["model_solve_s"] == 0.0 and stages["model_build_s"] > 0.0
    assert doc["timing"]["longest_stage"] in {"screen", "model_build", "greedy", "check"}
    assert doc["timing"]["longest_stage"] + "_s" in stages


def test_the_tiered_walk_keeps_the_time_limit(ganeti_data, capsys) -> None:  # noqa: ANN001
    """hspace's tiered ladder on Ganeti's hbal-evac.data: the walk to the next tier (up to
    4,096 shrink steps, an exact N+1 solve each) ran 9 minutes past --time-limit 20. It now
    searches its tail (a few solves, the whole ladder ends), and a walk whose deadline has
    passed stops at once, before any solve."""
    from model.backends.text import load_text
    from model.space import default_options, space_problem, tier_specs
    from solvers.strategies import space_tiered as strategy

    args = ["space", "-t", str(ganeti_data.data_dir / "hbal-evac.data")]
    assert cli.main(args) == 0
    err = capsys.readouterr().err
    assert "note: tiered: " in err and "stopped by" not in err, err
    cluster = load_text(ganeti_data.data_dir / "hbal-evac.data")
    state, spec = node_states(cluster), tier_specs(cluster)[0]
    options = default_options(cluster)

    def pose(s):  # noqa: ANN001, ANN202
        return space_problem(state, s, options)

    past = time.perf_counter()
    for only in (None, "memory_mib"):
        walk = strategy._walk(spec, pose(spec), pose, strategy.DEFAULT_OPTIONS, only, deadline=past)
        assert walk is None
