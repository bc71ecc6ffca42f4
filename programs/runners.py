"""The problem registry of `exalloc batch` and `compare`: for each problem an exact runner
(the exalloc strategy, called as the CLI would) and a greedy runner (the real hail / hsqueeze,
or the LP-floor baseline), each returning a plain dict, and `solve_task`, which answers one
task without ever raising, so that one JSON line per (input, problem) can be written by
whoever called it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model.errors import ExallocError, InfeasibleError
from programs.judging import (
    NOT_ENOUGH,
    SQUEEZE_FACTOR,
    judge_allocation,
    judge_moves,
    judge_squeeze,
    response_placements,
)
from programs.reference import DEFAULT_HAIL, run_tool
from programs.tasks import INSTALL_HINT, MOVE_PROBLEMS, SOLVER_KEYS, Options, Task, error_text

# -- exact runners --------------------------------------------------------------------------------


def _module(name: str) -> Any:
    """A module of exalloc, or a clear failure when this build does not have it yet."""
    import importlib

    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name and err.name.startswith(("programs", "model", "formulations", "solvers")):
            raise ExallocError(
                f"problem needs {err.name}, which this build does not have"
            ) from None
        raise


def _program(name: str) -> Any:
    """The program module, or a clear failure when this build does not have it yet."""
    return _module(f"programs.{name}")


def _exact_squeeze(task: Task, o: Options) -> dict[str, Any]:
    """exalloc's plan with hsqueeze's defaults, through the squeeze strategy."""
    from model.backends.text import load_text
    from model.squeeze import SqueezeRequest
    from model.state import node_states

    strategy = _module("solvers.strategies.squeeze")
    path = task.input
    request = SqueezeRequest(SQUEEZE_FACTOR, SQUEEZE_FACTOR, "ext")
    result = strategy.plan(node_states(load_text(path)), request, o.solver)
    moves = [(m.instance, m.target) for m in result.moves]
    judged = judge_squeeze(path, result.mode, list(result.nodes), moves, result.not_enough_capacity)
    figures = {  # SOLVER_KEYS, in order
        "status": result.status,
        "objective": list(result.objective),
        "bound": list(result.bound),
        "gap": list(result.gap),
        "build_s": result.build_s,
        "solve_s": result.solve_s,
    }
    return {**figures, **judged}


def _exact_hail(task: Task, o: Options) -> dict[str, Any]:
    from model.backends.iallocator import load_request
    from solvers.strategies.iallocator import IAllocatorOptions, answer

    path = task.input
    ans = answer(load_request(path), IAllocatorOptions(solver=o.solver))
    runs = [r.__dict__ for r in ans.runs]
    statuses = {str(r.get("status")) for r in runs}
    gaps = [r["gap"] for r in runs if isinstance(r.get("gap"), int | float)]
    if task.problem in MOVE_PROBLEMS:
        judged = judge_moves(path, json.loads(ans.response))
    else:
        judged = judge_allocation(path, {k: list(v) for k, v in ans.placements})
    if not runs:  # hail's screening found no node at all: nothing to optimise
        statuses = {"optimal" if judged["value"] else "infeasible"}
    status = statuses.pop() if len(statuses) == 1 else ",".join(sorted(statuses))
    objective = [list(r.get("objective") or ()) for r in runs]
    return {
        "status": status,
        "objective": objective,
        "bound": objective if status == "optimal" else None,  # proven: the bound is attained
        "gap": max(gaps) if gaps else None,
        "build_s": round(sum(r.get("build_s") or 0.0 for r in runs), 6),
        "solve_s": round(sum(r.get("solve_s") or 0.0 for r in runs), 6),
        **judged,
    }


def _exact_partition(task: Task, o: Options) -> dict[str, Any]:
    """exalloc's layout in bareon-allocator's own format (no overheads), checked."""
    from model.bareon.outputs import allocator_document
    from model.bareon.schema import ALLOCATOR_OVERHEADS, read_problem
    from solvers.strategies.partition import solve_layout

    problem = read_problem(task.input, task.hw)
    solved = solve_layout(problem, ALLOCATOR_OVERHEADS, options=o.solver)
    unallocated = solved.check.unallocated_mib
    return {
        "status": solved.status,
        "objective": solved.objective,
        "bound": solved.bound,
        "gap": solved.gap,
        "build_s": round(solved.build_s, 6),
        "solve_s": round(solved.solve_s, 6),
        "answer": {
            "layout": allocator_document(problem, solved.layout, ALLOCATOR_OVERHEADS),
            "unallocated_mib": unallocated,
        },
        "value": unallocated,
    }


# -- greedy runners -------------------------------------------------------------------------------


class ToolMissing(ExallocError):
    """The real greedy tool is not installed; the message says how to install it."""


def _tool(explicit: str | None, default: Path | str) -> str:
    path = explicit or (str(default) if Path(default).exists() else shutil.which(str(default)))
    if not path or not os.access(path, os.X_OK):
        raise ToolMissing(INSTALL_HINT)
    return path


def _greedy_squeeze(task: Task, o: Options) -> dict[str, Any]:
    path = task.input
    cmd = [_tool(o.hsqueeze, "hsqueeze"), "-t", path, "-C", "-v"]  # -v: says NOT_ENOUGH
    out, wall = run_tool(cmd, o.greedy_timeout)
    lines = out.splitlines()
    mode, nodes = "none", []
    for i, line in enumerate(lines):
        if line.startswith("'Nodes to offline'") or line.startswith("'Nodes to online'"):
            mode = "offline" if "offline" in line else "online"
            for name in lines[i + 1 :]:
                if not name.strip() or name.strip() == NOT_ENOUGH:
                    break
                nodes.append(name.strip())
            break
    moves = []
    for line in lines:  # "  gnt-instance migrate -f -n TARGET INSTANCE"
        words = line.split()
        if words[:2] == ["gnt-instance", "migrate"] and "-n" in words:
            moves.append((words[-1], words[words.index("-n") + 1]))
    judged = judge_squeeze(path, mode, nodes, moves, NOT_ENOUGH in lines)
    return {"tool": "hsqueeze", **judged, "wall_s": round(wall, 6)}


def _greedy_hail(task: Task, o: Options) -> dict[str, Any]:
    path = task.input
    out, wall = run_tool([_tool(o.hail, DEFAULT_HAIL), path], o.greedy_timeout)
    response = json.loads(out)
    if task.problem in MOVE_PROBLEMS:
        judged = judge_moves(path, response)
    else:
        judged = judge_allocation(path, response_placements(path, response))
    return {"tool": "hail", **judged, "info": response.get("info"), "wall_s": round(wall, 6)}


def _greedy_partition(task: Task, o: Options, exact: dict[str, Any] | None) -> dict[str, Any]:
    """bareon-allocator's way (LP, floored), timed on its own, judged by exalloc's checker."""
    from model.bareon.schema import read_problem
    from solvers.strategies.partition import lp_floor_baseline

    ours = (exact or {}).get("value")
    start = time.perf_counter()
    problem = read_problem(task.input, task.hw)
    baseline = lp_floor_baseline(problem, ours if isinstance(ours, int) else 0).to_json()
    wall = time.perf_counter() - start
    if not isinstance(ours, int):
        baseline["lost_mib"] = None  # nothing to measure it against
    keep = ("status", "unallocated_mib", "lost_mib", "broken", "layout")
    return {
        "tool": "lp-floor",
        "answer": {k: baseline.get(k) for k in keep},
        "value": baseline.get("unallocated_mib"),
        "violations": len(baseline.get("broken") or ()),
        "wall_s": round(wall, 6),
    }


ExactRunner = Callable[[Task, Options], dict[str, Any]]
GreedyRunner = Callable[[Task, Options, dict[str, Any] | None], dict[str, Any]]


@dataclass(frozen=True)
class Problem:
    """How to answer one kind of question exactly and greedily."""

    exact: ExactRunner
    greedy: GreedyRunner
    tool: str


def _group_problem(name: str, tool: str) -> Problem:
    """A super-cluster problem (programs/groups_batch.py)."""
    from programs import groups_batch

    return Problem(
        lambda t, o: groups_batch.exact(name, t.input, o),
        lambda t, o, _e: groups_batch.greedy(name, t.input, o),
        tool,
    )


def _htools_problem(name: str, tool: str) -> Problem:
    """hspace's, hbal's or hroller's question (programs/htools_batch.py)."""
    from programs import htools_batch

    return Problem(
        lambda t, o: htools_batch.exact(name, t.input, o),
        lambda t, o, _e: htools_batch.greedy(name, t.input, o),
        tool,
    )


