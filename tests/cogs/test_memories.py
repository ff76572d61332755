"""/memories through real interactions: ephemeral, personal, confirmed before anything destructive."""

from __future__ import annotations

import json

from bot.engine.memories.records import Actor
from tests.cogs.conftest import ALICE, BOB, GENERAL, GUILD_ID


def button(call, label: str) -> str:
    for row in call.components:
        for c in row["components"]:
            if c.get("label") == label:
                return c["custom_id"]
    raise AssertionError(f"no {label!r} button in {call.components}")


async def click_erasure(r, custom_id: str, message: dict, *, user: dict) -> list:
    """Press an erasure's confirm button and wait until it has finished.

    An erasure waits on SQLite worker threads for longer stretches than ``settle``'s default quiet period,
    which would count it as idle; so wait for a quiet second instead, and return every call made.
    """
    start = len(r.h.calls)
    await r.h.click(custom_id, message, user=user)
    await r.h.settle(timeout=60, quiet=1.0)
    return r.h.calls[start:]


async def seed(r, user: dict, facts: list[str], guild: str = str(GUILD_ID)) -> list[str]:
    origin = {"guild_id": guild, "channel_id": str(GENERAL), "message_id": "123456789", "source": "extraction"}
    changes = await r.engine.memories.apply(str(user["id"]), inserts=[(f, origin) for f in facts])
    return changes.inserted


async def test_view_is_ephemeral_and_shows_only_the_callers_memories(r):
    await seed(r, ALICE, ["Alice likes tea", "Alice rides a bike"])
    await seed(r, BOB, ["Bob secretly hates tea"])
    res = await r.h.invoke_slash("memories view", user=ALICE, channel_id=GENERAL)
    assert res[0].callback_type == 5 and res[0].ephemeral
    (followup,) = [c for c in res if c.via == "webhook" and c.callback_type is None]
    assert followup.ephemeral
    text = json.dumps(followup.embeds, ensure_ascii=False)
    assert "Alice likes tea" in text and "Alice rides a bike" in text
    assert "Bob" not in text
    assert "Test Server \u203a #general" in text  # where it was learned
    assert "https://discord.com/channels/900/901/123456789" in text  # jump link


def test_a_thread_or_server_name_cannot_plant_a_link_in_where_a_memory_was_learned():
    from types import SimpleNamespace

    from cogs._memory_format import where

    thread = SimpleNamespace(name="a](https://evil.example/login) [b")
    guild = SimpleNamespace(name="Srv)](https://evil.example)", get_channel_or_thread=lambda _id: thread)
    client = SimpleNamespace(get_guild=lambda _id: guild)
    shown = where(client, {"guild_id": "900", "channel_id": "901", "message_id": "123456789"})
    assert shown == ("[Srvhttps://evil.example \u203a #ahttps://evil.example/login b]"
                     "(https://discord.com/channels/900/901/123456789)")

async def test_view_pages_ten_at_a_time_with_buttons(r):
    await seed(r, ALICE, [f"fact {i:02d}" for i in range(25)])
    res = await r.h.invoke_slash("memories view", user=ALICE, channel_id=GENERAL)
    page = res[-1]
    assert page.embeds[0]["description"].count("`") == 20  # ten short IDs, each in backticks
    assert "page 1 of 3" in page.embeds[0]["footer"]["text"]
    assert "fact 00" in page.embeds[0]["description"] and "fact 10" not in page.embeds[0]["description"]
    nxt = await r.h.click(button(page, "Next"), page.message, user=ALICE)
    assert nxt[0].callback_type == 7
    assert "fact 10" in nxt[0].embeds[0]["description"] and "page 2 of 3" in nxt[0].embeds[0]["footer"]["text"]
    stranger = await r.h.click(button(page, "Next"), page.message, user=BOB)
    assert stranger[0].ephemeral and "aren't for you" in stranger[0].content


