"""Joint multi-allocate and node-evacuate on normal groups (solvers/strategies/joint.py,
docs/placement.md): beside the real hail, judged by the independent checker."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import htools_gen as gen
import joint_plans
import pytest
from conftest import sampled

from model.backends.iallocator import load_request, new_instance, parse_request
from model.check import Move, check_allocation, check_moves
from model.htools.answer import HailAnswer
from model.htools.evacuate import nodes_to_evacuate, try_node_evac
from model.htools.requests import EVAC_MODES
from model.resources import check_migration
from model.score import cluster_score
from model.state import ClusterState, node_states
from solvers.aside import Aside, Flag, can_fork
from solvers.options import SolverOptions
from solvers.strategies import joint as joint_strategy
from solvers.strategies import joint_change_group, joint_evacuate, joint_moves, joint_search
from solvers.strategies import placement as placement_strategy
from solvers.strategies.iallocator import IAllocatorOptions, answer, one_by_one_answer
from solvers.strategies.n1 import check_cluster


def real_hail(htools, path: Path) -> dict:
    proc = subprocess.run([str(htools.hail), str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _reply(ans: HailAnswer) -> dict:
    """hail's response line as read, with the solver's note the answer carries beside it."""
    return {**json.loads(ans.response), "note": ans.note}


def _nodes(entry: list) -> tuple[str, str | None]:
    nodes = entry[-1]
    return nodes[0], nodes[1] if len(nodes) > 1 else None


# --- node-evacuate ------------------------------------------------------------------------


def _node(free_mib: int, total_mib: int) -> dict:
    return {
        "drained": False,
        "offline": False,
        "group": "uuid-group1",
        "ndparams": {"exclusive_storage": False, "spindle_count": 1},
        "vm_capable": True,
        "tags": [],
        "total_memory": total_mib,
        "reserved_memory": 0,
        "free_memory": free_mib,
        "total_disk": 102400,
        "free_disk": 102400,
        "total_cpus": 16,
        "reserved_cpus": 1,
        "free_spindles": 0,
        "master_candidate": True,
    }


def _ext(memory_mib: int) -> dict:
    return {
        "disk_space_total": 1024,
        "disk_template": "ext",
        "disks": [{"mode": "rw", "size": 1024}],
        "memory": memory_mib,
        "nics": [{"mac": "aa:00:00:00:00:01", "ip": None, "mode": "bridged", "link": "br0"}],
        "nodes": ["nodeF"],
        "spindle_use": 1,
        "tags": [],
        "vcpus": 1,
    }


def evacuation_request(mode: str) -> str:
    """docs/hail.md's greedy example as a node evacuation: nodeF's five ext instances
    (3072, 3072, 2048, 2048, 2048 MiB) fit on nodeA and nodeB (6,400 MiB each) only as
    {3072, 3072} and {2048, 2048, 2048}; hail, one at a time by score, alternates and strands
    the last."""
    data = gen.for_seed(3)  # a generated request for the policies and cluster fields
    data["cluster_tags"] = []
    data["nodes"] = {
        "nodeA": _node(6400, 6400),
        "nodeB": _node(6400, 6400),
        "nodeF": _node(4096, 16384),
    }
    sizes = {"big1": 3072, "big2": 3072, "small1": 2048, "small2": 2048, "small3": 2048}
    data["instances"] = {name: _ext(mib) for name, mib in sizes.items()}
    data["request"] = {"type": "node-evacuate", "instances": list(sizes), "evac_mode": mode}
    return gen.dumps(data)


def _moves_ok(state: ClusterState, moved: list) -> None:
    """The independent checker accepts the moves in the answer's order."""
    moves = [Move(name, *_nodes(entry)) for entry in moved for name in [entry[0]]]
    report = check_moves(state, moves, strict=True, evacuation=True)
    assert not report.violations, report.violations


@pytest.mark.parametrize("mode", ["primary-only", "all"])
def test_node_evacuate_moves_what_hail_strands(htools, tmp_path, mode):
    path = tmp_path / "evacuate.json"
    path.write_text(evacuation_request(mode))
    hail = real_hail(htools, path)
    ours = _reply(answer(load_request(path), IAllocatorOptions()))
    state = node_states(load_request(path).cluster)
    assert hail["success"] and len(hail["result"][0]) == 4 and len(hail["result"][1]) == 1
    assert ours["success"] and len(ours["result"][0]) == 5 and ours["result"][1] == []
    assert "optimal" in ours["note"] and "joint plan" in ours["note"]
    # one job per moved instance, each a migration to its new node
    jobs = ours["result"][2]
    assert [job[0]["instance_name"] for job in jobs] == [m[0] for m in ours["result"][0]]
    assert all(
        job[0]["target_node"] == m[2][0] for job, m in zip(jobs, ours["result"][0], strict=True)
    )
    _moves_ok(state, hail["result"][0])
    _moves_ok(state, ours["result"][0])
    # the joint plan is the only packing: the two big ones share a node
    where = {m[0]: m[2][0] for m in ours["result"][0]}
    assert where["big1"] == where["big2"] != where["small1"] == where["small2"] == where["small3"]


def test_node_evacuate_greedy_mode_is_hail(htools, tmp_path):
    """`--capacity-checks greedy` stays hail's answer, byte for byte."""
    path = tmp_path / "evacuate.json"
    path.write_text(evacuation_request("primary-only"))
    greedy = answer(load_request(path), IAllocatorOptions(capacity_checks="greedy"))
    assert json.loads(greedy.response) == real_hail(htools, path)


# --- multi-allocate -----------------------------------------------------------------------

#: a generated multi-allocate (tests/htools_gen.py) where hail places 4 of 5: its one-by-one
#: choices leave no room for the last drbd instance, a joint plan places all five
MULTI_SEED = 1054


def test_multi_allocate_places_what_hail_leaves(htools, tmp_path):
    path = tmp_path / "multi.json"
    path.write_text(gen.dumps(gen.for_seed(MULTI_SEED)))
    inp = load_request(path)
    hail = real_hail(htools, path)
    ours = _reply(answer(inp, IAllocatorOptions()))
    wanted = len(inp.request.instances)
    assert hail["success"] and 0 < len(hail["result"][0]) < wanted
    assert ours["success"] and len(ours["result"][0]) == wanted and ours["result"][1] == []
    assert "optimal" in ours["note"] and "joint plan" in ours["note"]
    state = node_states(inp.cluster)
    records = {r.name: new_instance(r) for r in inp.request.instances}
    after = state
    for result in (hail, ours):
        placements = [
            (records[name], *_nodes([name, nodes])) for name, nodes in result["result"][0]
        ]
        report = check_allocation(state, placements)
        assert not report.violations, report.violations
    for name, nodes in ours["result"][0]:
        after = after.placed(state.demand(records[name]), *_nodes([name, nodes]))
    # the group the batch landed in stays N+1 redundant by the exact check
    assert check_cluster(after).redundant is True


# --- never worse than one by one ------------------------------------------------------------


def _acted(response: dict) -> int:
    return len(response["result"][0]) if response["success"] else 0


def _score_after(text: str, response: dict) -> float:
    """Recomputed from the request alone: the cluster after the answer's placements or moves,
    scored over the groups they touch."""
    inp = parse_request(text)
    state = node_states(inp.cluster)
    kind = inp.request.type
    after = state
    if kind == "multi-allocate":
        records = {r.name: new_instance(r) for r in inp.request.instances}
        for name, nodes in response["result"][0]:
            after = after.placed(state.demand(records[name]), *_nodes([name, nodes]))
        touched = {after.nodes[nodes[0]].group_uuid for _, nodes in response["result"][0]}
    else:
        for name, _group, nodes in response["result"][0]:
            after = after.relocated(name, *_nodes([name, _group, nodes]))
        touched = {after.nodes[nodes[0]].group_uuid for _, _, nodes in response["result"][0]}
    return sum(cluster_score(after, group=g) for g in sorted(touched))


