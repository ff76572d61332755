"""The Eraser: a deleted message's words are cut out of everything else (not its author's other words),
and an erasure recorded in the journal is finished at the next start."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from bot.engine import create_engine
from bot.engine.memories.records import Actor
from bot.engine.state import Speaker
from bot.storage import open_storage
from tests.conftest import Call, ScriptedChatModel, default_script, running_engine

SECRET = "the spare key hides under the blue flowerpot"


def quoting(call: Call):
    last = next((m.text for m in reversed(call.messages) if isinstance(m, HumanMessage)), "")
    if not call.is_extraction and "where is the key" in last:
        return f"Ann said {SECRET}."
    return default_script(call)


async def test_erase_quotes_cuts_a_deleted_messages_words_out_of_other_threads(settings):
    async with running_engine(settings, ScriptedChatModel(quoting)) as engine:
        ann = Speaker(user_id="1", name="Ann", guild_id="9", channel_id="a")
        bob = Speaker(user_id="2", name="Bob", guild_id="9", channel_id="b")
        await engine.reply("a", ann, SECRET)
        await engine.reply("a", ann, f"really, {SECRET}")  # her own other message: hers to delete, not ours
        await engine.reply("b", bob, "where is the key?")
        await engine.memories.apply("2", inserts=[(f"Bob knows {SECRET}", bob.origin())])
        redacted = await engine.eraser.erase_quotes([SECRET], author="1")
        assert redacted >= 3  # Bob's answer, Bob's pending turn, Bob's memory
        b = (await engine.thread_state("b"))["messages"]
        assert [m.text for m in b if isinstance(m, AIMessage)] == ["Ann said [erased]."]
        assert (await engine.memories.list("2"))[0].content == "Bob knows [erased]"
        a = (await engine.thread_state("a"))["messages"]
        assert f"really, {SECRET}" in [m.text for m in a if isinstance(m, HumanMessage)]
        assert all(SECRET not in t.ai and (t.user_id == "1" or SECRET not in t.human)
                   for t in await engine.storage.inbox.every_turn())
        assert await engine.storage.erasures.unfinished() == []


async def test_a_recorded_erasure_is_finished_when_the_engine_starts(settings):
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("a", Speaker(user_id="1", name="Ann"), "I like the recorded-erasure-canary")
        await engine.scheduler.flush()
        assert await engine.memories.list("1")
        await engine.eraser.request("1")  # as a crash (or another process) would leave it
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        assert await engine.memories.list("1") == []
        assert await engine.storage.erasures.unfinished() == []
        assert not [m for m in (await engine.thread_state("a"))["messages"] if isinstance(m, HumanMessage)]


async def test_an_erasure_whose_compaction_fails_is_not_done_and_the_compaction_is_retried(settings, monkeypatch):
    from bot.storage.sqlite.maintenance import CompactionIncomplete

    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("a", Speaker(user_id="1", name="Ann"), "I like the retried-erasure-canary")
        await engine.scheduler.flush()
        maintenance = engine.storage.maintenance
        real = maintenance.compact
        calls: list[str] = []

        async def blocked() -> dict:
            calls.append("blocked")
            raise CompactionIncomplete("a reader kept the log busy")

        async def counted() -> dict:
            calls.append("ran")
            return await real()

        monkeypatch.setattr(maintenance, "compact", blocked)
        with pytest.raises(CompactionIncomplete):
            await engine.erase_person("1")  # the person is told it failed; it is not reported done
        assert await engine.storage.erasures.compaction_owed() is not None  # the debt is recorded
        assert await engine.memories.list("1") == []  # (the rows are gone; only the compaction is owed)
        engine.eraser._compact_failures = (1, 0.0)  # (skip the pause)
        assert await engine.eraser.resume() == 0  # still blocked: logged, kept, retried after a pause
        assert calls == ["blocked", "blocked"]
        monkeypatch.setattr(maintenance, "compact", counted)
        await engine.eraser.resume()
        assert calls == ["blocked", "blocked"]  # the pause after the second failure is not over yet
        engine.eraser._compact_failures = (2, 0.0)  # (skip the pause)
        await engine.eraser.resume()
        assert calls == ["blocked", "blocked", "ran"]
        assert await engine.storage.erasures.compaction_owed() is None
        assert await engine.storage.erasures.unfinished() == []


def _files_with(settings, needle: str) -> list[str]:
    """On SQLite, the files of the data directory holding ``needle`` (PostgreSQL keeps no files there)."""
    if settings.storage.backend != "sqlite":
        return []
    return [str(p) for p in settings.bot.data_dir.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


async def test_a_crash_in_the_middle_of_a_message_deletion_is_finished_at_restart(settings, monkeypatch):
    canary = "okapi_crash_canary_5521"
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        ann = Speaker(user_id="1", name="Ann", guild_id="9", channel_id="c", message_id="501")
        await engine.reply("c", ann, f"I like {canary}")
        await engine.scheduler.flush()
        await engine.reply("c", Speaker(user_id="1", name="Ann", guild_id="9", channel_id="c", message_id="502"),
                           "I like rowing")
        await engine.scheduler.flush()
        assert f"I like {canary}" in [m.content for m in await engine.memories.list("1")]
        assert settings.storage.backend != "sqlite" or _files_with(settings, canary)  # the check can fail

        async def crash(_ids):  # the conversation is cut; the queue, the memory, the quotes are not yet
            raise RuntimeError("killed mid-deletion")

        monkeypatch.setattr(engine.storage.inbox, "forget_messages", crash)
        with pytest.raises(RuntimeError):
            await engine.changes.forget_messages("c", {"501"})
        monkeypatch.undo()
        (job,) = await engine.storage.erasures.unfinished()
        assert job.kind == "messages" and "501" in (job.subject or "")
        assert canary not in (job.subject or "") and canary.encode() not in (job.quotes or b"")
        assert f"I like {canary}" in [m.content for m in await engine.memories.list("1")]  # half done
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        assert await engine.storage.erasures.unfinished() == []
        assert [m.content for m in await engine.memories.list("1")] == ["I like rowing"]
        assert all(canary not in t.human for t in await engine.storage.inbox.every_turn())
        said = [m.text for m in (await engine.thread_state("c"))["messages"]]
        assert said and not [t for t in said if canary in t]
    assert _files_with(settings, canary) == []


async def test_a_deleted_channel_the_bot_never_saw_owes_no_compaction(settings):
    """A ticket or temporary-voice bot creates and deletes channels all day: each deletion owed a compaction
    (a VACUUM on PostgreSQL) although nothing of it was stored. One that held a conversation still owes."""
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        assert await engine.eraser.erase_thread("never-seen", threads=True) is False
        assert await engine.storage.erasures.compaction_owed() is None
        assert await engine.storage.erasures.unfinished() == []
        await engine.reply("t", Speaker(user_id="1", name="Ann", guild_id="9", channel_id="t", message_id="601"),
                           "I like thread words")
        assert await engine.eraser.erase_thread("t", threads=True) is True
        assert await engine.storage.erasures.compaction_owed() is not None


async def test_deleted_threads_and_servers_are_journaled_and_finished_at_restart(settings, monkeypatch):
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("t", Speaker(user_id="1", name="Ann", guild_id="9", channel_id="t", message_id="601"),
                           "I like thread_canary_3311")
        await engine.reply("g", Speaker(user_id="2", name="Bob", guild_id="77", channel_id="g", message_id="602"),
                           "I like guild_canary_4422")
        await engine.scheduler.flush()

        async def crash(*_a, **_k):
            raise RuntimeError("killed mid-erasure")

        monkeypatch.setattr(engine.storage.inbox, "forget_thread", crash)
        monkeypatch.setattr(engine.storage.inbox, "forget_guild", crash)
        await engine.storage.removed_guilds.mark("77", 0.0)  # (a sweep erases only a server marked removed)
        with pytest.raises(RuntimeError):
            await engine.eraser.erase_thread("t")
        with pytest.raises(RuntimeError):
            await engine.eraser.erase_guild("77")
        monkeypatch.undo()
        assert sorted(j.kind for j in await engine.storage.erasures.unfinished()) == ["guild", "thread"]
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        # the thread's at start; the server's once READY said which servers the bot is in (not 77)
        assert [j.kind for j in await engine.storage.erasures.unfinished()] == ["guild"]
        await engine.servers_at_ready(lambda: [])
        await engine.eraser.resume()
        assert await engine.storage.erasures.unfinished() == []
        assert await engine.memories.list("2") == []
        assert [m.content for m in await engine.memories.list("1")] == ["I like thread_canary_3311"]
        assert not (await engine.thread_state("t")).get("messages")
        assert not [t for t in await engine.storage.inbox.every_turn() if t.thread_id in ("t", "g")]
    assert _files_with(settings, "guild_canary_4422") == []


async def test_a_channel_deletion_cut_short_after_a_threads_conversation_still_finds_that_thread(settings, monkeypatch):
    """Found in review 2026-12-07 (fourteenth session): the thread's conversation went first, and it is what
    finds a channel's thread again; a crash before the thread's queued turns went left them for good."""
    in_thread = Speaker(user_id="1", name="Ann", guild_id="9", channel_id="t1", parent_id="c1", message_id="611")
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("t1", in_thread, "I like thread_queue_canary_5511")
        real = engine.storage.inbox.forget_thread

        async def crash_on_the_thread(thread_id, *a, **k):
            if thread_id == "t1":
                raise RuntimeError("killed mid-erasure")
            return await real(thread_id, *a, **k)

        monkeypatch.setattr(engine.storage.inbox, "forget_thread", crash_on_the_thread)
        with pytest.raises(RuntimeError):
            await engine.eraser.erase_thread("c1", threads=True)
        monkeypatch.undo()
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        assert await engine.storage.erasures.unfinished() == []
        assert not (await engine.thread_state("t1")).get("messages")
        assert not [t for t in await engine.storage.inbox.every_turn() if t.thread_id == "t1"]


async def test_a_compaction_between_a_take_backs_debt_and_its_rewrite_leaves_one_owed(settings, monkeypatch):
    """A turn takes an erased person's message back under its channel lock: it records the compaction it
    owes first (a crash after the rewrite must leave one owed). A compaction running meanwhile (another
    process's wipe, the batch's timer) paid that debt before the rewrite wrote anything, and nothing owed
    one for the rewrite itself: its text stayed in the files' old pages."""
    ann = Speaker(user_id="1", name="Ann", guild_id="9", channel_id="c", message_id="m1")
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("c", ann, "my locker code is QZ5521PV")
        conversations = engine.eraser.conversations
        held = conversations.erase_messages_held

        async def a_compaction_first(*args, **kwargs):
            assert await engine.eraser.compact_owed()  # pays the debt recorded so far
            return await held(*args, **kwargs)

        monkeypatch.setattr(conversations, "erase_messages_held", a_compaction_first)
        await engine.eraser.take_back_in_thread("c", {"m1"}, ["1"])
        assert "QZ5521PV" not in " ".join(m.text for m in (await engine.thread_state("c")).get("messages", []))
        assert await engine.storage.erasures.compaction_owed() is not None