PROBLEMS: dict[str, Problem] = {
    "squeeze": Problem(_exact_squeeze, lambda t, o, _e: _greedy_squeeze(t, o), "hsqueeze"),
    "allocate": Problem(_exact_hail, lambda t, o, _e: _greedy_hail(t, o), "hail"),
    "multi-allocate": Problem(_exact_hail, lambda t, o, _e: _greedy_hail(t, o), "hail"),
    "node-evacuate": Problem(_exact_hail, lambda t, o, _e: _greedy_hail(t, o), "hail"),
    "change-group": Problem(_exact_hail, lambda t, o, _e: _greedy_hail(t, o), "hail"),
    "partition": Problem(_exact_partition, _greedy_partition, "lp-floor"),
    "n1": _group_problem("n1", "hcheck"),
    "redistribute": _group_problem("redistribute", "design greedy"),
    "compress": _group_problem("compress", "design greedy"),
    "evacuate": _group_problem("evacuate", "hail node-evacuate + design"),
    "space": _htools_problem("space", "hspace"),
    "balance": _htools_problem("balance", "hbal"),
    "roll": _htools_problem("roll", "hroller"),
}


def solve_task(task: Task, options: Options) -> dict[str, Any]:
    """Answer one task; never raises, so a bad input is a recorded failure, not a dead batch.
    A live cluster's snapshot is answered from a private file and recorded under its label."""
    if task.snapshot is None:
        return _solve_task(task, options)
    with tempfile.TemporaryDirectory(prefix="exalloc-live-") as scratch:
        path = os.path.join(scratch, "cluster.data")
        Path(path).write_text(task.snapshot, encoding="utf-8", errors="surrogateescape")
        frozen = dataclasses.replace(task, input=path, snapshot=None, live=None)
        record = _solve_task(frozen, options)
    return {**record, "input": task.input}


def _solve_task(task: Task, options: Options) -> dict[str, Any]:
    record: dict[str, Any] = {
        "input": task.input,
        "problem": task.problem,
        "size": task.size,
        **dict.fromkeys(SOLVER_KEYS),
        "error": None,
    }
    start = time.perf_counter()
    problem = PROBLEMS.get(task.problem)
    exact: dict[str, Any] | None = None
    if task.error is not None:
        record.update(status="error", error=task.error)
    elif problem is None:
        record.update(status="error", error=f"no exalloc solver for problem {task.problem!r}")
    else:
        try:
            exact = problem.exact(task, options)
            record.update(exact)
        except InfeasibleError as err:  # an answer, not a failure: there is no solution
            record.update(status="infeasible", note=error_text(err))
        except Exception as err:  # noqa: BLE001 - every failure is recorded, none stops a batch
            record.update(status="error", error=error_text(err))
    record["wall_s"] = round(time.perf_counter() - start, 6)
    if options.compare and problem is not None and task.error is None:
        try:
            record["greedy"] = problem.greedy(task, options, exact)
        except Exception as err:  # noqa: BLE001
            record["greedy"] = {"tool": problem.tool, "error": error_text(err)}
    return record
