"""Cross-channel batching: one extraction call covers a person's pending turns in every channel of a server."""

from __future__ import annotations

from bot.engine.state import Speaker
from tests.conftest import (
    ScriptedChatModel,
    default_script,
    new_section,
    record_figure,
    running_engine,
)


def speaker(user: int, channel: int, guild: str = "900") -> Speaker:
    return Speaker(user_id=str(user), name=f"member{user}", guild_id=guild, channel_id=str(channel),
                   message_id=f"{user}{channel}")


async def test_four_people_in_five_channels_cost_at_most_1_3_calls_a_message(settings):
    model = ScriptedChatModel(default_script)
    async with running_engine(settings, model) as engine:
        for channel in range(1, 6):
            for user in range(1, 5):
                await engine.reply(f"c{channel}", speaker(user, channel), f"I like topic {user} in {channel}")
        await engine.scheduler.flush()
        learned = {u: sorted(m.content for m in await engine.memories.list(str(u))) for u in range(1, 5)}
    messages = 20
    per_message = len(model.calls) / messages
    assert len(model.extraction_calls) == 4  # one per person, not one per (person, channel)
    assert per_message <= 1.3
    for user in range(1, 5):  # and nothing was lost by batching
        assert learned[user] == sorted(f"I like topic {user} in {c}" for c in range(1, 6))
    record_figure("model calls a message (4 people x 5 channels)", f"{per_message:.2f}",
                  f"{len(model.extraction_calls)} extraction calls for {messages} messages (was 2.00)")


async def test_servers_and_dms_are_never_batched_together(settings):
    model = ScriptedChatModel(default_script)
    async with running_engine(settings, model) as engine:
        await engine.reply("a", speaker(1, 1, guild="900"), "I like server one things")
        await engine.reply("b", speaker(1, 2, guild="901"), "I like server two things")
        await engine.reply("dm", speaker(1, 3, guild="dm"), "I like private things")
        await engine.scheduler.flush()
        memories = {m.content: m.origin["guild_id"] for m in await engine.memories.list("1")}
    assert len(model.extraction_calls) == 3
    assert memories == {"I like server one things": "900", "I like server two things": "901",
                        "I like private things": "dm"}
    for call in model.extraction_calls:  # each call's new messages came from its own place only
        assert sum(t in new_section(call) for t in ("server one", "server two", "private")) == 1


async def test_a_long_backlog_is_split_into_bounded_calls_and_all_of_it_learned(settings):
    model = ScriptedChatModel(default_script)
    async with running_engine(settings, model) as engine:
        for i in range(30):
            await engine.reply(f"c{i % 3}", speaker(1, i % 3), f"I like item {i} " + "and so on " * 60)
        await engine.scheduler.flush()
        learned = {m.content.split(" and")[0] for m in await engine.memories.list("1")}
        assert await engine.inbox.pending() == []
    assert len(model.extraction_calls) > 1
    assert learned == {f"I like item {i}" for i in range(30)}


async def test_a_light_hold_that_fails_inside_still_schedules_what_the_person_has_left(settings):
    """A message deletion or an edit that raises inside the person's light hold (a database error; it is
    retried) cancelled their extraction timers and never set them again: their waiting turns sat until they
    spoke again. A failed wipe does not set them again: its rows are still being erased, and its replay
    schedules them once it succeeds."""
    from bot.engine.stores.locks import ERASURE, EXTRACTION

    model = ScriptedChatModel(default_script)
    async with running_engine(settings, model) as engine:
        scheduler = engine.scheduler
        await engine.reply("c1", speaker(1, 1), "I like held things")
        for kind, set_again in ((ERASURE, False), (EXTRACTION, True)):
            assert any(k[1] == "1" for k in scheduler._timers)
            try:
                async with scheduler.hold("1", kind=kind):
                    assert not any(k[1] == "1" for k in scheduler._timers)  # stopped meanwhile
                    raise RuntimeError("the database went away")
            except RuntimeError:
                pass
            assert any(k[1] == "1" for k in scheduler._timers) is set_again, kind
            if not set_again:  # what the wipe's successful replay does as its hold ends
                async with scheduler.hold("1"):
                    pass
        await scheduler.flush()
        assert [m.content for m in await engine.memories.list("1")] == ["I like held things"]


async def test_the_shared_sweep_takes_over_only_turns_nobody_extracted_in_time():
    """Found in review 2026-12-07: on a shared database every other process's sweep armed a timer for the
    newest turn plus the quiet period, which fired in the middle of a live conversation whose own process
    kept restarting its quiet timer: several extractions a conversation instead of one."""
    import asyncio
    import time
    from types import SimpleNamespace

    from bot.engine.concurrency import Locks
    from bot.engine.learning.scheduler import ExtractionScheduler
    from bot.engine.stores import PendingKey, SingleProcessLocks

    now = time.time()
    pending = [PendingKey("live", "1", 1, now - 5), PendingKey("orphan", "2", 1, now - 3600)]
    turn = SimpleNamespace(origin={"guild_id": "900"})

    class Inbox:
        epoch = ""

        async def pending(self):
            return pending

        async def batch(self, thread_id, user_id, context):
            return [], [turn]

    shared = SingleProcessLocks()
    shared.sweep_seconds = 0.05
    scheduler = ExtractionScheduler(Inbox(), lambda request: None, quiet_seconds=60, after_messages=10,
                                    context_turns=0, locks=Locks(shared))
    scheduled: list[tuple[str, float]] = []
    scheduler._schedule = lambda scope, user_id, delay: scheduled.append((user_id, delay))
    sweeping = asyncio.create_task(scheduler._sweep(0.05))
    await asyncio.sleep(0.2)
    sweeping.cancel()
    assert scheduled and {user for user, _ in scheduled} == {"2"}  # the live conversation is left to its process
