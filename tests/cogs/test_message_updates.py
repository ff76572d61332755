"""MESSAGE_UPDATE that is not an edit changes nothing, and what a person wrote by hand is theirs.

Discord resends the whole, unchanged message when a link preview unfolds, the message is pinned, a thread
is started from it, or an embed changes. Those updates must not erase and re-learn memories, undo a
``/memories edit`` correction, drop the channel summary, compact, or download attachments again. The
payloads are shaped as Discord sends them (the full message object, ``edited_timestamp`` as it was).
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from langchain_core.messages import HumanMessage

from tests.cogs.conftest import ALICE, GENERAL, GUILD_ID, THREAD, rig
from tests.cogs.test_memories import button
from tests.cogs.test_memory_controls import files_containing
from tests.cogs.test_message_events import (
    contents,
    delete,
    forget_cache,
    humans,
    no_echo,
    settle,
)
from tests.conftest import Call, ScriptedChatModel, record_figure
from tests.fakes import discord_harness as dh

NOTES_URL = "https://cdn.discordapp.com/attachments/0/1/notes.txt"


def cdn_downloads(r) -> int:
    return len([c for c in r.h.calls if c.via == "cdn"])


class Counted:
    """Counts calls to one storage method (journal rows begun, compactions run)."""

    def __init__(self, obj, name: str) -> None:
        self.calls = 0
        real = getattr(obj, name)

        async def counted(*a, **k):
            self.calls += 1
            return await real(*a, **k)

        setattr(obj, name, counted)


async def snapshot(r, user: dict) -> tuple:
    """Everything an update must leave as it was: memories (with their timestamps and sources), the change
    log, the thread (messages and summary) and the learning queue."""
    uid = str(user["id"])
    memories = [(m.key, m.content, m.updated_at, m.sources) for m in await r.engine.memories.list(uid)]
    history = [(h.key, h.action, h.after) for h in await r.engine.memories.history(uid)]
    state = await r.engine.thread_state(str(GENERAL))
    thread = ([m.text for m in state.get("messages", [])], state.get("summary"))
    inbox = sorted((t.id, t.human, t.origin.get("message_id")) for t in await r.engine.inbox.every_turn())
    return memories, history, thread, inbox


def unfurled(payload: dict) -> dict:
    """A link preview resolved: the full message again, with an embed, ``edited_timestamp`` unchanged."""
    return {**payload, "embeds": [{"type": "link", "url": "https://example.com/tea", "title": "Tea"}]}


def pinned(payload: dict) -> dict:
    return {**payload, "pinned": True}


def thread_started(payload: dict) -> dict:
    """A thread was started from the message: the HAS_THREAD flag and the thread object."""
    return {**payload, "flags": 32, "thread": dh.thread(THREAD, GUILD_ID, GENERAL, "about tea", owner_id=ALICE["id"])}


def edited(payload: dict, content: str) -> dict:
    """A real edit: the full message with the new content and a new ``edited_timestamp``."""
    return {**payload, "content": content, "edited_timestamp": dh.discord.utils.utcnow().isoformat()}


async def test_unfurls_pins_and_threads_change_nothing_cached_or_not(tmp_path, backend):
    async with rig(tmp_path, ScriptedChatModel(no_echo), backend,
                   conversation={"summarize_after_messages": 6, "keep_messages": 2}) as r:
        r.h.cdn[NOTES_URL] = b"steeping notes"
        notes = dh.attachment(dh.snowflake(), "notes.txt", size=14, url=NOTES_URL, content_type="text/plain")
        said = r.mentioning(ALICE, "I like tea https://example.com/tea", attachments=[notes])
        await r.h.send_message(said)
        await r.engine.scheduler.flush()
        for i in range(4):  # the summary is built from the message
            await r.h.send_message(r.mentioning(ALICE, f"filler {i}"))
        await r.engine.close()
        r.engine.scheduler._closed = False
        assert await contents(r, ALICE) == ["I like tea https"]  # (what the scripted extractor reads)
        assert (await r.engine.thread_state(str(GENERAL))).get("summary")
        before = await snapshot(r, ALICE)
        downloads = cdn_downloads(r)
        begun = Counted(r.engine.storage.erasures, "begin")
        compacted = Counted(r.engine.storage.maintenance, "compact")

        for update in (unfurled(said), pinned(said), thread_started(said)):
            r.h.feed("MESSAGE_UPDATE", update)
            await settle(r)
        assert cdn_downloads(r) == downloads  # never edited: decided without building the text
        forget_cache(r)  # after a restart discord.py no longer holds it: the same
        for update in (unfurled(said), pinned(said)):
            r.h.feed("MESSAGE_UPDATE", update)
            await settle(r)
        assert cdn_downloads(r) == downloads
        await r.engine.scheduler.flush()
        assert await snapshot(r, ALICE) == before
        assert begun.calls == 0 and compacted.calls == 0


async def test_an_edited_message_unfurled_later_changes_nothing(tmp_path, backend):
    async with rig(tmp_path, ScriptedChatModel(no_echo), backend) as r:
        said = r.mentioning(ALICE, "I like tea_first")
        await r.h.send_message(said)
        await r.engine.scheduler.flush()
        fixed = edited(said, f"{r.mention()} I like coffee_second")
        r.h.feed("MESSAGE_UPDATE", fixed)  # a real edit: applied, learned again
        await settle(r)
        await r.engine.scheduler.flush()
        assert await contents(r, ALICE) == ["I like coffee_second"]
        before = await snapshot(r, ALICE)
        begun = Counted(r.engine.storage.erasures, "begin")
        r.h.feed("MESSAGE_UPDATE", unfurled(fixed))  # cached: the same edited_timestamp
        await settle(r)
        forget_cache(r)
        r.h.feed("MESSAGE_UPDATE", pinned(fixed))  # uncached: the text is built, and it is what is stored
        await settle(r)
        await r.engine.scheduler.flush()
        assert await snapshot(r, ALICE) == before
        assert begun.calls == 0
        # The engine's own check: the same text is no edit, whoever asks.
        assert not await r.engine.message_edited(str(GENERAL), said["id"], "I like coffee_second")


async def test_a_hand_corrected_memory_outlives_edits_unfurls_and_the_deletion_of_its_message(tmp_path, backend):
    async with rig(tmp_path, ScriptedChatModel(no_echo), backend) as r:
        said = r.mentioning(ALICE, "I like tea_learned")
        await r.h.send_message(said)
        await r.engine.scheduler.flush()
        (m,) = await r.engine.memories.list(str(ALICE["id"]))
        await r.h.invoke_slash("memories edit", user=ALICE, channel_id=GENERAL,
                               options={"memory": m.short_id, "text": "Alice likes green tea, no sugar"})
        await r.h.invoke_slash("memories remember", user=ALICE, channel_id=GENERAL, options={"text": "Alice rows"})
        mine = sorted(["Alice likes green tea, no sugar", "Alice rows"])
        assert await contents(r, ALICE) == mine
        (corrected,) = [x for x in await r.engine.memories.list(str(ALICE["id"])) if x.key == m.key]
        assert corrected.hand_written and corrected.places() == {str(GUILD_ID)}  # it keeps where it was learned

        r.h.feed("MESSAGE_UPDATE", unfurled(said))
        r.h.feed("MESSAGE_UPDATE", edited(said, f"{r.mention()} I like coffee_edited"))
        await settle(r)
        await r.engine.scheduler.flush()
        assert await contents(r, ALICE) == mine  # the edit did not undo her correction
        assert await humans(r) == ["I like coffee_edited"]  # (the conversation follows the edit)
        forget_cache(r)
        r.h.feed("MESSAGE_DELETE", delete(said))
        await settle(r)
        assert await contents(r, ALICE) == mine  # nor did the deletion erase it
        assert await humans(r) == []
        assert files_containing(r.data_dir, "coffee_edited") == []
        # The old text stays only in her memory's own change log ("created: ..."), which is hers to read,
        # delete with the memory, or wipe; the conversation and the learning queue no longer hold it.
        assert {p.rsplit("/", 1)[-1] for p in files_containing(r.data_dir, "tea_learned")} <= {"memories.sqlite"}

        asked = await r.h.invoke_slash("memories delete", user=ALICE, channel_id=GENERAL,
                                       options={"memory": corrected.short_id})
        await r.h.click(button(asked[-1], "Delete"), asked[-1].message, user=ALICE)
        await settle(r)
        assert await contents(r, ALICE) == ["Alice rows"]  # the person's own delete still removes it
        assert await r.engine.storage.erasures.unfinished() == []
        record_figure("hand-written memories facing an unfurl, an edit and a deletion", 2, "0 corrections undone")


async def test_an_edit_while_the_message_is_being_extracted_ends_with_the_new_text(tmp_path, backend):
    started, release = threading.Event(), threading.Event()

    def slow_extraction(call: Call):
        if call.is_extraction and "tea_in_flight" in call.prompt_text:
            started.set()
            release.wait(20)  # the model is still thinking when the edit arrives
        return no_echo(call)

    async with rig(tmp_path, ScriptedChatModel(slow_extraction), backend) as r:
        said = r.mentioning(ALICE, "I like tea_in_flight")
        await r.h.send_message(said)
        extraction = asyncio.create_task(r.engine.scheduler.flush())
        assert await asyncio.to_thread(started.wait, 20)
        r.h.feed("MESSAGE_UPDATE", edited(said, f"{r.mention()} I like coffee_after_flight"))
        await asyncio.sleep(0.3)  # the edit is waiting for the extraction in flight
        release.set()
        await extraction
        await settle(r)
        await r.engine.scheduler.flush()
        assert await contents(r, ALICE) == ["I like coffee_after_flight"]
        assert await humans(r) == ["I like coffee_after_flight"]
        assert all("tea_in_flight" not in t.human for t in await r.engine.inbox.every_turn())
        state = await r.engine.thread_state(str(GENERAL))
        assert [m.text for m in state["messages"] if isinstance(m, HumanMessage)] == ["I like coffee_after_flight"]
        await r.engine.close()
        r.engine.scheduler._closed = False
        assert files_containing(r.data_dir, "tea_in_flight") == []


async def test_partial_updates_neither_stop_the_bot_nor_change_anything(tmp_path):
    """discord.py builds a whole message from every MESSAGE_UPDATE and its parser runs outside any ``try``:
    one without ``content`` (a link preview as older gateways send it) raised out of the gateway and ended
    the process. Now it is dropped; an edit without ``author`` or ``type`` is completed from the cache."""
    async with rig(tmp_path, ScriptedChatModel(no_echo)) as r:
        said = r.mentioning(ALICE, "I like tea_first https://example.com/tea")
        await r.h.send_message(said)
        await r.engine.scheduler.flush()
        before = await snapshot(r, ALICE)
        partial = {"id": said["id"], "channel_id": said["channel_id"], "guild_id": str(GUILD_ID),
                   "embeds": [{"type": "link", "url": "https://example.com/tea"}]}
        r.h.feed("MESSAGE_UPDATE", partial)  # cached
        await settle(r)
        forget_cache(r)
        r.h.feed("MESSAGE_UPDATE", partial)  # not cached
        await settle(r)
        assert await snapshot(r, ALICE) == before
        assert not r.bot.is_closed()

        fixed = r.mentioning(ALICE, "I like coffee_second")
        await r.h.send_message(fixed)
        await r.engine.scheduler.flush()
        no_author = {k: v for k, v in edited(fixed, f"{r.mention()} I like cocoa_third").items()
                     if k not in ("author", "type", "member")}
        r.h.feed("MESSAGE_UPDATE", no_author)  # cached: completed and applied as the edit it is
        await settle(r)
        await r.engine.scheduler.flush()
        assert sorted(await contents(r, ALICE)) == ["I like cocoa_third", "I like tea_first https"]


async def test_a_pin_after_a_restart_with_the_cdn_down_does_not_take_back_an_attachments_words(tmp_path):
    """An edited message no longer in discord.py's cache is judged by building its text again, which
    downloads its text attachments. A failed download used to become a "could not be downloaded" line in
    place of the file's words, so the pin read as an edit that took them back: their memory was erased."""
    async with rig(tmp_path, ScriptedChatModel(no_echo)) as r:
        r.h.cdn[NOTES_URL] = b"I like marmalade"
        files = [dh.attachment(dh.snowflake(), "notes.txt", size=16, url=NOTES_URL, content_type="text/plain")]
        said = r.mentioning(ALICE, "I like tea", attachments=files)
        await r.h.send_message(said)
        fixed = edited(said, f"{r.mention()} I like green tea")
        r.h.feed("MESSAGE_UPDATE", fixed)
        await settle(r)
        await r.engine.scheduler.flush()
        before = await snapshot(r, ALICE)
        assert any("marmalade" in t for t in before[2][0])  # the file's words are in the stored message
        forget_cache(r)

        async def cdn_down(url):
            raise dh.http_error(503, 0, "cdn down")

        r.bot.http.get_from_cdn = cdn_down
        r.h.feed("MESSAGE_UPDATE", pinned(fixed))
        await settle(r)
        await r.engine.scheduler.flush()
        assert await snapshot(r, ALICE) == before


