"""cogs/chat.py through real discord.py objects: who gets answered, how replies look, ordering."""

from __future__ import annotations

import asyncio
import logging

import discord

from langchain_core.messages import HumanMessage

from cogs.chat import APOLOGY

from tests.cogs.conftest import (
    ALICE,
    BOB,
    GENERAL,
    GUILD_ID,
    LISTED,
    OTHER_BOT,
    THREAD,
    rig,
)
from tests.conftest import Call, ScriptedChatModel, default_script
from tests.fakes import discord_harness as dh


async def test_mention_in_server_gets_a_reply_to_that_message_without_pings(r):
    original = r.mentioning(ALICE, "hello there @everyone")
    calls = await r.h.send_message(original)
    assert any(c.template == "/channels/{channel_id}/typing" for c in calls)
    (sent,) = r.h.sent_messages(GENERAL)
    assert str(sent.json["message_reference"]["message_id"]) == original["id"]
    assert sent.json["allowed_mentions"] == {"parse": [], "replied_user": False}
    # The model saw the text without the bot's mention, with the author's display name and ID.
    prompt = r.model.chat_calls[-1].prompt_text
    assert "[Alice | user 802]\n> hello there @everyone" in prompt
    assert f"<@{dh.BOT_ID}>" not in prompt


async def test_a_reply_counts_time_words_from_when_the_message_was_sent(r):
    """"Yesterday" means the day before the message was sent: Discord's snowflake carries that moment, and the
    memory choice reads it from the stored message (a reply computed later, after a queue, keeps it)."""
    from datetime import datetime, timedelta, timezone

    import discord

    from bot.engine.recall.temporal import reply_time

    sent = (datetime.now(timezone.utc) - timedelta(minutes=10)).replace(microsecond=0)
    payload = r.mentioning(ALICE, "what did I do yesterday?")
    payload["id"] = str(discord.utils.time_snowflake(sent))
    await r.h.send_message(payload)
    assert r.h.sent_messages(GENERAL), "answered"
    messages = (await r.engine.thread_state(str(GENERAL)))["messages"]
    (human,) = [m for m in messages if isinstance(m, HumanMessage)]
    assert datetime.fromisoformat(human.additional_kwargs["sent_at"]) == sent
    assert reply_time(messages) == sent


async def test_a_message_delivered_twice_is_answered_once(r):
    """A gateway RESUME can replay a MESSAGE_CREATE the bot already handled: one reply, one stored turn."""
    said = r.mentioning(ALICE, "what is a good name for a cat?")
    await r.h.send_message(said)
    await r.h.send_message(dict(said))
    assert len(r.h.sent_messages(GENERAL)) == 1
    assert len([c for c in r.model.chat_calls if not c.is_extraction]) == 1
    messages = (await r.engine.thread_state(str(GENERAL)))["messages"]
    assert [m.text for m in messages if isinstance(m, HumanMessage)] == ["what is a good name for a cat?"]


async def test_dm_gets_a_reply(r):
    dm = r.h.dm(ALICE)
    await r.h.send_message(r.msg(ALICE, "hi in a DM", channel_id=dm["id"], guild_id=None))
    (sent,) = r.h.sent_messages(dm["id"])
    assert sent.content == "reply to [Alice | user 802]\n> hi in a DM"


async def test_a_message_from_a_server_this_process_does_not_know_is_not_taken_for_a_dm(r, caplog):
    """discord.py gives such a message no guild (its GUILD_CREATE was lost): it must not be answered without
    a mention, nor kept and learned in the DM scope."""
    unknown_guild, channel = 7770, 7771
    await r.h.send_message(r.msg(ALICE, "no mention, and not a DM", channel_id=channel, guild_id=unknown_guild))
    assert r.h.sent_messages() == []
    assert r.model.calls == []
    assert not ((await r.engine.thread_state(str(channel))) or {}).get("messages")
    assert any("does not know" in rec.getMessage() for rec in caplog.records)


async def test_messages_not_for_the_bot_get_nothing(r):
    await r.h.send_message(r.mentioning(OTHER_BOT, "I am a bot"))
    await r.h.send_message(r.msg(ALICE, "just chatting, no mention"))
    await r.h.send_message(r.mentioning(ALICE, "via webhook", webhook_id=str(dh.snowflake())))
    await r.h.send_message(r.msg(r.h.bot_user, "my own message"))
    await r.h.send_message(r.mentioning(ALICE, "pinned", type=6))
    assert r.h.sent_messages() == []
    assert r.model.calls == []


async def test_listed_channel_and_reply_to_bot_trigger_answers(r):
    await r.h.send_message(r.msg(ALICE, "no mention needed here", channel_id=LISTED))
    (mine,) = r.h.sent_messages(LISTED)
    await r.h.send_message(r.msg(BOB, "replying to you", channel_id=LISTED, referenced_message=mine.message))
    await r.h.send_message(r.msg(BOB, "a thread reply", channel_id=GENERAL))
    assert len(r.h.sent_messages(LISTED)) == 2
    assert r.h.sent_messages(GENERAL) == []


