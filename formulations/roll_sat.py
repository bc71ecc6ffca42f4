"""The colouring relaxation of "a plan of k rounds?" as clauses (docs/roll.md, "How it is solved").

The CP-SAT model of formulations/roll.py carries every row of the question; most of its work
on the benchmark's hard cases goes into what is a plain graph colouring near the
3-colourability threshold, where a clause-learning SAT solver proves "no 3 rounds" 3-4 times
faster than CP-SAT on the same clauses and more still against the full model (the 400-node
figures in docs/roll.md). So the question is first asked as clauses of the conflicts alone:

Variables
    x[v, k]  (v, k) ∈ VK, the same allowed pairs as the model (Layout: the clique's nodes fixed
             to rounds 0..q−1, the j-th other node only in rounds < q + j)
Clauses
    once:      ∨_k x[v,k];  ¬x[v,a] ∨ ¬x[v,b]                         v, a < b
    conflict:  ¬x[a,k] ∨ ¬x[b,k]                                      conflicting a, b; k
    cover:     ∨_{p∈P} ¬x[p,k]   for a set P of primaries whose migrations exceed their
               receiving node's memory (added when a solution puts them together)
    cut:       ∨_{v∈R} ¬x[v,k]   for a round R that cannot be packed (added likewise)

Every clause holds in every plan (a cover's set never fits; a round that cannot be packed
makes every round holding it impossible), so the clauses are a relaxation of the question:
no assignment is no plan.

The solver's first guesses (its phases) are a DSatur colouring in k rounds (`phases`), another
one (ties broken at random) at each restart. The memory, room and packing rows the clauses
leave out are checked on each solution found, and a violated one adds its cover or cut and
the solver goes on (incrementally) until a solution passes or none is left.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from formulations.roll import Layout
from model.roll import RollProblem


@dataclass(frozen=True)
class RoundClauses:
    """The clauses and their variables: `var[(v, k)]` is a positive DIMACS literal."""

    var: Mapping[tuple[str, int], int]
    clauses: tuple[tuple[int, ...], ...]
    rounds: int

    def rounds_of(self, true: Iterable[int]) -> list[list[str]]:
        """The rounds of a model (the true literals), nodes in layout order, empty dropped."""
        on = set(true)
        per: dict[int, list[str]] = {}
        for (v, k), lit in self.var.items():
            if lit in on:
                per.setdefault(k, []).append(v)
        return [per[k] for k in sorted(per)]

    def forbid(self, members: Sequence[str]) -> list[tuple[int, ...]]:
        """∨_{v∈R} ¬x[v,k] for every round k where all of R may be: R never together."""
        out = []
        for k in range(self.rounds):
            lits = [self.var.get((v, k)) for v in members]
            if all(lits):
                out.append(tuple(-lit for lit in lits))  # type: ignore[operator]
        return out


def build_clauses(problem: RollProblem, layout: Layout) -> RoundClauses:
    """once and conflict clauses over the layout's allowed pairs."""
    var: dict[tuple[str, int], int] = {}
    for pair in layout.allowed():
        var[pair] = len(var) + 1
    by_node: dict[str, list[int]] = {}
    for (v, _), lit in var.items():
        by_node.setdefault(v, []).append(lit)
    clauses: list[tuple[int, ...]] = []
    for lits in by_node.values():
        clauses.append(tuple(lits))  # once: some round
        clauses += [(-a, -b) for i, a in enumerate(lits) for b in lits[i + 1 :]]  # one only
    for a, b in sorted(tuple(sorted(pair)) for pair in problem.conflict_pairs):  # reproducible
        for k in range(layout.rounds):
            la, lb = var.get((a, k)), var.get((b, k))
            if la and lb:
                clauses.append((-la, -lb))
    return RoundClauses(var, tuple(clauses), layout.rounds)


def memory_covers(
    problem: RollProblem, loads: Mapping[str, Mapping[str, int]], members: Sequence[str]
) -> list[list[str]]:
    """For each receiving node whose migrations from `members` exceed its memory, a set of
    those primaries that still exceeds it (the smallest loads dropped while it does): the
    cover clauses to add."""
    inside = set(members)
    out = []
    for s, per in loads.items():
        cap = problem.rooms[s].memory_mib
        here = sorted(((w, p) for p, w in per.items() if p in inside and w > 0), reverse=True)
        if sum(w for w, _ in here) <= cap:
            continue
        kept, total = [], 0
        for w, p in here:  # the largest first, until they exceed the memory: a small cover
            kept.append(p)
            total += w
            if total > cap:
                break
        out.append(kept)
    return out


def phases(problem: RollProblem, layout: Layout, clauses: RoundClauses, seed: int = 0) -> list[int]:
    """A colouring in `layout.rounds` rounds to start the solver from: DSatur (next the node
    whose conflicting nodes are in the most rounds, then the most conflicts), each node into
    the allowed round fewest of its coloured conflicting nodes are in; the clique's nodes
    in their fixed rounds. `seed` > 0 breaks the ties at random (another start for a
    restart). One literal per variable, true for the node's round."""
    adj = problem.neighbours()
    colour: dict[str, int] = {v: k for k, v in enumerate(layout.clique)}
    allowed: dict[str, list[int]] = {}
    for v, k in clauses.var:
        allowed.setdefault(v, []).append(k)
    seen: dict[str, set[int]] = {v: set() for v in problem.nodes}
    for v, k in colour.items():
        for w in adj[v]:
            seen[w].add(k)
    order = list(layout.order)
    if seed:
        random.Random(seed).shuffle(order)
    rank = {v: i for i, v in enumerate(order)}
    heap = [(-len(seen[v]), -len(adj[v]), rank[v], v) for v in layout.order if v not in colour]
    heapq.heapify(heap)
    while heap:
        neg, _, _, v = heapq.heappop(heap)
        if v in colour or -neg != len(seen[v]):
            continue
        count = [0] * clauses.rounds
        for w in adj[v]:
            if w in colour:
                count[colour[w]] += 1
        k = min(allowed[v], key=lambda k: (count[k], (k + seed) % clauses.rounds))
        colour[v] = k
        for w in adj[v]:
            if w not in colour and k not in seen[w]:
                seen[w].add(k)
                heapq.heappush(heap, (-len(seen[w]), -len(adj[w]), rank[w], w))
    return [lit if colour[v] == k else -lit for (v, k), lit in clauses.var.items()]
