"""hroller as Ganeti 3.0.2 runs it (Program/Hroller.hs, Graph.hs, Node.mkNodeGraph and
mkRebootNodeGraph), ported for `exalloc roll --greedy`: the same graph, the same three
colourings with their tie-breaks, the same first-fit splits and the same output, byte for
byte (docs/roll.md, "What hroller does").

htools identifies nodes and instances by index (their position in the input), and hroller
leans on that in ways a port must keep:

* the node graph's vertices are every index from the lowest to the highest considered node
  (`Graph.buildG` over `nodesToBounds`), so a filtered-out node lying between two considered
  ones is coloured, and cleared of its non-redundant instances, with its round;
* edges keep their multiplicity (two instances on one pair of nodes give the edge twice),
  which counts in the degrees the heuristics sort by;
* `replaceSecondary` writes the instance's *primary* node, less the secondary, over the old
  secondary's slot (`old_secondary = Container.find pdx nl`): later steps of that round read
  the copy, and `--print-moves` prints its name.

Every function here is pure: a `Conf` is an overlay over the loaded cluster, and each change
returns a new one.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from model.backends.text import sep_split, show_list
from model.cluster import Cluster, read_name
from model.resources import (
    FailMode,
    InstanceDemand,
    NodeState,
    add_primary,
    add_secondary,
    demand_of,
    loaded_states,
    remove_primary,
    remove_secondary,
)

NO_SECONDARY = -1  # Node.noSecondary

NO_MASTER = "No master node found (maybe not supported by backend)."
NO_GRAPH = "Cannot create node graph"
NO_GROUP = "Cannot find target group."
NO_ARGUMENTS = "This program doesn't take any arguments."
NOT_ENOUGH_NON_REDUNDANT = "Not enough capacity to move non-redundant instances"
FAILED_MIGRATION = "Failed to migrate instances off nodes"
NOT_ENOUGH_SECONDARIES = "Not enough capacity to move secondaries"


@dataclass(frozen=True)
class RollerOptions:
    """hroller's options that shape its answer (the backend options are the program's)."""

    offline: tuple[str, ...] = ()  # -O NAME,...: names or unique prefixes
    offline_maintenance: bool = False
    skip_non_redundant: bool = False
    ignore_non_redundant: bool = False
    node_tags: tuple[str, ...] | None = None
    group: str | None = None  # -G: a group's name or uuid
    full_evacuation: bool = False
    one_step_only: bool = False
    print_moves: bool = False
    verbose: int = 1
    no_headers: bool = False
    force: bool = False


# --- names (BasicTypes.lookupName) -----------------------------------------------------------

_EXACT, _MULTIPLE, _PARTIAL, _FAIL = range(4)  # MatchPriority, in its Ord order


def lookup_name(names: Sequence[str], wanted: str) -> tuple[int, str]:
    """(priority, content) of htools' `lookupName`: an exact name, else the one name that
    starts with `wanted.`; content is the name found, or `wanted` itself."""
    found = (_FAIL, wanted)
    for name in reversed(names):  # foldr
        if name == wanted:
            new = (_EXACT, name)
        elif name.startswith(wanted + "."):
            new = (_PARTIAL, name)
        else:
            new = (_FAIL, wanted)
        if new[0] == _EXACT:
            found = new
        elif new[0] == _PARTIAL and found[0] == _PARTIAL:
            found = (_MULTIPLE, wanted)
        elif new[0] <= found[0]:
            found = new
    return found


def offline_names(names: Sequence[str], wanted: Sequence[str]) -> tuple[set[str], list[str]]:
    """`setNodeStatus`'s -O: the node names to mark offline and the lookups that failed."""
    results = [lookup_name(names, w) for w in wanted]
    wrong = [content for prio, content in results if prio not in (_EXACT, _PARTIAL)]
    return {content for _, content in results}, wrong


