"""The Eraser: a deleted message's words are cut out of everything else (not its author's other words),
and an erasure recorded in the journal is finished at the next start."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from bot.engine.state import Speaker
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


async def test_an_erasure_that_fails_stays_recorded_and_is_retried_later(settings, monkeypatch):
    from bot.storage.sqlite.maintenance import CompactionIncomplete

    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("a", Speaker(user_id="1", name="Ann"), "I like the retried-erasure-canary")
        await engine.scheduler.flush()
        maintenance = engine.storage.maintenance
        real = maintenance.compact

        async def blocked() -> None:
            raise CompactionIncomplete("a reader kept the log busy")

        monkeypatch.setattr(maintenance, "compact", blocked)
        with pytest.raises(CompactionIncomplete):
            await engine.erase_person("1")  # the person is told it failed; it is not reported done
        assert len(await engine.storage.erasures.unfinished()) == 1
        assert await engine.eraser.resume() == 0  # still blocked: logged, kept, retried after a pause
        monkeypatch.setattr(maintenance, "compact", real)
        assert await engine.eraser.resume() == 0  # the pause is not over yet
        engine.eraser._failures.clear()  # (skip the pause)
        assert await engine.eraser.resume() == 1
        assert await engine.storage.erasures.unfinished() == [] and await engine.memories.list("1") == []
