"""Running a turn (``conversation/turn.py``): what is stored and what is queued for learning."""

from __future__ import annotations

from bot.engine import Incoming, Speaker
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