# --- the loaded cluster, by index ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    """What `Container.find k nl` returns: a node's state with its `pList` and `sList`
    (instance indices, newest first, as `setPri`/`addPriEx` prepend them)."""

    state: NodeState
    plist: tuple[int, ...]
    slist: tuple[int, ...]


@dataclass(frozen=True)
class Loaded:
    """The cluster as hroller holds it after loading and `setNodeStatus`: node records and
    instance demands by index, the instances' nodes by index."""

    names: tuple[str, ...]  # node names by index
    records: tuple[Record, ...]
    demands: tuple[InstanceDemand, ...]
    instance_names: tuple[str, ...]
    places: tuple[tuple[int, int], ...]  # (primary, secondary or NO_SECONDARY) by index

    @property
    def nodes(self) -> range:
        return range(len(self.names))


def _without(items: tuple[int, ...], item: int) -> tuple[int, ...]:
    """Haskell's `delete`: the first occurrence removed."""
    if item not in items:
        return items
    i = items.index(item)
    return items[:i] + items[i + 1 :]


def load(cluster: Cluster, offline: set[str] = frozenset(), *, merges: int = 1) -> Loaded:
    """Node states as `Loader.mergeData` leaves them, then the -O nodes set offline. Instances
    are kept by index, so that two of one name (as in Ganeti's hroller-full.data) stay two.
    `merges=2` is an IAllocator request as htools' `-I` reads it: `IAlloc.parseData` merges
    the cluster and `ExtLoader` merges the result again, so every instance is on its nodes'
    lists twice and counted twice in their memory (docs/htools-facts.md §5)."""
    twice = replace(cluster, instances=cluster.instances * merges) if merges > 1 else cluster
    rules, states, _ = loaded_states(twice)
    names = tuple(n.name for n in cluster.nodes)
    index = {name: k for k, name in enumerate(names)}
    plists: list[list[int]] = [[] for _ in names]
    slists: list[list[int]] = [[] for _ in names]
    places = []
    demands = []
    for idx, inst in enumerate(cluster.instances):
        p = index[inst.primary]
        s = index[inst.secondary] if inst.secondary else NO_SECONDARY
        places.append((p, s))
        demands.append(demand_of(inst, rules))
        if inst.forthcoming:  # setPri/setSec keep them out of pList/sList
            continue
        plists[p].append(idx)
        if s != NO_SECONDARY:
            slists[s].append(idx)
    records = []
    for k, name in enumerate(names):
        st = states[name]
        if name in offline and not st.offline:
            st = replace(st, offline=True)
        plist, slist = tuple(reversed(plists[k])), tuple(reversed(slists[k]))
        records.append(Record(st, plist * merges, slist * merges))
    return Loaded(
        names,
        tuple(records),
        tuple(demands),
        tuple(i.name for i in cluster.instances),
        tuple(places),
    )


@dataclass(frozen=True)
class Conf:
    """`(Node.List, Instance.List)`: the loaded cluster with the changes of one round."""

    base: Loaded
    changed: Mapping[int, Record] = field(default_factory=dict)
    moved: Mapping[int, tuple[int, int]] = field(default_factory=dict)

    def record(self, k: int) -> Record:
        hit = self.changed.get(k)
        return hit if hit is not None else self.base.records[k]

    def place(self, idx: int) -> tuple[int, int]:
        hit = self.moved.get(idx)
        return hit if hit is not None else self.base.places[idx]

    def with_changes(
        self, records: Sequence[tuple[int, Record]], places: Mapping[int, tuple[int, int]]
    ) -> Conf:
        """`Container.addTwo k1 r1 k2 r2`: r2 stored first, so r1 wins on one key."""
        changed = dict(self.changed)
        for k, r in reversed(records):
            changed[k] = r
        return Conf(self.base, changed, {**self.moved, **places})


# --- the graph (Node.mkNodeGraph, mkRebootNodeGraph, Graph.buildG) --------------------------


@dataclass(frozen=True)
class NodeGraph:
    """`Data.Graph.Graph`: vertices `low..high`, each with its neighbours in buildG's order."""

    low: int
    high: int
    adjacency: Mapping[int, tuple[int, ...]]

    @property
    def vertices(self) -> range:
        return range(self.low, self.high + 1)

    def neighbours(self, v: int) -> tuple[int, ...]:
        return self.adjacency.get(v, ())

    def show(self) -> str:
        """Haskell's `show` of the graph's array, as `hroller -v -v -v` prints it."""
        cells = ",".join(f"({v},[{','.join(map(str, self.neighbours(v)))}])" for v in self.vertices)
        return f"array ({self.low},{self.high}) [{cells}]"


