"""cogs/message_events.py: edits, deletions, deleted channels and removed servers, through gateway payloads
shaped as Discord documents them, on real SQLite files; deletions are checked byte by byte on disk."""

from __future__ import annotations

import asyncio
import time

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from tests.cogs.conftest import (
    ALICE,
    BOB,
    GENERAL,
    GUILD,
    GUILD2,
    GUILD_ID,
    LISTED,
    OTHER_BOT,
    OTHER_GUILD,
    THREAD,
    rig,
)
from tests.cogs.test_memory_controls import files_containing
from tests.conftest import Call, ScriptedChatModel, default_script
from tests.fakes import discord_harness as dh


def no_echo(call: Call):
    """Replies that do not repeat what was said, so a byte search finds only what the bot kept of it."""
    return default_script(call) if call.is_extraction or "Summarize" in call.messages[-1].text else "Noted!"


def partial_update(payload: dict, content: str) -> dict:
    """MESSAGE_UPDATE as Discord may send it: a subset of the message (no member, mentions, attachments)."""
    return {"id": payload["id"], "channel_id": payload["channel_id"], "guild_id": payload.get("guild_id"),
            "type": payload["type"], "author": payload["author"], "content": content,
            "edited_timestamp": dh.discord.utils.utcnow().isoformat()}


async def settle(r) -> None:
    """Wait for the bot to be idle; erasures wait on database threads, so allow a longer quiet spell."""
    await r.h.settle(timeout=20, quiet=0.3)


def delete(payload: dict) -> dict:
    return {"id": payload["id"], "channel_id": payload["channel_id"], "guild_id": payload.get("guild_id")}


async def humans(r, channel: int = GENERAL) -> list[str]:
    state = await r.engine.thread_state(str(channel))
    return [m.text for m in state.get("messages", []) if isinstance(m, HumanMessage)]


async def ais(r, channel: int = GENERAL) -> list[AIMessage]:
    state = await r.engine.thread_state(str(channel))
    return [m for m in state.get("messages", []) if isinstance(m, AIMessage)]


async def contents(r, user: dict) -> list[str]:
    return sorted(m.content for m in await r.engine.memories.list(str(user["id"])))


def forget_cache(r) -> None:
    """As after a restart: discord.py no longer holds the messages."""
    r.bot._connection._messages.clear()


async def test_an_edit_before_learning_is_what_gets_learned(tmp_path):
    async with rig(tmp_path, chat_model=ScriptedChatModel(no_echo)) as r:
        said = r.mentioning(ALICE, "I like tea_before_edit")
        await r.h.send_message(said)
        r.h.feed("MESSAGE_UPDATE", partial_update(said, f"{r.mention()} I like coffee_after_edit"))
        await settle(r)
        assert await humans(r) == ["I like coffee_after_edit"]
        await r.engine.scheduler.flush()
        assert await contents(r, ALICE) == ["I like coffee_after_edit"]
        await r.engine.close()
        r.engine.scheduler._closed = False
        assert files_containing(r.data_dir, "tea_before_edit") == []


async def test_an_edit_after_learning_replaces_what_was_learned_without_a_duplicate(tmp_path):
    async with rig(tmp_path, chat_model=ScriptedChatModel(no_echo)) as r:
        said = r.mentioning(ALICE, "I like tea_old_text")
        await r.h.send_message(said)
        await r.engine.scheduler.flush()  # one extraction per message: each memory cites its own message
        await r.h.send_message(r.mentioning(ALICE, "I like rowing"))
        await r.engine.scheduler.flush()
        assert await contents(r, ALICE) == ["I like rowing", "I like tea_old_text"]
        forget_cache(r)  # an edit of an uncached message is handled the same
        r.h.feed("MESSAGE_UPDATE", partial_update(said, f"{r.mention()} I like coffee_new_text"))
        await settle(r)
        await r.engine.scheduler.flush()
        assert await contents(r, ALICE) == ["I like coffee_new_text", "I like rowing"]
        (new,) = [m for m in await r.engine.memories.list(str(ALICE["id"])) if "coffee" in m.content]
        assert new.origin["message_id"] == said["id"]
        assert files_containing(r.data_dir, "tea_old_text") == []


async def test_an_uncached_delete_removes_message_answer_queue_and_memory_from_disk(tmp_path):
    canary = "okapi_delete_4411"
    async with rig(tmp_path) as r:
        said = r.mentioning(ALICE, f"I like {canary}")
        await r.h.send_message(said)
        await r.engine.scheduler.flush()  # one extraction per message: each memory cites its own message
        await r.h.send_message(r.mentioning(ALICE, "I like rowing"))
        await r.h.send_message(r.mentioning(BOB, "hello there"))
        await r.engine.scheduler.flush()
        assert f"I like {canary}" in await contents(r, ALICE)
        await r.engine.close()
        r.engine.scheduler._closed = False
        assert files_containing(r.data_dir, canary)
        forget_cache(r)
        r.h.feed("MESSAGE_DELETE", delete(said))
        await settle(r)
        assert await humans(r) == ["I like rowing", "hello there"]
        assert len(await ais(r)) == 2  # the answer to the deleted message went with it
        assert await contents(r, ALICE) == ["I like rowing"]
        assert files_containing(r.data_dir, canary) == []
        # Deleting it again, or a message never stored, or in a channel never seen: nothing happens.
        r.h.feed("MESSAGE_DELETE", delete(said))
        r.h.feed("MESSAGE_DELETE", {"id": str(dh.snowflake()), "channel_id": str(GENERAL), "guild_id": str(GUILD_ID)})
        r.h.feed("MESSAGE_DELETE", {"id": str(dh.snowflake()), "channel_id": "123456", "guild_id": str(GUILD_ID)})
        r.h.feed("MESSAGE_UPDATE", partial_update(said, "edited after deletion"))
        await settle(r)
        assert await humans(r) == ["I like rowing", "hello there"]
        assert await contents(r, ALICE) == ["I like rowing"]