async def test_a_reply_to_the_bots_answer_shows_that_answer_once_as_its_own(r):
    """The answer replied to is in the thread (the assistant's message): it was quoted again as a message of
    some "bot", and nothing told the model that bot was itself (a webhook can take any name). A message of
    its own the thread no longer holds is quoted as its own."""
    await r.h.send_message(r.msg(ALICE, "tell me about otters", channel_id=LISTED))
    (mine,) = r.h.sent_messages(LISTED)
    await r.h.send_message(r.msg(BOB, "replying to you", channel_id=LISTED, referenced_message=mine.message))
    prompt = r.model.chat_calls[-1].prompt_text
    assert f"bot {dh.BOT_ID}]" not in prompt and "your own earlier message" not in prompt
    old = dh.message(dh.snowflake(), LISTED, r.h.bot_user, "an answer from long ago")  # not in the thread
    await r.h.send_message(r.msg(BOB, "about this one", channel_id=LISTED, referenced_message=old))
    prompt = r.model.chat_calls[-1].prompt_text
    assert "[you, the assistant (your own earlier message)]\n> an answer from long ago" in prompt


async def test_a_reply_to_the_bot_without_the_referenced_message_in_its_payload_is_answered(r):
    """Discord leaves ``referenced_message`` out when it did not look the message up; the reply (ping off,
    so no mention) is still to the bot: the cached message says whose it is."""
    await r.h.send_message(r.mentioning(ALICE, "hello there"))
    (mine,) = r.h.sent_messages(GENERAL)
    r.h.feed("MESSAGE_CREATE", mine.message)  # the gateway echoes the bot's own message (into the cache)
    reply = r.msg(BOB, "replying to you without a ping", referenced_message=mine.message)
    del reply["referenced_message"]
    assert reply["message_reference"]["message_id"] == mine.message["id"] and reply["type"] == 19
    await r.h.send_message(reply)
    assert len(r.h.sent_messages(GENERAL)) == 2
    # A forward of the bot's message is sharing it, not speaking to the bot.
    fwd = r.msg(BOB, "", referenced_message=mine.message, type=0)
    del fwd["referenced_message"]
    fwd["message_reference"]["type"] = 1  # FORWARD
    fwd["message_snapshots"] = [{"message": {"content": mine.message["content"], "type": 0,
                                             "timestamp": mine.message["timestamp"], "edited_timestamp": None,
                                             "flags": 0, "attachments": [], "embeds": [], "mentions": [],
                                             "mention_roles": [], "components": []}}]
    fwd["flags"] = 1 << 14  # HAS_SNAPSHOT
    await r.h.send_message(fwd)
    assert len(r.h.sent_messages(GENERAL)) == 2
    # A reply to someone else's message without the field is not for the bot.
    note = r.msg(ALICE, "just a note, not for the bot")
    await r.h.send_message(note)
    other = r.msg(BOB, "replying to alice", referenced_message=note)
    del other["referenced_message"]
    await r.h.send_message(other)
    assert len(r.h.sent_messages(GENERAL)) == 2


async def test_seed_scenario_across_two_discord_threads(tmp_path):
    async with rig(tmp_path) as r:
        for text in ["Hi, my name is Lance", "I like to bike around San Francisco", "I also enjoy going to bakeries"]:
            await r.h.send_message(r.mentioning(ALICE, text, channel_id=GENERAL))
        await r.engine.scheduler.flush()
        await r.h.send_message(r.mentioning(ALICE, "What bakeries do you recommend for me?", channel_id=THREAD))
        system = r.model.chat_calls[-1].system
        for fact in ["my name is Lance", "I like to bike around San Francisco", "I also enjoy going to bakeries"]:
            assert fact in system
        (reply,) = r.h.sent_messages(THREAD)
        assert "What bakeries" in reply.content
        # Thread state is per channel: the thread holds only its own conversation.
        state = await r.engine.thread_state(str(THREAD))
        assert [m.text for m in state["messages"] if isinstance(m, HumanMessage)] == ["What bakeries do you recommend for me?"]
        memories = await r.engine.memories.list(str(ALICE["id"]))
        assert {m.origin["guild_id"] for m in memories} == {str(GUILD_ID)}
        assert {m.origin["channel_id"] for m in memories} == {str(GENERAL)}


def long_reply(call: Call) -> str:
    if call.is_extraction:
        return default_script(call)
    prose = ("This paragraph explains the plan in some detail, one sentence at a time. " * 6).strip()
    code = "\n".join(f"    total += step_{i}(value)  # accumulate" for i in range(40))
    blocks = [prose, f"```python\ndef run(value):\n    total = 0\n{code}\n    return total\n```", prose, prose]
    text = "\n\n".join(blocks * 3)
    return text[:5000]


