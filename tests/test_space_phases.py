"""How `exalloc space` shares one `--time-limit` between hspace's two phases
(`solvers.strategies.space_phases.phases`, docs/space.md "Using it from a program"): the tiered
ladder, which runs first, at most half of what is left; the standard allocation all that is
left when it starts, more than half when the ladder ends early, at most the other half when
the ladder used its share; both answering (checked) when nothing is left. Issue 40, item 4
was the bug this guards: each phase had the whole limit."""

from __future__ import annotations

import json
import time

import pytest

from model.backends.text import load_text
from model.check import check_space
from model.space import default_options, standard_spec, tier_specs
from model.state import node_states
from solvers.options import SolverOptions
from solvers.strategies.space_phases import FLOOR_S, phases, share_of

#: The ladder's share of what is left (docs/space.md): half, the standard phase the rest.
HALF = 0.5


def test_share_of_is_a_share_of_what_is_left() -> None:
    assert share_of(None, 5.0, 0.5) is None  # no --time-limit: none for either phase
    assert share_of(10.0, 0.0) == 10.0
    assert share_of(10.0, 2.0, 0.5) == 4.0
    assert share_of(10.0, 7.5) == 2.5
    assert share_of(10.0, 10.0) == FLOOR_S  # nothing left: the floor, not zero or negative
    assert share_of(10.0, 12.0, 0.5) == FLOOR_S


def _run(ganeti, data: str, limit_s: float | None, *, began_ago_s: float = 0.0):  # noqa: ANN001, ANN202
    cluster = load_text(ganeti.data_dir / data)
    state = node_states(cluster)
    run = phases(
        state,
        tier_specs(cluster),
        standard_spec(cluster),
        default_options(cluster),
        SolverOptions(time_limit=limit_s),
        began=time.perf_counter() - began_ago_s,
    )
    tiers = run.tiered()
    result = run.standard()
    return run, tiers, result


def _checked(result) -> None:  # noqa: ANN001
    """The standard answer passes the independent checker (the strategy checks it too; this
    holds the test to the answer it was handed, not to the strategy's word)."""
    assert check_space(result.problem, result.answer, result.n1_plans).ok


def test_no_limit_gives_each_phase_none(ganeti) -> None:  # noqa: ANN001
    run, tiers, result = _run(ganeti, "hspace-tiered.data", None)
    assert [s.phase for s in run.shares] == ["tiered", "standard"]
    assert all(s.limit_s is None for s in run.shares)
    assert tiers.stopped is None and result.status == "optimal"
    assert (tiers.count, result.count) == (4, 4)  # hspace's counts with capacity checks
    _checked(result)


def test_ladder_ending_early_leaves_the_rest_to_the_standard_phase(ganeti) -> None:  # noqa: ANN001
    """A limit far above what the ladder needs: the ladder gets half of what is left when it
    starts, ends early, and the standard phase gets everything left then (more than half),
    each answer the unlimited one."""
    limit = 600.0
    run, tiers, result = _run(ganeti, "hspace-tiered.data", limit)
    t, s = run.share("tiered"), run.share("standard")
    assert t is not None and s is not None
    assert t.limit_s == pytest.approx((limit - t.started_s) * HALF)
    assert t.limit_s <= limit * HALF
    assert t.seconds < t.limit_s and tiers.stopped is None  # it ended early
    assert s.started_s >= t.started_s + t.seconds  # one after the other
    assert s.limit_s == pytest.approx(limit - s.started_s)  # all that is left
    assert s.limit_s > limit * HALF
    assert (tiers.count, result.count, result.status) == (4, 4, "optimal")
    _checked(result)


def test_ladder_using_its_share_leaves_the_other_half(ganeti) -> None:  # noqa: ANN001
    """A limit shorter than the ladder (hspace-tiered.data's walks between tiers solve the
    global N+1 problem again and again: 0.8-2.2 s, loaded 5.6): the ladder stops at its share
    and says so; the standard phase gets what is left after it, never more than the other
    half, and still answers, checked."""
    limit = 0.2
    run, tiers, result = _run(ganeti, "hspace-tiered.data", limit)
    t, s = run.share("tiered"), run.share("standard")
    assert t is not None and s is not None
    assert t.limit_s is not None and t.limit_s <= limit * HALF
    assert tiers.stopped == "time limit"
    assert t.seconds >= t.limit_s  # it used its share
    assert s.started_s >= t.started_s + t.seconds
    assert s.limit_s == pytest.approx(max(limit - s.started_s, 0.0) or FLOOR_S)
    assert s.limit_s <= limit * HALF  # not the whole limit again (issue 40)
    assert result.status in ("optimal", "time_limit")
    assert result.count <= 4
    _checked(result)


def test_limit_spent_before_the_phases_still_answers(ganeti) -> None:  # noqa: ANN001
    """The program's start (`began`) long before the phases and the limit spent: each phase
    gets the floor, not the whole limit, and answers what it has proven, checked."""
    run, tiers, result = _run(ganeti, "hspace-tiered.data", 10.0, began_ago_s=60.0)
    assert [s.limit_s for s in run.shares] == [FLOOR_S, FLOOR_S]
    assert tiers.stopped == "time limit"
    assert result.status == "time_limit" and "time limit ran out" in result.binding_text()
    _checked(result)


def test_program_reports_the_shares_in_json(ganeti, capsys) -> None:  # noqa: ANN001
    """`exalloc space --time-limit ... --json`: each phase's share, as the strategy gave it."""
    import cli

    path = ganeti.data_dir / "hspace-tiered.data"
    code = cli.main(["--json", "space", "--time-limit", "600", "-t", str(path)])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    t, s = doc["tiered"]["time_share"], doc["standard"]["time_share"]
    assert 0 < t["limit_s"] <= 300
    assert s["started_s"] >= t["started_s"] + t["seconds"] - 1e-3  # rounded to 0.1 ms
    assert 300 < s["limit_s"] <= 600
    assert doc["standard"]["instances"] == 4 and doc["tiered"]["instances"] == 4
