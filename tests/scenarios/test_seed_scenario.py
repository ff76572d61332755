"""The reference lesson's scenario, end to end through the real engine and real SQLite files."""

from __future__ import annotations

from bot.engine.state import Speaker
from tests.conftest import running_engine

LANCE = Speaker(user_id="111", name="Lance", guild_id="900", channel_id="1", message_id="5001", place="#general")


async def test_memories_from_thread_1_reach_the_prompt_in_thread_2(settings, scripted_model):
    async with running_engine(settings, scripted_model) as engine:
        for i, text in enumerate(["Hi, my name is Lance", "I like to bike around San Francisco", "I also enjoy going to bakeries"]):
            reply = await engine.reply("thread-1", LANCE, text)
            assert reply.text.startswith("reply to")
        await engine.scheduler.flush()

        contents = sorted(m.content for m in await engine.memories.list("111"))
        assert contents == sorted(["my name is Lance", "I like to bike around San Francisco", "I also enjoy going to bakeries"])

        await engine.reply("thread-2", LANCE, "What bakeries do you recommend for me?")
        system = scripted_model.chat_calls[-1].system
        for fact in contents:
            assert fact in system

        other = Speaker(user_id="222", name="Ada", guild_id="900", channel_id="2", message_id="6001")
        await engine.reply("thread-3", other, "What bakeries do you recommend for me?")
        system = scripted_model.chat_calls[-1].system
        assert not any(fact in system for fact in contents)
        assert "do not remember anything about user 222" in system  # Ada, by her ID (names are members' text)


async def test_memory_keeps_where_and_when_it_was_learned(settings, scripted_model):
    async with running_engine(settings, scripted_model) as engine:
        await engine.reply("thread-1", LANCE, "I love sourdough")
        await engine.scheduler.flush()
        (memory,) = await engine.memories.list("111")
        assert memory.origin == {"guild_id": "900", "channel_id": "1", "message_id": "5001", "source": "extraction"}
        assert memory.created_at is not None and memory.updated_at >= memory.created_at
