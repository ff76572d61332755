"""Exclusion across processes (``bot.engine.stores.locks``): one turn of a channel at a time, one piece of
work on a person at a time, and nothing left held by a task that is cancelled (a reply deadline) at any
await on the way in or out.

SQLite has one process, so its half is a no-op that grants everything at once; the PostgreSQL half is an
advisory lock per channel on one dedicated session and a leased claim row per person. Cross-process
promises are tested with ``second_process`` (skipped on SQLite: there is no second writer to exclude).
"""

from __future__ import annotations

import asyncio
import sys
import threading
from contextlib import asynccontextmanager
from itertools import count

import pytest

from langgraph.store.base import PutOp

from bot.engine.stores import ClaimLost
from bot.engine.stores.locks import ERASURE, EXTRACTION
from bot.storage import StorageBusy, open_storage
from tests.conftest import make_settings
from tests.storage.contract.conftest import record, until

NS = ("memories", "42")


async def write(storage, key: str, content: str) -> None:
    """A memory write as the engine makes one: one ``abatch`` (fenced by the current claim).

    Not ``aput``: LangGraph's store queues that to a background task of its own, outside the claim's
    context, where the fence cannot see the claim.
    """
    await storage.store.abatch([PutOp(NS, key, {"content": content})])


# ------------------------------------------------------------------ instruments for the PostgreSQL half
class Steps:
    """Counts the awaits a lock path makes on its connections, and cancels ``victim`` at the ``n``-th.

    ``when`` is where the cancel lands: ``before`` the awaited call goes out (the task is cancelled as it
    sends a statement) or ``after`` its answer came back (the statement took effect; the caller has not
    seen the result). ``n`` 0 only counts.
    """

    def __init__(self, n: int = 0, when: str = "before") -> None:
        self.n, self.when = n, when
        self.seen = 0
        self.fired = False
        self.victim: asyncio.Task | None = None

    async def step(self, call):
        self.seen += 1
        hit = self.seen == self.n and self.victim is not None
        if hit and self.when == "before":
            self.fired = True
            self.victim.cancel()
        result = await call()
        if hit and self.when == "after":
            self.fired = True
            self.victim.cancel()
            await asyncio.sleep(0)  # delivered here if this await runs in the victim itself
        return result


class _Cursor:
    def __init__(self, real, steps: Steps) -> None:
        self._real, self._steps = real, steps

    async def fetchone(self):
        return await self._steps.step(self._real.fetchone)

    def __getattr__(self, name):
        return getattr(self._real, name)


class _Conn:
    def __init__(self, real, steps: Steps) -> None:
        self._real, self._steps = real, steps

    async def execute(self, *args, **kwargs):
        return _Cursor(await self._steps.step(lambda: self._real.execute(*args, **kwargs)), self._steps)

    def __getattr__(self, name):
        return getattr(self._real, name)


class _Db:
    """The backend's pooled-connection helper, with getting a connection counted as an await too."""

    def __init__(self, real, steps: Steps) -> None:
        self._real, self._steps = real, steps

    @asynccontextmanager
    async def connection(self):
        manager, conn = self._real.connection(), None

        async def enter():
            nonlocal conn
            conn = await manager.__aenter__()

        try:
            await self._steps.step(enter)
        except BaseException:
            if conn is not None:  # cancelled "after": the connection goes back to the pool
                await manager.__aexit__(*sys.exc_info())
            raise
        try:
            yield _Conn(conn, self._steps)
        except BaseException:
            if not await manager.__aexit__(*sys.exc_info()):
                raise
        else:
            await manager.__aexit__(None, None, None)

    def __getattr__(self, name):
        return getattr(self._real, name)


def instrument(locks, steps: Steps, monkeypatch) -> None:
    """Route a ``PostgresLocks``' lock session and pooled connections through ``steps``."""
    real_lock_conn = locks._lock_conn

    async def lock_conn():
        return _Conn(await steps.step(real_lock_conn), steps)

    monkeypatch.setattr(locks, "_lock_conn", lock_conn)
    monkeypatch.setattr(locks, "_db", _Db(locks._db, steps))


