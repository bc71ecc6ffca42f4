"""Running job sets on a live cluster through LUXI, as htools' `-X` does (Ganeti's Jobs.hs).

A plan is a list of job sets run one after the other: each set's jobs are submitted together
(`SubmitManyJobs`, on a new connection), their ids printed ("Got job IDs 1,2"), and their
statuses polled (`QueryJobs`) after 0.5 s, then at doubling intervals up to 15 s, until none
is queued, waiting, cancelling or running. A set with a job that did not succeed stops the
run; so does a refused submission. An interrupt (SIGINT) lets the set under way finish and
submits no more; a second interrupt, or SIGTERM, stops at once (exit 2, as htools). The
opcodes carry htools' annotations: priority, dependencies, a comment and a reason trail.
docs/squeeze.md, "Running the plan (-X)", has the facts checked against hsqueeze 3.0.2.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from model.backends.luxi import (
    JOBS_UNFINISHED,
    LuxiConnection,
    Timeouts,
    query_jobs_status,
    submit_many_jobs,
)
from model.errors import JobError

FIRST_POLL_S = 0.5  # Jobs.hs waitForJobs: 500000 us, doubled after each poll
LONGEST_POLL_S = 15.0  # ... up to 15000000 us


@dataclass(frozen=True)
class JobSet:
    """Jobs submitted together (each a list of opcodes run in order), and what they do."""

    description: str
    jobs: tuple[tuple[Mapping[str, Any], ...], ...]


def moving(instances: Sequence[str], jobs: Sequence[tuple[Mapping[str, Any], ...]]) -> JobSet:
    """A jobset of moves, described as htools describes it (`getMoveOpCodes`)."""
    return JobSet("Moving instances " + ",".join(instances), tuple(jobs))


@dataclass(frozen=True)
class Annotation:
    """What htools adds to every opcode it submits: the comment and the reason trail say
    which tool asked and why (`annotateOpCode` in Ganeti's Hsqueeze.hs)."""

    comment: str
    source: str  # the reason trail's source, e.g. "exalloc"
    reason: str
    timestamp_ns: int
    priority: int = 0

    def __call__(self, opcode: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "priority": self.priority,
            "depends": None,
            "comment": self.comment,
            "reason": [[self.source, self.reason, self.timestamp_ns]],
            **opcode,
        }


@dataclass(frozen=True)
class SetOutcome:
    description: str
    job_ids: tuple[int, ...]
    statuses: tuple[str, ...]


@dataclass
class _Cancel:
    """Interrupts seen while the job sets run."""

    requests: int = 0
    say: Callable[[str], None] = field(default=print)

    def interrupt(self, *_: object) -> None:
        self.requests += 1
        if self.requests > 1:
            self.stop_now()
        self.say("Cancel request registered, will exit at the end of the current job set...")

    def stop_now(self, *_: object) -> None:
        self.say("Double cancel request, exiting now...")
        raise SystemExit(2)


def run_job_sets(
    socket_path: str,
    job_sets: Sequence[JobSet],
    annotate: Annotation,
    *,
    say: Callable[[str], None],
    timeouts: Timeouts | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[SetOutcome]:
    """Run `job_sets` in order; `say` prints progress lines (htools prints them on stdout).
    Raises JobError when a submission is refused, a job does not succeed, or the run is
    cancelled before its last set."""
    cancel = _Cancel(say=say)
    handlers = _install(cancel)
    done: list[SetOutcome] = []
    try:
        for k, job_set in enumerate(job_sets):
            if cancel.requests:
                left = "; ".join(s.description for s in job_sets[k:])
                raise JobError(
                    f"cancelled at the user's request after {k} of {len(job_sets)} job "
                    f"sets; not submitted: {left}"
                )
            done.append(_run_one(socket_path, job_set, annotate, say, timeouts, sleep))
    finally:
        _restore(handlers)
    return done


def _run_one(
    socket_path: str,
    job_set: JobSet,
    annotate: Annotation,
    say: Callable[[str], None],
    timeouts: Timeouts | None,
    sleep: Callable[[float], None],
) -> SetOutcome:
    jobs = [[annotate(op) for op in job] for job in job_set.jobs]
    with LuxiConnection(socket_path, timeouts) as connection:
        ids = submit_many_jobs(connection, jobs)
        say("Got job IDs " + ",".join(str(i) for i in ids))
        delay = FIRST_POLL_S
        while True:
            sleep(delay)
            statuses = query_jobs_status(connection, ids)
            if not any(s in JOBS_UNFINISHED for s in statuses):
                break
            delay = min(delay * 2, LONGEST_POLL_S)
    failed = [f"job {i} {s}" for i, s in zip(ids, statuses, strict=True) if s != "success"]
    if failed:
        raise JobError(
            f"not all jobs of '{job_set.description}' completed successfully: "
            f"{', '.join(failed)}; aborting"
        )
    return SetOutcome(job_set.description, tuple(ids), tuple(statuses))


def _install(cancel: _Cancel) -> dict[int, Any] | None:
    """Interrupts handled as htools does, while the sets run (main thread only: a server's
    worker thread cannot install handlers, and keeps the process's own)."""
    try:
        return {
            signal.SIGINT: signal.signal(signal.SIGINT, cancel.interrupt),
            signal.SIGTERM: signal.signal(signal.SIGTERM, cancel.stop_now),
        }
    except ValueError:
        return None


def _restore(handlers: dict[int, Any] | None) -> None:
    for sig, handler in (handlers or {}).items():
        signal.signal(sig, handler)


def print_flushed(line: str) -> None:
    """A progress line on stdout at once (the run may take hours: each set's ids as it starts)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
