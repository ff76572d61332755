"""Per-person settings in the engine: pause drops queued turns too; settings changed together all stick."""

from __future__ import annotations

import asyncio

from bot.engine.state import Speaker
from tests.conftest import ScriptedChatModel, default_script, running_engine

ADA = Speaker(user_id="42", name="Ada", guild_id="900", channel_id="7", message_id="70")


async def test_pausing_after_speaking_drops_the_queued_turns(settings):
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("t", ADA, "I like something sensitive")
        await engine.prefs.set("42", paused=True)
        await engine.scheduler.flush()
        assert await engine.memories.list("42") == []
        assert await engine.inbox.pending() == []


async def test_concurrent_setting_changes_do_not_undo_each_other(settings):
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await asyncio.gather(engine.prefs.set("42", paused=True), engine.prefs.set("42", private=True))
        prefs = await engine.prefs.get("42")
        assert prefs.paused and prefs.private
