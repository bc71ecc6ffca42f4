"""A local search for a plan of k rounds: TabuCol with the receiving nodes' memory as penalties
(docs/roll.md, "Why 2,000 nodes at random stay unproven").

Why it exists: where the SAT relaxation cannot decide "k rounds?" (the 2,000-node clusters
with secondaries at random, whose conflict graphs sit at the 3-colourability threshold), a
colouring may still exist, and near the threshold colourable graphs are often easier for a
local search than for a complete solver. A colouring found there, once its rounds pack, meets
the bound and is proven optimal by it; a search that finds none proves nothing.

The search (Galinier and Hao, "Hybrid evolutionary algorithms for graph coloring", J. Comb.
Optim. 3, 1999, its tabu part): every node in one of k rounds; the penalty is the number of
conflicting pairs in one round plus the number of (receiving node, round) whose migrations
exceed that node's memory; each move puts one node of a penalised pair or overflow into
another round, the best move that is not tabu (or that reaches a penalty below the best
seen), ties at random; the round a node left is tabu for it for 0.6 × (penalised nodes) +
rand(10) moves. Stops at penalty 0, after `max_moves` moves or at the deadline.

Only the penalties are searched: the rounds' packing (non-redundant instances, group rooms)
is the caller's to check, and the plan the checker's.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from model.roll import RollProblem

#: Moves between looks at the clock (the deadline), a power of two less one.
CLOCK_EVERY = 255


@dataclass(frozen=True)
class SearchResult:
    """rounds: k rounds (some maybe empty) with penalty 0, or None when none was reached;
    best: the lowest penalty seen; moves: the moves made."""

    rounds: tuple[tuple[str, ...], ...] | None
    best: int
    moves: int


def tabu_rounds(
    problem: RollProblem,
    rounds: int,
    max_moves: int,
    *,
    seed: int = 0,
    start: Mapping[str, int] | None = None,
    deadline: float | None = None,
) -> SearchResult:
    """TabuCol for `rounds` rounds of `problem`'s nodes, from `start` (node -> round; a node
    not in it, or every node without it, in a random round)."""
    rnd = random.Random(seed)
    nodes = list(problem.nodes)
    k = rounds
    idx = {v: i for i, v in enumerate(nodes)}
    n = len(nodes)
    adj = problem.neighbours()
    nb = [[idx[w] for w in adj[v] if w in idx] for v in nodes]
    # migrations: per node, (receiving node number, MiB); per receiving node, its primaries
    recv = sorted({s for s, per in problem.loads().items() if any(p in idx for p in per)})
    ridx = {s: j for j, s in enumerate(recv)}
    cap = [problem.rooms[s].memory_mib for s in recv]
    out: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    into: list[list[tuple[int, int]]] = [[] for _ in recv]
    for s, per in problem.loads().items():
        for p, w in per.items():
            if p in idx and w > 0:
                out[idx[p]].append((ridx[s], w))
                into[ridx[s]].append((idx[p], w))
    given = start or {}
    col = [given[v] if given.get(v, -1) in range(k) else rnd.randrange(k) for v in nodes]
    gam = [[0] * k for _ in range(n)]  # conflicting nodes per round
    for i in range(n):
        for j in nb[i]:
            gam[i][col[j]] += 1
    used = [[0] * k for _ in recv]
    for i in range(n):
        for j, w in out[i]:
            used[j][col[i]] += w
    over = [[0] * k for _ in range(n)]  # overflowing receiving nodes i loads, per round
    for j in range(len(recv)):
        for c in range(k):
            if used[j][c] > cap[j]:
                for i, _ in into[j]:
                    over[i][c] += 1
    penalty = sum(gam[i][col[i]] for i in range(n)) // 2
    penalty += sum(1 for j in range(len(recv)) for c in range(k) if used[j][c] > cap[j])
    bad = {i for i in range(n) if gam[i][col[i]] or over[i][col[i]]}
    best, tabu, moves = penalty, {}, 0

    def flip(j: int, c: int, on: bool) -> None:
        """Receiving node j's round c starts (on) or stops overflowing."""
        d = 1 if on else -1
        for p, _ in into[j]:
            over[p][c] += d
            mark(p)

    def mark(i: int) -> None:
        if gam[i][col[i]] or over[i][col[i]]:
            bad.add(i)
        else:
            bad.discard(i)

    while penalty and moves < max_moves:
        if not moves & CLOCK_EVERY and deadline is not None and time.perf_counter() >= deadline:
            break
        moves += 1
        chosen, top = [], None
        for i in bad:
            gi, ci = gam[i], col[i]
            for c in range(k):
                if c == ci:
                    continue
                d = gi[c] - gi[ci]
                for j, w in out[i]:
                    u, m = used[j], cap[j]
                    d += (u[ci] - w > m) - (u[ci] > m) + (u[c] + w > m) - (u[c] > m)
                if tabu.get((i, c), 0) > moves and penalty + d >= best:
                    continue
                if top is None or d < top:
                    top, chosen = d, [(i, c)]
                elif d == top:
                    chosen.append((i, c))
        if top is None:
            continue  # every move tabu: wait for one to free
        i, c = rnd.choice(chosen)
        old = col[i]
        col[i] = c
        penalty += top
        for j in nb[i]:
            gam[j][old] -= 1
            gam[j][c] += 1
            mark(j)
        for j, w in out[i]:
            u, m = used[j], cap[j]
            was_old, was_new = u[old] > m, u[c] > m
            u[old] -= w
            u[c] += w
            if was_old and u[old] <= m:
                flip(j, old, False)
            if not was_new and u[c] > m:
                flip(j, c, True)
        mark(i)
        tabu[(i, old)] = moves + int(0.6 * len(bad)) + rnd.randrange(10)
        best = min(best, penalty)
    if penalty:
        return SearchResult(None, best, moves)
    per: list[list[str]] = [[] for _ in range(k)]
    for i, v in enumerate(nodes):
        per[col[i]].append(v)
    return SearchResult(tuple(tuple(r) for r in per), 0, moves)


def penalty_of(problem: RollProblem, rounds: Sequence[Sequence[str]]) -> int:
    """The search's penalty of a plan, counted afresh (conflicting pairs in a round, and
    receiving nodes whose migrations from one round exceed their memory): for the tests."""
    pairs = problem.conflict_pairs
    total = 0
    for r in rounds:
        inside = set(r)
        total += sum(1 for p in pairs if p <= inside)
        for s, per in problem.loads().items():
            if sum(w for p, w in per.items() if p in inside) > problem.rooms[s].memory_mib:
                total += 1
    return total
