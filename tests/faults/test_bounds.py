"""Bounds: a per-person cap on memories and a rate limit on remember/import, through real interactions;
extraction at the cap drops the least recently used memory it learned, never one the person wrote."""

from __future__ import annotations

import json

from bot.engine.learning.extraction import TurnText, WriteRequest
from bot.engine.memories.records import Actor
from tests.cogs.conftest import ALICE, GENERAL, rig
from tests.cogs.test_memories import seed
from tests.cogs.test_memory_controls import import_file
from tests.conftest import (
    ScriptedChatModel,
    default_script,
    make_settings,
    record_figure,
    running_engine,
)


async def test_remember_and_import_past_the_cap_are_refused_and_change_nothing(tmp_path):
    async with rig(tmp_path, memory={"max_per_person": 3}) as r:
        await seed(r, ALICE, ["one", "two"])
        export = json.loads((await r.h.invoke_slash("memories export", user=ALICE, channel_id=GENERAL))[-1].files[0].data)
        ok = await r.h.invoke_slash("memories remember", user=ALICE, channel_id=GENERAL, options={"text": "three"})
        assert "I'll remember that" in ok[-1].content
        inputs = 0
        for text in ("four", "five", "x" * 2000):
            res = await r.h.invoke_slash("memories remember", user=ALICE, channel_id=GENERAL, options={"text": text})
            assert "the most I keep for one person" in res[-1].content and res[-1].ephemeral
            inputs += 1
        bigger = dict(export, memories=export["memories"] + [
            dict(export["memories"][0], id=f"0000000{i}-0000-7000-8000-000000000000") for i in range(3)])
        res = await import_file(r, ALICE, json.dumps(bigger).encode())
        assert "I keep at most 3" in res[-1].content and "Nothing was changed" in res[-1].content
        inputs += 1
        assert sorted(m.content for m in await r.engine.memories.list(str(ALICE["id"]))) == ["one", "three", "two"]
        # Re-importing your own export (same IDs) is not "more memories": it is allowed at the cap.
        res = await import_file(r, ALICE, json.dumps(export).encode())
        assert "Imported 2 memories" in res[-1].content
    record_figure("memory cap inputs", inputs, "all refused with the limit named, nothing stored past it")


async def test_remember_and_import_are_rate_limited_per_person(tmp_path):
    async with rig(tmp_path, limits={"memory_commands_per_hour": 2, "burst": 0}) as r:
        for text in ("a", "b"):
            res = await r.h.invoke_slash("memories remember", user=ALICE, channel_id=GENERAL, options={"text": text})
            assert "I'll remember that" in res[-1].content
        attempts = 0
        for text in ("c", "d", "e"):
            res = await r.h.invoke_slash("memories remember", user=ALICE, channel_id=GENERAL, options={"text": text})
            assert "try again in" in res[-1].content and "Nothing was changed" in res[-1].content
            attempts += 1
        assert len(await r.engine.memories.list(str(ALICE["id"]))) == 2
    record_figure("rate-limited remember attempts", attempts, "all refused past 2 an hour, nothing stored")


async def test_extraction_at_the_cap_drops_the_least_recently_used_learned_memory(tmp_path):
    settings = make_settings(tmp_path / "data", memory={"max_per_person": 3})
    place = {"guild_id": "1", "channel_id": "10", "message_id": "100", "source": "extraction"}
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        old = (await engine.memories.apply("7", inserts=[("Oldest learned fact", place)])).inserted[0]
        await engine.memories.apply("7", inserts=[("Newer learned fact", place)])
        await engine.memories.apply("7", inserts=[("Written by the person", dict(place, source="user"))])
        request = WriteRequest(user_id="7", speaker_name="Ann", origin=place,
                               new=[TurnText("7", "Ann", "I like sailing. I like rowing.", "nice", origin=place)])
        await engine.learn(request)
        contents = sorted(m.content for m in await engine.memories.list("7"))
        assert len(contents) == 3
        assert "Written by the person" in contents and "Oldest learned fact" not in contents
        assert {"I like sailing", "I like rowing"} & set(contents)
        assert [h.action for h in await engine.memories.history("7", old)][-1] == "deleted"


async def test_at_the_cap_a_memory_the_person_wrote_stays_after_extraction_patched_it(tmp_path):
    """Extraction patching a memory the person wrote makes its origin "extraction"; its hand source still
    says whose it is, and it is not dropped to make room. An imported one the bot learned can go: a
    restored backup must not stop all learning at the cap."""
    settings = make_settings(tmp_path / "data", memory={"max_per_person": 3})
    place = {"guild_id": "1", "channel_id": "10", "message_id": "100", "source": "extraction"}
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        theirs = await engine.memories.add("7", "Written by the person", dict(place, source="user"),
                                           actor=Actor("user", "7"))
        await engine.memories.apply("7", updates=[(theirs, "Written by the person, patched", place)])
        await engine.memories.apply("7", inserts=[("Learned fact", place)])
        imported = {**place, "message_id": "90", "imported": True}
        await engine.memories.apply("7", inserts=[("Imported fact", place, [imported])])
        request = WriteRequest(user_id="7", speaker_name="Ann", origin=place,
                               new=[TurnText("7", "Ann", "I like sailing.", "nice", origin=place)])
        await engine.learn(request)
        contents = sorted(m.content for m in await engine.memories.list("7"))
    assert "Written by the person, patched" in contents and "Imported fact" in contents
    assert "Learned fact" not in contents and len(contents) == 3  # the least recently used of those learned