async def test_an_answer_taken_back_leaves_the_queue_first_and_owes_a_compaction(settings, monkeypatch):
    """An answer nobody saw (Discord refused it) is taken back: its copy on the learning queue goes first,
    so a failure before the thread's rewrite cannot leave it there to be learned as said (the thread no
    longer names it, and nothing would find it again); then the thread's, and a compaction is owed."""
    ann = Speaker(user_id="1", name="Ann", guild_id="9", channel_id="c", message_id="m1")
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("c", ann, "tell me about QZ7788KW")
        answer = (await engine.thread_state("c"))["messages"][-1]
        assert isinstance(answer, AIMessage) and "QZ7788KW" in answer.text
        conversations = engine.eraser.conversations

        async def crash(*_args, **_kwargs):
            raise RuntimeError("the database went away")

        monkeypatch.setattr(conversations, "_rewrite", crash)
        with pytest.raises(RuntimeError):
            await engine.eraser.take_back_answer("c", answer.id)
        assert not any("QZ7788KW" in t.ai for t in await engine.storage.inbox.every_turn())
        monkeypatch.undo()
        await engine.eraser.owed.close()  # (the debt is looked at, not paid by the timer)
        await engine.eraser.compact_owed()
        await engine.eraser.take_back_answer("c", answer.id)
        assert "QZ7788KW" not in " ".join(m.text for m in (await engine.thread_state("c"))["messages"][1:])
        assert await engine.storage.erasures.compaction_owed() is not None