async def test_a_pending_turn_is_deleted_before_it_is_learned(tmp_path):
    async with rig(tmp_path) as r:
        said = r.mentioning(ALICE, "I like pending_canary_9")
        await r.h.send_message(said)
        r.h.feed("MESSAGE_DELETE", delete(said))
        await settle(r)
        assert await r.engine.inbox.pending() == []
        await r.engine.scheduler.flush()
        assert await contents(r, ALICE) == []
        assert files_containing(r.data_dir, "pending_canary_9") == []


async def test_bulk_delete_and_a_summary_built_from_the_deleted_messages(tmp_path):
    async with rig(tmp_path, conversation={"summarize_after_messages": 6, "keep_messages": 2}) as r:
        first = r.mentioning(ALICE, "bkcanary1 here")
        second = r.mentioning(BOB, "bkcanary2 here")
        for payload in (first, second):
            await r.h.send_message(payload)
        for i in range(3):
            await r.h.send_message(r.mentioning(ALICE, f"filler {i}"))
        await r.engine.close()  # the summary tail has run: it was built from the first messages
        r.engine.scheduler._closed = False
        state = await r.engine.thread_state(str(GENERAL))
        assert "bkcanary1" in state["summary"]
        r.h.feed("MESSAGE_DELETE_BULK", {"ids": [first["id"], second["id"]], "channel_id": str(GENERAL),
                                         "guild_id": str(GUILD_ID)})
        await settle(r)
        state = await r.engine.thread_state(str(GENERAL))
        assert not state.get("summary")
        assert files_containing(r.data_dir, "bkcanary1") == [] and files_containing(r.data_dir, "bkcanary2") == []
        await r.h.send_message(r.mentioning(ALICE, "still talking"))
        assert r.h.sent_messages(GENERAL)[-1].content.endswith("still talking")


async def test_a_moderator_deleting_the_bots_reply_removes_it_from_the_conversation(r):
    said = r.mentioning(ALICE, "tell me a joke")
    await r.h.send_message(said)
    (reply,) = r.h.sent_messages(GENERAL)
    r.h.feed("MESSAGE_DELETE", {"id": reply.message["id"], "channel_id": str(GENERAL), "guild_id": str(GUILD_ID)})
    await settle(r)
    assert await ais(r) == []
    assert await humans(r) == ["tell me a joke"]  # what Alice said stays


async def test_a_delete_arriving_while_the_message_waits_leaves_nothing(tmp_path):
    async with rig(tmp_path) as r:
        said = r.mentioning(ALICE, "I like out_of_order_canary")
        r.h.feed("MESSAGE_CREATE", said)
        r.h.feed("MESSAGE_DELETE", delete(said))  # before the create was handled
        await settle(r)
        assert r.h.sent_messages(GENERAL) == []
        assert await humans(r) == []
        await r.engine.scheduler.flush()
        assert await contents(r, ALICE) == []


async def test_deleted_thread_and_channel_lose_their_conversation(tmp_path):
    async with rig(tmp_path) as r:
        await r.h.send_message(r.mentioning(ALICE, "in the thread", channel_id=THREAD))
        await r.h.send_message(r.mentioning(ALICE, "in general"))
        assert await humans(r, THREAD) == ["in the thread"]
        r.h.feed("THREAD_DELETE", {"id": str(THREAD), "guild_id": str(GUILD_ID), "parent_id": str(GENERAL), "type": 11})
        await settle(r)
        assert await humans(r, THREAD) == []
        r.h.feed("CHANNEL_DELETE", dict(dh.text_channel(GENERAL, GUILD_ID, "general")))
        await settle(r)
        assert await humans(r, GENERAL) == []
        assert files_containing(r.data_dir, "in the thread") == [] and files_containing(r.data_dir, "in general") == []


async def test_a_deleted_channel_takes_its_archived_threads_along(tmp_path):
    """Discord sends no THREAD_DELETE for the threads of a deleted channel, and discord.py dispatches one
    only for threads it has cached (open ones): an archived thread's conversation went nowhere before.
    Threads of other channels stay."""
    async with rig(tmp_path) as r:
        await r.h.send_message(r.mentioning(ALICE, "archived_canary_1 in the thread", channel_id=THREAD))
        await r.h.send_message(r.mentioning(ALICE, "kept in the listed channel", channel_id=LISTED))
        await r.h.send_message(r.mentioning(ALICE, "words in general"))
        guild = r.bot.get_guild(GUILD_ID)
        guild._remove_thread(guild.get_thread(THREAD))  # archived: no longer in discord.py's cache
        r.h.feed("CHANNEL_DELETE", dict(dh.text_channel(GENERAL, GUILD_ID, "general")))
        await settle(r)
        assert await humans(r, THREAD) == [] and await humans(r, GENERAL) == []
        assert await humans(r, LISTED) == ["kept in the listed channel"]
        assert files_containing(r.data_dir, "archived_canary_1") == []


