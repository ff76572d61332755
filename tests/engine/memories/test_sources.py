"""The index of which message taught which memory (bot/engine/memory_sources.py), on every backend: a
deleted message finds the memories it taught even when nothing else holds the message any more."""

from __future__ import annotations

from bot.engine.memories.repository import MemoryRepository
from bot.engine.memories.sources import SOURCES_ROOT, sources_namespace
from bot.storage import open_storage
from tests.conftest import ScriptedChatModel, default_script, running_engine


def src(message_id: str, guild: str = "9") -> dict:
    return {"guild_id": guild, "channel_id": "c", "message_id": message_id, "source": "extraction"}


async def index_items(store) -> list[tuple[tuple, str, list]]:
    out, offset = [], 0
    while True:
        page = await store.asearch((SOURCES_ROOT,), limit=100, offset=offset)
        out += [(tuple(i.namespace), i.key, i.value.get("keys")) for i in page]
        if len(page) < 100:
            return sorted(out)
        offset += 100


async def test_the_index_follows_inserts_updates_deletes_and_imports(settings):
    async with open_storage(settings) as storage:
        repo = MemoryRepository(storage.store)
        k1 = (await repo.apply("5", inserts=[("Likes tea.", src("701"))])).inserted[0]
        assert await index_items(storage.store) == [(sources_namespace("701"), "5", [k1])]
        await repo.apply("5", updates=[(k1, "Likes green tea.", src("702"))])
        assert await index_items(storage.store) == [(sources_namespace("701"), "5", [k1]),
                                                    (sources_namespace("702"), "5", [k1])]
        await repo.delete("5", k1)
        assert await index_items(storage.store) == []  # bounded: only memories that exist
        await repo.restore("5", [{"id": "imported-1", "content": "Rows.", "origin": src("703"),
                                  "sources": [src("703")], "created_at": "2026-01-01T00:00:00+00:00",
                                  "updated_at": "2026-01-01T00:00:00+00:00"}], [])
        assert await index_items(storage.store) == [(sources_namespace("703"), "5", ["imported-1"])]


async def test_a_deleted_message_nothing_else_holds_takes_the_memories_it_taught(settings):
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        # Learned long ago: the message is in no stored conversation and no waiting turn.
        await engine.memories.apply("5", inserts=[("Ann keeps bees.", src("701")), ("Ann rows.", src("702"))])
        await engine.memories.apply("6", inserts=[("Bob sails.", src("703"))])
        both = (await engine.memories.apply("5", inserts=[("Ann likes honey.", src("704"), [src("704"), src("705")])])).inserted[0]
        assert await engine.storage.inbox.every_turn() == []
        result = await engine.changes.forget_messages("c", {"701"})
        assert result.memories == 1
        assert sorted(m.content for m in await engine.memories.list("5")) == ["Ann likes honey.", "Ann rows."]
        assert [m.content for m in await engine.memories.list("6")] == ["Bob sails."]
        # Two sources: deleting one keeps the memory (the other message still teaches it) ...
        assert (await engine.changes.forget_messages("c", {"704"})).memories == 0
        kept = await engine.memories.get("5", both)
        assert kept is not None and kept.live_message_ids() == {"705"}
        assert kept.places() == {"9"}  # the place stays, for a purge of that server
        # ... and deleting the other later takes it.
        assert (await engine.changes.forget_messages("c", {"705"})).memories == 1
        assert await engine.memories.get("5", both) is None
        assert [ns for ns, _, _ in await index_items(engine.storage.store)] == [sources_namespace("702"),
                                                                              sources_namespace("703")]
        assert await engine.storage.erasures.unfinished() == []


async def test_a_wipe_leaves_no_index_item_of_the_person(settings):
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.memories.apply("5", inserts=[("Ann keeps bees.", src("701")), ("Ann rows.", src("702", "dm"))])
        await engine.memories.apply("6", inserts=[("Bob sails.", src("703"))])
        await engine.erase_person("5", guild_id="9")  # a purge of one server: only what it taught goes
        assert [(ns, user) for ns, user, _ in await index_items(engine.storage.store)] == [
            (sources_namespace("702"), "5"), (sources_namespace("703"), "6")]
        await engine.erase_person("5")
        assert [(ns, user) for ns, user, _ in await index_items(engine.storage.store)] == [
            (sources_namespace("703"), "6")]
