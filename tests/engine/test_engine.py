"""The front door (``bot/engine/engine.py`` and the verbs mixed into it), verb by verb, on both backends.

The cogs are tested through Discord payloads elsewhere; these tests pin what each verb promises the cogs,
so a cog can stay a thin adapter: parse, defer, call one verb, format.
"""

from __future__ import annotations

from bot.engine import Actor, Incoming, Speaker, TurnResult, set_field
from tests.conftest import ScriptedChatModel, default_script, make_settings, running_engine

ALICE = Speaker(user_id="1001", name="Alice", guild_id="g1", channel_id="c1", place="#general")
ORIGIN = {"guild_id": "g1", "channel_id": "c1", "message_id": "", "source": "user"}
ME = Actor("user", "1001")


def _texts(state: dict) -> list[str]:
    return [str(m.content) for m in state.get("messages", [])]


async def test_a_turn_is_answered_and_gathers_its_context_inside_the_typing_indicator(settings):
    model = ScriptedChatModel(default_script)
    entered: list[str] = []

    class Typing:
        async def __aenter__(self):
            entered.append("typing")

        async def __aexit__(self, *exc):
            entered.append("done")

    async def context():
        entered.append("context")
        return ()

    async with running_engine(settings, model) as engine:
        result = await engine.turn("c1", [Incoming(ALICE, "hello there")], context=context,
                                   while_answering=Typing)
        assert isinstance(result, TurnResult) and result.notice is None
        assert result.reply is not None and result.reply.text.startswith("reply to")
        assert entered == ["typing", "context", "done"]
        assert "hello there" in " ".join(_texts(await engine.thread_state("c1")))


async def test_a_turn_past_the_daily_budget_is_heard_with_one_notice_and_no_model_call(tmp_path, backend):
    settings = make_settings(tmp_path / "data", backend, limits={"guild_daily_tokens": 1})
    model = ScriptedChatModel(default_script)
    asked: list[int] = []

    async def context():
        asked.append(1)
        return ()

    async with running_engine(settings, model) as engine:
        first = await engine.turn("c1", [Incoming(ALICE, "spend the budget")], context=context)
        assert first.reply is not None  # the budget was not spent before this answer
        calls = len(model.chat_calls)
        second = await engine.turn("c1", [Incoming(ALICE, "over the budget now")], context=context)
        third = await engine.turn("c1", [Incoming(ALICE, "still over")], context=context)
        assert (second.reply, second.notice, second.spent) == (None, "out_of_budget", "server")
        assert (third.reply, third.notice, third.spent) == (None, None, "server")  # told once a day
        assert len(model.chat_calls) == calls and asked == [1]  # no model call, no Discord context gathered
        texts = " ".join(_texts(await engine.thread_state("c1")))
        assert "over the budget now" in texts and "still over" in texts  # heard, not lost
        assert await engine.budget_exhausted(ALICE) is not None


async def test_memory_verbs_teach_find_correct_log_export_and_delete(settings):
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        key = await engine.remember("1001", "Alice keeps bees on her roof.", ORIGIN, by=ME)
        found = await engine.find_memory("1001", (await engine.list_memories("1001"))[0].short_id)
        assert found is not None and found.key == key
        assert await engine.edit_memory("1001", key, "Alice keeps two hives of bees.", ORIGIN, by=ME)
        assert [m.content for m in await engine.list_memories("1001")] == ["Alice keeps two hives of bees."]
        assert len(await engine.memory_history("1001", key)) >= 2  # the teaching and the correction
        exported = await engine.export("1001")
        assert "Alice keeps two hives of bees." in str(exported)
        await engine.delete_memories("1001", [key], by=ME)
        assert await engine.count_memories("1001") == 0
        assert await engine.list_memories("1002") == []  # nobody else's memories were touched or made


async def test_preferences_and_the_memory_command_limit(tmp_path, backend):
    settings = make_settings(tmp_path / "data", backend, limits={"memory_commands_per_hour": 2})
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.set_preferences("1001", paused=True)
        assert (await engine.preferences("1001")).paused is True
        assert (await engine.preferences("1002")).paused is False
        waits = [engine.memory_command_wait("1001") for _ in range(3)]
        assert waits[:2] == [0.0, 0.0] and waits[2] > 0
        assert engine.memory_command_wait("1002") == 0.0


async def test_settings_verbs_change_a_server_and_leave_the_others(settings):
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        before, after = await engine.change_settings("g1", set_field("learning", False), by="42")
        assert before.learning is True and after.learning is False
        assert (await engine.guild_policy("g1")).learning is False
        assert (await engine.guild_policy("g2")).learning is True
        stored = await engine.stored_settings("g1")
        assert stored is not None and stored.updated_by == "42"
        assert await engine.stored_settings("g2") is None
        assert engine.metrics.settings_changes._value.get() == 1


