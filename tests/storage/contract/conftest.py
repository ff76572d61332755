"""Fixtures for the storage contract: every test runs once on SQLite files and once on a fresh PostgreSQL
database (``backend`` in ``tests/conftest.py``), against the protocols in ``bot/engine/stores/``.

- ``storage``: an opened :class:`~bot.engine.stores.Storage`, as the bot opens it.
- ``second_process``: another, independently opened storage on the same database, for what one process
  must see of another's work. SQLite lets one writer process open a data directory at a time
  (``bot/storage/sqlite/lock.py``), so there the fixture exists only for tests marked
  ``second_process_reads_only`` (it opens read-side, as ``python -m bot stats`` does) and skips otherwise.
- ``raw``: direct access to the backend's tables, for checks no protocol method can make ("the row is
  gone", "no advisory lock is held"). Tests may use SQL through it; nothing else outside ``bot/storage/``.
"""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any, Awaitable, Callable

import pytest

from bot.storage import open_storage
from tests.conftest import Backend, make_settings

SINGLE_WRITER = ("SQLite: one writer process per data directory (bot/storage/sqlite/lock.py); "
                 "a second process may only read")

#: The protocol's names for tables -> (SQLite ledger table, PostgreSQL table).
TABLES = {
    "inbox": ("memory_inbox", "bot_inbox"),
    "prefs": ("prefs", "bot_prefs"),
    "embeddings": ("embeddings", "bot_embeddings"),
    "usage": ("usage", "bot_usage"),
    "removed_guilds": ("removed_guilds", "bot_removed_guilds"),
    "guild_settings": ("guild_settings", "bot_guild_settings"),
    "erasures": ("erasures", "bot_erasures"),
}


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "second_process_reads_only: the test's second_process only reads, "
                                       "so it runs on SQLite too (opened without the writer lock)")


class Raw:
    """SQL straight to a backend's tables, on a connection of its own (never one the storage uses).

    Write ``?`` placeholders; they become ``%s`` on PostgreSQL. ``db`` picks the SQLite file (``ledger``,
    ``memories``, ``conversations``); PostgreSQL has one database.
    """

    def __init__(self, backend: Backend, data_dir) -> None:
        self.backend = backend
        self.name = backend.name
        self.data_dir = data_dir

    def table(self, name: str) -> str:
        return TABLES[name][0 if self.name == "sqlite" else 1]

    async def rows(self, sql: str, params: tuple = (), *, db: str = "ledger") -> list[tuple]:
        if self.name == "sqlite":
            return await asyncio.to_thread(self._sqlite, sql, params, db)
        import psycopg

        async with await psycopg.AsyncConnection.connect(self.backend.database_url, autocommit=True) as conn:
            cur = await conn.execute(sql.replace("?", "%s"), params)
            return [tuple(r) for r in await cur.fetchall()] if cur.description else []

    async def execute(self, sql: str, params: tuple = (), *, db: str = "ledger") -> None:
        await self.rows(sql, params, db=db)

    async def count(self, table: str, where: str = "1=1", params: tuple = ()) -> int:
        return (await self.rows(f"SELECT COUNT(*) FROM {self.table(table)} WHERE {where}", params))[0][0]

    def _sqlite(self, sql: str, params: tuple, db: str) -> list[tuple]:
        conn = sqlite3.connect(self.data_dir / f"{db}.sqlite", isolation_level=None, timeout=30)
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    async def advisory_locks(self) -> list[tuple]:
        """PostgreSQL: every advisory lock granted in this test's database, by any session."""
        return await self.rows(
            "SELECT classid, objid, pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")

    async def can_take_advisory(self, classid: int, key: str) -> bool:
        """PostgreSQL: whether another session can take (and then gives back) the lock ``(classid, hashtext(key))``."""
        import psycopg

        async with await psycopg.AsyncConnection.connect(self.backend.database_url, autocommit=True) as conn:
            got = (await (await conn.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", (classid, key))).fetchone())[0]
            if got:
                await conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (classid, key))
            return got


@pytest.fixture
def data_dir(tmp_path):
    return tmp_path / "data"


@pytest.fixture
def open_again(data_dir, backend) -> Callable[..., Any]:
    """Open the same database once more (a restart, or another process): ``async with open_again() as s``."""

    def opener(*, writer: bool = True, **sections: dict):
        return open_storage(make_settings(data_dir, backend, **sections), writer=writer)

    return opener


@pytest.fixture
async def storage(settings):
    async with open_storage(settings) as opened:
        yield opened


@pytest.fixture
async def second_process(request, storage, backend, open_again):
    """A second storage on the database ``storage`` uses, opened independently (its own pool and locks)."""
    if backend.name == "sqlite":
        if request.node.get_closest_marker("second_process_reads_only") is None:
            pytest.skip(SINGLE_WRITER)
        async with open_again(writer=False) as reader:
            yield reader
        return
    async with open_again() as other:
        yield other


@pytest.fixture
def raw(backend, data_dir) -> Raw:
    return Raw(backend, data_dir)


@pytest.fixture
def postgres_only(backend) -> None:
    """For promises only a shared database can keep (several processes at once)."""
    if backend.name != "postgres":
        pytest.skip(SINGLE_WRITER)


@pytest.fixture
def holds_locks(backend) -> None:
    """For what a backend's lock half holds (and could leak): SQLite's holds nothing."""
    if backend.name != "postgres":
        pytest.skip("SQLite's cross-process half (SingleProcessLocks) holds nothing a cancel could leave behind;"
                    " its one lock, the data directory's, is tested without this fixture")


async def until(check: Callable[[], Awaitable[bool] | bool], *, what: str, timeout: float = 20.0) -> None:
    """Wait for a condition another task or process brings about; fail (naming it) if it never comes.

    The timeout only bounds a broken run: no test asserts how long anything took.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            pytest.fail(f"never happened: {what}")
        await asyncio.sleep(0.01)


ORIGIN = {"guild_id": "900", "channel_id": "7", "message_id": "70"}


async def record(storage, thread: str, user: str, n: int, guild: str = "900", message: str | None = None) -> int:
    """Record turn ``n`` (``h{n}``/``a{n}``) of ``user`` in ``thread`` (Discord message ``message``, or ``70``)."""
    origin = {**ORIGIN, "guild_id": guild, **({"message_id": message} if message else {})}
    return await storage.inbox.record(thread_id=thread, user_id=user, author=user, human=f"h{n}", ai=f"a{n}",
                                      origin=origin)


async def memories_exist(storage, user: str, *keys: str) -> None:
    """Memories of ``user`` under ``keys`` in the store (a vector is kept only for a memory that exists)."""
    for key in keys:
        await storage.store.aput(("memories", user), key, {"content": f"memory {key}"}, index=False)
