"""Re-placing a failed node's primaries on the rest of its group, as a MIP (docs/n1.md).

The question comes from `model.n1.packing_of`: after the forced drbd failovers, every other
primary of the failed node needs a node of the group that admits it. Primaries that ask the
same of every node (memory, local disk, spindles, vCPUs, tags, admitting nodes) form one
*shape* and are counted per node instead of placed one by one.

Sets
    S          shapes of primaries to place
    T          nodes of the group that can take something
    ST ⊆ S×T   (s, t) with t admitting shape s
    E          exclusion tags (STRICT mode)
Parameters
    count[s]                       primaries of shape s
    mem[s], disk[s], spn[s], cpu[s]  what one of them takes (disk and spindles if local)
    mem_cap[t], disk_cap[t], spn_cap[t], cpu_cap[t]  what node t can still take
Variables
    y[s, t] ∈ ℤ≥0              primaries of shape s re-placed on node t
Objective
    placed = Σ y[s, t] (max): the node is evacuable exactly when placed = Σ count[s].
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

import pyomo.core as pyo

from formulations.objective import Objective
from model.n1 import Packing, PackItem


@dataclass(frozen=True)
class _Shapes:
    """Items grouped by everything the model sees of them."""

    keys: tuple[tuple, ...]
    members: tuple[tuple[PackItem, ...], ...]


def _shape_key(item: PackItem) -> tuple:
    return (
        item.memory_mib,
        item.local,
        item.disk_mib if item.local else 0,
        item.spindles if item.local else 0,
        item.vcpus,
        item.exclusion_tags,
        item.targets,
    )


def shapes_of(packing: Packing) -> _Shapes:
    groups: dict[tuple, list[PackItem]] = {}
    for item in packing.items:
        groups.setdefault(_shape_key(item), []).append(item)
    return _Shapes(tuple(groups), tuple(tuple(v) for v in groups.values()))


def define_sets(m: pyo.ConcreteModel, packing: Packing, shapes: _Shapes) -> None:
    """S, T and the admissible pairs ST."""
    m.S = pyo.Set(initialize=range(len(shapes.keys)), ordered=True)
    used = sorted({t for group in shapes.members for t in group[0].targets})
    m.T = pyo.Set(initialize=used, ordered=True)
    m.ST = pyo.Set(initialize=[(s, t) for s in m.S for t in shapes.members[s][0].targets], dimen=2)


def define_placement(m: pyo.ConcreteModel, shapes: _Shapes) -> None:
    """0 ≤ y[s,t] ≤ count[s] and Σ_t y[s,t] ≤ count[s]: each primary lands at most once."""
    count = {s: len(shapes.members[s]) for s in m.S}
    m.count = pyo.Param(m.S, initialize=count)
    m.y = pyo.Var(m.ST, domain=pyo.NonNegativeIntegers, bounds=lambda m, s, t: (0, count[s]))
    targets = {s: shapes.members[s][0].targets for s in m.S}
    # once: Σ_t y[s,t] ≤ count[s]
    m.once = pyo.Constraint(m.S, rule=lambda m, s: sum(m.y[s, t] for t in targets[s]) <= m.count[s])


def define_capacities(m: pyo.ConcreteModel, packing: Packing, shapes: _Shapes) -> None:
    """Σ_s use[s]·y[s,t] ≤ cap[t] for memory, local disk, spindles (exclusive storage) and
    vCPUs (STRICT mode): the hard rows of `model.capacity` after the failovers."""
    bins = {b.name: b for b in packing.bins}
    by_t: Mapping[str, list[int]] = defaultdict(list)
    for s, t in m.ST:
        by_t[t].append(s)
    item = {s: shapes.members[s][0] for s in m.S}

    def row(cap_of, use_of):  # noqa: ANN001, ANN202
        def rule(m: pyo.ConcreteModel, t: str) -> object:
            cap = cap_of(bins[t])
            terms = [use_of(item[s]) * m.y[s, t] for s in by_t[t] if use_of(item[s])]
            if cap is None or not terms:
                return pyo.Constraint.Skip
            return sum(terms) <= cap

        return rule

    # memory: Σ_s mem[s]·y[s,t] ≤ mem_cap[t]
    m.memory = pyo.Constraint(m.T, rule=row(lambda b: b.memory_mib, lambda i: i.memory_mib))
    # disk: Σ_{s local} disk[s]·y[s,t] ≤ disk_cap[t]
    m.disk = pyo.Constraint(
        m.T, rule=row(lambda b: b.disk_mib, lambda i: i.disk_mib if i.local else 0)
    )
    # spindles: Σ_{s local} spn[s]·y[s,t] ≤ spn_cap[t]   (exclusive-storage nodes)
    m.spindles = pyo.Constraint(
        m.T, rule=row(lambda b: b.spindles, lambda i: (i.spindles or 0) if i.local else 0)
    )
    # vcpus: Σ_s cpu[s]·y[s,t] ≤ cpu_cap[t]   (STRICT mode)
    m.vcpus = pyo.Constraint(m.T, rule=row(lambda b: b.vcpus, lambda i: i.vcpus))


def define_exclusion(m: pyo.ConcreteModel, shapes: _Shapes) -> None:
    """Σ_{s carrying e} y[s,t] ≤ 1: at most one primary with exclusion tag e per node (STRICT
    mode; nodes already carrying e admit none of them)."""
    carriers: dict[tuple[str, str], list[int]] = defaultdict(list)
    for s in m.S:
        first = shapes.members[s][0]
        for e in first.exclusion_tags:
            for t in first.targets:
                carriers[e, t].append(s)
    # a single carrier shape with count > 1 still needs the row
    pairs = sorted(k for k, ss in carriers.items() if len(ss) > 1 or m.count[ss[0]] > 1)
    m.ET = pyo.Set(initialize=pairs, dimen=2)
    # excl: Σ_{s ∋ e} y[s,t] ≤ 1
    m.excl = pyo.Constraint(m.ET, rule=lambda m, e, t: sum(m.y[s, t] for s in carriers[e, t]) <= 1)


def build(packing: Packing) -> pyo.ConcreteModel:
    shapes = shapes_of(packing)
    m = pyo.ConcreteModel(name=f"n1_{packing.node}")
    define_sets(m, packing, shapes)
    define_placement(m, shapes)
    define_capacities(m, packing, shapes)
    define_exclusion(m, shapes)
    return m


def objectives(m: pyo.ConcreteModel, packing: Packing) -> list[Objective]:
    """placed (max): how many of the failed node's primaries find a node."""
    return [Objective("placed", sum(m.y[k] for k in m.ST), "max")]


def solution(m: pyo.ConcreteModel, packing: Packing) -> dict[str, str]:
    """Each placed primary's node: a shape's members handed out in node order."""
    shapes = shapes_of(packing)
    out: dict[str, str] = {}
    for s in m.S:
        members = list(shapes.members[s])
        for t in members[0].targets:
            k = int(round(m.y[s, t].value or 0))
            for item in members[:k]:
                out[item.name] = t
            members = members[k:]
    return out
