"""`exalloc balance --across-groups` (docs/balance.md, "Across groups"): the score between the
groups of a pool, the independent checker, and the exact answer against brute force over every
set of migrations on small super clusters."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from model.backends.text import parse_text
from model.balance_groups import (
    TERMS,
    AcrossProblem,
    across_score,
    check_across_groups,
)
from model.groups import Relocation, relocation, storage_of
from model.state import node_states

POLICY = "128,1,1024,1,1,1|128,1,1024,1,1,1;32768,8,1048576,16,8,12"
SUPER = "data/clusters/super-pools.data"


def _text(
    groups: list[tuple[str, str, str]], nodes: list[str], instances: list[str], ctags: str = ""
) -> str:
    """htools text: groups (name, tags, templates), node and instance lines, cluster tags."""
    return (
        "\n".join(f"{g}|uuid-{g}|preferred|{tags}|" for g, tags, _ in groups)
        + "\n\n"
        + "\n".join(nodes)
        + "\n\n"
        + "\n".join(instances)
        + f"\n\n{ctags}\n"
        + f"|{POLICY}|diskless,file,sharedfile,plain,blockdev,drbd,rbd,ext|4.0|32.0\n"
        + "\n".join(f"{g}|{POLICY}|{t}|4.0|32.0" for g, _, t in groups)
        + "\n"
    )


def _node(name: str, group: str, total: int, cpus: int, *, off: bool = False) -> str:
    # free memory as reported: the loader recomputes what instances use from the instances
    role = "O" if off else "N"
    return f"{name}|{total}|1024|{total - 1024}|204800|204800|{cpus}|{role}|uuid-{group}|1"


def _inst(name: str, mem: int, vcpus: int, node: str, template="ext", secondary="", tags="") -> str:
    return f"{name}|{mem}|10240|{vcpus}|running|Y|{node}|{secondary}|{template}|{tags}|1"


def _state(text: str):
    return node_states(parse_text(text, "<test>"))


def tiny(rng: random.Random) -> str:
    """Two or three groups on pool p (one sometimes also lvm, one sometimes off the pool), 2-3
    nodes of mixed memory and CPUs each, 3-5 ext instances piled on the first group's nodes
    and a drbd pair; tight enough that some migrations fail htools' adds."""
    n_groups = rng.choice((2, 2, 3))
    groups, nodes, insts = [], [], []
    for g in range(n_groups):
        templates = rng.choice(("ext,drbd,plain,diskless", "ext,diskless"))
        tags = "pool:p" if g < 2 or rng.random() < 0.7 else ""
        groups.append((f"g{g}", tags, templates))
        for k in range(rng.choice((2, 3))):
            total = rng.choice((6144, 9216, 16384))
            nodes.append(_node(f"g{g}n{k}", f"g{g}", total, rng.choice((4, 8))))
    first = [n.split("|")[0] for n in nodes if "|uuid-g0|" in n]
    for k in range(rng.choice((3, 4, 5))):
        node = rng.choice(first) if k < 3 else rng.choice([n.split("|")[0] for n in nodes])
        tags = rng.choice(("", "", "pool:p", "svc:web"))
        insts.append(_inst(f"i{k}", rng.choice((1024, 2048, 3072, 4096)), rng.choice((1, 2, 4)),
                           node, tags=tags))  # fmt: skip
    if "drbd" in groups[0][2]:
        insts.append(_inst("d0", 2048, 2, first[0], "drbd", first[1], ""))
    return _text(groups, nodes, insts, "htools:iextags:svc")


