"""exalloc roll: Ganeti's hroller shell tests with `--greedy`, the port byte for byte beside
the real hroller on generated clusters, and the exact plans: valid, never longer than
hroller's, the minimum on small clusters by brute force (docs/roll.md)."""

from __future__ import annotations

import itertools
import json
import random
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from conftest import sampled
from roll_gen import RollSpec, generate

import cli
from formulations.roll_sat import memory_covers
from model.backends.text import dump_text
from model.errors import CheckFailedError, InfeasibleError
from model.htools.hroller import RollerOptions, lookup_name, prelude, rounds_of
from model.resources import loaded_states
from model.roll import (
    MIGRATE,
    PRIMARY,
    RollRules,
    RoundPlan,
    Step,
    check_plan,
    peel,
    problem_of,
)
from solvers.options import SolverOptions
from solvers.strategies.roll import complete_rounds, pack_rounds, plan
from solvers.strategies.roll_search import penalty_of, tabu_rounds


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def shell_tests(path: Path) -> list[dict]:
    """Each hroller command of a shelltestrunner file: its arguments, the expected stdout
    (literal or /regex/), stderr (literal, when given) and exit code."""
    cases = []
    for block in re.split(r"\n(?=\./test/hs/hroller)", path.read_text()):
        if not block.startswith("./test/hs/hroller"):
            continue
        command, rest = block.split("\n", 1)
        case: dict = {"args": shlex.split(command)[1:]}
        for part in re.split(r"^(?=>>>)", rest, flags=re.M):
            if part.startswith(">>>="):
                case["code"] = int(part[4:].strip())
            elif part.startswith(">>>2"):
                case["stderr"] = part[4:].lstrip("\n")
            elif part.startswith(">>>"):
                body = part[3:]
                if body.startswith("/"):
                    case["regex"] = body.strip()[1:-1]
                else:
                    case["stdout"] = body.lstrip("\n").rstrip("\n") + "\n"
        cases.append(case)
    return cases


def _cases(ganeti) -> list[dict]:  # noqa: ANN001
    return shell_tests(ganeti.shelltests_dir / "htools-hroller.test")


def test_shelltests_parse(ganeti) -> None:  # noqa: ANN001
    cases = _cases(ganeti)
    assert len(cases) == 17
    assert sum("regex" in c for c in cases) == 11 and all("code" in c for c in cases)


@pytest.mark.parametrize("k", range(17))
def test_hroller_shelltest(ganeti, capsys, k: int) -> None:  # noqa: ANN001
    """`exalloc roll --greedy` passes the shell test and prints what the real hroller does."""
    case = _cases(ganeti)[k]
    args = [a.replace("$TESTDATA_DIR", str(ganeti.data_dir)) for a in case["args"]]
    code, out, err = run_cli(capsys, "roll", "--greedy", *args)
    assert code == case["code"]
    if "regex" in case:
        assert re.search(case["regex"], out, re.M), (case["regex"], out)
    elif "stdout" in case:
        assert out == case["stdout"]
    if "stderr" in case:
        assert err.rstrip("\n") == case["stderr"].rstrip("\n")
    real = subprocess.run([str(ganeti.hroller), *args], capture_output=True, text=True, timeout=60)
    assert (out, err, code) == (real.stdout, real.stderr, real.returncode)


# --- the port on generated clusters ---------------------------------------------------------

OPTION_SETS = (
    [],
    ["--ignore-non-redundant"],
    ["--skip-non-redundant"],
    ["--offline-maintenance", "-v", "-v"],
    ["--full-evacuation", "--print-moves"],
    ["--print-moves", "-v", "-v", "-v"],
    ["--one-step-only", "--print-moves", "--no-headers"],
    ["--node-tags=red,blue"],
    ["-G", "group-1", "-q"],
)


def _spec(seed: int) -> RollSpec:
    rng = random.Random(seed)
    return RollSpec(
        nodes=rng.randint(2, 12),
        instances=rng.randint(0, 36),
        drbd_share=rng.choice((0.3, 0.7, 1.0)),
        concentrated=rng.choice((0, 0, 1, 2, 3)),
        groups=rng.choice((1, 1, 2)),
        offline=rng.choice((0, 0, 1, 2)),
        fill=rng.choice((0.3, 0.6, 0.9, 0.98)),
        seed=seed,
    )


