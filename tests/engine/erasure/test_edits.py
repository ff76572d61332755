"""Edits and the person's own removals go through the one door: journaled jobs, finished after a crash.

An edit's row holds IDs and the message's *new* text (never the old); a crash part-way through is finished
at the next start, and then only the new text is learned. ``/memories delete`` is a journaled job too.
"""

from __future__ import annotations

import json

import pytest

from bot.engine.memories.records import Actor
from bot.engine.state import Speaker
from tests.conftest import Call, ScriptedChatModel, default_script, running_engine
from tests.engine.erasure.test_eraser import _files_with


def no_echo(call: Call):
    return default_script(call) if call.is_extraction else "Noted!"


def ann(message_id: str) -> Speaker:
    return Speaker(user_id="1", name="Ann", guild_id="9", channel_id="c", message_id=message_id)


async def crashed_before_its_row_was_finished(engine, monkeypatch, job) -> None:
    """Run ``job()`` (an edit, a memory change) and crash it just before its journal row is finished: the
    work is done, the row is left for the journal's replay."""
    finish = engine.eraser._finish

    async def crash(_job_id, **_kw):
        raise RuntimeError("killed before the row was finished")

    monkeypatch.setattr(engine.eraser, "_finish", crash)
    with pytest.raises(RuntimeError):
        await job()
    monkeypatch.setattr(engine.eraser, "_finish", finish)


async def test_a_crash_in_the_middle_of_an_edit_is_finished_with_the_new_text(settings, monkeypatch):
    old, new = "okapi_old_text_3141", "narwhal_new_text_2718"
    async with running_engine(settings, ScriptedChatModel(no_echo)) as engine:
        await engine.reply("c", ann("501"), f"I like {old}")
        await engine.scheduler.flush()
        await engine.reply("c", ann("502"), "I like rowing")
        await engine.scheduler.flush()
        assert f"I like {old}" in [m.content for m in await engine.memories.list("1")]

        async def crash(*_a, **_k):  # the thread has the new text; the queue and the memory not yet
            raise RuntimeError("killed mid-edit")

        monkeypatch.setattr(engine.storage.inbox, "edit_message", crash)
        with pytest.raises(RuntimeError):
            await engine.message_edited("c", "501", f"I like {new}")
        monkeypatch.undo()
        (job,) = await engine.storage.erasures.unfinished()
        # The row holds the taken-back words as keyed hashes only (like a deletion's), never the words.
        assert job.kind == "edit" and job.quotes and old.encode() not in job.quotes
        plan = json.loads(job.subject)
        assert plan["message"] == "501" and new in plan["text"] and old not in job.subject
        assert f"I like {old}" in [m.content for m in await engine.memories.list("1")]  # half done
    async with running_engine(settings, ScriptedChatModel(no_echo)) as engine:
        assert await engine.storage.erasures.unfinished() == []
        await engine.scheduler.flush()
        assert sorted(m.content for m in await engine.memories.list("1")) == [f"I like {new}", "I like rowing"]
        assert all(old not in t.human for t in await engine.storage.inbox.every_turn())
    assert _files_with(settings, old) == []


async def test_an_edit_queued_again_and_then_crashed_is_not_queued_twice(settings, monkeypatch):
    async with running_engine(settings, ScriptedChatModel(no_echo)) as engine:
        await engine.reply("c", ann("601"), "I like tea_twice")
        await engine.scheduler.flush()
        await crashed_before_its_row_was_finished(
            engine, monkeypatch, lambda: engine.message_edited("c", "601", "I like coffee_once"))
        assert await engine.eraser.resume() == 1
        rows = [t for t in await engine.storage.inbox.every_turn() if t.origin.get("message_id") == "601"]
        assert [t.human for t in rows if t.human == "I like coffee_once"]
        await engine.scheduler.flush()
        assert [m.content for m in await engine.memories.list("1")] == ["I like coffee_once"]


