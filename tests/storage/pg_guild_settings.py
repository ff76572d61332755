"""Helpers for the PostgreSQL server-settings tests: a fresh database, and the pool the backend uses.

``TinyDb`` gives ``PostgresGuildSettings`` what the Postgres backend's ``PgDb`` gives it (pooled
autocommit connections with dict rows, and transactions), so these tests run before the rest of that
backend is on this branch. Run as a module it is one of the "processes" of the two-process test.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from contextlib import asynccontextmanager

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from bot.engine.guild_settings import GuildSettingsService, OperatorDefaults, channel_listed
from bot.storage.postgres.guild_settings import GUILD_SETTINGS_MIGRATION, PostgresGuildSettings

SERVER = "postgresql://postgres@127.0.0.1:5432/"


async def create_database() -> str:
    name = f"mnemo_ops_{uuid.uuid4().hex[:12]}"
    async with await psycopg.AsyncConnection.connect(SERVER + "postgres", autocommit=True) as conn:
        await conn.execute(f"CREATE DATABASE {name}")
    dsn = SERVER + name
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for statement in GUILD_SETTINGS_MIGRATION:
            await conn.execute(statement)
    return dsn


async def drop_database(dsn: str) -> None:
    name = dsn.rsplit("/", 1)[1]
    async with await psycopg.AsyncConnection.connect(SERVER + "postgres", autocommit=True) as conn:
        await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


class TinyDb:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    @asynccontextmanager
    async def connection(self):
        async with self.pool.connection() as conn:
            yield conn

    @asynccontextmanager
    async def tx(self):
        async with self.pool.connection() as conn:
            async with conn.transaction():
                yield conn


@asynccontextmanager
async def opened(dsn: str):
    """A started store over its own pool, like one bot process has."""
    pool = AsyncConnectionPool(dsn, min_size=1, max_size=4, open=False,
                               kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row})
    await pool.open(wait=True)
    store = PostgresGuildSettings(TinyDb(pool), dsn)
    await store.start()
    try:
        yield store
    finally:
        await store.close()
        await pool.close()


async def _worker(dsn: str, name: str, count: int) -> None:
    """Add ``count`` channels to server 900, as admin ``name``, as fast as possible."""
    async with opened(dsn) as store:
        service = GuildSettingsService(store, OperatorDefaults())
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        sys.stdin.readline()  # start together
        for n in range(count):
            await service.change("900", channel_listed("respond_channels", f"{name}{n}", True), by=name)
    sys.stdout.write("done\n")


if __name__ == "__main__":
    asyncio.run(_worker(sys.argv[1], sys.argv[2], int(sys.argv[3])))
