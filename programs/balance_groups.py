"""`exalloc balance --across-groups`: the least load imbalance between the groups of each storage
pool within K migrations (docs/balance.md, "Across groups"; seed 001's load balancing, which
htools never implemented).

Thin: the cluster as programs/balance.py reads it -> model.balance_groups.AcrossProblem ->
solvers.strategies.balance_groups.balance_across -> model.balance_groups.check_across_groups
(an answer failing it is refused) -> the ratios per group before and after, the migrations,
the proof; `-C` hbal's jobsets of the migrations, `--json`, `-X` through LUXI as redistribute.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from programs import groups as shared

if TYPE_CHECKING:
    from model.balance_groups import AcrossProblem, AcrossScore
    from model.cluster import Cluster
    from model.groups import Relocation
    from model.state import ClusterState
    from solvers.strategies.balance_groups import AcrossAnswer


def add_arguments(p: argparse.ArgumentParser) -> None:
    """--across-groups and the pool tags' prefix (docs/groups.md)."""
    across = p.add_argument_group("balancing across groups")
    across.add_argument(
        "--across-groups",
        dest="across_groups",
        action="store_true",
        help="balance load between the groups of each storage pool by migrations (-l: at most)",
    )
    across.add_argument(
        "--pool-prefix",
        dest="pool_prefix",
        default="pool:",
        metavar="PREFIX",
        help="with --across-groups: the tag prefix naming storage pools (default pool:)",
    )


@dataclass(frozen=True)
class AcrossReport:
    """What `exalloc balance --across-groups` prints."""

    source: str
    problem: AcrossProblem
    answer: AcrossAnswer
    before: AcrossScore
    after: AcrossScore
    print_commands: bool

    @property
    def state(self) -> ClusterState:
        return self.problem.state

    @property
    def relocations(self) -> tuple[Relocation, ...]:
        return self.answer.relocations

    def text(self) -> str:
        from model.balance_groups import TERM_NAMES

        a = self.answer
        lines = [f"Cluster {self.source}: {len(self.state.cluster.groups)} groups"]
        head = "".join(f"  {t:>17}" for t in TERM_NAMES)
        for pool, ratios in self.before.ratios.items():
            lines.append(f"Pool {pool}: load / capacity per group, before -> after")
            width = max(len(shared.group_name(self.state, g)) for g in ratios)
            lines.append(f"  {'':<{width}}{head}")
            for g, now in ratios.items():
                then = self.after.ratios[pool][g]
                cells = "".join(f"  {b:>7.4f} -> {c:<7.4f}" for b, c in zip(now, then, strict=True))
                lines.append(f"  {shared.group_name(self.state, g):<{width}}{cells}")
        if not self.before.ratios:
            lines.append("No pool is reached by two groups: nothing to balance across groups")
        k = "no limit" if self.problem.max_moves is None else str(self.problem.max_moves)
        lines.append(
            f"Score across groups: {a.score_before:.8f} -> {a.score:.8f}, "
            f"{len(a.relocations)} migration(s) (at most: {k})"
        )
        lines += shared.relocation_lines(self.state, a.relocations)
        if a.start_score is not None:
            lines.append(
                f"Greedy (the best single migration, again and again): {a.start_score:.8f}, "
                f"{a.start_moves} migration(s)"
            )
        bound = "-" if a.bound is None else f"{a.bound:.8f}"
        gap = "-" if a.gap is None else f"{100 * a.gap:.4f}%"
        lines.append(
            f"exact (score across groups): {a.status}, bound {bound}, gap {gap}; "
            f"build {a.build_s:.2f} s, solve {a.solve_s:.2f} s, check {a.check_s:.2f} s; "
            f"{a.rounds} round(s)"
        )
        lines += [f"note: {n}" for n in a.notes]
        if self.print_commands and a.relocations:
            lines.append("Commands:" + shared.commands_text(self.state, a.relocations).rstrip("\n"))
        return "\n".join(line.rstrip() for line in lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        from model.balance_groups import TERM_NAMES
        from model.groups import jobsets

        a = self.answer

        def ratios(score: AcrossScore) -> dict[str, Any]:
            return {
                pool: {
                    shared.group_name(self.state, g): dict(zip(TERM_NAMES, r, strict=True))
                    for g, r in per_group.items()
                }
                for pool, per_group in score.ratios.items()
            }

        return {
            "score_before": a.score_before,
            "score_after": a.score,
            "bound": a.bound,
            "gap": a.gap,
            "status": a.status,
            "max_moves": self.problem.max_moves,
            "rounds": a.rounds,
            "greedy": {"score_after": a.start_score, "moves": a.start_moves},
            "build_s": a.build_s,
            "solve_s": a.solve_s,
            "check_s": a.check_s,
            "notes": list(a.notes),
            "ratios_before": ratios(self.before),
            "ratios_after": ratios(self.after),
            "migrations": [shared.relocation_json(self.state, r) for r in a.relocations],
            "jobsets": [[r.instance for r in js] for js in jobsets(self.state, a.relocations)],
        }


def run_across(args: argparse.Namespace, cluster: Cluster, source: str) -> AcrossReport:
    """Solve, check, report (the answer's score is the checker's)."""
    from model.balance_groups import AcrossProblem, across_score, check_across_groups
    from model.errors import CheckFailedError, UsageError
    from model.groups import apply_relocations, storage_of
    from model.htools.hbal_program import lookup_names
    from model.space import with_node_status
    from model.state import node_states
    from solvers.strategies.balance_groups import balance_across

    for flag, given in (
        ("--fewest-moves", args.fewest_moves),
        ("--target-score", args.target_score is not None),
        ("--compare", args.compare),
        ("-G", args.group is not None),
    ):
        if given:
            raise UsageError(f"{flag} does not apply to --across-groups (it balances every pool)")
    state = node_states(cluster)
    # -O (a unique prefix of a name will do), --max-cpu, --min-disk as hbal applies them
    offline, wrong = lookup_names(list(state.nodes), list(getattr(args, "offline", ()) or ()))
    if wrong:
        raise UsageError(f"wrong node name(s) set as offline: {', '.join(wrong)}")
    state = with_node_status(
        state, offline, getattr(args, "max_cpu", None), getattr(args, "min_disk", 0.0) or 0.0
    )
    storage = storage_of(state, args.pool_prefix or "pool:")
    problem = AcrossProblem(
        state,
        storage,
        None if args.max_length < 0 else args.max_length,
        frozenset(args.select_instances) or None,
        frozenset(args.exclude_instances),
    )
    from programs.options import SEARCH_TIME_LIMIT_S

    answer = balance_across(problem, options=args.solver_options.limited(SEARCH_TIME_LIMIT_S))
    report = check_across_groups(problem, answer.relocations)
    if not report.ok:
        raise CheckFailedError("balance --across-groups: the answer fails the checker: "
                               + report.text())  # fmt: skip
    pools = problem.pools
    after, _ = apply_relocations(state, answer.relocations)
    before_score = across_score(state, storage, pools)
    after_score = across_score(after, storage, pools)
    printing = args.print_commands is not None
    return AcrossReport(source, problem, answer, before_score, after_score, printing)
