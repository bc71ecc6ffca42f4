"""--time-limit counts from the answer's start, not from each stage's (issue 40, item 4): the
process's start-up and imports, the reading and the stages before the solve are inside the
limit, and the checker and the output after it have their reserve. `solvers.options` owns
the deadline (`process_started`, `answer_options`, `SolverOptions.left`); the programs hand
each strategy what is left of it. No wall-clock measurement is asserted: the answers are made
to start "late" (`cli.main(started_at=...)`, a start-up that took seconds) and the tests look
at the limits handed on and at the answer's own report of where the time went."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from roll_gen import RollSpec, generate

import cli
from model.backends.text import dump_text
from solvers.options import LEAST_S, SolverOptions, answer_options


def test_process_started_is_before_the_interpreter_ran_the_first_line():
    """The start of a process that slept 0.3 s before asking is at least 0.3 s back (a lower
    bound: a loaded machine only makes it longer)."""
    code = (
        "import time; time.sleep(0.3); from solvers.options import process_started; "
        "print(time.perf_counter() - process_started())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=cli_dir()
    )
    assert 0.3 <= float(done.stdout) < 3600


def cli_dir() -> str:
    from pathlib import Path

    return str(Path(cli.__file__).resolve().parent)


def test_the_limit_of_an_answer_begun_earlier_is_what_is_left_of_it():
    began = time.perf_counter() - 4.0  # a start-up of 4 s
    opts = answer_options(SolverOptions(time_limit=10.0), began)
    assert opts.deadline_at == pytest.approx(began + 10.0)
    assert opts.time_limit <= 6.0  # not the whole 10 s anew
    assert opts.deadline() <= began + 10.0
    assert opts.left(2.0).time_limit <= 4.0  # the checker's reserve taken off
    assert opts.left(2.0).deadline_at <= opts.deadline_at - 2.0 + 1e-3  # the stage's own end
    gone = answer_options(SolverOptions(time_limit=1.0), began)  # already past
    assert gone.time_limit == LEAST_S and gone.left(1.0).time_limit == LEAST_S
    # no deadline: as before, each holder counts its time_limit from its own start
    assert SolverOptions(time_limit=3.0).left(1.0).time_limit == 3.0
    assert answer_options(SolverOptions(), began).deadline_at is None
    # a command's default (hail's 60 s) counts from the answer's start too
    default = answer_options(SolverOptions(), began).limited(60.0)
    assert default.deadline_at == pytest.approx(began + 60.0) and default.time_limit <= 56.0
    assert answer_options(SolverOptions(time_limit=5.0), began).limited(60.0).time_limit <= 1.0


def _roll_file(tmp_path):
    spec = RollSpec(nodes=16, instances=40, drbd_share=0.8, offline=1, fill=0.7, seed=2)
    path = tmp_path / "roll.data"
    path.write_text(dump_text(generate(spec)))
    return path


def test_roll_plans_within_what_the_start_up_and_reading_left(tmp_path, capsys, monkeypatch):
    """On 2,000 nodes `roll --memory-aware --time-limit 60` took 64-65 s: the plan had the
    whole limit from its own start, after the start-up, the reading and hroller's prelude,
    and the checker's replay (2.7 s) came after it."""
    from solvers.strategies import roll

    path = _roll_file(tmp_path)
    handed: list[tuple[float, float | None]] = []
    real = roll.plan

    def recording(problem, options, **kw):
        handed.append((time.perf_counter(), options.time_limit))
        return real(problem, options, **kw)

    monkeypatch.setattr(roll, "plan", recording)
    began = time.perf_counter() - 3.0  # as if the start-up had taken 3 s
    argv = ["--json", "roll", "--memory-aware", "-t", str(path), "--time-limit", "5"]
    assert cli.main(argv, started_at=began) == 0
    doc = json.loads(capsys.readouterr().out)
    (at, limit) = handed[0]
    from programs.roll import CHECK_S_PER_INSTANCE

    reserve = CHECK_S_PER_INSTANCE * 40
    assert limit is not None and at + limit <= began + 5.0 - reserve + 1e-3
    timing = doc["timing"]
    assert timing["startup_s"] >= 3.0 and timing["before_plan_s"] >= 3.0
    assert {"plan_s", "check_s", "run_s", "total_s"} <= set(timing)
    assert timing["total_s"] >= timing["startup_s"] + timing["plan_s"]


