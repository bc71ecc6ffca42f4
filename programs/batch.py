"""`exalloc batch`: answer many inputs in parallel into a resumable JSON-lines file.

Only this process writes the results file, one complete line per `os.write` on an O_APPEND
descriptor followed by fsync, so a run killed at any point loses at most the inputs in flight.
On start the file is read back: a torn last line (a kill inside the write, or a full disk) is
cut off, and every (input, problem) already present is skipped, so reruns never duplicate.
Work goes to a local process pool, or with `--scheduler` to a Dask distributed cluster.

The lock on the results file is a POSIX record lock (`lockf`): it belongs to this process
alone, so forked pool workers never hold it, and it goes the moment this process dies, even
by SIGKILL. The pool's workers die with it (Linux's parent-death signal), so a rerun right
after a kill starts at once (docs/batch.md, "Interrupted runs").
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model.errors import InputError
from programs.executors import run_dask, run_local
from programs.htools_batch import TOTALS as HTOOLS_TOTALS
from programs.judging import metric_value, verdict
from programs.options import (
    greedy_timeout_option,
    live_source_options,
    number_type,
    solver_options,
)
from programs.tasks import (
    discover,
    freeze,
    live_tasks,
    options_from,
    plan,
    require_inputs,
)

# -- inputs ---------------------------------------------------------------------------------------


class ResultsFile:
    """An append-only JSON-lines file with an exclusive lock; one line is one `os.write`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.records: list[dict[str, Any]] = []
        self.torn = 0
        try:
            self._fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as err:
            raise InputError(f"{path}: cannot open for appending: {err.strerror}") from None
        try:
            # a process's own lock (not flock, whose lock forked workers would share); any
            # other descriptor of this file closed in this process would drop it, so the file
            # is read through this descriptor only
            fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._fd)
            raise InputError(f"{path}: another batch is writing it") from None
        self._load()

    def _read_all(self) -> bytes:
        chunks, offset = [], 0
        while chunk := os.pread(self._fd, 1 << 20, offset):
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks)

    def _load(self) -> None:
        data = self._read_all()
        end = data.rfind(b"\n") + 1
        if end < len(data):  # a torn last line: cut it off so the next line starts clean
            os.ftruncate(self._fd, end)
            self.torn += 1
        for raw in data[:end].splitlines():
            try:
                record = json.loads(raw)
            except ValueError:
                self.torn += 1
                continue
            if isinstance(record, dict) and "input" in record and "problem" in record:
                self.records.append(record)

    @property
    def done(self) -> set[tuple[str, str]]:
        return {(r["input"], r["problem"]) for r in self.records}

    def append(self, record: dict[str, Any]) -> None:
        line = (json.dumps(record, separators=(",", ":"), default=str) + "\n").encode()
        view = memoryview(line)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        os.fsync(self._fd)
        self.records.append(record)

    def close(self) -> None:
        os.close(self._fd)


