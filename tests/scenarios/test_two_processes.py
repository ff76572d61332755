"""Two engines on one PostgreSQL database, as two bot processes would be (each its own pool, locks and
caches): a channel still answers one message at a time, in order; a pause made through one holds at once
in the other; an erasure's claim stops the other from recording or learning that person."""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack

from langchain_core.messages import HumanMessage

from bot.engine.state import Speaker
from bot.engine.stores.locks import ERASURE
from tests.conftest import (
    Call,
    ScriptedChatModel,
    default_script,
    make_settings,
    running_engine,
)

ADA = Speaker(user_id="42", name="Ada", guild_id="900", channel_id="7", message_id="70")


def slow(call: Call):
    if not call.is_extraction:
        time.sleep(0.3)  # the first process is still answering when the second gets its message
    return default_script(call)


async def two(tmp_path, pg_backend, model_a, model_b):
    stack = AsyncExitStack()
    a = await stack.enter_async_context(running_engine(make_settings(tmp_path / "a", pg_backend), model_a))
    b = await stack.enter_async_context(running_engine(make_settings(tmp_path / "b", pg_backend), model_b))
    return stack, a, b


async def test_one_channel_answers_one_message_at_a_time_across_processes(tmp_path, pg_backend):
    model_b = ScriptedChatModel(slow)
    stack, a, b = await two(tmp_path, pg_backend, ScriptedChatModel(slow), model_b)
    async with stack:
        first = asyncio.create_task(a.reply("c", ADA, "first question"))
        await asyncio.sleep(0.1)
        second = await b.reply("c", Speaker(user_id="7", name="Bob"), "second question")
        await first
        # The second process loaded the channel after the first had answered: its prompt has both.
        prompt = model_b.chat_calls[-1].prompt_text
        assert "first question" in prompt and "reply to" in prompt
        humans = [m.text for m in (await b.thread_state("c"))["messages"] if isinstance(m, HumanMessage)]
        assert [h.split("] ", 1)[-1] if "] " in h else h for h in humans][-2:] == ["first question", "second question"]
        assert second.text.endswith("second question")


async def test_a_pause_through_one_process_holds_at_once_in_the_other(tmp_path, pg_backend):
    stack, a, b = await two(tmp_path, pg_backend, ScriptedChatModel(default_script), ScriptedChatModel(default_script))
    async with stack:
        await a.reply("c", ADA, "I like tea")  # a's view of Ada's settings is now warm
        await b.prefs.set("42", paused=True, private=True)
        assert (await a.prefs.get("42")).paused
        await a.reply("c", ADA, "I like secrets")
        pending = [p for p in await a.inbox.pending() if p.user_id == "42"]
        assert sum(p.count for p in pending) == 1  # only the turn from before the pause


async def test_an_erasure_in_one_process_blocks_that_persons_writes_in_the_other(tmp_path, pg_backend):
    stack, a, b = await two(tmp_path, pg_backend, ScriptedChatModel(default_script), ScriptedChatModel(default_script))
    async with stack:
        await b.reply("c", ADA, "I like tea")
        async with a.locks.person("42", kind=ERASURE, wait=True) as held:  # what a's erasure holds
            assert held
            await b.reply("c", ADA, "I like jam")  # answered, but not recorded while the erasure runs
            assert await b.scheduler.run("900", "42") is None  # and not learned from: b cannot claim Ada
            assert sum(p.count for p in await b.inbox.pending()) == 1
            assert await b.memories.list("42") == []
        await b.reply("c", ADA, "I like honey")  # after it: recorded again
        await b.scheduler.flush()
        assert sorted(m.content for m in await b.memories.list("42")) == ["I like honey", "I like tea"]


async def test_a_dead_processes_claim_is_taken_over_after_its_lease(tmp_path, pg_backend):
    settings = make_settings(tmp_path / "a", pg_backend, storage={"claim_lease_seconds": 1})
    async with running_engine(settings, ScriptedChatModel(default_script)) as a:
        await a.reply("c", ADA, "I like tea")
        locks = a.storage.locks
        assert await locks._try_claim("42", "gone-process:extraction:x", "extraction")  # a holder that died
        assert await a.scheduler.run("900", "42") is None  # still leased: not ours
        await asyncio.sleep(1.2)
        await a.scheduler.run("900", "42")
        assert [m.content for m in await a.memories.list("42")] == ["I like tea"]