async def test_a_5000_character_reply_arrives_as_three_messages_with_balanced_fences(tmp_path):
    async with rig(tmp_path, chat_model=ScriptedChatModel(long_reply)) as r:
        await r.h.send_message(r.mentioning(ALICE, "explain at length"))
        sent = r.h.sent_messages(GENERAL)
    assert len(sent) == 3
    for part in sent:
        assert len(part.content) <= 2000
        assert sum(1 for line in part.content.split("\n") if line.strip().startswith("```")) % 2 == 0
        assert part.json["allowed_mentions"]["parse"] == []
    assert sent[0].json.get("message_reference") is not None


async def test_two_messages_in_one_channel_are_answered_in_order(tmp_path):
    def slow_first(call: Call):
        return default_script(call)

    model = ScriptedChatModel(slow_first)
    async with rig(tmp_path, chat_model=model) as r:
        first = r.mentioning(ALICE, "first question")
        second = r.mentioning(BOB, "second question")
        r.h.feed("MESSAGE_CREATE", first)
        r.h.feed("MESSAGE_CREATE", second)
        await r.h.settle(timeout=10)
        sent = r.h.sent_messages(GENERAL)
    assert [str(s.json["message_reference"]["message_id"]) for s in sent] == [first["id"], second["id"]]
    assert "first question" in sent[0].content and "second question" in sent[1].content
    # The second prompt already contains the first exchange: handled one after the other.
    assert "first question" in model.chat_calls[1].prompt_text


async def test_twenty_channels_at_once_are_all_answered(tmp_path):
    channels = [dh.text_channel(2000 + i, GUILD_ID, f"room-{i}") for i in range(20)]
    async with rig(tmp_path, discord={"respond_channels": [c["id"] for c in channels]}) as r:
        for c in channels:
            r.h.feed("CHANNEL_CREATE", c)
        for c in channels:
            r.h.feed("MESSAGE_CREATE", r.msg(ALICE, f"hello room {c['id']}", channel_id=int(c["id"])))
        await r.h.settle(timeout=20)
        for c in channels:
            (sent,) = r.h.sent_messages(int(c["id"]))
            assert f"hello room {c['id']}" in sent.content


async def test_model_failure_gets_one_apology_and_the_thread_stays_usable(tmp_path, caplog):
    state = {"fail": True}

    def flaky(call: Call):
        if state["fail"] and not call.is_extraction:
            raise RuntimeError("upstream exploded")
        return default_script(call)

    async with rig(tmp_path, chat_model=ScriptedChatModel(flaky)) as r:
        await r.h.send_message(r.mentioning(ALICE, "will this work?"))
        (apology,) = r.h.sent_messages(GENERAL)
        assert apology.content.startswith("Sorry")
        assert "upstream exploded" not in apology.content
        assert "upstream exploded" in caplog.text
        state["fail"] = False
        await r.h.send_message(r.mentioning(ALICE, "and now?"))
        assert r.h.sent_messages(GENERAL)[-1].content == "reply to [Alice | user 802]\n> and now?"


async def test_settings_that_cannot_be_read_get_a_mention_an_apology_not_silence(tmp_path, caplog):
    """The database is down and this process never read the server's settings: someone who spoke to the
    bot is told (once per burst); a message not addressed to it gets nothing."""
    async with rig(tmp_path) as r:
        real = r.engine.policies.server

        async def down(*args, **kwargs):
            raise ConnectionError("database unreachable")

        r.engine.policies.server = down
        await r.h.send_message(r.msg(BOB, "just chatting, not to the bot"))
        assert r.h.sent_messages(GENERAL) == []
        await r.h.send_message(r.mentioning(ALICE, "hi, are you there?"))
        (apology,) = r.h.sent_messages(GENERAL)
        assert apology.content.startswith("Sorry") and "unreachable" not in apology.content
        assert "could not read the settings" in caplog.text
        r.engine.policies.server = real
        await r.h.send_message(r.mentioning(ALICE, "and now?"))
        assert r.h.sent_messages(GENERAL)[-1].content == "reply to [Alice | user 802]\n> and now?"


async def test_text_attachment_is_read_and_binary_is_mentioned(tmp_path):
    async with rig(tmp_path) as r:
        url = "https://cdn.discordapp.com/attachments/1/2/notes.txt"
        r.h.cdn[url] = b"line one of my notes"
        files = [
            dh.attachment(dh.snowflake(), "notes.txt", size=20, url=url, content_type="text/plain"),
            dh.attachment(dh.snowflake(), "photo.png", size=123456, content_type="image/png"),
        ]
        await r.h.send_message(r.mentioning(ALICE, "see attached", attachments=files))
        prompt = r.model.chat_calls[-1].prompt_text
    assert "line one of my notes" in prompt
    assert "photo.png (image/png, 123456 bytes): not a text file" in prompt


