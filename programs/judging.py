"""How `exalloc batch` and `compare` judge an answer: each answer, exalloc's or the greedy
tool's, seen by exalloc's independent checker (model/check.py) from the input alone, then the
two compared by the problem's metric and shown in one cell or line.

Judging is apart from running (programs/runners.py) so that a recorded result can be judged
and shown again (`exalloc report`) without a solver.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from programs.tasks import ALLOCATION_PROBLEMS, METRICS, MOVE_PROBLEMS

SQUEEZE_FACTOR = 2.0  # hsqueeze's default --minimal-resources and --target-resources


NOT_ENOUGH = "Onlining all nodes will not yield enough capacity"  # hsqueeze -v


def judge_squeeze(
    path: str,
    mode: str,
    nodes: list[str],
    moves: list[tuple[str, str]],
    not_enough: bool = False,
) -> dict[str, Any]:
    """A squeeze plan as exalloc's checker sees it: nodes freed, moves, violations.
    `not_enough`: onlining every node still leaves some node unable to host the probe
    (hsqueeze's "will not yield enough capacity"): the probe is then not required anywhere,
    only the plan itself must hold (as the squeeze strategy's own check)."""
    from model.backends.text import common_suffix, load_text
    from model.check import Move, check_squeeze
    from model.squeeze import not_preexisting

    cluster = load_text(path)
    # hsqueeze prints names without the cluster's common domain suffix (htools' shortening)
    node_sfx = common_suffix([n.name for n in cluster.nodes])
    inst_sfx = common_suffix([i.name for i in cluster.instances])

    def full(name: str, known: dict[str, Any], suffix: str) -> str:
        return name if name in known or name + suffix not in known else name + suffix

    nodes = [full(n, cluster.node_index, node_sfx) for n in nodes]
    moves = [
        (full(i, cluster.instance_index, inst_sfx), full(t, cluster.node_index, node_sfx))
        for i, t in moves
    ]
    report = check_squeeze(
        cluster,
        nodes if mode == "offline" else (),
        [Move(instance, target) for instance, target in moves],
        cluster.cluster_policy.std,
        factor=SQUEEZE_FACTOR,
        powered_on_nodes=nodes if mode == "online" else (),
    )
    obj = report.objectives
    freed = obj["nodes_powered_off"] - obj["nodes_powered_on"]
    # an instance that sat on an offline node before and was not moved is not the plan's doing
    broken = not_preexisting(cluster, report.violations, [Move(i, t) for i, t in moves])
    if not_enough:
        broken = [v for v in broken if v.kind != "probe"]
    return {
        "answer": {"mode": mode, "nodes": nodes, "moves": obj["moves"]},
        "value": freed,
        "violations": len(broken),
        **({"broken": [str(v) for v in broken[:5]]} if broken else {}),
    }


def judge_allocation(path: str, where: dict[str, list[str]]) -> dict[str, Any]:
    """New instances on chosen nodes as exalloc's checker sees them: placed, lost vector."""
    from model.backends.iallocator import AllocateRequest, load_request, new_instance
    from model.check import check_allocation

    inp = load_request(path)
    req = inp.request
    wanted = [req] if isinstance(req, AllocateRequest) else list(getattr(req, "instances", ()))
    placements = [
        (new_instance(r), where[r.name][0], (where[r.name][1:] or [None])[0])
        for r in wanted
        if where.get(r.name)
    ]
    report = check_allocation(inp.cluster, placements)
    lost = list(report.objectives.get("lost_allocations_total") or ())
    return {
        "answer": {"placements": {r.name: where[r.name] for r in wanted if where.get(r.name)}},
        "value": len(placements),
        "lost": lost,
        "violations": len(report.violations),
        **({"broken": [str(v) for v in report.violations[:5]]} if report.violations else {}),
    }


def judge_moves(path: str, response: dict[str, Any]) -> dict[str, Any]:
    """A node-evacuate or change-group answer as exalloc's checker sees it: the instances
    moved (htools' strict moves, in the answer's order) and the score of the groups touched
    after them."""
    from model.backends.iallocator import load_request
    from model.check import Move, check_moves
    from model.score import cluster_score
    from model.state import node_states

    state = node_states(load_request(path).cluster)
    moved = (response.get("result") or [[]])[0] if response.get("success") else []
    moves = [Move(name, nodes[0], (nodes[1:] or [None])[0]) for name, _group, nodes in moved]
    report = check_moves(state, moves, strict=True, evacuation=True)
    after = state
    for mv in moves:
        after = after.relocated(mv.instance, mv.primary, mv.secondary)
    groups = {state.nodes[state.locations[mv.instance][0]].group_uuid for mv in moves}
    groups |= {after.nodes[mv.primary].group_uuid for mv in moves}
    return {
        "answer": {"placements": {name: list(nodes) for name, _group, nodes in moved}},
        "value": len(moves),
        "score": round(sum(cluster_score(after, group=g) for g in sorted(groups)), 8),
        "violations": len(report.violations),
        **({"broken": [str(v) for v in report.violations[:5]]} if report.violations else {}),
    }


def response_placements(path: str, response: dict[str, Any]) -> dict[str, list[str]]:
    """An IAllocator response's placements by instance name (allocate or multi-allocate)."""
    if not response.get("success"):
        return {}
    result = response.get("result") or []
    if result and all(isinstance(x, str) for x in result):  # allocate: [primary, secondary?]
        doc = json.loads(Path(path).read_text())
        return {str(doc["request"].get("name")): list(result)}
    placed_list = result[0] if result and isinstance(result[0], list) else []
    return {str(name): list(nodes) for name, nodes in placed_list}


# -- the compare command --------------------------------------------------------------------------


def format_value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):  # per-stage gaps: the worst one
        numbers = [v for v in value.values() if isinstance(v, int | float)]
        return format_value(max(numbers)) if numbers else "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1e4 else f"{value:.0f}"
    if isinstance(value, list | tuple):
        return "(" + ",".join(format_value(v) for v in value) + ")"
    return str(value)


def verdict(record: dict[str, Any]) -> str:
    """exact better / same / worse than greedy by the problem's metric (or '-')."""
    greedy = record.get("greedy") or {}
    a, b = record.get("value"), greedy.get("value")
    if not greedy:  # no greedy tool ran (no --compare): nothing to judge (issue 40, item 8)
        return "-"
    if record.get("error") or greedy.get("error") or a is None:
        return "-"
    if b is None:  # the greedy tool found no answer (e.g. its LP was infeasible)
        return "exact better"
    broken_a, broken_b = record.get("violations") or 0, greedy.get("violations") or 0
    if bool(broken_a) != bool(broken_b):  # an answer that breaks constraints loses
        return "greedy better" if broken_a else "exact better"
    if record["problem"] in ALLOCATION_PROBLEMS:  # more placed, then fewer slots lost
        a = (a, [-x for x in record.get("lost") or ()])
        b = (b, [-x for x in greedy.get("lost") or ()])
    elif record["problem"] in MOVE_PROBLEMS:  # more moved, then a lower score after
        a = (a, -(record.get("score") or 0.0))
        b = (b, -(greedy.get("score") or 0.0))
    elif record["problem"] in ("squeeze", "evacuate"):  # more freed / evacuated, fewer moves
        a = (a, -((record.get("answer") or {}).get("moves") or 0))
        b = (b, -((greedy.get("answer") or {}).get("moves") or 0))
    sense = METRICS.get(record["problem"], ("", "max"))[1]
    if a == b:
        return "same"
    better = a > b if sense == "max" else a < b
    return "exact better" if better else "greedy better"


def metric_value(problem: str, part: dict[str, Any]) -> float | None:
    """One number per answer for totals and plots: slots lost for allocations, else the value."""
    if part.get("error"):
        return None
    if problem in ALLOCATION_PROBLEMS:
        lost = part.get("lost")
        return float(sum(lost)) if isinstance(lost, list) and lost else None
    value = part.get("value")
    return float(value) if isinstance(value, int | float) else None


def answer_text(answer: Any) -> str:
    """One line per answer: the nodes to power off/on, the placements, or the layout."""
    if not isinstance(answer, dict):
        return ""
    if "mode" in answer:
        nodes = ", ".join(answer.get("nodes") or ()) or "no node"
        if answer["mode"] not in ("offline", "online"):
            return "no action"
        verb = "power off" if answer["mode"] == "offline" else "power on"
        return f"{verb} {nodes}; {answer.get('moves')} moves"
    if "rounds" in answer:  # roll: the reboot groups
        return "; ".join(",".join(r) for r in answer["rounds"]) or "no node"
    if "k" in answer:  # balance: hbal's steps or the exact ones
        return f"{answer.get('steps')} step(s) within K={answer['k']}"
    if "instances" in answer:  # space: the standard count per group
        groups = ", ".join(f"{g} {n}" for g, n in (answer.get("by_group") or {}).items())
        return f"{answer['instances']} new instances ({groups or 'no group'})"
    if "placements" in answer:
        where = answer["placements"] or {}
        return "; ".join(f"{n} -> {'/'.join(nodes)}" for n, nodes in where.items()) or "nothing"
    layout = answer.get("layout")
    if isinstance(layout, list):
        disks = []
        for disk in layout:
            spaces = [
                f"{sp.get('space_id')} {sp.get('size')}"
                for sp in disk.get("spaces") or ()
                if sp.get("size") and sp.get("space_id") != "unallocated"
            ]
            disks.append(f"{disk.get('disk_id')}: {', '.join(spaces) or 'empty'}")
        return "; ".join(disks) + f" (unallocated {answer.get('unallocated_mib')} MiB)"
    return ""


def value_cell(part: dict[str, Any]) -> str:
    """The judged value, with the lost-allocation vector and any broken constraints."""
    if not part:
        return "-"
    if part.get("error"):
        return "error"
    if part.get("value") is None:
        return str((part.get("answer") or {}).get("status") or "-")
    lost = f" lost {format_value(part['lost'])}" if part.get("lost") else ""
    moves = (part.get("answer") or {}).get("moves")
    moved = f", {moves} moves" if isinstance(moves, int) else ""
    score = f", score {part['score']:.6f}" if isinstance(part.get("score"), float) else ""
    broken = f" ({part['violations']} broken)" if part.get("violations") else ""
    return format_value(part["value"]) + lost + moved + score + broken
