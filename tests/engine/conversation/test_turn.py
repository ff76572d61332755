"""Running a turn (``conversation/turn.py``): what is stored and what is queued for learning."""

from __future__ import annotations

import asyncio

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
        await engine.flush_learning()
        assert sorted(m.content for m in await engine.list_memories("42")) == ["I like canoes", "I like kayaks"]


async def test_the_usual_turn_queues_every_message(settings):
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply_to("c", [Incoming(ada("m1"), "one"), Incoming(ada("m2"), "two")])
        _, pending = await engine.inbox.batch("c", "42", 0)
        assert [t.human for t in pending] == ["one", "two"]


async def test_a_turn_that_starts_during_a_wipe_reads_no_memories_and_leaves_nothing_after_done(settings):
    """The wipe waits on a step; meanwhile the person writes and gets an answer. After "Done" nothing of
    that turn is kept: not in the thread, not in the learning queue, not learned."""
    model = ScriptedChatModel(default_script)
    async with running_engine(settings, model) as engine:
        await engine.remember("42", "Ada keeps bees.", {"guild_id": "900", "channel_id": "c", "message_id": "",
                                                        "source": "user"}, by=Actor("user", "42"))
        release, started = asyncio.Event(), asyncio.Event()
        real_person = engine.eraser.steps.person

        async def slow_person(*args, **kwargs):
            started.set()
            await release.wait()
            return await real_person(*args, **kwargs)

        engine.eraser.steps.person = slow_person
        wipe = asyncio.create_task(engine.erase_person("42"))
        await started.wait()
        await engine.reply("c", ada("m9"), "I like parsnips, do you remember my bees?")
        assert "bees" not in model.chat_calls[-1].system  # not read while they are being erased
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