async def test_a_stalled_download_is_given_up_after_its_own_deadline_and_the_turn_answered(tmp_path, monkeypatch):
    """discord.py's session has no timeout (aiohttp's default is five minutes) and downloads run before
    the answer's deadline: a stalled CDN held the turn, and the channel behind it, for minutes a file."""
    import asyncio

    import cogs._input

    monkeypatch.setattr(cogs._input, "DOWNLOAD_SECONDS", 0.2)
    async with rig(tmp_path) as r:
        url = "https://cdn.discordapp.com/attachments/1/2/stalled.txt"
        served = r.h._get_from_cdn

        async def stall(asked: str) -> bytes:
            if asked == url:
                await asyncio.sleep(3600)
            return await served(asked)

        r.bot.http.get_from_cdn = stall
        files = [dh.attachment(dh.snowflake(), "stalled.txt", size=20, url=url, content_type="text/plain")]
        await asyncio.wait_for(r.h.send_message(r.mentioning(ALICE, "see attached", attachments=files)), 30)
        prompt = r.model.chat_calls[-1].prompt_text
    assert "stalled.txt (text/plain, 20 bytes): could not be downloaded" in prompt


async def test_a_text_file_behind_a_spoiler_is_read_with_the_spoiler_note_images_get(tmp_path):
    async with rig(tmp_path) as r:
        url = "https://cdn.discordapp.com/attachments/1/2/SPOILER_ending.txt"
        r.h.cdn[url] = b"the butler did it"
        hidden = dh.attachment(dh.snowflake(), "SPOILER_ending.txt", size=17, url=url, content_type="text/plain")
        await r.h.send_message(r.mentioning(ALICE, "no spoilers please, just tell me if it is good", attachments=[hidden]))
        prompt = r.model.chat_calls[-1].prompt_text
    assert "[attached file SPOILER_ending.txt, which the sender hid behind a spoiler: wrap anything" in prompt
    assert "the butler did it" in prompt

async def test_text_files_in_utf16_and_windows_ansi_are_read_as_text(tmp_path):
    """Windows PowerShell's ``>`` writes UTF-16 with a byte-order mark, Notepad's "ANSI" is Windows-1252:
    read as UTF-8 they reached the model as a null between every character, or replacement marks."""
    async with rig(tmp_path) as r:
        files = []
        for name, data in (("ps.log", "Grüße from PowerShell".encode("utf-16")),
                           ("ansi.txt", "café déjà vu".encode("cp1252")),
                           ("bom.txt", "\ufeffplain with a BOM".encode("utf-8"))):
            url = f"https://cdn.discordapp.com/attachments/1/2/{name}"
            r.h.cdn[url] = data
            files.append(dh.attachment(dh.snowflake(), name, size=len(data), url=url, content_type="text/plain"))
        await r.h.send_message(r.mentioning(ALICE, "see attached", attachments=files))
        prompt = r.model.chat_calls[-1].prompt_text
    assert "Grüße from PowerShell" in prompt and "café déjà vu" in prompt
    assert "plain with a BOM" in prompt and "\ufeff" not in prompt and "\x00" not in prompt and "\ufffd" not in prompt


async def test_overlong_message_is_cut_with_a_note(tmp_path):
    async with rig(tmp_path, conversation={"max_input_chars": 500}) as r:
        await r.h.send_message(r.mentioning(ALICE, "x" * 3000))
        prompt = r.model.chat_calls[-1].prompt_text
    assert "x" * 500 in prompt and "x" * 501 not in prompt
    assert "the message was cut here" in prompt


async def test_streaming_reply_is_edited_into_place(tmp_path):
    async with rig(tmp_path, model={"streaming": True}) as r:
        await r.h.send_message(r.mentioning(ALICE, "stream please"))
        sent = r.h.sent_messages(GENERAL)
        edits = r.h.calls_to("PATCH", "/channels/{channel_id}/messages/{message_id}")
    assert len(sent) == 1
    final = r.h.messages[int(sent[0].message["id"])]["content"]
    assert final == "reply to [Alice | user 802]\n> stream please"
    assert all(e.json["allowed_mentions"]["parse"] == [] for e in edits)


class SlowStreamer(ScriptedChatModel):
    """Streams a long answer slowly, so a preview is on screen well before the end."""

    def _stream(self, messages, stop=None, run_manager=None, **kwargs):
        import time

        from langchain_core.messages import AIMessageChunk
        from langchain_core.outputs import ChatGenerationChunk

        for i in range(20):
            time.sleep(0.15)
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=f"word{i} "))
            if run_manager:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk


async def preview_on_screen(r) -> dict:
    """Ask for a slowly streamed answer and wait until its first preview is on screen; the question's payload."""
    said = r.mentioning(ALICE, "stream please")
    r.h.feed("MESSAGE_CREATE", said)
    loop = asyncio.get_running_loop()
    end = loop.time() + 10
    while not r.h.sent_messages(GENERAL) and loop.time() < end:
        await asyncio.sleep(0.05)
    return said


