"""The quote rule: four words or twenty characters copied from an erased message are cut out, no less."""

from __future__ import annotations

from bot.engine.erasure.quotes import REDACTED, QuoteRule
from bot.engine.state import Speaker
from tests.conftest import ScriptedChatModel, default_script, running_engine

ERASED = "I like the zebra-quartz-7731 project and my cat sleeps on the piano every night"


def rule() -> QuoteRule:
    return QuoteRule.from_texts([ERASED])


def test_four_words_copied_anywhere_are_redacted_whatever_the_case_and_punctuation():
    text = 'Bob: Alice told me "My CAT sleeps on the Piano", funny!'
    assert rule().redact(text) == f'Bob: Alice told me "{REDACTED}", funny!'


def test_twenty_characters_in_fewer_words_are_redacted():
    assert rule().redact("what is zebra-quartz-7731 project?") == f"what is {REDACTED}?"
    assert rule().redact("**zebra-quartz-7731**") == "**zebra-quartz-7731**"  # 17 characters alone: too short


def test_three_short_words_and_paraphrase_stay():
    for text in ("I like the weather", "my cat sleeps", "Alice has a cat that naps on her piano at night"):
        assert rule().redact(text) == text, text


def test_a_long_quote_becomes_one_marker_and_the_rest_of_the_text_stays():
    text = f"She said: {ERASED}. Anyway, lunch?"
    assert rule().redact(text) == f"She said: {REDACTED}. Anyway, lunch?"


def test_the_rule_round_trips_through_bytes_without_any_words():
    r = rule()
    data = r.to_bytes()
    assert b"zebra" not in data and b"piano" not in data
    again = QuoteRule.from_bytes(data)
    assert again.redact("the zebra-quartz-7731 project") == REDACTED
    assert again.grams == r.grams


def test_an_empty_rule_changes_nothing():
    assert QuoteRule().redact(ERASED) == ERASED
    assert not QuoteRule.from_texts(["", "   "])


def test_an_edit_takes_back_the_runs_around_each_word_it_dropped_and_only_those():
    from bot.engine.erasure.quotes import taken_back

    rule = taken_back(["my door code is 4417"], "my door code is secret")
    assert rule.redact("your door code is 4417, noted") == "your [erased], noted"
    assert rule.redact("my door code is secret") == "my door code is secret"  # what the new text still says
    assert rule.redact("I fixed the door code is what she said") == "I fixed the door code is what she said"
    assert not taken_back(["same words here and there"], "same words here and there")


async def test_an_edits_taken_back_words_leave_the_bots_answers_the_queue_and_the_files(settings):
    from tests.engine.erasure.test_derived_data import files_with

    alice = Speaker(user_id="42", name="Alice", guild_id="9", channel_id="c", message_id="m1")
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("c", alice, "my door code is QX4417ZV")  # the scripted answer repeats it
        assert "QX4417ZV" in " ".join(m.text for m in (await engine.thread_state("c"))["messages"])
        assert await engine.message_edited("c", "m1", "my door code is secret")
        texts = [m.text for m in (await engine.thread_state("c"))["messages"]]
        assert texts[0] == "my door code is secret" and not any("QX4417ZV" in t for t in texts)
        assert any("[erased]" in t for t in texts[1:])  # the bot's answer lost the taken-back run
        rows = [t for t in await engine.inbox.every_turn() if t.thread_id == "c"]
        assert rows and not any("QX4417ZV" in t.human + t.ai for t in rows)
        assert await engine.storage.erasures.unfinished() == []
    assert files_with(settings, b"QX4417ZV") == []


