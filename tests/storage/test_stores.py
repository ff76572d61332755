"""The engine's own stores behave the same on every backend (the contract in ``bot/engine/stores/``)."""

from __future__ import annotations

import asyncio

import pytest

from bot.engine.stores import Prefs

ORIGIN = {"guild_id": "900", "channel_id": "7", "message_id": "70"}


async def record(storage, thread: str, user: str, n: int, guild: str = "900") -> int:
    return await storage.inbox.record(thread_id=thread, user_id=user, author=user, human=f"h{n}", ai=f"a{n}",
                                      origin={**ORIGIN, "guild_id": guild})


async def test_inbox_counts_batches_and_trims_to_the_context_window(storage):
    counts = [await record(storage, "t", "42", n) for n in range(12)]
    assert counts == list(range(1, 13))
    await record(storage, "t", "7", 99)
    pending = {(p.thread_id, p.user_id): p.count for p in await storage.inbox.pending()}
    assert pending == {("t", "42"): 12, ("t", "7"): 1}
    before, turns = await storage.inbox.batch("t", "42", context=4)
    assert before == [] and [t.human for t in turns] == [f"h{n}" for n in range(12)]
    assert turns[0].origin == ORIGIN and turns[0].id < turns[-1].id
    await storage.inbox.mark_extracted("t", [t.id for t in turns[:10]])
    before, turns = await storage.inbox.batch("t", "42", context=3)
    assert [t.human for t in turns] == ["h10", "h11"]
    assert [t.human for t in before] == ["h7", "h8", "h9"]
    await storage.inbox.mark_extracted("t", [t.id for t in turns])
    assert [(p.user_id, p.count) for p in await storage.inbox.pending()] == [("7", 1)]


async def test_the_inbox_epoch_is_stable_across_reopening(settings):
    from bot.storage import open_storage

    async with open_storage(settings) as first:
        epoch = first.inbox.epoch
    async with open_storage(settings) as again:
        assert again.inbox.epoch == epoch and len(epoch) >= 16


async def test_prefs_default_change_together_and_refuse_unknown_names(storage):
    assert await storage.prefs.get("42") == Prefs()
    await asyncio.gather(storage.prefs.set("42", paused=True), storage.prefs.set("42", dm_in_servers=False))
    assert await storage.prefs.get("42") == Prefs(paused=True, dm_in_servers=False)
    assert (await storage.prefs.set("42", paused=False)).paused is False
    with pytest.raises(ValueError):
        await storage.prefs.set("42", admin=True)


async def test_usage_adds_up_per_day_server_and_person(storage):
    await storage.usage.record("900", "42", 100, 10)
    await storage.usage.record("900", "42", 50, 5)
    await storage.usage.record("900", "7", 1, 1)
    await storage.usage.record("dm", "42", 3, 3)
    assert await storage.usage.tokens_today("900") == 167
    assert await storage.usage.tokens_today("900", "42") == 165
    assert await storage.usage.tokens_today("dm", "42") == 6
    rows = await storage.usage.totals()
    assert (rows[0].guild_id, rows[0].user_id, rows[0].calls, rows[0].prompt_tokens) == ("900", "42", 2, 150)


async def test_vectors_are_replaced_by_key(storage):
    await storage.vectors.put("42", [("k1", "d1", b"\x00\x01"), ("k2", "d2", b"\x02")])
    await storage.vectors.put("42", [("k1", "d3", b"\x03")])
    assert await storage.vectors.get("42") == {"k1": ("d3", b"\x03"), "k2": ("d2", b"\x02")}
    assert await storage.vectors.get("7") == {}


async def test_vectors_are_deleted_by_key_for_one_person_only(storage):
    await storage.vectors.put("42", [("k1", "d1", b"\x01"), ("k2", "d2", b"\x02"), ("k3", "d3", b"\x03")])
    await storage.vectors.put("7", [("k1", "d1", b"\x01")])
    assert await storage.vectors.delete("42", ["k1", "k3", "absent"]) == 2
    assert await storage.vectors.delete("42", []) == 0
    assert await storage.vectors.get("42") == {"k2": ("d2", b"\x02")}
    assert await storage.vectors.get("7") == {"k1": ("d1", b"\x01")}
    assert await storage.vectors.delete("42", ["k1"]) == 0  # again: nothing, no error


async def test_erasing_a_persons_rows_takes_their_turns_and_vectors_only(storage):
    for n in range(3):
        await record(storage, "t", "42", n, guild="900")
    await record(storage, "t2", "42", 9, guild="901")
    await record(storage, "t", "7", 5)
    await storage.vectors.put("42", [("k", "d", b"\x01")])
    await storage.vectors.put("7", [("k", "d", b"\x01")])
    assert await storage.maintenance.erase_person_rows("42", guild_id="900") == 3
    assert {(p.user_id, p.thread_id) for p in await storage.inbox.pending()} == {("42", "t2"), ("7", "t")}
    assert await storage.maintenance.erase_person_rows("42") == 1
    assert [p.user_id for p in await storage.inbox.pending()] == ["7"]
    assert await storage.vectors.get("42") == {} and await storage.vectors.get("7") != {}
    await storage.maintenance.compact()
    await storage.maintenance.prune_thread("no-such-thread")  # a no-op, not an error


async def test_guild_settings_versioned_writes_and_delete(storage):
    from bot.engine.stores import ServerSettings

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