def _gap(response: dict) -> float:
    """The relative gap an answer reports (0 when it reports none)."""
    found = re.search(r"^\w+: [a-z ]+, gap ([0-9.e+-]+)", response["note"])
    return float(found.group(1)) if found else 0.0


def _seeds(kind: str, count: int) -> list[int]:
    out, seed = [], 0
    while len(out) < count:
        if gen.for_seed(seed)["request"]["type"] == kind:
            out.append(seed)
        seed += 1
    return out


@pytest.mark.parametrize(
    "seed",
    sampled(_seeds("multi-allocate", 12), every=4)
    + sampled(_seeds("node-evacuate", 12), every=4)
    + sampled(_seeds("change-group", 8), every=4),
    ids=lambda s: f"seed{s}",
)
def test_joint_never_worse_than_one_by_one(htools, tmp_path, seed):
    """Same or more instances than htools' one-by-one walk (exalloc's port, with the same
    exact N+1 check) and than the installed hail itself; when as many, a score no greater
    (each recomputed from the request)."""
    text = gen.dumps(gen.for_seed(seed))
    options = IAllocatorOptions(solver=SolverOptions(time_limit=3.0))
    one = json.loads(one_by_one_answer(parse_request(text), options).response)
    ans = answer(parse_request(text), options)
    joint = json.loads(ans.response)
    path = tmp_path / "request.json"
    path.write_text(text)
    # the installed hail's plan bounds a proven joint plan (an unproven one is held to the
    # port's walk, whose N+1 check is exact where hail's is not; on these seeds, run here, the
    # unproven plans were no worse than hail's either)
    proven = all(run.status == "optimal" for run in ans.runs)
    for other in (one, real_hail(htools, path)) if proven else (one,):
        assert _acted(joint) >= _acted(other)
        if _acted(joint) == _acted(other) and _acted(other):
            assert _score_after(text, joint) <= _score_after(text, other) + 1e-9


def test_joint_model_out_of_time_before_any_plan_claims_nothing():
    """Seed 199's multi-allocate: the exact N+1 check refuses every plan at the stages'
    optimum, and with almost no time the stages cannot be solved again. hail's plan stands,
    and the run says it ran out of time without a bound. Until 2026-11-27 it claimed
    'optimal' with no plan, and its note (a score of None) crashed the request."""
    text = gen.dumps(gen.for_seed(199))
    options = IAllocatorOptions(solver=SolverOptions(time_limit=1e-6))
    one = _reply(one_by_one_answer(parse_request(text), options))
    ans = answer(parse_request(text), options)
    joint = _reply(ans)
    assert joint["result"] == one["result"] and _acted(one) == 2
    # since 2026-12-02 the work before the model stops once the time is gone (issue 40):
    # no model is run, and the note says so (since issue 40's last overrun, before the
    # joint model's preparation: the time left is shorter than its build)
    assert [(run.status, run.unbounded) for run in ans.runs] == [
        ("feasible", "no bound: no time left to build the joint model")
    ]
    assert "hail's walk placed 2 of 4; bound: at most 4 placed; no joint model" in joint["note"]
    enough = answer(parse_request(text), IAllocatorOptions())  # with time: solved again
    assert [run.status for run in enough.runs] == ["optimal"]


def test_no_time_to_build_the_model_answers_the_start_at_once():
    """A node evacuation whose time is up before its joint model could give a bound (60
    nodes, 10 drbd and shared-storage instances: about 1,200 placement variables) answers the
    start improved by the search, every instance moved and checked, status feasible with no
    bound and the reason, without building the model. Until 2026-11-27 the model was built
    and copied into HiGHS after the deadline: `--time-limit 1` on a 200-node evacuation of 40
    answered in 4.0-4.4 s, now in about 2 s with a better plan. With time left (10 s: 3 s
    were too few on a loaded machine) it is built."""
    text = gen.dumps(gen.busiest_evacuation(0, 60, 10))
    out_of_time = answer(
        parse_request(text), IAllocatorOptions(solver=SolverOptions(time_limit=1e-6))
    )
    reply = _reply(out_of_time)
    assert "10 were moved" in reply["info"]
    assert "feasible, no bound: no time left to build the joint model;" in reply["note"]
    assert [(run.status, run.build_s) for run in out_of_time.runs] == [("feasible", 0.0)]
    in_time = answer(parse_request(text), IAllocatorOptions(solver=SolverOptions(time_limit=10)))
    assert in_time.runs[0].build_s > 0
    assert "no time left" not in _reply(in_time)["note"]


def test_search_beside_the_model_starts_from_the_narrow_walk(monkeypatch, tmp_path):
    """When hail's walk would not end within half the time (here made to look slow), the
    iterated search runs beside the model from the narrow walk's plan, in a forked child, and
    the answer is never worse than what it found: scored from the request alone, at most every
    plan the search passed (the child records them)."""
    if not can_fork():
        pytest.skip("no fork here")
    record = tmp_path / "searched.json"
    original = joint_search.search_groups

    def recording(plan, state1, names, groups, deadline, enough, seed=0):  # noqa: ANN001, ANN202
        out = original(plan, state1, names, groups, deadline, enough, seed)
        judge = joint_moves._moves_judge
        scores = [judge(state1, names, {uuid})(found)[0] for uuid, found in out.items()]
        record.write_text(json.dumps({"start": len(plan), "seed": seed, "scores": scores}))
        return out

    monkeypatch.setattr(joint_search, "search_groups", recording)
    monkeypatch.setattr(joint_evacuate, "SECONDS_PER_TRIAL", 1.0)
    text = gen.dumps(gen.busiest_evacuation(0, 60, 10))
    ans = answer(parse_request(text), IAllocatorOptions(solver=SolverOptions(time_limit=4.0)))
    response = _reply(ans)
    seen = json.loads(record.read_text())
    assert (seen["start"], seen["seed"], _acted(response)) == (10, 1, 10)
    assert all(_score_after(text, response) <= score + 1e-9 for score in seen["scores"])


def test_search_beside_the_model_from_the_narrow_walk_when_hails_walk_is_cut(monkeypatch, tmp_path):
    """hail's walk beside the model, cut at half the time (its time is only estimated; here
    every walk with a deadline is cut): the search on that core then starts from the narrow
    walk's plan, the model's start, and the answer is never worse than what it found. Until
    2026-11-27 the child failed on the missing walk and that core idled: at 16-20 s limits
    the 200-node evacuations of docs/placement.md answered worse plans than at 12 s."""
    if not can_fork():
        pytest.skip("no fork here")
    record = tmp_path / "searched.json"
    original_search = joint_search.search_groups
    original_walk = joint_evacuate.try_node_evac

    def recording(plan, state1, names, groups, deadline, enough, seed=0):  # noqa: ANN001, ANN202
        out = original_search(plan, state1, names, groups, deadline, enough, seed)
        judge = joint_moves._moves_judge
        scores = [judge(state1, names, {uuid})(found)[0] for uuid, found in out.items()]
        record.write_text(json.dumps({"start": plan, "seed": seed, "scores": scores}))
        return out

    def cut(state, mode, names, *, deadline=None, **kw):  # noqa: ANN001, ANN202
        return None if deadline is not None else original_walk(state, mode, names, **kw)

    monkeypatch.setattr(joint_search, "search_groups", recording)
    monkeypatch.setattr(joint_evacuate, "try_node_evac", cut)
    monkeypatch.setattr(joint_search, "walk_aside", lambda *_: True)
    text = gen.dumps(gen.busiest_evacuation(0, 60, 10))
    inp = parse_request(text)
    ans = answer(inp, IAllocatorOptions(solver=SolverOptions(time_limit=4.0)))
    response = _reply(ans)
    seen = json.loads(record.read_text())
    state = node_states(inp.cluster)
    moving = list(inp.request.instances)
    avail_of = {
        n: [
            m
            for m, st in state.nodes.items()
            if st.group_uuid == state.nodes[state.locations[n][0]].group_uuid
            and m not in nodes_to_evacuate(state, "all", moving)
        ]
        for n in moving
    }
    narrow = joint_search.narrow_walk(state, "all", moving, avail_of)
    assert {n: tuple(v) for n, v in seen["start"].items()} == narrow
    assert (seen["seed"], _acted(response)) == (1, 10)
    assert "hail's walk does not end within half the time" in response["note"]
    assert all(_score_after(text, response) <= score + 1e-9 for score in seen["scores"])


