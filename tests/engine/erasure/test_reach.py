"""Deleting one message visits what the message index points to (``bot/engine/stores/reach.py``): the
thread it was posted in and every thread its text was shown in, not every thread and every person."""

from __future__ import annotations

import time

from langchain_core.messages import AIMessage, HumanMessage

from bot.engine.state import Incoming, Quote, Speaker
from tests.conftest import Call, ScriptedChatModel, default_script, running_engine

SECRET = "the spare key hides under the blue flowerpot"
POSTED = "1180000000000000001"  # a Discord ID (posted in 2023)


def repeating(call: Call):
    if not call.is_extraction and SECRET in call.prompt_text and "Summarize" not in call.messages[-1].text:
        return f"Ann said {SECRET}."
    return default_script(call)


def ann(channel: str, message_id: str) -> Speaker:
    return Speaker(user_id="1", name="Ann", guild_id="9", channel_id=channel, message_id=message_id)


def bob(channel: str, message_id: str) -> Speaker:
    return Speaker(user_id="2", name="Bob", guild_id="9", channel_id=channel, message_id=message_id)


def quote_of_ann() -> tuple[Quote, ...]:
    return (Quote(author_id="1", author_name="Ann", text=SECRET, kind="reply", message_id=POSTED),)


async def answers(engine, thread: str) -> list[str]:
    # a reply returns once the answer exists; its checkpoint is written in the turn's tail: wait for the tails
    # (reading at once flaked on PostgreSQL in CI: the answer of the last turn was not in the state yet)
    await engine.runner.close()
    return [m.text for m in (await engine.thread_state(thread)).get("messages", []) if isinstance(m, AIMessage)]


async def quoted_in_two_threads(engine) -> None:
    """Ann says it in "a"; Bob's reply chain shows it in "b", and his *Ask about this* in his side thread."""
    await engine.reply("a", ann("a", POSTED), SECRET)
    await engine.reply_to("b", [Incoming(bob("b", "1180000000000000002"), "what did Ann say?")], quotes=quote_of_ann())
    await engine.reply_to("ask:a:2", [Incoming(bob("a", ""), "Ask about this")], quotes=quote_of_ann())


async def test_a_deleted_messages_words_leave_both_threads_they_reached(settings):
    async with running_engine(settings, ScriptedChatModel(repeating)) as engine:
        await quoted_in_two_threads(engine)
        assert f"Ann said {SECRET}." in await answers(engine, "b")
        assert f"Ann said {SECRET}." in await answers(engine, "ask:a:2")
        await engine.memories.apply("2", inserts=[(f"Bob heard that {SECRET}", bob("b", "1180000000000000002").origin())])
        assert await engine.storage.reach.threads_of({POSTED}) == {"b", "ask:a:2"}

        await engine.messages_deleted("a", {POSTED})
        assert await answers(engine, "b") == ["Ann said [erased]."]
        assert await answers(engine, "ask:a:2") == ["Ann said [erased]."]
        assert all(SECRET not in t.ai and SECRET not in t.human for t in await engine.storage.inbox.every_turn())
        assert [m.content for m in await engine.memories.list("2")] == ["Bob heard that [erased]"]
        a = (await engine.thread_state("a")).get("messages", [])
        assert not [m for m in a if isinstance(m, HumanMessage)]
        assert await engine.storage.reach.threads_of({POSTED}) == set()  # the index forgets it too


class Reads:
    """Which threads' states and whose memories an operation read."""

    def __init__(self, engine, monkeypatch) -> None:
        self.threads: set[str] = set()
        self.people: set[str] = set()
        self.everyone = 0
        conv, repo = engine.conversations, engine.eraser.memories
        values, state, items, listing = conv._values, conv._state, repo._all, repo.store.alist_namespaces

        async def read_values(thread_id):
            self.threads.add(thread_id)
            return await values(thread_id)

        async def read_state(thread_id):
            self.threads.add(thread_id)
            return await state(thread_id)

        async def read_items(ns, **filters):
            if len(ns) == 2 and ns[0] in ("memories", "memory_history"):
                self.people.add(ns[1])
            return await items(ns, **filters)

        async def list_namespaces(*a, **k):
            self.everyone += 1
            return await listing(*a, **k)

        monkeypatch.setattr(conv, "_values", read_values)
        monkeypatch.setattr(conv, "_state", read_state)
        monkeypatch.setattr(repo, "_all", read_items)
        monkeypatch.setattr(repo.store, "alist_namespaces", list_namespaces)