@pytest.mark.parametrize("removal", ["message deleted", "author wiped"])
async def test_an_edit_retried_after_its_message_was_removed_brings_nothing_back(settings, monkeypatch, removal):
    """An edit fails half-way (a database outage) and is retried from the journal later. Meanwhile the
    message is deleted, or its author wipes everything: the retry must not queue the edited text again, to
    be learned after the removal said it was done."""
    old, new = "okapi_old_text_3141", "narwhal_new_text_2718"
    async with running_engine(settings, ScriptedChatModel(no_echo)) as engine:
        await engine.reply("c", ann("801"), f"I like {old}")
        await engine.scheduler.flush()

        async def outage(*_a, **_k):
            raise RuntimeError("the database went away mid-edit")

        monkeypatch.setattr(engine.storage.inbox, "edit_message", outage)
        with pytest.raises(RuntimeError):
            await engine.message_edited("c", "801", f"I like {new}")
        monkeypatch.undo()
        assert len(await engine.storage.erasures.unfinished()) == 1
        if removal == "message deleted":
            await engine.messages_deleted("c", {"801"})
        else:
            await engine.erase_person("1")
        assert await engine.eraser.resume() == 1  # the retry ran, and finished the row
        assert await engine.storage.erasures.unfinished() == []
        assert all(new not in t.human and old not in t.human for t in await engine.storage.inbox.every_turn())
        await engine.scheduler.flush()
        assert await engine.memories.list("1") == []
    assert _files_with(settings, new) == [] and _files_with(settings, old) == []


FIRST, SECOND, THIRD = "okapi_first_3141", "narwhal_second_2718", "quokka_third_1618"


async def an_edit_left_in_the_journal(engine, monkeypatch, message_id: str) -> None:
    """A message said with FIRST, then edited to SECOND by an edit that failed part-way (in the journal)."""
    await engine.reply("c", ann(message_id), f"I like {FIRST}")

    async def outage(*_a, **_k):
        raise RuntimeError("the database went away mid-edit")

    monkeypatch.setattr(engine.storage.inbox, "edit_message", outage)
    with pytest.raises(RuntimeError):
        await engine.message_edited("c", message_id, f"I like {SECOND}")
    monkeypatch.undo()


async def test_an_older_edit_left_in_the_journal_never_writes_over_a_newer_one(settings, monkeypatch):
    """Found in review 2026-12-07 (fourteenth session): edit 1 failed part-way and waited for its retry;
    edit 2 ran; the journal then replayed edit 1, writing its text over edit 2's in the thread and the
    learning queue, so words the author had edited away were answered from and learned."""
    async with running_engine(settings, ScriptedChatModel(no_echo)) as engine:
        await an_edit_left_in_the_journal(engine, monkeypatch, "802")
        assert await engine.message_edited("c", "802", f"I like {THIRD}")
        await engine.eraser.resume()
        assert await engine.storage.erasures.unfinished() == []
        said = [m.content for m in (await engine.thread_state("c"))["messages"] if m.type == "human"]
        assert any(THIRD in t for t in said) and not any(SECOND in t or FIRST in t for t in said)
        queued = [t.human for t in await engine.storage.inbox.every_turn()]
        assert any(THIRD in t for t in queued) and not any(SECOND in t or FIRST in t for t in queued)


async def test_an_earlier_edit_failing_for_good_does_not_hold_back_the_newer_one(settings, monkeypatch):
    """Found in review of this session's change: the earlier edit is finished first; failing for good (not an
    outage), it raised out of every later edit of the message, and Discord sends each edit once."""
    async with running_engine(settings, ScriptedChatModel(no_echo)) as engine:
        await an_edit_left_in_the_journal(engine, monkeypatch, "803")
        real = engine.eraser.steps.still_held

        async def poisoned(recorded):
            if SECOND in recorded.get("text", ""):
                raise ValueError("a poisoned row")
            return await real(recorded)

        monkeypatch.setattr(engine.eraser.steps, "still_held", poisoned)
        assert await engine.message_edited("c", "803", f"I like {THIRD}")
        assert await engine.storage.erasures.unfinished() == []  # the earlier one superseded, not retried
        said = [m.content for m in (await engine.thread_state("c"))["messages"] if m.type == "human"]
        assert any(THIRD in t for t in said) and not any(SECOND in t or FIRST in t for t in said)


