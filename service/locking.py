"""Ganeti's lock manager: shared locks, lock sets with opportunistic acquisition, lock levels.

The semantics are Ganeti 2.11's (`lib/locking.py`) with Ganeti 3.0's guarded opportunistic
union, as docs/locking.md describes them:

* `SharedLock`: one lock, held exclusively by one thread or shared by many. A waiting
  acquisition queues in arrival order; waiting shared acquisitions join the pending shared
  group, so they are granted together. `timeout=None` blocks, `timeout=0` tries once, any
  other value waits at most that long (False on expiry).
* `LockSet`: locks of one kind by name. A set is acquired by name (`EXACT`: every named lock
  or nothing) or whole (`ALL_SET`: its internal lock too, which blocks additions). With
  `opportunistic=True` every member lock free at the time is taken and the rest skipped;
  the timeout then only bounds taking the internal lock (whole set), and by name no timeout
  is allowed. `min_count` is 3.0's guard: below that many locks, nothing is kept.
* `LockManager`: Ganeti's lock levels, acquired in increasing order, the big cluster lock
  (BGL) first; the single node-allocation lock (NAL) sits between instances and node groups.
  Whoever takes all node (or node-resource) locks must hold the NAL in the same mode: Ganeti
  checks this rule in its job processor, here the manager refuses the acquisition.

Owners are threads, as in Ganeti. Misuse (acquiring twice, wrong level order, a timeout on a
named opportunistic acquisition) raises `LockUsageError`, an AssertionError as in Ganeti but
raised explicitly, so `python -O` keeps the checks. A lock deleted or a name missing raises
`model.errors.LockError`. A waiting acquisition given a `cancel` event gives up with
`AcquireCancelled` once it is set (a client that went away), releasing what it took.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum, IntEnum

from model.errors import LockError

#: Whole-set acquisition (Ganeti's `locking.ALL_SET`).
ALL_SET = None
#: Below this a timeout counts as "try once": queueing would cost more than it could gain.
MIN_TIMEOUT_S = 0.001
#: How often a waiting acquisition with a cancel event looks at it.
CANCEL_POLL_S = 0.05

BGL = "BGL"
NAL = "NAL"


class LockUsageError(AssertionError):
    """A lock used against its rules (a programming error, as Ganeti's assertions)."""


class AcquireCancelled(Exception):
    """A waiting acquisition stopped because its cancel event was set."""


class AcquireMode(Enum):
    """How a lock set acquisition treats its member locks (Ganeti's `_LS_ACQUIRE_*`)."""

    EXACT = "exact"  # every named lock; a missing one or a timeout is fatal
    ALL = "all"  # the whole set; members deleted meanwhile are skipped
    OPPORTUNISTIC = "opportunistic"  # whatever is free now; the rest is skipped


@dataclass(frozen=True)
class LockInfo:
    """One lock as `state` shows it: mode, owners (thread names), pending acquisitions."""

    name: str
    mode: str | None  # "exclusive", "shared", "deleted" or None (free)
    owners: tuple[str, ...]
    pending: tuple[tuple[str, int], ...]  # (mode, waiting threads), in queue order


def _me() -> threading.Thread:
    return threading.current_thread()


class _Waiter:
    """Threads waiting for one grant: one exclusive thread, or a group of shared ones."""

    __slots__ = ("shared", "condition", "waiting")

    def __init__(self, shared: bool, mutex: threading.Lock):
        self.shared = shared
        self.condition = threading.Condition(mutex)
        self.waiting = 0


class SharedLock:
    """A lock held exclusively by one thread or shared by several (Ganeti's SharedLock)."""

    def __init__(self, name: str, clock: Callable[[], float] = time.monotonic):
        self.name = name
        self._clock = clock
        self._mutex = threading.Lock()
        self._exclusive: threading.Thread | None = None
        self._sharers: set[threading.Thread] = set()
        self._queue: deque[_Waiter] = deque()
        self._pending_shared: _Waiter | None = None
        self._deleted = False

    def __repr__(self) -> str:
        return f"<SharedLock {self.name}>"

    # --- state, under the mutex -----------------------------------------------------

    def _owned(self, shared: bool | None) -> bool:
        me = _me()
        if shared is None:
            return me in self._sharers or self._exclusive is me
        return me in self._sharers if shared else self._exclusive is me

    def _can_acquire(self, shared: bool) -> bool:
        if shared:
            return self._exclusive is None
        return self._exclusive is None and not self._sharers

    def _grant(self, shared: bool) -> None:
        if shared:
            self._sharers.add(_me())
        else:
            self._exclusive = _me()

    def _check_deleted(self) -> None:
        if self._deleted:
            raise LockError(f"lock {self.name} was deleted")

    def _notify_top(self) -> None:
        """Wake the first waiter in line; sharers arriving later queue behind it."""
        if not self._queue:
            return
        top = self._queue[0]
        top.condition.notify_all()
        if top is self._pending_shared:
            self._pending_shared = None

    # --- public -----------------------------------------------------------------------

    def is_owned(self, shared: bool | None = None) -> bool:
        """Does this thread hold the lock (None: in any mode; True: shared; False: exclusive)?"""
        with self._mutex:
            return self._owned(shared)

    @property
    def deleted(self) -> bool:
        return self._deleted

    def acquire(
        self,
        shared: bool = False,
        timeout: float | None = None,
        *,
        cancel: threading.Event | None = None,
        test_notify: Callable[[], None] | None = None,
    ) -> bool:
        """Take the lock; False when `timeout` expires first (never with timeout None)."""
        with self._mutex:
            if test_notify is not None:
                test_notify()
            return self._acquire_locked(shared, timeout, cancel)

    def _acquire_locked(
        self, shared: bool, timeout: float | None, cancel: threading.Event | None
    ) -> bool:
        self._check_deleted()
        if self._owned(None):
            raise LockUsageError(f"double acquire() on the non-recursive lock {self.name}")
        if not self._queue and self._can_acquire(shared):
            self._grant(shared)
            return True
        if timeout is not None and timeout < MIN_TIMEOUT_S:
            return False
        waiter = self._pending_shared if shared else None
        if waiter is None:
            waiter = _Waiter(shared, self._mutex)
            self._queue.append(waiter)
            if shared:
                self._pending_shared = waiter
        waiter.waiting += 1
        deadline = None if timeout is None else self._clock() + timeout
        try:
            while True:
                if self._queue[0] is waiter and self._can_acquire(shared):
                    self._grant(shared)
                    return True
                if cancel is not None and cancel.is_set():
                    raise AcquireCancelled(self.name)
                wait_s: float | None = None
                if deadline is not None:
                    wait_s = deadline - self._clock()
                    if wait_s <= 0:
                        return False
                if cancel is not None:
                    wait_s = CANCEL_POLL_S if wait_s is None else min(wait_s, CANCEL_POLL_S)
                waiter.condition.wait(wait_s)
                self._check_deleted()
        finally:
            waiter.waiting -= 1
            if waiter.waiting == 0:
                self._queue.remove(waiter)
                if self._pending_shared is waiter:
                    self._pending_shared = None
                # Ganeti leaves the next waiter asleep until the next release; waking it
                # here lets sharers behind a timed-out exclusive waiter go ahead at once
                if self._queue and self._can_acquire(self._queue[0].shared):
                    self._notify_top()

    def release(self) -> None:
        with self._mutex:
            me = _me()
            if self._exclusive is me:
                self._exclusive = None
                self._notify_top()
            elif me in self._sharers:
                self._sharers.remove(me)
                if not self._sharers:
                    self._notify_top()
            else:
                raise LockUsageError(f"cannot release {self.name}: not owned")

    def downgrade(self) -> None:
        """Exclusive to shared; waiting sharers then go ahead of waiting exclusive ones."""
        with self._mutex:
            if not self._owned(None):
                raise LockUsageError(f"cannot downgrade {self.name}: not owned")
            if self._exclusive is not _me():
                return
            self._exclusive = None
            self._sharers.add(_me())
            waiter = self._pending_shared
            if waiter is not None:
                self._queue.remove(waiter)
                self._queue.appendleft(waiter)
                self._pending_shared = None
                waiter.condition.notify_all()

    def delete(self, timeout: float | None = None) -> bool:
        """Take the lock exclusively (if not held) and mark it deleted: every pending and
        later acquisition fails with LockError. False when `timeout` expires first."""
        with self._mutex:
            if _me() in self._sharers:
                raise LockUsageError(f"cannot delete {self.name} while sharing it")
            self._check_deleted()
            acquired = self._exclusive is _me() or self._acquire_locked(False, timeout, None)
            if acquired:
                self._deleted = True
                self._exclusive = None
                for waiter in self._queue:
                    waiter.condition.notify_all()
            return acquired

    def info(self) -> LockInfo:
        with self._mutex:
            if self._deleted:
                mode = "deleted"
            elif self._exclusive is not None:
                mode = "exclusive"
            elif self._sharers:
                mode = "shared"
            else:
                mode = None
            holders = [self._exclusive] if self._exclusive is not None else list(self._sharers)
            pending = tuple(("shared" if w.shared else "exclusive", w.waiting) for w in self._queue)
            return LockInfo(self.name, mode, tuple(sorted(t.name for t in holders)), pending)


# ---------------------------------------------------------------------------------------------
# Lock sets


class _RunningTimeout:
    """The time left of one timeout shared by several waits (never negative)."""

    def __init__(self, timeout: float | None, clock: Callable[[], float]):
        self._timeout = timeout
        self._clock = clock
        self._start = clock()

    def remaining(self) -> float | None:
        if self._timeout is None:
            return None
        return max(0.0, self._timeout - (self._clock() - self._start))


def _zero() -> float:
    return 0.0


def acquire_mode_and_timeouts(
    want_all: bool,
    timeout: float | None,
    opportunistic: bool,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[AcquireMode, Callable[[], float | None] | None, Callable[[], float | None]]:
    """(mode, time left for the set's internal lock or None, time left for each member).

    The timeout counts over the whole acquisition (internal lock and members), except that
    opportunistic acquisitions wait for no member (0) and, by name, take no timeout at all.
    """
    if opportunistic and not want_all:
        if timeout is not None:
            raise LockUsageError(
                "a timeout is only allowed for opportunistic acquisitions of the whole set"
            )
        return AcquireMode.OPPORTUNISTIC, None, _zero
    running = _RunningTimeout(timeout, clock)
    mode = AcquireMode.ALL if want_all else AcquireMode.EXACT
    set_timeout = running.remaining if want_all else None
    if opportunistic:
        return AcquireMode.OPPORTUNISTIC, set_timeout, _zero
    return mode, set_timeout, running.remaining


class _AcquireTimeout(Exception):
    pass


def _names_of(names: str | Iterable[str]) -> list[str]:
    return [names] if isinstance(names, str) else list(names)


class LockSet:
    """Locks of one kind, by name; always taken in sorted name order (no deadlock)."""

    def __init__(
        self, members: Iterable[str], name: str, clock: Callable[[], float] = time.monotonic
    ):
        self.name = name
        self._clock = clock
        self._internal = SharedLock(f"{name}/[lockset]", clock)
        self._dict_mutex = threading.Lock()
        self._locks: dict[str, SharedLock] = {m: SharedLock(f"{name}/{m}", clock) for m in members}
        self._owners_mutex = threading.Lock()
        self._owners: dict[threading.Thread, set[str]] = {}

    def __repr__(self) -> str:
        return f"<LockSet {self.name}>"

    # --- ownership bookkeeping --------------------------------------------------------

    def _add_owned(self, name: str | None = None) -> None:
        with self._owners_mutex:
            owned = self._owners.setdefault(_me(), set())
            if name is not None:
                owned.add(name)

    def _del_owned(self, name: str | None = None) -> None:
        with self._owners_mutex:
            owned = self._owners.get(_me(), set())
            if name is not None:
                owned.discard(name)
            if not owned and not self._internal.is_owned():
                self._owners.pop(_me(), None)

    def _release_and_delete_owned(self) -> None:
        for name in self.list_owned():
            lock = self._member(name)
            if lock is not None and lock.is_owned():
                lock.release()
            self._del_owned(name)

    def _member(self, name: str) -> SharedLock | None:
        with self._dict_mutex:
            return self._locks.get(name)

    # --- queries ------------------------------------------------------------------------

    def names(self) -> set[str]:
        """The current members."""
        with self._dict_mutex:
            return set(self._locks)

    def member(self, name: str) -> SharedLock:
        """One member lock (for inspection and tests)."""
        lock = self._member(name)
        if lock is None:
            raise LockError(f"lock {name!r} not found in set {self.name!r}")
        return lock

    @property
    def internal_lock(self) -> SharedLock:
        """The set's own lock: held by whole-set acquisitions, it blocks additions."""
        return self._internal

    def is_owned(self) -> bool:
        """Does this thread own anything in this set (a member or the internal lock)?"""
        with self._owners_mutex:
            return _me() in self._owners

    def list_owned(self) -> set[str]:
        with self._owners_mutex:
            return set(self._owners.get(_me(), ()))

    def check_owned(self, names: str | Iterable[str], shared: bool | None = None) -> bool:
        wanted = _names_of(names)
        if not wanted or not self.is_owned():
            return False
        locks = [self._member(n) for n in wanted]
        if any(lock is None for lock in locks):
            missing = [n for n, lock in zip(wanted, locks, strict=True) if lock is None]
            raise LockError(f"lock {missing[0]!r} not found in set {self.name!r}")
        return all(lock.is_owned(shared) for lock in locks if lock is not None)

    def owning_all(self) -> bool:
        """Holding the internal lock, i.e. the whole set (additions blocked)."""
        return self._internal.is_owned()

    def info(self) -> list[LockInfo]:
        with self._dict_mutex:
            locks = [self._locks[n] for n in sorted(self._locks)]
        return [self._internal.info(), *(lock.info() for lock in locks)]

    # --- acquire / release --------------------------------------------------------------

    def acquire(
        self,
        names: str | Iterable[str] | None,
        timeout: float | None = None,
        shared: bool = False,
        opportunistic: bool = False,
        *,
        min_count: int = 0,
        cancel: threading.Event | None = None,
        test_notify: Callable[[str], None] | None = None,
    ) -> set[str] | None:
        """Acquire by name, or the whole set with `names=ALL_SET`; the names acquired, or
        None when the timeout expired (then nothing is held).

        Opportunistic acquisitions return what they got, possibly nothing; with `min_count`
        an opportunistic acquisition that got fewer locks keeps none (and returns an empty
        set). Raises LockError when a named lock does not exist or is deleted (EXACT).
        """
        if timeout is not None and timeout < 0:
            raise LockUsageError(f"negative timeout {timeout}")
        if min_count and not opportunistic:
            raise LockUsageError("min_count only applies to opportunistic acquisitions")
        if self.is_owned():
            raise LockUsageError(f"cannot acquire locks in the set {self.name} twice")
        if names is not ALL_SET:
            mode, _, member_timeout = acquire_mode_and_timeouts(
                False, timeout, opportunistic, self._clock
            )
            try:
                got = self._acquire_inner(
                    _names_of(names), mode, shared, member_timeout, test_notify, cancel
                )
            except _AcquireTimeout:
                return None
            return self._guarded(got, min_count)
        mode, set_timeout, member_timeout = acquire_mode_and_timeouts(
            True, timeout, opportunistic, self._clock
        )
        assert set_timeout is not None
        if not self._internal.acquire(shared, set_timeout(), cancel=cancel):
            return None
        self._add_owned()
        try:
            got = self._acquire_inner(
                list(self.names()), mode, shared, member_timeout, test_notify, cancel
            )
        except _AcquireTimeout:
            self._internal.release()
            self._del_owned()
            return None
        except BaseException:
            self._internal.release()
            self._del_owned()
            raise
        return self._guarded(got, min_count)

    def _guarded(self, got: set[str], min_count: int) -> set[str]:
        """3.0's guarded union: fewer than `min_count` locks and nothing changes."""
        if len(got) >= min_count:
            return got
        if self.is_owned():
            self.release()
        return set()

    def _acquire_inner(
        self,
        names: list[str],
        mode: AcquireMode,
        shared: bool,
        timeout_fn: Callable[[], float | None],
        test_notify: Callable[[str], None] | None,
        cancel: threading.Event | None,
    ) -> set[str]:
        wanted: list[tuple[str, SharedLock]] = []
        with self._dict_mutex:
            for name in sorted(set(names)):
                lock = self._locks.get(name)
                if lock is None:
                    if mode is AcquireMode.EXACT:
                        raise LockError(
                            f"lock {name!r} not found in set {self.name!r} "
                            f"(it may have been removed)"
                        )
                    continue
                wanted.append((name, lock))
        acquired: set[str] = set()
        try:
            for name, lock in wanted:
                notify = None if test_notify is None else (lambda n=name: test_notify(n))
                timeout = timeout_fn()
                try:
                    ok = lock.acquire(shared, timeout, cancel=cancel, test_notify=notify)
                except LockError:
                    if mode is not AcquireMode.EXACT:
                        continue  # deleted meanwhile: not part of the set any more
                    raise LockError(
                        f"lock {name!r} not found in set {self.name!r} (it may have been removed)"
                    ) from None
                if not ok:
                    if mode is AcquireMode.OPPORTUNISTIC:
                        continue
                    raise _AcquireTimeout()
                self._add_owned(name)
                acquired.add(name)
        except BaseException:
            self._release_and_delete_owned()
            raise
        return acquired

    def release(self, names: str | Iterable[str] | None = None) -> None:
        """Release some (or all) locks held here; the internal lock always goes first, so
        additions can proceed again."""
        if not self.is_owned():
            raise LockUsageError(f"release() on lock set {self.name} while not owning it")
        owned = self.list_owned()
        wanted = owned if names is None else set(_names_of(names))
        if not wanted <= owned:
            raise LockUsageError(
                f"release() of locks not held in set {self.name}: {sorted(wanted - owned)}"
            )
        if self._internal.is_owned():
            self._internal.release()
            self._del_owned()
        for name in sorted(wanted):
            lock = self._member(name)
            if lock is not None:
                lock.release()
            self._del_owned(name)

    def downgrade(self, names: str | Iterable[str] | None = None) -> None:
        """Exclusive to shared for some (or all) held locks; the internal lock follows once
        no member is held exclusively."""
        if not self.is_owned():
            raise LockUsageError(f"downgrade on lock set {self.name} while not owning it")
        owned = self.list_owned()
        wanted = owned if names is None else set(_names_of(names))
        if not wanted <= owned:
            raise LockUsageError(f"downgrade() of locks not held in set {self.name}")
        for name in wanted:
            self.member(name).downgrade()
        if self._internal.is_owned(shared=False):
            if not any(self.member(n).is_owned(shared=False) for n in self.list_owned()):
                self._internal.downgrade()

    def add(
        self,
        names: str | Iterable[str],
        acquired: bool = False,
        shared: bool = False,
        *,
        cancel: threading.Event | None = None,
    ) -> None:
        """New member locks (optionally acquired at once). Waits while another thread holds
        the whole set; LockError if a name exists already."""
        new = _names_of(names)
        if self.is_owned() and not self._internal.is_owned(shared=False):
            raise LockUsageError(
                f"cannot add locks to the set {self.name} while owning part of it or sharing it"
            )
        release_internal = not self._internal.is_owned()
        if release_internal:
            self._internal.acquire(False, cancel=cancel)
        try:
            with self._dict_mutex:
                taken = sorted(set(self._locks) & set(new))
            if taken:
                raise LockError(f"duplicate add({', '.join(taken)}) on lock set {self.name}")
            for name in new:
                lock = SharedLock(f"{self.name}/{name}", self._clock)
                if acquired:
                    lock.acquire(shared)
                    self._add_owned(name)
                with self._dict_mutex:
                    self._locks[name] = lock
        finally:
            if release_internal:
                self._internal.release()

    def remove(self, names: str | Iterable[str]) -> list[str]:
        """Delete member locks (waiting for each to be free unless held exclusively here);
        the names actually removed."""
        gone = _names_of(names)
        owned = self.list_owned()
        if self.is_owned() and not set(gone) <= owned:
            raise LockUsageError(f"remove() on lock set {self.name} while not owning them all")
        removed = []
        for name in gone:
            lock = self._member(name)
            if lock is None:
                continue
            try:
                lock.delete()
            except LockError:
                continue  # deleted by another thread, who removes it from the set
            with self._dict_mutex:
                if self._locks.get(name) is lock:
                    del self._locks[name]
            removed.append(name)
            if name in owned:
                self._del_owned(name)
        return removed


# ---------------------------------------------------------------------------------------------
# The lock manager


class Level(IntEnum):
    """Ganeti's lock levels, acquired in increasing order (2.7-2.13, with the NAL)."""

    CLUSTER = 0
    INSTANCE = 1
    NODE_ALLOC = 2
    NODEGROUP = 3
    NODE = 4
    NODE_RES = 5
    NETWORK = 6


LEVEL_NAMES: Mapping[Level, str] = {
    Level.CLUSTER: "cluster",
    Level.INSTANCE: "instance",
    Level.NODE_ALLOC: "node-alloc",
    Level.NODEGROUP: "nodegroup",
    Level.NODE: "node",
    Level.NODE_RES: "node-res",
    Level.NETWORK: "network",
}
#: Levels whose members change (the BGL and the NAL are fixed).
MODIFIABLE_LEVELS = frozenset(
    {Level.INSTANCE, Level.NODEGROUP, Level.NODE, Level.NODE_RES, Level.NETWORK}
)
#: Levels where taking all locks requires the node-allocation lock in the same mode.
NODE_LEVELS = frozenset({Level.NODE, Level.NODE_RES})


class LockManager:
    """Every lock of a cluster, by level (Ganeti's GanetiLockManager, without a singleton)."""

    def __init__(
        self,
        nodes: Iterable[str] = (),
        nodegroups: Iterable[str] = (),
        instances: Iterable[str] = (),
        networks: Iterable[str] = (),
        clock: Callable[[], float] = time.monotonic,
    ):
        node_names = list(nodes)
        members: dict[Level, Iterable[str]] = {
            Level.CLUSTER: [BGL],
            Level.INSTANCE: instances,
            Level.NODE_ALLOC: [NAL],
            Level.NODEGROUP: nodegroups,
            Level.NODE: node_names,
            Level.NODE_RES: node_names,
            Level.NETWORK: networks,
        }
        self._sets = {level: LockSet(members[level], LEVEL_NAMES[level], clock) for level in Level}

    def names(self, level: Level) -> set[str]:
        return self._sets[level].names()

    def lock_set(self, level: Level) -> LockSet:
        return self._sets[level]

    def is_owned(self, level: Level) -> bool:
        return self._sets[level].is_owned()

    def list_owned(self, level: Level) -> set[str]:
        return self._sets[level].list_owned()

    def check_owned(
        self, level: Level, names: str | Iterable[str], shared: bool | None = None
    ) -> bool:
        return self._sets[level].check_owned(names, shared)

    def owning_all(self, level: Level) -> bool:
        return self._sets[level].owning_all()

    def _upper_owned(self, level: Level) -> bool:
        return any(self.is_owned(upper) for upper in Level if upper > level)

    def _bgl_owned(self) -> bool:
        return BGL in self.list_owned(Level.CLUSTER)

    @staticmethod
    def _contains_bgl(level: Level, names: str | Iterable[str] | None) -> bool:
        return level == Level.CLUSTER and (names is ALL_SET or BGL in _names_of(names))

    def _check_nal_rule(self, level: Level, names: str | Iterable[str] | None, shared: bool):
        if level not in NODE_LEVELS:
            return
        if names is not ALL_SET:
            members = self.names(level)
            if not members or not members <= set(_names_of(names)):
                return
        if not self.check_owned(Level.NODE_ALLOC, NAL, shared=shared):
            mode = "shared" if shared else "exclusive"
            raise LockUsageError(
                f"acquiring all {LEVEL_NAMES[level]} locks needs the node-allocation lock "
                f"held {mode}, the same mode"
            )

    def acquire(
        self,
        level: Level,
        names: str | Iterable[str] | None,
        timeout: float | None = None,
        shared: bool = False,
        opportunistic: bool = False,
        *,
        min_count: int = 0,
        cancel: threading.Event | None = None,
    ) -> set[str] | None:
        """LockSet.acquire at one level, after the level rules (BGL first, increasing
        levels, NAL with all node locks)."""
        if not (self._contains_bgl(level, names) or self._bgl_owned()):
            raise LockUsageError("the big cluster lock (BGL) must be owned before any other")
        if self._upper_owned(level):
            raise LockUsageError(
                f"cannot acquire {LEVEL_NAMES[level]} locks while owning some at a later level"
            )
        self._check_nal_rule(level, names, shared)
        return self._sets[level].acquire(
            names, timeout, shared, opportunistic, min_count=min_count, cancel=cancel
        )

    def release(self, level: Level, names: str | Iterable[str] | None = None) -> None:
        if self._contains_bgl(level, names) and self._upper_owned(Level.CLUSTER):
            raise LockUsageError("cannot release the BGL while holding locks at later levels")
        self._sets[level].release(names)

    def release_all(self) -> None:
        """Everything this thread holds, latest level first (the end of an operation)."""
        for level in sorted(Level, reverse=True):
            if self.is_owned(level):
                self._sets[level].release()

    def downgrade(self, level: Level, names: str | Iterable[str] | None = None) -> None:
        self._sets[level].downgrade(names)

    def add(
        self,
        level: Level,
        names: str | Iterable[str],
        acquired: bool = False,
        shared: bool = False,
        *,
        cancel: threading.Event | None = None,
    ) -> None:
        if level not in MODIFIABLE_LEVELS:
            raise LockUsageError(f"the {LEVEL_NAMES[level]} level cannot be modified")
        if not self._bgl_owned():
            raise LockUsageError("the BGL must be owned before adding locks")
        if self._upper_owned(level):
            raise LockUsageError("cannot add locks at a level while owning some at a later one")
        self._sets[level].add(names, acquired, shared, cancel=cancel)

    def remove(self, level: Level, names: str | Iterable[str]) -> list[str]:
        if level not in MODIFIABLE_LEVELS:
            raise LockUsageError(f"the {LEVEL_NAMES[level]} level cannot be modified")
        if not self._bgl_owned():
            raise LockUsageError("the BGL must be owned before removing locks")
        if not self.is_owned(level) and self._upper_owned(level):
            raise LockUsageError(
                "cannot remove locks at a level while not owning it and owning a later one"
            )
        return self._sets[level].remove(names)

    def info(self) -> list[LockInfo]:
        """Every lock that is held or waited for, level by level."""
        return [i for level in Level for i in self._sets[level].info() if i.mode or i.pending]
