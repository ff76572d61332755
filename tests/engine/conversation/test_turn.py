"""Running a turn (``conversation/turn.py``): what is stored and what is queued for learning."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bot.engine import Actor, Incoming, Speaker
from tests.conftest import ScriptedChatModel, default_script, running_engine


def ada(message_id: str) -> Speaker:
    return Speaker(user_id="42", name="Ada", guild_id="900", channel_id="c", message_id=message_id)


async def test_a_turn_restarted_after_its_answer_was_written_queues_each_message_once(settings):
    """A follow-up cancels an answer just after it was written: the answer is taken back out, and the
    restarted turn (first message and follow-up together) must not queue the first message again."""
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        first = await engine.reply("c", ada("m1"), "I like kayaks")
        await engine.conversations.drop_answer("c", first.message_id)  # what the cancelled caller does
        await engine.reply_to("c", [Incoming(ada("m1"), "I like kayaks"), Incoming(ada("m2"), "I like canoes")])
        _, pending = await engine.inbox.batch("c", "42", 0)
        assert sorted(str(t.origin.get("message_id")) for t in pending) == ["m1", "m2"]
        humans = [m for m in (await engine.thread_state("c"))["messages"] if m.type == "human"]
        assert [m.text for m in humans] == ["I like kayaks", "I like canoes"]  # stored once each, too
        # The same text stored again: no pruning on the spot (that is for an edit's old words), so a follow-up
        # does not add a prune to every gathered turn.
        checkpoints = [c async for c in engine.storage.checkpointer.alist({"configurable": {"thread_id": "c"}})]
        assert len(checkpoints) > 1
        await engine.flush_learning()
        assert sorted(m.content for m in await engine.list_memories("42")) == ["I like canoes", "I like kayaks"]


async def test_a_turn_restarted_by_an_edit_leaves_the_old_text_in_no_checkpoint(settings):
    """The cancelled attempt wrote the message's first text as it ended; the restarted turn stores the edited
    text over it, and prunes then: no checkpoint of the thread keeps the words taken back (until 2026-12-06
    they stayed in superseded checkpoints up to eight turns later)."""
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("c", ada("m0"), "hello")
        first = await engine.reply("c", ada("m1"), "my door code is 4417")
        await engine.conversations.drop_answer("c", first.message_id)  # what the cancelled caller does
        assert await engine.storage.erasures.compaction_owed() is None
        await engine.reply_to("c", [Incoming(ada("m1"), "my door code is secret", again=True)])
        await engine.runner.close()  # the turn's tail (its checkpoint and the prune) runs after the answer
        humans = [m.text for m in (await engine.thread_state("c"))["messages"] if m.type == "human"]
        assert humans == ["hello", "my door code is secret"]  # (and the turn has written its checkpoint)
        config = {"configurable": {"thread_id": "c"}}
        held = [repr((c.checkpoint, c.pending_writes)) async for c in engine.storage.checkpointer.alist(config)]
        assert held and all("4417" not in c for c in held)
        # and the pages they were in are owed a compaction, as after the eraser's own edits (the events
        # cog's edit found the new text stored already, and recorded nothing)
        assert await engine.storage.erasures.compaction_owed() is not None


async def test_the_usual_turn_queues_every_message(settings):
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply_to("c", [Incoming(ada("m1"), "one"), Incoming(ada("m2"), "two")])
        _, pending = await engine.inbox.batch("c", "42", 0)
        assert [t.human for t in pending] == ["one", "two"]


async def ada_with_bees_and_a_slow_wipe(engine) -> tuple[asyncio.Event, asyncio.Event]:
    """Ada (user 42) remembers bees; her wipe's person step waits: (release it, it has started)."""
    await engine.remember("42", "Ada keeps bees.", {"guild_id": "900", "channel_id": "c", "message_id": "",
                                                    "source": "user"}, by=Actor("user", "42"))
    release, started = asyncio.Event(), asyncio.Event()
    real_person = engine.eraser.steps.person

    async def slow_person(*args, **kwargs):
        started.set()
        await release.wait()
        return await real_person(*args, **kwargs)

    engine.eraser.steps.person = slow_person
    return release, started