async def test_a_wipe_whose_claim_lapsed_is_not_finished_by_the_command_or_the_replay(settings, monkeypatch):
    """A wipe's claim on the person ran out part-way (its renewals starved): other processes may have
    recorded the person's turns meanwhile, so the job must stay in the journal to run again, whether the
    command or the journal's replay ran it. The replay finished its row without asking."""
    from bot.engine.stores.locks import ClaimLost

    ann = Speaker(user_id="1", name="Ann", guild_id="9", channel_id="c", message_id="m1")
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("c", ann, "I like tea")

        async def lapsed() -> None:
            raise ClaimLost("the claim on user 1 ran out")

        monkeypatch.setattr(engine.storage.locks, "still_held", lapsed)
        with pytest.raises(ClaimLost):
            await engine.erase_person("1")
        assert [j.kind for j in await engine.storage.erasures.unfinished()] == ["person"]
        await engine.eraser.resume()
        assert [j.kind for j in await engine.storage.erasures.unfinished()] == ["person"]
        monkeypatch.undo()
        engine.eraser._failures.clear()  # (skip the pause after a failure)
        await engine.eraser.resume()
        assert await engine.storage.erasures.unfinished() == []


async def test_an_engine_never_started_leaves_the_owed_compaction_to_the_running_bot(settings):
    """``python -m bot sync`` beside a running bot builds an engine it never starts, without the writer
    lock: closing it rebuilt the bot's files (VACUUM) outside the bot's erasure lock."""
    async with open_storage(settings, writer=False) as storage:
        await storage.erasures.owe_compaction()
        engine = create_engine(settings, storage, chat_model=ScriptedChatModel(default_script))
        await engine.close()
        assert await storage.erasures.compaction_owed() is not None  # still the running bot's to pay


