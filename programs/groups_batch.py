"""The super-cluster problems in `exalloc batch` and `exalloc compare` (docs/groups.md).

A text snapshot of a super cluster (two groups or more) poses `n1`, `redistribute`, `compress`,
and `evacuate` of its offline nodes that still host instances (what an operator
would evacuate). Exact runners call the programs as the CLI does (every plan passed the independent
checks there); greedy runners run the design's algorithms on htools' port, judged by the same
exact checks, beside hcheck for `n1` and hail's change-group for `compress`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from model.errors import ExallocError

METRICS: dict[str, tuple[str, str]] = {
    "n1": ("nodes not evacuable", "min"),
    "redistribute": ("relocations", "min"),
    "compress": ("groups emptiable", "max"),
    "evacuate": ("instances evacuated", "max"),
}
SOLVER_KEYS = ("status", "objective", "bound", "gap", "build_s", "solve_s")


def _sections(path: str) -> list[list[str]]:
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError):
        return []
    return [[line for line in s.splitlines() if line.strip()] for s in text.split("\n\n")]


def evacuation_nodes(path: str) -> list[str]:
    """Offline nodes (the text format's offline flag Y) that still host instances."""
    sections = _sections(path)
    if len(sections) < 3:
        return []
    flagged = [
        f[0] for f in (line.split("|") for line in sections[1]) if len(f) > 7 and f[7] == "Y"
    ]
    used = set()
    for line in sections[2]:
        f = line.split("|")
        if len(f) > 7:
            used.update(x for x in (f[6], f[7]) if x)
    return [n for n in flagged if n in used]


def problems_of(path: str) -> list[str]:
    """The super-cluster problems a text snapshot poses."""
    sections = _sections(path)
    if len(sections) < 2:
        return []
    groups = {line.split("|")[1] for line in sections[0] if "|" in line}
    used = {f[8] for f in (line.split("|") for line in sections[1]) if len(f) > 8}
    if len(groups & used) < 2:
        return []  # a regular cluster: `exalloc n1` answers it, batch leaves it to squeeze
    out = ["n1", "redistribute", "compress"]
    if evacuation_nodes(path):
        out.append("evacuate")
    return out


def _options(o: Any, **extra: Any) -> Any:
    """Every exact runner's options: the batch's solver, no greedy run (batch runs its own)."""
    from programs.groups import GroupOptions

    return GroupOptions(solver=o.solver, greedy=False, **extra)


def _solver_fields(out: dict[str, Any]) -> dict[str, Any]:
    return {k: out.get(k) for k in SOLVER_KEYS}


# --- exact ------------------------------------------------------------------------------------


def exact(problem: str, path: str, o: Any) -> dict[str, Any]:
    if problem == "n1":
        from programs import n1

        report = n1.answer(path, _options(o, offline_targets=True))
        out = report.to_json()
        bad = sum(1 for g in out["groups"] for n in g["nodes"] if n["evacuable"] is False)
        undecided = sum(1 for g in out["groups"] for n in g["nodes"] if n["evacuable"] is None)
        status = "optimal" if not undecided else "feasible"
        return {
            "status": status,
            "objective": [bad],
            "bound": [bad] if not undecided else None,
            "gap": 0.0 if not undecided else None,
            "build_s": None,
            "solve_s": out.get("seconds"),
            "answer": {"redundant": out["redundant"], "not_evacuable": bad},
            "value": bad,
        }
    if problem == "redistribute":
        from programs import redistribute

        out = redistribute.answer(path, _options(o)).to_json()
        plan = out.get("healthy_after")
        return {
            **_solver_fields(out),
            "answer": {"moves": out["moves"], "relocations": out["relocations"]},
            "value": out["moves"] if plan or out.get("unhealthy") == [] else None,
            **({"note": out["reason"]} if out.get("reason") else {}),
        }
    if problem == "compress":
        from programs import compress

        out = compress.answer(path, _options(o)).to_json()
        yes = [g["name"] for g in out["groups"] if g["evacuable"]]
        statuses = {g.get("status") for g in out["groups"]}
        status = "optimal" if statuses <= {"optimal", "infeasible"} else "feasible"
        return {
            "status": status,
            "objective": [len(yes)],
            "bound": [len(yes)] if status == "optimal" else None,
            "gap": 0.0 if status == "optimal" else None,
            "build_s": sum(g.get("build_s") or 0.0 for g in out["groups"]),
            "solve_s": sum(g.get("solve_s") or 0.0 for g in out["groups"]),
            "answer": {"emptiable": yes, "best": out["best"]},
            "value": len(yes),
        }
    if problem == "evacuate":
        from programs import evacuate

        nodes = evacuation_nodes(path)
        out = evacuate.answer(path, nodes, _options(o)).to_json()
        return {
            **_solver_fields(out),
            "answer": {
                "nodes": nodes,
                "evacuated": out["evacuated"],
                "moves": out["cross_group"],
            },
            "value": out["evacuated"],
        }
    raise ExallocError(f"no exalloc solver for problem {problem!r}")


# --- greedy -----------------------------------------------------------------------------------


def greedy(problem: str, path: str, o: Any) -> dict[str, Any]:
    import time

    from model import groups_greedy
    from model.backends import load_cluster
    from model.groups import group_nodes, storage_of
    from model.state import node_states
    from solvers.strategies import groups as strategy

    start = time.perf_counter()
    state = node_states(load_cluster(path))
    storage = storage_of(state)
    if problem == "n1":
        from programs.n1 import greedy_failures, hcheck_counts

        try:
            counts = hcheck_counts(path)
            tool, bad = "hcheck", sum(counts.values())
        except ExallocError:  # hcheck missing or crashing: the port answers
            tool, bad = "GlobalN1 (port)", len(greedy_failures(state))
        return {
            "tool": tool,
            "answer": {"not_evacuable": bad},
            "value": bad,
            "wall_s": round(time.perf_counter() - start, 6),
        }
    opts = {"options": o.solver}  # the strategies take the solver's options, not a program's
    h = strategy.health(state, storage, **opts)
    if problem == "redistribute":
        g = groups_greedy.redistribute(state, storage)
        groups = list(h.groups)
        everyone = [n for x in groups for n in group_nodes(state, x)]
        problems = strategy.judge(state, storage, g.relocations, everyone, groups, **opts)
        repaired = not problems
        return {
            "tool": "design greedy",
            "answer": {"moves": g.moves, "groups": {k: v for k, v in g.groups.items()}},
            "value": g.moves if repaired else None,
            "violations": 0,
            **({"broken": problems[:5]} if problems else {}),
            "wall_s": round(time.perf_counter() - start, 6),
        }
    if problem == "compress":
        gc = groups_greedy.compress(state, storage)
        evacuable = h.evacuable()
        yes = []
        for grp, (moves, why) in gc.items():
            if why is not None:
                continue
            peers = strategy.receiving_peers(state, h, grp)
            required = [n for p in peers for n in group_nodes(state, p) if n in evacuable]
            if not strategy.judge(state, storage, moves, required, **opts):
                yes.append(state.cluster.group(grp).name)
        return {
            "tool": "design greedy",
            "answer": {"emptiable": yes},
            "value": len(yes),
            "wall_s": round(time.perf_counter() - start, 6),
        }
    if problem == "evacuate":
        nodes = evacuation_nodes(path)
        g = groups_greedy.evacuate(state, storage, nodes)
        evacuable = h.evacuable() - set(nodes)
        groups = {state.nodes[n].group_uuid for r in g.relocations for n in r.nodes()}
        required = [n for x in groups for n in group_nodes(state, x) if n in evacuable]
        problems = strategy.judge(state, storage, g.relocations, required, **opts)
        cross = sum(
            1
            for r in g.relocations
            if state.nodes[r.primary].group_uuid != state.nodes[r.old_primary].group_uuid
        )
        return {
            "tool": "hail node-evacuate + design",
            "answer": {"nodes": nodes, "evacuated": g.moves, "moves": cross},
            "value": g.moves,
            "violations": len(problems),
            **({"broken": problems[:5]} if problems else {}),
            "wall_s": round(time.perf_counter() - start, 6),
        }
    raise ExallocError(f"no greedy baseline for problem {problem!r}")