# --- hail's walk beside the model ------------------------------------------------------------


@pytest.mark.aside_failure
def test_aside_returns_the_value_or_none():
    done = Aside(sorted, [3, 1, 2])
    assert done.result() == [1, 2, 3] and done.failure is None
    failed = Aside(int, "not a number")
    assert failed.result() is None  # the child failed: no answer, and why
    assert failed.failure == "ValueError: invalid literal for int() with base 10: 'not a number'"
    killed = Aside(os._exit, 3)  # no answer and nothing said: the status
    assert killed.result() is None and killed.failure == "the process ended with status 768"
    Aside(time.sleep, 30).cancel()  # stopped and reaped at once, not waited for


@pytest.mark.aside_failure
def test_a_failed_search_beside_the_model_is_said(monkeypatch):
    """A search beside the model that raises (a bug) leaves the model's answer standing,
    checked, and the answer says that it failed and why. Until 2026-11-27 such a failure
    was silent: a cut walk made the child fail for a session unseen (docs/placement.md)."""
    if not can_fork():
        pytest.skip("no fork here")

    def broken(*_args, **_kw):  # noqa: ANN002, ANN003, ANN202
        raise RuntimeError("broken on purpose")

    monkeypatch.setattr(joint_search, "search_groups", broken)
    monkeypatch.setattr(joint_evacuate, "SECONDS_PER_TRIAL", 1.0)  # the search from the narrow walk
    text = gen.dumps(gen.busiest_evacuation(0, 60, 10))
    ans = answer(parse_request(text), IAllocatorOptions(solver=SolverOptions(time_limit=4.0)))
    response = _reply(ans)
    assert _acted(response) == 10
    assert response["note"].endswith(
        "; the search beside the model failed (RuntimeError: broken on purpose)"
    )


def test_a_flag_set_by_the_parent_reaches_the_child():
    flag = Flag()

    def wait() -> bool:
        end = time.monotonic() + 20
        while not flag() and time.monotonic() < end:
            time.sleep(0.01)
        return flag()

    aside = Aside(wait)
    flag.set()
    assert aside.result() is True


@pytest.mark.parametrize("seed", _seeds("node-evacuate", 6), ids=lambda s: f"seed{s}")
def test_walk_aside_is_the_walk(seed):
    """hail's walk in a forked child gives the walk's own answer."""
    inp = parse_request(gen.dumps(gen.for_seed(seed)))
    state = node_states(inp.cluster)
    mode = EVAC_MODES[inp.request.evac_mode]
    names = list(inp.request.instances)
    assert Aside(try_node_evac, state, mode, names).result() == try_node_evac(state, mode, names)


@pytest.mark.parametrize(
    "seed", sampled(_seeds("node-evacuate", 8), every=4), ids=lambda s: f"seed{s}"
)
def test_node_evacuate_with_the_walk_aside(seed, monkeypatch):
    """With hail's walk beside the model (the model starting from the narrow walk, hail's plan
    offered afterwards) the answer moves as many instances, at the same score (within the gaps
    the two answers report: HiGHS's own tolerance leaves 'optimal' plans some 1e-7 apart), and
    names the same one-by-one plan as with the walk before the model."""
    text = gen.dumps(gen.for_seed(seed))
    options = IAllocatorOptions(solver=SolverOptions(time_limit=10.0))
    monkeypatch.setattr(joint_search, "walk_aside", lambda *_: False)
    before = _reply(answer(parse_request(text), options))
    monkeypatch.setattr(joint_search, "walk_aside", lambda *_: True)
    aside = _reply(answer(parse_request(text), options))
    assert _acted(aside) == _acted(before)
    if _acted(before):
        score = _score_after(text, before)
        gap = max(_gap(before), _gap(aside))
        assert _score_after(text, aside) == pytest.approx(score, abs=gap * abs(score) + 1e-9)
        one = re.search(r"one by one [^;\]]*", before["note"])
        assert one is None or one.group(0) in aside["note"]


def test_a_proven_evacuation_does_not_wait_for_the_search_beside(monkeypatch):
    """With the walk beside the model, the search from hail's plan runs until the model's
    deadline, unless every group's plan is proven: then the answer comes at once (a 600 s
    bound; a request whose model is proven in well under a second)."""
    seed = _seeds("node-evacuate", 4)[3]  # hail moves all three, the model proves its plan
    text = gen.dumps(gen.for_seed(seed))
    monkeypatch.setattr(joint_search, "walk_aside", lambda *_: True)
    began = time.monotonic()
    options = IAllocatorOptions(solver=SolverOptions(time_limit=600))
    response = answer(parse_request(text), options)
    assert "optimal" in _reply(response)["note"]
    assert time.monotonic() - began < 60  # not the 600 s deadline, with room for load


def _evacuation(
    seed: int, mode: str | None = None, time_limit_s: float = 20
) -> tuple[str, ClusterState, dict]:
    """Generated node-evacuation `seed` (in `mode` when given): its text, its cluster and
    exalloc's answer within `time_limit_s`."""
    data = gen.for_seed(seed)
    assert data["request"]["type"] == "node-evacuate"
    assert mode is None or data["request"]["evac_mode"] == mode
    text = gen.dumps(data)
    inp = parse_request(text)
    options = IAllocatorOptions(solver=SolverOptions(time_limit=time_limit_s))
    return text, node_states(inp.cluster), _reply(answer(inp, options))


def _status(response: dict) -> str:
    """exalloc's status and gap, from the solver's note beside hail's line."""
    return re.search(r"^highs: ([^;]*)", response["note"]).group(1)


def test_node_evacuate_moves_only_where_migration_tags_allow():
    """A node that refuses the evacuated node's migration tags is no new primary for the
    joint model either (htools' check, which the checker applies to the moves). The first
    generated node-evacuation (15 shared-storage instances off one of eleven nodes, some of
    which refuse its tags) is proven optimal, below hail's plan, every new primary accepting
    the tags and every move passing the checker. Without the filter the model kept proposing
    moves the checker refused, each cut off alone, and ran to its limit unproven. (Proven in
    seconds; 120 s allowed: a loaded machine did not prove it in 20.)"""
    _, state, response = _evacuation(_seeds("node-evacuate", 1)[0], time_limit_s=120)
    sources = {state.locations[name][0] for name, _, _ in response["result"][0]}
    refusing = [
        t
        for t in state.nodes
        for src in sources
        if t != src and check_migration(state.nodes[src], state.nodes[t]) is not None
    ]
    assert refusing  # the case this test is about
    assert _status(response).startswith("optimal")
    joint, hail = re.search(r"joint plan \d+, score ([0-9.]+); one by one \d+, score ([0-9.]+)",
                            response["note"]).groups()  # fmt: skip
    assert float(joint) < float(hail)
    for name, _group, nodes in response["result"][0]:
        source = state.locations[name][0]
        assert check_migration(state.nodes[source], state.nodes[nodes[0]]) is None
    _moves_ok(state, response["result"][0])


