"""Exclusion across processes: one turn of a channel at a time, one piece of work on a person at a time.

The engine keeps its own in-process locks (``bot.engine.concurrency`` is their one home) and asks storage for
the cross-process half. An embedded backend has one process, so its half is a no-op; a shared database
(PostgreSQL) implements it with an advisory lock per channel and an expiring claim (a lease) per person.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncContextManager, AsyncIterator, Iterable, Protocol

EXTRACTION = "extraction"
ERASURE = "erasure"
ERASURES_KEY = "erasure:*"  # the cross-process lock every erasure takes first (no channel ID looks like it)


class ClaimLost(Exception):
    """This process's claim on a person ran out (it stalled past its lease) and another process took the
    work over: nothing of this run was written, and the other process does it."""


class ErasureLockLost(ConnectionError):
    """The global erasure lock went with its database connection while this erasure waited for a person:
    another process's erasure may hold that person and wait for one of ours, so this one gives way (its
    holds are released, its journal row stays and it is resumed later).

    A ``ConnectionError``, so every caller reads it as the outage it is: an erasure that gave way before
    its journal row was written (a deletion, an edit: their holds come first) has nothing to resume it,
    and Discord sends the event once; the events cog tries such an outage again (``_retry_later``)."""


class CrossProcessLocks(Protocol):
    #: How often a process looks for work other processes left behind (a process that died with turns
    #: pending); None for a backend only one process uses.
    sweep_seconds: float | None

    def channel(self, thread_id: str) -> AsyncContextManager[None]:
        """Held for a whole turn: no other process runs a turn of this channel meanwhile."""
        ...

    def person(self, user_id: str, *, kind: str, wait: bool) -> AsyncContextManager[bool]:
        """Claim exclusive work on a person (``EXTRACTION`` or ``ERASURE``); yields whether it was granted.

        With ``wait`` False a claim held elsewhere yields False at once (try again later); with ``wait``
        True it waits until the holder is done or its lease ran out. While an ``ERASURE`` claim is held no
        process records new turns of that person. A store write made under a claim whose lease has run out
        raises :class:`ClaimLost` and writes nothing: an ``abatch`` from the task holding the claim (the
        store's ``aput`` queues to a task of LangGraph's own, which the claim does not reach).

        Neither lock excludes work of the same process: storage grants a nested ``channel`` at once (and
        on PostgreSQL a nested ``person`` claim replaces the outer one). The engine's in-process locks
        come first (``bot.engine.concurrency``). A cancelled task leaves nothing held.
        """
        ...

    async def still_held(self) -> None:
        """Raise :class:`ClaimLost` unless every person claim the calling task holds is still its own and
        unexpired. A wipe asks before "Done": its last steps make no fenced write (it waits for turns), and a
        lease that ran out meanwhile let other processes treat the person as not being erased."""
        ...

    async def erasing(self, user_ids: Iterable[str]) -> set[str]:
        """Which of these people an erasure holds right now, in any process (an ``ERASURE`` claim).

        A turn asks as it starts and ends: a turn of someone being erased in another process is kept out
        of the thread, as one in the erasing process is (``InflightTurns``).
        """
        ...


class SingleProcessLocks:
    """The cross-process half for a backend only one process opens (SQLite): nothing to exclude."""

    sweep_seconds: float | None = None

    @asynccontextmanager
    async def channel(self, thread_id: str) -> AsyncIterator[None]:
        yield

    @asynccontextmanager
    async def person(self, user_id: str, *, kind: str, wait: bool) -> AsyncIterator[bool]:
        yield True

    async def still_held(self) -> None:
        return None  # nothing to lose: no lease

    async def erasing(self, user_ids: Iterable[str]) -> set[str]:
        return set()  # one process: its own erasures mark its turns in memory