def test_roll_whose_time_is_gone_still_answers_a_checked_plan(tmp_path, capsys):
    """A start-up longer than the limit leaves the plan LEAST_S: it answers its start
    (checked, as every plan), not an error."""
    path = _roll_file(tmp_path)
    argv = ["--json", "roll", "--memory-aware", "-t", str(path), "--time-limit", "1"]
    assert cli.main(argv, started_at=time.perf_counter() - 5.0) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["groups"] and doc["status"] in ("optimal", "feasible", "time_limit")
    assert doc["timing"]["startup_s"] >= 5.0


def test_balance_answers_within_what_the_start_up_left_less_the_checkers_reserve(
    tmp_path, capsys, monkeypatch
):
    """balance's strategy had the whole limit from its own start: a slow start-up and the
    checker's replay after it were outside."""
    import random

    from model.backends.iallocator import parse_request
    from programs.balance_exact import CHECK_RESERVE_S
    from solvers.strategies import balance
    from tests import htools_gen as hgen

    data = hgen.heterogeneous(3, 12)
    cluster = parse_request(hgen.dumps(hgen.allocate(random.Random(3), data, "drbd")), "t").cluster
    path = tmp_path / "group.data"
    path.write_text(dump_text(cluster))
    handed: list[tuple[float, float | None]] = []
    real = balance.answer

    def recording(problem, **kw):
        handed.append((time.perf_counter(), kw["options"].time_limit))
        return real(problem, **kw)

    monkeypatch.setattr(balance, "answer", recording)
    began = time.perf_counter() - 3.0
    argv = ["--json", "balance", "-l", "2", "-t", str(path), "--time-limit", "8"]
    assert cli.main(argv, started_at=began) == 0
    doc = json.loads(capsys.readouterr().out)
    (at, limit) = handed[0]
    assert limit is not None and at + limit <= began + 8.0 - CHECK_RESERVE_S + 1e-3
    assert doc["timing"]["startup_s"] >= 3.0
    # where the answer's time went, stage by stage (a run past its limit says which overran)
    stages = {k: v for k, v in doc["timing"].items() if k.endswith("_s")}
    assert {"hbal_port_s", "exact_s", "check_s"} <= set(stages)
    inner = sum(v for k, v in stages.items() if k not in ("startup_s", "run_s", "total_s"))
    assert 0 < inner <= doc["timing"]["run_s"] + 1e-3


def test_hails_default_limit_counts_the_start_up(tmp_path, capsys, monkeypatch):
    """Without --time-limit hail answers within 60 s of its start (Ganeti waits for the
    whole call), the start-up included."""
    import random

    import dedicated_gen as gen

    from solvers.strategies import iallocator

    data = gen.multi_allocate(random.Random(7), 12, 3, template="drbd", fits=True)
    path = tmp_path / "multi.json"
    path.write_text(json.dumps(data))
    handed: list[tuple[float, float | None]] = []
    real = iallocator.answer

    def recording(inp, opts):
        handed.append((time.perf_counter(), opts.solver.time_limit))
        return real(inp, opts)

    monkeypatch.setattr(iallocator, "answer", recording)
    began = time.perf_counter() - 2.0
    assert cli.main(["--json", "hail", str(path)], started_at=began) == 0
    doc = json.loads(capsys.readouterr().out)
    (at, limit) = handed[0]
    assert limit is not None and at + limit <= began + 60.0 + 1e-3
    assert doc["timing"]["startup_s"] >= 2.0 and "answer_s" in doc["timing"]


def _drbd_state(nodes: int = 8, ext: int = 24, drbd: int = 6):
    from squeeze_gen import SqueezeSpec, drbd_cluster

    from model.state import node_states

    return node_states(drbd_cluster(SqueezeSpec(nodes=nodes, instances=ext, max_fill=0.5), drbd))


def test_squeezes_build_stops_between_families_past_its_deadline():
    """The build of `squeeze --move drbd`'s model on 64 nodes (13 s at load 5, its N+1 rows
    most of it) did not look at the clock: past the deadline it stops between families."""
    from formulations import squeeze as form
    from formulations.deadline import OutOfTime
    from model.squeeze import SHRINK, offline_candidates
    from solvers.strategies.squeeze import build_problem, probe_demand

    state = _drbd_state()
    probe = probe_demand(state.cluster.cluster_policy.std, 2.0)
    built = build_problem(
        state, SHRINK, probe, "drbd", decided=offline_candidates(state.cluster, "drbd")
    )
    with pytest.raises(OutOfTime):
        form.build(built.problem, time.perf_counter() - 1.0)
    assert form.build(built.problem, None) is not None
    assert form.n1_terms(built.problem) > 0