async def test_the_persons_delete_is_a_journaled_job_finished_after_a_crash(settings, monkeypatch):
    async with running_engine(settings, ScriptedChatModel(no_echo)) as engine:
        await engine.reply("c", ann("701"), "I like hand_delete_canary")
        await engine.scheduler.flush()
        (memory,) = await engine.memories.list("1")

        async def crash(*_a, **_k):
            raise RuntimeError("killed mid-delete")

        monkeypatch.setattr(engine.eraser.steps, "delete_memories", crash)
        with pytest.raises(RuntimeError):
            await engine.delete_memories("1", [memory.key], by=Actor("user", "1"))
        monkeypatch.undo()
        (job,) = await engine.storage.erasures.unfinished()
        assert job.kind == "memories" and job.actor == "user" and memory.key in job.subject
    async with running_engine(settings, ScriptedChatModel(no_echo)) as engine:
        assert await engine.storage.erasures.unfinished() == []
        assert await engine.memories.list("1") == []
        assert [e.actor for e in await engine.memory_history("1", memory.key)] == ["extraction", "user"]


async def test_an_old_message_the_bot_holds_no_text_of_is_judged_by_its_edited_timestamp(settings):
    """Only memories still name the message (no thread or queue text to compare with): an update whose
    ``edited_timestamp`` is older than when the bot recorded the message changes nothing; a later one is
    an edit."""
    import time
    from datetime import datetime, timezone

    async with running_engine(settings, ScriptedChatModel(no_echo)) as engine:
        recorded = time.time() - 3600
        source = {"guild_id": "9", "channel_id": "c", "message_id": "1001",
                  "at": datetime.fromtimestamp(recorded, timezone.utc).isoformat(timespec="seconds")}
        origin = {**source, "source": "extraction"}
        await engine.memories.apply("1", inserts=[("I like old_message_tea", origin, [source])])
        before = await engine.memories.list("1")
        assert not await engine.message_edited("c", "1001", "I like old_message_tea", edited_at=recorded - 600)
        assert await engine.memories.list("1") == before and await engine.storage.erasures.unfinished() == []
        # A source's time is kept to the second: a message learned again 0.2 s after its edit reads as
        # recorded before it. Within a second it is the same edit, not a new one (a pin comes later).
        assert not await engine.message_edited("c", "1001", "I like old_message_tea",
                                               edited_at=int(recorded) + 0.8)
        assert await engine.memories.list("1") == before and await engine.storage.erasures.unfinished() == []
        assert await engine.message_edited("c", "1001", "I like old_message_coffee", edited_at=time.time())
        await engine.scheduler.flush()
        assert [m.content for m in await engine.memories.list("1")] == ["I like old_message_coffee"]



async def test_a_pin_of_a_message_learned_again_after_its_edit_changes_nothing(settings):
    """The old text taught a memory with another message (it stays after the edit, citing the message from
    before it); the edited text was learned again after the edit. A later pin or preview, the bot holding
    no text of the message, is not the edit again: the latest recording counts, not the earliest."""
    import time
    from datetime import datetime, timezone

    def at(seconds: float) -> str:
        return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="seconds")

    async with running_engine(settings, ScriptedChatModel(no_echo)) as engine:
        edited = time.time() - 3600
        first = {"guild_id": "9", "channel_id": "c", "message_id": "1001", "at": at(edited - 86400)}
        other = {"guild_id": "9", "channel_id": "c", "message_id": "1002", "at": at(edited - 86000)}
        again = {**first, "at": at(edited + 5)}
        await engine.memories.apply("1", inserts=[("Has two cats pin_canary", {**first, "source": "extraction"},
                                                   [first, other]),
                                                  ("Lives in Paris pin_canary", {**again, "source": "extraction"},
                                                   [again])])
        before = await engine.memories.list("1")
        assert not await engine.message_edited("c", "1001", "I moved to Paris", edited_at=edited)
        assert await engine.memories.list("1") == before and await engine.storage.erasures.unfinished() == []
        assert await engine.storage.inbox.every_turn() == []  # nothing queued to learn again