async def test_a_message_deleted_while_its_answer_streams_leaves_no_half_answer(tmp_path):
    async with rig(tmp_path, chat_model=SlowStreamer(default_script), model={"streaming": True}) as r:
        said = await preview_on_screen(r)
        preview = r.h.sent_messages(GENERAL)
        assert preview and preview[0].content.endswith("▌")  # the half answer is on screen
        r.h.feed("MESSAGE_DELETE", {"id": said["id"], "channel_id": str(GENERAL), "guild_id": str(GUILD_ID)})
        await r.h.settle(timeout=20, quiet=0.5)
        assert int(preview[0].message["id"]) not in r.h.messages  # removed, not left with its cursor
        assert len(r.h.sent_messages(GENERAL)) == 1  # and nothing else was sent


async def test_a_streamed_preview_deleted_by_someone_else_is_the_answer_deleted(tmp_path):
    """A moderator (or a clean-up bot) deletes the half-written preview. Before, the final edit failed with
    Unknown Message, nothing handled it, and the answer stayed stored though no one could see it. Now it is
    what deleting the finished reply is: not posted again, and taken out of the stored conversation (the
    question stays)."""
    async with rig(tmp_path, chat_model=SlowStreamer(default_script), model={"streaming": True}) as r:
        await preview_on_screen(r)
        (preview,) = r.h.sent_messages(GENERAL)
        gone = int(preview.message["id"])
        r.h.messages.pop(gone)  # deleted on Discord: editing it now answers 404 Unknown Message
        r.h.feed("MESSAGE_DELETE", {"id": str(gone), "channel_id": str(GENERAL), "guild_id": str(GUILD_ID)})
        await r.h.settle(timeout=20, quiet=0.5)
        assert len(r.h.sent_messages(GENERAL)) == 1  # not posted again
        state = await r.engine.thread_state(str(GENERAL))
        assert [type(m).__name__ for m in state["messages"]] == ["HumanMessage"]
        assert "word19" not in " ".join(m.text for m in state["messages"])


async def test_a_dm_that_refuses_the_bot_gets_one_attempt_not_a_preview_every_second(tmp_path):
    """Found in review 2026-12-07 (fourteenth session): a person who blocked the bot (50007) got a refused
    POST for every preview of a streamed answer, each with a traceback, counted by Discord as invalid."""
    async with rig(tmp_path, chat_model=SlowStreamer(default_script), model={"streaming": True}) as r:
        dm = r.h.dm(ALICE)
        posts: list[int] = []

        def refused(call):
            posts.append(1)
            raise dh.http_error(403, 50007, "Cannot send messages to this user")

        r.h.on("POST", "/channels/{channel_id}/messages", refused)
        r.h.feed("MESSAGE_CREATE", r.msg(ALICE, "stream please", channel_id=dm["id"], guild_id=None))
        await r.h.settle(timeout=20, quiet=0.5)
        assert len(posts) == 2  # the first preview, then the final answer once
        assert not (await r.engine.thread_state(str(dm["id"]))).get("messages", [])[1:]  # no answer kept


async def test_a_reply_deleted_before_it_was_attached_to_its_answer_is_still_taken_back(tmp_path, monkeypatch):
    """A clean-up bot deletes the reply in the moment between sending it and recording its ID with the
    answer: the deletion found no answer carrying that ID, and the answer stayed stored for good."""
    async with rig(tmp_path) as r:
        real_attach = r.engine.attach_sent

        async def deleted_first(channel, reply, ids):
            for i in ids:
                r.h.messages.pop(int(i), None)
                r.h.feed("MESSAGE_DELETE", {"id": str(i), "channel_id": channel, "guild_id": str(GUILD_ID)})
            await asyncio.sleep(0.3)  # the deletion is handled first, and finds nothing attached yet
            return await real_attach(channel, reply, ids)

        monkeypatch.setattr(r.engine, "attach_sent", deleted_first)
        await r.h.send_message(r.mentioning(ALICE, "hello there"))
        await r.h.settle(timeout=20, quiet=0.5)
        state = await r.engine.thread_state(str(GENERAL))
        assert [type(m).__name__ for m in state["messages"]] == ["HumanMessage"]


async def test_a_new_threads_first_message_before_its_thread_create_keeps_the_parents_rules(tmp_path):
    """Discord can deliver a new thread's first message before THREAD_CREATE: discord.py gives it a channel
    with no parent, and a channel's block applied nowhere in its new threads."""
    fresh = dh.snowflake()
    async with rig(tmp_path, access={"block_channels": [GENERAL]}) as r:
        r.h.channels[fresh] = dict(dh.thread(fresh, GUILD_ID, GENERAL, "new-thread"), guild_id=str(GUILD_ID))
        assert r.bot.get_channel(fresh) is None  # not cached: no THREAD_CREATE yet
        await r.h.send_message(r.mentioning(ALICE, "hello from a blocked channel's thread", channel_id=fresh))
        assert r.h.sent_messages(fresh) == [] and r.model.chat_calls == []
        assert r.h.calls_to("GET", "/channels/{channel_id}")  # asked of Discord, once it would be answered
    async with rig(tmp_path / "2") as r:  # elsewhere the thread is answered, as a thread
        r.h.channels[fresh] = dict(dh.thread(fresh, GUILD_ID, GENERAL, "new-thread"), guild_id=str(GUILD_ID))
        await r.h.send_message(r.mentioning(ALICE, "hello from a new thread", channel_id=fresh))
        assert r.h.sent_messages(fresh)[-1].content.endswith("hello from a new thread")
        assert "#new-thread" in r.model.chat_calls[-1].prompt_text  # its place, named as a thread

