"""The unit of work of `exalloc compare` and `exalloc batch`: inputs found and classified into
tasks, the problem registry, and each task solved beside the greedy tool and judged.

Both programs build on this module and on nothing of each other.

An input's kind decides its problem: `*.data` is a snapshot (squeeze), an IAllocator `*.json`
is answered by its request type (allocate, multi-allocate), a Bareon fixture `*.yaml` is a
partition. Each problem has an exact runner (the exalloc program, called as the CLI would) and a
greedy runner (the real hail / hsqueeze, or the LP-floor baseline), and both come back as plain
dicts so that one JSON line per (input, problem) can be written by whoever called them.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import shutil
import subprocess
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model.errors import ExallocError, InfeasibleError, InputError, UsageError
from programs.groups_batch import METRICS as GROUP_METRICS
from programs.groups_batch import problems_of as group_problems
from programs.reference import DEFAULT_HAIL
from solvers.options import DEFAULT_OPTIONS, SolverOptions

INSTALL_HINT = (
    "real htools not installed: run scripts/get-ganeti-reference"
    " (Debian: apt-get install ganeti-htools)"
)
UNKNOWN = "unknown"
# The number each problem is judged by in tables and plots, and which way is better.
METRICS: dict[str, tuple[str, str]] = {
    "squeeze": ("nodes freed, moves", "max"),
    "allocate": ("placed, slots lost", "max"),
    "multi-allocate": ("placed, slots lost", "max"),
    "partition": ("MiB lost", "min"),
    "node-evacuate": ("moved, score after", "max"),
    "change-group": ("moved, score after", "max"),
    **GROUP_METRICS,  # n1, redistribute, compress, evacuate (programs/groups_batch.py)
}
ALLOCATION_PROBLEMS = ("allocate", "multi-allocate")
MOVE_PROBLEMS = ("node-evacuate", "change-group")
SOLVER_KEYS = ("status", "objective", "bound", "gap", "build_s", "solve_s")


@dataclass(frozen=True)
class Options:
    """Solver and tool options shared by every input of a run (picklable, for the workers)."""

    solver: SolverOptions = DEFAULT_OPTIONS
    compare: bool = False
    greedy_timeout: float = 300.0
    hsqueeze: str | None = None  # path of the real tool when not the standard one
    hail: str | None = None


@dataclass(frozen=True)
class Task:
    """One (input, problem) pair: the unit of work and the key of a result line."""

    input: str
    problem: str
    size: int | None = None
    error: str | None = None  # set when classifying already failed
    hw: str | None = None  # the hardware YAML of a bare Bareon schema
    live: str | None = None  # a live cluster's source (rapi:ADDRESS, luxi:SOCKET); input: its label
    snapshot: str | None = None  # that cluster as read once, in the htools text format

    @property
    def key(self) -> tuple[str, str]:
        return (self.input, self.problem)


# -- classification ------------------------------------------------------------------------------


def _snapshot_nodes(path: str) -> int | None:
    """Node count of a text snapshot: the non-empty lines of its second section."""
    try:
        sections = Path(path).read_text().split("\n\n")
    except (OSError, UnicodeDecodeError):
        return None
    return sum(1 for line in sections[1].splitlines() if line.strip()) if len(sections) > 1 else 0


def _read_yaml(path: str) -> tuple[Any, str | None]:
    from model.bareon.schema import load_yaml  # the one YAML reader (C loader, bounded)

    try:
        return load_yaml(path)[0], None
    except ExallocError as err:
        return None, str(err)  # names the file (and line)


def _is_hardware(doc: Any) -> bool:
    return isinstance(doc, dict) and "disks" in doc and "dynamic_schema" not in doc


def _disk_count(hw: Any) -> int | None:
    disks = hw.get("disks") if isinstance(hw, dict) else None
    return len(disks) if isinstance(disks, list) else None


def _classify_yaml(path: str) -> list[Task]:
    """A fixture is one partition; a bare schema pairs with the one hardware file beside it;
    a hardware file is an input only through the schemas beside it."""
    doc, error = _read_yaml(path)
    if error is not None:
        return [Task(path, "partition", error=error)]
    if isinstance(doc, dict) and "dynamic_schema" in doc and "hw_info" in doc:
        return [Task(path, "partition", _disk_count(doc["hw_info"]))]
    siblings = [
        (str(p), sdoc)
        for p in sorted(Path(path).parent.glob("*.y*ml"))
        if str(p) != path and p.suffix.lower() in (".yaml", ".yml")
        for sdoc in [_read_yaml(str(p))[0]]
    ]
    if isinstance(doc, list):
        hws = [(p, d) for p, d in siblings if _is_hardware(d)]
        if len(hws) != 1:
            found = "none" if not hws else ", ".join(Path(p).name for p, _ in hws)
            why = f"a Bareon schema needs exactly one hardware YAML beside it (found {found})"
            return [Task(path, "partition", error=f"{path}: {why}")]
        return [Task(path, "partition", _disk_count(hws[0][1]), hw=hws[0][0])]
    if _is_hardware(doc):
        if any(isinstance(d, list) for _, d in siblings):
            return []
        return [Task(path, "partition", error=f"{path}: hardware info without a schema beside it")]
    return [Task(path, "partition", error=f"{path}: not a Bareon fixture, schema or hardware")]


def classify(path: str) -> list[Task]:
    """The problems an input poses; a file that cannot be classified is a failed task, so one
    bad input never stops a batch or a comparison at planning."""
    try:
        return _classify(path)
    except Exception as err:  # noqa: BLE001 - whatever the file holds, it is that input's failure
        return [Task(path, UNKNOWN, error=f"{path}: cannot classify: {_error_text(err)}")]


def _classify(path: str) -> list[Task]:
    suffix = Path(path).suffix.lower()
    if suffix == ".data":
        size = _snapshot_nodes(path)
        return [Task(path, p, size) for p in ("squeeze", *group_problems(path))]
    if suffix == ".json":
        try:
            doc = json.loads(Path(path).read_text())
            kind = doc["request"]["type"]
            size = len(doc.get("nodes", {}))
        except (OSError, UnicodeDecodeError, ValueError) as err:
            return [Task(path, UNKNOWN, error=f"{path}: not a readable JSON file: {err}")]
        except RecursionError:
            why = "not a readable JSON file: nested too deeply"
            return [Task(path, UNKNOWN, error=f"{path}: {why}")]
        except (KeyError, TypeError):
            return [
                Task(path, UNKNOWN, error=f"{path}: not an IAllocator request (no request.type)")
            ]
        return [Task(path, str(kind), size)]
    if suffix in (".yaml", ".yml"):
        return _classify_yaml(path)
    return [Task(path, UNKNOWN, error=f"{path}: unknown input kind (.data, .json or .yaml)")]


def live_tasks(args: Any) -> list[Task]:
    """The live clusters of `-m` / `-L` as squeeze tasks, keyed by their labels; each is read
    later, once, by `freeze` (docs/live.md)."""
    from programs.sources import live_sources

    tasks: dict[str, Task] = {}
    for source in live_sources(args):  # each once, in the order given
        tasks.setdefault(source.label, Task(source.label, "squeeze", live=source.spec))
    return list(tasks.values())


def freeze(task: Task) -> Task:
    """A live task with its cluster read now, in this process, as a text snapshot that travels
    with the task (workers, local or Dask, never contact the cluster); a failed read is a
    failed task."""
    if task.live is None or task.snapshot is not None or task.error is not None:
        return task
    from model.backends.text import dump_text
    from programs.sources import source_of_label

    source = source_of_label(task.live)
    if source is None:
        return dataclasses.replace(task, error=f"{task.input}: not a live cluster")
    try:
        cluster = source.load()
    except ExallocError as err:
        return dataclasses.replace(task, error=_error_text(err))
    return dataclasses.replace(task, snapshot=dump_text(cluster), size=len(cluster.nodes))


def input_name(label: str) -> str:
    """How tables show an input: a file by its name, a live cluster by its whole label."""
    from programs.sources import source_of_label

    return label if source_of_label(label) is not None else Path(label).name


def require_inputs(inputs: list[str], tasks: list[Task], given: Sequence[str] = ()) -> None:
    """No input named at all is a usage error (exit 2); named ones that hold none, an input
    error."""
    if not inputs and not tasks:
        if given:
            raise InputError(f"no inputs found in {', '.join(given)}")
        raise UsageError("no inputs: give files, folders or globs, -m ADDRESS or -L[SOCKET]")


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


def _call(cmd: list[str], timeout: float) -> tuple[str, float]:
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise ExallocError(f"{Path(cmd[0]).name} did not finish in {timeout:g} s") from None
    wall = time.perf_counter() - start
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise ExallocError(f"{Path(cmd[0]).name} failed: {last}")
    return done.stdout, wall


def _greedy_squeeze(task: Task, o: Options) -> dict[str, Any]:
    path = task.input
    cmd = [_tool(o.hsqueeze, "hsqueeze"), "-t", path, "-C", "-v"]  # -v: says NOT_ENOUGH
    out, wall = _call(cmd, o.greedy_timeout)
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
    out, wall = _call([_tool(o.hail, DEFAULT_HAIL), path], o.greedy_timeout)
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
}


def _error_text(err: BaseException) -> str:
    """One line: the message of an ExallocError, else the exception and where it came from."""
    if isinstance(err, ExallocError):
        return " ".join(str(err).split())
    where = traceback.extract_tb(err.__traceback__)[-1:] if err.__traceback__ else []
    at = f" at {Path(where[0].filename).name}:{where[0].lineno}" if where else ""
    first = (str(err).strip().splitlines() or [""])[0]
    return f"internal error {type(err).__name__}: {first}{at}"


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
            record.update(status="infeasible", note=_error_text(err))
        except Exception as err:  # noqa: BLE001 - every failure is recorded, none stops a batch
            record.update(status="error", error=_error_text(err))
    record["wall_s"] = round(time.perf_counter() - start, 6)
    if options.compare and problem is not None and task.error is None:
        try:
            record["greedy"] = problem.greedy(task, options, exact)
        except Exception as err:  # noqa: BLE001
            record["greedy"] = {"tool": problem.tool, "error": _error_text(err)}
    return record


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


def options_from(args: Any, compare: bool) -> Options:
    """The options of `exalloc batch` and `compare` (both define --greedy-timeout)."""
    return Options(
        solver=args.solver_options,
        compare=compare,
        greedy_timeout=args.greedy_timeout,
        # the same override `exalloc hail --compare` honours, and its hsqueeze twin
        hail=os.environ.get("EXALLOC_REAL_HAIL") or None,
        hsqueeze=os.environ.get("EXALLOC_REAL_HSQUEEZE") or None,
    )


INPUT_SUFFIXES = (".data", ".json", ".yaml", ".yml")


def discover(spec: str) -> list[str]:
    """Inputs from a directory (recursively, known suffixes only), a glob, or one file."""
    path = Path(spec)
    if path.is_dir():
        found = [
            str(p)
            for p in sorted(path.rglob("*"))
            if p.is_file() and p.suffix.lower() in INPUT_SUFFIXES and not p.name.startswith(".")
        ]
    elif any(c in spec for c in "*?["):
        found = sorted(p for p in glob.glob(spec, recursive=True) if Path(p).is_file())
    elif path.is_file():
        found = [spec]
    else:
        raise InputError(f"{spec}: no such file or directory")
    if not found:
        raise InputError(f"{spec}: no inputs (.data, .json, .yaml) found")
    return found


def plan(inputs: Iterable[str]) -> list[Task]:
    """Every (input, problem) task, in input order, each key once."""
    seen: set[tuple[str, str]] = set()
    tasks = []
    for path in inputs:
        for task in classify(path):
            if task.key not in seen:
                seen.add(task.key)
                tasks.append(task)
    return tasks


# -- the results file -----------------------------------------------------------------------------
