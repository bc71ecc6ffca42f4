"""Super-cluster operations (docs/groups.md): storage pools and peers, the relocation checker and
commands, redistribute / compress / evacuate held to an independent brute force on small super
clusters, and to the design's greedy algorithms on generated ones."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from groups_gen import GroupSpec, super_cluster

import cli
from model.backends.text import dump_text, parse_text
from model.groups import (
    COPY,
    DRBD_MOVE,
    MIGRATION,
    Relocation,
    check_relocations,
    format_commands,
    group_nodes,
    group_refusal,
    hosts,
    instances_in,
    job_commands,
    jobsets,
    move_kind,
    storage_of,
)
from model.n1 import offline_hosts
from model.state import node_states
from programs.groups import verify
from solvers.strategies import groups as S
from solvers.strategies.n1 import decide

POLICY = "128,1,1024,1,1,1|128,1,1024,1,1,1;32768,8,1048576,16,8,12"


def _text(groups: list[str], nodes: list[str], instances: list[str], policies: list[str]) -> str:
    return (
        "\n".join(groups)
        + "\n\n"
        + "\n".join(nodes)
        + "\n\n"
        + "\n".join(instances)
        + "\n\n\n"
        + f"|{POLICY}|diskless,file,sharedfile,plain,blockdev,drbd,rbd,ext|4.0|32.0\n"
        + "\n".join(policies)
        + "\n"
    )


def _group(name: str, tags: str = "", templates: str = "drbd,plain,ext,diskless") -> tuple:
    return f"{name}|uuid-{name}|preferred|{tags}|", f"{name}|{POLICY}|{templates}|4.0|32.0"


def _node(name: str, group: str, free: int, *, total: int = 16384, disk: int = 204800, off=False):
    role = "O" if off else "N"
    return f"{name}|{total}|0|{free}|{disk}|{disk}|8|{role}|uuid-{group}|1"


def _inst(name: str, mem: int, node: str, template: str = "ext", secondary: str = "", tags=""):
    disk = 10240
    return f"{name}|{mem}|{disk}|1|running|Y|{node}|{secondary}|{template}|{tags}|1"


def _state(text: str):
    return node_states(parse_text(text, "<test>"))


def two_groups(a_free=(16000, 4000, 4000), b_free=(9000, 9000), instances=None, b_tags="pool:p"):
    ga, pa = _group("ga", "pool:p")
    gb, pb = _group("gb", b_tags)
    nodes = [_node(f"a{k + 1}", "ga", f) for k, f in enumerate(a_free)]
    nodes += [_node(f"b{k + 1}", "gb", f) for k, f in enumerate(b_free)]
    insts = instances or [_inst("i1", 6000, "a1"), _inst("i2", 3000, "a1"), _inst("i3", 3000, "a1")]
    return _text([ga, gb], nodes, insts, [pa, pb])


# --- storage, peers, rules ----------------------------------------------------------------


def test_pools_from_node_group_and_instance_tags() -> None:
    ga, pa = _group("ga")
    gb, pb = _group("gb", "pool:east")
    gc, pc = _group("gc", templates="drbd,plain")
    nodes = [
        _node("a1", "ga", 8000).replace("|uuid-ga|1", "|uuid-ga|1|pool:west|N|0|1|1.0"),
        _node("b1", "gb", 8000),
        _node("c1", "gc", 8000),
    ]
    insts = [
        _inst("tagged", 1024, "a1", tags="pool:east"),
        _inst("untagged", 1024, "a1"),
        _inst("plain", 1024, "a1", "plain"),
    ]
    state = _state(_text([ga, gb, gc], nodes, insts, [pa, pb, pc]))
    st = storage_of(state)
    assert st.group_pools == {"uuid-ga": {"west"}, "uuid-gb": {"east"}, "uuid-gc": set()}
    assert st.instance_pool == {"tagged": "east", "untagged": "west"}  # group's only pool
    assert set(st.peers("uuid-ga")) == {"uuid-gb", "uuid-gc"}  # gb: lvm, gc: lvm
    assert group_refusal(state, st, "untagged", "uuid-gb") == "group gb does not reach pool west"
    assert group_refusal(state, st, "tagged", "uuid-gb") is None
    assert "does not enable ext" in group_refusal(state, st, "tagged", "uuid-gc")
    assert group_refusal(state, st, "plain", "uuid-gc") is None
    assert storage_of(state, "other:").instance_pool == {"tagged": None, "untagged": None}
    assert [move_kind(t) for t in ("drbd", "plain", "file", "ext", "diskless")] == [
        DRBD_MOVE,
        COPY,
        COPY,
        MIGRATION,
        MIGRATION,
    ]


def test_checker_lists_every_broken_rule() -> None:
    state = _state(two_groups(a_free=(16000, 9000, 9000), b_tags=""))  # gb reaches no pool
    st = storage_of(state)
    bad = [
        Relocation("i1", "b1", None, "a1", None),  # pool not reached
        Relocation("i2", "a2", None, "a1", None),  # within the group: fine
        Relocation("i3", "a3", "a2", "a1", None),  # ext with a secondary
    ]
    _, violations = check_relocations(state, st, bad)
    kinds = sorted(v.kind for v in violations)
    assert kinds == ["group", "secondary"], violations
    state = _state(two_groups())
    _, violations = check_relocations(
        state, storage_of(state), [Relocation("i1", "a2", None, "a1", None)]
    )
    assert [v.kind for v in violations] == ["memory"]  # 6000 MiB do not fit in 3000


def test_commands_follow_hbal_and_change_group() -> None:
    nodes = [_node(n, "ga", 9000) for n in ("a", "b", "c", "d")]
    ga, pa = _group("ga", "pool:p")
    insts = [
        _inst("d1", 1024, "a", "drbd", "b"),
        _inst("e1", 1024, "a"),
        _inst("p1", 1024, "a", "plain"),
        _inst("s1", 1024, "a").replace("running", "ADMIN_down"),
    ]
    state = _state(_text([ga], nodes, insts, [pa]))
    cmd = {
        (p, s): job_commands(state, Relocation("d1", p, s, "a", "b"))
        for p, s in (("b", "a"), ("a", "c"), ("b", "c"), ("c", "a"), ("c", "b"), ("c", "d"))
    }
    assert cmd["b", "a"] == ["migrate -f d1"]
    assert cmd["a", "c"] == ["replace-disks -n c d1"]
    assert cmd["b", "c"] == ["migrate -f d1", "replace-disks -n c d1"]
    assert cmd["c", "a"] == ["replace-disks -n c d1", "migrate -f d1"]
    assert cmd["c", "b"] == ["migrate -f d1", "replace-disks -n c d1", "migrate -f d1"]
    assert cmd["c", "d"] == ["replace-disks -n c d1", "migrate -f d1", "replace-disks -n d d1"]
    assert job_commands(state, Relocation("e1", "c", None, "a", None)) == ["migrate -f -n c e1"]
    assert job_commands(state, Relocation("s1", "c", None, "a", None)) == ["failover -f -n c s1"]
    assert job_commands(state, Relocation("p1", "c", None, "a", None)) == ["move -f -n c p1"]
    relocs = [Relocation("e1", "c", None, "a", None), Relocation("s1", "d", None, "b", None)]
    sets = jobsets(state, relocs)
    assert [len(js) for js in sets] == [2]  # disjoint nodes: one jobset
    text = format_commands(state, sets)
    assert text.splitlines()[:4] == ["", "echo jobset 1, 2 jobs", "  echo job 1/1", "  check"]


# --- brute force ---------------------------------------------------------------------------


def _destinations(state, name: str, groups: list[str], exclude: set[str]) -> list[tuple]:
    """Every (primary, secondary) an instance could take in `groups`: no capacity screening,
    the checker judges."""
    d = state.demands[name]
    out = []
    for g in groups:
        nodes = [n for n in group_nodes(state, g) if n not in exclude]
        if d.has_secondary:
            out += [(p, s) for p in nodes for s in nodes if p != s]
        else:
            out += [(p, None) for p in nodes]
    return out


def _healthy(state, groups, required, evacuable_before=None) -> bool:
    for n in required:
        if evacuable_before is not None and n not in evacuable_before:
            continue
        if not decide(state, n).evacuable:
            return False
    return not any(offline_hosts(state, group_nodes(state, g)) for g in groups)


def _plans(state, movers, choices, must=(), max_moves=None):
    """Every plan: each mover stays (unless it must leave) or takes one of its choices;
    smallest first."""
    forced = set(must)
    free = [m for m in movers if m not in forced]
    top = len(movers) if max_moves is None else max_moves
    for k in range(len(forced), top + 1):
        for extra in itertools.combinations(free, k - len(forced)):
            moving = [m for m in movers if m in forced or m in extra]
            for picks in itertools.product(*(choices[m] for m in moving)):
                yield [
                    Relocation(m, p, s, *state.locations[m])
                    for m, (p, s) in zip(moving, picks, strict=True)
                ]


def _brute_redistribute(state) -> int | None:
    storage = storage_of(state)
    groups = [g.uuid for g in state.cluster.groups]
    bad = [g for g in groups if not _healthy(state, [g], group_nodes(state, g))]
    good = [g for g in groups if g not in bad]
    if not bad:
        return 0
    movers = [n for g in bad for n in instances_in(state, g)]
    offline = {n for n, st in state.nodes.items() if st.offline}
    must = [n for n in movers if set(state.locations[n]) & offline]
    allowed = {g: [p for p in storage.peers(g) if p in good] for g in bad}
    choices = {
        m: _destinations(state, m, allowed[state.nodes[state.locations[m][0]].group_uuid], set())
        for m in movers
    }
    involved = bad + sorted({p for v in allowed.values() for p in v})
    required = [n for g in involved for n in group_nodes(state, g)]
    for plan in _plans(state, movers, choices, must):
        after, broken = check_relocations(state, storage, plan, allowed_groups=allowed)
        if not broken and _healthy(after, involved, required):
            return len(plan)
    return None


def _tiny(rng: random.Random) -> str:
    """Two or three groups of 2-3 nodes, a few ext / drbd / plain instances, one group tight."""
    n_groups = rng.choice((2, 2, 3))
    specs, rows, nodes, insts = [], [], [], []
    for g in range(n_groups):
        name = f"g{g}"
        templates = rng.choice(("drbd,plain,ext,diskless", "ext,diskless", "drbd,plain,diskless"))
        tags = "pool:p" if "ext" in templates else ""
        grp, pol = _group(name, tags, templates)
        specs.append(grp)
        rows.append(pol)
        for k in range(rng.choice((2, 3))):
            nodes.append(_node(f"{name}n{k}", name, rng.choice((2000, 4000, 7000, 12000))))
    k = 0
    for g in range(n_groups):
        here = [n.split("|")[0] for n in nodes if f"|uuid-g{g}|" in n]
        templates = rows[g].split("|")[-3].split(",")
        for _ in range(rng.choice((1, 2))):
            template = rng.choice([t for t in templates if t != "diskless"])
            p = rng.choice(here)
            s = rng.choice([n for n in here if n != p]) if template == "drbd" else ""
            insts.append(_inst(f"i{k}", rng.choice((1024, 2048, 3072)), p, template, s))
            k += 1
    return _text(specs, nodes, insts, rows)


# Seeds by what the brute force finds (of the first 200, most are already healthy or
# infeasible): most need moves, so the optimality claim is met on each of those.
REDISTRIBUTE_SEEDS = {
    **dict.fromkeys((2, 26, 27, 29, 32, 53, 58, 62, 64, 69, 88, 97, 100, 104), "moves"),
    **dict.fromkeys((140, 145, 197), "moves"),  # the brute force's optimum is 2 there
    **dict.fromkeys((1, 5, 8, 13), "infeasible"),
    **dict.fromkeys((0, 3, 4, 6), "healthy"),
}


@pytest.mark.parametrize("seed", sorted(REDISTRIBUTE_SEEDS))
def test_redistribute_equals_brute_force(seed: int) -> None:
    state = _state(_tiny(random.Random(seed)))
    storage = storage_of(state)
    result = S.redistribute(state, storage)
    truth = _brute_redistribute(state)
    kind = "infeasible" if truth is None else "healthy" if truth == 0 else "moves"
    assert kind == REDISTRIBUTE_SEEDS[seed], (seed, truth)  # the case still exercises its claim
    outcome = result.outcome
    if outcome is None:
        assert (truth == 0) == (result.reason.startswith("every group")), (seed, result.reason)
        if truth != 0:
            assert truth is None, (seed, result.reason)
        return
    verify(state, storage, outcome, "hard")
    if truth is None:
        assert outcome.status == "infeasible", (seed, outcome.status)
    else:
        assert outcome.status == "optimal" and outcome.objective == (truth,), (seed, truth)


def _brute_compress(state, group: str, evacuable: set[str]) -> bool:
    storage = storage_of(state)
    peers = [
        p
        for p in storage.peers(group)
        if _healthy(state, [p], group_nodes(state, p))
        and state.cluster.group(p).alloc_policy != "unallocable"
    ]
    movers = hosts(state, group_nodes(state, group))
    choices = {m: _destinations(state, m, peers, set()) for m in movers}
    required = [n for p in peers for n in group_nodes(state, p)]
    for plan in _plans(state, movers, choices, movers):
        after, broken = check_relocations(state, storage, plan)
        if not broken and _healthy(after, [], required, evacuable):
            return True
    return False


@pytest.mark.parametrize("seed", range(25))
def test_compress_equals_brute_force(seed: int) -> None:
    state = _state(_tiny(random.Random(100 + seed)))
    storage = storage_of(state)
    result = S.compress(state, storage)
    evacuable = result.health.evacuable()
    for g, outcome in result.groups.items():
        if isinstance(outcome, str):
            assert "peer group" in outcome or "nowhere" in outcome
            if "nowhere" in outcome:
                assert not _brute_compress(state, g, evacuable), (seed, g)
            continue
        verify(state, storage, outcome, "hard")
        truth = _brute_compress(state, g, evacuable)
        assert (outcome.status == "optimal") == truth, (seed, g, outcome.status, outcome.reason)


@pytest.mark.parametrize("seed", range(15))
def test_evacuate_equals_brute_force(seed: int) -> None:
    rng = random.Random(200 + seed)
    state = _state(_tiny(rng))
    storage = storage_of(state)
    used = sorted({n for p, s in state.locations.values() for n in (p, s) if n})
    gone = [rng.choice(used)]
    result = S.evacuate(state, storage, gone)
    outcome = result.outcome
    verify(state, storage, outcome, "hard")
    h = result.health
    evacuable = h.evacuable()
    movers = hosts(state, gone)
    choices = {}
    for m in movers:
        own = state.nodes[state.locations[m][0]].group_uuid
        remote = [
            p
            for p in storage.peers(own)
            if _healthy(state, [p], group_nodes(state, p))
            and state.cluster.group(p).alloc_policy != "unallocable"
        ]
        choices[m] = _destinations(state, m, [own, *remote], set(gone))
    groups = {state.nodes[n].group_uuid for n in state.nodes}
    required = [n for g in groups for n in group_nodes(state, g) if n not in gone]
    best = None
    for plan in _plans(state, movers, choices):
        after, broken = check_relocations(state, storage, plan)
        if broken or not _healthy(after, [], required, evacuable):
            continue
        cross = sum(
            1
            for r in plan
            if state.nodes[r.primary].group_uuid != state.nodes[r.old_primary].group_uuid
        )
        key = (len(plan), -cross)
        best = key if best is None or key > best else best
    assert outcome.status == "optimal"
    assert (outcome.objective[0], -outcome.objective[1]) == best, (seed, outcome.objective, best)


# --- generated super clusters: exact beside the design's greedy ------------------------------


def _generated(seed: int):
    rng = random.Random(seed)
    kinds = ("ext", "ext", "mixed", "lvm", "rbd", "drbd")
    n = rng.randrange(2, 7)
    specs = tuple(
        GroupSpec(
            rng.randrange(3, 7),
            rng.choice(kinds),
            "a",
            rng.choice((0.35, 0.55, 0.7, 0.9)),
            offline=1 if rng.random() < 0.25 else 0,
        )
        for _ in range(n)
    )
    text = dump_text(super_cluster(seed, specs))
    return node_states(parse_text(text, f"seed {seed}"))


def _exact_and_greedy(seeds) -> tuple[int, int]:  # noqa: ANN001
    """Over seeded super clusters (2-6 groups, mixed storage): every exact plan passes the
    checks, a greedy plan that is good by exact standards is never better than exact, and
    the clusters where exact finds plans the greedy misses are counted."""
    from model import groups_greedy

    better_redistribution = better_compression = 0
    for seed in seeds:
        state = _generated(seed)
        storage = storage_of(state)
        h = S.health(state, storage)
        groups = list(h.groups)
        everyone = [n for g in groups for n in group_nodes(state, g)]
        r = S.redistribute(state, storage, known=h)
        g = groups_greedy.redistribute(state, storage)
        if r.outcome is not None:
            verify(state, storage, r.outcome, "hard")
        repaired = bool(g.groups) and all(v == "repaired" for v in g.groups.values())
        greedy_ok = repaired and not S.judge(state, storage, g.relocations, everyone, groups)
        exact_ok = r.outcome is not None and r.outcome.status == "optimal"
        if greedy_ok:
            assert exact_ok and r.outcome.objective[0] <= g.moves, seed
        if exact_ok and (not greedy_ok or r.outcome.objective[0] < g.moves):
            better_redistribution += 1
        c = S.compress(state, storage, known=h)
        gc = groups_greedy.compress(state, storage)
        evacuable = h.evacuable()
        for grp, outcome in c.groups.items():
            exact_yes = not isinstance(outcome, str) and outcome.status == "optimal"
            if not isinstance(outcome, str):
                verify(state, storage, outcome, "hard")
            greedy_yes = grp in gc and gc[grp][1] is None
            if greedy_yes:
                peers = S.receiving_peers(state, h, grp)
                required = [n for p in peers for n in group_nodes(state, p) if n in evacuable]
                greedy_yes = not S.judge(state, storage, gc[grp][0], required)
            if greedy_yes:
                assert exact_yes, (seed, grp)
            if exact_yes and not greedy_yes and instances_in(state, grp):
                better_compression += 1
    return better_redistribution, better_compression


def test_exact_finds_plans_the_design_greedy_misses() -> None:
    redistribution, compression = _exact_and_greedy((0, 1, 7))
    assert redistribution >= 1 and compression >= 1


@pytest.mark.slow
def test_exact_never_behind_the_design_greedy_on_many_super_clusters() -> None:
    redistribution, compression = _exact_and_greedy(range(40))
    assert redistribution >= 3 and compression >= 1


# --- the command line --------------------------------------------------------------------------


def test_cli_json_and_commands(tmp_path, capsys) -> None:
    path = tmp_path / "two.data"
    path.write_text(two_groups())
    assert cli.main(["redistribute", "-t", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "optimal" and out["moves"] == 1
    assert _brute_redistribute(_state(two_groups())) == 1  # the count, by every plan tried
    assert out["relocations"][0]["to_group"] == "gb" and out["greedy"]["moves"] >= 1
    roomy = tmp_path / "roomy.data"
    roomy.write_text(two_groups(b_free=(16000, 16000)))
    assert cli.main(["compress", "-t", str(roomy), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    by_name = {g["name"]: g for g in out["groups"]}
    assert by_name["ga"]["evacuable"] is True and len(by_name["ga"]["plan"]) == 3  # all of ga's
    state = _state(roomy.read_text())
    assert _brute_compress(
        state, "uuid-ga", S.compress(state, storage_of(state)).health.evacuable()
    )
    assert out["best"] in by_name
    assert cli.main(["evacuate", "-t", str(path), "--nodes", "a1", "-C"]) == 0
    text = capsys.readouterr().out
    assert "3 of 3 instance(s)" in text and "gnt-instance migrate -f -n" in text
    assert cli.main(["evacuate", "-t", str(path), "--nodes", "nope"]) == 1
    assert "no such node" in capsys.readouterr().err
    assert cli.main(["compress", "-t", str(tmp_path / "missing.data")]) == 1
    assert "missing.data" in capsys.readouterr().err


# --- N+1 beside hcheck on Ganeti's snapshots ------------------------------------------------

N1_FILES = (
    "shared-n1-failure.data",
    "shared-n1-restriction.data",
    "n1-failure.data",
    "plain-n1-restriction.data",
    "hspace-groups-one.data",
    "hspace-groups-two.data",
    "hspace-bad-group.data",
    "hspace-tiered-mixed.data",
    "hspace-existing.data",
    "hroller-nodegroups.data",
)


def _n1_compare(path, capsys) -> dict:
    assert cli.main(["n1", "-t", str(path), "--compare", "--offline-targets", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _check_agreement(state, out) -> int:
    """Per group, htools' greedy walk (the port) counts what hcheck counts; every node greedy
    gives up on while exact has a plan is confirmed by brute force; exact never gives up
    where greedy finds a plan. Returns the disagreements seen."""
    from test_n1 import _brute_force

    disagreements = 0
    for g in out["groups"]:
        greedy_bad = [n for n in g["nodes"] if not n["greedy_evacuable"]]
        assert len(greedy_bad) == out["hcheck"][g["name"]], g["name"]
        for n in g["nodes"]:
            if n["greedy_evacuable"]:
                assert n["evacuable"] is True, n["name"]
            elif n["evacuable"]:
                disagreements += 1
                assert n["name"] in g["greedy_misses"]
                assert _brute_force(state, n["name"]) if len(state.nodes) <= 6 else True
            else:  # both say no: the exact proof confirms hcheck
                assert n["reason"]
    return disagreements


@pytest.mark.reference
@pytest.mark.parametrize("name", N1_FILES)
def test_n1_compare_agrees_with_hcheck(ganeti, capsys, name: str) -> None:
    from model.backends.text import load_text

    path = ganeti.data_dir / name
    out = _n1_compare(path, capsys)
    assert _check_agreement(node_states(load_text(path)), out) == 0


@pytest.mark.reference
def test_n1_where_hcheck_crashes(ganeti, capsys) -> None:
    import subprocess

    path = ganeti.data_dir / "hbal-split-insts.data"
    proc = subprocess.run(["hcheck", "-t", str(path), "--no-simulation"], capture_output=True)
    assert proc.returncode != 0
    assert cli.main(["n1", "-t", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert all(n["evacuable"] is not None for g in out["groups"] for n in g["nodes"])


@pytest.mark.reference
def test_n1_disagreements_with_hcheck_are_exact(htools, tmp_path, capsys) -> None:
    """On small random groups, hcheck's count equals the port's, and every node hcheck's
    walk gives up on while exalloc has a plan is confirmed by brute force."""
    from test_n1 import GREEDY_N1, _random_group

    disagreements = 0
    texts = [GREEDY_N1] + [_random_group(random.Random(seed)) for seed in range(30)]
    for k, text in enumerate(texts):
        path = tmp_path / f"g{k}.data"
        path.write_text(text)
        out = _n1_compare(path, capsys)
        disagreements += _check_agreement(_state(text), out)
    assert disagreements >= 1  # the docs/n1.md example at least


@pytest.mark.reference
def test_compress_beside_hail_change_group(htools, tmp_path, capsys) -> None:
    """hail's change-group checks the N+1 of the whole cluster: an unhealthy group blocks it,
    exactly where exalloc empties that group into its peer."""
    path = tmp_path / "roomy.data"
    path.write_text(two_groups(b_free=(16000, 16000)))
    assert cli.main(["compress", "-t", str(path), "--compare", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    ga = next(g for g in out["groups"] if g["name"] == "ga")
    assert ga["evacuable"] is True and ga["hail"]["evacuable"] is False
    assert "FailN1" in ga["hail"]["failed"][0]["reason"]