@pytest.mark.parametrize("seed", sampled(range(16)))
def test_port_equals_hroller(htools, capsys, tmp_path, seed: int) -> None:  # noqa: ANN001
    """stdout, stderr and exit code of the real hroller, option set by option set."""
    cluster = generate(_spec(seed))
    path = tmp_path / "c.data"
    path.write_text(dump_text(cluster))
    rng = random.Random(seed)
    names = [n.name for n in cluster.nodes]
    extra = [["-O", rng.choice(names)], ["-O", rng.choice(names), "-O", names[0][:6]]]
    for argv in [*OPTION_SETS, *extra]:
        real = subprocess.run(
            [str(htools.hroller), "-t", str(path), *argv], capture_output=True, text=True
        )
        got = run_cli(capsys, "roll", "--greedy", "-t", str(path), *argv)
        assert got == (real.returncode, real.stdout, real.stderr), argv


def test_lookup_name_as_htools() -> None:
    names = ["node1.example.com", "node10.example.com", "node2"]
    assert lookup_name(names, "node1") == (2, "node1.example.com")  # the one name "node1.*"
    assert lookup_name(names, "node2") == (0, "node2")
    assert lookup_name(["a.x", "a.y"], "a")[0] == 1  # two partial matches
    assert lookup_name(names, "node")[0] == 3


def test_no_arguments_and_errors(ganeti, capsys) -> None:  # noqa: ANN001
    data = ganeti.data_dir / "unique-reboot-order.data"
    assert run_cli(capsys, "roll", "--greedy", "-t", str(data), "x") == (
        1,
        "",
        "Error: This program doesn't take any arguments.\n",
    )
    code, out, err = run_cli(capsys, "roll")
    assert (code, err) == (
        1,
        "Error: failed to load data, aborting: No backend selected! Exiting.\n",
    )
    code, out, err = run_cli(capsys, "roll", "-t", str(data), "-G", "nosuch")
    assert (code, out, err) == (1, "", "Error: Cannot find target group.\n")
    code, _, err = run_cli(
        capsys, "roll", "-t", str(data), "--memory-aware", "--offline-maintenance"
    )
    assert code == 1 and err.startswith("exalloc: error:")


# --- the exact plans ---------------------------------------------------------------------------

RULE_SETS = (
    RollRules(),
    RollRules(memory_aware=True),
    RollRules(full_evacuation=True),
    RollRules(ignore_non_redundant=True, memory_aware=True),
    RollRules(offline_maintenance=True),
)


def _hroller_options(rules: RollRules) -> RollerOptions:
    return RollerOptions(
        offline_maintenance=rules.offline_maintenance,
        ignore_non_redundant=rules.ignore_non_redundant,
        full_evacuation=rules.full_evacuation,
    )


def _exact(cluster, rules: RollRules):  # noqa: ANN001, ANN202
    start = prelude(cluster, _hroller_options(rules))
    greedy = rounds_of(start, _hroller_options(rules))
    keep = set(start.considered_names)
    greedy_rounds = [] if greedy.exit_code else [[v for v in r if v in keep] for r in greedy.rounds]
    problem = problem_of(cluster, start.considered_names, rules, start.offline)
    try:
        result = plan(problem, SolverOptions(solver_given=False), known=[greedy_rounds])
    except InfeasibleError:
        result = None
    return start, greedy_rounds, problem, result


@pytest.mark.parametrize("seed", range(24))
def test_exact_plans_valid_and_never_longer(seed: int) -> None:
    """Every considered node once, conflicts apart, every round replayed by the checker, and
    no more rounds than hroller's whenever hroller's rounds are possible under the rules."""
    _assert_valid_and_never_longer(generate(_spec(seed)))


