"""The stores erasure needs: the journal, inbox redaction, usage retention, the scope preference, a
checked WAL truncation that waits out a reader, and one writer per SQLite data directory."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from bot.storage import StorageBusy, open_storage
from bot.storage.sqlite import maintenance as sqlite_maintenance
from tests.conftest import make_settings

ORIGIN = {"guild_id": "900", "channel_id": "7", "message_id": "70"}


async def test_the_erasure_journal_keeps_unfinished_jobs_across_reopening(settings):
    async with open_storage(settings) as storage:
        first = await storage.erasures.begin(kind="person", user_id="42", guild_id="900", actor="moderator",
                                             actor_id="1", quotes=b"k" * 16 + b"h" * 8)
        requested = await storage.erasures.begin(kind="person", user_id="43")
        await storage.erasures.set_quotes(requested, b"x" * 16)
    async with open_storage(settings) as storage:
        jobs = await storage.erasures.unfinished()
        assert [(j.id, j.user_id, j.guild_id, j.actor) for j in jobs] == [
            (first, "42", "900", "moderator"), (requested, "43", None, None)]
        assert jobs[0].quotes == b"k" * 16 + b"h" * 8 and jobs[1].quotes == b"x" * 16
        await storage.erasures.finish(first)
        assert [j.id for j in await storage.erasures.unfinished()] == [requested]


async def test_every_turn_and_rewrite_turns(storage):
    for n in range(3):
        await storage.inbox.record(thread_id="t", user_id=str(n), author="a", human=f"h{n}", ai=f"a{n}", origin=ORIGIN)
    turns = await storage.inbox.every_turn()
    assert [t.human for t in turns] == ["h0", "h1", "h2"]
    await storage.inbox.rewrite_turns({turns[1].id: ("[erased]", "ok [erased]")})
    assert [(t.human, t.ai) for t in await storage.inbox.every_turn()] == [
        ("h0", "a0"), ("[erased]", "ok [erased]"), ("h2", "a2")]


async def test_usage_older_than_the_cutoff_is_pruned_and_the_budget_query_is_indexed(storage, backend):
    await storage.usage.record("900", "42", 10, 5)
    if backend.name == "postgres":
        return await _postgres_usage_pruned_and_indexed(storage, backend)
    db = storage.maintenance._ledger.conn
    await db.execute("INSERT INTO usage (guild_id, user_id, day, calls, prompt_tokens, completion_tokens)"
                     " VALUES ('900', '42', '2020-01-01', 1, 100, 100)")
    assert await storage.usage.prune("2021-01-01") == 1
    assert await storage.usage.tokens_today("900") == 15
    cur = await db.execute("EXPLAIN QUERY PLAN SELECT SUM(prompt_tokens) FROM usage WHERE guild_id=? AND day=?",
                           ("900", "2026-01-01"))
    plan = " ".join(str(row[-1]) for row in await cur.fetchall())
    assert "usage_guild_day" in plan, plan


async def _postgres_usage_pruned_and_indexed(storage, backend) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(backend.database_url, autocommit=True) as conn:
        await conn.execute("INSERT INTO bot_usage (guild_id, user_id, day, calls, prompt_tokens, completion_tokens)"
                           " VALUES ('900', '42', '2020-01-01', 1, 100, 100)")
        assert await storage.usage.prune("2021-01-01") == 1
        assert await storage.usage.tokens_today("900") == 15
        await conn.execute("SET enable_seqscan = off")  # a tiny table: ask whether an index serves the query
        cur = await conn.execute("EXPLAIN SELECT SUM(prompt_tokens) FROM bot_usage WHERE guild_id = %s AND day = %s",
                                 ("900", "2026-01-01"))
        plan = " ".join(row[0] for row in await cur.fetchall())
        assert "bot_usage_guild_day" in plan or "bot_usage_pkey" in plan, plan


async def test_the_scope_preference_round_trips(storage):
    assert (await storage.prefs.get("42")).scope is None
    assert (await storage.prefs.set("42", scope="global")).scope == "global"


async def test_a_wal_truncation_blocked_by_a_reader_is_retried_then_checked(tmp_path, monkeypatch):
    settings = make_settings(tmp_path / "data")  # SQLite's write-ahead log: this backend only
    monkeypatch.setattr(sqlite_maintenance, "TRUNCATE_ATTEMPTS", 3)
    async with open_storage(settings) as storage:
        await storage.store.aput(("memories", "42"), "k", {"content": "text"})
        reader = sqlite3.connect(settings.bot.data_dir / "memories.sqlite", isolation_level=None)
        reader.execute("BEGIN")
        reader.execute("SELECT COUNT(*) FROM store").fetchall()  # holds a snapshot: the WAL cannot be reset
        await storage.store.aput(("memories", "42"), "k2", {"content": "more text"})
        with pytest.raises(sqlite_maintenance.CompactionIncomplete):
            await storage.maintenance.compact()

        async def release() -> None:
            await asyncio.sleep(0.1)
            reader.execute("COMMIT")

        monkeypatch.setattr(sqlite_maintenance, "TRUNCATE_ATTEMPTS", 8)
        await asyncio.gather(release(), storage.maintenance.compact())  # retried until the reader is gone
        reader.close()
        assert (settings.bot.data_dir / "memories.sqlite-wal").stat().st_size == 0


async def test_a_second_writer_on_the_same_data_directory_is_refused(tmp_path):
    """SQLite only: PostgreSQL is made for several processes."""
    settings = make_settings(tmp_path / "data")
    async with open_storage(settings):
        with pytest.raises(StorageBusy, match="already using the data directory"):
            async with open_storage(settings):
                pass
        async with open_storage(settings, writer=False) as reader:  # reading beside it is fine
            assert await reader.erasures.unfinished() == []
    async with open_storage(settings):  # released on close
        pass
