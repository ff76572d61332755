"""No addressed message is dropped: follow-ups answered together, limits that record instead of ignoring."""

from __future__ import annotations

import asyncio
import threading
import time

from langchain_core.messages import HumanMessage

from bot.engine import TokenBucket
from cogs.chat import BUSY, OUT_OF_BUDGET, SLOW_DOWN
from tests.cogs.conftest import ALICE, BOB, GENERAL, LISTED, rig
from tests.conftest import Call, ScriptedChatModel, default_script
from tests.fakes import discord_harness as dh

CAROL = dh.user(804, "carol", global_name="Carol")


async def humans(r, channel: int = GENERAL) -> list[str]:
    state = await r.engine.thread_state(str(channel))
    return [m.text for m in state.get("messages", []) if isinstance(m, HumanMessage)]


async def until(predicate, timeout: float = 15.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0.02)


def thinking(call: Call):
    if not call.is_extraction:
        time.sleep(0.3)  # a model call takes longer than the person takes to type a follow-up
    return default_script(call)


async def test_three_quick_messages_get_one_reply_that_saw_all_of_them(tmp_path):
    async with rig(tmp_path, chat_model=ScriptedChatModel(thinking), discord={"gather_seconds": 0.4}) as r:
        for text in ("hey", "can you help with my CV?", "hello??"):
            r.h.feed("MESSAGE_CREATE", r.mentioning(ALICE, text))
            await asyncio.sleep(0.05)
        await until(lambda: r.h.sent_messages(GENERAL))
        await r.h.settle(quiet=0.6)
        (reply,) = r.h.sent_messages(GENERAL)
        prompt = r.model.chat_calls[-1].prompt_text  # an attempt cut short by a follow-up came before it
        assert prompt.index("> hey") < prompt.index("> can you help with my CV?") < prompt.index("> hello??")
        assert prompt.count("[Alice | user 802]") == 3  # each message under its own author header
        assert await humans(r) == ["hey", "can you help with my CV?", "hello??"]


async def test_a_lone_message_does_not_wait_for_the_gathering_window(tmp_path):
    # A 30-second window: if a lone message waited for it, settle() would return with no reply.
    async with rig(tmp_path, discord={"gather_seconds": 30}) as r:
        await r.h.send_message(r.mentioning(ALICE, "just one question"))
        assert len(r.h.sent_messages(GENERAL)) == 1


async def test_a_follow_up_while_answering_restarts_the_turn_into_one_reply(tmp_path):
    gate = threading.Event()

    def slow(call: Call):
        if not call.is_extraction and "second part" not in call.prompt_text:
            gate.wait(5)  # the first attempt is still thinking when the follow-up arrives
        return default_script(call)

    async with rig(tmp_path, chat_model=ScriptedChatModel(slow), discord={"gather_seconds": 0.2}) as r:
        r.h.feed("MESSAGE_CREATE", r.mentioning(ALICE, "first part"))
        await until(lambda: len(r.model.chat_calls) == 1)
        r.h.feed("MESSAGE_CREATE", r.mentioning(ALICE, "second part"))
        await asyncio.sleep(0.05)
        gate.set()
        await until(lambda: r.h.sent_messages(GENERAL))
        await r.h.settle(quiet=0.4)
        (reply,) = r.h.sent_messages(GENERAL)
        assert reply.content.endswith("second part")
        assert "first part" in r.model.chat_calls[-1].prompt_text
        assert await humans(r) == ["first part", "second part"]  # the restart did not store it twice
        state = await r.engine.thread_state(str(GENERAL))
        assert len([m for m in state["messages"] if not isinstance(m, HumanMessage)]) == 1


