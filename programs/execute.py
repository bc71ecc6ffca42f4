"""`-X`: a program's plan run on the cluster it read through LUXI, as htools' -X runs its own
(model/backends/jobs.py; docs/squeeze.md "Running the plan (-X)", docs/groups.md).

The plan is printed first (unless the answer is JSON), then its job sets run one after the
other; progress lines go to stdout, or to stderr beside JSON.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from model.backends.jobs import Annotation, JobSet, SetOutcome, print_flushed, run_job_sets
from model.backends.luxi import default_socket
from model.errors import InputError, about
from programs.sources import ClusterSource, source_of


def check_luxi(args: Any) -> None:
    """-X needs the cluster read through LUXI: refused before anything is read or solved."""
    if getattr(args, "exec_jobs", False) and source_of(args).kind != "luxi":
        raise InputError("-X runs the plan's jobs through LUXI: read the cluster with -L")


def run_plan(
    source: ClusterSource,
    job_sets: Sequence[JobSet],
    *,
    command: str,
    comment: str,
    plan_text: str,
    json_out: bool,
) -> tuple[SetOutcome, ...]:
    """Print the plan, then run its job sets; every opcode says that exalloc `command` asked,
    and `comment` why (hsqueeze: "condensing by 2 nodes")."""
    if not json_out:
        print_flushed(plan_text.rstrip("\n"))
    with about(source.label):
        return tuple(
            run_job_sets(
                source.where or default_socket(),
                job_sets,
                annotation(command, comment),
                say=_stderr_line if json_out else print_flushed,
            )
        )


def annotation(command: str, comment: str) -> Annotation:
    """htools' comment and reason trail on every opcode, naming exalloc."""
    from programs.version import version

    ver = version()
    return Annotation(
        comment=f"{comment} (exalloc) version {ver}",
        source="exalloc",
        reason=f"exalloc {command} (exalloc) version {ver} called",
        timestamp_ns=time.time_ns(),
    )


def _stderr_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Executed:
    """A program's report whose plan ran: its text went out before the jobs (nothing more to
    print), its JSON lists the job sets run, with their ids and statuses."""

    report: Any
    outcomes: tuple[SetOutcome, ...]
    printed: bool

    def text(self) -> str:
        return "" if self.printed else self.report.text()

    def to_json(self) -> dict[str, Any]:
        sets = [
            {"description": o.description, "job_ids": list(o.job_ids), "statuses": list(o.statuses)}
            for o in self.outcomes
        ]
        return {**self.report.to_json(), "executed": sets}

    def __getattr__(self, name: str) -> Any:  # notes, stderr, exit_code: the report's
        return getattr(self.report, name)