def test_node_evacuate_models_an_instance_that_cannot_move_in_place():
    """An instance that no node can take stays on the evacuated node, in the moves' result and
    in the model: generated seed 120 (one of four shared-storage instances refused everywhere
    by its tags) is proven optimal at the checker's score of the moves. Before, the model
    scored the group without that instance, its every plan 1.0 above the true score, and ended
    'infeasible' (its spread bounds, set from hail's true score, cut off hail's plan)."""
    text, state, response = _evacuation(120)
    assert len(response["result"][1]) == 1 and len(response["result"][0]) == 3
    assert _status(response).startswith("optimal")
    joint = float(re.search(r"joint plan \d+, score ([0-9.]+)", response["note"]).group(1))
    assert joint == pytest.approx(_score_after(text, response), abs=1e-6)
    _moves_ok(state, response["result"][0])


@pytest.mark.parametrize("seed", [48, 354, 1578], ids=lambda s: f"seed{s}")
def test_node_evacuate_scores_the_instances_that_stay(seed):
    """When not every instance that has somewhere to go can be moved, the ones left stay on
    the evacuated nodes: the model may place each back where it is, takes the fewest such (a
    stage before the score) and scores them there, so its bound is one of the true score.
    Generated seed 48 moves 17 of 26 (hail's walk 15), seed 354 12 of 15 below hail's score,
    both proven optimal at the checker's score of the moves. Before, the model placed the
    moving ones on the group without the others and claimed no bound ('no score bound:
    instances left in place are not in the model'). Seed 48's instances that stay share
    exclusion tags on their node (htools checks nothing of an instance that does not move);
    its joint plan scores above hail's, which scored alone would have cut the plan off. Seed
    1578 (35 instances, mode all) has instances that may stay on one drbd pair: their
    reserve there is summed from the start, and a plan that puts two moved ones on one pair
    starts the model again with that pair summed (before, the judge refused such plans one at
    a time, 53 rounds to the 20 s limit without a plan; now 12 move, hail's walk 11)."""
    text, state, response = _evacuation(seed)
    assert response["result"][1]  # some instances failed to move
    assert _status(response).startswith("optimal")
    moved, joint, hail_moved, hail = re.search(
        r"joint plan (\d+), score ([0-9.]+); one by one (\d+), score ([0-9.]+)", response["note"]
    ).groups()
    assert float(joint) == pytest.approx(_score_after(text, response), abs=1e-6)
    assert int(moved) == len(response["result"][0])
    # more moves than hail's walk, or as many and a score no higher
    assert (int(moved), -float(joint)) >= (int(hail_moved), -float(hail) - 1e-9)
    _moves_ok(state, response["result"][0])


def _evacuation_options(
    state: ClusterState, name: str, mode: str, evacuated: set[str]
) -> list[tuple]:
    """Every (primary, secondary) an evacuated instance may end on, staying first: any online
    node of its group not being evacuated (htools' `nodes_to_evacuate`) as the new primary
    (shared storage), secondary (drbd, secondary-only) or pair (drbd, all); which ones are
    moves is for the checker and htools' steps to say."""
    p, s = state.locations[name]
    d = state.demands[name]
    nodes = [n for n, st in state.nodes.items() if n not in evacuated
             and st.group_uuid == state.nodes[p].group_uuid and not st.offline]  # fmt: skip
    if d.disk_template != "drbd":
        return [(p, None), *((t, None) for t in nodes if t != p)]
    if mode == "secondary-only":
        return [(p, s), *((p, t) for t in nodes if t not in (p, s))]
    return [(p, s), *((a, b) for a in nodes for b in nodes if a != b and (a, b) != (p, s))]


#: Generated node-evacuations (no drbd failover, no plain) where hail's walk leaves instances
#: that have somewhere to go, small enough to try every plan (at most 1,296 each), and where
#: some instance stays in the best of them.
BRUTE_EVACUATIONS = [
    120,
    282,
    462,
    1380,
    1524,
    1686,
    1794,
    2379,
    2541,
    2577,
    2793,
    3261,
    3405,
    3819,
]


def _best_of_all(text: str, state: ClusterState) -> tuple[int, float, int]:
    """Every plan of moves, each instance staying or on any node (pair) of its group, kept
    when the checker passes it and htools' steps make it in request order: the most moves,
    the least score of the group among plans with that many, and how many could move."""
    inp = parse_request(text)
    mode = inp.request.evac_mode
    names = list(inp.request.instances)
    movable = [n for n in names if state.demands[n].disk_template not in ("plain", "file")]
    assert not (mode == "primary-only" and any(
        state.demands[n].disk_template == "drbd" for n in movable))  # fmt: skip
    group = state.nodes[state.locations[movable[0]][0]].group_uuid
    evacuated = nodes_to_evacuate(state, EVAC_MODES[mode], names)
    options = [_evacuation_options(state, n, mode, evacuated) for n in movable]
    best: tuple[int, float] | None = None
    for targets in itertools.product(*options):
        plan = {n: t for n, t in zip(movable, targets, strict=True) if t != _here(state, n)}
        moves = [Move(n, *plan[n]) for n in names if n in plan]
        if check_moves(state, moves, strict=True, evacuation=True).violations:
            continue
        if isinstance(joint_moves._replay(state, EVAC_MODES[mode], names, plan), str):
            continue
        after = state
        for mv in moves:
            after = after.relocated(mv.instance, mv.primary, mv.secondary)
        key = (len(plan), -cluster_score(after, group=group))
        best = key if best is None or key > best else best
    assert best is not None
    return best[0], -best[1], len(movable)


@pytest.mark.parametrize("seed", sampled(BRUTE_EVACUATIONS), ids=lambda s: f"seed{s}")
def test_joint_node_evacuate_is_the_best_plan_of_all(seed):
    """The joint answer moves the most instances any plan moves (`_best_of_all`) and, among
    those, has the least score (to 1e-6), and says optimal. In every one of these requests
    some instance stays in the best plan: what they are about (4 of them failed before the
    instances that stay were scored). Seeds 1794 and 2577 (mode all) once claimed optimal
    plans whose drbd pairs kept the evacuated primary with a new secondary, which htools
    never makes (its pairs are of the other nodes): the judge now refuses moves onto the
    nodes being evacuated. Seed 3405 (secondary-only) found the model infeasible: its
    primaries that stay share exclusion tags, which the model checked as if new (htools
    checks nothing of a primary that does not move). Seed 1794 stalled at a gap of 5e-5: the
    model's exact reserve (bounded from above through the pair indicators z) let z be 1 for
    a pair not used, raising a node's reserve to even out the spread; z is now exact."""
    text, state, response = _evacuation(seed)
    moves, score, movable = _best_of_all(text, state)
    assert moves < movable  # some instance stays: the case this test is about
    assert _status(response).startswith("optimal"), _status(response)
    assert len(response["result"][0]) == moves
    assert _score_after(text, response) == pytest.approx(score, abs=1e-6)