async def ada_answering_during_her_wipe(engine, model) -> tuple[asyncio.Event, asyncio.Task, asyncio.Task]:
    """Ada's wipe waits on a step while her turn (a ``gated`` model) is being answered: (release the wipe's
    step, the wipe, the turn); the turn is marked and holds the channel."""
    release, started = await ada_with_bees_and_a_slow_wipe(engine)
    wipe = asyncio.create_task(engine.erase_person("42"))
    await started.wait()
    turn = asyncio.create_task(engine.reply("c", ada("m9"), "my locker code is 5521-parsnip"))
    await model.entered.wait()
    return release, wipe, turn


async def test_a_turn_that_starts_during_a_wipe_reads_no_memories_and_leaves_nothing_after_done(settings):
    """The wipe waits on a step; meanwhile the person writes and gets an answer. After "Done" nothing of
    that turn is kept: not in the thread, not in the learning queue, not learned."""
    model = ScriptedChatModel(default_script)
    async with running_engine(settings, model) as engine:
        release, started = await ada_with_bees_and_a_slow_wipe(engine)
        wipe = asyncio.create_task(engine.erase_person("42"))
        await started.wait()
        await engine.reply("c", ada("m9"), "I like parsnips, do you remember my bees?")
        assert "bees" not in model.chat_calls[-1].system  # not read while they are being erased
        # and not explained as private mode, which a model asked for its instructions would repeat
        assert "asked you not to use" not in model.chat_calls[-1].system
        assert "You do not remember anything about user 42" in model.chat_calls[-1].system
        await engine.hear("c", [Incoming(ada("m10"), "I like turnips", answer=False)])
        release.set()
        await wipe
        await engine.flush_learning()
        texts = " ".join(m.text for m in (await engine.thread_state("c")).get("messages", []))
        assert "parsnips" not in texts and "turnips" not in texts
        _, pending = await engine.inbox.batch("c", "42", 0)
        assert pending == []
        assert await engine.list_memories("42") == []
        await engine.reply("c", ada("m11"), "I like radishes")  # after Done: a new start, kept as usual
        assert "radishes" in " ".join(m.text for m in (await engine.thread_state("c"))["messages"])


async def test_a_wipe_says_done_only_after_a_turn_that_started_during_it_has_taken_its_messages_back(settings):
    """The model answers the turn more slowly than the wipe works: the wipe waits for that turn to end (it
    stores its messages, then takes them back out) before its compaction, so after "Done" no file holds
    them. Until 2026-12-07 the wipe compacted first and the turn's words stayed in the write-ahead log."""
    from tests.cogs.test_memory_controls import files_containing

    model = gated()
    async with running_engine(settings, model) as engine:
        release, wipe, turn = await ada_answering_during_her_wipe(engine, model)
        release.set()
        await asyncio.sleep(0.5)
        assert not wipe.done()  # its steps are done; it waits for the turn
        model.gate.set()
        await turn
        await wipe
        assert "5521-parsnip" not in " ".join(m.text for m in (await engine.thread_state("c")).get("messages", []))
        if settings.storage.backend == "sqlite":
            assert files_containing(settings.bot.data_dir, "5521-parsnip") == []


async def test_the_turn_waiting_next_never_reads_the_messages_of_a_person_erased_meanwhile(settings):
    """Ada's turn runs while her wipe is under way: it is answered, then her message is taken back out. Bob's
    turn waits for the channel behind it. Until the ninth session the take-back came after Ada's turn let
    the channel go, so Bob's turn (first in line for it) read her message, and could repeat it in an answer
    the wipe's quote rule, read before her turn wrote it, would not cut."""
    model = gated()
    async with running_engine(settings, model) as engine:
        release, wipe, ada_turn = await ada_answering_during_her_wipe(engine, model)  # it holds the channel
        bob = Speaker(user_id="43", name="Bob", guild_id="900", channel_id="c", message_id="m10")
        bob_turn = asyncio.create_task(engine.reply("c", bob, "what did everyone say?"))
        await asyncio.sleep(0.3)  # Bob's turn is waiting for the channel
        model.gate.set()
        await ada_turn
        await bob_turn
        release.set()
        await wipe
        bob_call = next(c for c in model.chat_calls if not c.is_extraction and "what did everyone say" in c.prompt_text)
        assert "5521-parsnip" not in bob_call.prompt_text
        assert "5521-parsnip" not in " ".join(texts(await engine.thread_state("c")))


