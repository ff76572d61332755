"""A purge in server A removes what A contributed, over every source: mixed memories are cut back, and no
text A contributed stays in a memory or its history."""

from __future__ import annotations

import json

from bot.engine.erasure.memories import erase_memories, redact_quotes_in_memories
from bot.engine.erasure.quotes import QuoteRule
from bot.engine.memories.export import export_memories
from bot.engine.memories.records import Actor
from bot.engine.memories.repository import MemoryRepository
from bot.storage import open_storage

A = {"guild_id": "1", "channel_id": "10", "message_id": "100"}
A2 = {"guild_id": "1", "channel_id": "10", "message_id": "101"}
B = {"guild_id": "2", "channel_id": "20", "message_id": "200"}
B2 = {"guild_id": "2", "channel_id": "20", "message_id": "201"}


async def test_a_purge_deletes_what_came_from_the_server_and_cuts_mixed_memories_back(settings):
    async with open_storage(settings) as storage:
        repo = MemoryRepository(storage.store)
        only_a, only_b, b_then_a, a_then_b = (await repo.apply("7", inserts=[
            ("Likes tea (said in A)", A), ("Plays oboe", B), ("Has a dog", B), ("Runs marathons-in-A", A)])).inserted
        await repo.apply("7", updates=[(b_then_a, "Has a dog called secret-A-name", A2)])
        await repo.apply("7", updates=[(b_then_a, "Has a dog called secret-A-name, a beagle", B2)])
        await repo.apply("7", updates=[(a_then_b, "Runs marathons-in-A and swims", B2)])

        result = await erase_memories(repo, "7", guild_id="1", record=Actor("moderator", "99"))

        assert (result.deleted, result.reduced) == (2, 1)
        left = {m.key: m for m in await repo.list("7")}
        assert set(left) == {only_b, b_then_a}
        assert left[b_then_a].content == "Has a dog" and left[b_then_a].places() == {"2"}
        document = json.dumps(export_memories("7", list(left.values()), await repo.history("7")))
        for a_text in ("secret-A-name", "said in A", "marathons-in-A"):
            assert a_text not in document
        mod = [h for h in await repo.history("7") if h.actor == "moderator"]
        assert mod[0].origin == {"guild_id": "1", "erased": 2, "reduced": 1} and mod[0].before is None
        assert only_a not in document


async def test_quotes_in_other_peoples_memories_and_history_are_cut_out(settings):
    async with open_storage(settings) as storage:
        repo = MemoryRepository(storage.store)
        key = (await repo.apply("8", inserts=[("Bob heard that Ann adopted three grey ferrets", B)])).inserted[0]
        gone = (await repo.apply("8", inserts=[("adopted three grey ferrets", B)])).inserted[0]
        await repo.apply("7", inserts=[("Ann adopted three grey ferrets", B)])
        rule = QuoteRule.from_texts(["I adopted three grey ferrets last week"])
        assert await redact_quotes_in_memories(repo, rule, skip_user="7") == 2
        assert (await repo.get("8", key)).content == "Bob heard that Ann [erased]"
        assert await repo.get("8", gone) is None  # nothing but the quote was left
        assert not any("ferrets" in (h.after or "") for h in await repo.history("8"))
        assert (await repo.list("7"))[0].content == "Ann adopted three grey ferrets"  # the caller's own: untouched