async def run_cancelled_at_every_await(locks, monkeypatch, path, check) -> int:
    """Run ``path(steps)`` with a cancel at its 1st, 2nd, ... await (before and after each), calling
    ``check(n, when)`` after every run, until a run ends before its ``n``-th await; return that ``n``."""
    real_lock_conn, real_db = locks._lock_conn, locks._db
    for n in count(1):
        finished = 0
        for when in ("before", "after"):
            steps = Steps(n, when)
            monkeypatch.setattr(locks, "_lock_conn", real_lock_conn)
            monkeypatch.setattr(locks, "_db", real_db)
            instrument(locks, steps, monkeypatch)
            task = asyncio.create_task(path(steps))
            steps.victim = task
            await asyncio.wait((task,))
            if steps.fired:
                assert task.cancelled(), f"cancelled {when} await {n}, the task did not end cancelled"
            else:
                task.result()  # it ran to its end: no error either
                finished += 1
            await check(n, when)
        if finished == 2:
            return n


# ------------------------------------------------------------------ the protocol on every backend
async def test_an_embedded_backend_has_nothing_to_sweep_a_shared_one_does(storage, backend):
    if backend.name == "sqlite":
        assert storage.locks.sweep_seconds is None
    else:
        assert storage.locks.sweep_seconds > 0


async def test_an_unheld_channel_and_person_are_granted_at_once(storage):
    async with storage.locks.channel("t"):
        async with storage.locks.channel("u"):  # other channels are independent
            pass
    for kind in (EXTRACTION, ERASURE):
        async with storage.locks.person("42", kind=kind, wait=False) as held:
            assert held is True
    async with storage.locks.person("42", kind=EXTRACTION, wait=True) as held:  # released: granted again
        assert held is True


async def test_nesting_in_one_process_is_granted_the_engine_keeps_the_order(storage, backend, raw,
                                                                           second_process_or_none, monkeypatch):
    """Re-entrancy as implemented: within one process storage grants a nested channel lock or claim at once
    (PostgreSQL advisory locks are re-entrant per session; a claim of this process's own is replaced).
    Exclusion within a process is the engine's (``bot.engine.concurrency``); storage only excludes others.
    """
    async with storage.locks.channel("t"):
        async with storage.locks.channel("t"):
            pass
        if second_process_or_none is not None:  # the outer lock still holds after the inner one went
            steps = Steps()
            instrument(second_process_or_none.locks, steps, monkeypatch)
            other = asyncio.create_task(_enter_channel(second_process_or_none, "t"))
            await until(lambda: steps.seen >= 9, what="the other process tried the lock three times")
            assert not other.done()
    if second_process_or_none is not None:
        await asyncio.wait_for(other, 20)
    async with storage.locks.person("42", kind=EXTRACTION, wait=False) as outer:
        async with storage.locks.person("42", kind=ERASURE, wait=False) as inner:
            assert outer is True and inner is True
        if backend.name == "postgres":  # the nested claim took the outer one's place, and went with it
            assert await raw.rows("SELECT owner FROM bot_claims") == []
            with pytest.raises(ClaimLost):
                await write(storage, "k", "written under a replaced claim")
    assert await storage.store.aget(NS, "k") is None


async def _enter_channel(storage, thread_id: str) -> None:
    async with storage.locks.channel(thread_id):
        pass


@pytest.fixture
async def second_process_or_none(backend, storage, open_again):
    if backend.name == "sqlite":
        yield None
        return
    async with open_again() as other:
        yield other


# ------------------------------------------------------------------ across processes (PostgreSQL)
async def test_a_channel_is_held_against_every_other_process(postgres_only, storage, second_process, monkeypatch):
    steps = Steps()
    instrument(second_process.locks, steps, monkeypatch)
    entered = asyncio.Event()

    async def other_turn() -> None:
        async with second_process.locks.channel("t"):
            entered.set()

    async with storage.locks.channel("t"):
        waiting = asyncio.create_task(other_turn())
        await until(lambda: steps.seen >= 9, what="the other process tried the lock three times")
        assert not entered.is_set()
        async with second_process.locks.channel("u"):  # another channel is not held up
            pass
    await asyncio.wait_for(waiting, 20)
    assert entered.is_set()


