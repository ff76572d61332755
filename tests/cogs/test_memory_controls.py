"""Issue 6 through real interactions: teach, correct, forget, pause, private mode, reactions, history,
erasure that leaves no byte behind, and export/import round trips."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cogs.conftest import (
    ALICE,
    BOB,
    GENERAL,
    GUILD_ID,
    MOD,
    OTHER_CHANNEL,
    OTHER_GUILD,
    rig,
)
from tests.cogs.test_memories import button, click_erasure, seed
from tests.fakes import discord_harness as dh

BRAIN = "\N{BRAIN}"


def reactions(r) -> list:
    return r.h.calls_to("PUT", "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me")


async def chat(r, author: dict, text: str, channel_id: int = GENERAL, guild_id: int = GUILD_ID) -> dict:
    payload = r.mentioning(author, text, channel_id=channel_id, guild_id=guild_id)
    await r.h.send_message(payload)
    return payload


async def test_remember_edit_and_history_record_the_person_as_actor(r):
    res = await r.h.invoke_slash("memories remember", user=ALICE, channel_id=GENERAL, options={"text": "I am vegetarian"})
    assert res[-1].ephemeral and "I'll remember that" in res[-1].content
    (m,) = await r.engine.memories.list(str(ALICE["id"]))
    assert m.content == "I am vegetarian" and m.origin["source"] == "user"
    await r.h.invoke_slash("memories edit", user=ALICE, channel_id=GENERAL, options={"memory": m.short_id, "text": "I am vegan"})
    assert [x.content for x in await r.engine.memories.list(str(ALICE["id"]))] == ["I am vegan"]
    res = await r.h.invoke_slash("memories history", user=ALICE, channel_id=GENERAL, options={"memory": m.key})
    text = res[-1].embeds[0]["description"]
    assert "by you" in text and "created: I am vegetarian" in text and "changed from I am vegetarian to I am vegan" in text


async def test_edits_count_against_the_hourly_limit_and_an_unchanged_text_is_not_an_edit(tmp_path):
    """Each edit keeps the old text in the change log (read by every erasure) and takes the erasure lock:
    a script re-editing one memory grew both without end. Saying what it already says changes nothing."""
    async with rig(tmp_path, limits={"memory_commands_per_hour": 2}) as r:
        await r.h.invoke_slash("memories remember", user=ALICE, channel_id=GENERAL, options={"text": "I am vegetarian"})
        (m,) = await r.engine.memories.list(str(ALICE["id"]))
        res = await r.h.invoke_slash("memories edit", user=ALICE, channel_id=GENERAL,
                                     options={"memory": m.short_id, "text": " I am vegetarian "})
        assert "already says that" in res[-1].content
        assert len(await r.engine.memories.history(str(ALICE["id"]))) == 1  # only its creation
        res = await r.h.invoke_slash("memories edit", user=ALICE, channel_id=GENERAL,
                                     options={"memory": m.short_id, "text": "I am vegan"})
        assert "Updated" in res[-1].content
        res = await r.h.invoke_slash("memories edit", user=ALICE, channel_id=GENERAL,
                                     options={"memory": m.short_id, "text": "I eat fish"})
        assert res[-1].ephemeral and "changed memories 2 times in the last hour" in res[-1].content
        assert [x.content for x in await r.engine.memories.list(str(ALICE["id"]))] == ["I am vegan"]
        assert len(await r.engine.memories.history(str(ALICE["id"]))) == 2


async def test_forget_offers_matches_and_deletes_after_confirm(r):
    await seed(r, ALICE, ["Alice has a cat named Tom", "Alice likes jazz", "Alice feeds the cat at 7"])
    res = await r.h.invoke_slash("memories forget", user=ALICE, channel_id=GENERAL, options={"text": "my cat"})
    prompt = res[-1]
    assert "Forget these 2?" in prompt.content and "jazz" not in prompt.content
    done = await r.h.click(button(prompt, "Forget"), prompt.message, user=ALICE)
    assert "Forgotten: 2" in done[-1].content
    assert [m.content for m in await r.engine.memories.list(str(ALICE["id"]))] == ["Alice likes jazz"]


async def test_pause_stops_learning_while_replies_still_use_old_memories(r):
    await seed(r, ALICE, ["Alice likes tea"])
    await r.h.invoke_slash("memories pause", user=ALICE, channel_id=GENERAL)
    await chat(r, ALICE, "I like mountains")
    await r.engine.scheduler.flush()
    assert [m.content for m in await r.engine.memories.list(str(ALICE["id"]))] == ["Alice likes tea"]
    assert "Alice likes tea" in r.model.chat_calls[-1].system
    view = await r.h.invoke_slash("memories view", user=ALICE, channel_id=GENERAL)
    assert "**Learning:** paused" in view[-1].embeds[0]["description"]
    await r.h.invoke_slash("memories resume", user=ALICE, channel_id=GENERAL)
    await chat(r, ALICE, "I like rivers")
    await r.engine.scheduler.flush()
    assert "I like rivers" in [m.content for m in await r.engine.memories.list(str(ALICE["id"]))]


async def test_private_mode_keeps_memories_out_of_replies_and_persists(tmp_path):
    async with rig(tmp_path) as r:
        await seed(r, ALICE, ["Alice likes tea"])
        await r.h.invoke_slash("memories private", user=ALICE, channel_id=GENERAL, options={"enabled": True})
        await chat(r, ALICE, "what do I like?")
        assert "Alice likes tea" not in r.model.chat_calls[-1].system
        assert "asked you not to use remembered facts" in r.model.chat_calls[-1].system
    async with rig(tmp_path) as r:  # a restart: the setting is still there
        await chat(r, ALICE, "and now?")
        assert "Alice likes tea" not in r.model.chat_calls[-1].system
        view = await r.h.invoke_slash("memories view", user=ALICE, channel_id=GENERAL)
        assert "**Private mode:** on" in view[-1].embeds[0]["description"]


async def test_reaction_appears_after_a_change_and_not_when_nothing_changed(r):
    learned = await chat(r, ALICE, "I like sailing")
    await r.engine.scheduler.flush()
    (react,) = reactions(r)
    assert react.params["message_id"] == learned["id"] and react.params["emoji"] == BRAIN
    await chat(r, ALICE, "what time is it?")
    await r.engine.scheduler.flush()
    assert len(reactions(r)) == 1
    await r.h.invoke_slash("memories reactions", user=ALICE, channel_id=GENERAL, options={"enabled": False})
    await chat(r, ALICE, "I like rowing too")
    await r.engine.scheduler.flush()
    assert len(reactions(r)) == 1
    assert "I like rowing too" in [m.content for m in await r.engine.memories.list(str(ALICE["id"]))]


def _values(node) -> list:
    """Every scalar in a JSON document, keys included."""
    if isinstance(node, dict):
        return [v for k, x in node.items() for v in (k, *_values(x))]
    if isinstance(node, list):
        return [v for x in node for v in _values(x)]
    return [node]


async def test_change_log_records_extraction_person_and_moderator(r):
    await chat(r, BOB, "I like chess")
    await r.engine.scheduler.flush()
    await r.h.invoke_slash("memories remember", user=BOB, channel_id=GENERAL, options={"text": "Bob has two dogs"})
    res = await r.h.invoke_slash("purge-memories", user=MOD, channel_id=GENERAL, options={"member": BOB})
    await click_erasure(r, button(res[-1], "Purge"), res[-1].message, user=MOD)
    await r.h.invoke_slash("memories remember", user=BOB, channel_id=r.h.dm(BOB)["id"], options={"text": "Bob lives in Oslo"})
    export = await r.h.invoke_slash("memories export", user=BOB, channel_id=GENERAL)
    doc = json.loads(export[-1].files[0].data)
    actors = {(h["actor"], h["actor_id"]) for h in doc["history"]}
    assert ("moderator", None) in actors and ("user", str(BOB["id"])) in actors
    # Who purged them stays with the staff (the mod log): no value of the file is the moderator's ID (a
    # substring test failed by chance when a snowflake or a UUID happened to contain the three digits).
    assert str(MOD["id"]) not in {str(v) for v in _values(doc)}
    # The moderator's line carries no content; what was purged is gone from the log.
    mod_line = next(h for h in doc["history"] if h["actor"] == "moderator")
    assert mod_line["before"] is None and mod_line["after"] is None and mod_line["origin"]["erased"] == 2
    assert "chess" not in json.dumps(doc) and "two dogs" not in json.dumps(doc)
    # Extraction as actor: learned in a DM, kept in the log.
    dm = r.h.dm(BOB)
    await r.h.send_message(r.msg(BOB, "I like fjords", channel_id=dm["id"], guild_id=None))
    await r.engine.scheduler.flush()
    assert {"extraction", "user", "moderator"} <= {h.actor for h in await r.engine.memories.history(str(BOB["id"]))}


def files_containing(data_dir: Path, needle: str) -> list[str]:
    raw = needle.encode("utf-8")
    return [str(p) for p in data_dir.rglob("*") if p.is_file() and raw in p.read_bytes()]


async def test_wipe_leaves_the_canary_in_no_file(tmp_path):
    canary = "zebra-quartz-7731"
    async with rig(tmp_path, conversation={"summarize_after_messages": 6, "keep_messages": 4}) as r:
        for i in range(5):
            await chat(r, ALICE, f"I like the {canary} project, part {i}")
            await chat(r, BOB, f"I like my own bob-phrase-{i}")
        await r.engine.scheduler.flush()
        await r.engine.close()  # tails done: summaries written with the canary in them
        r.engine.scheduler._closed = False
        assert files_containing(r.data_dir, canary), "the canary should be on disk before the wipe"
        res = await r.h.invoke_slash("memories wipe", user=ALICE, channel_id=GENERAL)
        await click_erasure(r, button(res[-1], "Wipe"), res[-1].message, user=ALICE)
        assert files_containing(r.data_dir, canary) == []
        assert files_containing(r.data_dir, "bob-phrase-4"), "other people's data stays"
        # The channel still works after the erasure.
        await chat(r, BOB, "still here?")
        assert "still here?" in r.h.sent_messages(GENERAL)[-1].content


async def test_purge_leaves_the_canary_in_no_file_but_keeps_other_servers(tmp_path):
    canary = "ocelot-basalt-4410"
    async with rig(tmp_path) as r:
        for i in range(3):
            await chat(r, BOB, f"I like the {canary} thing {i}")
        await chat(r, BOB, "I like the elsewherephrase", channel_id=OTHER_CHANNEL, guild_id=OTHER_GUILD)
        await r.engine.scheduler.flush()
        await r.engine.close()
        r.engine.scheduler._closed = False
        res = await r.h.invoke_slash("purge-memories", user=MOD, channel_id=GENERAL, options={"member": BOB})
        await click_erasure(r, button(res[-1], "Purge"), res[-1].message, user=MOD)
        assert files_containing(r.data_dir, canary) == []
        assert files_containing(r.data_dir, "elsewherephrase")
        assert [m.content for m in await r.engine.memories.list(str(BOB["id"]))] == ["I like the elsewherephrase"]


async def test_export_then_import_round_trips_exactly(r):
    await chat(r, ALICE, "I like kites")
    await r.engine.scheduler.flush()
    await r.h.invoke_slash("memories remember", user=ALICE, channel_id=GENERAL, options={"text": "Alice plays oboe"})
    first = json.loads((await r.h.invoke_slash("memories export", user=ALICE, channel_id=GENERAL))[-1].files[0].data)
    await r.engine.erase_person(str(ALICE["id"]))
    assert await r.engine.memories.list(str(ALICE["id"])) == []
    res = await import_file(r, ALICE, json.dumps(first).encode())
    assert "Imported 2 memories" in res[-1].content
    second = json.loads((await r.h.invoke_slash("memories export", user=ALICE, channel_id=GENERAL))[-1].files[0].data)
    for doc in (first, second):
        doc.pop("exported_at")
    assert second == first


async def test_an_import_that_would_undo_a_correction_asks_first(r):
    (key,) = await seed(r, ALICE, ["Alice likes tea"])
    old = (await r.h.invoke_slash("memories export", user=ALICE, channel_id=GENERAL))[-1].files[0].data
    await r.h.invoke_slash("memories edit", user=ALICE, channel_id=GENERAL,
                           options={"memory": key, "text": "Alice likes coffee now"})
    res = await import_file(r, ALICE, old)
    prompt = res[-1]
    assert prompt.ephemeral and "replace 1" in prompt.content and "Alice likes coffee now" in prompt.content
    assert [m.content for m in await r.engine.memories.list(str(ALICE["id"]))] == ["Alice likes coffee now"]
    cancelled = await r.h.click(button(prompt, "Cancel"), prompt.message, user=ALICE)
    assert "nothing was imported" in cancelled[-1].content
    assert [m.content for m in await r.engine.memories.list(str(ALICE["id"]))] == ["Alice likes coffee now"]
    prompt = (await import_file(r, ALICE, old))[-1]
    done = await r.h.click(button(prompt, "Import"), prompt.message, user=ALICE)
    assert "Imported 1 memories" in done[-1].content
    assert [m.content for m in await r.engine.memories.list(str(ALICE["id"]))] == ["Alice likes tea"]


async def test_a_full_accounts_export_imports_back(r):
    """A person at the memory cap with long memories: an export of about 3 MB (the import once stopped at
    2 MB, so the bot's own file was refused) comes back whole."""
    cap = r.bot.settings.memory.max_per_person
    facts = [f"fact {i:04d} " + ("words " * 200)[:1000] for i in range(cap)]
    for k in range(0, cap, 100):
        await seed(r, ALICE, facts[k:k + 100])
    res = await r.h.invoke_slash("memories export", user=ALICE, channel_id=GENERAL)
    (f,) = [f for c in res for f in c.files]
    assert len(f.data) > 2_000_000 and f.filename.endswith(".json")
    await r.engine.erase_person(str(ALICE["id"]))
    res = await import_file(r, ALICE, f.data)
    assert f"Imported {cap} memories" in res[-1].content, res[-1].content
    assert sorted(m.content for m in await r.engine.memories.list(str(ALICE["id"]))) == sorted(facts)


async def import_file(r, user: dict, data: bytes):
    url = f"https://cdn.discordapp.com/attachments/1/{dh.snowflake()}/memories.json"
    r.h.cdn[url] = data
    att = dh.attachment(dh.snowflake(), "memories.json", size=len(data), url=url, content_type="application/json")
    return await r.h.invoke_slash("memories import", user=user, channel_id=GENERAL, options={"file": att})


async def test_a_bad_import_is_refused_with_a_reason_and_changes_nothing(r):
    await seed(r, ALICE, ["keep me"])
    bob_export = json.loads((await r.h.invoke_slash("memories export", user=BOB, channel_id=GENERAL))[-1].files[0].data)
    cases = {
        b"not json at all": "not valid JSON",
        json.dumps({"hello": 1}).encode(): "not a memories export",
        json.dumps(bob_export).encode(): "belongs to another account",
    }
    mine = json.loads((await r.h.invoke_slash("memories export", user=ALICE, channel_id=GENERAL))[-1].files[0].data)
    broken = dict(mine, memories=[{"id": "x", "content": ""}])
    cases[json.dumps(broken).encode()] = "not valid at memories.0"
    for data, reason in cases.items():
        res = await import_file(r, ALICE, data)
        assert reason in res[-1].content and "Nothing was changed" in res[-1].content, res[-1].content
    assert [m.content for m in await r.engine.memories.list(str(ALICE["id"]))] == ["keep me"]


async def test_refused_imports_count_against_the_hourly_limit_and_the_change_log_has_a_cap(tmp_path, monkeypatch):
    """A refused file costs the bot as much as an accepted one (it is read and checked): it counts against
    ``memory_commands_per_hour`` too. And a file's change-log entries under new keys, import after import,
    cannot grow a person's change log without end."""
    import sys

    async with rig(tmp_path, limits={"memory_commands_per_hour": 2}) as r:
        for _ in range(2):
            res = await import_file(r, ALICE, b"not json at all")
            assert "not valid JSON" in res[-1].content
        res = await import_file(r, ALICE, b"not json at all")
        assert "try again in" in res[-1].content and "Nothing was changed" in res[-1].content

    async with rig(tmp_path / "second") as r:
        await seed(r, ALICE, ["keep me"])
        mine = json.loads((await r.h.invoke_slash("memories export", user=ALICE, channel_id=GENERAL))[-1].files[0].data)
        assert mine["history"]
        # the module the bot loaded (discord.py loads an extension as a fresh module object)
        monkeypatch.setattr(sys.modules["cogs.memories"], "MAX_HISTORY", len(mine["history"]))
        res = await import_file(r, ALICE, json.dumps(mine).encode())  # the same keys: no growth, accepted
        assert "Imported 1 memories" in res[-1].content, res[-1].content
        grown = dict(mine, history=[dict(h, key=h["key"] + "-again") for h in mine["history"]])
        res = await import_file(r, ALICE, json.dumps(grown).encode())
        assert "change log over" in res[-1].content and "Nothing was changed" in res[-1].content
        assert len(await r.engine.memory_history(str(ALICE["id"]))) == len(mine["history"])