@pytest.mark.parametrize("gone", ["parent channel deleted", "bot removed from the server"])
async def test_a_turn_waiting_in_a_thread_is_dropped_when_its_channel_or_server_goes(tmp_path, gone):
    """A mention in a thread is being prepared when its parent channel is deleted (Discord sends no
    THREAD_DELETE for the threads) or the bot is removed from the server: it is not answered, the model is
    not called, and nothing of it is stored after the erasure ran (until 2026-12-06 it was answered into
    the void and stored under a thread whose data had gone)."""
    async with rig(tmp_path, chat_model=ScriptedChatModel(no_echo)) as r:
        chat = r.bot.get_cog("Chat")
        real_quotes = chat.quotes
        started = asyncio.Event()

        async def slow_quotes(items):
            started.set()
            await asyncio.sleep(0.5)
            return await real_quotes(items)

        chat.quotes = slow_quotes
        r.h.feed("MESSAGE_CREATE", r.mentioning(ALICE, "thread_canary_7 in the thread", channel_id=THREAD))
        await asyncio.wait_for(started.wait(), 5)
        if gone == "parent channel deleted":
            r.h.feed("CHANNEL_DELETE", dict(dh.text_channel(GENERAL, GUILD_ID, "general")))
        else:
            r.h.feed("GUILD_DELETE", {"id": str(GUILD_ID)})
        await settle(r)
        assert r.model.chat_calls == [] and r.h.sent_messages(THREAD) == []
        assert await humans(r, THREAD) == []
        if gone == "parent channel deleted":
            assert files_containing(r.data_dir, "thread_canary_7") == []


async def test_an_outage_keeps_everything_and_a_removal_deletes_after_the_retention(tmp_path):
    async with rig(tmp_path) as r:
        await r.h.send_message(r.mentioning(ALICE, "I like server_canary_1"))
        await r.engine.scheduler.flush()
        r.h.feed("GUILD_DELETE", {"id": str(GUILD_ID), "unavailable": True})
        await settle(r)
        assert await r.engine.storage.removed_guilds.due(time.time() + 10**9) == []
        r.h.feed("GUILD_CREATE", r.h.guilds[GUILD_ID])
        r.h.feed("GUILD_DELETE", {"id": str(GUILD_ID)})  # removed for good
        await settle(r)
        assert await contents(r, ALICE) == ["I like server_canary_1"]  # kept for the retention period
    async with rig(tmp_path, guilds=(GUILD2,)) as r:  # a restart, without that server: the removal is on record
        assert await r.engine.changes.sweep_removed_servers() == []  # not yet due
        later = time.time() + 8 * 86400
        assert await r.engine.changes.sweep_removed_servers(now=later) == [str(GUILD_ID)]
        assert await contents(r, ALICE) == []
        assert await humans(r) == []
    assert files_containing(tmp_path / "data", "server_canary_1") == []


async def test_removal_with_zero_retention_is_immediate_and_a_return_cancels_it(tmp_path):
    async with rig(tmp_path, retention={"removed_server_days": 0}) as r:
        await r.h.send_message(r.mentioning(ALICE, "I like server_canary_2"))
        await r.engine.scheduler.flush()
        r.h.feed("GUILD_DELETE", {"id": str(GUILD_ID)})
        await settle(r)
        assert await contents(r, ALICE) == []
        assert files_containing(r.data_dir, "server_canary_2") == []
    async with rig(tmp_path) as r:
        await r.engine.changes.server_removed(str(GUILD_ID))
        r.h.feed("GUILD_CREATE", GUILD)  # invited back before the deadline
        await settle(r)
        assert await r.engine.storage.removed_guilds.due(time.time() + 10**9) == []


async def test_edit_delete_and_removal_on_every_backend(tmp_path, backend):
    """The same rules through each storage backend (the byte checks above are SQLite's files)."""
    async with rig(tmp_path, ScriptedChatModel(no_echo), backend, retention={"removed_server_days": 0}) as r:
        edited = r.mentioning(ALICE, "I like tea_before")
        await r.h.send_message(edited)
        await r.engine.scheduler.flush()
        doomed = r.mentioning(ALICE, "I like doomed_fact")
        await r.h.send_message(doomed)
        await r.engine.scheduler.flush()
        assert await contents(r, ALICE) == ["I like doomed_fact", "I like tea_before"]
        forget_cache(r)
        r.h.feed("MESSAGE_UPDATE", partial_update(edited, f"{r.mention()} I like coffee_after"))
        r.h.feed("MESSAGE_DELETE", delete(doomed))
        await settle(r)
        await r.engine.scheduler.flush()
        assert await contents(r, ALICE) == ["I like coffee_after"]
        assert await humans(r) == ["I like coffee_after"]
        await r.h.send_message(r.mentioning(ALICE, "in the thread", channel_id=THREAD))
        r.h.feed("THREAD_DELETE", {"id": str(THREAD), "guild_id": str(GUILD_ID), "parent_id": str(GENERAL), "type": 11})
        await settle(r)
        assert await humans(r, THREAD) == []
        r.h.feed("GUILD_DELETE", {"id": str(GUILD_ID)})
        await settle(r)
        assert await contents(r, ALICE) == [] and await humans(r) == []
        assert await r.engine.inbox.pending() == []


def long_answer(call: Call):
    """An answer longer than one Discord message (split into parts), so deleting it means every part."""
    return default_script(call) if call.is_extraction or "Summarize" in call.messages[-1].text else "long " * 700


DELETE_ROUTE = "/channels/{channel_id}/messages/{message_id}"


async def test_with_delete_replies_on_every_part_of_the_bots_reply_goes_with_the_deleted_message(tmp_path):
    from bot.engine import set_field

    async with rig(tmp_path, ScriptedChatModel(long_answer)) as r:
        kept = r.mentioning(BOB, "and mine")
        said = r.mentioning(ALICE, "answer me at length")
        await r.h.send_message(said)
        parts = [c.response["id"] for c in r.h.sent_messages(GENERAL)]
        assert len(parts) >= 2  # split at 2,000 characters
        await r.h.send_message(kept)
        bobs = [c.response["id"] for c in r.h.sent_messages(GENERAL)][len(parts):]
        r.h.feed("MESSAGE_DELETE", delete(said))  # off by default: the reply stays on Discord
        await settle(r)
        assert r.h.calls_to("DELETE", DELETE_ROUTE) == []
        await r.h.send_message(said)  # (asked again, answered again)
        again = [c.response["id"] for c in r.h.sent_messages(GENERAL)][len(parts) + len(bobs):]
        await r.engine.change_settings(GUILD_ID, set_field("delete_replies", True), by=str(ALICE["id"]))
        r.h.feed("MESSAGE_DELETE", delete(said))
        await settle(r)
        deleted = [c.params["message_id"] for c in r.h.calls_to("DELETE", DELETE_ROUTE)]
        assert sorted(deleted) == sorted(again)  # every part of the answer to it, nothing else (not Bob's)
        assert all(c.params["channel_id"] == str(GENERAL) for c in r.h.calls_to("DELETE", DELETE_ROUTE))
        assert await humans(r) == ["and mine"]