def test_node_evacuate_off_an_offline_node_is_proven_the_best_plan():
    """htools moves an instance off an offline node with force (its new node's soft checks
    skipped): generated seed 1209 evacuates four ext instances off a drained node, and hail
    puts one where the strict checks (free memory including forthcoming instances) would
    refuse it. The model gives such moves their hard checks alone (`NewInstance.forced`), so
    its plans include all of htools': the answer is the best of all plans, proven. Before,
    the model kept every strict check and claimed no bound (and, earlier still, the checker
    refused hail's plan and the model claimed optimal a plan 0.24 above it)."""
    text, state, response = _evacuation(1209)
    assert any(state.nodes[state.locations[n][0]].offline for n, _, _ in response["result"][0])
    moves, score, _ = _best_of_all(text, state)
    assert _status(response).startswith("optimal")
    assert len(response["result"][0]) == moves
    assert _score_after(text, response) == pytest.approx(score, abs=1e-6)
    _moves_ok(state, response["result"][0])


#: Generated node-evacuations moving instances off offline nodes, which claimed no bound
#: before the model gave the moves htools makes with force their hard checks alone: shared
#: storage off an offline primary (1848, 4359, 4530), drbd secondaries off an offline node
#: (1731, 4116). In seed 3900 the instance on the offline node stays (no plan moves it): a
#: first version held it there to the node's free disk and found the model infeasible.
FORCED_EVACUATIONS = [1731, 1848, 3900, 4116, 4359, 4530]


@pytest.mark.parametrize("seed", FORCED_EVACUATIONS, ids=lambda s: f"seed{s}")
def test_node_evacuate_off_offline_nodes_is_the_best_plan_of_all(seed):
    """The joint answer of an evacuation off offline nodes moves the most instances any plan
    moves and has the least score among those (`_best_of_all`, which the checker judges with
    htools' force), proven."""
    text, state, response = _evacuation(seed)
    names = json.loads(text)["request"]["instances"]
    offline = [n for n in names if any(x and state.nodes[x].offline for x in state.locations[n])]
    assert offline  # instances on offline nodes: the case this test is about
    moves, score, _ = _best_of_all(text, state)
    assert _status(response).startswith("optimal"), _status(response)
    assert len(response["result"][0]) == moves
    assert _score_after(text, response) == pytest.approx(score, abs=1e-6)
    _moves_ok(state, response["result"][0])


def test_node_evacuate_plans_only_what_hails_steps_make():
    """hail moves a drbd pair in mode `all` by steps (a secondary replaced, a failover, a
    secondary replaced), and a failover makes the pair's old node its secondary again for a
    moment, with the instances after it still there: generated seed 516 (20 instances off
    four nodes, two of them offline) has pairs whose old node has no disk for that. The
    checker sees only the final layout, so the model's plans moved them and hail's steps
    could not make the plan: the answer fell back to hail's without the model's verdict (on
    the way, with the judge replaying the steps, the model ran to its limit cutting plans one
    by one). Now such instances have no target (`_no_way_back`), the judge replays the steps,
    and a pair moved whole off an offline node is checked in full at its new nodes (htools
    forces only the steps on its way): proven optimal, every move passing the checker."""
    text, state, response = _evacuation(516)
    assert any(state.nodes[n].offline for n in state.nodes)
    assert _status(response).startswith("optimal"), _status(response)
    _moves_ok(state, response["result"][0])


def test_node_evacuate_counts_a_node_forced_moves_make_fail_n1():
    """A forced move skips the N+1 check, so a node may end failing N+1, and htools' score
    then counts every instance on it (n1_cnt). Generated seed 11199 (20 instances off an
    offline node and another) has such a plan: the joint answer moves 16 where hail's walk
    moves 13, one node taking forced moves ends failing N+1, and the answer is proven with
    that node's count in its score and bound (without it the bound would be the count, 12,
    below the score). Before, such evacuations claimed no bound."""
    text, state, response = _evacuation(11199)
    moved = response["result"][0]
    assert len(moved) == 16 and "one by one 13" in response["note"]
    _moves_ok(state, moved)
    after = state
    for name, _group, nodes in moved:
        after = after.relocated(name, *_nodes([name, _group, nodes]))
    failing = [n for n, st in after.nodes.items() if st.fail_n1 and not state.nodes[n].fail_n1]
    assert failing and not any(after.nodes[n].offline for n in failing)
    assert _status(response).startswith("optimal"), _status(response)
    score = float(re.search(r"joint plan 16, score ([0-9.]+)", response["note"]).group(1))
    assert _score_after(text, response) == pytest.approx(score, abs=1e-6)


def test_node_evacuate_proves_a_target_short_of_its_reserve():
    """The model takes a node to fail N+1 when its free memory falls to its reserve; htools'
    loaded flag compares the reported free memory. A node short of its reserve but not
    failing as loaded keeps that flag while nothing lands there and fails once anything does
    (htools recomputes the flag): its N+1 row binds only where it takes something (u[n]).
    Generated seed 4116 (drbd secondaries off an offline node) with node-0003's total memory
    cut to leave 2,000 MiB unallocated under a 2,048 MiB reserve: the best of every plan,
    proven, where until the eighth session it claimed no bound (`FORCED`, as generated seeds
    19056 and 36228 did)."""
    data = gen.for_seed(4116)
    data["nodes"]["node-0003"]["total_memory"] -= 25136
    text = gen.dumps(data)
    inp = parse_request(text)
    state = node_states(inp.cluster)
    node = state.nodes["node-0003"]
    assert not node.fail_n1 and node.unallocated_memory_mib < node.reserved_memory_mib
    options = IAllocatorOptions(solver=SolverOptions(time_limit=20))
    response = _reply(answer(inp, options))
    assert _status(response).startswith("optimal"), _status(response)
    moves, score, _ = _best_of_all(text, state)
    assert len(response["result"][0]) == moves
    if moves:
        assert _score_after(text, response) == pytest.approx(score, abs=1e-6)
    _moves_ok(state, response["result"][0])


#: Generated node-evacuations (`benchmarks/evacuate_brute.py 5000 12000`) whose answer was
#: the best plan without the model's proof: seed 5142 (secondary-only, every instance stays)
#: found the model infeasible, its staying secondaries held to the failover-memory check of
#: an add; seeds 11190 and 11730 stalled because HiGHS proved a round optimal from its start
#: at once and reported its dual bound as -inf. Seed 13764 (secondary-only, 12000 to 20000)
#: found the model infeasible when the primaries that stay were taken for forced adds and
#: left out of the soft rows: a new secondary on their node is checked with them there.
#: Seeds 6231 and 17283 (secondary-only): a node whose forthcoming memory its staying
#: primaries exceed (its memory row raised to hold them) kept the failover rows at the
#: unraised cap, and the model was infeasible. Seeds 28308, 36786, 42258, 53616 (0 to 60000,
#: eighth session): a node failing N+1 with what is placed back on it, but not as loaded,
#: had its N+1 row raised to hold it, and the answer claimed no bound (`FAILS_N1`); the node
#: now may fail instead, counted in the score, where something leaves it (htools keeps the
#: loaded flag where nothing does). Seed 36786 also found the model infeasible: the reserve
#: its staying secondaries bring back exceeds the node's unallocated memory, its reserve's
#: upper bound. Seeds 19056 and 36228: a target of forced moves short of its reserve without
#: failing N+1 as loaded claimed no bound (`FORCED`; now the row binds where it takes something).
#: Seed 3909 (2026-11-27): HiGHS called the model with hail's plan fixed infeasible, and the
#: stages after it too; the completion is now tried again with a tighter tolerance.
ONCE_UNPROVEN_EVACUATIONS = [5142, 6231, 11190, 11730, 13764, 17283, 28308, 36786, 42258, 53616,
                             19056, 36228, 3909]  # fmt: skip


