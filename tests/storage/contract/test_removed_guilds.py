"""Servers the bot was removed from (``bot.engine.stores.removed_guilds``): marked, swept after the
retention period, and taken off the list when the bot is added back; the list survives restarts."""

from __future__ import annotations

import pytest

DAY = 86400.0


async def test_a_removed_server_is_due_only_after_its_retention(storage):
    await storage.removed_guilds.mark("900", 1000.0)
    await storage.removed_guilds.mark("901", 1000.0 + 5 * DAY)
    assert await storage.removed_guilds.due(999.0) == []
    assert await storage.removed_guilds.due(1000.0 + DAY) == ["900"]
    assert sorted(await storage.removed_guilds.due(1000.0 + 10 * DAY)) == ["900", "901"]


async def test_an_earlier_mark_is_kept(storage):
    """Leaving twice does not push the deadline back: the first removal counts."""
    await storage.removed_guilds.mark("900", 1000.0)
    await storage.removed_guilds.mark("900", 1000.0 + 30 * DAY)
    assert await storage.removed_guilds.due(1000.0 + DAY) == ["900"]


async def test_a_server_that_adds_the_bot_back_is_not_swept(storage):
    await storage.removed_guilds.mark("900", 1000.0)
    await storage.removed_guilds.mark("901", 1000.0)
    assert await storage.removed_guilds.unmark("900") is True
    assert await storage.removed_guilds.unmark("900") is False  # no longer marked
    assert await storage.removed_guilds.unmark("902") is False  # never marked
    assert await storage.removed_guilds.due(1000.0 + 100 * DAY) == ["901"]


async def test_a_swept_server_is_forgotten(storage, raw):
    await storage.removed_guilds.mark("900", 1000.0)
    await storage.removed_guilds.done("900")
    await storage.removed_guilds.done("900")  # a sweep retried after a crash: not an error
    assert await storage.removed_guilds.due(1000.0 + 100 * DAY) == []
    assert await raw.count("removed_guilds") == 0


async def test_marks_survive_a_restart(open_again):
    async with open_again() as storage:
        await storage.removed_guilds.mark("900", 1000.0)
    async with open_again() as storage:
        assert await storage.removed_guilds.due(2000.0) == ["900"]


@pytest.mark.second_process_reads_only
async def test_a_mark_made_in_one_process_is_due_in_another(storage, second_process):
    await storage.removed_guilds.mark("900", 1000.0)
    assert await second_process.removed_guilds.due(2000.0) == ["900"]
