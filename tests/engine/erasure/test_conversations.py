"""Stored conversations changed after the fact (``erasure/conversations.py``), on both backends.

Each rewrite goes through the chat graph's own state updates, so the thread stays usable afterwards; these
tests read the state back and check exactly which messages went and which stayed.
"""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage

from bot.engine import Speaker
from bot.engine.erasure.conversations import with_answers
from bot.engine.erasure.quotes import QuoteRule
from tests.conftest import ScriptedChatModel, default_script, running_engine


def speaker(user: str, name: str, guild: str, channel: str, message: str) -> Speaker:
    return Speaker(user_id=user, name=name, guild_id=guild, channel_id=channel, message_id=message)


async def _said(engine, thread: str) -> list[tuple[str, str]]:
    state = await engine.thread_state(thread)
    return [(type(m).__name__[0], m.text) for m in state.get("messages", [])]


async def test_erasing_an_author_in_one_server_keeps_their_other_servers_and_other_people(settings):
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("c1", speaker("a", "Alice", "g1", "c1", "m1"), "alice in one")
        await engine.reply("c1", speaker("b", "Bob", "g1", "c1", "m2"), "bob in one")
        await engine.reply("c2", speaker("a", "Alice", "g2", "c2", "m3"), "alice in two")
        removed, _ = await engine.conversations.erase_author("a", guild_id="g1")
        assert removed == 2  # her message and the answer to it
        assert _shape(await _said(engine, "c1")) == [("H", "bob in one"), ("A", "bob in one")]
        assert _shape(await _said(engine, "c2")) == [("H", "alice in two"), ("A", "alice in two")]
        assert await engine.conversations.texts_of("a") == ["alice in two"]


async def test_a_deletion_replayed_after_a_crash_before_its_prune_leaves_no_checkpoint_with_the_text(settings):
    """The first attempt rewrote the thread and died before pruning: the replay finds nothing left to remove
    in the latest state, and still prunes the checkpoints that hold the deleted words (until 2026-12-06 it
    returned early and they stayed)."""
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("c1", speaker("a", "Alice", "g1", "c1", "m1"), "call me on 555 1234")
        await engine.reply("c1", speaker("a", "Alice", "g1", "c1", "m2"), "thanks")
        conversations = engine.conversations
        prune, conversations.prune = conversations.prune, None  # the crash: the prune never ran
        assert (await conversations.erase_messages("c1", {"m1"}))[0] == 2
        conversations.prune = prune
        config = {"configurable": {"thread_id": "c1"}}
        assert any(["555 1234" in repr(c.checkpoint) async for c in engine.storage.checkpointer.alist(config)])
        assert await conversations.erase_messages("c1", {"m1"}) == (0, [])  # the replay
        held = [repr((c.checkpoint, c.pending_writes)) async for c in engine.storage.checkpointer.alist(config)]
        assert held and all("555 1234" not in c for c in held)
        assert _shape(await _said(engine, "c1")) == [("H", "thanks"), ("A", "thanks")]


async def test_quotes_of_an_erased_person_are_cut_out_of_what_others_said(settings):
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("c1", speaker("a", "Alice", "g1", "c1", "m1"), "my locker code is nine four two one")
        await engine.reply("c1", speaker("b", "Bob", "g1", "c1", "m2"),
                           "she said my locker code is nine four two one, funny")
        rule = QuoteRule.from_texts(await engine.conversations.texts_of("a"))
        removed, redacted = await engine.conversations.erase_author("a", quotes=rule)
        assert removed == 2 and redacted >= 1
        texts = " ".join(t for _, t in await _said(engine, "c1"))
        assert "nine four two one" not in texts
        assert "funny" in texts  # Bob's own words stay


async def test_deleting_a_message_takes_its_answer_and_nothing_else(settings):
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("c1", speaker("a", "Alice", "g1", "c1", "m1"), "first")
        await engine.reply("c1", speaker("a", "Alice", "g1", "c1", "m2"), "second")
        assert await engine.conversations.erase_messages("c1", {"never-stored"}) == (0, [])
        count, said = await engine.conversations.erase_messages("c1", {"m1"})
        assert (count, said) == (2, ["first"])
        assert _shape(await _said(engine, "c1")) == [("H", "second"), ("A", "second")]


async def test_deleting_a_message_only_heard_keeps_the_next_answer_to_someone_else(settings):
    """Bob's message over his limit is stored without an answer; Alice is answered next. Bob deletes his
    message: it goes, and Alice's question and its answer stay (the answer recorded every message since the
    last one as answered, so the deletion took Alice's answer with it, and on Discord too with
    ``/settings delete-replies``)."""
    from bot.engine.state import Incoming

    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.hear("c1", [Incoming(speaker("b", "Bob", "g1", "c1", "m1"), "bob over his limit", answer=False)])
        reply = await engine.reply("c1", speaker("a", "Alice", "g1", "c1", "m2"), "alice asks")
        await engine.attach_sent("c1", reply, ["d1"])
        assert await engine.conversations.replies_to("c1", {"m1"}) == []
        assert await engine.conversations.replies_to("c1", {"m2"}) == ["d1"]
        count, said = await engine.conversations.erase_messages("c1", {"m1"})
        assert (count, said) == (1, ["bob over his limit"])
        assert [kind for kind, _ in await _said(engine, "c1")] == ["H", "A"]
        assert (await _said(engine, "c1"))[0] == ("H", "alice asks")


