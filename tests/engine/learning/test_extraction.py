"""Trustcall through the engine: inserts, patches in place, deletes, and no first-ten truncation."""

from __future__ import annotations

from langchain_core.messages import AIMessage

from bot.engine.memories.repository import MemoryRepository
from bot.engine.state import Speaker
from tests.conftest import (
    Call,
    ScriptedChatModel,
    default_script,
    doc_id,
    running_engine,
    tool_call,
)

ADA = Speaker(user_id="42", name="Ada", guild_id="900", channel_id="7", message_id="70")


def existing_ids(call: Call) -> list[str]:
    """The json_doc_ids Trustcall showed the model (it lists existing docs in the prompt)."""
    return [t["function"]["name"] for t in call.kwargs["tools"]]


async def test_patch_keeps_key_and_replaces_text(settings):
    def script(call: Call):
        if call.is_extraction and "moved to Oakland" in call.prompt_text:
            key = doc_id(call, "Lives in San Francisco")
            return AIMessage(content="", tool_calls=[tool_call("PatchDoc", {
                "json_doc_id": key, "planned_edits": "replace city",
                "patches": [{"op": "replace", "path": "/content", "value": "Lives in Oakland"}]})])
        return default_script(call)

    holder: dict = {}
    model = ScriptedChatModel(script)
    async with running_engine(settings, model) as engine:
        holder["key"] = await engine.memories.add("42", "Lives in San Francisco", {"guild_id": "900"})
        await engine.reply("t", ADA, "I moved to Oakland last week")
        await engine.scheduler.flush()
        memories = await engine.memories.list("42")
    assert [(m.key, m.content) for m in memories] == [(holder["key"], "Lives in Oakland")]
    assert memories[0].origin["message_id"] == "70"


async def test_remove_doc_deletes_and_is_never_stored(settings):
    def script(call: Call):
        if call.is_extraction:
            return AIMessage(content="", tool_calls=[tool_call("RemoveDoc", {"json_doc_id": doc_id(call, "Has a cat")})])
        return default_script(call)

    holder: dict = {}
    model = ScriptedChatModel(script)
    async with running_engine(settings, model) as engine:
        holder["key"] = await engine.memories.add("42", "Has a cat", {"guild_id": "900"})
        keep = await engine.memories.add("42", "Plays chess", {"guild_id": "900"})
        await engine.reply("t", ADA, "Forget the cat thing, that was wrong")
        await engine.scheduler.flush()
        memories = await engine.memories.list("42")
    assert [m.key for m in memories] == [keep]
    assert all("json_doc_id" not in m.content for m in memories)


async def test_all_25_memories_are_passed_to_extraction(settings):
    model = ScriptedChatModel(default_script)
    async with running_engine(settings, model) as engine:
        repo = MemoryRepository(engine.store)
        await repo.apply("42", inserts=[(f"fact number {i}", {"guild_id": "900"}) for i in range(25)])
        await engine.reply("t", ADA, "I like tea")
        await engine.scheduler.flush()
        (call,) = model.extraction_calls
        shown = call.prompt_text
        assert all(f"fact number {i}" in shown for i in range(25))
        assert len(await repo.list("42")) == 26


async def test_a_correction_is_shown_the_new_memory_it_corrects_when_old_ones_fill_the_budget(settings):
    """Thirty older memories fill the extractor's token budget; the newest, the one being corrected, is the
    most related and is shown (filled oldest first it was dropped, and came back as a duplicate)."""
    model = ScriptedChatModel(default_script)
    filler = [f"Spent afternoon number {i} of the spring sorting old postcards and stamps from a family trip"
              for i in range(30)]
    async with running_engine(settings, model) as engine:
        repo = MemoryRepository(engine.store)
        await repo.apply("42", inserts=[(text, {"guild_id": "900"}) for text in filler])
        await repo.apply("42", inserts=[("Lives in Berlin with two cats", {"guild_id": "900"})])
        await engine.reply("t", ADA, "Actually I moved out of Berlin, I live in Paris now")
        await engine.scheduler.flush()
        (call,) = model.extraction_calls
    shown = call.prompt_text
    assert "Lives in Berlin with two cats" in shown
    assert sum(text in shown for text in filler) < len(filler)  # the budget did cut some