async def test_an_old_message_edited_is_learned_again_with_the_day_it_was_sent(settings):
    """Fixing a typo in a month-old "ran a marathon yesterday": the extractor read the message as written
    the day of the edit, and the memory learned again was dated then."""
    import time
    from datetime import datetime, timezone

    from bot.engine.erasure.steps import DISCORD_EPOCH_MS

    sent = time.time() - 45 * 86400
    message = str((int(sent * 1000) - DISCORD_EPOCH_MS) << 22)
    day = datetime.fromtimestamp(sent, timezone.utc).strftime("%Y-%m-%d")
    model = ScriptedChatModel(default_script)
    async with running_engine(settings, model) as engine:
        source = {"guild_id": "9", "channel_id": "c", "message_id": message,
                  "at": datetime.fromtimestamp(sent, timezone.utc).isoformat(timespec="seconds")}
        await engine.memories.apply("1", inserts=[("I like old_marathn", {**source, "source": "extraction"}, [source])])
        assert await engine.message_edited("c", message, "I like old_marathon", edited_at=time.time())
        await engine.scheduler.flush()
        (memory,) = await engine.memories.list("1")
    assert memory.content == "I like old_marathon"
    assert memory.created_at.strftime("%Y-%m-%d") == day
    assert f"#1 · {day}" in model.extraction_calls[-1].prompt_text  # "yesterday" reads from the day it was said

async def test_an_old_message_edited_is_learned_again_under_its_authors_name_not_their_id(settings):
    """The queue keeps a few rows a channel: for an older message no row names its author, and it was
    learned again as 'user 1 "1"' ("1 likes ..."). The update names them (``names``)."""
    model = ScriptedChatModel(default_script)
    async with running_engine(settings, model) as engine:
        source = {"guild_id": "9", "channel_id": "c", "message_id": "777"}
        await engine.memories.apply("1", inserts=[("I like typo_fixd", {**source, "source": "extraction"}, [source])])
        assert await engine.message_edited("c", "777", "I like typo_fixed", names={"1": "Ann B"})
        (row,) = [t for t in await engine.inbox.every_turn() if t.origin.get("message_id") == "777"]
        assert row.author == "Ann B"
        await engine.scheduler.flush()
    assert 'user 1 "Ann B" wrote:' in model.extraction_calls[-1].prompt_text


async def test_what_the_author_says_elsewhere_during_an_edit_or_a_memory_delete_is_still_learned(settings):
    """An edit and ``/memories delete`` hold their person lightly: on a shared database a full (erasure)
    hold makes the queue refuse the person's new turns, which is right for a wipe and wrong here."""
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("c", ann("51"), "I like sailing")
        await engine.scheduler.flush()
        real_edit, real_delete = engine.eraser.steps.edit, engine.eraser.steps.delete_memories
        elsewhere = Speaker(user_id="1", name="Ann", guild_id="9", channel_id="d", message_id="52")
        later = Speaker(user_id="1", name="Ann", guild_id="9", channel_id="d", message_id="53")

        async def edit_while_talking(plan):
            await engine.reply("d", elsewhere, "I like climbing")
            return await real_edit(plan)

        async def delete_while_talking(user, keys, by, messages=()):
            await engine.reply("d", later, "I like chess")
            return await real_delete(user, keys, by, messages)

        engine.eraser.steps.edit = edit_while_talking
        assert await engine.message_edited("c", "51", "I like rowing")
        await engine.scheduler.flush()
        assert sorted(m.content for m in await engine.memories.list("1")) == ["I like climbing", "I like rowing"]
        engine.eraser.steps.delete_memories = delete_while_talking
        rowing = next(m.key for m in await engine.memories.list("1") if m.content == "I like rowing")
        await engine.delete_memories("1", [rowing], by=Actor("user", "1"))
        await engine.scheduler.flush()
        assert sorted(m.content for m in await engine.memories.list("1")) == ["I like chess", "I like climbing"]


