"""A person's memory settings (``bot.engine.stores.prefs``): read on every reply, and a change holds at
once for every later read."""

from __future__ import annotations

import asyncio

import pytest

from bot.engine.stores import PREF_FIELDS, Prefs


async def test_prefs_default_change_together_and_refuse_unknown_names(storage):
    assert await storage.prefs.get("42") == Prefs()
    await asyncio.gather(storage.prefs.set("42", paused=True), storage.prefs.set("42", dm_in_servers=False))
    assert await storage.prefs.get("42") == Prefs(paused=True, dm_in_servers=False)
    assert (await storage.prefs.set("42", paused=False)).paused is False
    with pytest.raises(ValueError):
        await storage.prefs.set("42", admin=True)


async def test_the_scope_preference_round_trips(storage):
    assert (await storage.prefs.get("42")).scope is None
    assert (await storage.prefs.set("42", scope="global")).scope == "global"


async def test_every_field_is_settable_and_none_means_the_servers_default_again(storage):
    every = dict(paused=True, private=True, reactions=False, dm_in_servers=True, scope="server")
    assert set(every) == set(PREF_FIELDS)
    assert await storage.prefs.set("42", **every) == Prefs(**every)
    assert await storage.prefs.get("7") == Prefs()  # one person's settings are theirs alone
    back = await storage.prefs.set("42", dm_in_servers=None, scope=None)
    assert back == Prefs(paused=True, private=True, reactions=False) == await storage.prefs.get("42")


async def test_an_unknown_name_changes_nothing_even_beside_known_ones(storage):
    await storage.prefs.set("42", private=True)
    with pytest.raises(ValueError):
        await storage.prefs.set("42", paused=True, admin=True)
    assert await storage.prefs.get("42") == Prefs(private=True)


async def test_setting_nothing_returns_the_current_settings(storage):
    assert await storage.prefs.set("42") == Prefs()
    await storage.prefs.set("42", reactions=False)
    assert await storage.prefs.set("42") == Prefs(reactions=False)


async def test_prefs_survive_reopening(open_again):
    async with open_again() as storage:
        await storage.prefs.set("42", paused=True, scope="global")
    async with open_again() as storage:
        assert await storage.prefs.get("42") == Prefs(paused=True, scope="global")


async def test_a_change_in_one_process_holds_at_once_in_another(postgres_only, storage, second_process):
    """A pause made through one process must stop learning in all of them: no process keeps a stale copy."""
    assert await second_process.prefs.get("42") == Prefs()  # read (and, were it cached, cached) first
    await storage.prefs.set("42", paused=True, private=True)
    assert await second_process.prefs.get("42") == Prefs(paused=True, private=True)
    await second_process.prefs.set("42", paused=False)
    assert await storage.prefs.get("42") == Prefs(private=True)
