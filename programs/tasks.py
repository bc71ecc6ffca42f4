"""The unit of work of `exalloc compare` and `exalloc batch`: inputs found and classified into
tasks, and the options a run shares.

An input's kind decides its problem: `*.data` is a snapshot (squeeze, and the super-cluster
problems; in a folder named `space/`, `balance/` or `roll/` that problem alone), an
IAllocator `*.json` is answered by its request type (allocate, multi-allocate), a Bareon
fixture `*.yaml` is a partition. How each problem is answered is programs/runners.py (the
registry), how an answer is judged and shown programs/judging.py; both programs build on
these three and on nothing of each other.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model.errors import ExallocError, InputError, UsageError
from programs.groups_batch import METRICS as GROUP_METRICS
from programs.groups_batch import problems_of as group_problems
from programs.htools_batch import METRICS as HTOOLS_METRICS
from programs.htools_batch import problem_of as folder_problem
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
    **HTOOLS_METRICS,  # space, balance, roll (programs/htools_batch.py)
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
        return [Task(path, UNKNOWN, error=f"{path}: cannot classify: {error_text(err)}")]


def _classify(path: str) -> list[Task]:
    suffix = Path(path).suffix.lower()
    if suffix == ".data":
        size = _snapshot_nodes(path)
        posed = folder_problem(path)  # data/space/, data/balance/, data/roll/
        if posed is not None:
            return [Task(path, posed, size)]
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
        return dataclasses.replace(task, error=error_text(err))
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


def error_text(err: BaseException) -> str:
    """One line: the message of an ExallocError, else the exception and where it came from."""
    if isinstance(err, ExallocError):
        return " ".join(str(err).split())
    where = traceback.extract_tb(err.__traceback__)[-1:] if err.__traceback__ else []
    at = f" at {Path(where[0].filename).name}:{where[0].lineno}" if where else ""
    first = (str(err).strip().splitlines() or [""])[0]
    return f"internal error {type(err).__name__}: {first}{at}"


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
