"""Every lock the engine takes, in one place: in-process first, then storage's cross-process half.

- ``channel(thread_id)``: a channel's turns run one at a time, in arrival order (an asyncio lock is FIFO),
  and, on a shared database, never at the same moment as a turn of that channel in another process.
- ``person(user_id, kind, wait)``: one piece of work on a person at a time (an extraction, an erasure),
  here and in every other process; see :class:`bot.engine.stores.locks.CrossProcessLocks`.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator

from bot.engine.concurrency import KeyedLocks
from bot.engine.stores.locks import CrossProcessLocks


class Locks:
    def __init__(self, shared: CrossProcessLocks) -> None:
        self.shared = shared
        self._channels: KeyedLocks[str] = KeyedLocks()
        self._people: KeyedLocks[str] = KeyedLocks()

    @asynccontextmanager
    async def channel(self, thread_id: str) -> AsyncIterator[None]:
        async with self._channels.hold(thread_id), self.shared.channel(thread_id):
            yield

    @asynccontextmanager
    async def person(self, user_id: str, *, kind: str, wait: bool = True) -> AsyncIterator[bool]:
        async with self._people.hold(user_id), self.shared.person(user_id, kind=kind, wait=wait) as held:
            yield held