async def test_a_new_threads_first_message_in_an_answer_every_message_channel_is_answered_without_a_mention(tmp_path):
    """Found in review 2026-12-07 (fourteenth session): before THREAD_CREATE the thread has no parent, so its
    channel's answer-all did not apply, and the channel was looked up only for a message answered anyway."""
    fresh = dh.snowflake()
    async with rig(tmp_path) as r:  # LISTED answers every message
        r.h.channels[fresh] = dict(dh.thread(fresh, GUILD_ID, LISTED, "new-thread"), guild_id=str(GUILD_ID))
        assert r.bot.get_channel(fresh) is None
        await r.h.send_message(r.msg(ALICE, "no mention, first message of a new thread", channel_id=fresh))
        assert r.h.sent_messages(fresh)[-1].content.endswith("no mention, first message of a new thread")


async def test_a_channel_that_refuses_typing_still_gets_the_answer(r):
    def refuse(call):
        raise dh.http_error(403, 50013, "Missing Permissions")

    r.h.on("POST", "/channels/{channel_id}/typing", refuse)
    await r.h.send_message(r.mentioning(ALICE, "can you hear me?"))
    (sent,) = r.h.sent_messages(GENERAL)
    assert sent.content.endswith("can you hear me?")


async def test_an_answer_discord_refuses_is_not_kept_as_said_nor_queued_for_learning(r):
    """The bot lost its permission after the check (its own role updates are not heard): the model answered,
    Discord refused the reply, and nobody saw it."""
    from langchain_core.messages import AIMessage

    def refuse(call):
        raise dh.http_error(403, 50013, "Missing Permissions")

    r.h.on("POST", "/channels/{channel_id}/messages", refuse)
    await r.h.send_message(r.mentioning(ALICE, "tell me a secret word"))
    messages = (await r.engine.thread_state(str(GENERAL)))["messages"]
    assert [m.text for m in messages if isinstance(m, HumanMessage)] == ["tell me a secret word"]
    assert not [m for m in messages if isinstance(m, AIMessage)]
    rows = [t for t in await r.engine.inbox.every_turn() if t.thread_id == str(GENERAL)]
    assert rows and all(t.ai == "" for t in rows)


async def test_a_model_outage_is_one_warning_line_and_the_apology_not_a_traceback_per_message(tmp_path, caplog):
    """Every message during an outage logged an ERROR with a traceback (the docs promise one line)."""
    def down(call: Call):
        if not call.is_extraction:
            raise ConnectionError("the model's server is down")
        return default_script(call)

    async with rig(tmp_path, chat_model=ScriptedChatModel(down)) as r:
        await r.h.send_message(r.mentioning(ALICE, "are you there?"))
        assert r.h.sent_messages(GENERAL)[-1].content == APOLOGY
    lines = [rec for rec in caplog.records if rec.name == "cogs.chat" and rec.levelno >= logging.WARNING]
    assert [rec.levelname for rec in lines] == ["WARNING"] and lines[0].exc_info is None
    assert "an outage: ConnectionError" in lines[0].getMessage()

async def test_an_answer_automod_blocks_gets_the_short_apology_instead(r):
    """AutoMod refuses a message with a flagged word (400, code 200000): the answer is taken back, and the
    member gets the apology (it has no such word) rather than typing followed by silence."""
    from langchain_core.messages import AIMessage

    def automod(call):
        if "flagged" in (call.json or {}).get("content", ""):
            raise dh.http_error(400, 200000, "Message was blocked by automatic moderation")
        return r.h._new_message(int(call.params["channel_id"]), call)

    r.h.on("POST", "/channels/{channel_id}/messages", automod)
    await r.h.send_message(r.mentioning(ALICE, "say the flagged word"))
    refused, apology = r.h.sent_messages(GENERAL)
    assert "flagged" in refused.content and apology.content == APOLOGY
    messages = (await r.engine.thread_state(str(GENERAL)))["messages"]
    assert not [m for m in messages if isinstance(m, AIMessage)]
    # Alice's question stays as context, answered by nobody: the next person's answer is not also hers
    # (found in review 2026-12-07: deleting her message then took Bob's answer away with it).
    await r.h.send_message(r.mentioning(BOB, "what time is it?"))
    messages = (await r.engine.thread_state(str(GENERAL)))["messages"]
    (answer,) = [m for m in messages if isinstance(m, AIMessage)]
    assert answer.additional_kwargs["answers"] == [messages[-2].id] and "what time" in messages[-2].text


