"""hspace's standard allocation as a MIP over counts per node (docs/space.md).

Every new instance has the same shape, so the model counts them: how many each candidate node
takes as primary, and for drbd as secondary, instead of placing instances one by one. The
problem comes from `model.space.space_problem`; each node's checks are its rows
(`model.space.Row`, read off `model.capacity`).

Sets
    N            candidate nodes (online nodes of allocatable groups)
    G            their groups; N_g the candidates of group g
Parameters (new instance: memory M, disk D; node n)
    X[n], Z[n], T[n]           node n's rows as bounds: x ≤ X, z ≤ Z, x + z ≤ T (each row
                               a·x + b·z ≤ cap has b = 0, a = 0 or a = b: what one new
                               primary, one new secondary takes)
    U[n], R[n], F[n]           unallocated memory, N+1 reserve now, free memory incl. forthcoming
    peer[n,p]                  memory n reserves now for the failover of primary p
Variables
    x[n] ∈ ℤ≥0                 new instances with primary n
    z[n] ∈ ℤ≥0 (drbd)          new instances with secondary n
    r[n] ∈ ℤ≥0 (drbd)          the most new instances of one primary (without an existing
                               reservation on n) that have n as secondary
    b[n] ∈ {0,1} (drbd)        n is a secondary at all (only where a memory check needs it)
Objective
    placed = Σ_n x[n] (max), at most `-l`.

The drbd reserve of a secondary s is rMem = max_p peer[s,p], and with new instances peer[s,p]
grows by M·y[p,s], y[p,s] the new instances on the pair. The model keeps no y (n² variables on
a 1,000-node group): r[s] bounds y[p,s] for every primary without an existing reservation on s
and K[s,p] − x[s] the pairs that have one (`define_drbd_pairs`). A matrix y with row sums x,
column sums z, y[p,p] = 0 and those bounds exists exactly when a flow does; the strategy builds
it (`model.space.pair_matrix`) and, when none exists, adds the min cut the flow found as a row
(`add_flow_cut`) and solves again.

For templates other than drbd with capacity checks, global N+1: the failure of every node f of
a group that receives instances must be absorbable (docs/n1.md). `define_n1_aggregate` states
the memory and disk balance every failure needs; `add_failure` adds the exact re-placement of
one failure (its existing primaries and its new ones packed on the rest of the group beside the
new instances there), for the failures the final state of a solution does not survive.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyomo.core as pyo

from formulations.objective import Objective
from model.n1 import MIGRATABLE_TEMPLATES, Packing
from model.policy import policy_shortfall
from model.resources import check_migration
from model.space import NodeRoom, SpaceProblem


def _per_primary_cap(room: NodeRoom, memory_mib: int, reserved_mib: int) -> int:
    """K: x[n] + y ≤ K keeps U − 1 − M·x ≥ reserved + M·y (the N+1 check of a secondary)."""
    return (room.unallocated_mib - 1 - reserved_mib) // memory_mib


def special_pairs(problem: SpaceProblem) -> dict[str, dict[str, int]]:
    """For each drbd secondary s checking N+1: its candidate primaries p that s reserves
    memory for already, with K[s,p] (x[s] + y[p,s] ≤ K[s,p])."""
    rooms = problem.room
    m = problem.demand.memory_mib
    out: dict[str, dict[str, int]] = {}
    for room in problem.rooms:
        if not room.n1_checked:
            continue
        table = {
            p: max(_per_primary_cap(room, m, peer), 0)
            for p, peer in room.peers.items()
            if peer > 0 and p in rooms and rooms[p].group == room.group and rooms[p].primary_ok
        }
        if table:
            out[room.name] = table
    return out


def needs_indicator(room: NodeRoom) -> bool:
    """Whether 'a new secondary needs M < free memory' must be a row of its own: implied by
    the N+1 rows when the node checks N+1 and its memory incl. forthcoming is no lower than
    its unallocated memory (M·x + M ≤ M·x + M·r ≤ U − 1 ≤ F − 1)."""
    return not room.n1_checked or room.memory_forth_mib < room.unallocated_mib


# --- the model --------------------------------------------------------------------------------


def count_bounds(room: NodeRoom, drbd: bool) -> tuple[int, int, int | None]:
    """A node's rows as bounds: x ≤ X (rows only primaries use), z ≤ Z (only secondaries)
    and x + z ≤ T (rows both use alike: a drbd secondary takes the same disk and spindles
    as a primary); None when no row is shared. A row with other coefficients would need
    a row of its own; `model.space` makes none (asserted)."""
    x_cap = room.max_primaries()
    z_cap = room.max_secondaries() if drbd else 0
    shared = None
    for row in room.rows:
        a = row.per_primary if row.primary else 0
        b = row.per_secondary if (row.secondary and drbd) else 0
        if not (a and b) or row.cap < 0:
            continue
        if a != b:
            raise ValueError(f"row {row.kind} of {room.name}: {a}·x + {b}·z has no bound form")
        t = row.cap // a
        shared = t if shared is None else min(shared, t)
    return x_cap, z_cap, shared


def define_counts(m: pyo.ConcreteModel, p: SpaceProblem) -> None:
    """Every check of `addPriEx` / `addSecExEx` that is a linear capacity of the node
    (memory, disk and --min-disk, spindles, spindle and vCPU ratios, their *_forth twins):
    0 ≤ x[n] ≤ X[n] (0 where the policy refuses a primary); for drbd 0 ≤ z[n] ≤ Z[n],
    x[n] + z[n] ≤ T[n] and 0 ≤ r[n] ≤ z[n]."""
    rooms = p.rooms
    m.N = pyo.Set(initialize=[r.name for r in rooms], ordered=True)
    bounds = {r.name: count_bounds(r, p.drbd) for r in rooms}
    limit = p.options.limit
    xmax = {n: b[0] if limit is None else min(b[0], limit) for n, b in bounds.items()}
    m.x = pyo.Var(m.N, domain=pyo.NonNegativeIntegers, bounds=lambda _m, n: (0, xmax[n]))
    if not p.drbd:
        return
    zmax = {n: b[1] for n, b in bounds.items()}
    m.z = pyo.Var(m.N, domain=pyo.NonNegativeIntegers, bounds=lambda _m, n: (0, zmax[n]))
    m.r = pyo.Var(m.N, domain=pyo.NonNegativeIntegers, bounds=lambda _m, n: (0, zmax[n]))
    # r_le_z: r[n] ≤ z[n]
    m.r_le_z = pyo.Constraint(m.N, rule=lambda _m, n: m.r[n] <= m.z[n])
    shared = {n: b[2] for n, b in bounds.items() if b[2] is not None and b[2] < xmax[n] + zmax[n]}
    m.NS = pyo.Set(initialize=list(shared), ordered=True)
    # shared_rows: x[n] + z[n] ≤ T[n]
    m.shared_rows = pyo.Constraint(m.NS, rule=lambda _m, n: m.x[n] + m.z[n] <= shared[n])


def define_n1_reserve(m: pyo.ConcreteModel, p: SpaceProblem) -> None:
    """A node checking N+1 keeps unallocated memory above its reserve:
    M·x[n] + R[n] ≤ U[n] − 1; for drbd also M·x[n] + M·r[n] ≤ U[n] − 1 (a primary without an
    existing reservation there), i.e. x[n] + r[n] ≤ K[n]. A node whose unallocated memory
    does not cover its reserve now (U − 1 < R: it passed htools' load-time check on the
    reported free memory) takes nothing, as primary or as secondary."""
    mem = p.demand.memory_mib
    checked = [r for r in p.rooms if r.n1_checked]
    cap = {r.name: _per_primary_cap(r, mem, r.reserve_mib) for r in checked}
    m.NC = pyo.Set(initialize=[r.name for r in checked], ordered=True)
    # n1_now: x[n] ≤ ⌊(U − 1 − R)/M⌋ (x[n] = 0, and z[n] = 0 for drbd, when negative)
    m.n1_now = pyo.Constraint(m.NC, rule=lambda _m, n: m.x[n] <= max(cap[n], 0))
    if p.drbd:
        full = [n for n in m.NC if cap[n] < 0]
        m.n1_full = pyo.Constraint(full, rule=lambda _m, n: m.z[n] == 0)
        k = {r.name: max(_per_primary_cap(r, mem, 0), 0) for r in checked}
        # n1_new: x[n] + r[n] ≤ ⌊(U − 1)/M⌋
        m.n1_new = pyo.Constraint(m.NC, rule=lambda _m, n: m.x[n] + m.r[n] <= k[n])


def define_secondary_memory(m: pyo.ConcreteModel, p: SpaceProblem) -> None:
    """A new secondary needs M < U − M·x (the node already failing N+1) and M < F − M·x
    (memory incl. forthcoming), where the N+1 rows do not imply it:
    z[n] ≤ zmax·b[n], M·x[n] + M·b[n] ≤ U − 1 and ≤ F − 1."""
    if not p.drbd:
        return
    mem = p.demand.memory_mib
    rooms = [r for r in p.rooms if needs_indicator(r)]
    m.NB = pyo.Set(initialize=[r.name for r in rooms], ordered=True)
    m.b = pyo.Var(m.NB, domain=pyo.Binary)
    zmax = {r.name: r.max_secondaries() for r in rooms}
    limit = {  # below 0 (a node that takes no primary either): no secondary
        r.name: max(
            (min(r.unallocated_mib, r.memory_forth_mib) if not r.n1_checked else r.memory_forth_mib)
            - 1,
            0,
        )
        for r in rooms
    }
    # is_secondary: z[n] ≤ zmax·b[n]
    m.is_secondary = pyo.Constraint(m.NB, rule=lambda _m, n: m.z[n] <= zmax[n] * m.b[n])
    # secondary_memory: M·x[n] + M·b[n] ≤ min(U, F) − 1
    m.secondary_memory = pyo.Constraint(
        m.NB, rule=lambda _m, n: mem * m.x[n] + mem * m.b[n] <= limit[n]
    )


def define_drbd_pairs(m: pyo.ConcreteModel, p: SpaceProblem) -> None:
    """What a pair matrix y needs of the counts (each the flow's cut for a simple set):
    Σ_{n∈g} x[n] = Σ_{n∈g} z[n] per group (every instance has its secondary in its group);
    x[n] ≤ Σ_{s∈g, s≠n} z[s] (not on itself); x[n] ≤ Σ_{s≠n} cap[n,s] and z[n] ≤ Σ_{q≠n}
    cap[q,n], where cap[q,s] = r[s], or K[s,q] − x[s] for a pair that reserves memory
    already, or z[s] on a node not checking N+1."""
    if not p.drbd:
        return
    special = special_pairs(p)
    by_group: dict[str, list[str]] = {}
    for r in p.rooms:
        by_group.setdefault(r.group, []).append(r.name)
    is_primary = {g: {r.name for r in p.group_nodes(g) if r.primary_ok} for g in by_group}
    n_primaries = {g: len(v) for g, v in is_primary.items()}
    rooms = p.room
    m.G = pyo.Set(initialize=list(by_group), ordered=True)
    # balance: Σ_{n∈g} x[n] = Σ_{n∈g} z[n]
    m.balance = pyo.Constraint(
        m.G,
        rule=lambda _m, g: sum(m.x[n] for n in by_group[g]) == sum(m.z[n] for n in by_group[g]),
    )
    m.Z = pyo.Var(m.G, domain=pyo.NonNegativeReals)
    m.R = pyo.Var(m.G, domain=pyo.NonNegativeReals)
    # z_total, r_total: Z[g] = Σ z[n], R[g] = Σ cap of n as a generic secondary
    m.z_total = pyo.Constraint(m.G, rule=lambda _m, g: m.Z[g] == sum(m.z[n] for n in by_group[g]))

    def generic(n: str) -> object:
        return m.r[n] if rooms[n].n1_checked else m.z[n]

    m.r_total = pyo.Constraint(
        m.G, rule=lambda _m, g: m.R[g] == sum(generic(n) for n in by_group[g])
    )
    # not_on_itself: x[n] ≤ Z[g] − z[n]
    m.not_on_itself = pyo.Constraint(m.N, rule=lambda _m, n: m.x[n] <= m.Z[rooms[n].group] - m.z[n])
    towards: dict[str, list[tuple[str, int]]] = {}
    for s, table in special.items():
        for q, k in table.items():
            towards.setdefault(q, []).append((s, k))

    def out_cap(_m: pyo.ConcreteModel, n: str) -> object:
        # x[n] ≤ R[g] − cap_generic[n] + Σ_{s special for n} (K[s,n] − x[s])   (a relaxation:
        # the special pairs counted with both caps)
        extra = sum(k - m.x[s] for s, k in towards.get(n, ()))
        return m.x[n] <= m.R[rooms[n].group] - generic(n) + extra

    m.out_cap = pyo.Constraint(m.N, rule=out_cap)

    def in_cap(_m: pyo.ConcreteModel, n: str) -> object:
        g = rooms[n].group
        if not rooms[n].n1_checked:
            return pyo.Constraint.Skip
        table = special.get(n, {})
        generic_primaries = n_primaries[g] - (n in is_primary[g]) - len(table)
        extra = sum(k - m.x[n] for k in table.values())
        return m.z[n] <= generic_primaries * m.r[n] + extra

    # in_cap: z[n] ≤ |generic primaries of n|·r[n] + Σ_{q special} (K[n,q] − x[n])
    m.in_cap = pyo.Constraint(m.N, rule=in_cap)
    m.cuts = pyo.ConstraintList(doc="min cuts of pair flows that failed (add_flow_cut)")


def define_n1_aggregate(m: pyo.ConcreteModel, p: SpaceProblem, packings: Sequence[Packing]) -> None:
    """Global N+1, summed: when node f fails, its primaries that need a new node (need[f] MiB,
    its new ones included) must fit in what the rest of its group has left after the new
    instances there; the new ones' memory cancels out:
    M·Σ_{n∈g} x[n] ≤ Σ_{t≠f} cap[f,t] − need[f] for every f (memory; local disk likewise for
    plain). Every failure of a group has the same left side, so only the least right side
    binds: one row per group and resource, min over f (1,000 rows of 1,000 terms each on a
    1,000-node group were 12 s of build and 45 s of handing them to HiGHS, issue 36)."""
    m.n1_sum = pyo.ConstraintList()
    if not packings:
        return
    mem, disk = p.demand.memory_mib, p.demand.disk_mib
    local = p.demand.uses_local_storage
    least: dict[str, list[int | None]] = {}  # group -> [memory, disk] right sides
    for pk in packings:
        room_mem = sum(max(b.memory_mib, 0) for b in pk.bins)
        need_mem = sum(i.memory_mib for i in pk.items)
        rhs = least.setdefault(pk.group, [None, None])
        rhs[0] = _least(rhs[0], room_mem - need_mem)
        if local and disk:
            room_disk = sum(max(b.disk_mib, 0) for b in pk.bins)
            need_disk = sum(i.disk_mib for i in pk.items if i.local)
            rhs[1] = _least(rhs[1], room_disk - need_disk)
    for g, (rhs_mem, rhs_disk) in least.items():
        total = sum(m.x[r.name] for r in p.group_nodes(g))
        m.n1_sum.add(mem * total <= rhs_mem)
        if rhs_disk is not None:
            m.n1_sum.add(disk * total <= rhs_disk)


def _least(a: int | None, b: int) -> int:
    return b if a is None else min(a, b)


def new_targets(p: SpaceProblem, pk: Packing) -> list[str]:
    """The nodes a new instance of a failed node f can go to: the packing's nodes (the rest
    of the group) that admit it (a migration's tags, a recreation's policy)."""
    state, d = p.state, p.demand
    source = state.nodes[pk.node]
    out = []
    for b in pk.bins:
        target = state.nodes[b.name]
        if d.disk_template in MIGRATABLE_TEMPLATES:
            if check_migration(source, target) is not None:
                continue
        elif policy_shortfall(d, state.ipolicy_of(b.name), target.exclusive_storage):
            continue
        out.append(b.name)
    return out


def add_failure(m: pyo.ConcreteModel, p: SpaceProblem, pk: Packing) -> None:
    """The exact re-placement of node f's primaries when f fails (formulations/n1.py's
    packing, with the new instances): u[k,t] of f's existing primaries of shape k and w[t] of
    its new ones go to node t; Σ_t u[k,t] = count[k], Σ_t w[t] = x[f], and on every node t
    Σ_k mem[k]·u[k,t] + M·w[t] + M·x[t] ≤ cap_mem[f,t] (local disk and spindles likewise)."""
    from formulations.n1 import shapes_of

    d = p.demand
    f = pk.node
    rooms = p.room
    shapes = shapes_of(pk)
    block = pyo.Block()
    m.add_component(f"fails_{len(list(m.component_objects(pyo.Block)))}", block)
    pairs = [(k, t) for k in range(len(shapes.keys)) for t in shapes.members[k][0].targets]
    count = [len(members) for members in shapes.members]
    # bounded by what they sum to: CP-SAT needs finite bounds (benchmarks/large_numbers.py
    # found `space --solver cpsat` refused on Ganeti's hspace-tiered.data)
    block.u = pyo.Var(pairs, domain=pyo.NonNegativeIntegers, bounds=lambda _b, k, t: (0, count[k]))
    block.placed = pyo.Constraint(
        range(len(count)),
        rule=lambda _b, k: sum(block.u[k2, t] for k2, t in pairs if k2 == k) == count[k],
    )
    targets = new_targets(p, pk) if f in rooms else []
    block.w = pyo.Var(
        targets, domain=pyo.NonNegativeIntegers, bounds=(0, m.x[f].ub if f in rooms else 0)
    )
    if f in rooms:
        # new_placed: Σ_t w[t] = x[f]
        block.new_placed = pyo.Constraint(expr=sum(block.w[t] for t in targets) == m.x[f])
    items = [members[0] for members in shapes.members]
    local = d.uses_local_storage
    spindles = d.disk_spindles or 0
    block.rows = pyo.ConstraintList()
    # a node below its cap already takes nothing: its row says so with the cap at 0 (a
    # failover that leaves it there fails, and then the group is closed before any solve)
    for b in pk.bins:
        t = b.name
        here = [(k, items[k]) for k, t2 in pairs if t2 == t]
        new = (block.w[t] if t in targets else 0) + (m.x[t] if t in rooms else 0)
        rows = [
            (b.memory_mib, [(it.memory_mib, k) for k, it in here], d.memory_mib),
            (b.disk_mib, [(it.disk_mib, k) for k, it in here if it.local], d.disk_mib * local),
        ]
        if b.spindles is not None:
            spn = [((it.spindles or 0), k) for k, it in here if it.local]
            rows.append((b.spindles, spn, spindles * local))
        for cap, terms, per_new in rows:
            lhs = sum(use * block.u[k, t] for use, k in terms if use)
            if per_new and not isinstance(new, int):
                lhs = lhs + per_new * new
            if not isinstance(lhs, int):
                block.rows.add(lhs <= max(cap, 0))


def build(
    p: SpaceProblem, packings: Sequence[Packing] = (), closed: Sequence[str] = ()
) -> pyo.ConcreteModel:
    """The standard allocation; `packings` are the failures of global N+1 (their summed rows),
    `closed` the groups that take no new instance (not N+1 redundant already)."""
    m = pyo.ConcreteModel(name="space")
    define_counts(m, p)
    define_n1_reserve(m, p)
    define_secondary_memory(m, p)
    define_drbd_pairs(m, p)
    define_n1_aggregate(m, p, packings)
    shut = [r.name for r in p.rooms if r.group in set(closed)]
    # closed: x[n] = 0 on groups that are not N+1 redundant
    m.closed = pyo.Constraint(shut, rule=lambda _m, n: m.x[n] == 0)
    placed = sum(m.x[n] for n in m.N)
    if p.options.limit is not None:
        # limit: Σ x[n] ≤ -l
        m.limit = pyo.Constraint(expr=placed <= p.options.limit)
    m.placed = pyo.Expression(expr=placed)
    return m


def objectives(m: pyo.ConcreteModel, p: SpaceProblem) -> list[Objective]:
    """placed (max)."""
    return [Objective("placed", m.placed, "max")]


def solution(
    m: pyo.ConcreteModel, p: SpaceProblem
) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """x, z and r as integer counts per node (z, r empty unless drbd)."""

    def read(var: pyo.Var) -> dict[str, int]:
        out = {}
        for n in m.N:
            v = int(round(var[n].value or 0))
            if v:
                out[n] = v
        return out

    x = read(m.x)
    if not p.drbd:
        return x, {}, {}
    return x, read(m.z), read(m.r)


def add_flow_cut(
    m: pyo.ConcreteModel,
    p: SpaceProblem,
    source_side: set[str],
    group: str,
) -> None:
    """The flow's min cut as a row: with R the nodes the residual flow reaches from the source
    (primaries and secondaries alike), Σ_{q∈R} x[q] ≤ Σ_{s∈R} z[s] + Σ_{q∈R, s∉R, s≠q}
    cap[q,s], with cap[q,s] = K[s] − x[s], or K[s,q] − x[s] for a pair that reserves memory
    already, or z[s] on a node not checking N+1: every valid answer meets it."""
    special = special_pairs(p)
    rooms = p.room
    mem = p.demand.memory_mib
    members = [r.name for r in p.group_nodes(group)]
    reached = [q for q in members if ("p", q) in source_side and rooms[q].primary_ok]
    lhs = sum(m.x[q] for q in reached)
    rhs = sum(m.z[s] for s in members if ("s", s) in source_side)
    for s in members:
        if ("s", s) in source_side:
            continue
        table = special.get(s, {})
        generic_count = sum(1 for q in reached if q != s and q not in table)
        if rooms[s].n1_checked:
            k = max(_per_primary_cap(rooms[s], mem, 0), 0)
            rhs = rhs + generic_count * (k - m.x[s])
        else:
            rhs = rhs + generic_count * m.z[s]
        for q in reached:
            if q in table and q != s:
                rhs = rhs + (table[q] - m.x[s])
    m.cuts.add(lhs <= rhs)


def pair_caps(
    p: SpaceProblem, x: Mapping[str, int], z: Mapping[str, int]
) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    """The flow's capacities at a solution: the most instances of one primary a secondary s
    can back, K[s] − x[s] (any z[s] where s checks no N+1), and the special pairs'
    K[s,p] − x[s]. The largest caps the counts allow (r[s] may be lower at a solution)."""
    mem = p.demand.memory_mib
    generic = {}
    for room in p.rooms:
        n = room.name
        if room.n1_checked:
            generic[n] = max(_per_primary_cap(room, mem, 0) - x.get(n, 0), 0)
        else:
            generic[n] = z.get(n, 0)
    special = {
        (q, s): max(0, k - x.get(s, 0))
        for s, table in special_pairs(p).items()
        for q, k in table.items()
    }
    return generic, special