async def test_forgetting_a_message_takes_what_an_extraction_learned_from_it_meanwhile(settings):
    """"Forget this" listed nothing learned (an extraction of the message was running): what that
    extraction wrote is read again under the person's hold and goes too."""
    ann = Speaker(user_id="1", name="Ann", guild_id="9", channel_id="c", message_id="m7")
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("c", ann, "I like forget_race_canary")
        await engine.scheduler.flush()  # learned after the person's menu read the memories (none)
        assert [m.content for m in await engine.memories.list("1")] == ["I like forget_race_canary"]
        changes = await engine.delete_memories("1", [], by=Actor("user", "1"), from_message="m7")
        assert len(changes.deleted) == 1 and await engine.memories.list("1") == []


async def test_a_purge_waiting_for_another_erasure_does_not_blank_the_persons_turns_meanwhile(settings):
    """Found in review 2026-12-07: the person's turns were marked "being erased" before the purge had the
    global lock, so while it waited (minutes behind a wipe or a server's sweep) their turns everywhere were
    answered as if nothing were remembered, and not kept."""
    import asyncio

    dm = Speaker(user_id="42", name="Ada", channel_id="77")
    model = ScriptedChatModel(default_script)
    async with running_engine(settings, model) as engine:
        await engine.memories.apply("42", inserts=[("Ada keeps bees", {})])
        async with engine.locks.erasures():  # another erasure is running
            purge = asyncio.create_task(engine.erase_person("42", guild_id="900", by=Actor("moderator", "1")))
            await asyncio.sleep(0.2)
            await engine.reply("dm-42", dm, "what do I keep?")
            assert "Ada keeps bees" in model.chat_calls[-1].system  # still remembered here
            assert not purge.done()
        await purge
        state = await engine.thread_state("dm-42")
        assert any("what do I keep?" in m.text for m in state["messages"])  # kept: a DM, not that server


async def test_nothing_is_learned_from_a_person_whose_recorded_erasure_has_not_finished(settings):
    """Found in review 2026-12-07: a shutdown cancelled the journal's re-run of a wipe mid-way (its hold
    released), and the final pass of learning just after learned from the words being wiped."""
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("a", Speaker(user_id="1", name="Ann"), "I like the unfinished-wipe-canary")
        await engine.reply("b", Speaker(user_id="2", name="Bo", guild_id="900"), "I like the other-server-canary")
        await engine.eraser.request("1")  # recorded, not run: as a cut-short wipe leaves it
        await engine.storage.erasures.begin(kind="guild", user_id="", guild_id="900")  # a server's, too
        await engine.scheduler.flush()  # what shutdown's last pass does
        assert await engine.memories.list("1") == [] and await engine.memories.list("2") == []