def instance_edges(loaded: Loaded) -> list[tuple[int, int]]:
    """`instancesToEdges`: both directions of every primary-secondary pair, with repeats."""
    edges = []
    for p, s in loaded.places:
        if s != NO_SECONDARY:
            edges += [(p, s), (s, p)]
    return edges


def shared_secondary_edges(loaded: Loaded) -> list[tuple[int, int]]:
    """`nodeToSharedSecondaryEdge` over every node: all pairs (loops included) of the
    primaries of the instances a node is secondary of."""
    edges = []
    for rec in loaded.records:
        primaries = [loaded.places[i][0] for i in rec.slist]
        edges += [(a, b) for a in primaries for b in primaries]
    return edges


def build_graph(loaded: Loaded, considered: Sequence[int], *, reboot: bool) -> NodeGraph | None:
    """The node graph hroller colours (None when no node is considered: "Cannot create node
    graph"). `reboot` adds the shared-secondary cliques (`mkRebootNodeGraph`, the default;
    `--offline-maintenance` uses `mkNodeGraph`)."""
    if not considered:
        return None
    keep = set(considered)
    edges = instance_edges(loaded)
    if reboot:
        seen = set(edges)
        extra: dict[tuple[int, int], None] = {}  # `union`: nub, minus the first list
        for e in shared_secondary_edges(loaded):
            if e not in seen:
                extra.setdefault(e)
        edges += list(extra)
    adjacency: dict[int, list[int]] = {}
    for a, b in edges:
        if a in keep and b in keep:
            adjacency.setdefault(a, []).append(b)
    shown = {v: tuple(reversed(ws)) for v, ws in adjacency.items()}  # accumArray (flip (:))
    return NodeGraph(min(keep), max(keep), shown)


# --- the colourings (Graph.colorLF, colorDsatur, colorDcolor) ------------------------------


def _colour_of(graph: NodeGraph, colours: Mapping[int, int], v: int) -> int:
    """`colorNode`: the smallest colour no coloured neighbour has."""
    taken = {colours[w] for w in graph.neighbours(v) if w in colours}
    c = 0
    while c in taken:
        c += 1
    return c


def colour_lf(graph: NodeGraph) -> dict[int, int]:
    """`colorLF`: greedy in `verticesByDegreeAsc` order run by `foldr`, i.e. from its end:
    highest degree first, the higher vertex first among equal degrees."""
    order = sorted(graph.vertices, key=lambda v: len(graph.neighbours(v)))  # stable
    colours: dict[int, int] = {}
    for v in reversed(order):
        colours[v] = _colour_of(graph, colours, v)
    return colours


def _colour_dynamic(graph: NodeGraph, saturation: bool) -> dict[int, int]:
    """`colorDynamicOrder`: next the vertex of largest (first key, degree), the last such
    in vertex order (`maximumBy` keeps the last maximum); the first key is the number of
    distinct neighbour colours (Dsatur) or of coloured neighbours (Dcolor)."""
    colours: dict[int, int] = {}
    degree = {v: len(graph.neighbours(v)) for v in graph.vertices}
    seen: dict[int, set[int]] = {v: set() for v in graph.vertices}
    count = dict.fromkeys(graph.vertices, 0)
    heap = [(0, -degree[v], -v) for v in graph.vertices]
    heapq.heapify(heap)
    while heap:
        key, _, neg_v = heapq.heappop(heap)
        v = -neg_v
        first = len(seen[v]) if saturation else count[v]
        if v in colours or -key != first:
            continue  # stale: coloured, or its key has grown since
        c = _colour_of(graph, colours, v)
        colours[v] = c
        for w in graph.neighbours(v):
            if w in colours:
                continue
            seen[w].add(c)
            count[w] += 1
            first_w = len(seen[w]) if saturation else count[w]
            heapq.heappush(heap, (-first_w, -degree[w], -w))
    return colours


def colour_dsatur(graph: NodeGraph) -> dict[int, int]:
    return _colour_dynamic(graph, saturation=True)


def colour_dcolor(graph: NodeGraph) -> dict[int, int]:
    return _colour_dynamic(graph, saturation=False)