async def test_an_edit_not_applied_for_a_failed_download_is_applied_at_the_next_pin_of_a_cached_message(tmp_path):
    """The edit's file could not be downloaded: it was left "to be judged again at its next update", but
    discord.py's cache took its edited timestamp, so the next pin read as "not an edit" and the old text
    stayed stored and learned."""
    async with rig(tmp_path, ScriptedChatModel(no_echo)) as r:
        r.h.cdn[NOTES_URL] = b"I like marmalade"
        files = [dh.attachment(dh.snowflake(), "notes.txt", size=16, url=NOTES_URL, content_type="text/plain")]
        said = r.mentioning(ALICE, "I like tea_before_edit", attachments=files)
        await r.h.send_message(said)
        real_cdn = r.bot.http.get_from_cdn

        async def cdn_down(url):
            raise dh.http_error(503, 0, "cdn down")

        r.bot.http.get_from_cdn = cdn_down
        fixed = edited(said, f"{r.mention()} I like coffee_after_edit")
        r.h.feed("MESSAGE_UPDATE", fixed)
        await settle(r)
        assert any("tea_before_edit" in t for t in (await snapshot(r, ALICE))[2][0])  # not applied yet
        r.bot.http.get_from_cdn = real_cdn
        r.h.feed("MESSAGE_UPDATE", pinned(fixed))  # same edited timestamp as discord.py's cached copy
        await settle(r)
        stored = (await snapshot(r, ALICE))[2][0]
        assert not any("tea_before_edit" in t for t in stored) and any("coffee_after_edit" in t for t in stored)