async def test_a_reply_already_gone_or_not_deletable_is_logged_at_debug_and_nothing_breaks(tmp_path, caplog):
    from bot.engine import set_field

    async with rig(tmp_path, ScriptedChatModel(long_answer)) as r:
        await r.engine.change_settings(GUILD_ID, set_field("delete_replies", True), by=str(ALICE["id"]))
        said = r.mentioning(ALICE, "answer me at length")
        await r.h.send_message(said)
        parts = [c.response["id"] for c in r.h.sent_messages(GENERAL)]

        def refuse(call):
            if call.params["message_id"] == str(parts[0]):
                raise dh.http_error(404, 10008, "Unknown Message")
            raise dh.http_error(403, 50013, "Missing Permissions")

        r.h.on("DELETE", DELETE_ROUTE, refuse)
        with caplog.at_level("DEBUG", logger="cogs.message_events"):
            r.h.feed("MESSAGE_DELETE", delete(said))
            await settle(r)
        assert len(r.h.calls_to("DELETE", DELETE_ROUTE)) == len(parts)  # each tried, none crashed the rest
        records = [rec for rec in caplog.records if rec.name == "cogs.message_events" and "reply" in rec.getMessage()]
        assert records and all(rec.levelname == "DEBUG" for rec in records)
        await r.h.send_message(r.mentioning(BOB, "still here"))
        assert r.h.sent_messages(GENERAL)[-1].content.startswith("long")


async def test_settings_show_and_reset_delete_replies(tmp_path):
    from bot.engine import reset, set_field

    async with rig(tmp_path) as r:
        assert (await r.engine.guild_policy(GUILD_ID)).delete_replies is False  # off by default
        await r.engine.change_settings(GUILD_ID, set_field("delete_replies", True), by="1")
        policy = await r.engine.guild_policy(GUILD_ID)
        assert policy.delete_replies and policy.sources["delete_replies"] == "server"
        await r.engine.change_settings(GUILD_ID, reset("delete_replies"), by="1")
        policy = await r.engine.guild_policy(GUILD_ID)
        assert not policy.delete_replies and policy.sources["delete_replies"] == "operator"


def down_for(calls: int, real, error: Exception | None = None):
    """``real`` failing its next ``calls`` calls the way an unreachable database does (or with ``error``)."""
    left = {"n": calls}

    async def call(*args, **kwargs):
        if left["n"] > 0:
            left["n"] -= 1
            raise error or ConnectionError("database unreachable")
        return await real(*args, **kwargs)
    call.left = left
    return call


async def test_a_delete_and_an_edit_during_a_database_outage_are_applied_when_it_is_back(tmp_path, monkeypatch):
    """Discord sends a deletion once: dropped in an outage, the deleted words would stay stored for good.
    The cog retries it (and an edit) until the database answers again."""
    import cogs.message_events as events

    async with rig(tmp_path) as r:
        gone, kept = r.mentioning(ALICE, "I like okapi_outage_1"), r.mentioning(ALICE, "I like rowing")
        await r.h.send_message(gone)
        await r.h.send_message(kept)
        await r.engine.scheduler.flush()
        deleted = down_for(1, r.engine.messages_deleted)
        edited = down_for(1, r.engine.message_edited)
        monkeypatch.setattr(r.engine, "messages_deleted", deleted)
        monkeypatch.setattr(r.engine, "message_edited", edited)
        monkeypatch.setattr(events, "RETRY_FIRST_DELAY", 0.01)  # the backoff, without waiting a second
        forget_cache(r)
        r.h.feed("MESSAGE_DELETE", delete(gone))
        r.h.feed("MESSAGE_UPDATE", partial_update(kept, "I like sailing"))
        cog = r.bot.get_cog("MessageEvents")
        for _ in range(100):
            if cog._retrying:
                break
            await asyncio.sleep(0.01)
        assert cog._retrying  # waiting for the database, not dropped
        await asyncio.wait_for(asyncio.gather(*cog._retrying), 20)
        await settle(r)
        assert deleted.left["n"] == 0 and edited.left["n"] == 0  # both failed first and were tried again
        assert await humans(r) == ["I like sailing"]
        assert "okapi_outage_1" not in " ".join(await contents(r, ALICE))


