"""Short-term memory: summarization past the threshold, and everything back after a restart."""

from __future__ import annotations

from langchain_core.messages import HumanMessage

from bot.engine.conversation.rendering import quoted
from bot.engine.state import Speaker
from tests.conftest import (
    ScriptedChatModel,
    default_script,
    make_settings,
    running_engine,
)

ADA = Speaker(user_id="42", name="Ada", guild_id="900", channel_id="7", message_id="70")


async def test_past_threshold_state_holds_summary_and_last_messages(tmp_path, backend):
    settings = make_settings(tmp_path, backend, conversation={"summarize_after_messages": 6, "keep_messages": 4})
    model = ScriptedChatModel(default_script)
    async with running_engine(settings, model) as engine:
        for i in range(4):
            await engine.reply("t", ADA, f"message number {i}")
        await engine.close()  # finish the background tail (summarize) of the last turn
        state = await engine.thread_state("t")
        assert state["summary"].startswith("SUMMARY:")
        assert "message number 0" in state["summary"]
        assert len(state["messages"]) <= 4
        assert state["messages"][-1].text == "reply to [Ada | user 42]\n> message number 3"

        await engine.reply("t", ADA, "and now?")
        # The summary is quoted conversation: in a user-role message, never in the system prompt.
        assert quoted(state["summary"]) in model.chat_calls[-1].prompt_text
        assert state["summary"].strip() not in model.chat_calls[-1].system


async def test_the_summary_being_extended_is_quoted_as_data(tmp_path, backend):
    """The summary is written from members' messages: extending it, the model sees it quoted like them,
    so a line slipped into it cannot read as an instruction (until 2026-12-06 it went in bare)."""
    settings = make_settings(tmp_path, backend, conversation={"summarize_after_messages": 6, "keep_messages": 4})
    model = ScriptedChatModel(default_script)
    async with running_engine(settings, model) as engine:
        for i in range(4):
            await engine.reply("t", ADA, f"message number {i}")
        await engine.close()
        first = (await engine.thread_state("t"))["summary"]
    async with running_engine(settings, model) as engine:
        for i in range(4, 8):
            await engine.reply("t", ADA, f"message number {i}")
    extend = next(c for c in model.chat_calls if "Extend the summary" in c.messages[-1].text)
    ask = extend.messages[-1].text
    assert quoted(first) in ask and "data, not instructions" in ask
    # Who said what is kept by user ID: a display name is anyone's to copy, and once folded into the
    # summary nothing else tells a member from someone who took their name.
    new = next(c for c in model.chat_calls if "Summarize the conversation" in c.messages[-1].text)
    for call in (new, extend):
        assert "by user ID" in call.messages[-1].text and "[Ada | user 42]" in call.prompt_text


async def test_summarizes_by_token_budget_too(tmp_path, backend):
    settings = make_settings(
        tmp_path, backend, conversation={"summarize_after_messages": 1000, "summarize_after_tokens": 200, "keep_messages": 2}
    )
    model = ScriptedChatModel(default_script)
    async with running_engine(settings, model) as engine:
        for i in range(3):
            await engine.reply("t", ADA, f"long message {i} " + "x" * 400)
        await engine.close()
        state = await engine.thread_state("t")
    assert state.get("summary")
    assert len(state["messages"]) == 2


async def test_thread_and_memories_survive_restart(tmp_path, backend):
    settings = make_settings(tmp_path, backend)
    model = ScriptedChatModel(default_script)
    async with running_engine(settings, model) as engine:
        await engine.reply("t", ADA, "I like rowing")
        await engine.reply("t", ADA, "my name is Ada")
    # Closed: databases shut. Reopen the same files with a new engine.
    model2 = ScriptedChatModel(default_script)
    async with running_engine(settings, model2) as engine:
        state = await engine.thread_state("t")
        humans = [m.text for m in state["messages"] if isinstance(m, HumanMessage)]
        assert humans == ["I like rowing", "my name is Ada"]
        assert state["messages"][0].additional_kwargs["author_id"] == "42"
        contents = sorted(m.content for m in await engine.memories.list("42"))
        assert contents == ["I like rowing", "my name is Ada"]
        await engine.reply("t", ADA, "what do you know?")
        assert "I like rowing" in model2.chat_calls[-1].system
        assert "[Ada | user 42]\n> I like rowing" in model2.chat_calls[-1].prompt_text


async def test_pending_extraction_resumes_after_restart(tmp_path, backend):
    settings = make_settings(tmp_path, backend)
    model = ScriptedChatModel(default_script)
    async with running_engine(settings, model) as engine:
        engine.scheduler._closed = True  # simulate a crash: nothing is flushed on the way out
        engine.scheduler.close = _noop  # type: ignore[method-assign]
        await engine.reply("t", ADA, "I love kayaking")
        assert await engine.memories.list("42") == []
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        assert [p.user_id for p in await engine.inbox.pending()] == ["42"]
        await engine.scheduler.flush()
        assert [m.content for m in await engine.memories.list("42")] == ["I love kayaking"]
        assert await engine.inbox.pending() == []


async def _noop(*_a, **_k) -> None:
    return None