def test_squeezes_n1_terms_count_the_rows_built():
    """The strategy weighs `n1_terms` against its time limit: it must count what the N+1 rows
    and the shared loads' defining rows hold (each node's load once, not once a row: about
    a million terms on 64 nodes with 62 drbd pairs before, 35,536 now)."""
    from pyomo.repn import generate_standard_repn

    from formulations import squeeze as form
    from model.squeeze import SHRINK, offline_candidates
    from solvers.strategies.squeeze import build_problem, probe_demand

    state = _drbd_state(16, 48, 16)
    probe = probe_demand(state.cluster.cluster_policy.std, 2.0)
    built = build_problem(
        state, SHRINK, probe, "drbd", decided=offline_candidates(state.cluster, "drbd")
    )
    m = form.build(built.problem, None)
    rows = [*m.n1.values(), *m.load_mem_def.values()]
    terms = sum(len(generate_standard_repn(c.body, compute_values=False).linear_vars) for c in rows)
    # a term whose coefficient is zero (a DRBD instance of no memory) is left out of the repn
    assert 0 < terms <= form.n1_terms(built.problem) <= terms + len(built.problem.choices)
    # written out, each row holds its node's whole load
    w = form.build(built.problem, None, shared_load=False)
    assert not hasattr(w, "load_mem")
    written = sum(
        len(generate_standard_repn(c.body, compute_values=False).linear_vars) for c in w.n1.values()
    )
    # (a shape of no memory, or one a node cannot take, is no term of the solver's row)
    assert written <= form.n1_terms(built.problem, shared_load=False)
    assert form.n1_terms(built.problem) * 4 < written


def test_squeeze_writes_the_load_out_only_where_its_time_allows(monkeypatch):
    """The written-out N+1 rows prove more in a long solve, the shared ones build 25 times
    faster on 64 nodes: without a limit (or a long one) the first, under a limit they would
    not fit a quarter of, the second."""
    from formulations import squeeze as form
    from model.squeeze import SqueezeRequest
    from solvers.strategies import squeeze

    asked: list[bool] = []
    real = form.build

    def recording(problem, deadline=None, *, shared_load=True):  # noqa: ANN001, ANN202
        asked.append(shared_load)
        return real(problem, deadline, shared_load=shared_load)

    monkeypatch.setattr(form, "build", recording)
    state, request = _drbd_state(), SqueezeRequest(move="drbd")
    squeeze.plan(state, request, SolverOptions(solver_given=False))
    squeeze.plan(state, request, SolverOptions(time_limit=600, solver_given=False))
    assert asked == [False, False]
    monkeypatch.setattr(squeeze, "SECONDS_PER_N1_TERM", 1e-2)  # a machine 500 times slower
    planned = squeeze.plan(state, request, SolverOptions(time_limit=20, solver_given=False))
    assert asked[2:] == [True] and planned.checker["ok"]


def test_squeeze_without_time_for_its_model_says_so_within_the_limit():
    """`squeeze --move drbd --time-limit 10` on 64 nodes answered after 18.5 s, "no plan
    found": the build and CP-SAT's copy (21 s) were outside the limit. A model whose build
    does not fit what is left is not started, and the error says why."""
    from model.errors import SolverError
    from model.squeeze import SqueezeRequest
    from solvers.strategies import squeeze

    state = _drbd_state()
    request = SqueezeRequest(move="drbd")
    cut = squeeze.plan(state, request, SolverOptions(time_limit=1e-6, solver_given=False))
    # a shrink always has the cluster as it is: nothing powered off, not proven, said why
    assert (cut.mode, cut.nodes, cut.moves, cut.status) == ("none", (), (), "time_limit")
    assert "does not fit the" in cut.note and cut.checker["ok"]
    assert cut.objective[:2] == (0.0, 0.0) and cut.stage_names[:2] == ("nodes_freed", "moves")
    began = time.perf_counter() - 100.0  # the answer's deadline long gone (a slow start)
    late = answer_options(SolverOptions(time_limit=60.0, solver_given=False), began)
    gone = squeeze.plan(state, request, late)
    assert (gone.mode, gone.status) == ("none", "time_limit") and gone.note
    ok = squeeze.plan(state, request, SolverOptions(time_limit=60.0, solver_given=False))
    assert ok.status in ("optimal", "feasible") and ok.checker["ok"] and ok.nodes
    from test_squeeze_expand_brute import _case as expand_case

    from model.state import node_states

    cluster, factor, _ = expand_case(1)  # expand: one standby node must come on
    with pytest.raises(SolverError, match="no plan found"):  # so "nothing" is no answer
        squeeze.plan(node_states(cluster), SqueezeRequest(factor, factor, "drbd"), late)


