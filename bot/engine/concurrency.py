"""Small in-memory structures keyed by person or channel that stay bounded however many there are.

A bot in many servers meets an unbounded number of people and channels; any map keyed by them must
forget. :class:`KeyedLocks` keeps a lock only while someone holds or waits for it, and
:class:`InflightTurns` a turn only while it is being answered; :class:`RateLimiter` and
:class:`BoundedDict` keep at most ``max_keys`` keys, forgetting the least recently touched.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from contextlib import asynccontextmanager
from typing import AsyncIterator, Callable, Generic, Hashable, TypeVar

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

    def __setitem__(self, key, value) -> None:
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

    def open(self, user_id: str) -> _Ticket:
        ticket = _Ticket(user_id)
        self._by_user.setdefault(user_id, set()).add(ticket)
        return ticket

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
