"""The bot's own tables' access to the pool: one connection or one transaction at a time."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator

import psycopg
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from bot.storage.postgres.connection import Outages

Conn = psycopg.AsyncConnection[DictRow]


class PgDb:
    """Hands out pooled connections and reports a connection lost mid-request as an outage."""

    def __init__(self, pool: AsyncConnectionPool, outages: Outages) -> None:
        self.pool = pool
        self.outages = outages

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Conn]:
        conn = None
        try:
            async with self.pool.connection() as conn:
                yield conn
        except PoolTimeout:
            raise  # busy, not down: the caller's request fails, the database is fine
        except psycopg.OperationalError as exc:
            if conn is None or conn.broken or conn.closed:
                self.outages.down(exc)
            raise

    @asynccontextmanager
    async def tx(self) -> AsyncIterator[Conn]:
        """One transaction: all of it or none of it (the connection is in autocommit mode otherwise)."""
        async with self.connection() as conn:
            async with conn.transaction():
                yield conn