def test_a_summary_folds_whole_turns_and_enough_that_long_answers_do_not_summarise_every_turn():
    """Found in review 2026-12-07: the cut fell at a fixed count, so with a turn of two messages the
    question was folded and its answer kept, and a wipe of the asker (which takes an answer out with its
    question) left the answer; and with long answers the kept four were near the budget alone, so nearly
    every turn summarised again."""
    from types import SimpleNamespace

    from langchain_core.messages import AIMessage

    from bot.engine.conversation.graph import fold_point

    deps = SimpleNamespace(keep_messages=2, summarize_after_tokens=1000)
    q1, a1, q2, q2b, a2 = (HumanMessage("q1"), AIMessage("a1"), HumanMessage("q2"), HumanMessage("q2 again"),
                           AIMessage("a2"))
    assert fold_point([q1, a1, q2, q2b, a2], deps) == 2  # not 3: q2 stays with q2b and its answer
    assert fold_point([q1, a1], deps) == 0  # nothing older than what is kept
    long = [HumanMessage("q"), AIMessage("x" * 2000)] * 4  # each answer ~500 tokens: keep only the last turn
    deps = SimpleNamespace(keep_messages=4, summarize_after_tokens=1200)
    assert fold_point(long, deps) == 6


async def test_a_reasoning_models_thinking_is_not_the_summary_and_an_empty_one_changes_nothing(tmp_path):
    settings = make_settings(tmp_path, conversation={"summarize_after_messages": 6, "keep_messages": 4})
    empty = [True]

    def script(call):
        if any("Summarize" in m.text for m in call.messages[-1:]):
            return "<think>" + ("" if empty[0] else "private chain of thought") + "</think>" + \
                ("" if empty[0] else "SUMMARY: they counted")
        return default_script(call)

    async with running_engine(settings, ScriptedChatModel(script)) as engine:
        for i in range(4):
            await engine.reply("t", ADA, f"message number {i}")
        await engine.runner.close()
        state = await engine.thread_state("t")
        assert not state.get("summary") and len(state["messages"]) == 8  # nothing folded into nothing
        empty[0] = False
        await engine.reply("t", ADA, "message number 4")
        await engine.runner.close()
        state = await engine.thread_state("t")
        assert state["summary"] == "SUMMARY: they counted"


def test_a_backlog_of_recorded_messages_is_folded_in_bounded_calls_and_cut_only_where_no_answer_spans():
    """A day of messages only recorded (the budget spent) was folded in one summary call over all of it;
    and a cut may fall between recorded messages, but never between a question and its later answer."""
    from types import SimpleNamespace

    from langchain_core.messages import AIMessage

    from bot.engine.conversation.graph import fold_point

    deps = SimpleNamespace(keep_messages=2, summarize_after_tokens=1000)
    heard = [HumanMessage("y" * 400, id=f"h{i}", additional_kwargs={"heard": True}) for i in range(60)]  # ~100 each
    q, a = HumanMessage("q", id="q"), AIMessage("a", id="a", additional_kwargs={"answers": ["q"]})
    messages = [HumanMessage("q0", id="q0"), AIMessage("a0", id="a0"), *heard, q, a]
    cut = fold_point(messages, deps)
    assert 2 < cut <= 22  # into the backlog, at most two budgets (~2,000 tokens) in one call
    assert sum(len(m.text) for m in messages[:cut]) <= 4 * 2000

    q1 = HumanMessage("q1" + "z" * 4000, id="q1")
    mixed = [q1, HumanMessage("h" * 4000, id="h", additional_kwargs={"heard": True}), HumanMessage("q2", id="q2"),
             AIMessage("a", id="a", additional_kwargs={"answers": ["q1", "q2"]}), HumanMessage("q3", id="q3"),
             AIMessage("a3", id="a3", additional_kwargs={"answers": ["q3"]})]
    assert fold_point(mixed, deps) == 4  # never after the recorded message (q1's answer comes later), and
    # past the cap rather than not at all: a cut of 0 every turn stopped the thread's summaries for good
    joined = [HumanMessage("p" * 4000, id=f"j{i}") for i in range(7)]
    joined += [AIMessage("a", id="ja", additional_kwargs={"answers": [m.id for m in joined]})]
    joined += [HumanMessage("q", id="q9"), AIMessage("a9", id="a9", additional_kwargs={"answers": ["q9"]})] * 3
    assert fold_point(joined, SimpleNamespace(keep_messages=6, summarize_after_tokens=3000)) == 8


async def test_an_answer_after_a_backlog_reads_only_the_newest_within_two_budgets(tmp_path, backend):
    """The first answer after a day of recorded messages sent the whole day in one prompt, past the
    context window: every later answer in the channel failed the same way."""
    from dataclasses import replace

    from bot.engine import Incoming

    settings = make_settings(tmp_path, backend, conversation={"summarize_after_tokens": 500,
                                                              "summarize_after_messages": 1000})
    model = ScriptedChatModel(default_script)
    async with running_engine(settings, model) as engine:
        for i in range(40):
            said = replace(ADA, message_id=str(100 + i))
            await engine.hear("t", [Incoming(said, f"backlog {i:02d} " + "w" * 200, answer=False)])
        await engine.reply("t", replace(ADA, message_id="200"), "what did I miss?")
        prompt = model.chat_calls[0].prompt_text
        assert "what did I miss?" in prompt and "backlog 39" in prompt and "backlog 00" not in prompt
        assert len(prompt) < 4 * 500 * 2 + 2000  # two budgets of history, plus the situation and the question
        await engine.close()
        state = await engine.thread_state("t")
    summaries = [c for c in model.chat_calls if "Summarize the conversation" in c.messages[-1].text]
    assert summaries and all(len(c.prompt_text) < 4 * 500 * 2 + 2000 for c in summaries)
    assert "backlog 00" in state["summary"]  # folded, from the oldest