COLOURINGS: tuple[tuple[str, Callable[[NodeGraph], dict[int, int]]], ...] = (
    ("LF", colour_lf),
    ("Dsatur", colour_dsatur),
    ("Dcolor", colour_dcolor),
)


def colour_classes(colours: Mapping[int, int]) -> list[list[int]]:
    """`colorVertMap` then `IntMap.elems`: each colour's vertices ascending, by colour."""
    classes: dict[int, list[int]] = {}
    for v in sorted(colours):
        classes.setdefault(colours[v], []).append(v)
    return [classes[c] for c in sorted(classes)]


def stats(colourings: Sequence[tuple[str, list[list[int]]]]) -> str:
    """`getStats`: the heuristics from fewest colours to most (last listed first among
    equals), each compared with the one before it."""
    by_size = sorted(colourings, key=lambda c: -len(c[1]))  # stable, most colours first
    text, previous = "", 0
    for name, classes in reversed(by_size):
        shown = f"{name}: {len(classes)} ({','.join(str(len(c)) for c in classes)})"
        if previous == 0:
            text = shown
        else:
            text += (" TIE " if previous == len(classes) else " LOOSE ") + shown
        previous = len(classes)
    return text


# --- moving instances (Hroller.move, migrate, replaceSecondary) ----------------------------


def move_primary(conf: Conf, idx: int, target: int) -> Conf | None:
    """`move`: a non-redundant instance to another node (`addPriEx True`)."""
    d = conf.base.demands[idx]
    old, secondary = conf.place(idx)
    new_rec, old_rec = conf.record(target), conf.record(old)
    added = add_primary(new_rec.state, d, strict=False)
    if isinstance(added, FailMode):
        return None
    removed = remove_primary(old_rec.state, d)
    return conf.with_changes(
        [
            (old, Record(removed, _without(old_rec.plist, idx), old_rec.slist)),
            (target, Record(added, (idx, *new_rec.plist), new_rec.slist)),
        ],
        {idx: (target, secondary)},
    )


def migrate(conf: Conf, idx: int) -> Conf | None:
    """`migrate`: a drbd instance's primary and secondary swap (`addPriEx True` on the
    secondary, `addSecEx True` on the primary)."""
    names = conf.base.names
    d = conf.base.demands[idx]
    p, s = conf.place(idx)
    p_rec, s_rec = conf.record(p), conf.record(s)
    p_state = remove_primary(p_rec.state, d)
    s_state = remove_secondary(s_rec.state, d, names[p])
    s_new = add_primary(s_state, d, strict=False)
    if isinstance(s_new, FailMode):
        return None
    p_new = add_secondary(p_state, d, names[s], strict=False)
    if isinstance(p_new, FailMode):
        return None
    return conf.with_changes(
        [
            (p, Record(p_new, _without(p_rec.plist, idx), (idx, *p_rec.slist))),
            (s, Record(s_new, (idx, *s_rec.plist), _without(s_rec.slist, idx))),
        ],
        {idx: (s, p)},
    )


def replace_secondary(conf: Conf, idx: int, target: int) -> Conf | None:
    """`replaceSecondary`, as written: the new secondary gets the disk (`addSecEx True`);
    the primary's record, less the secondary, is stored under the old secondary's index."""
    names = conf.base.names
    d = conf.base.demands[idx]
    p, old = conf.place(idx)
    if p == target:
        return None  # FailInternal
    new_rec, p_rec = conf.record(target), conf.record(p)
    added = add_secondary(new_rec.state, d, names[p], strict=False)
    if isinstance(added, FailMode):
        return None
    copied = Record(
        remove_secondary(p_rec.state, d, names[p]), p_rec.plist, _without(p_rec.slist, idx)
    )
    return conf.with_changes(
        [(old, copied), (target, Record(added, new_rec.plist, (idx, *new_rec.slist)))],
        {idx: (p, target)},
    )


def _first_that_works(
    step: Callable[[Conf, int, int], Conf | None],
    idxs: Sequence[int],
    targets: Callable[[], Iterable[int]],
) -> Callable[[Conf], Conf | None]:
    """`foldM` over the instances of `msum` over the targets: each instance on the first
    target that takes it, in the configuration the previous ones left (`targets` lists them
    afresh for each instance, lazily: the first one usually takes it)."""

    def run(conf: Conf) -> Conf | None:
        for idx in idxs:
            for t in targets():
                moved = step(conf, idx, t)
                if moved is not None:
                    conf = moved
                    break
            else:
                return None
        return conf

    return run