async def test_a_deleted_bot_reply_leaves_alone_and_the_question_stays(settings):
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        reply = await engine.reply("c1", speaker("a", "Alice", "g1", "c1", "m1"), "question")
        await engine.attach_sent("c1", reply, ["d1", "d2"])  # sent as two Discord messages
        count, said = await engine.conversations.erase_messages("c1", {"d2"})
        assert (count, said) == (1, [])
        assert await _said(engine, "c1") == [("H", "question")]


async def test_a_question_whose_answer_a_moderator_deleted_is_not_answered_again_for_someone_else(settings):
    """A moderator deletes the bot's answer to Alice; later Bob talks to the bot. Alice's question stayed
    after the last answer, so it read as waiting: the model was told to answer it again in Bob's reply,
    and Bob's answer recorded it as answered (deleting Alice's message later took Bob's answer with it).
    The question stays in the conversation, marked answered."""
    model = ScriptedChatModel(default_script)
    async with running_engine(settings, model) as engine:
        reply = await engine.reply("c1", speaker("a", "Alice", "g1", "c1", "m1"), "alice question QV41")
        await engine.attach_sent("c1", reply, ["d1"])
        await engine.messages_deleted("c1", {"d1"})
        assert await _said(engine, "c1") == [("H", "alice question QV41")]
        await engine.reply("c1", speaker("b", "Bob", "g1", "c1", "m2"), "bob says hi")
        prompt = [m.text for m in model.chat_calls[-1].messages]
        alice = next(i for i, t in enumerate(prompt) if "alice question QV41" in t)
        note = next(i for i, t in enumerate(prompt) if t.startswith("[where this conversation is"))
        assert alice < note  # before the note that opens what this answer answers: history, not waiting
        answer = (await engine.thread_state("c1"))["messages"][-1]
        alice_id = (await engine.thread_state("c1"))["messages"][0].id
        assert alice_id not in answer.additional_kwargs["answers"]
        await engine.messages_deleted("c1", {"m1"})  # Alice's deletion leaves Bob's answer alone
        assert [kind for kind, _ in await _said(engine, "c1")] == ["H", "A"]


async def test_a_wipe_leaves_the_other_persons_question_of_a_gathered_turn_answered(settings):
    """Alice and Bob were answered together (one gathered turn); Alice wipes, and the answer goes with her
    messages. Bob's question stays, and must not read as waiting for the next person's answer."""
    from bot.engine.state import Incoming

    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply_to("c1", [Incoming(speaker("b", "Bob", "g1", "c1", "m1"), "bob question QV52"),
                                     Incoming(speaker("a", "Alice", "g1", "c1", "m2"), "alice adds QV53")])
        await engine.thread_state("c1")  # (the turn has ended: the wipe, not the turn, removes the answer)
        await engine.erase_person("a")
        assert await _said(engine, "c1") == [("H", "bob question QV52")]
        await engine.reply("c1", speaker("c", "Cy", "g1", "c1", "m3"), "cy says hi")
        messages = (await engine.thread_state("c1"))["messages"]
        assert messages[0].id not in messages[-1].additional_kwargs["answers"]


async def test_a_removed_answer_leaves_the_learning_queue_too(settings):
    """The learning queue keeps an answer's text on the row of the last message it answered. A moderator
    deleting the bot's reply, or the first message of a gathered turn being deleted, took the answer out of
    the thread; the row kept it, fed to extraction and kept as context (until 2026-12-07)."""
    from bot.engine.state import Incoming

    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        reply = await engine.reply("c1", speaker("a", "Alice", "g1", "c1", "m1"), "question one")
        await engine.attach_sent("c1", reply, ["d1"])
        together = await engine.reply_to("c1", [Incoming(speaker("a", "Alice", "g1", "c1", "m2"), "first half"),
                                                Incoming(speaker("a", "Alice", "g1", "c1", "m3"), "second half")])
        rows = {t.origin["message_id"]: t.ai for t in await engine.storage.inbox.every_turn()}
        assert rows["m1"] == reply.text and rows["m3"] == together.text
        await engine.messages_deleted("c1", {"d1"})  # the bot's reply, deleted by a moderator
        await engine.messages_deleted("c1", {"m2"})  # the gathered turn's first message
        rows = {t.origin["message_id"]: t.ai for t in await engine.storage.inbox.every_turn()}
        assert rows == {"m1": "", "m3": ""}
        assert await _said(engine, "c1") == [("H", "question one"), ("H", "second half")]