async def test_extraction_is_only_for_the_author_even_with_others_in_the_thread(settings):
    model = ScriptedChatModel(default_script)
    bob = Speaker(user_id="43", name="Bob", guild_id="900", channel_id="7", message_id="71")
    async with running_engine(settings, model) as engine:
        await engine.reply("shared", ADA, "I like climbing")
        await engine.reply("shared", bob, "I like painting")
        await engine.reply("shared", ADA, "I also enjoy jazz")
        await engine.scheduler.flush()
        ada = sorted(m.content for m in await engine.memories.list("42"))
        bob_m = sorted(m.content for m in await engine.memories.list("43"))
        # The model saw who said what in the shared thread.
        last_chat = model.chat_calls[-1].prompt_text
    assert ada == ["I also enjoy jazz", "I like climbing"]
    assert bob_m == ["I like painting"]
    assert "[Ada | user 42]\n> I like climbing" in last_chat and "[Bob | user 43]\n> I like painting" in last_chat


async def test_a_batch_of_messages_attributes_each_memory_to_its_own_message(settings):
    """Three messages learned in one extraction: each memory cites its own message (the extractor's
    ``source_messages``), so deleting one message deletes only the memory it taught."""
    model = ScriptedChatModel(default_script)
    async with running_engine(settings, model) as engine:
        said = {"81": "I like batch_kayaking", "82": "I like batch_origami", "83": "I like batch_fencing"}
        for message_id, text in said.items():
            ada = Speaker(user_id="42", name="Ada", guild_id="900", channel_id="7", message_id=message_id)
            await engine.reply("7", ada, text)
        assert len(await engine.storage.inbox.every_turn()) == 3
        await engine.scheduler.flush()
        assert len([c for c in model.calls if c.is_extraction]) == 1  # one extraction for the three
        memories = await engine.memories.list("42")
        assert {m.content: m.message_ids() for m in memories} == {t: {mid} for mid, t in said.items()}
        assert (await engine.changes.forget_messages("7", {"82"})).memories == 1
        assert sorted(m.content for m in await engine.memories.list("42")) == [
            "I like batch_fencing", "I like batch_kayaking"]


async def test_a_patch_to_the_same_text_and_a_repeated_fact_change_nothing(settings):
    """Trustcall makes the model call a tool even when nothing is new: a same-text patch moved the memory's
    date, logged a change that was none and made the small talk a source; a repeat was added twice."""
    def script(call: Call):
        if call.is_extraction and "thanks, that helps" in call.prompt_text:
            key = doc_id(call, "Lives in Oslo")
            return AIMessage(content="", tool_calls=[
                tool_call("PatchDoc", {"json_doc_id": key, "planned_edits": "none",
                                       "patches": [{"op": "replace", "path": "/content", "value": "Lives in Oslo"}]}),
                tool_call("Memory", {"content": "lives in  oslo.", "source_messages": [1]}, 1),
                tool_call("Memory", {"content": "", "source_messages": []}, 2),  # "nothing to record"
                tool_call("Memory", {"content": "Says thanks a lot", "source_messages": [1]}, 3),
                tool_call("Memory", {"content": "Says thanks a lot.", "source_messages": [1]}, 4)])
        return default_script(call)

    model = ScriptedChatModel(script)
    async with running_engine(settings, model) as engine:
        key = await engine.memories.add("42", "Lives in Oslo", {"guild_id": "900"})
        (before,) = await engine.memories.list("42")
        await engine.reply("t", ADA, "thanks, that helps")
        await engine.scheduler.flush()
        memories = await engine.memories.list("42")
        history = await engine.memories.history("42")
    assert sorted(m.content for m in memories) == ["Lives in Oslo", "Says thanks a lot"]  # each once
    (oslo,) = [m for m in memories if m.key == key]
    assert oslo.content == "Lives in Oslo" and oslo.updated_at == before.updated_at and oslo.sources == before.sources
    assert sorted((h.action, h.after) for h in history) == [("created", "Lives in Oslo"), ("created", "Says thanks a lot")]
    assert "empty content" in model.extraction_calls[0].system  # told how to record nothing