async def test_a_wipe_from_the_shell_that_the_bot_runs_covers_turns_that_start_during_it(settings):
    """``python -m bot memories wipe`` beside the running bot records the wipe in the journal and the bot
    runs it: a turn of that person meanwhile is treated as during ``/memories wipe`` (no memories read,
    nothing kept or learned after "Done"), on SQLite too, where no other process marks them."""
    from bot.engine.erasure.eraser import request_erasure

    model = ScriptedChatModel(default_script)
    async with running_engine(settings, model) as engine:
        release, started = await ada_with_bees_and_a_slow_wipe(engine)
        await request_erasure(engine.storage, "42")
        wipe = asyncio.create_task(engine.eraser.resume())
        await asyncio.wait_for(started.wait(), 10)
        # (Not marked, the turn would wait for the wipe to end before it is recorded, then be kept.)
        await asyncio.wait_for(engine.reply("c", ada("m29"), "I like parsnips, do you remember my bees?"), 30)
        assert "bees" not in model.chat_calls[-1].system
        release.set()
        assert await wipe == 1
        await engine.flush_learning()
        assert "parsnips" not in " ".join(m.text for m in (await engine.thread_state("c")).get("messages", []))
        assert await engine.list_memories("42") == []


async def test_a_turn_waiting_for_its_channel_when_a_wipe_begins_reads_no_memories(settings):
    """Whether the person is being erased is asked once the channel is the turn's, not before: a turn
    queued behind another in its channel while the person's wipe begins must not read the memories the
    wipe is about to take (the wipe waits for that turn before it reaches them)."""
    model = ScriptedChatModel(default_script)
    async with running_engine(settings, model) as engine:
        await engine.remember("42", "Ada keeps bees.", {"guild_id": "900", "channel_id": "c", "message_id": "",
                                                        "source": "user"}, by=Actor("user", "42"))
        await engine.reply("c", ada("m19"), "hello")  # their message in the thread: the wipe must pass it
        async with engine.locks.channel("c"):  # another turn of the channel is being answered
            turn = asyncio.create_task(engine.reply("c", ada("m20"), "do you remember my bees?"))
            await asyncio.sleep(0.2)  # queued behind it
            wipe = asyncio.create_task(engine.erase_person("42"))
            await asyncio.sleep(0.2)  # the wipe has begun and marked the turn
        await turn
        await wipe
        assert "bees" not in model.chat_calls[-1].system
        assert await engine.list_memories("42") == []


class GatedModel(ScriptedChatModel):
    """Holds each chat call (not extraction) until ``gate`` is set; ``entered`` says one is waiting."""

    gate: Any = None
    entered: Any = None

    async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs):
        if self.gate is not None and "New messages to learn from" not in str(messages[-1].content):
            self.entered.set()
            await self.gate.wait()
        return self._generate(messages, stop, run_manager, **kwargs)


def gated() -> GatedModel:
    model = GatedModel(default_script)
    model.gate, model.entered = asyncio.Event(), asyncio.Event()
    return model


def texts(state: dict) -> list[str]:
    return [m.text for m in state.get("messages", [])]


async def checkpoints(engine, thread_id: str) -> int:
    return len([c async for c in engine.runner.graph.checkpointer.alist({"configurable": {"thread_id": thread_id}})])


async def test_a_pause_made_while_the_model_answers_keeps_that_message_out_of_the_learning_queue(settings):
    model = gated()
    async with running_engine(settings, model) as engine:
        turn = asyncio.create_task(engine.reply("c", ada("m1"), "I like kayaks"))
        await model.entered.wait()
        await engine.set_preferences("42", paused=True)  # after the turn's policy was read
        model.gate.set()
        assert (await turn).text  # answered as usual
        _, pending = await engine.inbox.batch("c", "42", 0)
        assert pending == []  # but not queued for learning
        await engine.set_preferences("42", paused=False)
        await engine.reply("c", ada("m2"), "I like canoes")
        _, pending = await engine.inbox.batch("c", "42", 0)
        assert [t.human for t in pending] == ["I like canoes"]