def brute_force(problem: AcrossProblem) -> tuple[float, tuple[Relocation, ...], set[str]]:
    """The least score over every set of at most K migrations the checker passes: each
    shared-storage instance stays or goes to any node of another group (the checker alone
    says which sets are allowed). Also the kinds of violation that refused some set."""
    state = problem.state
    names = [
        n for n, (p, s) in state.locations.items()
        if state.demands[n].disk_template == "ext" and s is None
    ]  # fmt: skip
    options = {
        n: [None] + [m for m, st in state.nodes.items()
                     if st.group_uuid != state.nodes[state.locations[n][0]].group_uuid]
        for n in names
    }  # fmt: skip
    best = check_across_groups(problem, ()).objectives["score"]
    plan: tuple[Relocation, ...] = ()
    refused: set[str] = set()
    for choice in itertools.product(*(options[n] for n in names)):
        moves = tuple(
            relocation(state, n, t, None) for n, t in zip(names, choice, strict=True) if t
        )
        if not moves or (problem.max_moves is not None and len(moves) > problem.max_moves):
            continue
        report = check_across_groups(problem, moves)
        refused |= report.kinds
        if report.ok and report.objectives["score"] < best - 1e-12:
            best, plan = report.objectives["score"], moves
    return best, plan, refused


# --- the score ----------------------------------------------------------------------------


def test_score_by_hand_on_super_pools() -> None:
    """rack-a and rack-b share pool ceph (rack-c has no pool): the ratios computed here from
    the file's numbers alone."""
    state = _state(open(SUPER, encoding="utf-8").read())
    got = across_score(state, storage_of(state))
    assert list(got.ratios) == ["ceph"]
    # rack-a: online node-a2, node-a3 (32768 MiB, 1024 for the node, 16 CPUs each);
    # primaries web1 web2 api1-3 (offline node-a1) db1 db2 cache1 cache2
    mem_a = (2 * 3072 + 3 * 2048 + 2 * 8192 + 2 * 4096) / (2 * (32768 - 1024))
    cpu_a = (2 * 2 + 3 * 1 + 2 * 4 + 2 * 2) / (2 * 16)
    load_a = 9 / 32  # htools' default dynamic load: 1 per instance
    a = got.ratios["ceph"]["uuid-rack-a"]
    assert a == pytest.approx((mem_a, cpu_a, load_a))
    assert got.ratios["ceph"]["uuid-rack-b"] == (0.0, 0.0, 0.0)
    # two groups: the population sd is half the difference
    want = sum(w * r / 2 for (_, w), r in zip(TERMS, (mem_a, cpu_a, load_a), strict=True))
    assert got.score == pytest.approx(want)


# --- the checker --------------------------------------------------------------------------


def _super_problem(k: int | None = None) -> AcrossProblem:
    state = _state(open(SUPER, encoding="utf-8").read())
    return AcrossProblem(state, storage_of(state), k)


def test_checker_passes_a_plan_and_scores_it() -> None:
    p = _super_problem()
    s = p.state
    plan = (relocation(s, "web1", "node-b1", None), relocation(s, "cache1", "node-b2", None))
    report = check_across_groups(p, plan)
    assert report.ok, report.text()
    assert report.objectives["moves"] == 2
    # rack-b gains web1 and cache1: its memory ratio, by hand
    mem_b = (3072 + 4096) / (3 * (32768 - 1024))
    mem_a = (2 * 3072 + 3 * 2048 + 2 * 8192 + 2 * 4096 - 3072 - 4096) / (2 * (32768 - 1024))
    cpu_b, cpu_a = (2 + 2) / 48, (2 * 2 + 3 + 2 * 4 + 2 * 2 - 4) / 32
    load_b, load_a = 2 / 48, 7 / 32
    want = 0.5 * abs(mem_a - mem_b) / 2 + 0.5 * abs(cpu_a - cpu_b) / 2 + abs(load_a - load_b) / 2
    assert report.objectives["score"] == pytest.approx(want)