@pytest.mark.parametrize("uncached", [False, True], ids=["cached", "uncached"])
async def test_an_edit_that_does_not_list_the_files_keeps_their_words(tmp_path, uncached):
    """An update without an ``attachments`` key says nothing about the files, but discord.py builds the
    edited message with none: read as is, the file's words looked taken back (erased from the stored message,
    its memory with them). The files are then the cached copy's, or the message's as Discord has it now."""
    async with rig(tmp_path, ScriptedChatModel(no_echo)) as r:
        r.h.cdn[NOTES_URL] = b"I like marmalade"
        files = [dh.attachment(dh.snowflake(), "notes.txt", size=16, url=NOTES_URL, content_type="text/plain")]
        said = r.mentioning(ALICE, "I like tea", attachments=files)
        await r.h.send_message(said)
        await r.engine.scheduler.flush()
        r.h.messages[int(said["id"])] = said  # Discord holds the message (a GET of it answers it)
        if uncached:
            forget_cache(r)
        without_files = {k: v for k, v in edited(said, f"{r.mention()} I like green tea").items()
                         if k != "attachments"}
        r.h.feed("MESSAGE_UPDATE", without_files)
        await settle(r)
        await r.engine.scheduler.flush()
        stored = (await snapshot(r, ALICE))[2][0]
        assert any("green tea" in t and "marmalade" in t for t in stored), stored
        assert any("marmalade" in m for m in await contents(r, ALICE))
        fetched = r.h.calls_to("GET", "/channels/{channel_id}/messages/{message_id}")
        assert bool(fetched) == uncached  # only a message no longer cached is asked for