async def test_a_turn_writes_one_checkpoint_and_a_reader_waits_for_the_turn_in_flight(settings):
    model = gated()
    async with running_engine(settings, model) as engine:
        turn = asyncio.create_task(engine.reply("c", ada("m1"), "I like kayaks"))
        await model.entered.wait()
        read = asyncio.create_task(engine.thread_state("c"))
        await asyncio.sleep(0.05)
        assert not read.done()  # the message being answered is not in the thread yet: the read waits
        model.gate.set()
        reply = await turn
        assert texts(await read) == ["I like kayaks", reply.text]
        await engine.reply("c", ada("m2"), "I like boats")  # the thread is stored now
        await engine.runner.close()
        before = await checkpoints(engine, "c")
        for n in range(3, 5):
            await engine.reply("c", ada(f"m{n}"), f"I like boat {n}")
        await engine.runner.close()
        assert await checkpoints(engine, "c") == before + 2  # one a turn (LangGraph's default writes three)


async def test_a_new_threads_first_message_is_stored_before_the_model_answers(settings):
    """An erasure finds threads by their checkpoints: a brand-new thread must be findable mid-answer."""
    model = gated()
    async with running_engine(settings, model) as engine:
        turn = asyncio.create_task(engine.reply("new", ada("m1"), "I like kayaks"))
        try:
            await model.entered.wait()
            found = await engine.conversations.thread_ids()
        finally:
            model.gate.set()  # a failed check must not leave the turn (and the engine's close) waiting
        await turn
        assert "new" in found


async def test_a_turn_cancelled_while_the_model_answers_leaves_its_message_in_the_thread(settings):
    model = gated()
    async with running_engine(settings, model) as engine:
        turn = asyncio.create_task(engine.reply("c", ada("m1"), "I like kayaks"))
        await model.entered.wait()
        turn.cancel()  # the caller gave up (its deadline, or a follow-up restarting the turn)
        with pytest.raises(asyncio.CancelledError):
            await turn
        await engine.runner.close()
        assert texts(await engine.thread_state("c")) == ["I like kayaks"]  # written as the run ended
        model.gate.set()
        reply = await engine.reply("c", ada("m2"), "and canoes")
        assert texts(await engine.thread_state("c")) == ["I like kayaks", "and canoes", reply.text]


async def test_a_turn_that_fails_after_the_answer_has_stored_its_message_when_it_ends(settings):
    """The one checkpoint is written as the graph run closes: a failure in the turn's own work after the
    answer (here the streaming callback; in production a learning-queue insert during an outage) must close
    the run before the channel is released, or the next turn reads the thread without that message."""
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("c", ada("m1"), "I like kayaks")  # the thread is stored: later turns write once
        await engine.runner.close()

        def broken(_text: str) -> None:
            raise RuntimeError("the caller's stream broke")

        with pytest.raises(RuntimeError):
            await engine.reply("c", ada("m2"), "and canoes", on_delta=broken)
        assert "and canoes" in texts(await engine.thread_state("c"))  # at once, not some time later
        reply = await engine.reply("c", ada("m3"), "and boats")
        await engine.runner.close()
        after = texts(await engine.thread_state("c"))
        assert after[0] == "I like kayaks" and after[-2:] == ["and boats", reply.text]
        assert after.index("and canoes") < after.index("and boats")  # kept, not overwritten by a late write