def non_redundant(conf: Conf, k: int) -> list[int]:
    """`nonRedundant`: the node's primaries without a secondary, in pList order."""
    return [i for i in conf.record(k).plist if conf.place(i)[1] == NO_SECONDARY]


def redundant_primaries(conf: Conf, k: int) -> list[int]:
    """`primaries`: the node's primaries with a secondary."""
    return [i for i in conf.record(k).plist if conf.place(i)[1] != NO_SECONDARY]


def secondaries(conf: Conf, k: int) -> list[int]:
    return list(conf.record(k).slist)


def greedy_clear(
    instances_of: Callable[[Conf, int], list[int]],
    step: Callable[[Conf, int, int], Conf | None],
    nodes: Sequence[int],
    targets: Sequence[int],
    conf: Conf,
) -> tuple[list[int], Conf]:
    """`greedyClearNodes`: in order, a node joins if its instances all go to other nodes of
    its group still among the targets (first fit); a node that joins stops being a target.
    (The recursion never fails after a node joins, so `mplus` only skips nodes.)"""
    chosen: list[int] = []
    targets = list(targets)
    for k in nodes:
        before = conf  # `othernodesSameGroup` reads the records as they were before the node
        group = before.record(k).state.group_uuid
        ts = targets

        def same(k: int = k, ts: list[int] = ts, before: Conf = before, group: str = group):  # noqa: ANN202
            return (t for t in ts if t != k and before.record(t).state.group_uuid == group)

        cleared = _first_that_works(step, instances_of(conf, k), same)(conf)
        if cleared is not None:
            conf = cleared
            chosen.append(k)
            if k in targets:
                targets = [t for t in targets if t != k]
    return chosen, conf


def partition_nodes(
    clear: Callable[[Sequence[int], Sequence[int], Conf], tuple[list[int], Conf]],
    nodes: Sequence[int],
    targets: Sequence[int],
    conf: Conf,
) -> list[tuple[list[int], Conf]] | None:
    """`partitionNodes`: rounds cleared one after another, each from `conf`; None when a
    round comes out empty (some node can never be cleared)."""
    parts = []
    left = list(nodes)
    while left:
        chosen, after = clear(left, targets, conf)
        if not chosen:
            return None
        parts.append((chosen, after))
        left = [k for k in left if k not in chosen]
    return parts


def partition_non_redundant(
    nodes: Sequence[int], targets: Sequence[int], conf: Conf
) -> list[tuple[list[int], Conf]] | None:
    def clear(ns: Sequence[int], ts: Sequence[int], c: Conf) -> tuple[list[int], Conf]:
        return greedy_clear(non_redundant, move_primary, ns, ts, c)

    return partition_nodes(clear, nodes, targets, conf)


def partition_secondaries(
    nodes: Sequence[int], targets: Sequence[int], conf: Conf
) -> list[tuple[list[int], Conf]] | None:
    def clear(ns: Sequence[int], ts: Sequence[int], c: Conf) -> tuple[list[int], Conf]:
        return greedy_clear(secondaries, replace_secondary, ns, ts, c)

    return partition_nodes(clear, nodes, targets, conf)


def migrate_off(nodes: Sequence[int], conf: Conf) -> Conf | None:
    """`migrateOffNodes`: every redundant primary of the nodes onto its secondary."""
    for idx in [i for k in nodes for i in redundant_primaries(conf, k)]:
        moved = migrate(conf, idx)
        if moved is None:
            return None
        conf = moved
    return conf


def moves_of(conf: Conf) -> list[tuple[str, str, str | None]]:
    """`getMoves`: each instance whose nodes changed, but not a plain swap of its two
    nodes, with the names of the records now at its nodes' indices."""
    out = []
    for idx, (p, s) in enumerate(conf.base.places):
        p2, s2 = conf.place(idx)
        has_secondary = s != NO_SECONDARY
        if not (p != p2 or (has_secondary and s != s2)):
            continue
        if p2 == s and s2 == p:
            continue
        secondary = conf.record(s2).state.name if has_secondary else None
        # the name as read: htools prints a repeated name as it is (model.cluster.read_name)
        out.append(
            (read_name(conf.base.instance_names[idx]), conf.record(p2).state.name, secondary)
        )
    return out