async def test_follow_ups_restart_an_answer_at_most_three_times_then_wait_behind_the_others(tmp_path):
    """One more message every few seconds (within the rate limit) cancelled every attempt for ever: Bob's
    turn never started, and each cancelled call was paid for and counted nowhere."""
    gate = threading.Event()

    def slow(call: Call):
        if not call.is_extraction:
            gate.wait(10)  # every attempt is still thinking when the next follow-up arrives
        return default_script(call)

    async with rig(tmp_path, chat_model=ScriptedChatModel(slow), discord={"gather_seconds": 0.1}) as r:
        r.h.feed("MESSAGE_CREATE", r.mentioning(ALICE, "alice m0"))
        await until(lambda: len(r.model.chat_calls) == 1)
        for i in range(1, 4):  # each restarts the answer: a new call once she pauses
            r.h.feed("MESSAGE_CREATE", r.mentioning(ALICE, f"alice m{i}"))
            await until(lambda: len(r.model.chat_calls) == i + 1)
        r.h.feed("MESSAGE_CREATE", r.mentioning(BOB, "bob asks"))
        await asyncio.sleep(0.05)
        for i in range(4, 6):
            r.h.feed("MESSAGE_CREATE", r.mentioning(ALICE, f"alice m{i}"))
        await asyncio.sleep(0.5)
        assert len(r.model.chat_calls) == 4  # the fourth attempt was not cancelled
        gate.set()
        await until(lambda: len(r.h.sent_messages(GENERAL)) == 3)
        first, bob, last = r.h.sent_messages(GENERAL)
        assert first.content.endswith("alice m3") and bob.content.endswith("bob asks")
        assert last.content.endswith("alice m5")
        assert "alice m0" in r.model.chat_calls[3].prompt_text and "alice m4" not in r.model.chat_calls[3].prompt_text

async def test_lines_typed_while_an_answer_waits_to_start_again_restart_nothing():
    """The cap counts attempts cancelled: one thought split over five quick lines cancels one attempt and
    is answered as one turn (counted per line, the fifth was split off into a turn of its own)."""
    from cogs._gathering import ChannelTurns

    runs: list[list[str]] = []
    release = asyncio.Event()

    async def run(turn):
        runs.append(list(turn.items))
        await release.wait()

    turns = ChannelTurns(run, gather_seconds=0.2, max_waiting=10)
    turns.offer(1, "m0")
    await until(lambda: len(runs) == 1)
    for line in ("m1", "m2", "m3", "m4", "m5"):  # m1 cancels the attempt; the rest arrive while it waits
        turns.offer(1, line)
        await asyncio.sleep(0.01)
    await until(lambda: len(runs) == 2)
    release.set()
    await until(lambda: turns.idle, timeout=5)
    assert runs == [["m0"], ["m0", "m1", "m2", "m3", "m4", "m5"]]

async def test_other_people_are_answered_in_their_own_turns_in_order(tmp_path):
    async with rig(tmp_path, discord={"gather_seconds": 0.2}) as r:
        r.h.feed("MESSAGE_CREATE", r.mentioning(ALICE, "alice asks"))
        r.h.feed("MESSAGE_CREATE", r.mentioning(BOB, "bob asks"))
        await until(lambda: len(r.h.sent_messages(GENERAL)) == 2)
        sent = r.h.sent_messages(GENERAL)
        assert sent[0].content.endswith("alice asks") and sent[1].content.endswith("bob asks")


async def test_a_message_over_the_limit_joins_its_authors_waiting_turn_in_order(tmp_path):
    """Alice's first message waits behind Bob's turn; her second is over the rate limit. Recorded at once it
    took the channel before her waiting turn and was stored first: the model and the extractor read her
    messages out of order. It joins her waiting turn (no model call more) and is answered with it."""
    async with rig(tmp_path, chat_model=ScriptedChatModel(thinking), limits={"burst": 1, "refill_seconds": 3600},
                   discord={"gather_seconds": 0}) as r:
        r.h.feed("MESSAGE_CREATE", r.mentioning(BOB, "bob goes first"))
        await asyncio.sleep(0.05)  # Bob's turn is being answered
        r.h.feed("MESSAGE_CREATE", r.mentioning(ALICE, "alice one"))
        await asyncio.sleep(0.02)
        r.h.feed("MESSAGE_CREATE", r.mentioning(ALICE, "alice two, over the limit"))
        await until(lambda: len(r.h.sent_messages(GENERAL)) >= 2)
        await r.h.settle(quiet=0.6)
        assert await humans(r) == ["bob goes first", "alice one", "alice two, over the limit"]
        assert len(r.model.chat_calls) == 2  # Bob's and Alice's turn, both of her messages in it
        assert "> alice two, over the limit" in r.model.chat_calls[-1].prompt_text
        assert SLOW_DOWN not in [s.content for s in r.h.sent_messages(GENERAL)]