async def test_a_wipe_takes_the_answer_to_a_gathered_turn_off_the_other_persons_queued_row(settings):
    """Alice and Bob answered together; the answer is queued on Bob's row (his message came last). Alice's
    wipe removed the answer from the thread, and Bob's row kept it, for his extraction to read."""
    from bot.engine.state import Incoming

    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        together = await engine.reply_to("c1", [Incoming(speaker("a", "Alice", "g1", "c1", "m1"), "alice asks"),
                                                Incoming(speaker("b", "Bob", "g1", "c1", "m2"), "bob asks")])
        rows = {t.origin["message_id"]: t.ai for t in await engine.storage.inbox.every_turn()}
        assert rows["m2"] == together.text
        await engine.runner.close()  # the turn's tail is done: the wipe, not the turn's take-back, does it
        await engine.erase_person("a")
        rows = {t.origin["message_id"]: t.ai for t in await engine.storage.inbox.every_turn()}
        assert rows == {"m2": ""}
        assert await _said(engine, "c1") == [("H", "bob asks")]


async def test_an_edit_replaces_the_stored_text_and_an_unknown_message_changes_nothing(settings):
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("c1", speaker("a", "Alice", "g1", "c1", "m1"), "I live in Lyon")
        assert await engine.conversations.edit_message("c1", "m1", "I live in Lille") is True
        assert await engine.conversations.edit_message("c1", "m404", "whatever") is False
        assert (await _said(engine, "c1"))[0] == ("H", "I live in Lille")


async def test_a_deleted_thread_is_gone_and_threads_are_found_by_server(settings):
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("c1", speaker("a", "Alice", "g1", "c1", "m1"), "in g1")
        await engine.reply("c2", speaker("a", "Alice", "g2", "c2", "m2"), "in g2")
        assert await engine.conversations.threads_of_guild("g1") == ["c1"]
        assert await engine.conversations.erase_thread("c1") is True
        assert await engine.conversations.erase_thread("c1") is False  # already gone: nothing to do
        assert await _said(engine, "c1") == []
        assert sorted(await engine.conversations.thread_ids()) == ["c2"]


async def test_a_channels_threads_are_found_by_their_parent_heard_only_or_answered(settings):
    """A deleted channel's archived threads get no deletion from Discord: the stored parent finds them."""
    from dataclasses import replace

    from bot.engine.state import Incoming

    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("c1", speaker("a", "Alice", "g1", "c1", "m1"), "in the channel")
        await engine.reply("t1", replace(speaker("a", "Alice", "g1", "t1", "m2"), parent_id="c1"), "answered there")
        await engine.hear("t2", [Incoming(replace(speaker("a", "Alice", "g1", "t2", "m3"), parent_id="c1"),
                                          "only heard there", answer=False)])
        await engine.reply("t3", replace(speaker("a", "Alice", "g1", "t3", "m4"), parent_id="c9"), "elsewhere")
        assert sorted(await engine.conversations.threads_in_channel("c1")) == ["t1", "t2"]
        assert await engine.conversations.threads_in_channel("t1") == []


async def test_a_channel_deletion_cut_short_finishes_its_threads_at_restart(settings, monkeypatch):
    from dataclasses import replace

    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("c1", speaker("a", "Alice", "g1", "c1", "m1"), "in the channel")
        await engine.reply("t1", replace(speaker("a", "Alice", "g1", "t1", "m2"), parent_id="c1"),
                           "thread_canary_5150")
        calls = {"n": 0}
        real = engine.storage.reach.forget_thread

        async def crash_on_the_thread(thread_id):
            calls["n"] += 1
            if thread_id == "t1":
                raise RuntimeError("killed mid-erasure")
            return await real(thread_id)

        monkeypatch.setattr(engine.storage.reach, "forget_thread", crash_on_the_thread)
        try:
            await engine.channel_deleted("c1")
        except RuntimeError:
            pass
        monkeypatch.undo()
        assert calls["n"] == 2  # the channel's rows went, then the crash in its thread's
        assert [j.kind for j in await engine.storage.erasures.unfinished()] == ["thread"]
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        assert await engine.storage.erasures.unfinished() == []
        assert await engine.conversations.thread_ids() == []


def _shape(said: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Human messages by text; the scripted answers by the last line they answer ("reply to ... <text>")."""
    return [(kind, text if kind == "H" else text.rsplit("> ", 1)[-1]) for kind, text in said]


def test_with_answers_follows_recorded_answers_and_the_old_layout():
    q1, q2 = HumanMessage("q1", id="h1"), HumanMessage("q2", id="h2")
    joint = AIMessage("both", id="a1", additional_kwargs={"answers": ["h1", "h2"]})
    legacy_q, legacy_a = HumanMessage("q3", id="h3"), AIMessage("old", id="a2")  # no "answers": the next AI message
    messages = [q1, q2, joint, legacy_q, legacy_a]
    assert with_answers(messages, {"h2"}) == ["h2", "a1"]
    assert with_answers(messages, {"h3"}) == ["h3", "a2"]
    assert with_answers(messages, set()) == []