# --- the program (Hroller.main) ---------------------------------------------------------------


@dataclass(frozen=True)
class RollerAnswer:
    """What hroller prints and its exit code; `rounds` as printed (master last), each with
    its moves (instance, primary, secondary or None)."""

    stdout: str
    stderr: str = ""
    exit_code: int = 0
    rounds: tuple[tuple[str, ...], ...] = ()
    moves: tuple[tuple[tuple[str, str, str | None], ...], ...] = ()
    colours: int = 0  # colours of the smallest colouring

    @property
    def error(self) -> str | None:
        return self.stderr if self.exit_code else None


def _has_tag(tags: Sequence[str] | None, node: NodeState) -> bool:
    return tags is None or bool(set(node.tags) & set(tags))


def considered_nodes(loaded: Loaded, options: RollerOptions, group_uuid: str | None) -> list[int]:
    """The nodes hroller plans for: online, without non-redundant instances when asked,
    carrying one of `--node-tags`, in the `-G` group."""
    conf = Conf(loaded)
    out = []
    for k in loaded.nodes:
        st = loaded.records[k].state
        if st.offline:
            continue
        if options.skip_non_redundant and non_redundant(conf, k):
            continue
        if not _has_tag(options.node_tags, st):
            continue
        if group_uuid is not None and st.group_uuid != group_uuid:
            continue
        out.append(k)
    return out


def find_group(cluster: Cluster, name: str) -> str | None:
    """`Container.findByName`: the uuid of the one group so named (by name or uuid)."""
    found = [g for g in cluster.groups if name in (g.name, g.uuid)]
    return found[0].uuid if len(found) == 1 else None


def node_tags_option(text: str) -> tuple[str, ...]:
    """`--node-tags=T,...` as htools splits it (`sepSplit ','`)."""
    return tuple(sep_split(",", text))


@dataclass
class _Out:
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)

    def fail(self, message: str) -> RollerAnswer:
        self.stderr.append(f"Error: {message}\n")
        return RollerAnswer("".join(self.stdout), "".join(self.stderr), 1)


def master_problem(cluster: Cluster) -> tuple[str, bool] | None:
    """hroller's master check: (message, fatal even with --force) or None."""
    masters = [n.name for n in cluster.nodes if n.master]
    if not masters:
        return NO_MASTER, False
    if len(masters) > 1:
        return f"Found more than one master node: {show_list(masters)}", True
    return None


@dataclass(frozen=True)
class Prelude:
    """What hroller has once it has read its options: the cluster by index (the -O nodes
    offline), the considered nodes and their graph, and what it printed on stderr so far."""

    loaded: Loaded
    considered: tuple[int, ...]
    graph: NodeGraph
    offline: frozenset[str]
    stderr: str

    @property
    def considered_names(self) -> tuple[str, ...]:
        return tuple(self.loaded.names[k] for k in self.considered)


def prelude(
    cluster: Cluster,
    options: RollerOptions,
    *,
    save: Callable[[], str] | None = None,
    merges: int = 1,
) -> Prelude | RollerAnswer:
    """hroller's checks before it colours (the master, -O, -G, an empty graph), in its
    order; the failing answer, or what they leave. `save` writes `-S`'s file and returns
    htools' line about it (called where hroller saves)."""
    out = _Out()
    problem = master_problem(cluster)
    if problem is not None:
        message, fatal = problem
        if fatal or not options.force:
            return out.fail(message)
        out.stderr.append(f"Warning: {message}\n")
    names = [n.name for n in cluster.nodes]
    offline, wrong = offline_names(names, options.offline)
    if wrong:
        return out.fail(f"wrong node name(s) set as offline: {','.join(wrong)}\n")
    if save is not None:
        out.stderr.append(save())
    group_uuid = None
    if options.group is not None:
        group_uuid = find_group(cluster, options.group)
        if group_uuid is None:
            return out.fail(NO_GROUP)
    loaded = load(cluster, offline, merges=merges)
    considered = considered_nodes(loaded, options, group_uuid)
    graph = build_graph(loaded, considered, reboot=not options.offline_maintenance)
    if graph is None:
        return out.fail(NO_GRAPH)
    return Prelude(loaded, tuple(considered), graph, frozenset(offline), "".join(out.stderr))


