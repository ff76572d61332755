"""Units of work: the storage a turn does shares what it can, and gives it back while the turn waits.

A turn reads and writes storage a dozen times (the thread's checkpoint, the person's memories and
settings, the answer, the learning queue, usage). A server database serves each of those from a pool of
connections; handing one out per call is most of what a turn costs there. So the engine marks where a
turn's storage work belongs together (``turn()``) and where it waits on something slow (``waiting()``: a
model call), and storage decides what to share: PostgreSQL lends the turn one pooled connection for
its storage work and takes it back for the model call, so a connection is never held while nobody uses it.
An embedded backend has nothing to share: its half is a no-op.

The engine never learns what a scope holds; it only says where one begins, pauses and ends.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncContextManager, AsyncIterator, Protocol


class TurnScopes(Protocol):
    def turn(self) -> AsyncContextManager[None]:
        """The storage work of this task, and of the tasks it starts meanwhile, is one unit of work.

        Work done after it ends (a task it started that outlives it) is on its own again. Nested scopes
        join the outer one. A cancelled scope leaves nothing held.
        """
        ...

    def waiting(self) -> AsyncContextManager[None]:
        """The current unit of work waits on something slow: storage gives back what it holds meanwhile."""
        ...


class NoScopes:
    """Scopes for a backend with nothing to share (SQLite: one connection per file, always open)."""

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        yield

    @asynccontextmanager
    async def waiting(self) -> AsyncIterator[None]:
        yield