async def test_a_removal_from_a_server_and_its_return_in_an_outage_are_retried_newest_last(tmp_path, monkeypatch):
    """Discord sends GUILD_DELETE and GUILD_CREATE once. Dropped in an outage, a removal kept the server's
    data past the promise, and a return missed let the hourly sweep delete the data of a server the bot is
    back in. Both wait the outage out; a removal superseded by a return meanwhile is not applied."""
    import cogs.message_events as events

    async with rig(tmp_path) as r:
        monkeypatch.setattr(events, "RETRY_FIRST_DELAY", 0.01)
        removed = down_for(2, r.engine.server_removed)
        monkeypatch.setattr(r.engine, "server_removed", removed)
        cog = r.bot.get_cog("MessageEvents")
        r.h.feed("GUILD_DELETE", {"id": str(OTHER_GUILD)})
        for _ in range(100):
            if cog._retrying:
                break
            await asyncio.sleep(0.01)
        await asyncio.wait_for(asyncio.gather(*cog._retrying), 20)
        assert removed.left["n"] == 0  # failed, then tried again
        assert [g for g in await r.engine.storage.removed_guilds.due(time.time() + 10**9)] == [str(OTHER_GUILD)]

        calls: list[str] = []
        removed.left["n"] = 1

        async def counted(guild_id):
            calls.append(guild_id)
            return await removed(guild_id)

        monkeypatch.setattr(r.engine, "server_removed", counted)
        r.h.feed("GUILD_DELETE", {"id": str(GUILD_ID)})  # removed in an outage ...
        await asyncio.sleep(0)
        r.h.feed("GUILD_CREATE", GUILD)  # ... and added back, recorded at once, before the removal's retry
        await settle(r)
        await asyncio.wait_for(asyncio.gather(*cog._retrying), 20)
        assert calls == [str(GUILD_ID)]  # the failed first try only: the retry saw the return was newer
        assert [g for g in await r.engine.storage.removed_guilds.due(time.time() + 10**9)] == [str(OTHER_GUILD)]


async def test_a_deletion_that_lost_the_erasure_lock_and_a_thread_deleted_in_an_outage_are_retried(
        tmp_path, monkeypatch):
    """A deletion gives way when the global erasure lock's connection is lost (``ErasureLockLost``) before
    its journal row is written, and a thread's deletion can meet an outage: Discord sends either once, so
    both are tried again until they are done, not logged and dropped."""
    import cogs.message_events as events
    from bot.engine.stores.locks import ErasureLockLost

    async with rig(tmp_path) as r:
        gone = r.mentioning(ALICE, "I like okapi_lock_lost")
        await r.h.send_message(gone)
        await r.h.send_message(r.mentioning(ALICE, "I like threadbare_canary", channel_id=THREAD))
        await r.engine.scheduler.flush()
        deleted = down_for(1, r.engine.messages_deleted, ErasureLockLost("the erasure lock went with its connection"))
        thread_gone = down_for(1, r.engine.channel_deleted)
        monkeypatch.setattr(r.engine, "messages_deleted", deleted)
        monkeypatch.setattr(r.engine, "channel_deleted", thread_gone)
        monkeypatch.setattr(events, "RETRY_FIRST_DELAY", 0.01)
        r.h.feed("MESSAGE_DELETE", delete(gone))
        r.h.feed("THREAD_DELETE", {"id": str(THREAD), "guild_id": str(GUILD_ID), "parent_id": str(GENERAL),
                                   "type": 11})
        cog = r.bot.get_cog("MessageEvents")
        for _ in range(100):
            if len(cog._retrying) == 2:
                break
            await asyncio.sleep(0.01)
        assert len(cog._retrying) == 2  # both waiting, not dropped
        await asyncio.wait_for(asyncio.gather(*cog._retrying), 20)
        await settle(r)
        assert deleted.left["n"] == 0 and thread_gone.left["n"] == 0
        assert await humans(r) == []
        assert (await r.engine.thread_state(str(THREAD))).get("messages") in (None, [])


async def test_of_two_edits_waiting_for_the_database_the_newer_one_is_what_stays(tmp_path, monkeypatch):
    """An edit waiting out an outage is replaced by a newer edit of the same message: applied late, the
    older text would overwrite the newer one."""
    import cogs.message_events as events

    async with rig(tmp_path) as r:
        said = r.mentioning(ALICE, "I like rowing")
        await r.h.send_message(said)
        await r.engine.scheduler.flush()
        real_edit, gate = r.engine.message_edited, asyncio.Event()
        applied = []

        async def held_until_back(thread_id, message_id, text, **kwargs):
            if not gate.is_set():
                raise ConnectionError("database unreachable")
            applied.append(text)
            return await real_edit(thread_id, message_id, text, **kwargs)

        monkeypatch.setattr(r.engine, "message_edited", held_until_back)
        monkeypatch.setattr(events, "RETRY_FIRST_DELAY", 0.05)
        forget_cache(r)
        cog = r.bot.get_cog("MessageEvents")
        r.h.feed("MESSAGE_UPDATE", partial_update(said, "I like sailing"))
        for _ in range(100):
            if cog._retrying:
                break
            await asyncio.sleep(0.01)
        (older,) = cog._retrying
        r.h.feed("MESSAGE_UPDATE", partial_update(said, "I like canoeing"))
        for _ in range(100):
            if len(cog._retrying | {older}) == 2:
                break
            await asyncio.sleep(0.01)
        (newer,) = cog._retrying - {older}
        gate.set()
        await asyncio.wait_for(asyncio.gather(older, newer), 20)
        await settle(r)
        assert applied == ["I like canoeing"]
        assert await humans(r) == ["I like canoeing"]


async def test_an_older_edit_failing_after_a_newer_one_landed_is_not_retried(tmp_path, monkeypatch):
    """Edit A is still being applied when edit B arrives and lands; A then fails on an outage. Retried, A
    would write its older text over B's: it is dropped instead."""
    async with rig(tmp_path) as r:
        said = r.mentioning(ALICE, "I like rowing")
        await r.h.send_message(said)
        await r.engine.scheduler.flush()
        real_edit, release, entered = r.engine.message_edited, asyncio.Event(), asyncio.Event()
        applied = []

        async def slow_then_down_for_the_first(thread_id, message_id, text, **kwargs):
            if text == "I like sailing":
                entered.set()
                await release.wait()
                raise ConnectionError("database unreachable")
            applied.append(text)
            return await real_edit(thread_id, message_id, text, **kwargs)

        monkeypatch.setattr(r.engine, "message_edited", slow_then_down_for_the_first)
        forget_cache(r)
        cog = r.bot.get_cog("MessageEvents")
        r.h.feed("MESSAGE_UPDATE", partial_update(said, "I like sailing"))
        await asyncio.wait_for(entered.wait(), 5)
        r.h.feed("MESSAGE_UPDATE", partial_update(said, "I like canoeing"))
        for _ in range(200):
            if applied:
                break
            await asyncio.sleep(0.01)
        release.set()
        await settle(r)
        assert applied == ["I like canoeing"] and not cog._retrying
        assert await humans(r) == ["I like canoeing"]