def read_results(path: str) -> list[dict[str, Any]]:
    """The complete lines of a results file (a torn last line is ignored), for reports."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise InputError(f"{path}: cannot read: {err.strerror}") from None
    out = []
    for raw in data[: data.rfind(b"\n") + 1].splitlines():
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if isinstance(record, dict) and "input" in record and "problem" in record:
            out.append(record)
    return out


# -- progress -------------------------------------------------------------------------------------


class Progress:
    """A tqdm bar on stderr (counts, rate, ETA); silent when stderr is not a terminal."""

    def __init__(self, total: int, initial: int, enabled: bool) -> None:
        self._bar = None
        self.counts: Counter[str] = Counter()
        if enabled and total:
            from tqdm import tqdm

            tqdm.monitor_interval = 0  # no monitor thread: worker processes are forked later
            try:
                sized = os.get_terminal_size(sys.stderr.fileno()).columns > 0
            except (OSError, ValueError):
                sized = False
            self._bar = tqdm(
                total=total,
                initial=initial,
                unit="input",
                file=sys.stderr,
                dynamic_ncols=sized,
                # a terminal that reports no size (a bare pty) would hide the bar
                ncols=None if sized else 100,
                nrows=None if sized else 24,
                smoothing=0.1,
            )

    def update(self, record: dict[str, Any]) -> None:
        self.counts["failed" if record.get("error") else "ok"] += 1
        if self._bar is not None:
            self._bar.set_postfix(ok=self.counts["ok"], failed=self.counts["failed"], refresh=False)
            self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


# -- the command ----------------------------------------------------------------------------------


# What the summary's totals add up, per problem (see compare.metric_value).
TOTALS = {
    "squeeze": "nodes freed",
    "allocate": "slots lost",
    "multi-allocate": "slots lost",
    "partition": "MiB lost",
    "node-evacuate": "instances moved",
    "change-group": "instances moved",
    "n1": "nodes not evacuable",
    "redistribute": "relocations",
    "compress": "groups emptiable",
    "evacuate": "instances evacuated",
    **HTOOLS_TOTALS,  # space, balance, roll
}


def _total(values: Iterable[float]) -> int | float:
    total = sum(values)
    return int(total) if float(total).is_integer() else total


def summarise(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per problem: counts, failures, verdicts against greedy, median exact time."""
    rows = []
    for problem in sorted({r["problem"] for r in records}):
        rs = [r for r in records if r["problem"] == problem]
        ok = [r for r in rs if not r.get("error")]
        verdicts = Counter(verdict(r) for r in rs)
        judged = any(r.get("greedy") for r in rs)  # else no greedy tool ran: "-", not 0
        times = sorted(r["wall_s"] for r in ok if isinstance(r.get("wall_s"), int | float))
        pairs = [
            (a, b)
            for r in ok
            if (a := metric_value(problem, r)) is not None
            and (b := metric_value(problem, r.get("greedy") or {})) is not None
        ]
        rows.append(
            {
                "problem": problem,
                "metric": TOTALS.get(problem, "-"),
                "inputs": len(rs),
                "ok": len(ok),
                "failed": len(rs) - len(ok),
                "optimal": sum(1 for r in ok if r.get("status") == "optimal"),
                "exact_better": verdicts["exact better"] if judged else None,
                "same": verdicts["same"] if judged else None,
                "greedy_better": verdicts["greedy better"] if judged else None,
                # totals over the inputs both answered, so the two columns compare
                "exact_total": _total(a for a, _ in pairs) if pairs else None,
                "greedy_total": _total(b for _, b in pairs) if pairs else None,
                "median_s": times[len(times) // 2] if times else None,
            }
        )
    return rows


@dataclass(frozen=True)
class BatchReport:
    out: str
    planned: int
    skipped: int
    ran: int
    failed_now: int
    torn: int
    elapsed_s: float
    summary: tuple[dict[str, Any], ...] = field(default=())

    def text(self) -> str:
        lines = [
            f"{self.out}: {self.ran} ran now ({self.failed_now} failed), {self.skipped} already "
            f"done, {self.planned} in all, {self.elapsed_s:.1f} s"
        ]
        if self.torn:
            lines.append(f"ignored {self.torn} torn line(s) left by an interrupted run")
        columns = (
            ("problem", "problem"),
            ("metric", "metric"),
            ("inputs", "inputs"),
            ("ok", "ok"),
            ("failed", "failed"),
            ("optimal", "optimal"),
            ("exact better", "exact_better"),
            ("same", "same"),
            ("greedy better", "greedy_better"),
            ("exalloc total", "exact_total"),
            ("greedy total", "greedy_total"),
            ("median s", "median_s"),
        )
        head = tuple(label for label, _ in columns)
        keys = tuple(key for _, key in columns)
        rows = [head] + [
            tuple(
                f"{row[k]:.3g}"
                if isinstance(row[k], float)
                else "-"
                if row[k] is None
                else str(row[k])
                for k in keys
            )
            for row in self.summary
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines.append("")
        lines += [
            "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
        ]
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        return {
            "out": self.out,
            "planned": self.planned,
            "skipped": self.skipped,
            "ran": self.ran,
            "failed": self.failed_now,
            "torn": self.torn,
            "elapsed_s": self.elapsed_s,
            "summary": list(self.summary),
        }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inputs", nargs="*", metavar="DIR_OR_GLOB", help="folders, globs or files")
    live_source_options(parser, repeatable=True)
    parser.add_argument("--out", required=True, metavar="RESULTS.jsonl", help="results (appended)")
    parser.add_argument(
        "--workers",
        type=number_type(1, strict=False, integer=True),
        default=2,
        help="local worker processes (default 2)",
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="run on this Dask distributed scheduler (e.g. tcp://host:8786) instead",
    )
    parser.add_argument(
        "--compare", action="store_true", help="also run the greedy tool on every input"
    )
    greedy_timeout_option(parser)
    parser.add_argument(
        "--no-progress", dest="no_progress", action="store_true", help="no progress bar"
    )
    solver_options(parser)
    # its own bar (one line per finished input), not the solves' status line (cli._progress)
    parser.set_defaults(own_progress=True)


def run(args: Any) -> BatchReport:
    start = time.perf_counter()
    out = os.path.realpath(args.out)
    inputs: list[str] = []
    for spec in args.inputs:  # the results file itself is never an input
        inputs.extend(p for p in discover(spec) if p not in inputs and os.path.realpath(p) != out)
    live = live_tasks(args)
    require_inputs(inputs, live, args.inputs)
    tasks = plan(inputs) + live
    options = options_from(args, compare=args.compare)
    results = ResultsFile(args.out)
    try:
        done = results.done
        # a live cluster is read only when its task runs now (a done one is not read again)
        todo = [freeze(t) for t in tasks if t.key not in done]
        skipped = len(tasks) - len(todo)
        enabled = args.progress or (not args.no_progress and sys.stderr.isatty())
        if args.scheduler:
            stream = run_dask(todo, options, args.scheduler)
        else:
            stream = run_local(todo, options, min(args.workers, max(1, len(todo))))
        progress = Progress(len(tasks), skipped, enabled)
        ran = failed = 0
        try:
            for record in stream:
                results.append(record)
                progress.update(record)
                ran += 1
                failed += bool(record.get("error"))
        finally:
            progress.close()
        keys = {t.key for t in tasks}
        mine = [r for r in results.records if (r["input"], r["problem"]) in keys]
        return BatchReport(
            out=args.out,
            planned=len(tasks),
            skipped=skipped,
            ran=ran,
            failed_now=failed,
            torn=results.torn,
            elapsed_s=round(time.perf_counter() - start, 3),
            summary=tuple(summarise(mine)),
        )
    finally:
        results.close()