async def test_waiting_behind_a_slow_summary_does_not_count_against_the_deadline(tmp_path):
    import time as _time

    def slow_summary(call: Call):
        if "Summarize" in call.messages[-1].text or "Extend the summary" in call.messages[-1].text:
            _time.sleep(1.5)  # in the model's worker thread, like a slow API call
        return default_script(call)

    async with rig(tmp_path, chat_model=ScriptedChatModel(slow_summary), model={"timeout_seconds": 1.0},
                   conversation={"summarize_after_messages": 4, "keep_messages": 2}) as r:
        for text in ("one", "two", "three"):
            await r.h.send_message(r.mentioning(ALICE, text))
        r.h.feed("MESSAGE_CREATE", r.mentioning(ALICE, "four"))  # queued behind three's summary
        loop = asyncio.get_running_loop()
        end = loop.time() + 10
        while len(r.h.sent_messages(GENERAL)) < 4 and loop.time() < end:
            await asyncio.sleep(0.05)
        last = r.h.sent_messages(GENERAL)[-1]
    assert last.content.endswith("four"), last.content


async def test_without_read_message_history_the_answer_goes_out_as_a_plain_message(r):
    """Discord refuses a reply (403, code 160002) from a bot that may not read the channel's history; the
    answer is then a plain message, not lost to an apology that would be refused the same way."""
    deny = dh.overwrite(dh.BOT_ID, member=True, deny=discord.Permissions(read_message_history=True).value)
    r.h.feed("CHANNEL_UPDATE", dh.text_channel(GENERAL, GUILD_ID, "general", permission_overwrites=[deny]))
    await r.h.send_message(r.mentioning(ALICE, "what is a good name for a cat?"))
    (sent,) = r.h.sent_messages(GENERAL)
    assert "message_reference" not in sent.json or sent.json["message_reference"] is None
    assert "what is a good name for a cat?" in sent.content and "Sorry" not in sent.content


async def test_a_reply_refused_for_history_is_sent_again_without_the_reference(r):
    """Permissions the bot has cached can be stale: Discord's 160002 itself makes it send without replying."""
    def refuse_replies(call):
        if call.json.get("message_reference"):
            raise dh.http_error(403, 160002, "Cannot reply without permission to read message history")
        return r.h._new_message(int(call.params["channel_id"]), call)

    r.h.on("POST", "/channels/{channel_id}/messages", refuse_replies)
    await r.h.send_message(r.mentioning(ALICE, "hello again"))
    (sent,) = [c for c in r.h.sent_messages(GENERAL) if c.response]
    assert "hello again" in sent.content and not sent.json.get("message_reference")


async def test_where_the_bot_may_not_send_it_does_not_call_the_model(r):
    """No Send Messages in a channel (or in its threads): a mention there costs no model call and no post."""
    deny = dh.overwrite(dh.BOT_ID, member=True, deny=discord.Permissions(send_messages=True).value)
    r.h.feed("CHANNEL_UPDATE", dh.text_channel(GENERAL, GUILD_ID, "general", permission_overwrites=[deny]))
    calls = await r.h.send_message(r.mentioning(ALICE, "are you there?"))
    assert r.model.calls == []
    assert not [c for c in calls if c.method == "POST" and c.template == "/channels/{channel_id}/messages"]
    # A thread needs Send Messages in Threads, which the channel's overwrite left alone: answered there.
    await r.h.send_message(r.mentioning(ALICE, "and in the thread?", channel_id=THREAD))
    assert r.h.sent_messages(THREAD) and len(r.model.chat_calls) == 1


async def test_mentioning_the_bots_own_role_is_speaking_to_it(r):
    """Discord gives a bot a managed role of its name; members often pick that role from the @ list. It is
    the bot addressed: answered, with the role's mention left out of what the model reads."""
    own = dh.role(990, "Rememberer", position=1)
    own.update(managed=True, tags={"bot_id": str(dh.BOT_ID)})
    r.h.feed("GUILD_ROLE_CREATE", {"guild_id": str(GUILD_ID), "role": own})
    other = dh.role(991, "Helpers", position=1)
    r.h.feed("GUILD_ROLE_CREATE", {"guild_id": str(GUILD_ID), "role": other})
    said = r.msg(ALICE, "<@&990> what rhymes with orange?")
    said["mention_roles"] = ["990"]
    await r.h.send_message(said)
    (sent,) = r.h.sent_messages(GENERAL)
    prompt = r.model.chat_calls[-1].prompt_text
    assert "> what rhymes with orange?" in prompt and "<@&990>" not in prompt
    another = r.msg(ALICE, "<@&991> can someone help?")
    another["mention_roles"] = ["991"]
    await r.h.send_message(another)
    assert len(r.h.sent_messages(GENERAL)) == 1  # another role is not the bot


async def test_a_mention_in_a_thread_not_yet_cached_is_answered(r):
    """A private thread's first message can arrive before its THREAD_CREATE: discord.py then knows the
    channel only by ID (a ``PartialMessageable``, whose permissions read as none). The bot answers and lets
    Discord refuse if it may not post, instead of dropping the mention in silence."""
    unknown = dh.snowflake()
    assert r.h.bot.get_channel(unknown) is None
    await r.h.send_message(r.mentioning(ALICE, "hello from a brand new thread", channel_id=unknown))
    (sent,) = r.h.sent_messages(unknown)
    assert sent.json["content"] and "hello from a brand new thread" in r.model.chat_calls[-1].prompt_text