async def test_a_message_whose_answer_failed_stays_as_context_and_is_not_answered_by_the_next_persons_turn(settings):
    """Found in review 2026-12-07: Ada got the apology, and her message waited as unanswered; Bo's turn next
    answered it too (and deleting Ada's message then took Bo's answer out with it)."""
    down = [False]

    def script(call):
        if not call.is_extraction and down[0]:
            raise ConnectionError("the model is down")
        return default_script(call)

    bo = Speaker(user_id="43", name="Bo", guild_id="900", channel_id="c", message_id="m2")
    async with running_engine(settings, ScriptedChatModel(script)) as engine:
        await engine.reply("c", ada("m0"), "hello")  # the thread is stored: later turns write once
        down[0] = True
        with pytest.raises(ConnectionError):
            await engine.reply("c", ada("m1"), "what is a kayak?")
        down[0] = False
        await engine.reply("c", bo, "I like canoes")
        await engine.runner.close()
        messages = (await engine.thread_state("c"))["messages"]
        answer = messages[-1]
        assert answer.additional_kwargs["answers"] == [messages[-2].id]  # Bo's message only
        assert "what is a kayak?" in texts({"messages": messages})  # kept as context
        # The same without Discord IDs (the console; "Ask about this", whose stored question has none).
        down[0] = True
        side = Speaker(user_id="42", name="Ada")
        with pytest.raises(ConnectionError):
            await engine.reply("side", side, "first question")
        down[0] = False
        await engine.reply("side", side, "second question")
        await engine.runner.close()
        messages = (await engine.thread_state("side"))["messages"]
        assert messages[-1].additional_kwargs["answers"] == [messages[-2].id] and messages[-2].text == "second question"


async def test_a_deleted_threads_next_first_message_is_stored_before_the_model_answers_again(settings):
    """The process remembers which threads are stored; deleting a thread's conversation (a deleted channel,
    a removed server) must make its next message a first message again, findable by an erasure mid-answer."""
    model = gated()
    async with running_engine(settings, model) as engine:
        model.gate.set()
        await engine.reply("c", ada("m1"), "I like kayaks")
        assert await engine.changes.forget_thread("c")
        model.gate.clear()
        model.entered.clear()
        turn = asyncio.create_task(engine.reply("c", ada("m2"), "I like canoes"))
        try:
            await model.entered.wait()
            found = await engine.conversations.thread_ids()
        finally:
            model.gate.set()
        await turn
        assert "c" in found


async def test_a_summary_that_hangs_does_not_hold_the_channel_past_the_turns_deadline(tmp_path):
    """The summary after an answer runs while the turn still holds the channel. A model that keeps the
    call open (keep-alive lines reset the client's own timeout) held the next member's turn behind it,
    with "typing" shown, for as long as it liked. The summary gets the turn's deadline and is dropped past
    it; the next turn is answered. (``wait_for`` only guards against the hang; nothing is timed.)"""
    import threading

    from tests.conftest import make_settings

    release = threading.Event()

    def script(call):
        if not call.is_extraction and any("Summarize" in m.text or "Extend the summary" in m.text
                                          for m in call.messages[-1:]):
            release.wait(30)  # the model keeps the call open
            return "SUMMARY: never in time"
        return default_script(call)

    settings = make_settings(tmp_path, conversation={"summarize_after_messages": 4, "keep_messages": 2})
    try:
        async with running_engine(settings, ScriptedChatModel(script)) as engine:
            for n in range(3):
                await engine.reply("c", ada(f"m{n}"), f"message {n}", timeout=3)
            answer = await asyncio.wait_for(engine.reply("c", ada("m9"), "still there?", timeout=3), 20)
            assert "still there" in answer.text
            assert "never in time" not in str(await engine.thread_state("c"))
    finally:
        release.set()


async def test_reasoning_a_server_writes_inline_is_neither_shown_nor_stored(settings):
    """Some OpenAI-compatible servers (local R1 or Qwen3 setups) write their reasoning into the answer as
    ``<think>...</think>``: it streamed into the preview and was posted, stored and learned from."""
    def script(call):
        if call.is_extraction:
            return default_script(call)
        return "<think>the user seems upset QZ61 so I should</think>\n\nHello there!"

    deltas: list[str] = []
    async with running_engine(settings, ScriptedChatModel(script)) as engine:
        reply = await engine.reply("c", ada("m1"), "hi", on_delta=deltas.append)
        assert reply.text == "Hello there!"
        assert not any("QZ61" in d or "<think>" in d for d in deltas)
        assert "QZ61" not in str(await engine.thread_state("c"))