def test_checker_rejects_tampered_plans() -> None:
    p = _super_problem(k=1)
    s = p.state
    cases = {
        "moves": (relocation(s, "web1", "node-b1", None), relocation(s, "web2", "node-b2", None)),
        "not_movable": (relocation(s, "db1", "node-c1", "node-c2"),),  # drbd: no migration
        "group": (relocation(s, "web1", "node-a2", None),),  # stays in its group
        "target": (relocation(s, "cache1", "node-a1", None),),  # the offline node
    }
    for kind, plan in cases.items():
        report = check_across_groups(p, plan)
        assert kind in report.kinds, (kind, report.text())
    # over capacity: every ceph instance onto one rack-b node
    free = AcrossProblem(s, p.storage, None)
    names = ("web1", "web2", "api1", "api2", "api3", "cache1", "cache2")
    pile = tuple(relocation(s, n, "node-b1", None) for n in names)
    report = check_across_groups(free, pile)
    assert report.kinds & {"memory", "n1", "vcpu"}, report.text()


def test_checker_refuses_a_node_that_gives_and_takes() -> None:
    text = _text(
        [("ga", "pool:p", "ext,diskless"), ("gb", "pool:p", "ext,diskless")],
        [
            _node(n, n[0].replace("a", "ga").replace("b", "gb"), 16384, 8)
            for n in ("a1", "a2", "b1", "b2")
        ],
        [_inst("x", 2048, 1, "a1"), _inst("y", 1024, 1, "b1")],
    )
    state = _state(text)
    p = AcrossProblem(state, storage_of(state))
    ok = (relocation(state, "x", "b2", None), relocation(state, "y", "a2", None))
    assert check_across_groups(p, ok).ok
    bad = (relocation(state, "x", "b1", None), relocation(state, "y", "a1", None))
    report = check_across_groups(p, bad)
    assert {v.node for v in report.violations if v.kind == "one_way"} == {"a1", "b1"}


# --- the exact answer against brute force -------------------------------------------------


def _exact(problem: AcrossProblem):
    from solvers.strategies.balance_groups import balance_across

    return balance_across(problem)


#: seeds whose brute force takes seconds (3 groups, 4-5 movers, no K)
SLOW_SEEDS = (6, 27, 30)
REFUSED: set[str] = set()  # what the checker refused over the seeds run


@pytest.mark.parametrize(
    "seed",
    [s if s not in SLOW_SEEDS else pytest.param(s, marks=pytest.mark.slow) for s in range(40)],
)
def test_exact_equals_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    state = _state(tiny(rng))
    k = rng.choice((1, 2, None))
    problem = AcrossProblem(state, storage_of(state), k)
    truth, plan, refused = brute_force(problem)
    REFUSED.update(refused)
    ans = _exact(problem)
    assert ans.status == "optimal", (seed, ans)
    assert check_across_groups(problem, ans.relocations).ok
    assert ans.score == pytest.approx(truth, abs=1e-9), (seed, k, plan, ans.relocations)
    assert ans.bound is not None and ans.bound <= truth + 1e-9
    assert ans.score < ans.score_before or not plan


def test_brute_force_cases_exercise_every_rule() -> None:
    """The seeds above meet each rule the model writes as a row (run after them)."""
    if len(REFUSED) == 0:
        pytest.skip("run with the brute-force cases")
    assert {"memory", "n1", "one_way", "exclusion_tags", "group"} <= REFUSED, REFUSED


# --- the command line ---------------------------------------------------------------------


