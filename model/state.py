"""The cluster as it changes: every node's bookkeeping and where every instance sits.

`node_states(cluster)` loads a snapshot as htools' `Loader.mergeData` does. A `ClusterState`
then changes only through its methods, each returning a new state (immutable, like htools'
`Container` of nodes) or the `FailMode` htools would report:

* `place`: a new instance on its nodes with the strict adds (`placed`: without checks, for
  the checker, which lists what fails through `placement_shortfalls` and goes on);
* `remove`, `relocate` (to chosen nodes, as a plan or the checker sees it);
* `move`: one of hbal's five moves through `model.resources.apply_move` (verified against the
  real hbal in tests/test_resources.py);
* `powered`: nodes switched off or on;
* `snapshot()`: the `Cluster` the state now describes (what `-S` writes).

The checker (`model.check`), hail, squeeze and the greedy htools algorithms all change
clusters through these, so a rule is written once.
"""

from __future__ import annotations

from collections import ChainMap, Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from model.cluster import Cluster, Instance, IPolicy
from model.errors import InputError
from model.resources import (
    FailMode,
    InstanceDemand,
    MoveKind,
    NodeState,
    Shortfall,
    TagRules,
    add_primary,
    add_secondary,
    apply_move,
    apply_primary,
    apply_secondary,
    demand_of,
    loaded_states,
    pair_location_score,
    primary_shortfalls,
    remove_primary,
    remove_secondary,
    secondary_shortfalls,
)

PRIMARY = "primary"
SECONDARY = "secondary"

#: What can be placed: a model record (kept for snapshots) or a bare demand.
Placeable = Instance | InstanceDemand


def placement_shortfalls(
    nodes: Mapping[str, NodeState],
    d: InstanceDemand,
    primary: str,
    secondary: str | None = None,
    *,
    strict: bool = True,
) -> tuple[tuple[str, str, Shortfall], ...]:
    """(role, node, shortfall) for every strict check a placement fails, primary first; both
    nodes judged as they are (htools adds to each independently)."""
    out = [(PRIMARY, primary, s) for s in primary_shortfalls(nodes[primary], d, strict=strict)]
    if secondary is not None:
        out += [
            (SECONDARY, secondary, s)
            for s in secondary_shortfalls(nodes[secondary], d, primary, strict=strict)
        ]
    return tuple(out)