@pytest.mark.parametrize("seed", range(6))
def test_exact_plans_valid_on_racks(seed: int) -> None:
    """The same on the second family: secondaries in the next rack (tests/roll_gen.py)."""
    rng = random.Random(500 + seed)
    spec = RollSpec(
        nodes=rng.randint(12, 40),
        instances=rng.randint(20, 100),
        drbd_share=rng.choice((0.5, 0.8)),
        offline=rng.choice((0, 1)),
        fill=rng.choice((0.6, 0.9)),
        racks=rng.choice((3, 4, 5)),
        seed=500 + seed,
    )
    _assert_valid_and_never_longer(generate(spec))


def _assert_valid_and_never_longer(cluster) -> None:  # noqa: ANN001
    for rules in RULE_SETS:
        start, greedy, problem, result = _exact(cluster, rules)
        if result is None:  # some node can never reboot: then no plan of hroller's holds
            steps = [_known_round(problem, r) for r in greedy if r]
            assert not greedy or None in steps
            continue
        check_plan(cluster, start.considered_names, rules, result.rounds, start.offline)
        assert sorted(v for r in result.rounds for v in r.nodes) == sorted(problem.nodes)
        assert result.bound <= result.objective
        assert result.status == "optimal"
        greedy_ok = [r for r in greedy if r]
        try:
            steps = [_known_round(problem, r) for r in greedy_ok]
            if all(s is not None for s in steps):
                check_plan(cluster, start.considered_names, rules, steps, start.offline)
                assert result.objective <= len(greedy_ok), rules
        except CheckFailedError:
            pass  # hroller's rounds break the rules (memory-aware): no comparison


def _known_round(problem, members):  # noqa: ANN001, ANN202
    from model.roll import first_fit_round

    return first_fit_round(problem, members)


def test_checker_refuses_broken_plans() -> None:
    cluster = generate(RollSpec(nodes=6, instances=14, drbd_share=1.0, seed=3))
    rules = RollRules(memory_aware=True)
    start, _, problem, result = _exact(cluster, rules)
    considered = start.considered_names
    rounds = list(result.rounds)
    check_plan(cluster, considered, rules, rounds, start.offline)
    with pytest.raises(CheckFailedError, match="leave out"):
        check_plan(cluster, considered, rules, rounds[1:], start.offline)
    merged = RoundPlan(tuple(v for r in rounds for v in r.nodes), ())
    with pytest.raises(CheckFailedError, match="reboot together|does not migrate"):
        check_plan(cluster, considered, rules, [merged], start.offline)
    first = rounds[0]
    without = RoundPlan(first.nodes, tuple(s for s in first.steps if s.kind != MIGRATE))
    if len(without.steps) != len(first.steps):
        with pytest.raises(CheckFailedError, match="does not migrate"):
            check_plan(cluster, considered, rules, [without, *rounds[1:]], start.offline)


def test_checker_refuses_a_move_into_the_round() -> None:
    cluster = generate(RollSpec(nodes=4, instances=6, drbd_share=0.0, fill=0.5, seed=1))
    rules = RollRules()
    start, _, problem, result = _exact(cluster, rules)
    steps = [s for r in result.rounds for s in r.steps if s.kind == PRIMARY]
    assert steps
    step = steps[0]
    r = next(r for r in result.rounds if step in r.steps)
    # a move to a node of the same round is refused
    bad = Step(PRIMARY, step.index, step.name, step.source, r.nodes[0])
    broken = RoundPlan(r.nodes, (*[s for s in r.steps if s is not step], bad))
    rounds = [broken if x is r else x for x in result.rounds]
    with pytest.raises(CheckFailedError):
        check_plan(cluster, start.considered_names, rules, rounds, start.offline)


# --- brute force on small clusters -------------------------------------------------------------