async def test_over_the_bucket_messages_are_heard_with_one_notice_and_known_next_time(tmp_path):
    async with rig(tmp_path, limits={"burst": 2, "refill_seconds": 3600}) as r:
        for i in range(5):
            await r.h.send_message(r.mentioning(ALICE, f"message {i}"))
        sent = r.h.sent_messages(GENERAL)
        assert [s.content for s in sent].count(SLOW_DOWN) == 1  # one notice per burst
        assert len(r.model.chat_calls) == 2
        assert await humans(r) == [f"message {i}" for i in range(5)]  # nothing said is lost
        r.engine.bucket = TokenBucket(2, 3600)  # refilled
        await r.h.send_message(r.mentioning(ALICE, "and now?"))
        prompt = r.model.chat_calls[-1].prompt_text
        assert all(f"> message {i}" in prompt for i in range(5))
        await r.engine.scheduler.flush()
        learned = r.model.extraction_calls[-1].prompt_text
        assert "message 4" in learned  # heard messages are learned from like any other


def test_token_bucket_allows_a_burst_then_refills():
    now = [0.0]
    bucket = TokenBucket(2, 10.0, clock=lambda: now[0])
    assert [bucket.take(1) for _ in range(3)] == [True, True, False]
    assert bucket.take(2) is True  # per person
    now[0] = 10.0
    assert [bucket.take(1) for _ in range(2)] == [True, False]
    assert TokenBucket(0, 10.0).take(1) is True  # burst 0: no limit


def test_a_reservation_takes_the_next_token_and_says_when_it_comes():
    now = [0.0]
    bucket = TokenBucket(2, 10.0, clock=lambda: now[0])
    assert [bucket.reserve(1), bucket.reserve(1)] == [0.0, 0.0]  # the burst
    assert bucket.reserve(1) == 10.0  # the next token, in one refill
    assert bucket.reserve(1) == 20.0  # reserved again: paid for, so the wait moves further out
    assert bucket.take(1) is False  # and messages wait for the debt too
    now[0] = 25.0
    assert bucket.take(1) is False and bucket.reserve(1) == 5.0
    assert TokenBucket(0, 10.0).reserve(1) == 0.0  # burst 0: no limit


async def test_a_full_channel_records_the_message_and_says_so(tmp_path):
    gate = threading.Event()

    def blocked(call: Call):
        if not call.is_extraction:
            gate.wait(5)
        return default_script(call)

    async with rig(tmp_path, chat_model=ScriptedChatModel(blocked), limits={"max_waiting_turns": 1}) as r:
        r.h.feed("MESSAGE_CREATE", r.mentioning(ALICE, "alice first"))
        await until(lambda: len(r.model.chat_calls) == 1)
        r.h.feed("MESSAGE_CREATE", r.mentioning(BOB, "bob waits"))
        r.h.feed("MESSAGE_CREATE", r.mentioning(CAROL, "carol is one too many"))
        await until(lambda: any(s.content == BUSY for s in r.h.sent_messages(GENERAL)))
        gate.set()
        await until(lambda: len(r.h.sent_messages(GENERAL)) == 3)
        await r.h.settle(quiet=0.3)
        assert "carol is one too many" in await humans(r)
        assert [s.content for s in r.h.sent_messages(GENERAL)].count(BUSY) == 1


async def test_a_member_budget_stops_that_member_only(tmp_path):
    async with rig(tmp_path, limits={"member_daily_tokens": 30}) as r:
        await r.h.send_message(r.mentioning(ALICE, "a first question that uses the budget up"))
        await r.h.send_message(r.mentioning(ALICE, "another one"))
        assert r.h.sent_messages(GENERAL)[-1].content == OUT_OF_BUDGET["member"]  # hers, not everyone's
        assert "another one" in await humans(r)  # recorded all the same
        await r.h.send_message(r.mentioning(BOB, "bob still gets answers"))
        assert r.h.sent_messages(GENERAL)[-1].content.endswith("bob still gets answers")