async def test_the_pager_takes_its_buttons_away_when_they_expire(r):
    """After 300 s discord.py stops listening to the pager; buttons still shown would then answer a click
    with Discord's "This interaction failed". The page stays, without buttons."""
    from cogs.views import PagerView

    await seed(r, ALICE, [f"fact {i:02d}" for i in range(25)])
    page = (await r.h.invoke_slash("memories view", user=ALICE, channel_id=GENERAL))[-1]
    store = r.bot._connection._view_store
    items = [i for by_message in store._views.values()
             for i in (by_message.values() if isinstance(by_message, dict) else [by_message])]
    (pager,) = {id(v): v for v in (getattr(i, "view", i) for i in items) if isinstance(v, PagerView)}.values()
    before = len(r.h.calls)
    pager._dispatch_timeout()  # what discord.py does when the timeout passes
    await r.h.settle()
    (edit,) = [c for c in r.h.calls[before:] if c.method == "PATCH"]
    assert edit.components == [] and edit.params.get("message_id") == page.message["id"]
    shown = r.h.messages[int(page.message["id"])]
    assert shown["components"] == [] and "fact 00" in shown["embeds"][0]["description"]


async def test_delete_autocompletes_own_memories_and_deletes_one_after_the_callers_confirm(r):
    (alice_key, bike_key) = await seed(r, ALICE, ["Alice likes tea", "Alice rides a bike"])
    (bob_key,) = await seed(r, BOB, ["Bob likes tea too"])
    choices = await r.h.autocomplete("memories delete", "memory", user=ALICE, channel_id=GENERAL, options={"memory": "tea"})
    assert [c["value"] for c in choices] == [alice_key]
    res = await r.h.invoke_slash("memories delete", user=ALICE, channel_id=GENERAL, options={"memory": alice_key})
    prompt = res[-1]
    assert prompt.ephemeral and "Alice likes tea" in prompt.content and "?" in prompt.content
    assert len(await r.engine.memories.list(str(ALICE["id"]))) == 2  # asked, not yet deleted
    refused = await r.h.click(button(prompt, "Delete"), prompt.message, user=BOB)
    assert refused[0].ephemeral and "aren't for you" in refused[0].content
    assert len(await r.engine.memories.list(str(ALICE["id"]))) == 2
    done = await r.h.click(button(prompt, "Delete"), prompt.message, user=ALICE)
    assert "Deleted" in done[-1].content
    assert [m.content for m in await r.engine.memories.list(str(ALICE["id"]))] == ["Alice rides a bike"]
    # Cancel deletes nothing.
    res = await r.h.invoke_slash("memories delete", user=ALICE, channel_id=GENERAL, options={"memory": bike_key})
    cancelled = await r.h.click(button(res[-1], "Cancel"), res[-1].message, user=ALICE)
    assert "nothing was deleted" in cancelled[-1].content
    assert [m.content for m in await r.engine.memories.list(str(ALICE["id"]))] == ["Alice rides a bike"]
    # Someone else's key is not found among yours, and nothing is deleted.
    res = await r.h.invoke_slash("memories delete", user=ALICE, channel_id=GENERAL, options={"memory": bob_key})
    assert "couldn't find" in res[-1].content
    assert len(await r.engine.memories.list(str(BOB["id"]))) == 1


async def test_wipe_acts_only_after_the_callers_confirm(r):
    await seed(r, ALICE, ["one", "two", "three"])
    await seed(r, BOB, ["bob's"])
    res = await r.h.invoke_slash("memories wipe", user=ALICE, channel_id=GENERAL)
    prompt = res[-1]
    assert prompt.ephemeral and "Erase all 3" in prompt.content
    # Another person's click is refused and changes nothing.
    refused = await r.h.click(button(prompt, "Wipe"), prompt.message, user=BOB)
    assert refused[0].ephemeral and "aren't for you" in refused[0].content
    assert len(await r.engine.memories.list(str(ALICE["id"]))) == 3
    done = await click_erasure(r, button(prompt, "Wipe"), prompt.message, user=ALICE)
    assert done[0].callback_type == 7 and done[0].components == []  # answered at once: the buttons go first
    assert "deleted 3 memories" in done[-1].content and done[-1].components == []
    assert await r.engine.memories.list(str(ALICE["id"])) == []
    assert len(await r.engine.memories.list(str(BOB["id"]))) == 1


async def test_wipe_cancel_keeps_everything(r):
    await seed(r, ALICE, ["one"])
    res = await r.h.invoke_slash("memories wipe", user=ALICE, channel_id=GENERAL)
    done = await r.h.click(button(res[-1], "Cancel"), res[-1].message, user=ALICE)
    assert "nothing was deleted" in done[0].content
    assert len(await r.engine.memories.list(str(ALICE["id"]))) == 1


