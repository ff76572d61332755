"""Upgrading a database whose vector rows predate the recorded embedder: the column is added (SQLite's
``ADDED_COLUMNS``, PostgreSQL's migration 4), the old rows keep their vectors and count as another
embedder's, so the bot makes them again in the background instead of scoring them."""

from __future__ import annotations

import sqlite3

import psycopg

from bot.storage import open_storage
from tests.conftest import make_settings
from tests.storage.contract.conftest import memories_exist

OLD_SQLITE_TABLE = ("CREATE TABLE embeddings (user_id TEXT NOT NULL, memory_key TEXT NOT NULL, digest TEXT NOT NULL,"
                    " vector BLOB NOT NULL, PRIMARY KEY (user_id, memory_key))")


async def test_rows_from_before_the_embedder_column_survive_the_upgrade_as_another_embedders(tmp_path, backend):
    settings = make_settings(tmp_path / "data", backend)
    if backend.name == "sqlite":
        settings.bot.data_dir.mkdir(parents=True)
        conn = sqlite3.connect(settings.bot.data_dir / "ledger.sqlite")
        conn.execute(OLD_SQLITE_TABLE)
        conn.execute("INSERT INTO embeddings VALUES ('42', 'k', 'd', x'01')")
        conn.commit()
        conn.close()
    else:
        async with open_storage(settings):
            pass  # the current schema; then taken back to version 3, as an older bot left it
        async with await psycopg.AsyncConnection.connect(backend.database_url, autocommit=True) as conn:
            await conn.execute("ALTER TABLE bot_embeddings DROP COLUMN embedder")
            await conn.execute("UPDATE bot_meta SET value = '3' WHERE key = 'schema_version'")
            await conn.execute("INSERT INTO bot_embeddings VALUES ('42', 'k', 'd', '\\x01')")
    async with open_storage(settings) as storage:
        assert await storage.vectors.get("42") == {"k": ("d", b"\x01")}
        assert await storage.vectors.get("42", "LocalMiniLM") == {}  # never read as any embedder's
        assert await storage.vectors.people_with_others("LocalMiniLM") == ["42"]
        await memories_exist(storage, "42", "k")
        await storage.vectors.put("42", [("k", "d2", b"\x02")], embedder="LocalMiniLM")
        assert await storage.vectors.people_with_others("LocalMiniLM") == []


async def test_a_database_used_before_memories_were_indexed_is_complete_only_from_the_upgrade(tmp_path, backend):
    """The message index started recording memories' sources shown in a prompt (2026-12-07): on a database
    that was in use before, an older message may have reached a thread through a memory nobody recorded, so
    the index counts as complete only from the upgrade (older messages fall back to the full scan)."""
    import time

    settings = make_settings(tmp_path / "data", backend)
    async with open_storage(settings) as storage:
        assert await storage.reach.since() == 0  # new: complete from the start
    if backend.name == "sqlite":  # as the previous release left it
        conn = sqlite3.connect(settings.bot.data_dir / "ledger.sqlite")
        conn.execute("DELETE FROM meta WHERE key = 'reach_sources'")
        conn.commit()
        conn.close()
    else:
        async with await psycopg.AsyncConnection.connect(backend.database_url, autocommit=True) as conn:
            await conn.execute("UPDATE bot_meta SET value = '5' WHERE key = 'schema_version'")
    before = time.time()
    async with open_storage(settings) as storage:
        assert await storage.reach.since() >= before - 1
    async with open_storage(settings) as storage:  # once only
        since = await storage.reach.since()
    async with open_storage(settings) as storage:
        assert await storage.reach.since() == since
