"""Erasure while a turn of the same person is still being answered: nothing comes back afterwards."""

from __future__ import annotations

import asyncio
import time

from langchain_core.messages import HumanMessage

from bot.engine.state import Speaker
from tests.conftest import Call, ScriptedChatModel, default_script, running_engine

ADA = Speaker(user_id="42", name="Ada", guild_id="900", channel_id="7", message_id="70")


def slow(call: Call):
    if not call.is_extraction:
        time.sleep(0.4)  # the model is still thinking when the wipe is confirmed
    return default_script(call)


async def test_a_wipe_during_an_answer_leaves_nothing_to_relearn(settings):
    async with running_engine(settings, ScriptedChatModel(slow)) as engine:
        answering = asyncio.create_task(engine.reply("t", ADA, "I like the canary-phrase"))
        await asyncio.sleep(0.1)
        result = await engine.erase_person("42")
        await answering  # the person still gets their answer
        await engine.scheduler.flush()
        assert await engine.memories.list("42") == []
        assert await engine.inbox.pending() == []
        state = await engine.thread_state("t")
        assert not [m for m in state["messages"] if isinstance(m, HumanMessage)]
        assert result.messages == 2  # their message and the bot's answer to it
