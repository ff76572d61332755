"""The bot's own tables' access to the pool: one connection or one transaction at a time, the turn's
connection when a turn lends one (``scope.py``), and one retry when a connection turns out broken.

The pool does not test a connection with a query before handing it out (``connection.py``: that was a
round trip on every checkout); a connection the server closed while it sat in the pool is noticed without
one and replaced. What that cannot see (a server that failed over without closing its connections, a
connection cut while it was lent) fails its first statement: :class:`ConnectionLost`. A request marked
:func:`retried` then runs once more, on a fresh connection, before the caller sees the error.
"""

from __future__ import annotations

import functools
import logging
from contextlib import asynccontextmanager
from typing import AsyncIterator, Awaitable, Callable, Concatenate, ParamSpec, TypeVar

import psycopg
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from bot.storage.postgres.connection import Outages
from bot.storage.postgres.scope import borrowed

log = logging.getLogger(__name__)

Conn = psycopg.AsyncConnection[DictRow]
S = TypeVar("S")
P = ParamSpec("P")
T = TypeVar("T")


class ConnectionLost(psycopg.OperationalError):
    """The connection a request ran on broke under it (an outage, a restarted or failed-over server).

    An ``OperationalError`` like any outage; :func:`retried` requests run once more on a fresh connection.
    ``pool`` is where it came from: its other idle connections are likely gone too.
    """

    def __init__(self, message: str, pool: AsyncConnectionPool | None = None) -> None:
        super().__init__(message)
        self.pool = pool

    async def sweep(self) -> None:
        """Before the retry: test the pool's idle connections once (a round trip each, only now) and
        replace the dead ones, so the retry does not meet another connection the same failure broke."""
        if self.pool is not None:
            try:
                await self.pool.check()
            except Exception as exc:  # noqa: BLE001 - the retry says what is wrong, if anything is
                log.debug("checking the pool after a lost connection failed: %r", exc)


@asynccontextmanager
async def lent(pool: AsyncConnectionPool, outages: Outages) -> AsyncIterator[Conn]:
    """A connection for one request (see :func:`bot.storage.postgres.scope.borrowed`); a connection lost
    under the request raises :class:`ConnectionLost` and is reported as an outage."""
    conn = None
    try:
        async with borrowed(pool) as conn:
            yield conn
    except (PoolTimeout, ConnectionLost):
        raise  # busy, not down: the caller's request fails, the database is fine (or already converted)
    except psycopg.OperationalError as exc:
        if conn is None or conn.broken or conn.closed:
            outages.down(exc)
            if conn is not None:
                raise ConnectionLost(str(exc), pool) from exc
        raise


def retried(method: Callable[Concatenate[S, P], Awaitable[T]]) -> Callable[Concatenate[S, P], Awaitable[T]]:
    """Run the request once more when its connection was lost under it; a second loss reaches the caller.

    Only for requests that may run twice: reads, and writes that change nothing the second time (upserts
    of the same values) or that say so themselves. A statement whose commit the server made but whose
    answer the cut connection lost is the one case a retry repeats (``docs/decisions.md``).
    """

    @functools.wraps(method)
    async def wrapper(self: S, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await method(self, *args, **kwargs)
        except ConnectionLost as exc:
            log.debug("%s: connection lost (%s); once more on a fresh connection", method.__qualname__,
                      str(exc).splitlines()[0] if str(exc) else "")
            await exc.sweep()
        return await method(self, *args, **kwargs)

    return wrapper


class PgDb:
    """Hands out pooled connections and reports a connection lost mid-request as an outage."""

    def __init__(self, pool: AsyncConnectionPool, outages: Outages) -> None:
        self.pool = pool
        self.outages = outages

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Conn]:
        async with lent(self.pool, self.outages) as conn:
            yield conn

    @asynccontextmanager
    async def tx(self) -> AsyncIterator[Conn]:
        """One transaction: all of it or none of it (the connection is in autocommit mode otherwise)."""
        async with self.connection() as conn:
            async with conn.transaction():
                yield conn