@dataclass(frozen=True)
class ClusterState:
    """All node states of a cluster, the instances' demands and where each instance is."""

    cluster: Cluster  # the snapshot it was loaded from (groups, policies, node records)
    rules: TagRules
    nodes: Mapping[str, NodeState]  # in the cluster's node order
    demands: Mapping[str, InstanceDemand]  # by instance name
    locations: Mapping[str, tuple[str, str | None]] = field(default_factory=dict)
    # model records of instances placed after loading (snapshot() writes them)
    added: Mapping[str, Instance] = field(default_factory=dict)

    def node(self, name: str) -> NodeState:
        return self.nodes[name]

    def ipolicy_of(self, node_name: str) -> IPolicy:
        return self.cluster.group_of(self.cluster.node(node_name)).ipolicy

    def location(self, instance: str) -> tuple[str, str | None]:
        """(primary, secondary) of an instance now."""
        return self.locations[instance]

    def with_nodes(self, changed: Mapping[str, NodeState]) -> ClusterState:
        """The same cluster with some node states replaced (node order kept)."""
        if not changed:
            return self
        merged = dict(self.nodes)  # copied at C speed; replaced keys keep their place
        merged.update(changed)
        return replace(self, nodes=merged)

    def demand(self, instance: Instance | InstanceDemand) -> InstanceDemand:
        """What an instance asks of its nodes, its tags read with this cluster's rules."""
        if isinstance(instance, InstanceDemand):
            return instance
        return demand_of(instance, self.rules)

    # --- new instances ----------------------------------------------------------------

    def placement_shortfalls(
        self,
        d: InstanceDemand,
        primary: str,
        secondary: str | None = None,
        *,
        strict: bool = True,
    ) -> tuple[tuple[str, str, Shortfall], ...]:
        """(role, node, shortfall) for every strict check the placement fails, primary first;
        both nodes are judged as they are now (htools adds to each independently)."""
        return placement_shortfalls(self.nodes, d, primary, secondary, strict=strict)

    def placed(
        self,
        instance: Instance | InstanceDemand,
        primary: str,
        secondary: str | None = None,
    ) -> ClusterState:
        """The instance added on its nodes without any check (the checker goes on after a
        failed check, to list every violation of a plan)."""
        return StateEdit(self).placed(instance, primary, secondary).state()

    def place(
        self,
        instance: Instance | InstanceDemand,
        primary: str,
        secondary: str | None = None,
        *,
        strict: bool = True,
    ) -> ClusterState | FailMode:
        """A new instance added with htools' node checks (`allocateOnSingle/OnPair`; the
        policy is the caller's), or the first failure."""
        edit = StateEdit(self)
        failed = edit.place(instance, primary, secondary, strict)
        return failed if failed is not None else edit.state()

    # --- existing instances -----------------------------------------------------------

    def remove(self, instance: str) -> ClusterState:
        """The instance taken off its nodes (htools `removePri` / `removeSec`)."""
        return StateEdit(self).remove(instance).state()

    def relocated(self, instance: str, primary: str, secondary: str | None) -> ClusterState:
        """The instance on new nodes, without checks (the checker's view of a plan)."""
        return StateEdit(self).remove_and_place(instance, primary, secondary, None).state()

    def relocate(
        self, instance: str, primary: str, secondary: str | None, *, strict: bool = True
    ) -> ClusterState | FailMode:
        """The instance off its nodes and onto new ones with htools' checks, or the first
        failure (one step of a plan: squeeze orders its migrations by this)."""
        edit = StateEdit(self)
        failed = edit.relocate(instance, primary, secondary, strict=strict)
        return failed if failed is not None else edit.state()

    def move(
        self,
        instance: str,
        kind: MoveKind,
        target: str | None = None,
        *,
        force: bool = False,
    ) -> ClusterState | FailMode:
        """One hbal move (`applyMoveEx`), exactly as htools does it, or its failure."""
        primary, secondary = self.locations[instance]
        d = self.demands[instance]
        result = apply_move(self.nodes, d, primary, secondary, kind, target, force=force)
        if isinstance(result, FailMode):
            return result
        locations = dict(self.locations)
        locations[instance] = (result.primary, result.secondary)
        return replace(self.with_nodes(result.nodes), locations=locations)

    # --- nodes ------------------------------------------------------------------------

    def powered(self, off: Iterable[str] = (), on: Iterable[str] = ()) -> ClusterState:
        """Nodes switched off (offline) or on; nothing else changes."""
        changed = {n: replace(self.nodes[n], offline=True) for n in off}
        changed.update({n: replace(self.nodes[n], offline=False) for n in on})
        return self.with_nodes(changed)

    def snapshot(self) -> Cluster:
        """The cluster this state describes: nodes' offline flags, reported free memory, free
        disk and spindles follow the changes; instances sit where they are now.

        Reported free memory keeps the memory htools found missing at load (xMem):
        f_mem = t_mem - n_mem - instance memory - xMem.
        """
        nodes = []
        for node in self.cluster.nodes:
            st = self.nodes[node.name]
            free_memory = (
                int(st.total_memory_mib)
                - st.node_memory_mib
                - st.instance_memory_mib
                - st.missing_memory_mib
            )
            nodes.append(
                replace(
                    node,
                    offline=st.offline,
                    free_memory_mib=free_memory,
                    free_disk_mib=st.free_disk_mib,
                    free_spindles=st.free_spindles if st.exclusive_storage else node.free_spindles,
                )
            )
        # names are the keys here; htools accepts a name twice (Ganeti's test data has such
        # files), and such instances keep their loaded records
        twice = {n for n, k in Counter(i.name for i in self.cluster.instances).items() if k > 1}
        instances = [
            i
            if i.name in twice or (p, s) == (i.primary, i.secondary or None)
            else replace(i, primary=p, secondary=s)
            for i in self.cluster.instances
            if i.name in self.locations
            for p, s in (self.locations[i.name],)
        ]
        missing = [n for n in self.locations if n not in self.cluster.instance_index]
        unknown = [n for n in missing if n not in self.added]
        if unknown:
            raise ValueError(f"no instance record for {', '.join(unknown)} (placed as demands)")
        instances += [self.added[n] for n in missing]
        return replace(self.cluster, nodes=tuple(nodes), instances=tuple(instances))