async def test_relative_dates_count_from_when_the_message_was_sent_not_when_it_was_queued(settings):
    """The learning queue records a turn after its answer: "yesterday" said at 23:59 was counted from the
    next day, and the memory's date was the queueing's."""
    sent = Speaker(user_id="42", name="Ada", guild_id="900", channel_id="7", message_id="71",
                   sent_at="2026-05-08T23:59:00+00:00")
    model = ScriptedChatModel(default_script)
    async with running_engine(settings, model) as engine:
        await engine.reply("t", sent, "I love the half marathon I ran yesterday")
        await engine.scheduler.flush()
        (memory,) = await engine.memories.list("42")
    assert "2026-05-08 23:59" in model.extraction_calls[0].prompt_text
    assert memory.created_at.isoformat().startswith("2026-05-08T23:59")


async def test_every_call_of_an_extraction_is_counted_against_the_budget(settings):
    """With memories, Trustcall's result carries no usage figures (its update path builds a new message),
    and its repair calls are never in it: most extractions were never counted. Each call is counted, a
    call without figures by estimate, one timed out after it was sent by its prompt; a refused or failed
    request is not charged (providers do not bill those)."""
    from langchain_core.messages import AIMessage as Answer

    figures = {"input_tokens": 500, "output_tokens": 40, "total_tokens": 540}
    outputs = [ConnectionError("down"), TimeoutError("cut short"), "with figures", "without figures"]

    def script(call: Call):
        if not call.is_extraction:
            return "Noted!"
        out = outputs.pop(0)
        if isinstance(out, BaseException):
            raise out
        said = default_script(call)
        if out == "with figures":
            return Answer(content="", tool_calls=said.tool_calls, usage_metadata=figures)
        return Answer(content="", tool_calls=said.tool_calls, additional_kwargs={"no_usage": True})

    async with running_engine(settings, ScriptedChatModel(script)) as engine:
        charged: list[tuple[int, int]] = []
        record = engine.writer.on_usage

        async def counted(request, prompt: int, completion: int) -> None:
            charged.append((prompt, completion))
            await record(request, prompt, completion)

        engine.writer.on_usage = counted
        await engine.memories.add("42", "Has a bike", {"guild_id": "900"})
        await engine.reply("t", ADA, "I like tea")
        await engine.scheduler.run("900", "42")  # refused: nothing charged
        assert charged == []
        await engine.scheduler.run("900", "42")  # timed out: its prompt was sent
        await engine.scheduler.flush()
        await engine.reply("t", ADA, "I like jam")
        await engine.scheduler.flush()
        assert len(charged) == 3 and charged[0][0] > 50 and charged[0][1] == 0  # the timed-out call's prompt
        assert charged[1] == (500, 40)  # the provider's figures, though Trustcall's result drops them
        assert charged[2][0] > 50 and charged[2][1] > 0  # estimated, not nothing
        assert await engine.meter.tokens_today("900", "42") >= sum(p + c for p, c in charged)


async def test_a_memory_deleted_and_inserted_again_in_one_batch_is_kept(settings):
    """The repeat check ignored that the batch deletes the memory it matched: the fact was lost."""
    def script(call: Call):
        if call.is_extraction and "start over" in call.prompt_text:
            return AIMessage(content="", tool_calls=[
                tool_call("RemoveDoc", {"json_doc_id": doc_id(call, "Lives in Oslo")}),
                tool_call("Memory", {"content": "Lives in Oslo", "source_messages": [1]}, 1)])
        return default_script(call)

    async with running_engine(settings, ScriptedChatModel(script)) as engine:
        key = await engine.memories.add("42", "Lives in Oslo", {"guild_id": "900"})
        await engine.reply("t", ADA, "start over with what you know")
        await engine.scheduler.flush()
        memories = await engine.memories.list("42")
    assert [m.content for m in memories] == ["Lives in Oslo"] and memories[0].key != key
