"""Maps keyed by person or channel stay bounded: locks only while held, limiters forget old keys."""

from __future__ import annotations

import asyncio

from bot.engine.concurrency import BoundedDict, KeyedLocks, RateLimiter
from bot.engine.state import Speaker
from tests.conftest import ScriptedChatModel, default_script, running_engine


async def test_keyed_locks_exclude_per_key_and_forget_keys_nobody_holds():
    locks: KeyedLocks[str] = KeyedLocks()
    order: list[str] = []

    async def work(name: str) -> None:
        async with locks.hold("alice"):
            order.append(f"{name} in")
            await asyncio.sleep(0.01)
            order.append(f"{name} out")

    await asyncio.gather(work("a"), work("b"))
    assert order == ["a in", "a out", "b in", "b out"]
    assert len(locks) == 0


def test_rate_limiter_slides_and_keeps_at_most_max_keys():
    now = [0.0]
    limiter: RateLimiter[str] = RateLimiter(2, 60, max_keys=100, clock=lambda: now[0])
    assert [limiter.retry_after("a") for _ in range(3)] == [0.0, 0.0, 60.0]
    now[0] = 61
    assert limiter.retry_after("a") == 0.0
    for i in range(1000):
        limiter.retry_after(f"user{i}")
    assert len(limiter) == 100
    assert RateLimiter(0, 60).retry_after("x") == 0.0  # 0: no limit


def test_bounded_dict_forgets_the_oldest():
    d: BoundedDict[int, int] = BoundedDict(3)
    for i in range(10):
        d[i] = i
    assert list(d) == [7, 8, 9]


async def test_the_engine_keeps_no_per_person_state_after_turns_and_erasures(settings):
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        for i in range(20):
            await engine.reply(f"t{i}", Speaker(user_id=f"u{i}", name=f"u{i}"), "I like maps")
        await engine.scheduler.flush()
        for i in range(5):
            await engine.erase_person(f"u{i}")
        await asyncio.sleep(0)
        assert len(engine.runner.inflight) == 0
        assert len(engine.locks._people) == 0 and len(engine.locks._channels) == 0



async def test_the_erasers_hold_is_reentrant_within_a_task_and_exclusive_across_tasks(settings):
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        eraser = engine.eraser

        async def other() -> str:
            async with eraser.hold("bob"):
                return "other got it"

        async with eraser.hold("bob"):
            async with eraser.hold("bob"):  # the same task again: no deadlock, no second claim
                pass
            waiting = asyncio.create_task(other())
            await asyncio.sleep(0.01)
            assert not waiting.done()  # another task still waits
        assert await waiting == "other got it"
        assert len(engine.scheduler.locks._people) == 0