def test_cli_on_super_pools(tmp_path, capsys) -> None:
    """`exalloc balance --across-groups -l 2 --json` on data/clusters/super-pools.data: the two
    ceph racks, proven optimal, equal to brute force over every pair of migrations, each
    migration passing the checker; the text names the ratios, the plan and the proof; -C gives
    hbal's jobsets."""
    import cli

    assert cli.main(["balance", "-t", SUPER, "--across-groups", "-l", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    problem = _super_problem(k=2)
    truth, _, _ = brute_force(problem)
    assert out["status"] == "optimal" and out["gap"] == pytest.approx(0.0, abs=1e-6)
    assert out["score_after"] == pytest.approx(truth, abs=1e-9)
    assert out["score_before"] == pytest.approx(
        check_across_groups(problem, ()).objectives["score"]
    )
    assert set(out["ratios_before"]["ceph"]) == {"rack-a", "rack-b"}
    moves = out["migrations"]
    assert len(moves) == 2 and {m["from_group"] for m in moves} == {"rack-a"}
    assert {m["to_group"] for m in moves} == {"rack-b"}
    plan = tuple(relocation(problem.state, m["instance"], m["to"][0], None) for m in moves)
    assert check_across_groups(problem, plan).objectives["score"] == pytest.approx(truth)
    assert all(
        c.startswith("gnt-instance migrate -f -n node-b") for m in moves for c in m["commands"]
    )

    assert cli.main(["balance", "-t", SUPER, "--across-groups", "-l", "2", "-C"]) == 0
    text = capsys.readouterr().out
    assert "Pool ceph: load / capacity per group" in text
    assert f"Score across groups: {out['score_before']:.8f} -> {out['score_after']:.8f}" in text
    assert "exact (score across groups): optimal" in text
    assert "echo jobset 1, 2 jobs" in text

    # -l 0: nothing may move, proven; and --greedy has no counterpart
    assert cli.main(["balance", "-t", SUPER, "--across-groups", "-l", "0", "--json"]) == 0
    zero = json.loads(capsys.readouterr().out)
    assert zero["migrations"] == [] and zero["status"] == "optimal"
    assert cli.main(["balance", "-t", SUPER, "--across-groups", "--greedy"]) != 0


def test_alike_instances_counted_as_one_shape_equal_brute_force() -> None:
    """Four alike instances on one node (one shape, counted in the model) and two tagged ones:
    the exact answer equals brute force for every K."""
    from model.balance_groups import across_data

    text = _text(
        [("ga", "pool:p", "ext,diskless"), ("gb", "pool:p", "ext,diskless"),
         ("gc", "pool:p", "ext,diskless")],
        [_node("a1", "ga", 16384, 8), _node("a2", "ga", 9216, 4), _node("b1", "gb", 6144, 4),
         _node("b2", "gb", 6144, 8), _node("c1", "gc", 9216, 4)],
        [*(_inst(f"w{k}", 2048, 2, "a1") for k in range(4)),
         _inst("t1", 1024, 1, "a2", tags="svc:x"), _inst("t2", 1024, 1, "a2", tags="svc:x")],
        "htools:iextags:svc",
    )  # fmt: skip
    state = _state(text)
    for k in (1, 2, 3, None):
        problem = AcrossProblem(state, storage_of(state), k)
        assert len(across_data(problem).movers) == 2  # the four w, the two t
        truth, _, refused = brute_force(problem)
        ans = _exact(problem)
        assert ans.status == "optimal" and ans.score == pytest.approx(truth, abs=1e-9), k
        assert check_across_groups(problem, ans.relocations).ok
    assert {"memory", "exclusion_tags"} <= refused


def test_cli_runs_the_migrations_through_luxi(capsys) -> None:
    """-X (cluster read with -L): the migrations -C prints, submitted jobset by jobset through
    the LUXI endpoint of tests/ganeti_live.py as OP_INSTANCE_MIGRATE jobs to those nodes."""
    import tempfile
    from pathlib import Path

    from ganeti_live import JobResponder, RapiAnswers

    import cli
    from model.backends.text import load_text

    data = RapiAnswers.of_cluster(load_text(Path(SUPER)))
    with tempfile.TemporaryDirectory(prefix="exl-", dir="/tmp") as folder:
        sock = Path(folder) / "master.sock"
        with JobResponder(sock, data) as responder:
            code = cli.main(["balance", f"-L{sock}", "--across-groups", "-l", "3", "-X", "-C"])
            out, err = capsys.readouterr()
    assert code == 0, err
    said = [
        line.split()[1:] for line in out.splitlines() if line.strip().startswith("gnt-instance")
    ]
    ops = [op for call in responder.jobs for job in call for op in job]
    assert len(said) == len(ops) == 3
    for words, op in zip(said, ops, strict=True):
        verb = {"migrate": "OP_INSTANCE_MIGRATE", "failover": "OP_INSTANCE_FAILOVER"}[words[0]]
        assert (op["OP_ID"], op["target_node"], op["instance_name"]) == (verb, words[3], words[4])
    assert ops[0]["comment"].startswith("balance --across-groups: 3 relocations")
    assert cli.main(["balance", "-t", SUPER, "--across-groups", "-X"]) == 1


def test_cli_options_that_do_not_apply_and_offline_nodes(capsys) -> None:
    """--fewest-moves, --compare, -G are refused with --across-groups; -O takes a node out as
    hbal's -O does (rack-b's node-b1 offline: no migration lands there, and the rack's
    capacity shrinks, so the score before changes as the checker computes it)."""
    import cli

    for extra in (["--fewest-moves"], ["--compare"], ["-G", "rack-a"]):
        assert cli.main(["balance", "-t", SUPER, "--across-groups", *extra]) == 2, extra
        assert "does not apply to --across-groups" in capsys.readouterr().err
    assert cli.main(["balance", "-t", SUPER, "--across-groups", "-O", "node-b1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["migrations"] and all(m["to"] != ["node-b1"] for m in out["migrations"])
    state = _state(open(SUPER, encoding="utf-8").read())
    from model.space import with_node_status

    off = with_node_status(state, ["node-b1"])
    problem = AcrossProblem(off, storage_of(off))
    assert out["score_before"] == pytest.approx(
        check_across_groups(problem, ()).objectives["score"]
    )
    plan = tuple(relocation(off, m["instance"], m["to"][0], None) for m in out["migrations"])
    assert check_across_groups(problem, plan).objectives["score"] == pytest.approx(
        out["score_after"]
    )
    # the same plan with node-b1 online: rack-b has a third more capacity, another score
    online = AcrossProblem(state, storage_of(state))
    assert check_across_groups(online, plan).objectives["score"] != pytest.approx(
        out["score_after"]
    )
    assert cli.main(["balance", "-t", SUPER, "--across-groups", "-O", "nosuch"]) == 2


def test_cli_without_a_pool_shared_by_two_groups(capsys) -> None:
    """A cluster whose groups share no pool: nothing to balance, said, proven, exit 0."""
    import cli

    text = _text([("ga", "pool:p", "ext,diskless"), ("gb", "pool:q", "ext,diskless")],
                 [_node("a1", "ga", 16384, 8), _node("b1", "gb", 16384, 8)],
                 [_inst("x", 2048, 1, "a1")])  # fmt: skip
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "two.data"
        path.write_text(text, encoding="utf-8")
        assert cli.main(["balance", "-t", str(path), "--across-groups"]) == 0
    out = capsys.readouterr().out
    assert "No pool is reached by two groups" in out
    assert "exact (score across groups): optimal" in out


def test_no_time_for_the_model_leaves_the_checked_greedy_start() -> None:
    """With (almost) no time the model is not built: the greedy start stands, checked, with the
    bound 0 and a note saying why; its score is never below the exact optimum."""
    from solvers.options import SolverOptions
    from solvers.strategies.balance_groups import balance_across

    problem = _super_problem(k=3)
    ans = balance_across(problem, options=SolverOptions(time_limit=1e-6))
    assert ans.status == "feasible" and ans.bound == 0.0 and ans.rounds == 0
    assert any(n.startswith("no time for the model") for n in ans.notes)
    assert ans.relocations and check_across_groups(problem, ans.relocations).ok
    assert ans.score == ans.start_score >= _exact(problem).score - 1e-12