async def test_the_budget_notice_says_whose_allowance_ran_out(tmp_path):
    """A server's spent allowance is the server's; a DM's is the DMs' (not a member's share)."""
    async with rig(tmp_path, limits={"guild_daily_tokens": 30, "dm_daily_tokens": 30}) as r:
        await r.h.send_message(r.mentioning(ALICE, "a first question that uses the budget up"))
        await r.h.send_message(r.mentioning(BOB, "another one"))
        assert r.h.sent_messages(GENERAL)[-1].content == OUT_OF_BUDGET["server"]
        dm = r.h.dm(ALICE)
        await r.h.send_message(r.msg(ALICE, "a first question in a DM that uses it up", channel_id=dm["id"], guild_id=None))
        await r.h.send_message(r.msg(ALICE, "and another", channel_id=dm["id"], guild_id=None))
        assert r.h.sent_messages(dm["id"])[-1].content == OUT_OF_BUDGET["dm"]


async def test_a_flood_of_100_messages_loses_nothing_and_keeps_the_bound(tmp_path):
    people = [dh.user(900 + i, f"p{i}", global_name=f"P{i}") for i in range(10)]
    async with rig(tmp_path, limits={"burst": 3, "refill_seconds": 3600, "max_waiting_turns": 4},
                   discord={"respond_channels": [LISTED], "gather_seconds": 0.05},
                   conversation={"summarize_after_messages": 1000, "summarize_after_tokens": 100_000}) as r:
        chat = r.bot.get_cog("Chat")
        most_waiting = 0
        texts = []
        for i in range(100):
            text = f"flood {i}"
            texts.append(text)
            r.h.feed("MESSAGE_CREATE", r.msg(people[i % 10], text, channel_id=LISTED))
            most_waiting = max(most_waiting, len(chat.turns_for(LISTED).waiting))
        await r.h.settle(timeout=60, quiet=0.5)
        assert most_waiting <= 4
        assert sorted(await humans(r, LISTED)) == sorted(texts)  # every message is in the conversation
        assert not r.h.errors
        notices = [s for s in r.h.sent_messages(LISTED) if s.content in (SLOW_DOWN, BUSY)]
        assert len(notices) <= len(people)  # at most one per person and burst


async def test_a_message_deleted_while_its_author_is_held_back_is_not_stored(tmp_path):
    """Over the limit, a message is heard (stored, not answered); deleted while its attachment is still being
    read, it must not be stored once the read finishes, after the deletion was handled."""
    async with rig(tmp_path, limits={"burst": 1, "refill_seconds": 3600}) as r:
        await r.h.send_message(r.mentioning(ALICE, "first, answered"))
        release = asyncio.Event()
        real_get = r.h._get_from_cdn

        waiting_reads: list[str] = []

        async def slow_cdn(url: str) -> bytes:
            waiting_reads.append(url)
            await release.wait()
            return await real_get(url)

        r.bot.http.get_from_cdn = slow_cdn  # the harness serves Attachment.read() through this
        note = dh.attachment(dh.snowflake(), "notes.txt", size=12, content_type="text/plain")
        r.h.cdn[note["url"]] = b"held-back secret notes"
        held = r.mentioning(ALICE, "held back", attachments=[note])
        r.h.feed("MESSAGE_CREATE", held)
        await until(lambda: waiting_reads)  # the chat cog is reading the attachment now
        r.h.feed("MESSAGE_DELETE", {"id": held["id"], "channel_id": str(GENERAL), "guild_id": held["guild_id"]})
        await asyncio.sleep(0.2)  # the deletion was handled: there was nothing stored yet
        release.set()
        await r.h.settle(timeout=30, quiet=1.0)
        assert "held back" not in " ".join(await humans(r))
        _, pending = await r.engine.inbox.batch(str(GENERAL), str(ALICE["id"]), 0)
        assert not any("held back" in t.human for t in pending)
