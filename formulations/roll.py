"""The fewest reboot rounds, as a colouring with room constraints (docs/roll.md, "The model").

The question comes from `model.roll.problem_of`. Whether a round is possible depends on the
round alone and holds for every subset of a possible round, so the rounds are colour classes:

Sets
    V            considered nodes, in an order whose first q nodes form a clique C
    K            rounds 0..U-1 (U: rounds of the best plan known)
    VK ⊆ V×K     (v, k) with k < q + j for the j-th node outside C (C's nodes fixed)
    Q            conflict cliques (pairwise conflicting nodes), E leftover conflict edges
    S            receiving nodes: online nodes that drbd primaries of V migrate to
    G            node groups
Parameters
    load[p, s]   memory of p's drbd primaries migrating to s (--memory-aware, --full-evacuation)
    cap[s]       unallocated memory of s − 1 (htools' addPriEx keeps it above 0)
    mem[v], dsk[v]  memory and local disk of what must leave v for other nodes of its group
    room_m[t], room_d[t]  what online node t can take (unallocated − 1, free disk − 1)
Variables
    x[v, k] ∈ {0, 1}   node v reboots in round k
    u[k] ∈ {0, 1}      round k is used
Objective
    rounds = Σ_k u[k] (min)

The group rows only aggregate a round's packing (a relaxation of it): each round of a solution
is then packed exactly (model.roll.first_fit_round, or `build_packing` below), and a round
that cannot be packed is cut off (`cut_rows`) and the model solved again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyomo.core as pyo

from formulations.objective import Objective
from model.roll import PRIMARY, Item, RollProblem, fits


@dataclass(frozen=True)
class Layout:
    """The order of the nodes and the rounds: `clique` first (fixed to rounds 0..q-1)."""

    order: tuple[str, ...]
    clique: tuple[str, ...]
    rounds: int
    lower_bound: int

    def allowed(self) -> list[tuple[str, int]]:
        q = len(self.clique)
        pairs = [(v, k) for k, v in enumerate(self.clique)]
        rest = [v for v in self.order if v not in set(self.clique)]
        for j, v in enumerate(rest, start=1):
            pairs += [(v, k) for k in range(min(q + j, self.rounds))]
        return pairs


def layout_of(problem: RollProblem, clique: Sequence[str], rounds: int, lower_bound: int) -> Layout:
    """Clique first, then the other nodes by conflict degree (most first), cluster order."""
    adj = problem.neighbours()
    position = {v: k for k, v in enumerate(problem.nodes)}
    rest = sorted(
        (v for v in problem.nodes if v not in set(clique)),
        key=lambda v: (-len(adj[v]), position[v]),
    )
    return Layout((*clique, *rest), tuple(clique), rounds, lower_bound)


def define_rounds(m: pyo.ConcreteModel, problem: RollProblem, layout: Layout) -> None:
    """x[v,k] on VK, u[k] on K; Σ_k x[v,k] = 1: every node reboots in exactly one round."""
    m.K = pyo.Set(initialize=range(layout.rounds), ordered=True)
    m.VK = pyo.Set(initialize=layout.allowed(), dimen=2, ordered=True)
    m.x = pyo.Var(m.VK, domain=pyo.Binary)
    m.u = pyo.Var(m.K, domain=pyo.Binary)
    by_node: dict[str, list[int]] = {}
    for v, k in m.VK:
        by_node.setdefault(v, []).append(k)
    m.V = pyo.Set(initialize=list(layout.order), ordered=True)
    # once: Σ_k x[v,k] = 1
    m.once = pyo.Constraint(m.V, rule=lambda m, v: sum(m.x[v, k] for k in by_node[v]) == 1)


def _x(m: pyo.ConcreteModel, v: str, k: int) -> object | None:
    return m.x[v, k] if (v, k) in m.VK else None


def define_conflicts(m: pyo.ConcreteModel, problem: RollProblem) -> None:
    """Σ_{v∈Q} x[v,k] ≤ u[k] for every clique Q and x[a,k] + x[b,k] ≤ u[k] for every
    leftover edge (a, b): conflicting nodes never share a round, and a round with a node is
    used; x[v,k] ≤ u[k] for a node in no conflict."""
    groups = [tuple(q) for q in problem.cliques] + [tuple(e) for e in problem.edges]
    touched = {v for g in groups for v in g}
    groups += [(v,) for v in problem.nodes if v not in touched]
    rows = [(g, k) for g in range(len(groups)) for k in m.K]

    def rule(m: pyo.ConcreteModel, g: int, k: int) -> object:
        terms = [t for v in groups[g] if (t := _x(m, v, k)) is not None]
        if not terms:
            return pyo.Constraint.Skip
        return sum(terms) <= m.u[k]

    m.GK = pyo.Set(initialize=rows, dimen=2)
    # conflict: Σ_{v∈Q} x[v,k] ≤ u[k]
    m.conflict = pyo.Constraint(m.GK, rule=rule)


def define_migration_memory(m: pyo.ConcreteModel, problem: RollProblem) -> None:
    """Σ_p load[p,s]·x[p,k] ≤ cap[s]·(1 − x[s,k]) (cap[s] alone when s does not reboot):
    a receiving node takes the round's migrations within its unallocated memory."""
    loads = {s: {p: w for p, w in per.items() if w > 0} for s, per in problem.loads().items()}
    loads = {s: per for s, per in loads.items() if per}
    rows = [(s, k) for s in sorted(loads) for k in m.K]

    def rule(m: pyo.ConcreteModel, s: str, k: int) -> object:
        terms = [w * t for p, w in loads[s].items() if (t := _x(m, p, k)) is not None]
        cap = problem.rooms[s].memory_mib
        if not terms or sum(loads[s].values()) <= cap:
            return pyo.Constraint.Skip
        own = _x(m, s, k)
        return sum(terms) <= (cap * (1 - own) if own is not None else cap)

    m.SK = pyo.Set(initialize=rows, dimen=2)
    # migration: Σ_p load[p,s]·x[p,k] ≤ cap[s]·(1 − x[s,k])
    m.migration = pyo.Constraint(m.SK, rule=rule)