#: Generated node-evacuations whose spread ranges are under 1e-6 wide: their pieces had
#: widths of 1e-9, and HiGHS's presolve found the model infeasible (hail's plan kept,
#: "infeasible, no bound yet"), from the rows dropped on 2026-11-27 (which changed presolve's
#: path) until the pieces got a least width (formulations/placement.py `PIECE_MIN_WIDTH`).
NARROW_RANGE_EVACUATIONS = [84, 129, 165, 363, 480, 705]


@pytest.mark.parametrize("seed", NARROW_RANGE_EVACUATIONS, ids=lambda s: f"seed{s}")
def test_node_evacuate_with_narrow_spread_ranges_is_proven(seed):
    _, state, response = _evacuation(seed)
    assert _status(response).startswith("optimal"), _status(response)
    _moves_ok(state, response["result"][0])


@pytest.mark.parametrize("seed", sampled(ONCE_UNPROVEN_EVACUATIONS), ids=lambda s: f"seed{s}")
def test_node_evacuate_once_unproven_is_proven_the_best_plan(seed):
    text, state, response = _evacuation(seed)
    moves, score, _ = _best_of_all(text, state)
    assert _status(response).startswith("optimal"), _status(response)
    assert len(response["result"][0]) == moves
    joint = re.search(r"joint plan \d+, score ([0-9.]+)", response["note"]).group(1)
    assert float(joint) == pytest.approx(score, abs=1e-6)  # the group's score, moves or none
    if moves:
        assert _score_after(text, response) == pytest.approx(score, abs=1e-6)
    _moves_ok(state, response["result"][0])


def test_node_evacuate_gives_no_target_where_hails_failover_cannot_pass():
    """Generated seed 26931 (mode all, two drbd instances): hail's steps fail each over
    through its old primary, which has no failover memory for it even with both gone; the
    checker sees only the final layout. The model's stage of the most moves counted both
    moved, every such plan was then refused and the answer said "infeasible" with a gap.
    Now neither has a target (`_no_way_back`, for every check that grows with the node's
    load): hail's answer, the best plan, without a false verdict."""
    text, state, response = _evacuation(26931)
    moves, _, _ = _best_of_all(text, state)
    assert moves == len(response["result"][0]) == 0
    assert "infeasible" not in response["note"]


def _here(state: ClusterState, name: str) -> tuple[str, str | None]:
    p, s = state.locations[name]
    return (p, s if state.demands[name].disk_template == "drbd" else None)


def test_secondary_only_evacuation_needs_room_for_the_primary_back():
    """htools replaces a drbd secondary by adding the primary back with force: its hard checks
    still apply, so an instance whose (offline, overcommitted) primary has no memory for it
    fails on every new secondary (generated seed 462: hail moves 1 of 2). The checker now
    refuses such a move and the model gives the instance no target: the answer is proven
    optimal. Before, the checker let the move through, the model planned it and hail's steps
    could not make it (the answer fell back to hail's, without the model's verdict)."""
    _, state, response = _evacuation(462, "secondary-only")
    assert len(response["result"][0]) == 1 and len(response["result"][1]) == 1
    assert _status(response).startswith("optimal")
    _moves_ok(state, response["result"][0])
    ((stuck, _why),) = response["result"][1]
    primary, secondary = state.locations[stuck]
    assert state.nodes[primary].offline
    report = check_moves(state, [Move(stuck, primary, t) for t in state.nodes
                                 if t not in (primary, secondary)][:1],
                         strict=True, evacuation=True)  # fmt: skip
    assert any(v.node == primary for v in report.violations), report.violations


def test_secondary_only_evacuation_counts_the_primary_staying_on_a_drained_node():
    """In a secondary-only evacuation the drbd primary stays; on a drained (so offline) node
    hail's score counts it there (20 with the offline weights), and so does the model now:
    generated seed 426 is proven optimal at the checker's score. Before, the model scored every
    plan 20 lower and reported a gap of 13.6 %."""
    text, state, response = _evacuation(426, "secondary-only")
    assert any(
        state.nodes[state.locations[name][0]].offline for name, _, _ in response["result"][0]
    )  # the case this test is about
    assert _status(response).startswith("optimal")
    joint = float(re.search(r"joint plan \d+, score ([0-9.]+)", response["note"]).group(1))
    assert joint == pytest.approx(_score_after(text, response), abs=1e-6)
    _moves_ok(state, response["result"][0])


def test_secondary_only_evacuation_keeps_a_primary_past_its_policy_ratio():
    """The drbd primary that stays may sit on a node already past a ratio of its policy (the
    spindle ratio on generated seed 471): placed again in the model, it failed that row and
    the model found no plan at all ('infeasible'; the answer fell back to hail's plan). The
    row now keeps what the staying primaries use, and the request is proven optimal at the
    checker's score, below hail's. That takes two more terms the model once lacked (a gap of
    1.4 %, then 0.014 %, 'the planes stalled'): the location tags a drbd instance's primary
    shares with its new secondary (location_score, on the primary), and the reserve of two
    new secondaries beside one primary on one node, summed (their pair is modelled exactly
    once a stalled plan shares it)."""
    text, state, response = _evacuation(471, "secondary-only")
    assert _status(response).startswith("optimal"), _status(response)
    joint, hail = re.search(r"joint plan \d+, score ([0-9.]+); one by one \d+, score ([0-9.]+)",
                            response["note"]).groups()  # fmt: skip
    assert float(joint) == pytest.approx(_score_after(text, response), abs=1e-6)
    assert float(joint) < float(hail)
    pairs = [tuple(nodes) for _, _, nodes in response["result"][0]]
    shared = [p for p, s in pairs if state.nodes[p].location_tags & state.nodes[s].location_tags]
    assert shared and len(set(pairs)) < len(pairs)  # the two terms this test is about
    _moves_ok(state, response["result"][0])


def test_secondary_only_evacuation_onto_a_node_failing_n1_is_proven():
    """Generated seed 1812 (secondary-only, 14 drbd instances): a primary node is past its
    N+1 row with its primaries placed back (htools' recomputed memory), so it fails N+1 after
    any move: htools adds each primary back with force (no N+1 check), counts all 15
    instances on it (n1_cnt) and skips the N+1 check for what it adds there. The model now
    adds the primaries back as forced placements (their node's N+1 failure a variable,
    counted in the score) and proves its plan, scored as the checker scores it. Before, it
    claimed no bound, and before that reported a bound 15 below the score (a gap of 36 %)."""
    text, state, response = _evacuation(1812, "secondary-only")
    assert _status(response).startswith("optimal"), _status(response)
    moved, joint, hail_moved, hail = re.search(
        r"joint plan (\d+), score ([0-9.]+); one by one (\d+), score ([0-9.]+)", response["note"]
    ).groups()
    assert float(joint) == pytest.approx(_score_after(text, response), abs=1e-6)
    assert (int(moved), -float(joint)) >= (int(hail_moved), -float(hail) - 1e-9)
    _moves_ok(state, response["result"][0])


