"""hspace's standard question after moving existing instances first, exactly over every
sequence of at most N of hbal's moves (`exalloc space --move-existing`, ganeti issue 597;
docs/space.md, "Moving existing instances first").

A search over the clusters the moves reach, breadth first (so that the answer has the fewest
moves among the best found): every state one offered hbal step leads to
(`model.space_moves.children`), the same cluster reached twice kept once; each state's count
is the exact standard allocation of `solvers.strategies.space` on it, solved only when the
state's row bound (`model.space.count_bound`) beats the best count found. When every
state within N moves has been seen, and every count solved was proven, the answer is optimal
over all sequences of at most N moves; when the time limit stops the search first, it is the
best found, status `feasible`, no bound claimed. The answer (moves, then new instances) is
replayed by `model.check.check_space_moves` before it is returned.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from model.balance import Step
from model.check import check_space_moves
from model.space import SpaceOptions, Spec, count_bound, space_problem, with_node_status
from model.space_moves import MoveOptions, children, location_key
from model.state import ClusterState
from solvers.options import DEFAULT_OPTIONS, SolverOptions
from solvers.strategies.space import SpaceResult, problem_of, solve_problem


@dataclass(frozen=True)
class MovesResult:
    """The best count after at most N moves, the moves, and how far the search got."""

    moves: tuple[Step, ...]
    result: SpaceResult  # the standard allocation on the moved cluster
    before: int  # the count without moves
    status: str  # optimal: every sequence of at most N moves seen; feasible: stopped early
    states: int  # distinct clusters reached
    solved: int  # of them, counts solved (the others' row bound could not beat the best)
    depth: int  # moves explored completely (every state at this many moves seen)
    seconds: float
    max_moves: int

    @property
    def count(self) -> int:
        return self.result.count

    def text(self) -> str:
        moves = "; ".join(f"{s.instance} {s.code}" for s in self.moves) or "none"
        proof = (
            f"optimal over every sequence of at most {self.max_moves} hbal moves"
            if self.status == "optimal"
            else f"best found, sequences of up to {self.depth} moves searched completely"
        )
        return (
            f"move-existing: {self.count} instances after {len(self.moves)} moves "
            f"({self.count - self.before} more than without), {proof} "
            f"({self.states} clusters, {self.solved} solved, {self.seconds:.2f} s); moves: {moves}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "instances": self.count,
            "without_moves": self.before,
            "status": self.status,
            "max_moves": self.max_moves,
            "moves": [{"instance": s.instance, "move": s.code} for s in self.moves],
            "states": self.states,
            "solved": self.solved,
            "depth": self.depth,
            "seconds": round(self.seconds, 4),
            "standard": self.result.to_json(),
        }


#: --max-moves when only --move-existing is given: every single move is tried, proven in
#: seconds on small groups (a second move multiplies the clusters to see by the moves offered)
DEFAULT_MAX_MOVES = 1


def moved_standard(
    loaded: ClusterState,
    spec: Spec,
    options: SpaceOptions,
    solver: SolverOptions,
    max_moves: int | None,
) -> MovesResult:
    """`--move-existing [--max-moves N]`: the moves, then the new instances on the moved
    cluster, checked (N is DEFAULT_MAX_MOVES when not given)."""
    moves = MoveOptions(DEFAULT_MAX_MOVES if max_moves is None else max_moves)
    return with_moves(loaded, spec, options, moves, solver)


def with_moves(
    state: ClusterState,
    spec: Spec,
    options: SpaceOptions,
    moves: MoveOptions,
    solver: SolverOptions = DEFAULT_OPTIONS,
) -> MovesResult:
    """The most new instances of `spec` after at most `moves.max_moves` hbal moves of the
    existing instances (`state` as loaded; hspace's node status from `options` applied
    before the moves, as hbal would see the nodes)."""
    start = time.perf_counter()
    deadline = solver.deadline()
    root = with_node_status(state, options.offline, options.max_cpu, options.min_disk)

    def left() -> float | None:
        return None if deadline is None else max(deadline - time.perf_counter(), 0.01)

    def solve(s: ClusterState) -> SpaceResult:
        return solve_problem(problem_of(s, spec, options, solver), solver.within(left()))

    base = solve(root)
    best: tuple[SpaceResult, tuple[Step, ...]] = (base, ())
    proven = base.status == "optimal"
    seen = {location_key(root)}
    level: list[tuple[ClusterState, tuple[Step, ...]]] = [(root, ())]
    depth, solved, stopped = 0, 1, False
    while level and depth < moves.max_moves and not stopped:
        found: list[tuple[int, ClusterState, tuple[Step, ...]]] = []
        for s, steps in level:
            for step, after in children(s, moves.rules):
                key = location_key(after)
                if key not in seen:
                    seen.add(key)
                    ub = count_bound(space_problem(after, spec, options))
                    found.append((ub, after, (*steps, step)))
            if deadline is not None and time.perf_counter() > deadline:
                stopped = True
                break
        found.sort(key=lambda f: -f[0])  # the most promising first, should time run out
        for ub, after, steps in found:
            if stopped or (deadline is not None and time.perf_counter() > deadline):
                stopped = True
                break
            if ub <= best[0].count:
                continue
            r = solve(after)
            solved += 1
            proven = proven and r.status == "optimal"
            if r.count > best[0].count:
                best = (r, steps)
        if not stopped:
            depth += 1
        level = [(s, steps) for _, s, steps in found]
    result, steps = best
    report = check_space_moves(root, steps, moves, result.problem, result.answer, result.n1_plans)
    report.raise_if_failed()
    complete = not stopped and proven
    return MovesResult(
        steps, result, base.count, "optimal" if complete else "feasible",
        len(seen), solved, depth if not stopped else depth, time.perf_counter() - start,
        moves.max_moves,
    )  # fmt: skip