async def test_a_pin_does_not_bring_back_words_an_erasure_cut_out_of_another_message(tmp_path, backend):
    """Bob's message (edited once, so no longer plainly "never edited") repeats Alice's words; Alice is
    wiped, and the bot's copy of Bob's message reads "[erased]" there. A pin or an unfurl of Bob's message
    after a restart carries his text as Discord has it: that is no edit, and Alice's words stay out (until
    2026-12-07 the update was applied as an edit and wrote them back, to be learned again)."""
    from tests.cogs.conftest import BOB

    async with rig(tmp_path, ScriptedChatModel(no_echo), backend) as r:
        await r.h.send_message(r.mentioning(ALICE, "the spare key hides under the blue flowerpot"))
        first = r.mentioning(BOB, "typo")
        await r.h.send_message(first)
        bobs = edited(first, f"{r.mention()} as Alice said the spare key hides under the blue flowerpot, ok")
        r.h.feed("MESSAGE_UPDATE", bobs)
        await settle(r)
        await r.engine.scheduler.flush()
        await r.engine.erase_person(str(ALICE["id"]))
        stored = [t for t in await humans(r) if "as Alice said" in t]
        assert stored and all("flowerpot" not in t and "[erased]" in t for t in stored), stored
        begun = Counted(r.engine.storage.erasures, "begin")
        forget_cache(r)  # after a restart
        r.h.feed("MESSAGE_UPDATE", pinned(bobs))
        await settle(r)
        r.h.feed("MESSAGE_UPDATE", unfurled(bobs))
        await settle(r)
        await r.engine.scheduler.flush()
        assert all("flowerpot" not in t for t in await humans(r))
        assert all("flowerpot" not in t.human for t in await r.engine.inbox.every_turn())
        assert all("flowerpot" not in m.content for m in await r.engine.memories.list(str(BOB["id"])))
        assert begun.calls == 0
