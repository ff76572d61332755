"""Storage: WAL files in the data dir, and a thread's footprint that stops growing with turns."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from langchain_core.messages import HumanMessage

from bot.engine.conversation.turn import PRUNE_EVERY
from bot.engine.state import Speaker
from tests.conftest import ScriptedChatModel, default_script, make_settings, running_engine

ADA = Speaker(user_id="42", name="Ada")


def db_bytes(data_dir: Path) -> int:
    return sum(p.stat().st_size for p in data_dir.glob("conversations.sqlite*"))


def count(path: Path, table: str) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


async def test_files_are_created_in_wal_mode(tmp_path):
    settings = make_settings(tmp_path / "fresh")
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("t", ADA, "hello")
    for name in ("conversations.sqlite", "memories.sqlite"):
        with sqlite3.connect(tmp_path / "fresh" / name) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental


async def test_old_checkpoints_are_pruned_and_the_file_stops_growing(tmp_path):
    settings = make_settings(tmp_path, conversation={"summarize_after_messages": 10, "keep_messages": 4})
    sizes = {}
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        for turn in range(1, 301):
            await engine.reply("t", ADA, f"turn {turn} " + "lorem ipsum " * 20)
            if turn in (100, 300):
                await engine.close()  # let the turn's tail (summarize, prune) finish
                sizes[turn] = db_bytes(settings.bot.data_dir)
        state = await engine.thread_state("t")
    conv = settings.bot.data_dir / "conversations.sqlite"
    assert count(conv, "checkpoints") <= 3 * PRUNE_EVERY  # a turn writes 2-3 checkpoints
    assert sizes[300] <= sizes[100] * 1.25, sizes
    # The pruned thread is intact: summary plus the last messages, and it still answers after a restart.
    assert state["summary"] and len(state["messages"]) <= 10
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        again = await engine.thread_state("t")
        assert [m.text for m in again["messages"]] == [m.text for m in state["messages"]]
        await engine.reply("t", ADA, "still there?")
        humans = [m.text for m in (await engine.thread_state("t"))["messages"] if isinstance(m, HumanMessage)]
        assert humans[-1] == "still there?"


async def test_a_start_up_cancelled_inside_a_migration_finishes_it_so_the_next_start_works(tmp_path, monkeypatch):
    """LangGraph's store adds a column, then records the migration, in two statements; a cancel between them
    (a shutdown during the very first start) left a column without its record, and every later start
    failed with "duplicate column name". The migrations now run to their end."""
    import asyncio

    import aiosqlite

    from bot.storage import open_storage

    settings = make_settings(tmp_path / "data")
    inside = asyncio.Event()
    real = aiosqlite.Connection.executescript

    def slow(self, sql):
        if "ADD COLUMN" not in sql:
            return real(self, sql)

        async def run():
            out = await real(self, sql)
            inside.set()  # the column is there; its record is not yet
            await asyncio.sleep(0.05)
            return out

        return run()

    monkeypatch.setattr(aiosqlite.Connection, "executescript", slow)

    async def start() -> None:
        async with open_storage(settings):
            await asyncio.Event().wait()

    first = asyncio.create_task(start())
    await asyncio.wait_for(inside.wait(), 10)
    first.cancel()
    await asyncio.wait((first,))
    assert first.cancelled()
    monkeypatch.undo()
    async with open_storage(settings) as storage:  # not "duplicate column name: expires_at"
        assert await storage.store.aget(("memories", "1"), "k") is None


async def test_a_cancelled_or_failed_memory_batch_leaves_nothing_half_done(tmp_path):
    """LangGraph's SQLite store commits in a ``finally``: a batch cancelled (a shutdown's flush out of time)
    or failing after its first statement kept that statement, e.g. an extraction's delete without its
    insert. Here the batch is rolled back, and the store keeps working after it."""
    import asyncio

    import pytest
    from langgraph.store.base import PutOp

    from bot.storage import open_storage

    ns = ("memories", "42")
    async with open_storage(make_settings(tmp_path / "data")) as storage:
        store = storage.store
        await store.aput(ns, "old", {"content": "old fact"})
        real = store._batch_put_ops
        entered, never = asyncio.Event(), asyncio.Event()

        async def halfway(ops, cur):
            await real(ops[:1], cur)  # the delete of "old" has run
            entered.set()
            await never.wait()

        store._batch_put_ops = halfway
        task = asyncio.create_task(store.abatch([PutOp(ns, "old", None), PutOp(ns, "new", {"content": "new fact"})]))
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

        async def failing(ops, cur):
            await real(ops[:1], cur)
            raise RuntimeError("the disk is full")

        store._batch_put_ops = failing
        with pytest.raises(RuntimeError):
            await store.abatch([PutOp(ns, "old", None), PutOp(ns, "new", {"content": "new fact"})])
        del store._batch_put_ops
        assert (await store.aget(ns, "old")).value == {"content": "old fact"}  # neither batch half-applied
        assert await store.aget(ns, "new") is None
        await store.abatch([PutOp(ns, "old", None), PutOp(ns, "new", {"content": "new fact"})])  # and it works
        assert await store.aget(ns, "old") is None and (await store.aget(ns, "new")).value == {"content": "new fact"}


async def _churned(path: Path, seed: int, canary: bytes):
    """A file shaped like the checkpoint tables after many turns: rows written, replaced and deleted, so
    pages split and are rebuilt; the ``canary`` rows are deleted at the end. Returns the open connection."""
    import random

    from bot.storage.sqlite.connection import connect

    rng = random.Random(seed)
    conn = await connect(path)
    await conn.execute("CREATE TABLE cp(thread TEXT, id TEXT, blob BLOB, PRIMARY KEY(thread, id))")
    await conn.execute("CREATE TABLE w(thread TEXT, id TEXT, task TEXT, v BLOB, PRIMARY KEY(thread, id, task))")
    for i in range(30):
        def body() -> bytes:
            return b"x" * rng.randint(50, 1200) + (canary if i < 10 else b"clean") + b"y" * rng.randint(0, 600)
        await conn.execute("INSERT OR REPLACE INTO cp VALUES(?,?,?)", (rng.choice("abc"), f"{i:08d}", body()))
        for _ in range(rng.randint(1, 3)):
            await conn.execute("INSERT OR REPLACE INTO w VALUES(?,?,?,?)",
                               (rng.choice("abc"), f"{i:08d}", f"{rng.getrandbits(64):x}", body()))
        if rng.random() < 0.3:
            await conn.execute("DELETE FROM cp WHERE id<? AND id>?", (f"{i:08d}", f"{i - 3:08d}"))
    await conn.execute("DELETE FROM cp WHERE id<'00000010'")
    await conn.execute("DELETE FROM w WHERE id<'00000010'")
    return conn


async def test_a_compaction_leaves_no_copy_of_deleted_rows_in_live_pages(tmp_path):
    """``secure_delete`` zeroes deleted cells and free pages, but not the unused gap inside a live page,
    where SQLite's page rebuilds leave stale copies of cells moved earlier: after enough churn a deleted
    row's bytes survived there, in the main file, past the WAL's truncation. The compaction rebuilds the
    file (VACUUM), so no deleted byte is anywhere."""
    from bot.storage.sqlite.maintenance import compact_file

    canary = b"CANARY_gap_7731"
    left = []
    for seed in range(60):
        path = tmp_path / f"churn{seed}.sqlite"
        conn = await _churned(path, seed, canary)
        try:
            await compact_file(conn, "churn", commit=False)
        finally:
            await conn.close()
        left += [seed for p in tmp_path.glob(f"churn{seed}.sqlite*") if canary in p.read_bytes()]
    assert left == []


async def test_pruning_returns_every_free_page_to_the_file_system(tmp_path):
    """``PRAGMA incremental_vacuum`` frees one page per step of its statement: run once through
    ``execute`` it freed a single page, and the file never shrank. It is run to the end."""
    from bot.storage.sqlite.connection import connect
    from bot.storage.sqlite.maintenance import vacuum_free_pages

    conn = await connect(tmp_path / "f.sqlite")
    try:
        await conn.execute("CREATE TABLE t(v BLOB)")
        for _ in range(300):
            await conn.execute("INSERT INTO t VALUES(?)", (b"z" * 4000,))
        await conn.execute("DELETE FROM t")
        cur = await conn.execute("PRAGMA freelist_count")
        assert (await cur.fetchone())[0] >= 300
        await vacuum_free_pages(conn)
        cur = await conn.execute("PRAGMA freelist_count")
        assert (await cur.fetchone())[0] == 0
    finally:
        await conn.close()
