"""Where a message's text reached (``bot.engine.stores.reach``): the same on every backend."""

from __future__ import annotations


async def test_reaches_are_recorded_once_found_by_message_and_forgotten(open_again):
    async with open_again() as storage:
        assert await storage.reach.since() == 0  # a new database: the index is complete from the start
        await storage.reach.reached("b", ["70", "71", "70"])
        await storage.reach.reached("b", ["70"])  # idempotent
        await storage.reach.reached("ask:a:2", ["70"])
        await storage.reach.reached("c", [])
    async with open_again() as storage:  # durable
        assert await storage.reach.threads_of(["70"]) == {"b", "ask:a:2"}
        assert await storage.reach.threads_of(["71", "99"]) == {"b"}
        assert await storage.reach.threads_of([]) == set()
        await storage.reach.forget(["70"])
        assert await storage.reach.threads_of(["70"]) == set()
        await storage.reach.forget_thread("b")
        assert await storage.reach.threads_of(["71"]) == set()