async def test_an_extraction_in_flight_with_the_erased_words_as_context_cannot_write_them_back(settings):
    """Quinn's extraction reads the thread's other turns as context, Pat's secret among them. Pat wipes
    while it runs: nothing of Quinn's quoted Pat yet, so Quinn was not held, and the memory it wrote after
    "Done" kept Pat's sentence. Everyone queued beside Pat is held now: the extraction finishes first and
    its memory is then cut like any other quote."""
    import asyncio
    import time

    from langchain_core.messages import AIMessage

    from tests.conftest import PERSON, tool_call

    secret = "the spare key hides under the blue flowerpot"

    def script(call):
        if call.is_extraction:
            person = PERSON.search(call.prompt_text)
            if person and person.group(1) == "2" and secret in call.prompt_text:
                time.sleep(1.0)  # the model is thinking (an executor thread)
                return AIMessage(content="", tool_calls=[tool_call("Memory", {"content": f"Quinn knows {secret}",
                                                                               "source_messages": [1]})])
            return AIMessage(content="", tool_calls=[])
        return "Noted!"

    pat = Speaker(user_id="1", name="Pat", guild_id="9", channel_id="t", message_id="11")
    quinn = Speaker(user_id="2", name="Quinn", guild_id="9", channel_id="t", message_id="12")
    async with running_engine(settings, ScriptedChatModel(script)) as engine:
        await engine.reply("t", pat, f"psst: {secret}")
        await engine.reply("t", quinn, "I like gardening")
        extraction = asyncio.create_task(engine.scheduler.run("9", "2"))
        await asyncio.sleep(0.3)
        await engine.erase_person("1")
        await extraction
        kept = [m.content for m in await engine.memories.list("2")]
        assert kept and not any("flowerpot" in m for m in kept)


def test_a_copy_with_runs_cut_out_is_told_from_an_edit():
    """``redaction_of``: the bot's copy differs from Discord's text only where it says "[erased]"."""
    from bot.engine.erasure.quotes import redaction_of

    text = "Bob: as Ann said, the spare key hides under the blue flowerpot, ok?"
    assert redaction_of("Bob: as Ann said, [erased], ok?", text)
    assert redaction_of("[erased], ok?", text) and redaction_of("Bob: as Ann said, [erased]", text)
    assert redaction_of("Bob: [erased] said, [erased], ok?", text)
    assert not redaction_of("Bob: as Ann said, [erased], okay?", text)  # changed elsewhere: an edit
    assert not redaction_of("Bob: as Ann said, ok?", text)  # nothing cut: compared as text, elsewhere
    assert not redaction_of("Bob: [erased][erased], ok?", "Bob: x, ok?")  # two cuts need two characters
    assert not redaction_of("[erased]", "")


async def test_an_edits_taken_back_words_leave_the_memories_others_learned_from_them(settings):
    """Bob was in the thread when Alice said her door code, and his extraction learned it ("Alice's door
    code is ..."). Alice edits the number away: the thread and the queue lost it, Bob's memory kept it.
    Like a deletion's, an edit's taken-back words leave the memories of the people in that thread."""
    from bot.engine.state import Speaker

    alice = Speaker(user_id="42", name="Alice", guild_id="9", channel_id="c", message_id="m1")
    bob = Speaker(user_id="43", name="Bob", guild_id="9", channel_id="c", message_id="m2")
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("c", alice, "my door code is QX4417ZV, remember")
        await engine.reply("c", bob, "noted, I will remember that")
        await engine.memories.apply("43", inserts=[("Alice's door code is QX4417ZV, remember", bob.origin())])
        assert await engine.message_edited("c", "m1", "my door code is secret")
        assert not any("QX4417ZV" in m.content for m in await engine.memories.list("43"))
        assert [m.content for m in await engine.memories.list("43") if "[erased]" in m.content]


async def test_someone_who_joins_the_persons_thread_during_their_wipe_is_held_too(settings, monkeypatch):
    """Pat's wipe reads who is queued beside Pat (their extraction reads Pat's turns as context) before it
    walks every thread. Quinn speaks in Pat's thread meanwhile, and an extraction of Quinn's starting then
    could read Pat's turns and write Pat's words into Quinn's memory after "Done". Who is beside Pat is
    read again just before Pat's rows go, and Quinn is held and checked too."""
    pat = Speaker(user_id="1", name="Pat", guild_id="9", channel_id="t", message_id="11")
    quinn = Speaker(user_id="2", name="Quinn", guild_id="9", channel_id="t", message_id="12")
    seen: list[set[str]] = []
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("t", pat, "psst: the spare key hides under the blue flowerpot")
        steps = engine.eraser.steps
        walk, cut = steps.conversations.erase_author, steps.cut_quotes_in_learning

        async def quinn_speaks_meanwhile(*args, **kwargs):
            await engine.reply("t", quinn, "I like gardening")
            return await walk(*args, **kwargs)

        async def watched(quotes, author, *, also=()):
            seen.append(set(also))
            return await cut(quotes, author, also=also)

        monkeypatch.setattr(steps.conversations, "erase_author", quinn_speaks_meanwhile)
        monkeypatch.setattr(steps, "cut_quotes_in_learning", watched)
        await engine.erase_person("1")
        assert seen and "2" in seen[-1]