def test_squeeze_out_of_time_says_so_on_stderr(tmp_path, capsys):
    """The text answer of a shrink cut by its limit is hsqueeze's 'No action', and a note on
    stderr says it is not proven and why; exit 0."""
    path = tmp_path / "drbd.data"
    path.write_text(dump_text(_drbd_state().cluster))
    argv = ["squeeze", "--move", "drbd", "-t", str(path), "--time-limit", "1e-6"]
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert out == "'No action'\n"
    assert "exalloc: note: squeeze: time_limit, the model (" in err
    assert "nothing powered off; nodes_freed 0" in err


# --- redistribute and evacuate: the greedy baseline, its judging, the health check ----------


def _super(tmp_path):
    """bench_groups' super cluster shape, small: an unhealthy group (an offline node hosting
    instances), a light one, mixed storage."""
    from groups_gen import GroupSpec, super_cluster

    specs = (
        GroupSpec(6, "ext", "a", 0.9, offline=1),
        GroupSpec(6, "ext", "a", 0.6),
        GroupSpec(6, "mixed", "a", 0.55),
        GroupSpec(6, "ext", "a", 0.3),
    )
    path = tmp_path / "super.data"
    path.write_text(dump_text(super_cluster(0, specs)))
    return path


def _state_of(path):
    from model.backends.text import load_text
    from model.groups import storage_of
    from model.state import node_states

    state = node_states(load_text(path))
    return state, storage_of(state)


def test_the_greedy_redistribution_stops_at_its_deadline(tmp_path):
    """The design's greedy walk (htools' global N+1 of a group for each instance it removes)
    ran 6 minutes of `redistribute --time-limit 10` on bench_groups' 500 nodes: past its
    deadline it stops, keeping the groups it repaired, and says so."""
    from model import groups_greedy

    state, storage = _state_of(_super(tmp_path))
    whole = groups_greedy.redistribute(state, storage)
    assert whole.stopped is None and whole.groups  # with time, as before
    cut = groups_greedy.redistribute(state, storage, time.perf_counter() - 1.0)
    assert cut.stopped and cut.relocations == [] and cut.state is state
    squeezed = groups_greedy.compress(state, storage, None, time.perf_counter() - 1.0)
    assert squeezed and all(why == str(groups_greedy.GreedyOutOfTime(
        "the time limit ran out in the greedy walk")) for _, why in squeezed.values())  # fmt: skip
    gone = groups_greedy.evacuate(state, storage, [state.cluster.nodes[0].name], 0.0)
    whole = groups_greedy.evacuate(state, storage, [state.cluster.nodes[0].name])
    assert whole.stopped is None
    assert gone.relocations[: len(gone.relocations)] == whole.relocations[: len(gone.relocations)]


def test_judging_and_the_health_check_leave_undecided_what_the_deadline_did_not_reach(tmp_path):
    from solvers.strategies import groups as strategy
    from solvers.strategies.n1 import OUT_OF_TIME, check_cluster

    state, storage = _state_of(_super(tmp_path))
    nodes = list(state.nodes)
    said = strategy.judge(state, storage, [], nodes, deadline=time.perf_counter() - 1.0)
    assert said == [f"not judged: the time limit ran out before {len(nodes)} node(s)"]
    assert strategy.judge(state, storage, [], nodes[:3]) != said
    late = answer_options(SolverOptions(time_limit=1.0), time.perf_counter() - 5.0)
    report = check_cluster(state, options=late)
    verdicts = [v for g in report.groups for v in g.nodes]
    assert verdicts and all(v.evacuable is None and v.reason == OUT_OF_TIME for v in verdicts)
    assert all(v.status == "time_limit" for v in verdicts)
    decided = check_cluster(state, options=SolverOptions(time_limit=1.0))  # no deadline_at
    assert all(v.evacuable is not None for g in decided.groups for v in g.nodes)