@pytest.mark.parametrize("seed", [33294, 49944], ids=lambda s: f"seed{s}")
def test_primaries_added_back_let_their_node_fail_n1_only_where_it_fails_as_it_is(seed):
    """Generated secondary-only evacuations (`benchmarks/evacuate_brute.py 30000 60000`)
    whose new secondaries go, by strict adds, to a node holding primaries of the request,
    which htools adds back with force. A primary added back changes no number of its node,
    and the strict adds refuse to make it fail N+1, so it never does. The model let the node
    fail N+1 (its N+1 row relaxed for the primaries added back), the judge refused every plan
    it found, and the answer kept hail's plan, "infeasible", where a plan moves more (seed
    33294: 6 of 11 moved where 7 can be; 49944: 2 of 7 where 3 can). Now the node may fail
    only where it fails as it is (`NodeData.fails_n1_as_is`; seed 1812's node does): the
    best plan, proven."""
    text, state, response = _evacuation(seed, "secondary-only")
    primaries = {state.locations[n][0] for n in parse_request(text).request.instances}
    secondaries = {nodes[1] for _, _, nodes in response["result"][0]}
    assert any(not state.nodes[n].fail_n1 for n in primaries & secondaries)
    moves, score, _ = _best_of_all(text, state)
    assert _status(response).startswith("optimal"), _status(response)
    hail_moved = int(re.search(r"one by one (\d+)", response["note"]).group(1))
    assert len(response["result"][0]) == moves > hail_moved
    assert _score_after(text, response) == pytest.approx(score, abs=1e-6)
    _moves_ok(state, response["result"][0])


def test_plans_refused_at_the_stages_optimum_send_the_stages_back(monkeypatch):
    """When the judge refuses every plan the model has at the optimum of the stages before the
    score (the most moved, the fewest staying), the stages are solved again without those
    plans, rather than the answer falling back to hail's. Seed 33294 with the model before
    `NodeData.fails_n1_as_is` (every node holding a primary added back free to fail N+1, a
    model looser than htools' steps): before, "infeasible" and hail's 6 moves; now the best
    plan, 7 moves, proven."""
    loose = joint_evacuate.placement_problem

    def every_node_may_fail(state, *args, failing_as_is=frozenset(), **kwargs):
        return loose(state, *args, failing_as_is=frozenset(state.nodes), **kwargs)

    notes = []
    solve = joint_evacuate.place_jointly

    def noted(*args, **kwargs):
        result = solve(*args, **kwargs)
        notes.extend(result.notes)
        return result

    monkeypatch.setattr(joint_evacuate, "placement_problem", every_node_may_fail)
    monkeypatch.setattr(joint_evacuate, "place_jointly", noted)
    text, state, response = _evacuation(33294, "secondary-only")
    moves, score, _ = _best_of_all(text, state)
    assert placement_strategy.RELAXED in notes
    assert _status(response).startswith("optimal"), _status(response)
    assert len(response["result"][0]) == moves
    assert _score_after(text, response) == pytest.approx(score, abs=1e-6)
    _moves_ok(state, response["result"][0])


#: Generated multi-allocates and change-groups (`benchmarks/joint_brute.py 0 26000`) whose
#: answer was not the best of all their plans (`tests/joint_plans.py`), or claimed "optimal"
#: wrongly, before the seventh session. Multi-allocate 1162, 3286: the most placed plans all
#: broke N+1, every one was cut off, and the answer fell back to hail's (nothing placed, or a
#: worse plan). 1243, 2413, 20206: a forthcoming instance was given the location scores htools
#: does not give it, the model scored every plan above its true score and called a worse one
#: optimal. Change-group 3226, 4270, 11002, 19579: hail's plan, kept, left the target group not
#: N+1 redundant (hail checks N+1 where its allocation would put the instance, not where its
#: moves land). 19714: a move off an offline primary, which htools forces, was no candidate and
#: the answer crashed. 1768, 11947: hail's plan was kept by the score of the groups the
#: instances leave, which the model does not score; the ranking is the target group's. 1549:
#: the model cut 135 plans breaking N+1 one at a time until its 20 s were up (now the part
#: of each that breaks the group alone, `_breaking_core`: proven in a second). 27229: a drbd
#: instance whose old primary cannot take it back as a secondary for hail's failover step (as
#: `_no_way_back` finds in a node evacuation) had targets; every plan moving it was refused.
#: Change-groups with several target groups kept hail's answer until the eighth session, which
#: moved as many with a higher score of the target groups: 247, 2344 (a last-resort group
#: among them), 868, 1867 (three preferred groups); 103 and 274 counted an unallocable group,
#: which htools' allocation drops, as a second target. 21154 (then joint for the first time)
#: ended "infeasible" with hail's plan, the best: HiGHS's presolve found the spread bound's
#: secant row of a metric with variances near 1e-3 infeasible at the very plan its range was
#: centred on, until the row was scaled.
JOINT_BRUTE = [1162, 3286, 1243, 2413, 20206, 3226, 4270, 11002, 19579, 19714, 1768, 11947,
               1549, 27229, 247, 2344, 868, 1867, 103, 274, 21154]  # fmt: skip


@pytest.mark.parametrize("seed", sampled(JOINT_BRUTE), ids=lambda s: f"seed{s}")
def test_joint_multi_allocate_and_change_group_are_the_best_plan_of_all(seed):
    text = gen.dumps(gen.for_seed(seed))
    brute = joint_plans.brute_of(text)
    best, _, _, _ = brute.best()
    options = IAllocatorOptions(solver=SolverOptions(time_limit=20))
    response = _reply(answer(parse_request(text), options))
    plan = brute.ours(response)
    assert brute.why_not(plan) == "feasible"
    assert joint_plans.judge(best, brute.key(plan)) == "best", (best, brute.key(plan))
    assert _status(response).startswith("optimal"), _status(response)


def test_a_model_scoring_a_plan_above_its_true_score_claims_no_bound(monkeypatch):
    """Every row of the joint model lies under the true score at a whole plan; a model that
    scores a plan above it gets a term wrong (as the forthcoming instances' location scores
    were, seed 2413), and its bound holds for nothing. With the model's constant raised by
    1, the answer is still checked and placed, but claims no bound."""
    loose = joint_strategy.placement_problem

    def raised(*args, **kwargs):
        problem = loose(*args, **kwargs)
        return replace(problem, score_constant=problem.score_constant + 1.0)

    monkeypatch.setattr(joint_strategy, "placement_problem", raised)
    text = gen.dumps(gen.for_seed(2413))
    options = IAllocatorOptions(solver=SolverOptions(time_limit=20))
    response = _reply(answer(parse_request(text), options))
    assert response["success"] and response["result"][0]
    assert placement_strategy.OVERSCORED in response["note"], response["note"]
    assert not _status(response).startswith("optimal")


def _seed_2413_with_score_solves(monkeypatch, change) -> dict:  # noqa: ANN001
    """exalloc's answer to generated request 2413 with `change(result)` applied to what every
    score solve returns (not the solves with the placements fixed, `_solve_at`)."""
    opened = placement_strategy.open_session

    def changed(*args, **kwargs):
        session = opened(*args, **kwargs)
        solve, fixed, set_objective = session.solve, session.solve_with_fixed, session.set_objective
        scoring, inside = [False], []

        def objective(expr, sense):  # noqa: ANN001, ANN202
            scoring[0] = expr is args[1].score  # the model: open_session(solver, m, ...)
            return set_objective(expr, sense)

        def solved(**kw):  # noqa: ANN003, ANN202
            res = solve(**kw)
            return res if inside or not scoring[0] else change(res)

        def fixed_solve(*a, **kw):  # noqa: ANN002, ANN003, ANN202
            inside.append(True)
            try:
                return fixed(*a, **kw)
            finally:
                inside.pop()

        session.solve, session.solve_with_fixed = solved, fixed_solve
        session.set_objective = objective
        return session

    monkeypatch.setattr(placement_strategy, "open_session", changed)
    text = gen.dumps(gen.for_seed(2413))
    options = IAllocatorOptions(solver=SolverOptions(time_limit=20))
    response = _reply(answer(parse_request(text), options))
    assert response["success"] and response["result"][0]
    return response