async def _delete_while_sending(r, *, delete_replies: bool) -> tuple[list, list, dict]:
    """Alice's message is deleted while its (already written) answer is being sent."""
    from bot.engine import set_field
    from cogs import _replying

    if delete_replies:
        await r.engine.change_settings(GUILD_ID, set_field("delete_replies", True), by=str(ALICE["id"]))
    sending = asyncio.Event()
    real_finish = _replying.ReplyWriter.finish

    async def slow_finish(self, text):  # the REST send of a long reply takes a moment
        sending.set()
        await asyncio.sleep(0.3)
        return await real_finish(self, text)

    said = r.mentioning(ALICE, "hello there")
    _replying.ReplyWriter.finish = slow_finish
    try:
        r.h.feed("MESSAGE_CREATE", said)
        await asyncio.wait_for(sending.wait(), 5)
        r.h.feed("MESSAGE_DELETE", delete(said))
        await settle(r)
    finally:
        _replying.ReplyWriter.finish = real_finish
    sent = [c for c in r.h.sent_messages(GENERAL) if c.response]
    deleted = [c.params["message_id"] for c in r.h.calls_to("DELETE", DELETE_ROUTE)]
    return sent, deleted, said


async def test_a_message_deleted_while_its_answer_is_sent_takes_the_reply_when_the_server_asks(tmp_path):
    """The deletion ran before the reply existed on Discord, so it found none to remove; with
    delete-replies on, the reply is removed once sent, as it would have been a moment later."""
    async with rig(tmp_path) as r:
        sent, deleted, _ = await _delete_while_sending(r, delete_replies=True)
        assert sent and sorted(deleted) == sorted(c.response["id"] for c in sent)
        assert await humans(r) == [] and await ais(r) == []


async def test_an_answer_whose_message_was_deleted_meanwhile_is_still_posted(tmp_path):
    """Discord refuses a reply to a deleted message unless the reference says fail_if_not_exists=false
    (the harness does as Discord does); the bot says it, so the answer is posted as a plain message
    instead of being lost (with delete-replies off it stays)."""
    async with rig(tmp_path) as r:
        sent, deleted, said = await _delete_while_sending(r, delete_replies=False)
        assert len(sent) == 1 and deleted == []
        assert sent[0].json["message_reference"]["fail_if_not_exists"] is False
        assert "message_reference" not in sent[0].response  # posted without the reference: it was gone


async def update_while_gathering(r, said: dict, content: str | dict, *, uncached: bool = False) -> int:
    """Send ``said``; while its answer gathers context (a channel-history or reply-chain fetch taking half a
    second), Discord sends a MESSAGE_UPDATE with ``content`` (a partial update; or ``content`` is the whole
    payload to send). Returns how many times context was gathered. ``uncached``: discord.py's message cache
    has dropped the message by then (a busy bot: 1,000 messages for the whole process)."""
    chat = r.bot.get_cog("Chat")
    real_quotes = chat.quotes
    started = asyncio.Event()
    gathered = 0

    async def slow_quotes(items):
        nonlocal gathered
        gathered += 1
        started.set()
        await asyncio.sleep(0.5)
        return await real_quotes(items)

    chat.quotes = slow_quotes
    r.h.feed("MESSAGE_CREATE", said)
    await asyncio.wait_for(started.wait(), 5)
    if uncached:
        forget_cache(r)
    r.h.feed("MESSAGE_UPDATE", content if isinstance(content, dict) else partial_update(said, content))
    await settle(r)
    return gathered


async def test_an_edit_while_the_answer_gathers_its_context_is_what_gets_answered_stored_and_learned(tmp_path):
    """Someone fixes a typo a second after sending, while the bot fetches the channel's history or a reply
    chain: nothing is stored yet, so the events cog has nothing to edit; the turn starts again with the new
    text instead of storing and learning the old one."""
    async with rig(tmp_path, chat_model=ScriptedChatModel(no_echo)) as r:
        said = r.mentioning(ALICE, "I like tea_before_edit")
        gathered = await update_while_gathering(r, said, f"{r.mention()} I like coffee_after_edit")
        assert gathered == 2  # started again
        assert await humans(r) == ["I like coffee_after_edit"]
        assert len(r.h.sent_messages(GENERAL)) == 1  # one answer, to the new text
        assert all("tea_before_edit" not in c.prompt_text for c in r.model.chat_calls)
        await r.engine.scheduler.flush()
        assert await contents(r, ALICE) == ["I like coffee_after_edit"]
        assert files_containing(r.data_dir, "tea_before_edit") == []