def _group_needs(problem: RollProblem) -> dict[str, dict[str, tuple[int, int]]]:
    """(memory, disk) that must leave each node, by group of its destination."""
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for v, items in problem.items.items():
        for i in items:
            per = out.setdefault(i.group, {})
            mem, dsk = per.get(v, (0, 0))
            per[v] = (mem + (i.memory_mib if i.kind == PRIMARY else 0), dsk + i.disk_mib)
    return out


def define_group_room(m: pyo.ConcreteModel, problem: RollProblem) -> None:
    """Per group g and round k, for memory and local disk:
    Σ_{v} need[v]·x[v,k] (+ migrations into g) ≤ Σ_{t∈g} room[t] − Σ_{t∈g∩V} room[t]·x[t,k]:
    what leaves the round fits, in total, on the group's nodes that stay up."""
    needs = _group_needs(problem)
    loads = problem.loads() if problem.rules.migrations else {}
    considered = set(problem.nodes)
    rows = []
    for g, per in sorted(needs.items()):
        for axis in (0, 1):
            if any(need[axis] for need in per.values()):
                rows += [(g, axis, k) for k in m.K]

    def rule(m: pyo.ConcreteModel, g: str, axis: int, k: int) -> object:
        terms = [
            need[axis] * t
            for v, need in needs[g].items()
            if need[axis] and (t := _x(m, v, k)) is not None
        ]
        if not terms:
            return pyo.Constraint.Skip
        total = 0
        freed = []
        for t in problem.groups.get(g, ()):
            r = problem.rooms[t]
            room = max(0, r.memory_mib if axis == 0 else r.disk_mib)
            total += room
            if t in considered and room and (x := _x(m, t, k)) is not None:
                freed.append(room * x)
            if axis == 0:
                terms += [
                    w * x
                    for p, w in loads.get(t, {}).items()
                    if w and (x := _x(m, p, k)) is not None
                ]
        return sum(terms) + sum(freed) <= total

    m.GAK = pyo.Set(initialize=rows, dimen=3)
    # room: Σ need·x + Σ room·x ≤ Σ room
    m.room = pyo.Constraint(m.GAK, rule=rule)


def define_symmetry(m: pyo.ConcreteModel, layout: Layout) -> None:
    """u[k] ≥ u[k+1] (used rounds first), the clique's nodes in rounds 0..q−1 (VK already
    keeps the j-th other node out of rounds ≥ q + j), Σ_k u[k] ≥ the proven lower bound."""
    ks = list(m.K)
    # order: u[k] ≥ u[k+1]
    m.order = pyo.Constraint(ks[:-1], rule=lambda m, k: m.u[k] >= m.u[k + 1])
    for k, v in enumerate(layout.clique):
        m.x[v, k].fix(1)
    # bound: Σ_k u[k] ≥ LB
    m.bound = pyo.Constraint(expr=sum(m.u[k] for k in m.K) >= layout.lower_bound)


def build(problem: RollProblem, layout: Layout) -> pyo.ConcreteModel:
    m = pyo.ConcreteModel(name="roll")
    define_rounds(m, problem, layout)
    define_conflicts(m, problem)
    if problem.rules.migrations:
        define_migration_memory(m, problem)
    define_group_room(m, problem)
    define_symmetry(m, layout)
    return m


def objectives(m: pyo.ConcreteModel, problem: RollProblem) -> list[Objective]:
    """rounds (min)."""
    return [Objective("rounds", sum(m.u[k] for k in m.K), "min")]