async def test_a_person_claimed_in_one_process_is_not_claimable_in_another_until_released(
        postgres_only, storage, second_process, monkeypatch):
    async with storage.locks.person("42", kind=EXTRACTION, wait=False) as held:
        assert held is True
        for kind in (EXTRACTION, ERASURE):
            async with second_process.locks.person("42", kind=kind, wait=False) as other:
                assert other is False
        async with second_process.locks.person("7", kind=EXTRACTION, wait=False) as other:
            assert other is True  # another person is free
        steps = Steps()
        instrument(second_process.locks, steps, monkeypatch)
        granted = []

        async def wait_for_it() -> None:
            async with second_process.locks.person("42", kind=ERASURE, wait=True) as got:
                granted.append(got)

        waiter = asyncio.create_task(wait_for_it())
        await until(lambda: steps.seen >= 9, what="the waiting claim polled three times")
        assert granted == []
    await asyncio.wait_for(waiter, 20)
    assert granted == [True]


async def test_an_erasure_claim_stops_every_process_recording_the_persons_turns(postgres_only, storage,
                                                                             second_process, raw):
    async with storage.locks.person("42", kind=EXTRACTION, wait=False):
        assert await record(second_process, "t", "42", 0) == 1  # extraction does not stop recording
    async with storage.locks.person("42", kind=ERASURE, wait=True) as held:
        assert held is True
        assert await record(second_process, "t", "42", 1) == 0  # refused: 0 pending reported
        assert await record(storage, "t", "42", 2) == 0
        assert await record(second_process, "t", "7", 3) == 1  # other people are not held up
    assert await record(second_process, "t", "42", 4) == 2
    assert [t.human for t in await storage.inbox.every_turn() if t.user_id == "42"] == ["h0", "h4"]
    assert await raw.count("inbox", "user_id = ?", ("42",)) == 2


@asynccontextmanager
async def claimed_elsewhere(storage, user_id: str, kind: str):
    """Hold a claim from a task of its own, as another process's worker would (a claim is per task)."""
    granted: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    done = asyncio.Event()

    async def hold() -> None:
        async with storage.locks.person(user_id, kind=kind, wait=False) as held:
            granted.set_result(held)
            await done.wait()

    holder = asyncio.create_task(hold())
    try:
        yield await granted
    finally:
        done.set()
        await holder


async def test_a_lease_that_ran_out_can_be_taken_over_and_the_stalled_holder_writes_nothing(
        postgres_only, storage, second_process, raw):
    stalled = storage.locks.person("42", kind=EXTRACTION, wait=False)
    assert await stalled.__aenter__() is True
    await write(storage, "before", "written while the lease held")
    await raw.execute("UPDATE bot_claims SET lease_until = now() - interval '1 second'")  # it stalled
    async with claimed_elsewhere(second_process, "42", EXTRACTION) as taken:
        assert taken is True
        (owner,) = await raw.rows("SELECT owner FROM bot_claims")
        with pytest.raises(ClaimLost):
            await write(storage, "late", "the stalled holder's write")
        assert await second_process.store.aget(NS, "late") is None
        async with claimed_elsewhere(storage, "42", EXTRACTION) as again:
            assert again is False  # the new holder's lease is live: not even the old holder's process gets it
        await stalled.__aexit__(None, None, None)
        assert await raw.rows("SELECT owner FROM bot_claims") == [owner]  # its release left the new claim alone
    assert await raw.rows("SELECT owner FROM bot_claims") == []
    assert await storage.store.aget(NS, "before") is not None


async def test_a_live_holder_renews_its_lease(postgres_only, backend, open_again, raw):
    async with open_again(storage={"claim_lease_seconds": 3}) as one, open_again() as two:
        async with one.locks.person("42", kind=ERASURE, wait=False) as held:
            assert held is True
            await raw.execute("UPDATE bot_claims SET lease_until = now() + interval '2 seconds'")  # running out
            await until(_renewed(raw), what="the holder renewed its lease")
            async with two.locks.person("42", kind=ERASURE, wait=False) as other:
                assert other is False
            await one.locks.still_held()  # its own, unexpired: nothing raised


async def test_a_lease_that_ran_out_is_not_brought_back_silently(postgres_only, backend, open_again, raw):
    """Renewals starved of a pooled connection let a lease run out: every other process then saw the person
    as free (not being erased), and the next renewal used to bring the lease back as if nothing had
    happened. It stays out, and the holder learns it before saying "Done" (``still_held``)."""
    async with open_again(storage={"claim_lease_seconds": 3}) as storage, \
            storage.locks.person("42", kind=ERASURE, wait=False) as held:
        assert held is True
        await raw.execute("UPDATE bot_claims SET lease_until = now() - interval '1 second'")
        await asyncio.sleep(storage.locks.lease_seconds / 3 + 0.5)  # a renewal came and went
        assert (await raw.rows("SELECT lease_until > now() FROM bot_claims"))[0][0] is False
        with pytest.raises(ClaimLost):
            await storage.locks.still_held()


