"""Per-server settings (``bot.engine.stores.guild_settings``): one record per server, replaced whole,
compare-and-set on its version so two writers never lose either change."""

from __future__ import annotations

import asyncio

import pytest

from bot.engine.stores import ServerSettings
from tests.storage.contract.conftest import until


async def test_guild_settings_versioned_writes_and_delete(storage):
    gs = storage.guild_settings
    assert await gs.get("900") is None and await gs.count() == 0
    first = ServerSettings(guild_id="900", respond_channels=frozenset({"1", "2"}), persona="Be kind.", version=1,
                           channel_personas={"1": "Speak like a pirate.", "3": "Short answers."},
                           updated_by="5", updated_at=10.0)
    assert await gs.put(first, replaces=0) is True
    assert await gs.put(first, replaces=0) is False  # a record exists: a second "create" loses
    assert await gs.get("900") == first
    second = ServerSettings(guild_id="900", learning=False, version=2, updated_by="6", updated_at=11.0)
    assert await gs.put(second, replaces=0) is False
    assert await gs.put(second, replaces=5) is False  # not the stored version: nothing changes
    assert await gs.get("900") == first
    assert await gs.put(second, replaces=1) is True
    assert await gs.get("900") == second and await gs.count() == 1
    assert await gs.delete("900") is True and await gs.delete("900") is False
    assert await gs.get("900") is None


async def test_every_choice_comes_back_as_stored(storage):
    chosen = ServerSettings(guild_id="900", respond_channels=frozenset(), mentions_off=frozenset({"7", "10"}),
                            persona="Speak like a pirate.\nAlways.", learning=False, use_memories=True,
                            daily_tokens=50_000, member_daily_tokens=0, mod_log_channel="99", version=1,
                            updated_by="5", updated_at=1234.5)
    assert await storage.guild_settings.put(chosen, replaces=0) is True
    back = await storage.guild_settings.get("900")
    assert back == chosen
    assert back.respond_channels == frozenset() and back.member_daily_tokens == 0  # empty, not "the default"


async def test_servers_are_independent_and_counted(storage):
    for n, guild in enumerate(("900", "901", "902"), start=1):
        assert await storage.guild_settings.put(ServerSettings(guild_id=guild, daily_tokens=n, version=1),
                                                replaces=0) is True
    assert await storage.guild_settings.count() == 3
    assert await storage.guild_settings.delete("901") is True
    assert await storage.guild_settings.count() == 2
    assert (await storage.guild_settings.get("902")).daily_tokens == 3
    assert await storage.guild_settings.delete("no-such-server") is False


async def test_settings_survive_reopening(open_again):
    async with open_again() as storage:
        await storage.guild_settings.put(ServerSettings(guild_id="900", persona="p", version=1), replaces=0)
    async with open_again() as storage:
        assert (await storage.guild_settings.get("900")).persona == "p"


async def test_a_single_process_backend_never_announces_its_own_changes(storage, backend):
    if backend.name != "sqlite":
        pytest.skip("PostgreSQL announces every change (LISTEN/NOTIFY), its own included")
    calls: list = []
    storage.guild_settings.subscribe(calls.append)
    await storage.guild_settings.put(ServerSettings(guild_id="900", version=1), replaces=0)
    await storage.guild_settings.delete("900")
    await asyncio.sleep(0)
    assert calls == []


async def test_two_processes_creating_one_server_at_once_one_wins(postgres_only, storage, second_process):
    mine = ServerSettings(guild_id="900", persona="mine", version=1, updated_by="1")
    theirs = ServerSettings(guild_id="900", persona="theirs", version=1, updated_by="2")
    results = await asyncio.gather(storage.guild_settings.put(mine, replaces=0),
                                   second_process.guild_settings.put(theirs, replaces=0))
    assert sorted(results) == [False, True]
    winner = mine if results[0] else theirs
    assert await storage.guild_settings.get("900") == winner == await second_process.guild_settings.get("900")


async def test_a_change_in_another_process_is_announced(postgres_only, storage, second_process):
    calls: list = []
    storage.guild_settings.subscribe(calls.append)
    await second_process.guild_settings.put(ServerSettings(guild_id="900", version=1), replaces=0)
    await until(lambda: "900" in calls, what="the change in the other process was announced")
    await second_process.guild_settings.delete("900")
    await until(lambda: calls.count("900") == 2, what="the deletion was announced")
    assert await second_process.guild_settings.put(ServerSettings(guild_id="901", version=2), replaces=7) is False
    await storage.guild_settings.put(ServerSettings(guild_id="902", version=1), replaces=0)  # a later change
    await until(lambda: "902" in calls, what="a later change was announced")
    assert "901" not in calls  # a write that lost announced nothing
