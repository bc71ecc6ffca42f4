"""`exalloc balance` on a group the model does not score exactly (location tags, migration
tags, desired locations: `model.balance.balance_data`'s `unmodelled`): every placement at
most K of hbal's steps away, a proof by enumeration when it ends (docs/balance.md, "The
model"). solvers/strategies/balance.py calls it in place of the planes and the models."""

from __future__ import annotations

import time

from model.balance import BalanceProblem, Step, offered_steps
from model.resources import FailMode
from model.state import ClusterState

#: Steps tried at most by the enumeration of a group the model does not score exactly
#: (location tags, migration tags, desired locations): every placement at most K of hbal's
#: steps away, each passing htools' checks where it is made, scored by model/score.py, a
#: proof by enumeration when it ends. K = 1 is hbal's own first round (it tries every single
#: move: 15-81 steps on tests/hbal_cases.py's 3-6-node groups, 53,000 on a 40-node one);
#: a level whose estimate (the last level's steps per state) would pass it is not started.
#: On Ganeti's hbal-migration-1.data, K = 4: 71,820 steps, proven in 11 s (load 6)
EXHAUSTIVE_MOVES = 100_000


def exhaustive(
    problem: BalanceProblem, k: int, deadline: float | None, fewest_to: float | None = None
) -> tuple[tuple[Step, ...], float, tuple[float, ...], int, bool]:
    """Every state at most `k` of hbal's steps away (`offered_steps` where each is made, each
    passing htools' checks, `ClusterState.move`), breadth first, each placement once (a state
    is its instances' placement, so one first reached in d steps offers all a later visit
    would), scored by model/score.py: the steps to the one of least score (ties: fewer steps,
    then the first found), or with `fewest_to` the fewest steps reaching it (ties: the least
    score); their scores after each step; the steps tried; and whether the search was
    complete (False once EXHAUSTIVE_MOVES steps were tried or the deadline passed: the best
    found so far is then a plan, not a proof)."""
    from model.score import cluster_score

    force = problem.rules.ignore_soft_errors
    group = problem.group_uuid
    names = sorted(problem.movable)
    before = cluster_score(problem.state, group)

    def rank(steps: tuple[Step, ...], score: float) -> tuple:
        if fewest_to is None:
            return (score, len(steps))
        return (0 if score <= fewest_to + 1e-12 else 1, len(steps), score)

    def placement(state: ClusterState) -> tuple:
        return tuple(state.locations[n] for n in names)

    best: tuple[tuple, tuple[Step, ...], tuple[float, ...]] = (rank((), before), (), ())
    frontier: list[tuple[ClusterState, tuple[Step, ...], tuple[float, ...]]] = [
        (problem.state, (), ())
    ]
    seen = {placement(problem.state)}
    tried = 0
    per_state = None  # steps offered per state expanded, on the last level

    def stopped() -> tuple[tuple[Step, ...], float, tuple[float, ...], int, bool]:
        return best[1], (best[2][-1] if best[2] else before), best[2], tried, False

    for _ in range(k):
        if per_state is not None and tried + per_state * len(frontier) > EXHAUSTIVE_MOVES:
            return stopped()  # the next level would not end within the budget
        following = []
        level_began = tried
        for state, steps, scores in frontier:
            for st in offered_steps(problem, state):
                tried += 1
                if tried > EXHAUSTIVE_MOVES or (
                    deadline is not None and tried % 64 == 0 and time.perf_counter() > deadline
                ):
                    return stopped()
                after = state.move(st.instance, st.kind, st.target, force=force)
                if isinstance(after, FailMode):  # htools refuses the step here
                    continue
                where = placement(after)
                if where in seen:
                    continue
                seen.add(where)
                score = cluster_score(after, group)
                seq, sc = (*steps, st), (*scores, score)
                if rank(seq, score) < best[0]:
                    best = (rank(seq, score), seq, sc)
                following.append((after, seq, sc))
        per_state = (tried - level_began) / max(len(frontier), 1)
        frontier = following
        if not frontier or (fewest_to is not None and best[0][0] == 0):
            break  # nothing new, or the fewest steps to the target found at this depth
    return best[1], (best[2][-1] if best[2] else before), best[2], tried, True