def _renewed(raw):
    async def check() -> bool:
        return (await raw.rows("SELECT lease_until > now() + interval '2.5 seconds' FROM bot_claims"))[0][0]
    return check


async def test_two_processes_waiting_for_each_others_person_wait_for_ever(postgres_only, storage, second_process,
                                                                       raw, monkeypatch):
    """Claims have no deadlock detection (a live holder keeps renewing): two processes that each hold one
    person and wait for the other's never get on. The engine never does that: it waits for a second person
    only inside ``Locks.erasures()``, one erasure at a time over the database. A cancel frees both."""
    one_steps, two_steps = Steps(), Steps()
    instrument(storage.locks, one_steps, monkeypatch)
    instrument(second_process.locks, two_steps, monkeypatch)
    got = []

    async def hold_then_wait(s, mine: str, theirs: str, ready: asyncio.Event, both: asyncio.Event) -> None:
        async with s.locks.person(mine, kind=ERASURE, wait=True):
            ready.set()
            await both.wait()
            async with s.locks.person(theirs, kind=ERASURE, wait=True) as held:
                got.append(held)

    a_ready, b_ready, both = asyncio.Event(), asyncio.Event(), asyncio.Event()
    a = asyncio.create_task(hold_then_wait(storage, "1", "2", a_ready, both))
    b = asyncio.create_task(hold_then_wait(second_process, "2", "1", b_ready, both))
    await a_ready.wait()
    await b_ready.wait()
    start_one, start_two = one_steps.seen, two_steps.seen
    both.set()
    await until(lambda: one_steps.seen >= start_one + 9 and two_steps.seen >= start_two + 9,
                what="both processes polled for the other's person three times")
    assert got == [] and not a.done() and not b.done()
    a.cancel()
    b.cancel()
    await asyncio.wait((a, b))
    assert await raw.rows("SELECT user_id FROM bot_claims") == []


# ------------------------------------------------------------------ cancellation at every await (PostgreSQL)
CHANNEL_LOCK_CLASS = 0x6D6E  # bot.storage.postgres.locks: the first key of a channel's advisory lock


async def test_a_turn_cancelled_at_any_await_of_its_channel_lock_leaves_no_lock(holds_locks, storage, raw,
                                                                               monkeypatch):
    async def turn(steps: Steps) -> None:
        async with storage.locks.channel("t"):
            await steps.step(lambda: asyncio.sleep(0))  # the turn's own work: a cancel may come here too

    async def check(n: int, when: str) -> None:
        assert await raw.advisory_locks() == [], f"an advisory lock is held after a cancel {when} await {n}"
        assert await raw.can_take_advisory(CHANNEL_LOCK_CLASS, "t"), f"cancel {when} await {n}"

    awaits = await run_cancelled_at_every_await(storage.locks, monkeypatch, turn, check)
    assert awaits >= 5  # the lock session, the lock statement and its answer, the turn, the unlock
    async with storage.locks.channel("t"):  # and the process itself still takes and gives it normally
        assert len(await raw.advisory_locks()) == 1
    assert await raw.advisory_locks() == []


@pytest.mark.parametrize("kind, wait", [(EXTRACTION, False), (ERASURE, True)])
async def test_work_cancelled_at_any_await_of_its_claim_leaves_no_claim(holds_locks, storage, second_process,
                                                                     raw, monkeypatch, kind, wait):
    async def work(steps: Steps) -> None:
        async with storage.locks.person("42", kind=kind, wait=wait) as held:
            assert held is True
            await steps.step(lambda: asyncio.sleep(0))

    async def check(n: int, when: str) -> None:
        assert await raw.rows("SELECT owner FROM bot_claims") == [], f"a claim is left after a cancel {when} await {n}"
        async with second_process.locks.person("42", kind=kind, wait=False) as other:
            assert other is True, f"another process cannot claim after a cancel {when} await {n}"

    awaits = await run_cancelled_at_every_await(storage.locks, monkeypatch, work, check)
    assert awaits >= 5  # a connection, the claim and its answer, the work, a connection and the release