async def test_export_is_valid_json_of_exactly_the_callers_memories(r):
    keys = await seed(r, ALICE, ["Alice likes tea", "Alice rides a bike"])
    await seed(r, BOB, ["Bob likes coffee"])
    res = await r.h.invoke_slash("memories export", user=ALICE, channel_id=GENERAL)
    followup = res[-1]
    assert followup.ephemeral
    (file,) = followup.files
    doc = json.loads(file.data)
    assert doc["user_id"] == str(ALICE["id"])
    assert sorted(m["id"] for m in doc["memories"]) == sorted(keys)
    assert sorted(m["content"] for m in doc["memories"]) == ["Alice likes tea", "Alice rides a bike"]


async def test_memories_work_in_dms(r):
    await seed(r, ALICE, ["learned in a DM"], guild="dm")
    dm = r.h.dm(ALICE)
    res = await r.h.invoke_slash("memories view", user=ALICE, channel_id=dm["id"])
    assert "learned in a DM" in json.dumps(res[-1].embeds) and "a DM" in json.dumps(res[-1].embeds)
    assert res[-1].ephemeral


async def test_long_memories_never_overflow_an_embed(r):
    await seed(r, ALICE, [f"{i:02d} " + "long memory text " * 17 for i in range(25)])  # ~290 characters each
    res = await r.h.invoke_slash("memories view", user=ALICE, channel_id=GENERAL)
    page = res[-1]
    assert len(page.embeds[0]["description"]) <= 4096
    footer = page.embeds[0]["footer"]["text"]
    assert "25 memories" in footer and "page 1 of" in footer
    key = (await r.engine.memories.list(str(ALICE["id"])))[0].key
    for i in range(30):
        await r.engine.memories.edit(str(ALICE["id"]), key, f"edit {i} " + "x" * 200, {"guild_id": "dm"},
                                     actor=Actor("user", "802"))
    hist = await r.h.invoke_slash("memories history", user=ALICE, channel_id=GENERAL, options={"memory": key})
    assert len(hist[-1].embeds[0]["description"]) <= 4096


def test_a_memory_reads_as_learned_when_first_learned_not_when_last_patched():
    """A correction moves ``updated_at``; the line must still say when the memory was first learned."""
    from datetime import datetime, timedelta, timezone

    from bot.engine import StoredMemory
    from cogs._memory_format import describe

    learned = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
    patched = StoredMemory(key="k" * 20, content="Alice likes green tea", origin={"guild_id": "dm"},
                           created_at=learned, updated_at=learned + timedelta(days=30))
    line = describe(None, patched)
    assert line.endswith(f"learned <t:{int(learned.timestamp())}:R> in a DM")
    assert str(int((learned + timedelta(days=30)).timestamp())) not in line


async def test_suggestions_answer_in_time_even_when_the_store_is_slow_or_down(r, monkeypatch):
    """Discord drops an autocomplete answered after 3 seconds: a slow or failing store gives an empty list
    (an answer, in time), not silence that shows the member "Loading options failed"."""
    import asyncio
    import sys

    await seed(r, ALICE, ["Alice likes tea"])

    async def slow(user_id):
        await asyncio.sleep(30)

    async def down(user_id):
        raise OSError("database is down")

    monkeypatch.setattr(sys.modules["cogs.memories"], "AUTOCOMPLETE_SECONDS", 0.05)  # the loaded extension
    for failing in (slow, down):
        monkeypatch.setattr(r.engine, "list_memories", failing)
        res = await r.h._interact(4, ALICE, GENERAL, r.h._slash_data("memories delete", ALICE, GENERAL,
                                                                      {"memory": "tea"}, "memory"))
        (answer,) = [c for c in res if c.callback_type == 8]
        assert answer.body.get("choices") == []


async def test_a_confirmed_action_that_fails_leaves_no_live_button_behind(r, monkeypatch):
    """The buttons go the moment Confirm is pressed: when the work then fails (the database is down), the
    person gets the apology and a prompt without buttons, not a Delete that answers "interaction failed"."""
    (key,) = await seed(r, ALICE, ["Alice likes tea"])

    async def down(*args, **kwargs):
        raise OSError("database is down")

    monkeypatch.setattr(r.engine, "delete_memories", down)
    res = await r.h.invoke_slash("memories delete", user=ALICE, channel_id=GENERAL, options={"memory": key})
    prompt = res[-1]
    await r.h.click(button(prompt, "Delete"), prompt.message, user=ALICE)
    await r.h.settle()
    assert r.h.messages[int(prompt.message["id"])]["components"] == []
    from cogs.views import UNFINISHED
    assert r.h.messages[int(prompt.message["id"])]["content"] == UNFINISHED  # the prompt is the apology
    assert len(await r.engine.memories.list(str(ALICE["id"]))) == 1