def solution(m: pyo.ConcreteModel, problem: RollProblem) -> list[list[str]]:
    """The rounds, each with its nodes in the cluster's order (empty rounds dropped)."""
    rounds: dict[int, list[str]] = {}
    for v, k in m.VK:
        if (m.x[v, k].value or 0) > 0.5:
            rounds.setdefault(k, []).append(v)
    position = {v: i for i, v in enumerate(problem.nodes)}
    return [sorted(rounds[k], key=position.__getitem__) for k in sorted(rounds)]


def cut_rows(m: pyo.ConcreteModel, members: Sequence[str]) -> list[tuple[object, None, int]]:
    """Σ_{v∈R} x[v,k] ≤ |R| − 1 for every round k: a round that cannot be packed, nor any
    round holding it, is never chosen again."""
    rows = []
    for k in m.K:
        terms = [t for v in members if (t := _x(m, v, k)) is not None]
        if len(terms) == len(members):
            rows.append((sum(terms), None, len(members) - 1))
    return rows


# --- one round's packing ------------------------------------------------------------------------
#
# Sets
#     I            shapes of the items that must leave the round (interchangeable items)
#     IT ⊆ I×T     (i, t): target t admits shape i alone (its group, not its primary)
# Variables
#     y[i, t] ∈ ℤ≥0  items of shape i placed on t
# Objective
#     placed = Σ y (max): the round can be packed exactly when placed = Σ count[i].


def build_packing(
    items: Sequence[Item],
    rooms: Mapping[str, Sequence[int | None]],
    groups: Mapping[str, Sequence[str]],
) -> tuple[pyo.ConcreteModel, list[list[Item]]]:
    """The exact packing of a round's items on the rooms left once its migrations are in."""
    shapes: dict[tuple, list[Item]] = {}
    for item in items:
        shapes.setdefault(item.shape(), []).append(item)
    members = list(shapes.values())
    m = pyo.ConcreteModel(name="roll_packing")
    m.I = pyo.Set(initialize=range(len(members)))
    pairs = [
        (i, t)
        for i, group in enumerate(members)
        for t in groups.get(group[0].group, ())
        if t in rooms and t != group[0].forbidden and fits(rooms[t], group[0])
    ]
    m.IT = pyo.Set(initialize=pairs, dimen=2)
    count = {i: len(g) for i, g in enumerate(members)}
    m.y = pyo.Var(m.IT, domain=pyo.NonNegativeIntegers, bounds=lambda m, i, t: (0, count[i]))
    by_shape: dict[int, list[str]] = {}
    by_target: dict[str, list[int]] = {}
    for i, t in pairs:
        by_shape.setdefault(i, []).append(t)
        by_target.setdefault(t, []).append(i)
    # once: Σ_t y[i,t] ≤ count[i]
    m.once = pyo.Constraint(
        m.I,
        rule=lambda m, i: (
            sum(m.y[i, t] for t in by_shape.get(i, ())) <= count[i]
            if by_shape.get(i)
            else pyo.Constraint.Skip
        ),
    )
    first = {i: g[0] for i, g in enumerate(members)}

    def row(axis: int):  # noqa: ANN202
        def use(item: Item) -> int:
            if axis == 0:
                return item.memory_mib if item.kind == PRIMARY else 0
            if axis == 1:
                return item.disk_mib if item.local else 0
            return (item.spindles or 0) if item.local else 0

        def rule(m: pyo.ConcreteModel, t: str) -> object:
            cap = rooms[t][axis]
            terms = [use(first[i]) * m.y[i, t] for i in by_target[t] if use(first[i])]
            if cap is None or not terms:
                return pyo.Constraint.Skip
            return sum(terms) <= cap

        return rule

    m.T = pyo.Set(initialize=sorted(by_target))
    # memory: Σ_i mem[i]·y[i,t] ≤ room_m[t]; disk: Σ_i dsk[i]·y[i,t] ≤ room_d[t];
    # spindles: Σ_i spn[i]·y[i,t] ≤ room_s[t] (exclusive storage)
    m.memory = pyo.Constraint(m.T, rule=row(0))
    m.disk = pyo.Constraint(m.T, rule=row(1))
    m.spindles = pyo.Constraint(m.T, rule=row(2))
    return m, members


def packing_objectives(m: pyo.ConcreteModel) -> list[Objective]:
    """placed (max)."""
    return [Objective("placed", sum(m.y[k] for k in m.IT), "max")]


def packing_solution(
    m: pyo.ConcreteModel, members: Sequence[Sequence[Item]]
) -> list[tuple[Item, str]]:
    """Each placed item with its node: a shape's items handed out in target order."""
    out = []
    for i, group in enumerate(members):
        left = list(group)
        for j, t in m.IT:
            if j != i:
                continue
            n = int(round(m.y[i, t].value or 0))
            out += [(item, t) for item in left[:n]]
            left = left[n:]
    return out