async def test_deleting_one_message_reads_only_the_threads_the_index_names(settings, monkeypatch):
    async with running_engine(settings, ScriptedChatModel(repeating)) as engine:
        for i in range(30):  # thirty other conversations, each with its own person and memories
            other = Speaker(user_id=str(100 + i), name=f"P{i}", guild_id="9", channel_id=f"t{i}",
                            message_id=str(1180000000000001000 + i))
            await engine.reply(f"t{i}", other, f"I like rowing number {i}")
        await engine.scheduler.flush()
        await quoted_in_two_threads(engine)
        reads = Reads(engine, monkeypatch)
        await engine.messages_deleted("a", {POSTED})
        assert await answers(engine, "b") == ["Ann said [erased]."]
        assert reads.threads <= {"a", "b", "ask:a:2"}
        assert reads.people <= {"1", "2"}
        assert reads.everyone == 0  # nobody's namespace listed: no scan of every person's memories


async def test_a_message_posted_before_the_index_existed_falls_back_to_the_full_scan(settings, monkeypatch):
    async with running_engine(settings, ScriptedChatModel(repeating)) as engine:
        for i in range(3):
            await engine.reply(f"t{i}", Speaker(user_id=str(100 + i), name=f"P{i}", guild_id="9", channel_id=f"t{i}"),
                               f"I like rowing number {i}")
        await engine.reply("a", ann("a", POSTED), SECRET)
        # Bob saw it before the index existed: nothing recorded that it reached "b".
        await engine.reply_to("b", [Incoming(bob("b", "1180000000000000002"), "what did Ann say?")],
                              quotes=quote_of_ann())
        await engine.storage.reach.forget({POSTED})

        async def upgraded_now() -> float:  # the index is complete only from now on; POSTED is older
            return time.time()

        monkeypatch.setattr(engine.storage.reach, "since", upgraded_now)
        reads = Reads(engine, monkeypatch)
        await engine.messages_deleted("a", {POSTED})
        assert await answers(engine, "b") == ["Ann said [erased]."]  # found all the same
        assert {"t0", "t1", "t2", "b"} <= reads.threads  # by reading every thread, as before


async def test_the_authors_new_messages_are_recorded_while_their_message_is_deleted(settings, monkeypatch):
    async with running_engine(settings, ScriptedChatModel(repeating)) as engine:
        await engine.reply("a", ann("a", POSTED), "I like tea_hold_canary")
        await engine.scheduler.flush()
        recorded: list[int] = []
        forget = engine.storage.inbox.forget_messages

        async def meanwhile(ids):  # Ann says something new while her old message is being erased
            recorded.append(await engine.storage.inbox.record(
                thread_id="a", user_id="1", author="Ann", human="I like rowing", ai="",
                origin={"guild_id": "9", "channel_id": "a", "message_id": "1180000000000000009"}))
            return await forget(ids)

        monkeypatch.setattr(engine.storage.inbox, "forget_messages", meanwhile)
        await engine.messages_deleted("a", {POSTED})
        assert recorded and recorded[0] > 0  # recorded (a shared database refuses turns only during a wipe)
        await engine.scheduler.flush()
        assert [m.content for m in await engine.memories.list("1")] == ["I like rowing"]  # and learned


ADDRESS = "I live at 14 Birch Lane"