async def test_a_cancelled_waiter_for_a_channel_leaves_nothing_behind(holds_locks, storage, second_process,
                                                                     raw, monkeypatch):
    steps = Steps()
    instrument(storage.locks, steps, monkeypatch)
    entered = []

    async def waiting_turn() -> None:
        async with storage.locks.channel("t"):
            entered.append(True)

    async with second_process.locks.channel("t"):
        waiter = asyncio.create_task(waiting_turn())
        await until(lambda: steps.seen >= 7, what="the waiter polled twice")
        waiter.cancel()
        await asyncio.wait((waiter,))
        assert waiter.cancelled() and entered == []
        assert len(await raw.advisory_locks()) == 1  # only the holder's
    assert await raw.advisory_locks() == []
    assert await raw.can_take_advisory(CHANNEL_LOCK_CLASS, "t")


async def test_a_cancelled_waiter_for_a_person_leaves_nothing_behind(holds_locks, storage, second_process,
                                                                    raw, monkeypatch):
    steps = Steps()
    instrument(storage.locks, steps, monkeypatch)
    granted = []

    async def waiting_erasure() -> None:
        async with storage.locks.person("42", kind=ERASURE, wait=True) as held:
            granted.append(held)

    async with second_process.locks.person("42", kind=EXTRACTION, wait=False) as held:
        assert held is True
        waiter = asyncio.create_task(waiting_erasure())
        await until(lambda: steps.seen >= 6, what="the waiter polled twice")
        waiter.cancel()
        await asyncio.wait((waiter,))
        assert waiter.cancelled() and granted == []
        assert len(await raw.rows("SELECT owner FROM bot_claims")) == 1  # only the holder's
    assert await raw.rows("SELECT owner FROM bot_claims") == []
    assert await record(second_process, "t", "42", 0) == 1  # no erasure claim left to refuse the turn


# ------------------------------------------------------------------ the SQLite half: one writer per data directory
async def test_a_second_writer_on_the_same_data_directory_is_refused(tmp_path):
    """SQLite only: PostgreSQL is made for several processes."""
    settings = make_settings(tmp_path / "data")
    async with open_storage(settings):
        with pytest.raises(StorageBusy, match="already using the data directory"):
            async with open_storage(settings):
                pass
        async with open_storage(settings, writer=False) as reader:  # reading beside it is fine
            assert await reader.erasures.unfinished() == []
    async with open_storage(settings):  # released on close
        pass


@pytest.mark.parametrize("after", [0.0, 0.001, 0.003, 0.01, 0.03, 0.1])
async def test_a_start_up_cancelled_part_way_leaves_the_data_directory_free(tmp_path, after):
    """The writer lock is the one thing SQLite's half holds: however far opening got, a cancel lets it go,
    and closes every connection it had opened (each is a thread that would keep the process alive)."""
    settings = make_settings(tmp_path / "data")
    threads = {t for t in threading.enumerate() if t.is_alive()}

    async def run_bot() -> None:
        async with open_storage(settings):
            await asyncio.Event().wait()

    bot = asyncio.create_task(run_bot())
    await asyncio.sleep(after)
    bot.cancel()
    await asyncio.wait((bot,))
    assert bot.cancelled()
    await until(lambda: {t for t in threading.enumerate() if t.is_alive()} <= threads,
                what="every connection thread the cancelled start-up opened has ended")
    async with open_storage(settings) as storage:  # not StorageBusy
        assert await storage.erasures.unfinished() == []


async def test_holding_two_people_a_write_stops_when_either_lease_ran_out(postgres_only, storage, second_process, raw):
    """An erasure holding two people writes both people's memories. The batch is checked against every
    claim the task holds: until 2026-12-07 only the latest, so the first person's lapsed and taken-over
    lease let this process write their memories beside the new holder."""
    first = storage.locks.person("41", kind=EXTRACTION, wait=False)
    assert await first.__aenter__() is True
    second = storage.locks.person("42", kind=EXTRACTION, wait=False)
    assert await second.__aenter__() is True
    await write(storage, "both", "written while both leases held")
    await raw.execute("UPDATE bot_claims SET lease_until = now() - interval '1 second' WHERE user_id = '41'")
    async with claimed_elsewhere(second_process, "41", EXTRACTION) as taken:
        assert taken is True
        with pytest.raises(ClaimLost):
            await write(storage, "late", "a write for person 41 under person 42's claim")
        await second.__aexit__(None, None, None)
        await first.__aexit__(None, None, None)
    assert await storage.store.aget(NS, "late") is None