async def test_nothing_is_learned_from_a_message_whose_recorded_deletion_or_edit_has_not_finished(settings):
    """Found in review 2026-12-07 (fourteenth session): only wipes and server sweeps held learning back. A
    deletion or an edit cut short (a shutdown, a failure part-way) let the last pass of learning learn the
    deleted message, or the old text of a typo fixed at once, and its re-run did not take that back out."""
    import json

    from bot.engine.erasure.quotes import QuoteRule

    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("a", Speaker(user_id="1", name="Ann", message_id="m1"), "I like the deleted-message-canary")
        await engine.reply("b", Speaker(user_id="2", name="Bo", message_id="m2"), "I like the edited-message-canary")
        await engine.reply("c", Speaker(user_id="3", name="Cy", message_id="m3"), "I like the deleted-thread-canary")
        await engine.storage.erasures.begin(kind="messages", user_id="", quotes=QuoteRule().to_bytes(),
                                            subject=json.dumps({"thread": "a", "messages": ["m1"], "authors": []}))
        await engine.storage.erasures.begin(kind="edit", user_id="", quotes=QuoteRule().to_bytes(),
                                            subject=json.dumps({"thread": "b", "message": "m2", "authors": []}))
        await engine.storage.erasures.begin(kind="thread", user_id="", subject=json.dumps({"thread": "c"}))
        await engine.reply("d", Speaker(user_id="4", name="Dee", message_id="m4"), "I like the untouched-canary")
        await engine.storage.erasures.begin(kind="messages", user_id="4", quotes=QuoteRule().to_bytes(),
                                            subject=json.dumps({"thread": "x", "messages": ["m9"], "authors": ["4"]}))
        await engine.scheduler.flush()  # what shutdown's last pass does
        for person in ("1", "2", "3"):
            assert await engine.memories.list(person) == []
        assert await engine.memories.list("4") != []  # another message of an author: learned all the same


async def test_a_memory_written_by_hand_during_the_persons_wipe_waits_for_it(settings, monkeypatch):
    """Found in review 2026-12-07 (fourteenth session): ``/memories remember`` took no lock; landing after the
    wipe had read what to delete, it outlived the wipe's "Done"."""
    import asyncio

    from bot.engine.memories.records import Actor

    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.remember("1", "Ann keeps bees", {"guild_id": "dm"}, by=Actor("user", "1"))
        real = engine.eraser.steps.person
        seen: list[bool] = []
        adding: list[asyncio.Task] = []

        async def with_a_remember_meanwhile(*args, **kwargs):
            adding.append(asyncio.create_task(engine.remember("1", "Ann taught this mid-wipe", {"guild_id": "dm"},
                                                              by=Actor("user", "1"))))
            await asyncio.sleep(0.2)
            seen.append(adding[0].done())
            result = await real(*args, **kwargs)
            seen.append(adding[0].done())
            return result

        monkeypatch.setattr(engine.eraser.steps, "person", with_a_remember_meanwhile)
        await engine.erase_person("1")
        assert seen == [False, False]  # it waited for the wipe, which then said Done with nothing left
        await adding[0]
        assert [m.content for m in await engine.memories.list("1")] == ["Ann taught this mid-wipe"]  # after it


async def test_a_deleted_message_is_not_shown_to_the_model_while_its_erasure_waits(settings):
    """Found in review 2026-12-07: the deletion leaves the thread only inside the erasure, behind the global
    erasure lock (a wipe or a compaction can hold it for minutes); replies built meanwhile still showed it."""
    import asyncio

    model = ScriptedChatModel(default_script)
    ann = Speaker(user_id="1", name="Ann", guild_id="900", channel_id="c")
    async with running_engine(settings, model) as engine:
        await engine.reply("c", replace_id(ann, "m1"), "my phone number is 0151-secret")
        async with engine.locks.erasures():  # another erasure is running
            deleting = asyncio.create_task(engine.messages_deleted("c", {"m1"}))
            await asyncio.sleep(0.2)
            await engine.reply("c", replace_id(ann, "m2"), "what did I just say?")
            assert "0151-secret" not in model.chat_calls[-1].prompt_text
            assert not deleting.done()
        await deleting
        assert not engine.changes.being_deleted  # nothing left hidden once it is gone


def replace_id(speaker: Speaker, message_id: str) -> Speaker:
    from dataclasses import replace

    return replace(speaker, message_id=message_id)
