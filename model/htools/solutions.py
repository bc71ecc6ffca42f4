"""Allocation solutions as hail collects, filters and describes them
(Cluster/AllocationSolution.hs; docs/hail.md, "Allocate").

`choose` is the one place where the global N+1 check is consulted: hail sorts a collection of
successful placements by score (equal scores: the later candidate first), asks the check about
them in that order and keeps the first that passes; every placement asked about before it and
refused counts as one `FailN1` failure and is no longer a success.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from model.backends.iallocator_response import format_failure_counts
from model.backends.text import printf_fixed
from model.htools.capacity import N1Check, N1Verdict, Placement
from model.resources import FailMode


@dataclass(frozen=True)
class AllocSolution:
    """htools' AllocSolution: failure counts, successes, the chosen placement, log lines."""

    failures: Counter = field(default_factory=Counter)
    allocs: int = 0
    solution: Placement | None = None
    log: tuple[str, ...] = ()
    # the N+1 verdicts hail asked for, in order (for --json and the lead's comparisons)
    verdicts: tuple[tuple[Placement, N1Verdict], ...] = field(default=(), compare=False)

    @property
    def failure_count(self) -> int:
        return sum(self.failures.values())


def choose(
    ranked: Iterable[Placement], allocs: int, failures: Mapping[FailMode, int], check: N1Check
) -> AllocSolution:
    """collectionToSolution FailN1 (N+1 predicate): `ranked` yields the collection's
    successful placements in hail's sorted order; the first the check accepts wins."""
    dropped = 0
    asked: list[tuple[Placement, N1Verdict]] = []
    chosen: Placement | None = None
    for placement in ranked:
        verdict = check.verdict(placement)
        asked.append((placement, verdict))
        if verdict.redundant:
            chosen = placement
            break
        dropped += 1
    counts = Counter(failures)
    if dropped:
        counts[FailMode.N1] += dropped
    return AllocSolution(counts, allocs - dropped, chosen, (), tuple(asked))


def sum_allocs(a: AllocSolution, b: AllocSolution) -> AllocSolution:
    """sumAllocs: failures and successes add up; the better placement is kept, `b` (the
    later one) on equal scores (bestAllocElement: `if a < b then a else b`)."""
    best = a.solution
    if best is None:
        best = b.solution
    elif b.solution is not None and not best.score < b.solution.score:
        best = b.solution
    return AllocSolution(
        a.failures + b.failures,
        a.allocs + b.allocs,
        best,
        b.log + a.log,
        a.verdicts + b.verdicts,
    )


def failure_text(failures: Mapping[FailMode, int]) -> str:
    return format_failure_counts({str(k): v for k, v in failures.items()})


def describe(sol: AllocSolution, metric: str | None = None) -> str:
    """genericDescribeSolution: the score, successes and failures, or why nothing fits.
    `metric` replaces the formatted score (hail prints `%.8f`)."""
    if sol.solution is None:
        reasons = failure_text(sol.failures) if sol.failure_count else "unknown reasons"
        return "No valid allocation solutions, failure reasons: " + reasons
    score = metric if metric is not None else printf_fixed(sol.solution.score, 8)
    return (
        f"score: {score}, successes {sol.allocs}, failures {sol.failure_count} "
        f"({failure_text(sol.failures)}) for node(s) {'/'.join(sol.solution.node_names)}"
    )


def annotated(sol: AllocSolution) -> AllocSolution:
    """annotateSolution: the description in front of the log."""
    return replace(sol, log=(describe(sol), *sol.log))


POLICY_RAW = {"preferred": "preferred", "last_resort": "last_resort", "unallocable": "unallocable"}


def group_lines(group_name: str, policy: str, result: AllocSolution | str) -> list[str]:
    """solutionDescription: each log line prefixed with the group, or the group's error."""
    if isinstance(result, str):
        return [f"Group {group_name}: error {result}"]
    return [f"Group {group_name} ({POLICY_RAW.get(policy, policy)}): {line}" for line in result.log]