class HeldModel(ScriptedChatModel):
    """Holds each chat answer until ``gate`` is set (in its worker thread); ``entered`` says one waits."""

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        if self.gate is not None and "New messages to learn from" not in str(messages[-1].content):
            self.entered.set()
            self.gate.wait(20)
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)

    gate: object = None
    entered: object = None


async def test_a_shutdown_finishes_the_turns_it_has_and_records_what_arrives_meanwhile(tmp_path):
    """SIGTERM while Alice's question is being answered and Bob's waits behind it: both are answered before
    the engine closes, and Carol's message arriving meanwhile is recorded (kept and learned from), not
    answered. Until 2026-12-07 the engine closed first: the waiting turn was lost, and a turn starting then
    ran against a closing engine."""
    import threading

    carol = dh.user(804, "carol", global_name="Carol")
    model = HeldModel(default_script)
    model.gate, model.entered = threading.Event(), threading.Event()
    async with rig(tmp_path, chat_model=model) as r:
        r.h.feed("MESSAGE_CREATE", r.mentioning(ALICE, "alice asks first"))
        await asyncio.get_running_loop().run_in_executor(None, model.entered.wait, 10)
        r.h.feed("MESSAGE_CREATE", r.mentioning(BOB, "bob waits behind her"))
        await asyncio.sleep(0.1)
        closing = asyncio.create_task(r.bot.close())
        await asyncio.sleep(0.2)
        assert not closing.done()  # the turns are being finished
        r.h.feed("MESSAGE_CREATE", r.mentioning(carol, "carol says I like quinces"))
        await asyncio.sleep(0.3)
        model.gate.set()
        await asyncio.wait_for(closing, 30)
        answered = [m.json["content"] for m in r.h.sent_messages(GENERAL)]
        assert any("alice asks first" in a for a in answered) and any("bob waits behind her" in a for a in answered)
        assert not any("quinces" in a for a in answered)
        said = [m.text for m in (await r.engine.thread_state(str(GENERAL)))["messages"]]
        assert any("carol says I like quinces" in t for t in said)
        assert len(model.chat_calls) == 2


async def test_past_the_drains_deadline_waiting_turns_are_recorded_and_follow_ups_keep_their_order(tmp_path):
    """A shutdown that runs out of time starts no turn against a closing engine: the turns still waiting are
    recorded without an answer, and the answer still running is cancelled before the drain returns (left
    running, it posted and attached its reply while the engine closed under it; found in review
    2026-12-07). A follow-up sent while the bot stops joins its author's waiting turn, so the thread keeps
    Discord's order."""
    import threading

    model = HeldModel(default_script)
    model.gate, model.entered = threading.Event(), threading.Event()
    async with rig(tmp_path, chat_model=model) as r:
        chat = r.bot.get_cog("Chat")
        r.h.feed("MESSAGE_CREATE", r.mentioning(ALICE, "alice asks first"))
        await asyncio.get_running_loop().run_in_executor(None, model.entered.wait, 10)
        r.h.feed("MESSAGE_CREATE", r.mentioning(BOB, "bob waits behind her"))
        await asyncio.sleep(0.1)
        draining = asyncio.create_task(chat.drain(most=0.5))
        await asyncio.sleep(0.1)
        r.h.feed("MESSAGE_CREATE", r.mentioning(BOB, "and bob follows up"))
        await draining  # out of time: Alice's answer was still being written
        assert chat.idle()  # cancelled, and Bob's turn recorded, before the drain returned
        model.gate.set()  # Alice's model call (its worker thread) ends, answering nobody
        for _ in range(100):
            if model.chat_calls:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)
        assert len(model.chat_calls) == 1  # Bob's turn was not started
        answered = [m.json["content"] for m in r.h.sent_messages(GENERAL)]
        assert not any("alice asks first" in a or "bob" in a for a in answered)
        said = [m.text for m in (await r.engine.thread_state(str(GENERAL)))["messages"]]
        assert "alice asks first" in said[0]  # a cancelled turn keeps its message in the thread
        bobs = [i for i, t in enumerate(said) if "bob" in t]
        assert len(bobs) == 2 and "bob waits behind her" in said[bobs[0]] and "and bob follows up" in said[bobs[1]]


async def test_a_sticker_sent_with_a_mention_is_named_not_called_empty(tmp_path):
    """A sticker sent as a reply that pings the bot was described to the model as an empty message."""
    async with rig(tmp_path) as r:
        payload = r.mentioning(ALICE, "")
        payload["sticker_items"] = [{"id": "749", "name": "wave", "format_type": 1}]
        await r.h.send_message(payload)
        prompt = r.model.chat_calls[-1].prompt_text
    assert "(they sent the sticker wave and mentioned you)" in prompt and "was empty" not in prompt