def _round_possible(cluster, rules: RollRules, members: frozenset[str]) -> bool:  # noqa: ANN001
    """From the raw node states: drbd primaries' memory on their online secondaries
    (memory-aware), then every non-redundant instance of the round on some online node of
    its group outside the round, tried every way (htools' hard checks as capacities)."""
    _, states, _ = loaded_states(cluster)
    mem = {n: s.unallocated_memory_mib - 1 for n, s in states.items()}
    dsk = {n: s.free_disk_mib - 1 for n, s in states.items()}
    items = []
    for inst in cluster.instances:
        if inst.primary not in members:
            continue
        used = inst.memory_mib if inst.uses_memory else 0
        if inst.secondary:
            if inst.secondary in members:
                return False
            if rules.memory_aware and not states[inst.secondary].offline:
                mem[inst.secondary] -= used
                if mem[inst.secondary] < 0 or dsk[inst.secondary] < 0:
                    return False
        elif not rules.ignore_non_redundant:
            items.append((used, inst.disk_mib, states[inst.primary].group_uuid))
    targets = [n for n, s in states.items() if not s.offline and n not in members]

    def place(k: int) -> bool:
        if k == len(items):
            return True
        used, disk, group = items[k]
        for t in targets:
            if states[t].group_uuid == group and mem[t] >= used and dsk[t] >= disk:
                mem[t] -= used
                dsk[t] -= disk
                ok = place(k + 1)
                mem[t] += used
                dsk[t] += disk
                if ok:
                    return True
        return False

    return place(0)


def _conflict(cluster, rules: RollRules, a: str, b: str) -> bool:  # noqa: ANN001
    for inst in cluster.instances:
        if inst.secondary and {inst.primary, inst.secondary} == {a, b}:
            return True
    if rules.memory_aware:
        return False
    secs = {i.secondary for i in cluster.instances if i.primary == a and i.secondary}
    return any(i.primary == b and i.secondary in secs for i in cluster.instances)


def _brute_force(cluster, nodes: list[str], rules: RollRules) -> int:  # noqa: ANN001
    """The fewest rounds over every partition of the nodes (small clusters only)."""
    possible: dict[frozenset[str], bool] = {}

    def ok(members: frozenset[str]) -> bool:
        if members not in possible:
            pairs = itertools.combinations(sorted(members), 2)
            possible[members] = not any(_conflict(cluster, rules, a, b) for a, b in pairs) and (
                _round_possible(cluster, rules, members)
            )
        return possible[members]

    best = len(nodes) + 1

    def grow(k: int, rounds: list[set[str]]) -> None:
        nonlocal best
        if len(rounds) >= best:
            return
        if k == len(nodes):
            best = len(rounds)
            return
        v = nodes[k]
        for r in rounds:
            if ok(frozenset(r | {v})):
                r.add(v)
                grow(k + 1, rounds)
                r.discard(v)
        if ok(frozenset({v})):
            grow(k + 1, [*rounds, {v}])

    grow(0, [])
    return best


@pytest.mark.parametrize("seed", range(30))
def test_exact_equals_brute_force(seed: int) -> None:
    rng = random.Random(1000 + seed)
    spec = RollSpec(
        nodes=rng.randint(3, 7),
        instances=rng.randint(2, 12),
        drbd_share=rng.choice((0.5, 0.8, 1.0)),
        concentrated=rng.choice((0, 1, 2)),
        fill=rng.choice((0.5, 0.9, 0.98)),
        tags=False,
        seed=1000 + seed,
    )
    cluster = generate(spec)
    for rules in (RollRules(), RollRules(memory_aware=True)):
        start = prelude(cluster, _hroller_options(rules))
        nodes = list(start.considered_names)
        oracle = _brute_force(cluster, nodes, rules)
        problem = problem_of(cluster, start.considered_names, rules, start.offline)
        if oracle > len(nodes):
            with pytest.raises(Exception, match="can never reboot"):
                plan(problem, SolverOptions(solver_given=False))
            continue
        result = plan(problem, SolverOptions(solver_given=False))
        assert result.objective == oracle, (seed, rules)
        # no start, every count of rounds from the bound up asked of the peeled nodes' core
        # first: by default of the SAT relaxation (formulations/roll_sat.py, its covers and
        # cuts), with --solver cpsat of the full model; the same minimum each time, and a
        # plan the checker accepts
        for options, prover in (
            (SolverOptions(solver_given=False), "minisat"),
            (SolverOptions(solver="cpsat"), "cpsat"),
        ):
            alone = plan(problem, options, starts=False)
            assert alone.objective == oracle, (seed, rules, prover)
            assert alone.status == "optimal"
            if alone.build_s:  # a question was asked (not every node peeled)
                assert alone.solver == prover, (seed, rules)
            check_plan(cluster, start.considered_names, rules, alone.rounds, start.offline)


