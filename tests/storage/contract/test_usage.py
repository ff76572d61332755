"""Token usage (``bot.engine.stores.usage``): counted per server, person and UTC day for the daily
budgets, summed for ``python -m bot stats``, and pruned by day."""

from __future__ import annotations

import asyncio

import pytest


async def test_usage_adds_up_per_day_server_and_person(storage):
    await storage.usage.record("900", "42", 100, 10)
    await storage.usage.record("900", "42", 50, 5)
    await storage.usage.record("900", "7", 1, 1)
    await storage.usage.record("dm", "42", 3, 3)
    assert await storage.usage.tokens_today("900") == 167
    assert await storage.usage.tokens_today("900", "42") == 165
    assert await storage.usage.tokens_today("dm", "42") == 6
    rows = await storage.usage.totals()
    assert (rows[0].guild_id, rows[0].user_id, rows[0].calls, rows[0].prompt_tokens) == ("900", "42", 2, 150)


async def test_nothing_used_is_zero(storage):
    assert await storage.usage.tokens_today("900") == 0
    assert await storage.usage.tokens_today("900", "42") == 0
    assert await storage.usage.totals() == []


async def test_totals_sum_every_day_biggest_first(storage, raw):
    await storage.usage.record("900", "7", 10, 10)
    await storage.usage.record("900", "42", 1, 1)
    await raw.execute(f"INSERT INTO {raw.table('usage')} (guild_id, user_id, day, calls, prompt_tokens,"
                      " completion_tokens) VALUES ('900', '42', '2020-01-01', 3, 100, 50)")
    rows = await storage.usage.totals()
    assert [(r.guild_id, r.user_id, r.calls, r.prompt_tokens, r.completion_tokens) for r in rows] == [
        ("900", "42", 4, 101, 51), ("900", "7", 1, 10, 10)]
    assert await storage.usage.tokens_today("900", "42") == 2  # an old day is not today


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


async def test_pruning_keeps_the_cutoff_day_and_returns_how_many_went(storage, raw):
    for day in ("2020-01-01", "2020-01-02", "2020-01-03"):
        await raw.execute(f"INSERT INTO {raw.table('usage')} (guild_id, user_id, day, calls, prompt_tokens,"
                          " completion_tokens) VALUES ('900', '42', ?, 1, 1, 1)", (day,))
    assert await storage.usage.prune("2020-01-03") == 2
    assert await storage.usage.prune("2020-01-03") == 0
    assert await raw.rows(f"SELECT day FROM {raw.table('usage')}") == [("2020-01-03",)]


async def test_two_processes_counting_at_once_lose_no_call(postgres_only, storage, second_process):
    await asyncio.gather(*(s.usage.record("900", "42", 1, 1) for s in (storage, second_process) for _ in range(20)))
    (row,) = await storage.usage.totals()
    assert (row.calls, row.prompt_tokens, row.completion_tokens) == (40, 40, 40)
    assert await second_process.usage.tokens_today("900", "42") == 80


@pytest.mark.second_process_reads_only
async def test_another_process_reads_the_counts(storage, second_process):
    """``python -m bot stats`` beside a running bot."""
    await storage.usage.record("900", "42", 2, 3)
    assert [(r.user_id, r.calls) for r in await second_process.usage.totals()] == [("42", 1)]
    assert await second_process.usage.tokens_today("900") == 5
