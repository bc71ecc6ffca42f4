"""What a joint node-evacuate and a joint change-group share: where an instance may move
(htools' strict adds, the migration tags), the plan replayed through hail's own steps, the
independent checker's judge of a plan's moves, and the answer made of the better of the joint
plan and hail's (docs/placement.md).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from model.backends.iallocator import IAllocatorInput
from model.backends.iallocator_response import response_json
from model.batch import NewInstance
from model.check import Move, check_moves
from model.htools.answer import HailAnswer, SolverRun, solver_note
from model.htools.evacuate import (
    CHANGE_ALL,
    CHANGE_SECONDARY,
    EvacSolution,
    Evacuated,
    Step,
    apply_evacuated,
    drbd_all_pair,
)
from model.htools.requests import Answer, evac_answer
from model.htools.verify import check_answer
from model.placement import NO_PRIMARY, PlacementProblem
from model.resources import (
    FailMode,
    InstanceDemand,
    MoveKind,
    add_primary,
    add_secondary,
    apply_move,
    check_migration,
    secondary_shortfalls,
)
from model.score import cluster_score
from model.state import ClusterState
from solvers.strategies.descent import Verdict
from solvers.strategies.joint import _kept_hails, _note
from solvers.strategies.placement import (
    Plan,
)


def _migratable(state: ClusterState, source: str, targets: list[str]) -> list[str]:
    """The targets that accept a live migration (or failover) from `source`: its migration
    tags receivable there (htools' check; the checker refuses a new primary that does not)."""
    return [t for t in targets if check_migration(state.nodes[source], state.nodes[t]) is None]


def _evacuation_targets(
    base: ClusterState,
    d: InstanceDemand,
    avail: list[str],
    source: str,
    fixed_primary: str | None,
    forced: frozenset[str] = frozenset(),
) -> tuple[list[str], list[str], set[tuple[str, str]]]:
    """Where an evacuated instance may go, by htools' strict adds on the cluster without the
    instances being moved (its hard checks alone for the roles it moves with force off an
    offline node, `forced`): a new primary (shared storage), a new secondary beside a primary
    that stays (drbd, secondary-only), or both (drbd, all). A new primary must accept the
    migration from `source`, the primary now (shared storage migrates there, drbd fails over
    to it). Moves are not held to the instance policy: hail's moves are not."""
    if fixed_primary is not None:
        # htools adds the primary back with force: a node short of memory for it (offline,
        # overcommitted) fails every new secondary
        if isinstance(add_primary(base.nodes[fixed_primary], d, strict=False), FailMode):
            return [], [], set()
        prims = [fixed_primary]
    else:
        strict = "p" not in forced
        prims = [
            t
            for t in avail
            if not isinstance(add_primary(base.nodes[t], d, strict=strict), FailMode)
        ]
        prims = _migratable(base, source, prims)
    if not d.has_secondary:
        return prims, [], set()
    strict = "s" not in forced
    secs = [
        t
        for t in avail
        if not isinstance(add_secondary(base.nodes[t], d, NO_PRIMARY, strict=strict), FailMode)
    ]
    # pairs failing only together (the peer reserve): a soft check
    forbidden = {
        (p, s)
        for s in secs
        for p, _ in base.nodes[s].peers
        if strict
        and p in prims
        and p != s
        and isinstance(add_secondary(base.nodes[s], d, p), FailMode)
    }
    return prims, secs, forbidden


def _no_way_back(state1: ClusterState, turn: ClusterState, name: str) -> bool:
    """Whether hail's steps cannot move a drbd instance in mode `all` (a node evacuation's,
    or a change-group's) at all: they fail it over to its new primary, making the node it
    was on (its primary, or its secondary when the primary is offline and was failed over
    first) its secondary for a moment, and that node refuses it even with the instance and
    every moving one before it gone (`turn`; the later ones are still there, nothing added),
    the most room it can have then: for disk, spindles or the failover memory, checks that
    only grow with what is on the node (not the N+1 check, which a node failing N+1 already
    skips)."""
    d = state1.demands[name]
    p, s = state1.locations[name]
    through = p if not state1.nodes[p].offline else s
    if d.disk_template != "drbd" or through is None:
        return False
    refused = secondary_shortfalls(turn.nodes[through], d, NO_PRIMARY)
    return any(f.kind != "n1" for f in refused)


def _evacuated(
    cur: ClusterState, name: str, mode: str, target: tuple[str, str | None]
) -> Evacuated | str:
    """The instance moved to `target` by hail's own steps for its template and mode."""
    d = cur.demands[name]
    p, s = cur.locations[name]
    tp, ts = target
    if d.disk_template == "drbd" and mode == CHANGE_ALL:
        assert s is not None and ts is not None
        return drbd_all_pair(cur.nodes, d, p, s, tp, ts, False)
    kind, to = (
        (MoveKind.REPLACE_SECONDARY, ts)
        if d.disk_template == "drbd"
        else (MoveKind.FAILOVER_TO_ANY, tp)
    )
    r = apply_move(cur.nodes, d, p, s, kind, to, force=False)
    if isinstance(r, FailMode):
        return str(r)
    return Evacuated(r.nodes, r.primary, r.secondary, (Step(kind, to),))


def _replay(
    state: ClusterState, mode: str, order: list[str], plan: Plan
) -> tuple[ClusterState, list, list] | str:
    """The plan's moves in request order through htools' moves: the cluster after, the moved
    records and the jobs; or why a step fails."""
    cur = state
    moved, jobs = [], []
    for name in order:
        if name not in plan:
            continue
        ev = _evacuated(cur, name, mode, plan[name])
        if isinstance(ev, str):
            return f"{name}: {ev}"
        cur = apply_evacuated(cur, name, ev)
        nodes = (ev.primary,) if ev.secondary is None else (ev.primary, ev.secondary)
        if cur.demands[name].disk_template != "drbd":
            nodes = (ev.primary,)
        moved.append((name, cur.nodes[ev.primary].group_uuid, nodes))
        jobs.append((name, ev.steps))
    return cur, moved, jobs


def _group_score(state: ClusterState, groups: set[str]) -> float:
    return sum(cluster_score(state, group=g) for g in sorted(groups))


def _together_score(state: ClusterState, groups: Collection[str]) -> float:
    """The cluster score of the groups' nodes taken together (the model's scope)."""
    return cluster_score(st for st in state.nodes.values() if st.group_uuid in groups)


Judge = Verdict  # the checker's verdict on a plan's moves


@dataclass(frozen=True)
class _Group:
    """One group's part of a node evacuation: its instances with a choice, as batch kinds (one
    per instance, named as it), on the group without them."""

    uuid: str
    base: ClusterState
    scope: list[str]  # the group's nodes, which its score is taken over
    kinds: list[tuple[InstanceDemand, NewInstance]]
    problem: PlacementProblem  # built once, before the walk's child is forked: it inherits it

    @property
    def members(self) -> list[str]:
        return [k.name for _, k in self.kinds]


def _here(state1: ClusterState, name: str) -> tuple[str, str | None]:
    """Where an instance is now, as a plan's entry (shared storage has no secondary)."""
    p, s = state1.locations[name]
    return (p, s if state1.demands[name].disk_template == "drbd" else None)


def _forced_roles(state1: ClusterState, name: str, mode: str) -> frozenset[str]:
    """The roles htools adds with force when it moves the instance (applyMoveEx: a move off
    an offline node): shared storage's new primary off an offline primary, a secondary-only
    evacuation's new secondary off an offline secondary (its primary, added back with force
    whatever the nodes, is on its node all along: `NewInstance.kept_primary`). A drbd pair in
    mode `all` is forced only on its way (a failover off an offline primary, a secondary replaced
    off an offline one): its final primary and secondary come by a failover and a replacement
    off online nodes, with every check (model/htools/evacuate.py `drbd_all_pair`)."""
    p, s = state1.locations[name]
    if state1.demands[name].disk_template != "drbd":
        return frozenset({"p"}) if state1.nodes[p].offline else frozenset()
    if mode == CHANGE_SECONDARY and s is not None and state1.nodes[s].offline:
        return frozenset({"s"})
    return frozenset()


def _plan_of(walk: EvacSolution) -> Plan:
    """hail's walk as a plan: instance -> (primary, secondary)."""
    return {n: (nodes[0], nodes[1] if len(nodes) > 1 else None) for n, _, nodes in walk.moved}


def _better_moves(
    inp: IAllocatorInput,
    state: ClusterState,
    names: list[str],
    kind: str,
    joint: tuple[list, list, ClusterState],
    hail: EvacSolution | None,
    runs: list[SolverRun],
    one_by_one: Callable[[], HailAnswer],
    refused: Mapping[str, str] = {},
    *,
    why_alone: str = "proven",
    scored: set[str] | None = None,
    last: frozenset[str] = frozenset(),
    aside_note: str = "",
) -> HailAnswer:
    """The joint moves as hail's answer when they beat hail's (more instances moved, or as
    many and fewer primaries on `last` (last-resort nodes), or as many of both and a lower
    score: the sum of the scores of the groups either touches, or the score of `scored`, the
    groups the model scores, together), else `one_by_one()`. `hail` None: nothing to compare
    (`why_alone` says why); `refused` gives the reasons of instances no plan could move;
    `aside_note` ends the note (what failed beside the model)."""
    moved, jobs, after = joint
    if scored is None:  # every group either plan touches, each scored apart
        touched = {g for _, g, _ in moved} | {g for _, g, _ in (hail.moved if hail else ())}
        touched |= {state.nodes[state.locations[n][0]].group_uuid for n in names}
        score_of = partial(_group_score, groups=touched)
    else:
        score_of = partial(_together_score, groups=scored)

    def rank(moves: Sequence[tuple[str, str, tuple[str, ...]]], s: ClusterState):  # noqa: ANN202
        return (-len(moves), sum(1 for _, _, nodes in moves if nodes[0] in last), score_of(s))

    mine = rank(moved, after)
    if hail is not None:
        theirs = rank(hail.moved, hail.state or state)
        if not (mine[:2] < theirs[:2] or (mine[:2] == theirs[:2] and mine[2] < theirs[2] - 1e-9)):
            note = _note(-mine[0], mine[2], -theirs[0], theirs[2]) + aside_note
            return _kept_hails(one_by_one(), runs, note)
    reasons = {**refused, **(dict(hail.failed) if hail else {})}
    crowded = "no room left by the joint plan, which moves the most instances that fit together"
    moved_names = {n for n, _, _ in moved}
    failed = tuple((n, reasons.get(n, crowded)) for n in names if n not in moved_names)
    sol = EvacSolution(tuple(moved), failed, tuple(jobs), after)
    ans = evac_answer(kind, state, sol, False)
    check_answer(inp, ans).raise_if_failed()
    note = (
        _note(-mine[0], mine[2], -theirs[0], theirs[2])
        if hail is not None
        else f"; joint plan {-mine[0]}, score {mine[2]:.8f}; not compared: {why_alone}"
    ) + aside_note
    return HailAnswer(
        response_json(True, ans.info, ans.result),
        kind,
        placements=tuple((n, tuple(nodes)) for n, _, nodes in moved),
        runs=tuple(runs),
        objectives={"score": mine[2], "moved": len(moved)},
        note=solver_note(tuple(runs), note),
    )


def _moves_judge(
    state: ClusterState,
    names: list[str],
    scored: Collection[str],
    avoid: frozenset[str] = frozenset(),
    mode: str | None = None,
) -> Callable[[Plan], tuple[float | None, list[str]]]:
    """The independent checker on a plan's moves in request order (htools' strict moves; in
    a node evacuation (`mode`) also hail's steps for them), and the score of the groups
    `scored` together after them. A node evacuation's moves never land on `avoid`
    (the nodes evacuated, offline ones): in mode `all` neither node of a moved drbd pair is
    one (htools' pairs are of the other nodes), elsewhere no node a move changes to."""

    def landing(name: str, to: tuple[str, str | None]) -> list[str]:
        now = state.locations[name]
        if mode == CHANGE_ALL:
            return [n for n in to if n is not None]
        return [n for n, old in zip(to, now, strict=True) if n is not None and n != old]

    def judge(plan: Plan) -> tuple[float | None, list[str]]:
        moves = [Move(n, *plan[n]) for n in names if n in plan]
        off = [f"{n} moves onto {t}, a node evacuated or offline" for n in names if n in plan
               for t in landing(n, plan[n]) if t in avoid]  # fmt: skip
        if off:
            return None, off
        report = check_moves(state, moves, strict=True, evacuation=True)
        if report.violations:
            return None, [str(v) for v in report.violations]
        if mode is not None:  # and hail's own steps make it (a drbd pair's steps pass through
            # states the final layout does not show)
            replay = _replay(state, mode, names, plan)
            if isinstance(replay, str):
                return None, [replay]
        after = state
        for mv in moves:
            after = after.relocated(mv.instance, mv.primary, mv.secondary)
        return _together_score(after, scored), []

    return judge


def _evac_solution(ans: Answer, state: ClusterState) -> EvacSolution:
    """hail's answer (with the exact N+1 check) as the plan to beat."""
    if not ans.success:
        return EvacSolution(state=state)
    moved, failed, _jobs = ans.result
    uuid = {g.name: g.uuid for g in state.cluster.groups}
    return EvacSolution(
        tuple((name, uuid[group], tuple(nodes)) for name, group, nodes in moved),
        tuple((name, why) for name, why in failed),
        (),
        ans.state,
    )