@pytest.mark.parametrize("seed", range(6))
def test_peel_core_and_relaxation(seed: int) -> None:
    """`peel`: every node taken out had fewer than k conflicting nodes among those left at
    that time, no node whose round depends on a receiving node's memory is taken out, and
    the restricted question is a relaxation: each round of the full plan, less the peeled
    nodes, is a possible round of it (packed, and the checker accepts the plan's rounds)."""
    spec = RollSpec(nodes=60, instances=180, drbd_share=0.8, offline=1, fill=0.7, seed=seed)
    cluster = generate(spec)
    for rules in (RollRules(), RollRules(memory_aware=True)):
        start = prelude(cluster, _hroller_options(rules))
        problem = problem_of(cluster, start.considered_names, rules, start.offline)
        result = plan(problem, SolverOptions(solver_given=False))
        k = result.objective
        core, peeled = peel(problem, k)
        assert sorted((*core, *peeled)) == sorted(problem.nodes)
        assert not set(peeled) & problem.memory_bound_nodes()
        adj = problem.neighbours()
        left = set(problem.nodes)
        for v in peeled:
            assert len(adj[v] & left) < k, v
            left.discard(v)
        assert left == set(core)
        sub = problem.restricted(core)
        assert set(sub.nodes) == set(core)
        pairs = sub.conflict_pairs
        assert pairs == {p for p in problem.conflict_pairs if p <= set(core)}
        rounds = [[v for v in r.nodes if v in left] for r in result.rounds]
        packed = [_known_round(sub, r) for r in rounds if r]
        assert None not in packed
        check_plan(cluster, core, rules, packed, start.offline)


# --- the program's output ----------------------------------------------------------------------


def test_exact_output_forms(ganeti, capsys) -> None:  # noqa: ANN001
    data = str(ganeti.data_dir / "hroller-online.data")
    code, out, err = run_cli(capsys, "roll", "-t", data, "--memory-aware", "--print-moves")
    assert code == 0
    assert out.splitlines()[0] == "'Node Reboot Groups'"
    rounds = [ln for ln in out.splitlines()[1:] if not ln.startswith("  ")]
    assert len(rounds) == 2  # hroller needs 3
    assert rounds[-1].endswith("node-01-003")  # the master last
    assert "2 rounds, optimal" in err and "hroller" not in err  # another question
    code, _, err = run_cli(capsys, "roll", "-t", data)
    assert code == 0 and "3 rounds, optimal" in err and "hroller: 3" in err
    code, out, _ = run_cli(capsys, "roll", "-t", data, "--memory-aware", "--json")
    doc = json.loads(out)
    assert doc["status"] == "optimal" and doc["bound"] == 2 and doc["hroller_rounds"] is None
    assert [len(g) for g in doc["groups"]] == [2, 2]
    assert {m["kind"] for m in doc["moves"]} == {"migrate"}
    code, out, _ = run_cli(capsys, "roll", "-t", data, "--one-step-only", "--no-headers")
    assert out == "node-01-001\nnode-01-004\n"


@pytest.mark.parametrize(
    "extra",
    [[], ["--print-moves", "-v", "-v", "-v"], ["--full-evacuation", "--print-moves"], ["-q", "-q"]],
    ids=" ".join,
)
def test_ialloc_source_as_htools(ganeti, capsys, extra: list[str]) -> None:  # noqa: ANN001
    """`-I REQUEST`: htools merges the request's cluster twice, and so does the port, with
    each merge's warning on inconsistent data (`-q -q` leaves the verbosity at -1, not 0:
    they are printed); a request htools refuses gets hroller's words. Every Ganeti request."""
    requests = sorted(ganeti.data_dir.glob("hail-*.json"))
    assert len(requests) > 15
    for request in requests:
        argv = ["--force", "-I", str(request), *extra]
        code, out, err = run_cli(capsys, "roll", "--greedy", *argv)
        real = subprocess.run([str(ganeti.hroller), *argv], capture_output=True, text=True)
        assert (code, out, err) == (real.returncode, real.stdout, real.stderr), request.name


