"""A turn's unit of work on PostgreSQL: one pooled connection lent to the turn while it works with storage.

Without it every store call checks a connection out of the pool and back (a dozen a turn). With it
(``PostgresScopes.turn``, entered by the engine around a turn) the first call checks one out and the
turn's later calls, the saver's and the store's included, run on that same connection; it goes back to
the pool when the turn waits on the model (``waiting``) and when the turn ends, so no connection is held
while nobody uses it and a process needs no more connections than turns doing storage work at once.

A call that finds the turn's connection in use by another call of the same turn (LangGraph writes
checkpoints in a task of its own, alongside the next node) waits for it: one turn never holds two
connections, so a pool smaller than the turns at once cannot deadlock with every turn holding one and
waiting for a second. A call nested inside the one using it (same task) takes a pool connection of its
own instead of waiting for itself; no storage call awaits another task's storage call while it holds a
connection, so no call waits for one that waits for it. Calls run one at a time on the connection, so a
transaction never takes in another call's statements.

A connection is lent again only when it is as the pool would hand it out: open, not broken, idle, outside
a transaction. One that is not (a statement cancelled half-way, a lost connection) goes back to the pool,
which resets or discards it, and the next call takes another. The scope lives in a context variable, so
the tasks a turn starts see it; after the turn it is closed and they are on their own again.
"""

from __future__ import annotations

import asyncio
import contextvars
from contextlib import asynccontextmanager
from typing import AsyncIterator

import psycopg
from psycopg import pq
from psycopg_pool import AsyncConnectionPool


def reusable(conn: psycopg.AsyncConnection) -> bool:
    """Whether a connection is as the pool would hand it out (and may be lent to the next call)."""
    return (not conn.closed and not conn.broken and conn.pgconn.status == pq.ConnStatus.OK
            and conn.info.transaction_status == pq.TransactionStatus.IDLE)


class TurnScope:
    """One turn's lent connection (see the module docstring); not shared between turns."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool
        self._conn: psycopg.AsyncConnection | None = None
        self._holder: asyncio.Task | None = None  # the task using the connection right now
        self._free = asyncio.Event()
        self._free.set()
        self.paused = 0
        self.open = True

    def lendable(self) -> bool:
        return self.open and not self.paused

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection]:
        """The turn's connection (checked out on first use), once the call using it is done; a pool
        connection of the call's own when the turn pauses or ends meanwhile, or when the call is nested
        in the one using it (the same task: it would wait for itself)."""
        me = asyncio.current_task()
        while self._holder is not None and self._holder is not me and self.lendable():
            await self._free.wait()
        if self._holder is not None or not self.lendable():
            async with self._pool.connection() as conn:
                yield conn
            return
        self._holder = me
        self._free.clear()
        try:
            if self._conn is None:
                self._conn = await self._pool.getconn()
            yield self._conn
        finally:
            self._holder = None
            self._free.set()
            if self._conn is not None and (not reusable(self._conn) or not self.lendable()):
                await self.give_back()

    async def give_back(self) -> None:
        """Return the connection to the pool (runs to its end even when the caller is cancelled)."""
        if self._holder is not None or self._conn is None:
            return
        conn, self._conn = self._conn, None
        await asyncio.shield(self._pool.putconn(conn))

    def stop_waiting(self) -> None:
        """The turn paused or ended: calls waiting for its connection take their own."""
        self._free.set()
        if self._holder is not None:
            self._free.clear()  # still in use; the waiters were woken and see the scope is not lendable


#: The unit of work the current task belongs to (set by ``PostgresScopes.turn``).
CURRENT_SCOPE: contextvars.ContextVar[TurnScope | None] = contextvars.ContextVar("mnemo_scope", default=None)


@asynccontextmanager
async def borrowed(pool: AsyncConnectionPool) -> AsyncIterator[psycopg.AsyncConnection]:
    """A connection for one call: the turn's when the call belongs to an open, unpaused turn, else one of
    the call's own from the pool."""
    scope = CURRENT_SCOPE.get()
    if scope is not None and scope.lendable():
        async with scope.connection() as conn:
            yield conn
        return
    async with pool.connection() as conn:
        yield conn


class PostgresScopes:
    """:class:`bot.engine.stores.TurnScopes` over the process's pool."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        outer = CURRENT_SCOPE.get()
        if outer is not None and outer.open:  # a nested unit of work joins the outer one
            yield
            return
        scope = TurnScope(self._pool)
        token = CURRENT_SCOPE.set(scope)
        try:
            yield
        finally:
            CURRENT_SCOPE.reset(token)
            scope.open = False
            scope.stop_waiting()
            await scope.give_back()  # a call still using it gives it back when it is done

    @asynccontextmanager
    async def waiting(self) -> AsyncIterator[None]:
        scope = CURRENT_SCOPE.get()
        if scope is None or not scope.open:
            yield
            return
        scope.paused += 1
        try:
            scope.stop_waiting()
            await scope.give_back()
            yield
        finally:
            scope.paused -= 1
