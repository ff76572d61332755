"""One compaction per erasure job, small removals batched off the reply path, and a debt a crash cannot lose
(``bot/engine/erasure/compaction.py``). Compactions are counted, never timed: the batch's clock is moved
by hand."""

from __future__ import annotations

import asyncio

from bot.engine.erasure.compaction import TICK_SECONDS, OwedCompaction
from bot.engine.memories.records import Actor
from bot.engine.state import Speaker
from tests.conftest import ScriptedChatModel, default_script, running_engine


class Compactions:
    """Counts ``maintenance.compact`` calls and the task each ran in."""

    def __init__(self, engine, monkeypatch) -> None:
        self.tasks: list[str] = []
        real = engine.storage.maintenance.compact

        async def counted() -> dict:
            task = asyncio.current_task()
            self.tasks.append(task.get_name() if task is not None else "")
            return await real()

        monkeypatch.setattr(engine.storage.maintenance, "compact", counted)

    @property
    def count(self) -> int:
        return len(self.tasks)


class Clock:
    """The batch's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def ann(message_id: str) -> Speaker:
    return Speaker(user_id="1", name="Ann", guild_id="9", channel_id="c", message_id=message_id)


def files_with(settings, needle: str) -> list[str]:
    if settings.storage.backend != "sqlite":
        return []
    return [str(p) for p in settings.bot.data_dir.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


async def test_a_wipe_compacts_exactly_once_and_before_it_returns(settings, monkeypatch):
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("c", ann("11"), "I like wipeonce_canary_8812")
        await engine.reply("d", Speaker(user_id="2", name="Bob", guild_id="9", channel_id="d", message_id="12"),
                           "what does Ann like? wipeonce_canary_8812")
        await engine.scheduler.flush()
        compactions = Compactions(engine, monkeypatch)
        result = await engine.erase_person("1")
        assert result.memories == 1
        assert compactions.count == 1  # every step first, then one compaction
        assert await engine.storage.erasures.compaction_owed() is None  # nothing left for later
        assert files_with(settings, "wipeonce_canary_8812") == []  # at the moment "Done" would be shown
        purge = await engine.erase_person("2", guild_id="9")
        assert purge.messages and compactions.count == 2  # a purge: one more, its own


async def test_ten_deletions_in_a_burst_share_one_compaction_run_in_its_own_task(settings, monkeypatch):
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        clock = Clock()
        engine.eraser.owed.clock = clock
        for i in range(10):
            await engine.reply("c", ann(str(100 + i)), f"I like burst_canary_{i}_x")
        await engine.scheduler.flush()
        compactions = Compactions(engine, monkeypatch)
        for i in range(10):
            await engine.messages_deleted("c", {str(100 + i)})
            clock.now += 0.5  # each within the quiet period of the one before
            await asyncio.sleep(0)
        assert compactions.count == 0  # none ran inside the deletions: each owes it
        assert await engine.storage.erasures.compaction_owed() is not None
        reply = await engine.reply("c", ann("200"), "still here")  # a turn meanwhile does not pay it either
        assert reply.text and compactions.count == 0
        clock.now += engine.eraser.owed.quiet
        await engine.eraser.owed.settle()
        assert 1 <= compactions.count < 10
        assert compactions.count == 1
        assert compactions.tasks == ["owed-compaction"]  # the batch's own task, not a deletion's or a turn's
        assert await engine.storage.erasures.compaction_owed() is None
        assert [f for i in range(10) for f in files_with(settings, f"burst_canary_{i}_x")] == []


async def test_a_slow_compaction_spaces_out_the_next_batch(settings, monkeypatch):
    """A compaction rebuilds the files (SQLite's VACUUM), so its cost grows with the data: one that took
    3 s is followed by at least ``REST_FACTOR`` times that of rest, so a steady stream of deletions in a
    big server cannot keep the files rebuilding back to back (a reader it waited for counts too, hence a
    cap). A wipe's own compaction does not wait."""
    from bot.engine.erasure.compaction import MOST_REST, REST_FACTOR

    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        clock = Clock()
        owed = engine.eraser.owed
        owed.clock = clock
        maintenance = engine.storage.maintenance
        real, runs = maintenance.compact, []

        async def slow() -> dict:
            runs.append(clock.now)
            clock.now += 3.0  # the rebuild took 3 s
            return await real()

        monkeypatch.setattr(maintenance, "compact", slow)
        await engine.reply("c", ann("m1"), "I like tea")
        await engine.messages_deleted("c", {"m1"})  # owes one
        clock.now += owed.quiet
        await owed.settle()
        assert len(runs) == 1
        ended = clock.now
        await engine.reply("c", ann("m2"), "I like coffee")
        await engine.messages_deleted("c", {"m2"})  # the next deletion, just after
        clock.now += owed.most  # past the batch's usual longest wait
        await asyncio.sleep(TICK_SECONDS + 0.05)
        assert len(runs) == 1  # still resting
        clock.now = ended + REST_FACTOR * 3.0
        await owed.settle()
        assert len(runs) == 2
        owed.took(3600.0)  # a compaction that waited an hour for a reader
        assert owed._rest_until <= clock.now + MOST_REST


async def test_a_batch_waits_for_quiet_but_never_past_the_longest_wait():
    clock = Clock()
    runs: list[float] = []

    async def run() -> bool:
        runs.append(clock.now)
        return True

    owed = OwedCompaction(run, quiet=2.0, most=10.0, clock=clock)
    first = clock.now
    for _ in range(8):  # a removal every 1.25 s: never 2 s of quiet
        owed.due()
        await asyncio.sleep(TICK_SECONDS + 0.05)  # (let the timer look at its deadline)
        assert runs == []
        clock.now += 1.25
    assert clock.now == first + owed.most  # 10 s after the first: due, though the last was 1.25 s ago
    await owed.settle()
    assert runs == [first + owed.most]
    owed.due()  # the next removal starts a new batch
    clock.now += owed.quiet
    await owed.settle()
    assert len(runs) == 2


async def test_an_edit_and_a_persons_delete_owe_one_compaction_each_batch(settings, monkeypatch):
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        clock = Clock()
        engine.eraser.owed.clock = clock
        await engine.reply("c", ann("401"), "I like edit_batch_tea")
        await engine.scheduler.flush()
        compactions = Compactions(engine, monkeypatch)
        assert await engine.message_edited("c", "401", "I like coffee")
        await engine.scheduler.flush()
        keys = [m.key for m in await engine.memories.list("1")]
        await engine.delete_memories("1", keys, by=Actor("user", "1"))
        assert compactions.count == 0
        clock.now += engine.eraser.owed.most
        await engine.eraser.owed.settle()
        assert compactions.count == 1


async def test_a_crash_between_a_deletion_and_its_compaction_is_compacted_at_the_next_start(settings, monkeypatch):
    canary = "owedcrash_canary_3141"
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        engine.eraser.owed.clock = Clock()  # (the batch never comes due before the "crash")
        await engine.reply("c", ann("501"), f"I like {canary}")
        await engine.reply("c", ann("502"), "I like rowing")
        await engine.scheduler.flush()
        await engine.close()  # (a checkpoint: the canary is in the files now)
        engine.scheduler._closed = False
        assert settings.storage.backend != "sqlite" or files_with(settings, canary)
        await engine.messages_deleted("c", {"501"})
        assert await engine.storage.erasures.compaction_owed() is not None

        async def crashed(**_kw) -> None:  # the process dies: no shutdown compaction
            await engine.eraser.owed.close()

        monkeypatch.setattr(engine.eraser, "close", crashed)
    monkeypatch.undo()
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        assert await engine.storage.erasures.compaction_owed() is None  # start-up paid it
        assert files_with(settings, canary) == []
        assert [m.content for m in await engine.memories.list("1")] == ["I like rowing"]


async def test_a_wipe_whose_compaction_crashed_is_compacted_at_the_next_start(settings, monkeypatch):
    canary = "wipecrash_canary_2718"
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("c", ann("601"), f"I like {canary}")
        await engine.scheduler.flush()
        await engine.close()
        engine.scheduler._closed = False

        async def killed() -> dict:
            raise RuntimeError("killed before the compaction")

        monkeypatch.setattr(engine.storage.maintenance, "compact", killed)
        try:
            await engine.erase_person("1")
        except RuntimeError:
            pass
        else:  # pragma: no cover - the erasure must not report done without its compaction
            raise AssertionError("the wipe reported done without its compaction")
        assert await engine.storage.erasures.unfinished() == []  # the steps are done, their row is gone
        assert await engine.storage.erasures.compaction_owed() is not None  # the compaction is owed
    monkeypatch.undo()
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        assert await engine.storage.erasures.compaction_owed() is None
        assert files_with(settings, canary) == []
        assert await engine.memories.list("1") == []


async def test_a_debt_another_process_may_still_pay_is_taken_over_only_past_its_longest_rest(settings):
    """Found in review 2026-12-07: the journal poll paid a debt older than a batch's longest wait (10 s),
    though its owner may rest up to ``MOST_REST`` after a slow compaction: with two processes, a VACUUM every
    few seconds under the global lock. Nor does the poll pay while this process rests."""
    import time

    from bot.engine.erasure.compaction import MOST_REST

    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        eraser = engine.eraser
        now = time.time()
        assert not eraser._compaction_due(now - eraser.owed.most - 1, now)  # its owner may be resting
        assert eraser._compaction_due(now - eraser.owed.most - MOST_REST - 1, now)  # nobody paid it
        eraser.owed.took(10.0)  # this process just ran a slow one
        assert not eraser._compaction_due(now - eraser.owed.most - MOST_REST - 1, now)