def roll(
    cluster: Cluster,
    options: RollerOptions,
    *,
    save: Callable[[], str] | None = None,
) -> RollerAnswer:
    """hroller's whole run on a loaded cluster: its stdout, stderr and exit code."""
    start = prelude(cluster, options, save=save)
    if isinstance(start, RollerAnswer):
        return start
    return rounds_of(start, options)


def rounds_of(start: Prelude, options: RollerOptions) -> RollerAnswer:
    """hroller after its prelude: colour, split, order and print."""
    out = _Out(stderr=[start.stderr])
    loaded, graph = start.loaded, start.graph
    if options.verbose > 2:
        out.stdout.append(f"Node Graph: {graph.show()}\n")
    colourings = [(name, colour_classes(f(graph))) for name, f in COLOURINGS]
    smallest = min(colourings, key=lambda c: len(c[1]))[1]  # the first of the fewest
    conf = Conf(loaded)
    online = [k for k in loaded.nodes if not loaded.records[k].state.offline]
    rounds: list[tuple[list[int], Conf]] = [(c, conf) for c in smallest]
    if not options.ignore_non_redundant:
        split: list[tuple[list[int], Conf]] = []
        for colour in smallest:
            parts = partition_non_redundant(colour, online, conf)
            if parts is None:
                return out.fail(NOT_ENOUGH_NON_REDUNDANT)
            split += parts
        rounds = split
    if options.full_evacuation:
        migrated = []
        for nodes, c in rounds:
            after = migrate_off(nodes, c)
            if after is None:
                return out.fail(FAILED_MIGRATION)
            migrated.append((nodes, after))
        split = []
        for nodes, c in migrated:
            parts = partition_secondaries(nodes, online, c)
            if parts is None:
                return out.fail(NOT_ENOUGH_SECONDARIES)
            split += parts
        rounds = split
    keep = set(start.considered)
    shown = [([k for k in nodes if k in keep], c) for nodes, c in rounds]
    shown.sort(key=lambda r: -len(r[0]))  # stable: larger first
    shown = master_last(shown, loaded)
    if options.verbose > 1:
        out.stdout.append(stats(colourings) + "\n")
    printed = [tuple(loaded.names[k] for k in nodes) for nodes, _ in shown]
    moves = [tuple(moves_of(c)) for _, c in shown]
    if options.one_step_only:
        if not options.no_headers:
            out.stdout.append("'First Reboot Group'\n")
        if printed:
            out.stdout += [name + "\n" for name in printed[0]]
            out.stdout += _moves_lines(moves[0], options.print_moves)
    else:
        if not options.no_headers:
            out.stdout.append("'Node Reboot Groups'\n")
        for names_, mv in zip(printed, moves, strict=True):
            out.stdout.append(",".join(names_) + "\n")
            out.stdout += _moves_lines(mv, options.print_moves)
    return RollerAnswer(
        "".join(out.stdout),
        "".join(out.stderr),
        0,
        tuple(printed),
        tuple(moves),
        len(smallest),
    )


def master_last(
    rounds: list[tuple[list[int], Conf]], loaded: Loaded
) -> list[tuple[list[int], Conf]]:
    """`masterLast`: the rounds holding a master after the others, each master at the end
    of its round."""

    def is_master(k: int) -> bool:
        return loaded.records[k].state.master

    split = [
        ([k for k in ns if not is_master(k)], [k for k in ns if is_master(k)], c)
        for ns, c in rounds
    ]
    ordered = [r for r in split if not r[1]] + [r for r in split if r[1]]
    return [(rest + masters, c) for rest, masters, c in ordered]


def _moves_lines(moves: Sequence[tuple[str, str, str | None]], shown: bool) -> list[str]:
    if not shown:
        return []
    return [
        f"  {inst} {primary}\n" if secondary is None else f"  {inst} {primary} {secondary}\n"
        for inst, primary, secondary in moves
    ]