async def test_a_replayed_edit_or_memory_delete_still_holds_its_person_lightly(settings, monkeypatch):
    """The journal's replay of an edit or of ``/memories delete`` (a crash or a database blip part-way)
    holds the person as lightly as the live run: what they say meanwhile is answered and learned, not
    refused as if they were being wiped."""
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("c", ann("61"), "I like sailing")
        await engine.scheduler.flush()
        await crashed_before_its_row_was_finished(engine, monkeypatch,
                                                  lambda: engine.message_edited("c", "61", "I like rowing"))
        inbox_edit = engine.storage.inbox.edit_message

        async def talk_during_the_edit(message_id, text):  # runs under the replay's hold on the author
            await engine.reply("d", Speaker(user_id="1", name="Ann", guild_id="9", channel_id="d",
                                            message_id="62"), "I like climbing")
            return await inbox_edit(message_id, text)

        monkeypatch.setattr(engine.storage.inbox, "edit_message", talk_during_the_edit)
        assert await engine.eraser.resume() == 1
        monkeypatch.setattr(engine.storage.inbox, "edit_message", inbox_edit)
        await engine.scheduler.flush()
        assert sorted(m.content for m in await engine.memories.list("1")) == ["I like climbing", "I like rowing"]

        rowing = next(m.key for m in await engine.memories.list("1") if m.content == "I like rowing")
        await crashed_before_its_row_was_finished(
            engine, monkeypatch, lambda: engine.delete_memories("1", [rowing], by=Actor("user", "1")))
        delete = engine.eraser.steps.delete_memories

        async def talk_during_the_delete(user, keys, by, messages=()):
            await engine.reply("d", Speaker(user_id="1", name="Ann", guild_id="9", channel_id="d",
                                            message_id="63"), "I like chess")
            return await delete(user, keys, by, messages)

        monkeypatch.setattr(engine.eraser.steps, "delete_memories", talk_during_the_delete)
        assert await engine.eraser.resume() == 1
        await engine.scheduler.flush()
        assert sorted(m.content for m in await engine.memories.list("1")) == ["I like chess", "I like climbing"]


async def test_an_imported_file_naming_someone_elses_message_learns_nothing_from_its_edits(settings):
    """A member imports a file whose memory names a message they did not write (another member's, or one in
    a channel they cannot read). The file's word is kept (deleting the message still takes that memory
    along) but proves nothing about who wrote it: when the message is edited, only its author re-learns."""
    from bot.engine.memories.export import parse_import

    attacker = "999"
    doc = {"format": "remembering-bot.memories", "version": 2, "user_id": attacker, "exported_at": "x",
           "memories": [{"id": "a1", "content": "bait", "origin": {"guild_id": "dm", "source": "extraction"},
                         "sources": [{"message_id": "701", "guild_id": "dm", "at": "2015-01-01T00:00:00+00:00"}],
                         "created_at": "2025-01-01T00:00:00", "updated_at": "2025-01-01T00:00:00+00:00"}],
           "history": []}
    async with running_engine(settings, ScriptedChatModel(no_echo)) as engine:
        await engine.reply("c", ann("701"), "I like okapis")
        await engine.scheduler.flush()
        await engine.restore_memories(attacker, *parse_import(json.dumps(doc).encode(), attacker),
                                      by=Actor("user", attacker))
        assert await engine.message_edited("c", "701", "I like secretcanary_plans")
        await engine.scheduler.flush()
        assert [m.content for m in await engine.memories.list(attacker)] == ["bait"]
        assert "I like secretcanary_plans" in [m.content for m in await engine.memories.list("1")]  # the author's
        assert not [t for t in await engine.storage.inbox.every_turn() if t.user_id == attacker]
        # the file's naive time did not break the listing a deletion reads; the deletion takes both along
        await engine.messages_deleted("c", {"701"})
        assert await engine.memories.list(attacker) == []
        assert "I like secretcanary_plans" not in [m.content for m in await engine.memories.list("1")]