def test_save_writes_original(ganeti, capsys, tmp_path) -> None:  # noqa: ANN001
    data = str(ganeti.data_dir / "hroller-online.data")
    target = tmp_path / "snap"
    code, _, err = run_cli(capsys, "roll", "--greedy", "-t", data, "-S", str(target))
    assert code == 0
    assert (
        err
        == f"The cluster state before hroller run has been written to file '{target}.original'\n"
    )
    real = subprocess.run(
        [str(ganeti.hroller), "-t", data, "-S", str(tmp_path / "real")], capture_output=True
    )
    assert real.returncode == 0
    assert (tmp_path / "snap.original").read_text() == (tmp_path / "real.original").read_text()


def test_a_node_that_can_never_reboot(capsys, tmp_path) -> None:  # noqa: ANN001
    """A plain instance too large for every other node: hroller's error, exalloc's reason."""
    from model.cluster import Cluster, Disk, Instance, Node, NodeGroup

    group = NodeGroup("g", "uuid-g")
    nodes = (
        Node("big", 65536.0, 1024, 65536 - 1024 - 40960, 1048576.0, 948576, 16.0, "uuid-g",
             master=True),
        Node("small", 16384.0, 1024, 16384 - 1024, 1048576.0, 1048576, 8.0, "uuid-g"),
    )  # fmt: skip
    inst = Instance("huge", 40960, (Disk(100000),), 4, "running", True, "big", None, "plain")
    path = tmp_path / "c.data"
    path.write_text(dump_text(Cluster((group,), nodes, (inst,))))
    code, out, err = run_cli(capsys, "roll", "-t", str(path))
    assert (code, out) == (1, "")
    assert "Not enough capacity to move non-redundant instances: node big can never reboot" in err
    code, _, err = run_cli(capsys, "roll", "--greedy", "-t", str(path))
    assert (code, err) == (1, "Error: Not enough capacity to move non-redundant instances\n")
    code, out, _ = run_cli(capsys, "roll", "-t", str(path), "--ignore-non-redundant")
    assert code == 0 and out == "'Node Reboot Groups'\nsmall,big\n"


@pytest.mark.parametrize("seed", range(4))
def test_memory_covers_are_impossible_rounds(seed: int) -> None:
    """The SAT relaxation's cover clauses (formulations/roll_sat.py) forbid only sets of
    primaries that the independent round oracle (`_round_possible`, from the raw node
    states) also finds impossible together, each cover small (without its last primary it
    fits the receiving node's memory)."""
    spec = RollSpec(
        nodes=30, instances=90, drbd_share=1.0, concentrated=2, fill=0.9, offline=0, seed=seed
    )
    cluster = generate(spec)
    rules = RollRules(memory_aware=True)
    start = prelude(cluster, _hroller_options(rules))
    problem = problem_of(cluster, start.considered_names, rules, start.offline)
    loads = problem.loads()
    tight = 0
    for s, per in loads.items():
        cap = problem.rooms[s].memory_mib
        primaries = [p for p, w in per.items() if w > 0]
        covers = memory_covers(problem, loads, primaries)
        if sum(per.values()) <= cap:
            continue
        tight += 1
        mine = [c for c in covers if set(c) <= set(per) and sum(per[p] for p in c) > cap]
        assert mine, s
        for c in mine:
            assert not _round_possible(cluster, rules, frozenset(c)), (s, c)
            assert sum(per[p] for p in c[:-1]) <= cap, (s, c)
    assert tight, "no receiving node with more migrations than memory: the test tests nothing"


# --- the local search (solvers/strategies/roll_search.py) --------------------------------------