def recalling(call: Call):
    """Repeats a memory the prompt shows (as a model answering "where do I live?" does)."""
    if not call.is_extraction and "14 Birch Lane" in call.system and "Summarize" not in call.messages[-1].text:
        return "You live at 14 Birch Lane."
    return default_script(call)


async def test_a_deleted_messages_words_leave_the_threads_its_memories_were_shown_in(settings):
    """A memory learned from a message in "a" is shown in the prompt of another thread and repeated in its
    answer: deleting the message takes the words out of that answer too (until 2026-12-07 the index knew only
    quoted messages, and the other thread kept "14 Birch Lane")."""
    async with running_engine(settings, ScriptedChatModel(recalling)) as engine:
        await engine.reply("a", ann("a", POSTED), ADDRESS)
        await engine.scheduler.flush()
        assert [m.content for m in await engine.memories.list("1")] == [ADDRESS]
        await engine.reply("c", ann("c", "1180000000000000005"), "where do I live again?")
        assert await answers(engine, "c") == ["You live at 14 Birch Lane."]
        assert await engine.storage.reach.threads_of({POSTED}) == {"c"}  # recorded before the model was called
        await engine.messages_deleted("a", {POSTED})
        assert await engine.memories.list("1") == []
        assert all("Birch" not in text for text in await answers(engine, "c"))
        assert all("Birch" not in t.ai and "Birch" not in t.human for t in await engine.storage.inbox.every_turn())


async def test_after_an_erasure_the_pairs_are_written_again(settings):
    """Pairs this process wrote are remembered so a reply usually writes nothing; an erasure may delete rows
    (a swept server's threads, whose channel IDs come back with a re-invite), so it forgets them."""
    async with running_engine(settings, ScriptedChatModel(recalling)) as engine:
        await engine.reply("a", ann("a", POSTED), ADDRESS)
        await engine.scheduler.flush()
        await engine.reply("c", ann("c", "1180000000000000005"), "where do I live again?")
        assert await engine.storage.reach.threads_of({POSTED}) == {"c"}
        await engine.storage.reach.forget_thread("c")  # (as a server's sweep does)
        await engine.reply("z", ann("z", "1180000000000000099"), "hello there")
        await engine.messages_deleted("z", {"1180000000000000099"})  # any erasure
        await engine.reply("c", ann("c", "1180000000000000006"), "and where is that?")
        assert "c" in await engine.storage.reach.threads_of({POSTED})


async def test_a_deleted_message_the_bot_only_quoted_leaves_the_answers_that_repeated_it(settings):
    """Ann never spoke to the bot: her message was only shown as Bob's reply context, and the answer
    repeated it. The bot stored none of her text, so her deletion found no words to cut, and the answer
    (and its copy on Bob's learning-queue row, and what Bob's extraction learned from it) kept them. The
    Discord side hands the deleted message's text when its cache still has it: the words of a message
    the index says reached a thread are cut there. A deleted message nobody quoted writes nothing."""
    async with running_engine(settings, ScriptedChatModel(repeating)) as engine:
        await engine.reply_to("b", [Incoming(bob("b", "1180000000000000002"), "what did Ann say?")],
                              quotes=quote_of_ann())
        await engine.memories.apply("2", inserts=[(f"Bob heard that {SECRET}", bob("b", "1180000000000000002").origin())])
        assert f"Ann said {SECRET}." in await answers(engine, "b")
        unrelated = await engine.messages_deleted("a", {"1180000000000000009"}, shown={"1180000000000000009": SECRET})
        assert unrelated.messages == 0 and await engine.storage.erasures.unfinished() == []
        assert f"Ann said {SECRET}." in await answers(engine, "b")  # (that message reached no thread)

        await engine.messages_deleted("a", {POSTED}, shown={POSTED: SECRET})
        assert await answers(engine, "b") == ["Ann said [erased]."]
        assert all(SECRET not in t.ai for t in await engine.storage.inbox.every_turn())
        assert [m.content for m in await engine.memories.list("2")] == ["Bob heard that [erased]"]
        assert await engine.storage.reach.threads_of({POSTED}) == set()
