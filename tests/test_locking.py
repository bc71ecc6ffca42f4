"""service.locking: Ganeti's lock semantics, ported opportunistic scenarios, many-thread properties.

The `Ganeti*` tests port the opportunistic scenarios of Ganeti 2.11's
test/py/ganeti.locking_unittest.py (docs/locking.md lists them) with the same situations and
expected outcomes; Ganeti's AssertionError is our LockUsageError (an AssertionError too).
The property tests run many threads against one lock set or manager and watch every grant.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from model.errors import LockError
from service.locking import (
    ALL_SET,
    BGL,
    NAL,
    AcquireCancelled,
    AcquireMode,
    Level,
    LockManager,
    LockSet,
    LockUsageError,
    SharedLock,
    acquire_mode_and_timeouts,
)


class Threads:
    """Helper threads whose exceptions fail the test (Ganeti's _ThreadedTestCase)."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def add(self, fn: Callable[[], None], name: str | None = None) -> threading.Thread:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - reported in wait()
                self.errors.append(exc)

        t = threading.Thread(target=run, name=name, daemon=True)
        t.start()
        self.threads.append(t)
        return t

    def wait(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
            assert not t.is_alive(), f"thread {t.name} still running (deadlock?)"
        self.threads.clear()
        if self.errors:
            raise self.errors[0]


@pytest.fixture
def threads() -> Threads:
    return Threads()


@pytest.fixture
def ls() -> LockSet:
    return LockSet(["one", "two", "three"], "lockset")


# ---------------------------------------------------------------------------------------------
# SharedLock basics


def test_shared_lock_modes_and_timeouts(threads: Threads) -> None:
    lock = SharedLock("l")
    assert lock.acquire(shared=True)
    results: queue.Queue = queue.Queue()
    threads.add(lambda: results.put(("shared", _acquire_release(lock, True, 0))))
    threads.wait()
    threads.add(lambda: results.put(("exclusive-try", _acquire_release(lock, False, 0))))
    threads.wait()
    start = time.monotonic()
    threads.add(lambda: results.put(("exclusive-0.1", _acquire_release(lock, False, 0.1))))
    threads.wait()
    waited = time.monotonic() - start
    assert [results.get_nowait() for _ in range(3)] == [
        ("shared", True),
        ("exclusive-try", False),
        ("exclusive-0.1", False),
    ]
    assert 0.09 <= waited < 20  # at least its 0.1 s; the upper bound only catches a hang
    lock.release()
    # blocking: waits for the holder, then gets it
    assert lock.acquire()
    threads.add(lambda: results.put(("blocking", _acquire_release(lock, False, None))))
    time.sleep(0.05)
    assert results.empty()
    lock.release()
    threads.wait()
    assert results.get_nowait() == ("blocking", True)


def _acquire_release(lock: SharedLock, shared: bool, timeout: float | None) -> bool:
    ok = lock.acquire(shared=shared, timeout=timeout)
    if ok:
        lock.release()
    return ok


def test_shared_lock_misuse() -> None:
    lock = SharedLock("l")
    with pytest.raises(LockUsageError):
        lock.release()
    lock.acquire()
    with pytest.raises(LockUsageError):
        lock.acquire()
    lock.release()


def test_waiting_exclusive_blocks_new_sharers_in_arrival_order(threads: Threads) -> None:
    """A queued exclusive acquisition is not overtaken by sharers arriving after it."""
    lock = SharedLock("l")
    lock.acquire(shared=True)
    order: queue.Queue = queue.Queue()

    def take(tag: str, shared: bool) -> None:
        lock.acquire(shared=shared)
        order.put(tag)
        time.sleep(0.01)
        lock.release()

    threads.add(lambda: take("exclusive", False))
    time.sleep(0.05)
    threads.add(lambda: take("shared", True))
    time.sleep(0.05)
    assert order.empty()
    lock.release()
    threads.wait()
    assert [order.get_nowait(), order.get_nowait()] == ["exclusive", "shared"]


def test_downgrade_lets_waiting_sharers_in(threads: Threads) -> None:
    lock = SharedLock("l")
    lock.acquire()
    got: queue.Queue = queue.Queue()
    threads.add(lambda: got.put(_acquire_release(lock, True, None)))
    time.sleep(0.05)
    assert got.empty()
    lock.downgrade()
    threads.wait()
    assert got.get_nowait() is True
    assert lock.is_owned(shared=True)
    lock.release()


def test_cancel_stops_a_waiting_acquisition(threads: Threads) -> None:
    lock = SharedLock("l")
    lock.acquire()
    cancel = threading.Event()
    outcome: queue.Queue = queue.Queue()

    def wait() -> None:
        try:
            lock.acquire(cancel=cancel)
            outcome.put("acquired")
        except AcquireCancelled:
            outcome.put("cancelled")

    threads.add(wait)
    time.sleep(0.1)
    cancel.set()
    threads.wait()
    assert outcome.get_nowait() == "cancelled"
    assert lock.info().pending == ()
    lock.release()
    assert lock.acquire(timeout=0)


def test_deleted_lock_fails_pending_and_later_acquisitions(threads: Threads) -> None:
    lock = SharedLock("l")
    lock.acquire()
    outcome: queue.Queue = queue.Queue()

    def wait() -> None:
        try:
            lock.acquire()
            outcome.put("acquired")
        except LockError:
            outcome.put("deleted")

    threads.add(wait)
    time.sleep(0.05)
    assert lock.delete()
    threads.wait()
    assert outcome.get_nowait() == "deleted"
    with pytest.raises(LockError):
        lock.acquire()


# ---------------------------------------------------------------------------------------------
# Ported: Ganeti 2.11 TestLockSet opportunistic scenarios


def test_ganeti_names_with_opportunistic_and_timeout(ls: LockSet) -> None:
    with pytest.raises(AssertionError):
        ls.acquire(["one", "two"], timeout=1.0, opportunistic=True)


def test_ganeti_opportunistic_with_unknown_name(ls: LockSet) -> None:
    assert "unknown" not in ls.names()
    assert not ls.acquire("unknown", opportunistic=True)
    assert not ls.list_owned()
    assert ls.acquire(["two", "unknown"], opportunistic=True) == {"two"}
    assert ls.list_owned() == {"two"}
    ls.release()
    with pytest.raises(LockError):  # the exact mode refuses an unknown name
        ls.acquire(["two", "unknown"])
    assert not ls.list_owned()


def test_ganeti_simple_opportunistic_acquisition(ls: LockSet, threads: Threads) -> None:
    assert ls.names() == {"one", "two", "three"}
    assert ls.acquire("two", shared=False) == {"two"}
    done: queue.Queue = queue.Queue()

    def fn() -> None:
        result = ls.acquire(["one", "two"], shared=False, opportunistic=True)
        assert result == {"one"}
        assert ls.list_owned() == {"one"}
        assert not ls.internal_lock.is_owned()
        ls.release()
        assert not ls.list_owned()
        result = ls.acquire(["two"], shared=False, opportunistic=True)
        assert not ls.internal_lock.is_owned()
        assert not result
        assert not ls.list_owned()
        result = ls.acquire(ALL_SET, shared=False, opportunistic=True)
        assert ls.internal_lock.is_owned(), "internal lock is not owned"
        assert result == {"one", "three"}
        assert ls.list_owned() == {"one", "three"}
        ls.release()
        assert not ls.list_owned()
        done.put(True)

    threads.add(fn)
    threads.wait()
    assert ls.list_owned() == {"two"}
    ls.release()
    assert not ls.list_owned()
    assert not ls.internal_lock.is_owned()
    assert done.get_nowait() is True
    assert done.empty()


def test_ganeti_opportunistic_acquisition_without_names_expires(
    ls: LockSet, threads: Threads
) -> None:
    ls.acquire(ALL_SET, shared=False)
    assert ls.internal_lock.is_owned()
    done: queue.Queue = queue.Queue()

    def fn() -> None:
        start = time.monotonic()
        result = ls.acquire(ALL_SET, shared=False, opportunistic=True, timeout=0.1)
        assert result is None  # the timeout bounds the internal lock only
        assert time.monotonic() - start >= 0.09
        assert not ls.internal_lock.is_owned()
        assert not ls.list_owned()
        assert not ls.acquire("one", shared=False, opportunistic=True)
        done.put(True)

    threads.add(fn)
    threads.wait()
    assert ls.list_owned() == {"one", "two", "three"}
    ls.release()
    assert not ls.list_owned()
    assert not ls.internal_lock.is_owned(shared=False)
    assert done.get_nowait() is True


def test_ganeti_shared_opportunistic_acquisition_without_names(
    ls: LockSet, threads: Threads
) -> None:
    ls.acquire(ALL_SET, shared=True)
    assert ls.internal_lock.is_owned(shared=True)
    done: queue.Queue = queue.Queue()

    def fn() -> None:
        result = ls.acquire(ALL_SET, shared=True, opportunistic=True, timeout=0.1)
        assert result == {"one", "two", "three"}
        assert ls.internal_lock.is_owned(shared=True)
        ls.release()
        assert not ls.internal_lock.is_owned()
        assert not ls.acquire("one", shared=False, opportunistic=True)
        done.put(True)

    threads.add(fn)
    threads.wait()
    assert ls.list_owned() == {"one", "two", "three"}
    ls.release()
    assert not ls.list_owned()
    assert not ls.internal_lock.is_owned()
    assert done.get_nowait() is True


def test_ganeti_lock_delete_with_opportunistic_acquisition(ls: LockSet, threads: Threads) -> None:
    ready = threading.Event()
    finished = threading.Event()
    done: queue.Queue = queue.Queue()

    def fn() -> None:
        ready.wait()
        assert ls.member("two").delete()
        done.put("deleted.two")
        finished.set()

    threads.add(fn)

    def notify(name: str) -> None:
        done.put(f"notify.{name}")
        if name == "one":
            ready.set()
            finished.wait()

    ls.acquire(ALL_SET, shared=False, test_notify=notify)
    assert ls.list_owned() == {"one", "three"}
    threads.wait()
    ls.release()
    assert not ls.list_owned()
    assert not ls.internal_lock.is_owned()
    assert [done.get_nowait() for _ in range(4)] == [
        "notify.one",
        "deleted.two",
        "notify.three",
        "notify.two",
    ]
    assert done.empty()


def test_ganeti_opportunistic_without_names_mode() -> None:
    mode, set_timeout, member_timeout = acquire_mode_and_timeouts(False, None, True)
    assert mode is AcquireMode.OPPORTUNISTIC
    assert set_timeout is None
    assert member_timeout() == 0


def test_ganeti_all_input_combinations() -> None:
    for want_all in (False, True):
        for timeout in (None, 0, 100):
            for opportunistic in (False, True):
                if opportunistic and not want_all and timeout is not None:
                    with pytest.raises(AssertionError):
                        acquire_mode_and_timeouts(want_all, timeout, opportunistic)
                    continue
                mode, set_timeout, member_timeout = acquire_mode_and_timeouts(
                    want_all, timeout, opportunistic
                )
                if opportunistic:
                    assert mode is AcquireMode.OPPORTUNISTIC
                    assert member_timeout() == 0
                else:
                    assert callable(member_timeout)
                    assert mode is (AcquireMode.ALL if want_all else AcquireMode.EXACT)
                if want_all:
                    assert callable(set_timeout)
                else:
                    assert set_timeout is None


# ---------------------------------------------------------------------------------------------
# Ganeti 3.0's guarded opportunistic union (min_count)


def test_guarded_opportunistic_keeps_nothing_below_min_count(ls: LockSet, threads: Threads) -> None:
    ls.acquire(["one", "two"])
    got: queue.Queue = queue.Queue()

    def fn() -> None:
        got.put(ls.acquire(ALL_SET, opportunistic=True, min_count=2))
        got.put((ls.list_owned(), ls.internal_lock.is_owned()))
        got.put(ls.acquire(ALL_SET, opportunistic=True, min_count=1))
        got.put(ls.list_owned())
        ls.release()

    threads.add(fn)
    threads.wait()
    assert got.get_nowait() == set()
    assert got.get_nowait() == (set(), False)
    assert got.get_nowait() == {"three"}
    assert got.get_nowait() == {"three"}
    assert ls.list_owned() == {"one", "two"}
    ls.release()


def test_whole_set_blocks_additions(ls: LockSet, threads: Threads) -> None:
    ls.acquire(ALL_SET, shared=True)
    added = threading.Event()

    def fn() -> None:
        ls.add("four")
        added.set()

    threads.add(fn)
    time.sleep(0.1)
    assert not added.is_set()
    ls.release()
    threads.wait()
    assert ls.names() == {"one", "two", "three", "four"}
    with pytest.raises(LockError):
        ls.add("four")


# ---------------------------------------------------------------------------------------------
# Ported: Ganeti 2.11 TestGanetiLockManager (NAL level), and the NAL rule


@pytest.fixture
def lm() -> LockManager:
    return LockManager(["n1", "n2"], ["g1", "g2"], ["i1", "i2", "i3"], ["net1", "net2", "net3"])


def test_ganeti_levels_are_in_order() -> None:
    assert [int(level) for level in Level] == list(range(len(Level)))
    assert Level.INSTANCE < Level.NODE_ALLOC < Level.NODEGROUP < Level.NODE


def test_ganeti_lock_names(lm: LockManager) -> None:
    assert lm.names(Level.CLUSTER) == {BGL}
    assert lm.names(Level.NODE_ALLOC) == {NAL}
    assert lm.names(Level.NODE) == {"n1", "n2"}
    assert lm.names(Level.NODEGROUP) == {"g1", "g2"}
    assert lm.names(Level.INSTANCE) == {"i1", "i2", "i3"}
    assert lm.names(Level.NETWORK) == {"net1", "net2", "net3"}


def test_ganeti_init_and_resources() -> None:
    empty = LockManager()
    assert empty.names(Level.CLUSTER) == {BGL}
    assert empty.names(Level.NODE_ALLOC) == {NAL}
    for level in (Level.NODE, Level.NODEGROUP, Level.INSTANCE, Level.NETWORK):
        assert empty.names(level) == set()
    some = LockManager(["n1", "n2"], ["g1", "g2"])
    assert some.names(Level.NODE_ALLOC) == {NAL}
    assert some.names(Level.NODE) == {"n1", "n2"}
    assert some.names(Level.NODEGROUP) == {"g1", "g2"}
    assert some.names(Level.INSTANCE) == set()
    inst = LockManager(instances=["i1", "i2", "i3"])
    assert inst.names(Level.NODE_ALLOC) == {NAL}
    assert inst.names(Level.INSTANCE) == {"i1", "i2", "i3"}
    assert inst.names(Level.NODE) == set()


def test_ganeti_modifiable_levels(lm: LockManager) -> None:
    with pytest.raises(AssertionError):
        lm.add(Level.CLUSTER, ["BGL2"])
    with pytest.raises(AssertionError):
        lm.add(Level.NODE_ALLOC, ["NAL2"])
    lm.acquire(Level.CLUSTER, [BGL])
    lm.add(Level.INSTANCE, ["i4"])
    lm.remove(Level.INSTANCE, ["i3"])
    lm.remove(Level.INSTANCE, ["i1"])
    assert lm.names(Level.INSTANCE) == {"i2", "i4"}
    lm.add(Level.NODE, ["n3"])
    lm.remove(Level.NODE, ["n1"])
    assert lm.names(Level.NODE) == {"n2", "n3"}
    lm.add(Level.NODEGROUP, ["g3"])
    lm.remove(Level.NODEGROUP, ["g2"])
    lm.remove(Level.NODEGROUP, ["g1"])
    assert lm.names(Level.NODEGROUP) == {"g3"}
    with pytest.raises(AssertionError):
        lm.remove(Level.CLUSTER, ["BGL2"])


def test_ganeti_bgl_dependency_and_order(lm: LockManager) -> None:
    with pytest.raises(AssertionError):
        lm.acquire(Level.NODE, ["n1"])
    lm.acquire(Level.CLUSTER, [BGL], shared=True)
    lm.acquire(Level.NODE, ["n2"])
    with pytest.raises(AssertionError):
        lm.release(Level.CLUSTER)
    with pytest.raises(AssertionError):
        lm.acquire(Level.NODEGROUP, ["g1"])
    with pytest.raises(AssertionError):
        lm.acquire(Level.NODE, ["n1"])
    lm.release_all()
    assert not any(lm.is_owned(level) for level in Level)


def test_all_node_locks_need_the_nal_in_the_same_mode(lm: LockManager) -> None:
    lm.acquire(Level.CLUSTER, [BGL], shared=True)
    with pytest.raises(AssertionError, match="node-allocation lock"):
        lm.acquire(Level.NODE, ALL_SET)
    with pytest.raises(AssertionError, match="node-allocation lock"):
        lm.acquire(Level.NODE, ["n1", "n2"], opportunistic=True)
    assert lm.acquire(Level.NODE, ["n1"]) == {"n1"}  # a few nodes need no NAL
    lm.release(Level.NODE)
    lm.acquire(Level.NODE_ALLOC, ALL_SET, shared=True)
    with pytest.raises(AssertionError, match="same mode"):
        lm.acquire(Level.NODE, ALL_SET, shared=False)
    assert lm.acquire(Level.NODE, ALL_SET, shared=True) == {"n1", "n2"}
    lm.release_all()
    lm.acquire(Level.CLUSTER, [BGL], shared=True)
    lm.acquire(Level.NODE_ALLOC, ALL_SET)
    assert lm.acquire(Level.NODE, ALL_SET, opportunistic=True) == {"n1", "n2"}
    lm.release_all()


def test_nal_makes_creations_wait_for_a_cluster_wide_operation(
    lm: LockManager, threads: Threads
) -> None:
    """A verify (NAL + all nodes, shared) holds off a creation (NAL exclusive) until it ends:
    the creation neither fails nor gets nodes while the verify runs."""
    verify_done = threading.Event()
    events: queue.Queue = queue.Queue()

    def verify() -> None:
        lm.acquire(Level.CLUSTER, [BGL], shared=True)
        lm.acquire(Level.NODE_ALLOC, ALL_SET, shared=True)
        lm.acquire(Level.NODE, ALL_SET, shared=True)
        events.put("verify locked")
        time.sleep(0.2)
        events.put("verify done")
        verify_done.set()
        lm.release_all()

    def create() -> None:
        lm.acquire(Level.CLUSTER, [BGL], shared=True)
        lm.acquire(Level.NODE_ALLOC, ALL_SET)
        got = lm.acquire(Level.NODE, ALL_SET, opportunistic=True)
        events.put(("create got", verify_done.is_set(), frozenset(got or ())))
        lm.release_all()

    threads.add(verify)
    time.sleep(0.05)
    threads.add(create)
    threads.wait()
    assert events.get_nowait() == "verify locked"
    assert events.get_nowait() == "verify done"
    assert events.get_nowait() == ("create got", True, frozenset({"n1", "n2"}))


# ---------------------------------------------------------------------------------------------
# Properties with many threads


class Ledger:
    """Who holds what, written right after a grant and right before a release: a conflict
    here is a real one (the recorded intervals lie inside the held ones)."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self.holders: dict[str, dict[threading.Thread, bool]] = {}
        self.conflicts: list[str] = []
        self.grants = 0

    def grant(self, name: str, shared: bool) -> None:
        me = threading.current_thread()
        with self._mutex:
            held = self.holders.setdefault(name, {})
            others = {t: s for t, s in held.items() if t is not me}
            if others and (not shared or not all(others.values())):
                self.conflicts.append(f"{name}: {me.name} {shared} with {others}")
            held[me] = shared
            self.grants += 1

    def release(self, name: str) -> None:
        with self._mutex:
            self.holders[name].pop(threading.current_thread())


NAMES = ("a", "b", "c", "d", "e")

lock_request = st.tuples(
    st.one_of(st.none(), st.sets(st.sampled_from(NAMES), min_size=1)),  # None = whole set
    st.booleans(),  # shared
    st.booleans(),  # opportunistic
    st.sampled_from((None, 0.0, 0.005)),  # timeout
    st.integers(0, 2),  # min_count (opportunistic only)
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    plans=st.lists(st.lists(lock_request, min_size=1, max_size=6), min_size=2, max_size=10),
    seed=st.integers(0, 2**16),
)
def test_lock_set_under_many_threads(plans: list, seed: int) -> None:
    """Threads acquire whole sets, names, opportunistically, with timeouts: no lock ever
    has an exclusive owner beside another owner, nothing deadlocks, everything is released."""
    ls = LockSet(NAMES, "prop")
    ledger = Ledger()
    threads = Threads()

    def worker(plan: list, rng: random.Random) -> None:
        for names, shared, opportunistic, timeout, min_count in plan:
            if opportunistic and names is not None:
                timeout = None  # by name an opportunistic acquisition takes no timeout
            got = ls.acquire(
                names,
                timeout=timeout,
                shared=shared,
                opportunistic=opportunistic,
                min_count=min_count if opportunistic else 0,
            )
            if got is None:
                assert timeout is not None
                assert not ls.is_owned()
                continue
            if not opportunistic:
                assert got == (set(NAMES) if names is None else names)
            elif min_count and got:
                assert len(got) >= min_count
            assert ls.list_owned() == got
            for name in sorted(got):
                ledger.grant(name, shared)
            time.sleep(rng.random() * 0.002)
            for name in sorted(got):
                ledger.release(name)
            if ls.is_owned():
                ls.release()
            assert not ls.is_owned()

    for k, plan in enumerate(plans):
        rng = random.Random(seed + k)
        threads.add(lambda p=plan, r=rng: worker(p, r), name=f"w{k}")
    threads.wait(timeout=30)
    assert not ledger.conflicts, ledger.conflicts
    for info in [ls.internal_lock.info(), *(ls.member(n).info() for n in NAMES)]:
        assert info.mode is None and info.pending == (), info
    assert ls.acquire(ALL_SET, timeout=0) == set(NAMES)
    ls.release()


level_step = st.tuples(
    st.sampled_from((Level.INSTANCE, Level.NODE_ALLOC, Level.NODEGROUP, Level.NODE)),
    st.one_of(st.none(), st.sets(st.sampled_from(("x", "y", "z")), min_size=1)),
    st.booleans(),  # shared
    st.booleans(),  # opportunistic (node level only)
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    jobs=st.lists(st.lists(level_step, min_size=1, max_size=4), min_size=2, max_size=10),
    seed=st.integers(0, 2**16),
)
def test_lock_manager_jobs_under_many_threads(jobs: list, seed: int) -> None:
    """Jobs take levels in order (BGL shared first, NAL with all nodes), hold, release all:
    exclusive grants never overlap another grant, every job ends, nothing stays held."""
    lm = LockManager(nodes=("x", "y", "z"), nodegroups=("x", "y"), instances=("x", "y", "z"))
    ledger = Ledger()
    threads = Threads()

    def job(steps: list, rng: random.Random) -> None:
        lm.acquire(Level.CLUSTER, [BGL], shared=True)
        held: list[str] = []
        done_levels: set[Level] = set()
        for level, names, shared, opportunistic in sorted(steps, key=lambda s: s[0]):
            if level in done_levels:
                continue
            done_levels.add(level)
            if level == Level.NODE_ALLOC:
                names, opportunistic = ALL_SET, False
            members = lm.names(level)
            if names is not None:
                names = names & members or members
            opportunistic = opportunistic and level == Level.NODE
            if level == Level.NODE and (names is None or names == members):
                # the rule: all nodes need the NAL in the same mode
                if not lm.check_owned(Level.NODE_ALLOC, NAL, shared=shared):
                    if Level.NODE_ALLOC in done_levels and lm.is_owned(Level.NODE_ALLOC):
                        continue
                    with pytest.raises(AssertionError):
                        lm.acquire(level, names, shared=shared, opportunistic=opportunistic)
                    continue
            got = lm.acquire(level, names, shared=shared, opportunistic=opportunistic)
            assert got is not None
            for name in sorted(got):
                key = f"{level.name}/{name}"
                ledger.grant(key, shared)
                held.append(key)
        time.sleep(rng.random() * 0.003)
        for key in held:
            ledger.release(key)
        lm.release_all()
        assert not any(lm.is_owned(level) for level in Level)

    for k, steps in enumerate(jobs):
        rng = random.Random(seed + k)
        threads.add(lambda s=steps, r=rng: job(s, r), name=f"job{k}")
    threads.wait(timeout=30)
    assert not ledger.conflicts, ledger.conflicts
    assert lm.info() == []


held_state = st.dictionaries(
    st.sampled_from(NAMES), st.sampled_from(("shared", "exclusive")), max_size=len(NAMES)
)


@settings(max_examples=40, deadline=None)
@given(
    held=held_state,
    wanted=st.one_of(st.none(), st.sets(st.sampled_from(NAMES), min_size=1)),
    shared=st.booleans(),
    min_count=st.integers(0, 4),
)
def test_opportunistic_answer(held: dict, wanted: set | None, shared: bool, min_count: int) -> None:
    """Ganeti 3.0's prop_OpportunisticAnswer: the locks in the answer are held as requested,
    exactly the free (or compatibly shared) ones; the others stay as they were; below
    `min_count` nothing changes at all."""
    ls = LockSet(NAMES, "opp")
    threads = Threads()
    holding = threading.Event()
    done = threading.Event()

    def holder(name: str, mode: str) -> None:
        ls.member(name).acquire(shared=mode == "shared")
        holding.wait()
        done.wait()
        ls.member(name).release()

    ready = []
    for name, mode in held.items():
        t = threads.add(lambda n=name, m=mode: holder(n, m))
        ready.append(t)
    deadline = time.monotonic() + 5
    while any(ls.member(n).info().mode is None for n in held):
        assert time.monotonic() < deadline
        time.sleep(0.001)
    holding.set()
    before = {n: ls.member(n).info() for n in NAMES}
    got = ls.acquire(wanted, shared=shared, opportunistic=True, min_count=min_count)
    targets = set(NAMES) if wanted is None else wanted
    free = {n for n in targets if n not in held or (shared and held[n] == "shared")}
    expected = free if len(free) >= min_count else set()
    assert got == expected
    for name in NAMES:
        if name in expected:
            assert ls.member(name).is_owned(shared=shared)
        else:
            assert not ls.member(name).is_owned()
            assert ls.member(name).info().owners == before[name].owners
    if ls.is_owned():
        ls.release()
    done.set()
    threads.wait()