async def test_a_memory_gone_before_the_edit_or_the_delete_lands_is_not_reported_done(r, monkeypatch):
    """The memory went between the lookup and the change (the memory cap, a deleted message, another
    command): "Updated" or "Deleted" would tell the member something happened that did not."""
    from bot.engine.memories.records import Actor

    (key,) = await seed(r, ALICE, ["Alice likes tea"])
    res = await r.h.invoke_slash("memories delete", user=ALICE, channel_id=GENERAL, options={"memory": key})
    await r.engine.delete_memories(str(ALICE["id"]), [key], by=Actor("user", str(ALICE["id"])))  # meanwhile
    done = await click_erasure(r, button(res[-1], "Delete"), res[-1].message, user=ALICE)
    assert any("already gone" in c.content for c in done if c.content), [c.content for c in done]

    (key,) = await seed(r, ALICE, ["Alice rides a bike"])
    real_edit = r.engine.edit_memory

    async def gone_meanwhile(user_id, k, text, origin, *, by):
        await r.engine.delete_memories(str(user_id), [k], by=by)
        return await real_edit(user_id, k, text, origin, by=by)

    monkeypatch.setattr(r.engine, "edit_memory", gone_meanwhile)
    res = await r.h.invoke_slash("memories edit", user=ALICE, channel_id=GENERAL,
                                 options={"memory": key, "text": "Alice rides a red bike"})
    assert "deleted a moment ago" in res[-1].content and "Updated" not in res[-1].content
    assert await r.engine.memories.list(str(ALICE["id"])) == []


async def test_a_prompt_shown_before_a_restart_says_it_expired_and_does_nothing(tmp_path):
    """The bot restarts while a Wipe prompt is on screen: its view died with the old process, and the click
    got Discord's "This interaction failed" with no word on whether anything was erased."""
    from cogs.errors import EXPIRED
    from tests.cogs.conftest import rig

    async with rig(tmp_path) as r:
        await seed(r, ALICE, ["Alice likes tea"])
        res = await r.h.invoke_slash("memories wipe", user=ALICE, channel_id=GENERAL)
        prompt, wipe = res[-1], button(res[-1], "Wipe")
    async with rig(tmp_path) as r:  # restarted at once: no clock tells this prompt from a fresh one
        answered = await r.h.click(wipe, prompt.message, user=ALICE)
        assert len(answered) == 1 and answered[0].ephemeral and answered[0].content == EXPIRED
        assert [m.content for m in await r.engine.memories.list(str(ALICE["id"]))] == ["Alice likes tea"]
        fresh = await r.h.invoke_slash("memories wipe", user=ALICE, channel_id=GENERAL)  # this process's own
        done = await click_erasure(r, button(fresh[-1], "Wipe"), fresh[-1].message, user=ALICE)
        assert not any(c.content == EXPIRED for c in done)
        assert await r.engine.memories.list(str(ALICE["id"])) == []


async def test_cancel_then_wipe_in_one_read_of_the_gateway_cancels_and_tells_the_second_click(r):
    """Two clicks reach the view before it stops (a double click, or two frames read at once): the first
    decides, the second is answered, not taken as the answer."""
    import asyncio

    from cogs.views import ALREADY_ANSWERED

    await seed(r, ALICE, ["Alice likes tea"])
    res = await r.h.invoke_slash("memories wipe", user=ALICE, channel_id=GENERAL)
    prompt = res[-1]
    cancelled, wiped = await asyncio.gather(r.h.click(button(prompt, "Cancel"), prompt.message, user=ALICE),
                                            r.h.click(button(prompt, "Wipe"), prompt.message, user=ALICE))
    await r.h.settle(timeout=30, quiet=1.0)
    assert [c.content for c in r.h.interaction_responses(int(wiped.interaction["id"]))] == [ALREADY_ANSWERED]
    assert any("Cancelled" in (c.content or "") for c in r.h.interaction_responses(int(cancelled.interaction["id"])))
    assert [m.content for m in await r.engine.memories.list(str(ALICE["id"]))] == ["Alice likes tea"]


