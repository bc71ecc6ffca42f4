"""`exalloc space --move-existing [--max-moves N]`: the standard phase after moving existing
instances first with hbal's moves (solvers/strategies/space_moves.py; docs/space.md, "Moving
existing instances first")."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from model.space import SpaceOptions, Spec
    from model.state import ClusterState
    from solvers.options import SolverOptions
    from solvers.strategies.space_moves import MovesResult

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
    """The checked answer: the moves, then the new instances on the moved cluster."""
    from model.space_moves import MoveOptions
    from solvers.strategies.space_moves import with_moves

    moves = MoveOptions(DEFAULT_MAX_MOVES if max_moves is None else max_moves)
    return with_moves(loaded, spec, options, moves, solver)
