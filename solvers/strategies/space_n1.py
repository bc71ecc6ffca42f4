"""Global N+1 inside hspace's exact answer (solvers/strategies/space.py) and its cost under a
deadline: the input's verdicts, shared by the solves posed on one state, and what the time
after a solve must hold (the final state's decisions, the independent check's replay), so that
the checked answer ends by its deadline (issue 40, item 4; docs/reliability.md "space under
--time-limit")."""

from __future__ import annotations

import time
from dataclasses import replace as evolve
from typing import Any

from model.n1 import Packing, Packings
from model.space import SpaceAnswer, SpaceProblem
from model.state import ClusterState
from solvers.options import SolverOptions
from solvers.strategies.n1 import decide_packing

#: What comes after a solve under global N+1 (the final state built, its N+1 decided, the
#: check's replay of every placement and plan), as a multiple of the input's own N+1
#: decisions: 4.4 s after 0.85 s on bench_space's 1,000 nodes (load 1.7), so 5.
AFTER_SOLVE_PER_INPUT_N1 = 5.0


class InputFailures:
    """The input's N+1 verdicts of the states solved on, shared by every solve posed on the
    same state: the tiered ladder's stage and each probe of its walk to the next spec (one
    instance, under global N+1) decide the same 1,000 failures of the same state again, 0.85 s
    each on bench_space's 1,000 nodes, 19 solves on 5 states in a 30 s ladder; and the
    standard phase decides those of the ladder's first state. A verdict depends on the state
    and the offline targets only (not on the spec); only decided ones (a plan, or a
    refutation) are kept, with the seconds their first decision took, so that a solve's
    reserve for what follows it does not shrink when they are read back. The first state and
    the latest are kept (`KEPT_STATES` in all)."""

    KEPT_STATES = 2

    def __init__(self) -> None:
        self._states: list[_StateFailures] = []

    def of(self, state: ClusterState, offline_targets: bool) -> _StateFailures:
        for entry in self._states:
            if entry.state is state and entry.offline_targets == offline_targets:
                return entry
        entry = _StateFailures(state, offline_targets)
        self._states.append(entry)
        if len(self._states) > self.KEPT_STATES:
            del self._states[1]  # the first (the input's, which the standard phase reads) stays
        return entry


class _StateFailures:
    """One state's failures: its Packings (the shared bins) and each node's decided verdict."""

    def __init__(self, state: ClusterState, offline_targets: bool) -> None:
        self.state = state
        self.offline_targets = offline_targets
        self.packings = Packings(state, offline_targets=offline_targets)
        self._known: dict[str, tuple[Packing, Any, float]] = {}

    def decide(self, node: str, solver: SolverOptions) -> tuple[Packing, Any, float]:
        """The node's packing, its verdict (not replayed: the final state's plans, which
        check_space replays, would fail after a wrong one, load only adds) and the seconds
        deciding it took."""
        if node in self._known:
            return self._known[node]
        began = time.perf_counter()
        pk = self.packings.of(node)
        v = decide_packing(self.state, pk, solver, replayed=False)
        known = (pk, v, time.perf_counter() - began)
        if v.evacuable is not None:
            self._known[node] = known
        return known


def seconds_left(deadline: float | None, reserve_s: float = 0.0) -> float | None:
    """What is left of `deadline` after `reserve_s`, never quite zero (a solver given 0 s
    would read it as no limit); None without a deadline."""
    return None if deadline is None else max(deadline - reserve_s - time.perf_counter(), 0.01)


def until(solver: SolverOptions, deadline: float | None) -> SolverOptions:
    """The options of one N+1 decision: a packing that needs a MIP solves at most until
    `deadline` (the stage's, less what it keeps for the check), not the whole answer's."""
    if deadline is None:
        return solver
    return evolve(solver, deadline_at=deadline)


#: The independent check's cost against the strategy's own final state (`final_state`, timed on
#: this machine at its present load), per add and per move of its plans' replay: on bench_space's
#: 1,000 nodes (load 1.7) the final state took 0.75 s for 23,680 adds, the check 2.62 s (its adds
#: with the policy checks 1.2 times the final state's, 34,682 moves 1.6 times an add each), so
#: 1.25 and 1.75.
CHECK_ADD_PER_ADD = 1.25
CHECK_MOVE_PER_ADD = 1.75


def check_estimate(
    problem: SpaceProblem, final: ClusterState, answer: SpaceAnswer, placed_s: float
) -> float:
    """Seconds the independent check (`check_space`) will take on this answer, from what
    building its final state took (`placed_s`): the check adds the same placements again, then
    replays each plan, about one move per primary of the groups that received instances. Kept
    out of the final state's N+1 decisions so that the checked answer ends by the deadline
    rather than the check running past it (issue 40, item 4: 0.8-1.3 s past each phase's
    share on 1,000 nodes under a 10 s limit)."""
    per_add = placed_s / max(answer.count, 1)
    if not problem.global_n1:
        return CHECK_ADD_PER_ADD * placed_s
    touched = {final.nodes[p.primary].group_uuid for p in answer.placements}
    moves = sum(len(final.nodes[n].primaries) for g in touched for n in problem.n1_scope.get(g, ()))
    return CHECK_ADD_PER_ADD * placed_s + CHECK_MOVE_PER_ADD * per_add * moves
