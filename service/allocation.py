"""The live allocation service's scheduling: creations and verifies under Ganeti's locks.

One `AllocationService` owns the live cluster (`service.state.LiveCluster`), its journal
(`service.journal.Journal`) and a `service.locking.LockManager` with a lock per node, group and
instance. Each operation runs in its own thread (the lock owner), as a Ganeti job does
(docs/locking.md, "The live allocation service"):

* **create** (LUInstanceCreate with an iallocator, Ganeti 2.11): BGL shared; the new
  instance's lock added and held; the node-allocation lock (NAL) exclusive; node groups
  shared; every node lock, blocking (all of them) or opportunistically (those free now, at
  least `required_nodes` or none, as 3.0's guarded union). The allocator (injected; the
  program passes exalloc's iallocator through `service/iallocator.py`) answers on the
  current cluster with `restrict-to-nodes` = the locked nodes when opportunistic. A
  placement is checked by the independent checker on the current state, journaled (fsync)
  and applied; then the unused node locks and the NAL are released at once and the used
  nodes stay locked for `hold_s` (the disk wipe and sync of a real creation).
* **TEMP_NORES decided exactly**: when the locked nodes have no room, the allocator also
  answers on the whole current state, still under the NAL (no commit can happen meanwhile):
  `temp_nores` only if the instance fits there, `nores` (with the allocator's failure counts)
  if it does not fit even with every node. Blocking creations see every node: `nores`.
* **verify** (LUClusterVerifyGroup): BGL, NAL and every node lock shared, for `hold_s`;
  the independent checker runs on the whole state from the loaded snapshot. Creations
  wait for it on the NAL, as in Ganeti (with `lock_timeout_s` they give up and answer
  `temp_nores` or `nores`).

Requests whose `cancel` event is set (the client went away, the service stops) stop waiting
and release everything; a creation already committed stays (it is journaled).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from model.backends.iallocator import AllocateRequest
from model.backends.text import dump_text
from model.check import check_allocation
from model.cluster import Cluster
from model.errors import BadRequestError, CheckFailedError, LockError
from service.journal import Journal
from service.locking import ALL_SET, BGL, AcquireCancelled, Level, LockManager
from service.state import (
    AllocatorAnswer,
    CreateSpec,
    Creation,
    Limits,
    LiveCluster,
    parse_create,
)

Allocator = Callable[[Cluster, AllocateRequest], AllocatorAnswer]

CREATED = "created"
TEMP_NORES = "temp_nores"
NORES = "nores"
#: How long a resubmission waits for the first attempt of the same request to finish.
RESUBMIT_WAIT_S = 30.0


@dataclass(frozen=True)
class CreateOptions:
    opportunistic: bool = False
    hold_s: float = 0.0
    lock_timeout_s: float | None = None  # None: wait for the locks as long as it takes


@dataclass(frozen=True)
class CreateResult:
    """The answer to a creation (exit codes: created 0, temp_nores 3, nores 4)."""

    status: str
    name: str
    nodes: tuple[str, ...]
    mode: str  # "blocking" or "opportunistic"
    lock_wait_s: float
    alloc_s: float
    info: str
    locked_nodes: int = 0  # node locks held when the allocator ran
    seq: int | None = None  # the journal sequence of the commit
    committed_at: float | None = None
    held_s: float = 0.0
    resubmitted: bool = False  # answered again from the journal (same request id)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["nodes"] = list(self.nodes)
        return out


@dataclass(frozen=True)
class VerifyResult:
    ok: bool
    violations: tuple[str, ...]
    nodes_locked: int
    lock_wait_s: float
    held_s: float
    locked_at: float
    released_at: float
    commits_during: int  # creations committed while every node was locked: always 0
    instances: int
    creations: int
    score: float

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["violations"] = list(self.violations)
        return out


@dataclass(frozen=True)
class StateResult:
    nodes: int
    instances: int
    creations: int
    score: float
    allocation_vector: tuple[int, ...] | None  # dedicated clusters only
    check_ok: bool
    violations: tuple[str, ...]
    locks: tuple[Mapping[str, Any], ...]
    activities: Mapping[str, str]
    text: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["allocation_vector"] = (
            None if self.allocation_vector is None else list(self.allocation_vector)
        )
        out["violations"] = list(self.violations)
        out["locks"] = [dict(lock) for lock in self.locks]
        out["activities"] = dict(self.activities)
        return out


@dataclass
class _Clock:
    """Time left of a lock timeout shared by the NAL, group and node acquisitions."""

    timeout: float | None
    start: float = field(default_factory=time.monotonic)

    def left(self) -> float | None:
        if self.timeout is None:
            return None
        return max(0.0, self.timeout - (time.monotonic() - self.start))

    def waited(self) -> float:
        return time.monotonic() - self.start


class _LockTimeout(Exception):
    pass


class AllocationService:
    """The cluster in memory, its journal and locks; thread-safe, one thread per request."""

    def __init__(self, journal: Journal, allocator: Allocator):
        self.journal = journal
        self.allocate = allocator
        live = journal.live
        self._live = live
        self._limits = Limits.of(live.base)
        self._mutex = threading.Lock()
        self._inflight: dict[str, str] = {}  # instance name -> request id being created
        self._activities: dict[str, str] = {}  # thread name -> what it does now
        cluster = live.cluster
        self.locks = LockManager(
            nodes=[n.name for n in cluster.nodes],
            nodegroups=[g.uuid for g in cluster.groups],
            instances=[i.name for i in cluster.instances],
        )

    @property
    def live(self) -> LiveCluster:
        with self._mutex:
            return self._live

    def parse_create(self, obj: Mapping[str, Any]) -> CreateSpec:
        return parse_create(obj, self._limits)

    def _doing(self, what: str | None) -> None:
        me = threading.current_thread().name
        with self._mutex:
            if what is None:
                self._activities.pop(me, None)
            else:
                self._activities[me] = what

    @staticmethod
    @contextlib.contextmanager
    def _named(label: str) -> Iterator[None]:
        """The thread (the lock owner) is named after its operation while it runs, so that
        `state` and lock timeouts say who holds what."""
        thread = threading.current_thread()
        old = thread.name
        thread.name = label
        try:
            yield
        finally:
            thread.name = old

    # --- create ---------------------------------------------------------------------------

    def create(
        self,
        spec: CreateSpec,
        options: CreateOptions,
        request_id: str,
        cancel: threading.Event | None = None,
    ) -> CreateResult:
        """Create one instance (see the module docstring); BadRequestError for a name in
        use, AcquireCancelled when `cancel` is set while waiting."""
        with self._named(f"create {spec.name}"):
            return self._create(spec, options, request_id, cancel or threading.Event())

    def _create(
        self, spec: CreateSpec, options: CreateOptions, request_id: str, cancel: threading.Event
    ) -> CreateResult:
        clock = _Clock(options.lock_timeout_s)
        mode = "opportunistic" if options.opportunistic else "blocking"
        lm = self.locks
        self._doing(f"create {spec.name}: waiting for locks")
        added = committed = False
        try:
            lm.acquire(Level.CLUSTER, [BGL], shared=True, cancel=cancel)
            deadline = time.monotonic() + RESUBMIT_WAIT_S
            while True:
                done = self._answered_before(spec, request_id, mode)
                if done is not None:
                    return done
                try:
                    lm.add(Level.INSTANCE, spec.name, acquired=True, cancel=cancel)
                except LockError:
                    with self._mutex:
                        same = self._inflight.get(spec.name) == request_id
                    if not same:
                        raise BadRequestError(
                            f"name: instance {spec.name} is being created by another request"
                        ) from None
                    if time.monotonic() > deadline or cancel.wait(0.05):
                        raise BadRequestError(
                            f"name: instance {spec.name} is still being created by an "
                            f"earlier attempt of this request"
                        ) from None
                    continue
                break
            added = True
            with self._mutex:
                self._inflight[spec.name] = request_id
            try:
                locked = self._lock_for_create(spec, options, clock, cancel)
            except _LockTimeout:
                return self._undecided(spec, mode, clock, options)
            if cancel.is_set():  # withdrawn (or the service stops) just as the locks came
                raise AcquireCancelled(spec.name)
            lock_wait = clock.waited()
            self._doing(f"create {spec.name}: allocating on {len(locked)} locked node(s)")
            result, creation = self._allocate(spec, options, locked, lock_wait, mode, request_id)
            if creation is None:
                return result
            committed = True
            used = set(creation.nodes)
            lm.release(Level.NODE, sorted(set(locked) - used))
            lm.release(Level.NODEGROUP)
            lm.release(Level.NODE_ALLOC)
            held = 0.0
            if options.hold_s > 0:
                self._doing(f"create {spec.name}: holding {'/'.join(creation.nodes)}")
                start = time.monotonic()
                cancel.wait(options.hold_s)
                held = time.monotonic() - start
            return replace(result, held_s=held)
        finally:
            self._release(spec.name, added and not committed)
            if added:
                with self._mutex:
                    self._inflight.pop(spec.name, None)
            self._doing(None)

    def _release(self, name: str, remove_instance: bool) -> None:
        """Everything this thread holds; a failed creation's instance lock goes away."""
        lm = self.locks
        for level in (Level.NODE_RES, Level.NODE, Level.NODEGROUP, Level.NODE_ALLOC):
            if lm.is_owned(level):
                lm.release(level)
        if remove_instance:
            lm.remove(Level.INSTANCE, [name])
        lm.release_all()

    def _answered_before(self, spec: CreateSpec, request_id: str, mode: str) -> CreateResult | None:
        """A resubmission of a committed request gets its answer again; any other use of an
        existing name is a bad request."""
        with self._mutex:
            live = self._live
        if spec.name not in live.cluster.instance_index:
            return None
        done = live.by_name.get(spec.name)
        if done is None or done.request_id != request_id:
            raise BadRequestError(f"name: instance {spec.name} exists already")
        if done.spec != spec:
            raise BadRequestError(
                f"request_id: {request_id} created {spec.name} with other parameters"
            )
        return CreateResult(
            CREATED,
            spec.name,
            done.nodes,
            mode,
            0.0,
            0.0,
            f"created before (journal record {done.seq}); answered again for this request",
            seq=done.seq,
            committed_at=done.committed_at,
            resubmitted=True,
        )

    def _lock_for_create(
        self, spec: CreateSpec, options: CreateOptions, clock: _Clock, cancel: threading.Event
    ) -> set[str]:
        """NAL exclusive, groups shared, then every node lock (blocking) or the free ones
        (opportunistic, at least `required_nodes` or none)."""
        lm = self.locks
        if lm.acquire(Level.NODE_ALLOC, ALL_SET, clock.left(), cancel=cancel) is None:
            raise _LockTimeout()
        if lm.acquire(Level.NODEGROUP, ALL_SET, clock.left(), shared=True, cancel=cancel) is None:
            raise _LockTimeout()
        if options.opportunistic:
            got = lm.acquire(
                Level.NODE,
                ALL_SET,
                clock.left(),
                opportunistic=True,
                min_count=spec.required_nodes,
                cancel=cancel,
            )
        else:
            got = lm.acquire(Level.NODE, ALL_SET, clock.left(), cancel=cancel)
        if got is None:
            raise _LockTimeout()
        return got

    def _allocate(
        self,
        spec: CreateSpec,
        options: CreateOptions,
        locked: set[str],
        lock_wait: float,
        mode: str,
        request_id: str,
    ) -> tuple[CreateResult, Creation | None]:
        """Under the NAL: the allocator on the locked view, the commit, or the exact verdict."""
        live = self.live
        start = time.perf_counter()
        restrict = tuple(sorted(locked)) if options.opportunistic else None
        answer = None
        if locked:
            answer = self.allocate(live.cluster, spec.allocate_request(restrict))
        if answer is not None and answer.success:
            creation = self._commit(spec, answer, request_id)
            alloc_s = time.perf_counter() - start
            result = CreateResult(
                CREATED,
                spec.name,
                creation.nodes,
                mode,
                lock_wait,
                alloc_s,
                answer.info,
                locked_nodes=len(locked),
                seq=creation.seq,
                committed_at=creation.committed_at,
            )
            return result, creation
        if not options.opportunistic:
            assert answer is not None
            status, info = NORES, answer.info
        else:
            status, info = self._exact_verdict(spec, live, len(locked), answer)
        alloc_s = time.perf_counter() - start
        return CreateResult(
            status, spec.name, (), mode, lock_wait, alloc_s, info, locked_nodes=len(locked)
        ), None

    def _exact_verdict(
        self,
        spec: CreateSpec,
        live: LiveCluster,
        locked: int,
        answer: AllocatorAnswer | None,
    ) -> tuple[str, str]:
        """temp_nores when the instance fits on the whole current state, else nores."""
        whole = self.allocate(live.cluster, spec.allocate_request(None))
        total = len(live.cluster.nodes)
        if answer is None:
            view = (
                f"fewer than {spec.required_nodes} node lock(s) free ({locked} of {total}); "
                f"nothing kept"
            )
        else:
            view = f"no room on the {locked} locked node(s) of {total}: {answer.info}"
        if whole.success:
            return TEMP_NORES, (
                f"{view}; with every node it would fit on {'/'.join(whole.nodes)}: "
                f"resubmit, or go to another cluster"
            )
        return NORES, f"does not fit even with every node: {whole.info}"

    def _undecided(
        self, spec: CreateSpec, mode: str, clock: _Clock, options: CreateOptions
    ) -> CreateResult:
        """The locks did not come within the lock timeout. Capacity only shrinks (creations
        never free any), so an instance that does not fit now never will: nores; otherwise
        temp_nores."""
        waited = clock.waited()
        live = self.live
        start = time.perf_counter()
        whole = self.allocate(live.cluster, spec.allocate_request(None))
        alloc_s = time.perf_counter() - start
        why = f"locks not free within {options.lock_timeout_s:g} s" + self._blockers()
        if whole.success:
            info = f"{why}; it would fit on {'/'.join(whole.nodes)}: resubmit"
            return CreateResult(TEMP_NORES, spec.name, (), mode, waited, alloc_s, info)
        info = f"{why}; does not fit even with every node: {whole.info}"
        return CreateResult(NORES, spec.name, (), mode, waited, alloc_s, info)

    def _blockers(self) -> str:
        """Who holds what this thread waited for: the NAL, or (when this thread got the NAL)
        the node locks."""
        me = threading.current_thread().name
        level = Level.NODE if self.locks.is_owned(Level.NODE_ALLOC) else Level.NODE_ALLOC
        owners = sorted({o for i in self.locks.lock_set(level).info() for o in i.owners if o != me})
        if not owners:
            return ""
        what = "node locks" if level == Level.NODE else "node-allocation lock"
        return f" ({what} held by {', '.join(owners)})"

    def _commit(self, spec: CreateSpec, answer: AllocatorAnswer, request_id: str) -> Creation:
        """Check the placement on the current state, journal it (fsync), apply it."""
        primary = answer.nodes[0]
        secondary = answer.nodes[1] if len(answer.nodes) > 1 else None
        with self._mutex:
            live = self._live
            report = check_allocation(live.cluster, [(spec.instance(), primary, secondary)])
            if not report.ok:
                raise CheckFailedError(
                    f"the allocator's placement of {spec.name} on {'/'.join(answer.nodes)} "
                    f"fails the independent checker: {'; '.join(map(str, report.violations))}"
                )
            creation = Creation(live.seq + 1, request_id, spec, primary, secondary, time.time())
            updated = live.with_creation(creation)
            self.journal.append(creation)
            self._live = updated
        return creation

    # --- verify -----------------------------------------------------------------------

    def verify(self, hold_s: float = 0.0, cancel: threading.Event | None = None) -> VerifyResult:
        """A cluster-wide operation: every node lock and the NAL, shared, for `hold_s`."""
        with self._named("verify"):
            return self._verify(hold_s, cancel or threading.Event())

    def _verify(self, hold_s: float, cancel: threading.Event) -> VerifyResult:
        lm = self.locks
        start = time.monotonic()
        self._doing("verify: waiting for locks")
        try:
            lm.acquire(Level.CLUSTER, [BGL], shared=True, cancel=cancel)
            lm.acquire(Level.NODE_ALLOC, ALL_SET, shared=True, cancel=cancel)
            lm.acquire(Level.NODEGROUP, ALL_SET, shared=True, cancel=cancel)
            nodes = lm.acquire(Level.NODE, ALL_SET, shared=True, cancel=cancel) or set()
            lock_wait = time.monotonic() - start
            locked_at = time.time()
            self._doing(f"verify: holding all {len(nodes)} node locks")
            live = self.live
            report = live.check()
            if hold_s > 0:
                cancel.wait(hold_s)
            after = self.live
            released_at = time.time()
            return VerifyResult(
                ok=report.ok,
                violations=tuple(str(v) for v in report.violations),
                nodes_locked=len(nodes),
                lock_wait_s=lock_wait,
                held_s=released_at - locked_at,
                locked_at=locked_at,
                released_at=released_at,
                commits_during=after.seq - live.seq,
                instances=len(live.cluster.instances),
                creations=live.seq,
                score=live.score(),
            )
        finally:
            lm.release_all()
            self._doing(None)

    # --- state ------------------------------------------------------------------------

    def state(self, with_text: bool = False) -> StateResult:
        """The current state (no locks needed: commits replace it atomically)."""
        with self._mutex:
            live = self._live
            activities = dict(self._activities)
        report = live.check()
        return StateResult(
            nodes=len(live.cluster.nodes),
            instances=len(live.cluster.instances),
            creations=live.seq,
            score=live.score(),
            allocation_vector=live.allocation_vector() if live.dedicated else None,
            check_ok=report.ok,
            violations=tuple(str(v) for v in report.violations),
            locks=tuple(asdict(info) for info in self.locks.info()),
            activities=activities,
            text=dump_text(live.cluster) if with_text else None,
        )


__all__ = [
    "AcquireCancelled",
    "AllocationService",
    "CreateOptions",
    "CreateResult",
    "StateResult",
    "VerifyResult",
]