def test_a_solve_returning_a_plan_above_its_true_score_keeps_the_bound(monkeypatch):
    """A solve ended by its time limit may return a plan with its spreads above their least:
    its objective is then above the plan's true score although every row of the model lies
    under it. The model's own least score of the plan decides (`_solve_at`): with every
    score solve's objective raised by 1 (plans returned with slack), seed 2413 is still
    proven, where the guard alone claimed no bound (as on one of the 200-node multi-allocates
    of docs/placement.md, proven now)."""

    def slack(res):  # noqa: ANN001, ANN202
        return res if res.objective is None else replace(res, objective=res.objective + 1.0)

    response = _seed_2413_with_score_solves(monkeypatch, slack)
    assert placement_strategy.OVERSCORED not in response["note"], response["note"]
    assert _status(response).startswith("optimal"), _status(response)


def test_a_bound_above_a_checked_plan_is_no_proof(monkeypatch):
    """A solver's dual bound is the one number exalloc cannot recompute, but a checked plan
    scoring below it shows it wrong (HiGHS 1.12 proved such bounds on the 200-node
    evacuations: docs/placement.md, "A third wrong bound"). With every score solve's bound
    raised by 1, seed 2413 (proven optimal as it is) claims no bound, where before the answer
    said optimal with the bound clipped to its score."""

    def inflated(res):  # noqa: ANN001, ANN202
        return res if res.bound is None else replace(res, bound=res.bound + 1.0)

    response = _seed_2413_with_score_solves(monkeypatch, inflated)
    assert placement_strategy.UNDERCUT in response["note"], response["note"]
    assert not _status(response).startswith("optimal"), _status(response)


def test_another_plan_below_the_bound_takes_the_bound_away():
    """hail's plan or the search's, put in the model's place (`with_plan`), keeps the
    model's bound only when it does not score below it."""
    joint = placement_strategy.JointPlan({"a": ("n1", None)}, 1, 10.0, 9.5, "optimal", 1, 0.1, 1.0)
    other = {"a": ("n2", None)}
    kept = placement_strategy.with_plan(joint, other, 9.6)
    assert (kept.placements, kept.score, kept.bound, kept.status) == (other, 9.6, 9.5, "optimal")
    below = placement_strategy.with_plan(joint, other, 9.4)
    assert (below.score, below.bound, below.status) == (9.4, None, "feasible")
    assert placement_strategy.UNDERCUT in below.notes


def test_change_group_targets_only_nodes_accepting_the_migration(monkeypatch):
    """A change-group's new primary must accept the migration from the primary now. A
    generated change-group (one sharedfile instance into group3) with a migration tag on its
    node that one node of group3, hail's choice without the tags, lacks: that node is no
    candidate of the joint model, the others are, and the answer, checked, is not there."""
    data = gen.for_seed(40)
    assert data["request"]["type"] == "change-group"
    name = data["request"]["instances"][0]
    untagged = json.loads(
        answer(
            parse_request(gen.dumps(data)), IAllocatorOptions(solver=SolverOptions(time_limit=20))
        ).response
    )["result"][0][0][2][0]
    target = data["nodes"][untagged]["group"]
    data["cluster_tags"] = ["htools:migration:hv"]
    for node, spec in data["nodes"].items():
        tagged = node == data["instances"][name]["nodes"][0] or (
            spec["group"] == target and node != untagged
        )
        spec["tags"] = [t for t in spec["tags"] if not t.startswith("hv:")] + (["hv:x"] * tagged)
    text = gen.dumps(data)
    seen = []
    place = joint_change_group.place_jointly

    def recorded(state, problem, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        seen.append({n for (_, n) in problem.primary_sd})
        return place(state, problem, *args, **kwargs)

    monkeypatch.setattr(joint_change_group, "place_jointly", recorded)
    response = json.loads(
        answer(parse_request(text), IAllocatorOptions(solver=SolverOptions(time_limit=20))).response
    )
    assert len(seen) == 1 and seen[0] and untagged not in seen[0]
    assert [entry[0] for entry in response["result"][0]] == [name]
    assert response["result"][0][0][2][0] != untagged
    _moves_ok(node_states(parse_request(text).cluster), response["result"][0])


@pytest.mark.parametrize("long_walk", [False, True])
def test_the_search_beside_runs_only_for_a_long_walk(long_walk, monkeypatch):
    """With hail's walk before the model, the search from its plan runs beside the model when
    the walk is a long one (WALK_ASIDE_SECONDS or more: a large request, whose model takes its
    time), and not for a short one, which the model answers in a moment (no forked process
    to wait for)."""
    seed = _seeds("node-evacuate", 2)[1]
    text = gen.dumps(gen.for_seed(seed))
    forked = []

    class Recorded(Aside):
        def __init__(self, fn, *args):  # noqa: ANN001, ANN002, ANN204
            forked.append(args[1])  # hail's walk, done before the model
            super().__init__(fn, *args)

    monkeypatch.setattr(joint_evacuate, "Aside", Recorded)
    monkeypatch.setattr(joint_search, "walk_aside", lambda *_: False)
    monkeypatch.setattr(joint_evacuate, "WALK_ASIDE_SECONDS", 0.0 if long_walk else 1e9)
    response = answer(parse_request(text), IAllocatorOptions(solver=SolverOptions(time_limit=20)))
    assert _reply(response)["success"]
    assert len(forked) == (1 if long_walk else 0)
    assert all(hail is not None for hail in forked)


def test_walk_aside_only_when_walking_first_starves_the_model():
    """40 drbd instances on 200 nodes (mode all: 10,000 placement variables, a walk of
    about 15 s by its estimate): beside the model at 30 s, before it at 45 s; a short walk
    always before it."""
    assert joint_search.walk_aside(15.6, 30.0, 10_000)
    assert not joint_search.walk_aside(15.6, 45.0, 10_000)
    assert not joint_search.walk_aside(0.5, 30.0, 10_000)


# multi-allocate and change-group seeds (of their first 30 and 16) whose cluster is N+1
# redundant before the answer: the others have nothing to keep
REDUNDANT_SEEDS = (1, 10, 19, 28, 46, 100, 109, 127, 154, 181, 199, 208, 262) + (
    13, 22, 49, 58, 76, 85, 94, 103,
)  # fmt: skip


@pytest.mark.parametrize("seed", sampled(REDUNDANT_SEEDS), ids=lambda s: f"seed{s}")
def test_joint_answer_keeps_a_redundant_cluster_redundant(seed):
    """With the exact capacity check (the default), a cluster N+1 redundant before the
    answer's placements or moves is redundant after them (exact check of every group)."""
    text = gen.dumps(gen.for_seed(seed))
    inp = parse_request(text)
    state = node_states(inp.cluster)
    assert check_cluster(state).redundant, "not N+1 redundant before"
    options = IAllocatorOptions(solver=SolverOptions(time_limit=3.0))
    response = _reply(answer(parse_request(text), options))
    after = state
    if inp.request.type == "multi-allocate":
        records = {r.name: new_instance(r) for r in inp.request.instances}
        for name, nodes in response["result"][0] if response["success"] else []:
            after = after.placed(state.demand(records[name]), *_nodes([name, nodes]))
    else:
        for name, group, nodes in response["result"][0] if response["success"] else []:
            after = after.relocated(name, *_nodes([name, group, nodes]))
    assert check_cluster(after).redundant is True