async def test_an_edit_while_the_model_is_answering_leaves_the_old_text_in_no_file(tmp_path):
    """Later than the gathering: the model is already answering the first text. The cancelled attempt writes
    it as it ends; the restarted turn stores the new text over it and prunes, and the edit's own erasure
    compacts: no file keeps the old words."""
    answering = asyncio.Event()

    def slow_first_answer(call: Call):
        if not call.is_extraction and "Summarize" not in call.messages[-1].text and not answering.is_set():
            answering.set()
            time.sleep(1.0)  # the model's thread; the turn's task is cancelled meanwhile
        return no_echo(call)

    async with rig(tmp_path, chat_model=ScriptedChatModel(slow_first_answer)) as r:
        said = r.mentioning(ALICE, "I like tea_before_edit")
        r.h.feed("MESSAGE_CREATE", said)
        await asyncio.wait_for(answering.wait(), 5)
        r.h.feed("MESSAGE_UPDATE", partial_update(said, f"{r.mention()} I like coffee_after_edit"))
        await settle(r)
        assert await humans(r) == ["I like coffee_after_edit"]
        assert len(r.h.sent_messages(GENERAL)) == 1
        await r.engine.scheduler.flush()
        assert await contents(r, ALICE) == ["I like coffee_after_edit"]
        assert files_containing(r.data_dir, "tea_before_edit") == []


@pytest.mark.parametrize("uncached", [False, True], ids=["cached", "uncached"])
async def test_a_file_removed_while_the_answer_gathers_its_context_is_neither_answered_nor_kept(tmp_path, uncached):
    """Someone sends a text file by mistake and removes it a second later (same text, fewer attachments):
    the turn starts again without the file, so its words are neither answered, stored nor learned. Also
    when discord.py no longer holds the message (it then updates no copy the turn could read)."""
    async with rig(tmp_path, chat_model=ScriptedChatModel(no_echo)) as r:
        url = "https://cdn.discordapp.com/attachments/1/2/wrong.txt"
        r.h.cdn[url] = b"wrongfile_canary_words"
        wrong = dh.attachment(dh.snowflake(), "wrong.txt", size=22, url=url, content_type="text/plain")
        said = r.mentioning(ALICE, "I like tea_with_a_file", attachments=[wrong])
        removed = {**said, "attachments": [], "edited_timestamp": dh.discord.utils.utcnow().isoformat()}
        assert await update_while_gathering(r, said, removed, uncached=uncached) == 2  # started again
        assert all("wrongfile_canary_words" not in c.prompt_text for c in r.model.chat_calls[1:])
        assert "wrongfile_canary_words" not in " ".join(await humans(r))
        await r.engine.scheduler.flush()
        assert files_containing(r.data_dir, "wrongfile_canary_words") == []


async def test_an_edit_while_the_model_answers_replaces_the_stored_text_once(tmp_path):
    """The edit lands during the model call: the first attempt may already have written the old text into
    the thread; the restarted turn replaces that copy (one message, the new text), and only it is learned."""
    import threading

    calling = threading.Event()

    def slow(call: Call):
        if call.is_extraction or "Summarize" in call.messages[-1].text:
            return default_script(call)
        calling.set()
        time.sleep(0.4)  # a model call in flight (in the model's worker thread)
        return "Noted!"

    async with rig(tmp_path, chat_model=ScriptedChatModel(slow)) as r:
        said = r.mentioning(ALICE, "I like tea_before_edit")
        r.h.feed("MESSAGE_CREATE", said)
        await asyncio.wait_for(asyncio.to_thread(calling.wait, 5), 6)
        r.h.feed("MESSAGE_UPDATE", partial_update(said, f"{r.mention()} I like coffee_after_edit"))
        await settle(r)
        assert await humans(r) == ["I like coffee_after_edit"]
        await r.engine.scheduler.flush()
        assert await contents(r, ALICE) == ["I like coffee_after_edit"]


async def test_the_same_text_again_while_answering_does_not_start_the_answer_over(tmp_path):
    """A link preview unfolding re-sends the message with the same text: the answer in progress goes on."""
    async with rig(tmp_path, chat_model=ScriptedChatModel(no_echo)) as r:
        said = r.mentioning(ALICE, "look at https://example.com")
        gathered = await update_while_gathering(r, said, said["content"])
        assert gathered == 1 and len(r.model.chat_calls) == 1
        assert await humans(r) == ["look at https://example.com"]


async def test_edits_that_restart_an_answer_are_within_the_persons_limits(tmp_path):
    """A hostile member edits the message being answered over and over: each restart is a new answer, so it
    takes a token like a message. With none left the new attempt waits for the next one; an edit while it
    waits costs nothing, the attempt reads the latest text (until 2026-12-06 each edit made a model call at
    once, none of them charged)."""
    async with rig(tmp_path, chat_model=ScriptedChatModel(no_echo), limits={"burst": 2, "refill_seconds": 2.0}) as r:
        chat = r.bot.get_cog("Chat")
        real_quotes = chat.quotes
        started: list[str] = []

        async def slow_quotes(items):
            started.append(items[-1].content.split("> ", 1)[-1])  # without the mention
            await asyncio.sleep(0.5)
            return await real_quotes(items)

        chat.quotes = slow_quotes
        said = r.mentioning(ALICE, "I like tea_0")  # the first token
        r.h.feed("MESSAGE_CREATE", said)
        for n in (1, 2, 3):
            while len(started) < min(n, 2):
                await asyncio.sleep(0.01)
            r.h.feed("MESSAGE_UPDATE", partial_update(said, f"{r.mention()} I like tea_{n}"))
            await asyncio.sleep(0.1)
        # Edit 1 took the second token and started again at once; edit 2 reserved the next (2 s away), and
        # edit 3 came while the turn waited for it.
        await asyncio.sleep(0.5)
        assert started == ["I like tea_0", "I like tea_1"] and r.model.chat_calls == []
        await settle(r)  # a refill later: answered once, with the last text
        assert started[-1] == "I like tea_3" and len(started) == 3
        assert len(r.model.chat_calls) == 1 and len(r.h.sent_messages(GENERAL)) == 1
        assert await humans(r) == ["I like tea_3"]


