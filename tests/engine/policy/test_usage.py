"""``policy/usage.py``: usage written just after an answer, and the budget checks that wait for it."""

from __future__ import annotations

import asyncio

from bot.engine.policy.usage import UsageMeter
from bot.engine.state import Speaker
from bot.storage import open_storage
from tests.conftest import make_settings

ADA = Speaker(user_id="42", name="Ada", guild_id="900", channel_id="7")
BOB_ELSEWHERE = Speaker(user_id="7", name="Bob", guild_id="901", channel_id="8")
ADA_DM = Speaker(user_id="42", name="Ada", guild_id="dm", channel_id="d42")


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_check_waits_for_its_own_places_records_and_no_one_elses(tmp_path, monkeypatch):
    monkeypatch.setattr("bot.engine.policy.usage.OWED_WAIT_SECONDS", 3600)  # a wait would never end by itself
    settings = make_settings(tmp_path)
    async with open_storage(settings) as storage:
        meter = UsageMeter(storage.usage, settings.limits)
        meter.owe(ADA)  # Ada's answer is out; its usage is being written
        meter.owe(ADA_DM)
        # Another server's check, and another person's DMs, do not wait for Ada's writes.
        assert await asyncio.wait_for(meter.tokens_today("901"), 60) == 0
        assert await asyncio.wait_for(meter.tokens_today("dm", "7"), 60) == 0
        same_server = asyncio.create_task(meter.tokens_today("900"))
        same_member = asyncio.create_task(meter.tokens_today("900", "42"))
        her_dms = asyncio.create_task(meter.tokens_today("dm", "42"))
        await _turns()
        assert not (same_server.done() or same_member.done() or her_dms.done())
        await storage.usage.record("900", "42", 10, 5)
        meter.paid(ADA)
        assert await same_server == 15 and await same_member == 15  # the answer just given is counted
        assert not her_dms.done()
        await storage.usage.record("dm", "42", 1, 1)
        meter.paid(ADA_DM)
        assert await her_dms == 2


async def test_records_owed_twice_are_waited_for_until_both_are_written(tmp_path):
    settings = make_settings(tmp_path)
    async with open_storage(settings) as storage:
        meter = UsageMeter(storage.usage, settings.limits)
        meter.owe(ADA)
        meter.owe(ADA)  # the answer and the summary after it
        check = asyncio.create_task(meter.settled("900"))
        meter.paid(ADA)
        await _turns()
        assert not check.done()
        meter.paid(ADA)
        await check
        meter.paid(BOB_ELSEWHERE)  # a paid with nothing owed (a record that failed twice) is harmless
        await meter.settled()