async def test_learning_an_edited_message_again_does_not_undo_the_persons_hand_correction(settings):
    """"I live in Berlin and work at Acme" taught two memories; the person corrected the first by hand
    (Munich), then edited the message (Initech). The message is learned again, and the extractor sees the
    corrected memory: a model that patches it back to Berlin, or deletes it, is not followed. What the
    person wrote by hand about that message stands; the rest follows the edit."""
    from langchain_core.messages import AIMessage

    from tests.conftest import doc_id, tool_call

    def script(call: Call):
        if not call.is_extraction:
            return "Noted!"
        if "Initech" in call.prompt_text:  # learning the edited message again
            return AIMessage(content="", tool_calls=[
                tool_call("PatchDoc", {"json_doc_id": doc_id(call, "Lives in Munich"), "planned_edits": "city",
                                       "patches": [{"op": "replace", "path": "/content", "value": "Lives in Berlin"}]}),
                tool_call("Memory", {"content": "Works at Initech", "source_messages": [1]}, 1)])
        return AIMessage(content="", tool_calls=[
            tool_call("Memory", {"content": "Lives in Berlin", "source_messages": [1]}, 0),
            tool_call("Memory", {"content": "Works at Acme", "source_messages": [1]}, 1)])

    async with running_engine(settings, ScriptedChatModel(script)) as engine:
        await engine.reply("c", ann("801"), "I live in Berlin and work at Acme")
        await engine.scheduler.flush()
        berlin = next(m for m in await engine.memories.list("1") if m.content == "Lives in Berlin")
        assert await engine.edit_memory("1", berlin.key, "Lives in Munich", {"guild_id": "9", "channel_id": "c"},
                                        by=Actor("user", "1"))
        assert await engine.message_edited("c", "801", "I live in Berlin and work at Initech")
        await engine.scheduler.flush()
        assert sorted(m.content for m in await engine.memories.list("1")) == ["Lives in Munich", "Works at Initech"]


async def test_an_edit_of_a_deleted_message_learns_nothing_from_its_new_text(settings):
    """Ann's two messages taught one memory; she deletes the second (the memory stays: the first still
    backs it), and an update of the deleted message comes in after (Discord's edit raced the deletion,
    or a file download kept the edit waiting). Nothing holds the message any more: its new text must not
    be queued and learned, as if the deletion had never happened."""
    from langchain_core.messages import AIMessage

    from tests.conftest import cited_facts, tool_call

    def script(call: Call):
        if call.is_extraction:
            facts = cited_facts(call)
            if not facts:
                return AIMessage(content="", tool_calls=[])
            content = " and ".join(f for f, _ in facts)
            return AIMessage(content="", tool_calls=[tool_call("Memory", {
                "content": content, "source_messages": sorted({n for _, n in facts})})])
        return "Noted!"

    async with running_engine(settings, ScriptedChatModel(script)) as engine:
        await engine.reply("c", ann("901"), "I like okapis")
        await engine.reply("c", ann("902"), "I like narwhals")
        await engine.scheduler.flush()
        (memory,) = await engine.memories.list("1")
        assert memory.message_ids() >= {"901", "902"}
        await engine.messages_deleted("c", {"902"})
        assert [m.key for m in await engine.memories.list("1")] == [memory.key]  # 901 still backs it

        assert not await engine.message_edited("c", "902", "I like zebras_after_delete_5150")
        assert all("zebras" not in t.human for t in await engine.storage.inbox.every_turn())
        await engine.scheduler.flush()
        assert all("zebras" not in m.content for m in await engine.memories.list("1"))