def heard_slowly(r) -> asyncio.Event:
    """Every message is over the rate limit (heard, not answered), and its text takes a while to read
    after it is built (a download, say): the event is set when the first one is being read."""
    chat = r.bot.get_cog("Chat")
    real_incoming = chat.incoming
    started = asyncio.Event()

    async def slow_incoming(items, **kw):
        out = await real_incoming(items, **kw)
        started.set()
        await asyncio.sleep(0.3)
        return out

    chat.incoming = slow_incoming
    r.engine.admit = lambda _user: False  # over the limit: heard, not answered
    return started


async def test_an_edit_while_a_heard_message_is_being_recorded_is_applied_once_it_is_stored(tmp_path):
    """A message over the rate limit is recorded without an answer; edited while its text is read (a text
    attachment being downloaded, say), the edit found nothing stored yet: it is applied once the message is."""
    async with rig(tmp_path, chat_model=ScriptedChatModel(no_echo)) as r:
        started = heard_slowly(r)
        said = r.mentioning(ALICE, "I like tea_before_edit")
        r.h.feed("MESSAGE_CREATE", said)
        await asyncio.wait_for(started.wait(), 5)
        r.h.feed("MESSAGE_UPDATE", partial_update(said, f"{r.mention()} I like coffee_after_edit"))
        await settle(r)
        assert await humans(r) == ["I like coffee_after_edit"]
        assert r.model.chat_calls == []
        await r.engine.scheduler.flush()
        assert files_containing(r.data_dir, "tea_before_edit") == []


async def test_edits_of_other_bots_and_webhooks_messages_are_not_looked_at(tmp_path):
    """Another AI bot streams its answer by editing its message once a second; nothing of it is ever
    stored here, so its edits take no lock and read nothing."""
    from contextlib import asynccontextmanager

    async with rig(tmp_path) as r:
        taken = []
        real = r.engine.eraser._exclusive

        @asynccontextmanager
        async def counting():
            taken.append(1)
            async with real():
                yield

        r.engine.eraser._exclusive = counting
        payload = dh.message(dh.snowflake(), GENERAL, dh.member(OTHER_BOT), "streaming 1", guild_id=GUILD_ID)
        r.h.feed("MESSAGE_CREATE", payload)
        for i in range(2, 6):
            r.h.feed("MESSAGE_UPDATE", {**payload, "content": f"streaming {i}",
                                        "edited_timestamp": dh.discord.utils.utcnow().isoformat()})
        hook = dh.message(dh.snowflake(), GENERAL, dh.user(555, "hook"), "x", guild_id=GUILD_ID)
        r.h.feed("MESSAGE_CREATE", {**hook, "webhook_id": "555"})
        r.h.feed("MESSAGE_UPDATE", {**hook, "webhook_id": "555", "content": "y",
                                    "edited_timestamp": dh.discord.utils.utcnow().isoformat()})
        await settle(r)
        assert taken == []
        said = r.mentioning(ALICE, "I like tea")  # a member's edit still goes through
        await r.h.send_message(said)
        await settle(r)
        r.h.feed("MESSAGE_UPDATE", partial_update(said, f"{r.mention()} I like coffee"))
        await settle(r)
        assert taken and await humans(r) == ["I like coffee"]


async def test_deleting_a_message_the_bot_only_quoted_cuts_it_from_the_answer_that_repeated_it(tmp_path):
    """Alice never spoke to the bot; Bob replied to her message asking the bot about it, and the answer
    repeated it. Her deletion found no stored text and left the words in the answer. discord.py's cache
    still held her message: its text is handed to the deletion, and the answer loses the words."""
    code = "locker code QZ3344ML opens it"

    def repeating(call: Call):
        if not call.is_extraction and code in call.prompt_text and "Summarize" not in call.messages[-1].text:
            return f"She said: {code}."
        return no_echo(call)

    async with rig(tmp_path, chat_model=ScriptedChatModel(repeating)) as r:
        note = r.msg(ALICE, f"my {code}")
        await r.h.send_message(note)
        await r.h.send_message(r.mentioning(BOB, "what did she say?", referenced_message=note))
        await settle(r)
        assert not any(code in h for h in await humans(r))  # never stored: only shown as the reply's context
        assert any(code in m.text for m in await ais(r))
        r.h.feed("MESSAGE_DELETE", delete(note))
        await settle(r)
        texts = [m.text for m in await ais(r)]
        assert not any(code in t for t in texts) and any("[erased]" in t for t in texts)
        assert all(code not in t.ai for t in await r.engine.storage.inbox.every_turn())


async def test_a_file_removed_while_a_heard_message_is_being_recorded_is_not_kept(tmp_path):
    """Over the rate limit, a message with a text file is recorded without an answer; its author removes
    the file while it downloads (same text, no attachments). Only the text was compared, so the file's
    words were stored and learned; the file's removal is applied once the message is stored."""
    async with rig(tmp_path, chat_model=ScriptedChatModel(no_echo)) as r:
        url = "https://cdn.discordapp.com/attachments/1/2/wrong.txt"
        r.h.cdn[url] = b"heardfile_canary_words"
        wrong = dh.attachment(dh.snowflake(), "wrong.txt", size=22, url=url, content_type="text/plain")
        started = heard_slowly(r)
        said = r.mentioning(ALICE, "I like tea_with_a_heard_file", attachments=[wrong])
        r.h.feed("MESSAGE_CREATE", said)
        await asyncio.wait_for(started.wait(), 5)
        r.h.feed("MESSAGE_UPDATE", {**said, "attachments": [], "edited_timestamp": dh.discord.utils.utcnow().isoformat()})
        await settle(r)
        assert any("tea_with_a_heard_file" in h for h in await humans(r))
        assert "heardfile_canary_words" not in " ".join(await humans(r))
        await r.engine.scheduler.flush()
        assert files_containing(r.data_dir, "heardfile_canary_words") == []