@pytest.mark.parametrize("seed", range(20))
def test_search_finds_the_brute_force_rounds(seed: int) -> None:
    """TabuCol with the memory penalties on small clusters: in the brute force's fewest
    rounds it reaches penalty 0 (a plan of that many rounds exists, and has penalty 0), and
    its rounds then pack and the checker accepts them; with fewer rounds, whatever it finds
    does not pack (there is no plan)."""
    rng = random.Random(2000 + seed)
    spec = RollSpec(
        nodes=rng.randint(5, 8),
        instances=rng.randint(6, 16),
        drbd_share=rng.choice((0.8, 1.0)),
        fill=rng.choice((0.5, 0.9, 0.98)),
        tags=False,
        seed=2000 + seed,
    )
    cluster = generate(spec)
    rules = RollRules(memory_aware=True)
    start = prelude(cluster, _hroller_options(rules))
    nodes = list(start.considered_names)
    oracle = _brute_force(cluster, nodes, rules)
    if oracle > len(nodes):
        return  # some node can never reboot: no rounds to search for
    problem = problem_of(cluster, start.considered_names, rules, start.offline)
    found = tabu_rounds(problem, oracle, 20000, seed=seed)
    assert found.rounds is not None, (seed, oracle, found.best)
    assert len(found.rounds) == oracle
    assert sorted(v for r in found.rounds for v in r) == sorted(problem.nodes)
    assert penalty_of(problem, found.rounds) == 0
    packed = pack_rounds(problem, [r for r in found.rounds if r])
    if packed is not None:
        check_plan(cluster, start.considered_names, rules, packed, start.offline)
    if oracle > 1:
        fewer = tabu_rounds(problem, oracle - 1, 2000, seed=seed)
        if fewer.rounds is not None:
            assert pack_rounds(problem, [r for r in fewer.rounds if r]) is None


@pytest.mark.parametrize("seed", range(4))
def test_search_colours_the_cores_the_strategy_colours(seed: int) -> None:
    """On 60-node clusters, the search reaches penalty 0 in the optimum k rounds the strategy
    proves (on all nodes, and on the core peeled for k when there is one), and never with
    fewer rounds than the clique's nodes."""
    spec = RollSpec(nodes=60, instances=180, drbd_share=0.8, offline=1, fill=0.7, seed=seed)
    cluster = generate(spec)
    rules = RollRules(memory_aware=True)
    start = prelude(cluster, _hroller_options(rules))
    problem = problem_of(cluster, start.considered_names, rules, start.offline)
    result = plan(problem, SolverOptions(solver_given=False))
    k = result.objective
    kept, peeled = peel(problem, k)
    core = problem.restricted(kept)
    for p in (problem, core) if core.nodes else (problem,):
        found = tabu_rounds(p, k, 50000, seed=seed)
        assert found.rounds is not None, (seed, k, found.best)
        assert penalty_of(p, found.rounds) == 0
        done = complete_rounds(problem, found.rounds, peeled if p is core else (), k)
        if done is not None:  # packed and completed: a plan of k rounds the checker accepts
            assert len(done) <= k
            check_plan(cluster, start.considered_names, rules, done, start.offline)
    fewer = tabu_rounds(problem, len(result.clique) - 1, 2000, seed=seed)
    assert fewer.rounds is None and fewer.best > 0 and fewer.moves == 2000


def test_without_a_time_limit_the_plan_has_the_default_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The fewest rounds can be a colouring proof of hours (docs/roll.md, 2,000 nodes at
    random); without --time-limit the exact plan had no deadline and ran on. It now has
    60 s from the start (programs/options.py SEARCH_TIME_LIMIT_S, as --time-limit 60), less
    the check's reserve; a --time-limit given wins; --help names the default."""
    import programs.options as options
    import solvers.strategies.roll as strategy

    seen: list[SolverOptions] = []
    real = strategy.plan

    def spy(problem, options, **kw):  # noqa: ANN001, ANN003, ANN202
        seen.append(options)
        return real(problem, options, **kw)

    monkeypatch.setattr(strategy, "plan", spy)
    path = tmp_path / "c.data"
    path.write_text(dump_text(generate(RollSpec(nodes=8, instances=16, seed=2))))
    assert cli.main(["roll", "-t", str(path)]) == 0
    assert cli.main(["roll", "-t", str(path), "--time-limit", "5"]) == 0
    default, given = seen
    assert default.started_at is not None and given.started_at is not None
    limit = options.SEARCH_TIME_LIMIT_S
    assert limit - 1 < default.deadline() - default.started_at <= limit
    assert 4 < given.deadline() - given.started_at <= 5
    capsys.readouterr()
    with pytest.raises(SystemExit):
        cli.main(["roll", "--help"])
    assert "(default 60 s; at worst hroller's rounds" in " ".join(capsys.readouterr().out.split())
