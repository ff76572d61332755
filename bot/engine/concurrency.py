"""Concurrency, in one place: every lock the engine takes, the holds erasures keep, and bounded maps.

- :class:`Locks` is the one home of the engine's locks, in-process first, then storage's cross-process half:
  ``channel(thread_id)`` runs a channel's turns one at a time, in arrival order (an asyncio lock is FIFO),
  and, on a shared database, never at the same moment as a turn of that channel in another process;
  ``person(user_id, kind, wait)`` allows one piece of work on a person at a time (an extraction, an
  erasure), here and in every other process (see :class:`bot.engine.stores.locks.CrossProcessLocks`);
  ``erasures()`` lets one erasure run at a time over the whole database, so two erasures that each need the
  other's people can never wait for each other (see ``docs/decisions.md``).
- :class:`Holds` is the re-entrant hold an erasure keeps on each person whose data it changes.
- A bot in many servers meets an unbounded number of people and channels; any map keyed by them must
  forget. :class:`KeyedLocks` keeps a lock only while someone holds or waits for it, and
  :class:`InflightTurns` a turn only while it is being answered; :class:`RateLimiter` and
  :class:`BoundedDict` keep at most ``max_keys`` keys, forgetting the least recently touched.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import AsyncIterator, Callable, Generic, Hashable, Iterable, Iterator, TypeVar

from bot.engine.stores.locks import ERASURES_KEY, CrossProcessLocks

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class KeyedLocks(Generic[K]):
    """One asyncio lock per key, dropped as soon as nobody holds or waits for it (not re-entrant)."""

    def __init__(self) -> None:
        self._locks: dict[K, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: K) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)


class BoundedDict(OrderedDict, Generic[K, V]):
    """A dict that forgets its least recently set keys past ``max_keys``."""

    def __init__(self, max_keys: int = 10_000) -> None:
        super().__init__()
        self.max_keys = max_keys

    def __setitem__(self, key: K, value: V) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.max_keys:
            self.popitem(last=False)


class RateLimiter(Generic[K]):
    """At most ``limit`` events per key in any ``window`` seconds (a sliding window); ``limit`` 0 is none."""

    def __init__(self, limit: int, window: float, *, max_keys: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.window, self.clock = limit, window, clock
        self._events: BoundedDict[K, deque[float]] = BoundedDict(max_keys)

    def retry_after(self, key: K) -> float:
        """Seconds until ``key`` may act again (0: it may now, and the event is counted)."""
        if self.limit <= 0:
            return 0.0
        now = self.clock()
        events = self._events.get(key) or deque()
        while events and events[0] <= now - self.window:
            events.popleft()
        if len(events) >= self.limit:
            self._events[key] = events
            return events[0] + self.window - now
        events.append(now)
        self._events[key] = events
        return 0.0

    def __len__(self) -> int:
        return len(self._events)


@dataclass(eq=False)
class _Ticket:
    user_id: str
    erased: bool = False


class InflightTurns:
    """The turns being answered right now, per person: an erasure marks them so none is learned from.

    Only turns in flight are held (each is removed when it ends), so the map is bounded by concurrency,
    not by how many people ever spoke or were erased.
    """

    def __init__(self) -> None:
        self._by_user: dict[str, set[_Ticket]] = {}
        self._erasing: dict[str, int] = {}  # people being erased right now (how many erasures of each)

    def open(self, user_id: str) -> _Ticket:
        """A ticket for a turn starting now: marked already when the person is being erased."""
        ticket = _Ticket(user_id, erased=user_id in self._erasing)
        self._by_user.setdefault(user_id, set()).add(ticket)
        return ticket

    @contextmanager
    def erasing(self, user_id: str) -> Iterator[None]:
        """While a person is erased: their turns in flight, and every turn of theirs that starts meanwhile,
        are marked (answered without memories, then neither kept nor learned from)."""
        self._erasing[user_id] = self._erasing.get(user_id, 0) + 1
        self.mark_erased(user_id)
        try:
            yield
        finally:
            left = self._erasing.pop(user_id) - 1
            if left:
                self._erasing[user_id] = left

    async def settled(self, user_id: str, *, most: float) -> None:
        """Wait (at most ``most`` seconds) until none of the person's turns marked by an erasure is in flight.

        A turn marked while it runs stores its messages as it ends, then takes them back out
        (``TurnRunner._forget_erased``); a wipe waits for that before its compaction, so no file holds them
        after "Done". Turns in other processes owe a compaction of their own instead.
        """
        deadline = asyncio.get_running_loop().time() + most
        # Those marked by now only: a person who goes on talking would otherwise hold the erasure lock (their
        # later turns pay their own compaction debt).
        marked = [t for t in self._by_user.get(user_id, ()) if t.erased]
        while any(t in self._by_user.get(user_id, ()) for t in marked):
            if asyncio.get_running_loop().time() >= deadline:
                log.warning("an erasure stopped waiting for a turn of user %s after %.0f s; that turn's own "
                            "removal compacts later", user_id, most)
                return
            await asyncio.sleep(0.05)

    def close(self, ticket: _Ticket) -> None:
        tickets = self._by_user.get(ticket.user_id)
        if tickets is not None:
            tickets.discard(ticket)
            if not tickets:
                del self._by_user[ticket.user_id]

    def mark_erased(self, user_id: str) -> None:
        for ticket in self._by_user.get(user_id, ()):
            ticket.erased = True

    def __len__(self) -> int:
        return sum(len(t) for t in self._by_user.values())


Hold = Callable[[str], AbstractAsyncContextManager]


class Locks:
    """Every lock the engine takes: in-process first, then storage's cross-process half."""

    def __init__(self, shared: CrossProcessLocks) -> None:
        self.shared = shared
        self._channels: KeyedLocks[str] = KeyedLocks()
        self._people: KeyedLocks[str] = KeyedLocks()
        self._erasures = asyncio.Lock()

    @asynccontextmanager
    async def channel(self, thread_id: str) -> AsyncIterator[None]:
        """One turn of a channel at a time, here and in every process sharing the database."""
        async with self._channels.hold(thread_id), self.shared.channel(thread_id):
            yield

    @asynccontextmanager
    async def person(self, user_id: str, *, kind: str, wait: bool = True) -> AsyncIterator[bool]:
        """One piece of work on a person at a time; yields whether the claim was granted."""
        async with self._people.hold(user_id), self.shared.person(user_id, kind=kind, wait=wait) as held:
            yield held

    async def erasing_elsewhere(self, user_ids: Iterable[str]) -> set[str]:
        """Which of these people an erasure holds now in any process (empty when the database cannot say:
        the turn then goes on as before, and the inbox still refuses their rows during such an erasure)."""
        try:
            return await self.shared.erasing(user_ids)
        except Exception as exc:  # noqa: BLE001 - a check, not the turn
            log.debug("could not ask which people are being erased: %r", exc)
            return set()

    @asynccontextmanager
    async def erasures(self) -> AsyncIterator[None]:
        """One erasure at a time over the whole database: the global order that makes erasures deadlock-free.

        An erasure holds its person and then, one by one, the people whose data quotes them; it cannot know
        them all up front. Two erasures doing that at once could each hold a person the other needs. Taken
        before any person, this lock means at most one erasure holds people at all, here or in another
        process; turns and extractions hold at most one person and never wait for a second while holding it.
        """
        async with self._erasures, self.shared.channel(ERASURES_KEY):
            yield


class Holds:
    """The holds an erasure keeps on people: re-entrant within one task.

    ``hold(user)`` keeps the person's extraction stopped (here and, on a shared database, in every process)
    while their data changes. An erasure holding a person may reach them again (a deleted message's author,
    quotes in their own turns) without waiting for itself, and without claiming the cross-process lease a
    second time.
    """

    def __init__(self, hold: Hold | None = None, light: Hold | None = None) -> None:
        self._hold: Hold = hold or (lambda _user: nullcontext())
        self._light: Hold = light or self._hold
        self._holding: dict[str, asyncio.Task | None] = {}  # person -> the task holding them through us

    @asynccontextmanager
    async def hold(self, user: str, *, light: bool = False) -> AsyncIterator[None]:
        """Hold ``user`` for the duration (a no-op if this task holds them already).

        ``light``: stop their extraction only, without refusing their new turns (a deleted message: the
        person goes on talking and being learned from meanwhile; see ``ExtractionScheduler.hold``).
        """
        me = asyncio.current_task()
        if me is not None and self._holding.get(user) is me:
            yield
            return
        async with (self._light if light else self._hold)(user):
            self._holding[user] = me
            try:
                yield
            finally:
                self._holding.pop(user, None)
