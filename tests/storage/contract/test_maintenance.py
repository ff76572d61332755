"""Housekeeping the engine asks storage for (``bot.engine.stores.maintenance``): pruning a thread's old
checkpoints, erasing a person's rows from the engine's own stores, and compacting so erased content is
unrecoverable from the live database."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from bot.storage import open_storage
from bot.storage.sqlite import maintenance as sqlite_maintenance
from tests.conftest import make_settings
from tests.storage.contract.conftest import memories_exist, record


async def checkpoint(storage, thread_id: str, n: int) -> str:
    """Save a checkpoint of ``thread_id`` (as a turn's graph does) and return its ID."""
    cp = empty_checkpoint()
    cp["channel_values"] = {"summary": f"turn {n}"}
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    saved = await storage.checkpointer.aput(config, cp, {"source": "loop", "step": n}, {})
    return saved["configurable"]["checkpoint_id"]


async def checkpoint_ids(storage, thread_id: str) -> list[str]:
    return [t.config["configurable"]["checkpoint_id"]
            async for t in storage.checkpointer.alist({"configurable": {"thread_id": thread_id}})]


async def test_erasing_a_persons_rows_takes_their_turns_and_vectors_only(storage):
    for n in range(3):
        await record(storage, "t", "42", n, guild="900")
    await record(storage, "t2", "42", 9, guild="901")
    await record(storage, "t", "7", 5)
    await memories_exist(storage, "42", "k")
    await memories_exist(storage, "7", "k")
    await storage.vectors.put("42", [("k", "d", b"\x01")])
    await storage.vectors.put("7", [("k", "d", b"\x01")])
    assert await storage.maintenance.erase_person_rows("42", guild_id="900") == 3
    assert {(p.user_id, p.thread_id) for p in await storage.inbox.pending()} == {("42", "t2"), ("7", "t")}
    assert await storage.maintenance.erase_person_rows("42") == 1
    assert [p.user_id for p in await storage.inbox.pending()] == ["7"]
    assert await storage.vectors.get("42") == {} and await storage.vectors.get("7") != {}
    await storage.maintenance.compact()
    await storage.maintenance.prune_thread("no-such-thread")  # a no-op, not an error


async def test_erased_rows_are_gone_from_the_tables_context_rows_included(storage, raw):
    await record(storage, "t", "42", 0)
    _, turns = await storage.inbox.batch("t", "42", context=0)
    await storage.inbox.mark_extracted("t", [t.id for t in turns])  # kept as context: not pending
    await record(storage, "t", "42", 1)
    await memories_exist(storage, "42", "k")
    await storage.vectors.put("42", [("k", "d", b"\x01")])
    assert await storage.maintenance.erase_person_rows("42") == 1  # what it counts: the pending turns
    assert await raw.count("embeddings", "user_id = ?", ("42",)) == 0
    assert await raw.count("inbox", "user_id = ? AND human = ?", ("42", "h1")) == 0
    assert await storage.maintenance.erase_person_rows("42") == 0  # a retried step finds nothing


async def test_pruning_keeps_only_the_latest_checkpoint_of_that_thread(storage):
    ids = [await checkpoint(storage, "t", n) for n in range(3)]
    others = [await checkpoint(storage, "u", n) for n in range(2)]
    assert sorted(await checkpoint_ids(storage, "t")) == sorted(ids)
    await storage.maintenance.prune_thread("t")
    assert await checkpoint_ids(storage, "t") == [ids[-1]]
    latest = await storage.checkpointer.aget_tuple({"configurable": {"thread_id": "t"}})
    assert latest.checkpoint["channel_values"]["summary"] == "turn 2"  # the state itself is intact
    assert sorted(await checkpoint_ids(storage, "u")) == sorted(others)  # another thread is untouched
    await storage.maintenance.prune_thread("t")  # again: still the one
    assert await checkpoint_ids(storage, "t") == [ids[-1]]


async def test_compaction_leaves_the_erased_words_in_no_file_or_dead_tuple(storage, backend, raw, data_dir):
    canary = "zebra-canary-7731"
    await storage.inbox.record(thread_id="t", user_id="42", author="a", human=canary, ai="ok", origin={})
    await storage.vectors.put("42", [("k", "d", canary.encode())])
    await storage.maintenance.erase_person_rows("42")
    await storage.maintenance.compact()
    if backend.name == "sqlite":
        ledger = b"".join(p.read_bytes() for p in data_dir.glob("ledger.sqlite*"))
        assert canary.encode() not in ledger
        assert (data_dir / "ledger.sqlite-wal").stat().st_size == 0  # the log was truncated, and checked
    else:
        from tests.storage.test_postgres import page_bytes  # every tuple's bytes, live or dead

        assert canary.encode() not in await page_bytes(backend.database_url, ("bot_inbox", "bot_embeddings"))


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


async def test_conversations_are_listed_by_the_start_of_their_name_without_reading_them(storage):
    for thread_id in ("ask:902:802", "ask:902:803", "ask:9020:802", "902", "ask:901:802"):
        await checkpoint(storage, thread_id, 1)
    await checkpoint(storage, "ask:902:802", 2)  # two checkpoints, one name
    assert await storage.maintenance.conversations_named("ask:902:") == ["ask:902:802", "ask:902:803"]
    assert await storage.maintenance.conversations_named("ask:%") == []  # a prefix, not a pattern
    assert await storage.maintenance.conversations_named("nothing:") == []
