"""`exalloc space --move-existing` (docs/space.md, "Moving existing instances first"): the
count after at most N of hbal's moves against a brute force over every move and every
multiset of new instances on tiny clusters, the checker's refusals, and the command line."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from itertools import product

import htools_gen as gen
import pytest
import space_cases as sc
from test_space_exact import brute_force

from model.backends.text import dump_text
from model.balance import Step
from model.check import check_space_moves
from model.resources import MoveKind
from model.space import Spec, count_bound, default_options, space_problem, with_node_status
from model.space_moves import MoveOptions, replay_moves
from model.state import node_states
from solvers.strategies.space import problem_of
from solvers.strategies.space_moves import with_moves


def _crowded(seed: int, family: str):  # noqa: ANN202
    """A tiny crowded group (3-4 nodes, instances on 30-50 % of them) and a mid-sized spec:
    where an existing instance sits decides whether one more fits."""
    rng = random.Random(seed)
    data = gen.cluster(
        rng,
        rng.randint(3, 4),
        groups=1,
        templates=rng.choice((("drbd",), ("plain", "drbd"))),
        shapes=(gen.Shape(16384, 1048576, 4), gen.Shape(24576, 2097152, 8)),
        fill=rng.choice((0.3, 0.5)),
    )
    cluster = sc.parse_text(
        dump_text(sc.parse_request(gen.dumps(gen.allocate(rng, data, "plain"))).cluster), "tiny"
    )
    spec = Spec(rng.choice((4096, 6144, 8192)), rng.choice((51200, 102400)), rng.choice((1, 2)), 1)
    return cluster, spec, default_options(cluster, disk_template=family)


def _every_single_move(state):  # noqa: ANN001, ANN202
    """Every (instance, kind, node) there is, kept where the move replays (hbal offers it and
    htools' checks pass): the brute force's own enumeration, not the search's."""
    one = MoveOptions(1)
    out = []
    kinds = list(MoveKind)
    for name, kind, node in product(state.locations, kinds, [*state.nodes, None]):
        step = Step(name, kind, node)
        moved = replay_moves(state, (step,), one)
        if not isinstance(moved, str):
            out.append(moved)
    return out


# seeds of _crowded where one move lets more fit (found by the search, judged by brute force)
GAINS = [(12, "drbd"), (12, "plain"), (15, "drbd"), (25, "plain"), (27, "drbd")]


@pytest.mark.parametrize(("seed", "family"), [*GAINS, (2, "drbd"), (4, "plain")])
def test_one_move_equals_brute_force(seed: int, family: str) -> None:
    cluster, spec, options = _crowded(seed, family)
    state = node_states(cluster)
    result = with_moves(state, spec, options, MoveOptions(1))
    assert result.status == "optimal"
    root = with_node_status(state)
    cap = result.count + 1  # enough to see that one more than the answer never fits
    best = brute_force(problem_of(root, spec, options), cap)
    for moved in _every_single_move(root):
        best = max(best, brute_force(problem_of(moved, spec, options), cap))
    assert result.count == best
    assert result.before == brute_force(problem_of(root, spec, options), cap)
    if (seed, family) in GAINS:
        assert result.count > result.before and len(result.moves) == 1


def test_two_moves_never_fewer_than_one_and_replay() -> None:
    cluster, spec, options = _crowded(12, "drbd")
    state = node_states(cluster)
    one = with_moves(state, spec, options, MoveOptions(1))
    two = with_moves(state, spec, options, MoveOptions(2))
    assert two.status == "optimal"
    assert two.count >= one.count > one.before
    root = with_node_status(state)
    report = check_space_moves(
        root, two.moves, MoveOptions(2), two.result.problem, two.result.answer
    )
    assert report.ok, report.text()
    assert report.objectives["instances"] == two.count


def test_checker_refuses_bad_moves_and_placements_of_the_unmoved_cluster() -> None:
    cluster, spec, options = _crowded(12, "drbd")
    state = node_states(cluster)
    r = with_moves(state, spec, options, MoveOptions(1))
    root = with_node_status(state)
    (step,) = r.moves
    problem, answer = r.result.problem, r.result.answer
    # without the move, the new instances do not fit
    assert not check_space_moves(root, (), MoveOptions(1), problem, answer).ok
    # more moves than allowed
    report = check_space_moves(root, (step, step), MoveOptions(1), problem, answer)
    assert "more than the 1 allowed" in report.text()
    # a move hbal does not offer (onto the node the instance is on)
    p = root.locations[step.instance][0]
    bad = Step(step.instance, MoveKind.REPLACE_PRIMARY, p)
    report = check_space_moves(root, (bad,), MoveOptions(1), problem, answer)
    assert report.kinds == {"move"}


def test_count_bound_bounds_the_count() -> None:
    for seed in range(8):
        for family in ("drbd", "plain"):
            cluster, spec, options = _crowded(seed, family)
            state = node_states(cluster)
            r = with_moves(state, spec, options, MoveOptions(0))
            assert r.count <= count_bound(space_problem(state, spec, options))


def test_time_limit_gives_the_best_found_unproven() -> None:
    from solvers.options import SolverOptions

    cluster, spec, options = _crowded(25, "plain")
    r = with_moves(
        node_states(cluster), spec, options, MoveOptions(3), SolverOptions(time_limit=0.05)
    )
    assert r.status == "feasible"
    assert r.count >= r.before


def test_command_line_reports_the_moves(tmp_path) -> None:  # noqa: ANN001
    cluster, spec, _ = _crowded(12, "drbd")
    path = tmp_path / "tiny.data"
    path.write_text(dump_text(cluster))
    argv = [
        sys.executable, "-m", "cli", "space", "-t", str(path), "--disk-template=drbd",
        f"--standard-alloc={spec.disk_mib},{spec.memory_mib},{spec.vcpus}",
        "--move-existing", "--max-moves", "1", "--json", "-S", str(tmp_path / "out"),
    ]  # fmt: skip
    run = subprocess.run(argv, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    moves = data["move_existing"]
    assert moves["status"] == "optimal" and len(moves["moves"]) == 1
    assert moves["instances"] > moves["without_moves"]
    assert data["standard"]["instances"] == moves["instances"]
    # the saved standard snapshot holds the moved instance where the move put it
    saved = (tmp_path / "out.standard").read_text()
    inst = moves["moves"][0]["instance"]
    assert any(line.startswith(inst + "|") for line in saved.splitlines())
    bad = subprocess.run([*argv[:-3], "--max-moves", "-1"], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines()[-1].startswith("exalloc: error: argument --max-moves")
    greedy = subprocess.run([*argv, "--greedy"], capture_output=True, text=True)
    assert greedy.returncode != 0 and "Traceback" not in greedy.stderr
    assert "--move-existing" in greedy.stderr.strip().splitlines()[-1]