def test_redistribute_past_its_limit_answers_time_limit_with_the_greedy_stopped(tmp_path, capsys):
    path = _super(tmp_path)
    argv = ["--json", "redistribute", "-t", str(path), "--time-limit", "2"]
    assert cli.main(argv, started_at=time.perf_counter() - 10.0) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "time_limit" and doc["reason"].startswith("N+1 undecided")
    assert doc["greedy"]["stopped"] and doc["greedy"]["moves"] == 0
    assert {"exact_s", "check_s", "greedy_s", "judge_s", "startup_s"} <= set(doc["timing"])
    assert cli.main(["--json", "redistribute", "-t", str(path), "--time-limit", "60"]) == 0
    doc = json.loads(capsys.readouterr().out)  # in time: the answer as before
    assert doc["status"] != "time_limit" and doc["greedy"]["stopped"] is None


def test_partition_solves_within_what_the_start_up_and_reading_left(tmp_path, capsys, monkeypatch):
    """`partition` handed the layout's solve the whole limit after the start-up (2.5 s
    loaded) and the schema's reading (yaql): 20 s wall for --time-limit 10 on bench_partition's
    100 disks x 40 spaces (load 6.8)."""
    from benchmarks import bench_partition
    from programs.partition import OUTPUT_RESERVE_S
    from solvers.strategies import partition

    schema, hw = bench_partition.instance_data(4, 10)
    (tmp_path / "schema.yaml").write_text(json.dumps(schema))
    (tmp_path / "hw.yaml").write_text(json.dumps(hw))
    handed: list[tuple[float, float | None]] = []
    real = partition.solve_layout

    def recording(problem, overheads, **kw):
        handed.append((time.perf_counter(), kw["options"].time_limit))
        return real(problem, overheads, **kw)

    monkeypatch.setattr(partition, "solve_layout", recording)
    began = time.perf_counter() - 3.0
    argv = ["--json", "partition", "--schema", str(tmp_path / "schema.yaml")]
    argv += ["--hw-info", str(tmp_path / "hw.yaml"), "--time-limit", "20"]
    assert cli.main(argv, started_at=began) == 0
    doc = json.loads(capsys.readouterr().out)
    (at, limit) = handed[0]
    assert limit is not None and at + limit <= began + 20.0 - OUTPUT_RESERVE_S + 1e-3
    assert doc["status"] == "optimal" and doc["timing"]["startup_s"] >= 3.0


def test_a_command_lines_process_ends_with_its_answer_whole_and_its_exit_code(tmp_path):
    """The interpreter's teardown took 1.4 s after a 10 s hail answer (load 6): the process
    of a command line ends at once once its answer is out (cli._exit_now), its stdout and
    stderr flushed, its exit code kept."""
    path = _roll_file(tmp_path)
    run = subprocess.run(
        [sys.executable, "-m", "cli", "--json", "roll", "--memory-aware", "-t", str(path)],
        capture_output=True,
        text=True,
        cwd=cli_dir(),
        check=False,
    )
    assert run.returncode == 0 and json.loads(run.stdout)["groups"]
    bad = subprocess.run(
        [sys.executable, "-m", "cli", "roll", "-t", str(tmp_path / "missing.data")],
        capture_output=True,
        text=True,
        cwd=cli_dir(),
        check=False,
    )
    assert bad.returncode == 1 and "missing.data" in bad.stderr


def test_the_greedy_walk_starts_no_step_the_longest_so_far_would_carry_past_its_deadline(
    monkeypatch,
):
    """One step of the design's greedy (a node's htools evacuation, an instance's allocation)
    is not cut inside (6-7 s on 500 nodes: compress ended 5 s past a 30 s limit). With steps
    of 3 s and a deadline at 10 s the walk stops before the step that would end at 13 s."""
    import model.groups_greedy as gg

    class Clock:
        now = 0.0

        def perf_counter(self) -> float:
            return self.now

    clock = Clock()
    monkeypatch.setattr(gg, "time", clock)
    paced = gg._Paced(10.0)  # noqa: SLF001 - the pacing itself
    started = []
    with pytest.raises(gg.GreedyOutOfTime):
        for k in range(10):
            paced.step()
            started.append(k)
            clock.now += 3.0
    assert started == [0, 1, 2] and paced.longest_s == 3.0  # the 4th would end at 12 s
    gg._Paced(None).step()  # no deadline: never out of time