class StateEdit:
    """A run of state changes on one working copy of a ClusterState: the one place where
    instances are added, removed and relocated (ClusterState's own methods are single edits).

    Each change is htools' (the NodeState functions of model.resources) and leaves the tables
    as the same changes made one by one on ClusterState would (a removed instance leaves,
    a placed one comes last). The tables are copied once, not at every change: squeeze orders
    and checks plans of 21,000 moves on 30,000 instances, where a copy per move took minutes.
    `state()` gives the result; the edit may go on after it."""

    def __init__(self, state: ClusterState) -> None:
        self._base = state
        # the state's own tables until the first change copies them (a refused place copies
        # nothing)
        self.nodes = state.nodes  # type: ignore[assignment]
        self.demands = state.demands  # type: ignore[assignment]
        self.locations = state.locations  # type: ignore[assignment]
        self.added = state.added  # type: ignore[assignment]
        self._handed_over = True

    def _copy_tables(
        self, nodes: Mapping, demands: Mapping, locations: Mapping, added: Mapping
    ) -> None:
        self.nodes: dict[str, NodeState] = dict(nodes)
        self.demands: dict[str, InstanceDemand] = dict(demands)
        self.locations: dict[str, tuple[str, str | None]] = dict(locations)
        self.added: dict[str, Instance] = dict(added)
        self._handed_over = False

    def _own(self) -> None:
        """Copy the tables before a change while they are shared (with the state this edit
        began from, or one state() handed out)."""
        if self._handed_over:
            self._copy_tables(self.nodes, self.demands, self.locations, self.added)

    def state(self) -> ClusterState:
        """The state so far; its tables are this edit's own (not copied again: a single edit
        through ClusterState costs one copy, as before), so a later change copies first."""
        self._handed_over = True
        return replace(
            self._base,
            nodes=self.nodes,
            demands=self.demands,
            locations=self.locations,
            added=self.added,
        )

    def demand(self, instance: Instance | InstanceDemand) -> InstanceDemand:
        return self._base.demand(instance)

    # -- the changes ---------------------------------------------------------------------

    def _unchecked(
        self, nodes: Mapping[str, NodeState], d: InstanceDemand, primary: str, secondary: str | None
    ) -> dict[str, NodeState]:
        p = nodes[primary]
        s = nodes[secondary] if secondary is not None else None
        changed = {primary: apply_primary(p, d, pair_location_score(p, s))}
        if s is not None and secondary != primary:
            changed[s.name] = apply_secondary(s, d, primary)
        return changed

    def _checked(
        self,
        nodes: Mapping[str, NodeState],
        d: InstanceDemand,
        primary: str,
        secondary: str | None,
        strict: bool,
    ) -> dict[str, NodeState] | FailMode:
        p = nodes[primary]
        s = nodes[secondary] if secondary is not None else None
        new_p = add_primary(p, d, strict=strict, location_score=pair_location_score(p, s))
        if isinstance(new_p, FailMode):
            return new_p
        changed = {primary: new_p}
        if s is not None:
            new_s = add_secondary(s, d, primary, strict=strict)
            if isinstance(new_s, FailMode):
                return new_s
            changed[s.name] = new_s
        return changed

    def _removal(self, instance: str) -> dict[str, NodeState]:
        d = self.demands[instance]
        primary, secondary = self.locations[instance]
        p = self.nodes[primary]
        s = self.nodes[secondary] if secondary is not None else None
        changed = {primary: remove_primary(p, d, pair_location_score(p, s))}
        if s is not None:
            changed[s.name] = remove_secondary(s, d, primary)
        return changed

    def _record(
        self,
        instance: Instance | InstanceDemand,
        d: InstanceDemand,
        primary: str,
        secondary: str | None,
    ) -> None:
        self.demands[d.name] = d
        self.locations[d.name] = (primary, secondary)
        if isinstance(instance, Instance):
            self.added[d.name] = replace(instance, primary=primary, secondary=secondary)

    def _forget(self, instance: str) -> None:
        del self.demands[instance]
        del self.locations[instance]
        self.added.pop(instance, None)

    def placed(
        self, instance: Instance | InstanceDemand, primary: str, secondary: str | None = None
    ) -> StateEdit:
        """ClusterState.placed, here."""
        self._own()
        d = self.demand(instance)
        self.nodes.update(self._unchecked(self.nodes, d, primary, secondary))
        self._record(instance, d, primary, secondary)
        return self

    def place(
        self, instance: Placeable, primary: str, secondary: str | None = None, strict: bool = True
    ) -> FailMode | None:
        """ClusterState.place, here: None when done, else the first failure (nothing done)."""
        d = self.demand(instance)
        changed = self._checked(self.nodes, d, primary, secondary, strict)
        if isinstance(changed, FailMode):
            return changed
        self._own()
        self.nodes.update(changed)
        self._record(instance, d, primary, secondary)
        return None

    def remove(self, instance: str) -> StateEdit:
        """ClusterState.remove, here."""
        self._own()
        self.nodes.update(self._removal(instance))
        self._forget(instance)
        return self

    def move(
        self, instance: str, kind: MoveKind, target: str | None = None, *, force: bool = False
    ) -> FailMode | None:
        """ClusterState.move, here: None when done, else its failure (nothing done)."""
        primary, secondary = self.locations[instance]
        d = self.demands[instance]
        result = apply_move(self.nodes, d, primary, secondary, kind, target, force=force)
        if isinstance(result, FailMode):
            return result
        self._own()
        self.nodes.update(result.nodes)
        self.locations[instance] = (result.primary, result.secondary)
        return None

    def remove_and_place(
        self, instance: str, primary: str, secondary: str | None, strict: bool | None
    ) -> StateEdit | FailMode:
        """The instance off its nodes and onto new ones: unchecked (strict None) or with
        htools' checks; on a failure nothing is done."""
        record = self.added.get(instance)
        removal = self._removal(instance)
        view = ChainMap(removal, self.nodes)
        d = self.demand(record or self.demands[instance])
        if strict is None:
            changed: dict[str, NodeState] | FailMode = self._unchecked(view, d, primary, secondary)
        else:
            changed = self._checked(view, d, primary, secondary, strict)
        if isinstance(changed, FailMode):
            return changed
        self._own()
        self.nodes.update(removal)
        self.nodes.update(changed)
        self._forget(instance)
        self._record(record or d, d, primary, secondary)
        return self

    def relocate(
        self, instance: str, primary: str, secondary: str | None, *, strict: bool = True
    ) -> FailMode | None:
        """ClusterState.relocate, here: None when done, else the first failure."""
        done = self.remove_and_place(instance, primary, secondary, strict)
        return done if isinstance(done, FailMode) else None


def unique_instance_names(cluster: Cluster, what: str) -> None:
    """Refuse a snapshot that names two instances alike (htools loads one, keyed by index;
    Ganeti itself never makes one): questions about single instances need unique names."""
    twice = sorted(n for n, k in Counter(i.name for i in cluster.instances).items() if k > 1)
    if twice:
        raise InputError(
            f"{what} needs unique instance names; {', '.join(twice)} appear(s) more than once"
        )


def node_states(cluster: Cluster) -> ClusterState:
    """The cluster after loading, as htools' `Loader.mergeData` + `checkData` leave it."""
    rules, states, demands = loaded_states(cluster)
    locations = {i.name: (i.primary, i.secondary or None) for i in cluster.instances}
    return ClusterState(cluster, rules, states, demands, locations)