async def test_a_click_on_a_prompt_already_answered_is_told_it_did_nothing(r):
    from cogs.views import ALREADY_ANSWERED

    await seed(r, ALICE, ["Alice likes tea"])
    res = await r.h.invoke_slash("memories wipe", user=ALICE, channel_id=GENERAL)
    prompt = res[-1]
    await r.h.click(button(prompt, "Cancel"), prompt.message, user=ALICE)
    again = await r.h.click(button(prompt, "Wipe"), prompt.message, user=ALICE)  # a client not yet redrawn
    assert [(c.content, c.ephemeral) for c in again] == [(ALREADY_ANSWERED, True)]
    assert [m.content for m in await r.engine.memories.list(str(ALICE["id"]))] == ["Alice likes tea"]


async def test_a_wipe_that_fails_after_confirm_turns_the_prompt_into_the_apology(r, monkeypatch, caplog):
    """The database goes away after Wipe was pressed: the prompt still asked "Erase all ...? This cannot be
    undone." beside a separate apology. Failed before its journal row, it says to try again; failed after,
    that the erasure is recorded and finished on its own (the journal is replayed)."""
    from cogs.views import ERASURE_UNFINISHED, UNFINISHED

    await seed(r, ALICE, ["Alice likes tea"])

    async def down(*_a, **_k):
        raise ConnectionError("database unreachable")

    for where, said in ((r.engine, UNFINISHED), (r.engine.eraser.steps, ERASURE_UNFINISHED)):
        with monkeypatch.context() as patch:
            patch.setattr(where, "erase_person" if where is r.engine else "person", down)
            res = await r.h.invoke_slash("memories wipe", user=ALICE, channel_id=GENERAL)
            done = await click_erasure(r, button(res[-1], "Wipe"), res[-1].message, user=ALICE)
        edits = [c for c in done if c.method == "PATCH"]
        assert edits and edits[-1].json.get("content") == said
        assert not any("Something went wrong" in (c.content or "") for c in done)  # one apology, on the prompt
    assert any("failed after it was confirmed" in rec.getMessage() for rec in caplog.records)
    assert await r.engine.erasure_recorded(ALICE["id"])
    await r.engine.eraser.resume()  # what the journal's replay does once the database is back
    assert await r.engine.memories.list(str(ALICE["id"])) == []


async def test_a_memory_of_spaces_only_is_refused(r):
    res = await r.h.invoke_slash("memories remember", user=ALICE, channel_id=GENERAL, options={"text": "   "})
    assert "nothing was saved" in res[-1].content
    assert await r.engine.memories.list(str(ALICE["id"])) == []
    (key,) = await seed(r, ALICE, ["Alice likes tea"])
    res = await r.h.invoke_slash("memories edit", user=ALICE, channel_id=GENERAL, options={"memory": key, "text": "  "})
    assert "nothing was changed" in res[-1].content
    assert [m.content for m in await r.engine.memories.list(str(ALICE["id"]))] == ["Alice likes tea"]


async def test_an_export_whose_history_is_too_large_comes_without_it(r, monkeypatch):
    """The change log keeps every old text, so a long-time member's export outgrew Discord's upload
    limit, and the advice to delete memories only made the log longer. The memories come without their
    history then, and the answer says so; only memories that cannot fit at all are refused."""
    import cogs.memories as module

    await seed(r, ALICE, ["Alice likes tea"])
    real = module.export_file

    def history_too_large(document: dict, *args):
        return None if document.get("history") else real(document, *args)

    monkeypatch.setattr(module, "export_file", history_too_large)
    res = await r.h.invoke_slash("memories export", user=ALICE, channel_id=GENERAL)
    (file,) = res[-1].files
    doc = json.loads(file.data)
    assert [m["content"] for m in doc["memories"]] == ["Alice likes tea"] and doc["history"] == []
    assert "without their change history" in res[-1].content
    monkeypatch.setattr(module, "export_file", lambda *_a: None)
    res = await r.h.invoke_slash("memories export", user=ALICE, channel_id=GENERAL)
    assert not res[-1].files and "too large" in res[-1].content and "Deleting" not in res[-1].content