async def test_health_verbs_see_storage_and_the_learning_backlog(settings):
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        assert await engine.storage_answers() is True
        assert (await engine.learning_backlog()).turns == 0
        await engine.reply("c1", ALICE, "I grow tomatoes")
        backlog = await engine.learning_backlog()
        assert backlog.turns >= 1 and backlog.oldest_age_seconds >= 0
        await engine.flush_learning()
        assert (await engine.learning_backlog()).turns == 0


async def test_erase_person_removes_their_memories_and_counts_the_erasure(settings):
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.remember("1001", "Alice keeps bees.", ORIGIN, by=ME)
        await engine.remember("1002", "Bob sails.", ORIGIN, by=Actor("user", "1002"))
        await engine.erase_person("1001", by=ME)
        assert await engine.count_memories("1001") == 0
        assert await engine.count_memories("1002") == 1
        assert engine.idle()


async def test_an_erasure_empties_the_recall_caches_that_hold_whole_texts(tmp_path):
    """Recall memoises words, names and dates by the whole memory (and query) text: after a wipe or a
    deleted message, those texts must not stay in the process's memory until evicted."""
    from bot.engine.recall.boosts import _names
    from bot.engine.recall.lexical import _tokens
    from bot.engine.recall.temporal import mentions_time

    async with running_engine(make_settings(tmp_path), ScriptedChatModel(default_script)) as engine:
        speaker = Speaker(user_id="42", name="Ada", guild_id="9", channel_id="c", message_id="1180000000000000001")
        await engine.reply("c", speaker, "I like Zanzibar cloves")
        await engine.flush_learning()
        await engine.reply("c", Speaker(user_id="42", name="Ada", guild_id="9", channel_id="c",
                                        message_id="1180000000000000002"), "what do I like?")
        assert _tokens("I like Zanzibar cloves") and _names("I like Zanzibar cloves") is not None
        mentions_time("I like Zanzibar cloves")
        assert _tokens.cache_info().currsize and _names.cache_info().currsize and mentions_time.cache_info().currsize
        await engine.messages_deleted("c", {"1180000000000000001"})
        assert (_tokens.cache_info().currsize, _names.cache_info().currsize, mentions_time.cache_info().currsize) == (0, 0, 0)
        # A deleted channel takes no person's hold, and empties them too.
        await engine.reply("c", Speaker(user_id="42", name="Ada", guild_id="9", channel_id="c",
                                        message_id="1180000000000000003"), "I like Zanzibar cloves")
        _tokens("I like Zanzibar cloves")  # as a choice of memories would have
        assert _tokens.cache_info().currsize
        await engine.channel_deleted("c")
        assert (_tokens.cache_info().currsize, _names.cache_info().currsize, mentions_time.cache_info().currsize) == (0, 0, 0)


async def test_a_shutdown_during_start_up_starts_nothing_after_the_engine_closed(settings):
    """Found in review 2026-12-07: SIGTERM while start-up was resuming the erasure journal closed the engine
    beside it; start-up then went on to create the server sweep, the journal watcher and the re-indexing,
    which nothing would ever cancel, and the final pass of learning ran beside the erasures being resumed."""
    import asyncio

    from bot.engine.engine import ChatEngine
    from bot.storage import open_storage

    async with open_storage(settings) as storage:
        engine = ChatEngine(settings=settings, storage=storage, chat_model=ScriptedChatModel(default_script))
        release, resuming = asyncio.Event(), asyncio.Event()
        real = engine.eraser.resume

        async def slow_resume(*a, **kw):
            resuming.set()
            await release.wait()
            return await real(*a, **kw)

        engine.eraser.resume = slow_resume
        starting = asyncio.create_task(engine.start())
        await resuming.wait()
        closing = asyncio.create_task(engine.close())
        await asyncio.sleep(0.1)
        assert not closing.done()  # waits for the start-up step running
        release.set()
        await asyncio.gather(starting, closing)
        assert engine._background == [] and engine.changes._sweeper is None


async def test_an_answer_cut_short_after_it_was_sent_is_charged_its_prompt(settings):
    """Restarting a turn (an edit, a deletion) or the deadline cut a call the provider had billed, and no
    budget saw it: a member could restart a turn again and again for free."""
    import asyncio
    import time

    def slow(call):
        if not call.is_extraction:
            time.sleep(1.0)
        return default_script(call)

    async with running_engine(settings, ScriptedChatModel(slow)) as engine:
        before = await engine.meter.tokens_today("g1", "1001")
        try:
            await engine.reply("c1", ALICE, "tell me a long story " + "please " * 200, timeout=0.3)
        except (asyncio.TimeoutError, TimeoutError):
            pass
        else:
            raise AssertionError("the answer was not cut short")
        await asyncio.sleep(1.2)  # the thread the fake model runs in finishes its sleep
        assert await engine.meter.tokens_today("g1", "1001") - before >= 200  # the prompt, estimated
