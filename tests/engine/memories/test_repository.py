"""MemoryRepository provenance: every message that contributed to a memory is kept, oldest first."""

from __future__ import annotations

import json

from bot.engine.erasure.memories import erase_memories
from bot.engine.memories.export import export_memories, parse_import
from bot.engine.memories.records import merge_sources
from bot.engine.memories.repository import MemoryRepository
from bot.storage import open_storage

A = {"guild_id": "1", "channel_id": "10", "message_id": "100"}
B = {"guild_id": "dm", "channel_id": "20", "message_id": "200"}
C = {"guild_id": "2", "channel_id": "30", "message_id": "300"}


def test_merge_sources_keeps_the_first_of_each_message_in_order():
    merged = merge_sources([A, B], [dict(A, source="extraction"), C])
    assert [s["message_id"] for s in merged] == ["100", "200", "300"]



def test_a_message_cited_again_keeps_its_place_and_takes_the_later_time():
    """Learned again after an edit: the source must read as learned after it (see steps._learned_after)."""
    old, again = dict(A, at="2026-01-01T10:00:00+00:00"), dict(A, at="2026-03-01T10:00:00+00:00")
    merged = merge_sources([old, B], [again])
    assert [(s["message_id"], s.get("at")) for s in merged] == [("100", again["at"]), ("200", None)]
    assert merge_sources([again], [old])[0]["at"] == again["at"]  # an earlier time does not move it back
    assert merge_sources([old], [dict(A, at="garbage")])[0]["at"] == old["at"]
    assert old["at"] == "2026-01-01T10:00:00+00:00"  # the inputs are not changed

async def test_a_patch_adds_its_messages_to_the_sources(settings):
    async with open_storage(settings) as storage:
        repo = MemoryRepository(storage.store)
        key = (await repo.apply("7", inserts=[("Likes tea.", A)])).inserted[0]
        await repo.apply("7", updates=[(key, "Likes green tea.", C, [B, C])])
        await repo.apply("7", updates=[(key, "Likes green tea a lot.", C)])  # C again: no duplicate
        memory = await repo.get("7", key)
        assert memory.origin == C
        assert [s["message_id"] for s in memory.sources] == ["100", "200", "300"]
        assert memory.places() == {"1", "dm", "2"}
        assert memory.message_ids() == {"100", "200", "300"}


async def test_sources_survive_an_export_and_import(settings):
    async with open_storage(settings) as storage:
        repo = MemoryRepository(storage.store)
        key = (await repo.apply("7", inserts=[("Plays chess.", A, [A, B])])).inserted[0]
        doc = export_memories("7", await repo.list("7"))
        await erase_memories(repo, "7")
        memories, history = parse_import(json.dumps(doc).encode(), "7")
        await repo.restore("7", memories, history)
        restored = await repo.get("7", key)
        assert [s["message_id"] for s in restored.sources] == ["100", "200"]


async def test_memories_written_before_sources_existed_report_their_origin(settings):
    async with open_storage(settings) as storage:
        from bot.engine.memories.records import namespace

        await storage.store.aput(namespace("7"), "old", {"content": "Old fact.", "origin": A}, index=False)
        memory = await MemoryRepository(storage.store).get("7", "old")
        assert memory.sources == (A,)


async def test_a_new_memory_is_dated_by_the_message_it_came_from_not_by_when_the_queue_got_to_it(settings):
    """Extraction can run hours after the message (a model outage, a restart): "when did ..." needs the day
    it was said. A source time that cannot be right (1970, the future) leaves the date at the write."""
    from datetime import datetime, timedelta, timezone

    now = datetime.now(timezone.utc)
    said = (now - timedelta(hours=9)).replace(microsecond=0)
    async with open_storage(settings) as storage:
        repo = MemoryRepository(storage.store)
        late, later = (await repo.apply("7", inserts=[
            ("Went camping at Lake Orta.", A, [dict(A, at=said.isoformat()), dict(B, at=(said + timedelta(hours=1)).isoformat())]),
            ("Bought a tent.", C, [dict(C, at=(said + timedelta(hours=2)).isoformat())]),
        ])).inserted
        unknown, future = (await repo.apply("7", inserts=[
            ("Has no dated source.", A, [dict(A, at="1970-01-01T00:00:00+00:00")]),
            ("Has a source from the future.", B, [dict(B, at=(now + timedelta(days=1)).isoformat())]),
        ])).inserted
        got = {k: await repo.get("7", k) for k in (late, later, unknown, future)}
        assert got[late].created_at == said  # the earliest of its messages
        assert got[later].created_at == said + timedelta(hours=2)
        assert got[late].updated_at >= now  # the write itself is still when it changed
        for k in (unknown, future):
            assert got[k].created_at >= now and got[k].created_at == got[k].updated_at
        assert [m.key for m in await repo.list("7")] == [late, later, unknown, future]  # oldest first


async def test_a_persons_memories_are_read_in_one_statement_so_a_write_between_pages_skips_none(settings):
    """Found in review 2026-12-07: pages of 500 by offset, ordered by last change, each its own statement:
    an extraction between two pages' reads moved a memory to the page already read (skipped) and doubled
    another. 1,200 memories are now one read."""
    async with open_storage(settings) as storage:
        repo = MemoryRepository(storage.store)
        await repo.apply("7", inserts=[(f"fact number {i}", A) for i in range(1200)])
        calls = []
        real = storage.store.asearch

        async def counted(*args, **kwargs):
            calls.append(kwargs.get("limit"))
            return await real(*args, **kwargs)

        storage.store.asearch = counted
        memories = await repo.list("7")
        assert len(calls) == 1 and len(memories) == len({m.key for m in memories}) == 1200
