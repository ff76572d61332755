"""The learning inbox (``bot.engine.stores.inbox``): every answered turn is kept until it is learned from,
then only as a short per-thread context window; edits and deletions reach every row of a message."""

from __future__ import annotations

import pytest

from bot.storage import open_storage
from tests.storage.contract.conftest import ORIGIN, record


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


async def test_extracted_turns_are_trimmed_to_the_window_so_the_inbox_is_bounded_by_threads(storage, raw):
    window = storage.inbox.context_window
    for n in range(window + 5):
        await record(storage, "t", "42", n)
    await record(storage, "other", "42", 0)
    _, turns = await storage.inbox.batch("t", "42", context=0)
    await storage.inbox.mark_extracted("t", [t.id for t in turns])
    kept = await raw.rows(f"SELECT human FROM {raw.table('inbox')} WHERE thread_id = ? ORDER BY id", ("t",))
    assert [h for (h,) in kept] == [f"h{n}" for n in range(5, window + 5)]  # the newest, as context
    assert await raw.count("inbox", "thread_id = ?", ("other",)) == 1  # another thread's pending turn stays
    await storage.inbox.mark_extracted("t", [])  # nothing to mark: nothing changes
    assert await raw.count("inbox", "thread_id = ?", ("t",)) == window


async def test_a_turn_and_its_origin_come_back_as_recorded(storage):
    origin = {"guild_id": "900", "channel_id": "7", "message_id": "70", "reply_to": None, "n": 3}
    await storage.inbox.record(thread_id="t", user_id="42", author="Ada", human="I like tea ☕", ai="Noted.",
                               origin=origin)
    (turn,) = await storage.inbox.every_turn()
    assert (turn.thread_id, turn.user_id, turn.author, turn.human, turn.ai, turn.origin) == (
        "t", "42", "Ada", "I like tea ☕", "Noted.", origin)
    assert isinstance(turn.id, int) and isinstance(turn.created, float)


async def test_pending_lists_the_oldest_activity_first(storage):
    await record(storage, "t1", "42", 0)
    await record(storage, "t2", "7", 0)
    await record(storage, "t1", "42", 1)  # t1 is active again: now the newest
    pending = await storage.inbox.pending()
    assert [(p.thread_id, p.user_id, p.count) for p in pending] == [("t2", "7", 1), ("t1", "42", 2)]
    assert pending[0].last_created <= pending[1].last_created


async def test_a_batch_without_pending_turns_or_context_is_empty(storage):
    assert await storage.inbox.batch("t", "42", context=4) == ([], [])
    await record(storage, "t", "7", 0)
    await record(storage, "t", "42", 1)
    before, turns = await storage.inbox.batch("t", "42", context=0)
    assert before == [] and [t.human for t in turns] == ["h1"]
    before, _ = await storage.inbox.batch("t", "42", context=5)
    assert [t.human for t in before] == ["h0"]  # context is the thread's, whoever said it


async def test_an_edit_reaches_pending_and_context_rows_and_returns_them_as_they_were(storage):
    await record(storage, "t", "42", 0, message="m0")
    await record(storage, "t", "42", 1, message="m1")
    _, turns = await storage.inbox.batch("t", "42", context=0)
    await storage.inbox.mark_extracted("t", [turns[0].id])  # m0 is kept as context now
    for message, n in (("m0", 0), ("m1", 1)):
        before = await storage.inbox.edit_message(message, f"edited {n}")
        assert [(t.human, t.origin["message_id"]) for t in before] == [(f"h{n}", message)]
    assert [t.human for t in await storage.inbox.every_turn()] == ["edited 0", "edited 1"]
    assert await storage.inbox.edit_message("no-such-message", "x") == []


async def test_forgetting_messages_threads_and_servers_deletes_exactly_their_rows(storage, raw):
    await record(storage, "t", "42", 0, message="m0")
    await record(storage, "t", "7", 1, message="m1")
    await record(storage, "u", "42", 2, message="m2", guild="901")
    await record(storage, "v", "42", 3, message="m3", guild="901")
    await record(storage, "w", "42", 4, message="m4", guild="902")
    assert await storage.inbox.forget_messages(set()) == 0
    assert await storage.inbox.forget_messages({"m0", "no-such-message"}) == 1
    assert await raw.count("inbox", "human = ?", ("h0",)) == 0
    assert await storage.inbox.forget_thread("t") == 1
    assert await storage.inbox.forget_thread("t") == 0
    assert await storage.inbox.forget_guild("901") == 2
    assert [(t.thread_id, t.human) for t in await storage.inbox.every_turn()] == [("w", "h4")]
    assert await raw.count("inbox") == 1


async def test_every_turn_and_rewrite_turns(storage):
    for n in range(3):
        await storage.inbox.record(thread_id="t", user_id=str(n), author="a", human=f"h{n}", ai=f"a{n}", origin=ORIGIN)
    turns = await storage.inbox.every_turn()
    assert [t.human for t in turns] == ["h0", "h1", "h2"]
    await storage.inbox.rewrite_turns({turns[1].id: ("[erased]", "ok [erased]")})
    assert [(t.human, t.ai) for t in await storage.inbox.every_turn()] == [
        ("h0", "a0"), ("[erased]", "ok [erased]"), ("h2", "a2")]
    await storage.inbox.rewrite_turns({})
    assert len(await storage.inbox.every_turn()) == 3


async def test_the_inbox_epoch_is_stable_across_reopening(settings):
    async with open_storage(settings) as first:
        epoch = first.inbox.epoch
        await record(first, "t", "42", 0)
    async with open_storage(settings) as again:
        assert again.inbox.epoch == epoch and len(epoch) >= 16
        assert [p.count for p in await again.inbox.pending()] == [1]  # and the pending turn is still there


async def test_a_new_database_has_a_new_epoch(tmp_path, backend, open_again):
    from tests.conftest import FreshDatabase, make_settings

    async with open_again() as storage:
        epoch = storage.inbox.epoch
    if backend.name == "sqlite":
        other = make_settings(tmp_path / "elsewhere", backend)
        async with open_storage(other) as storage:
            assert storage.inbox.epoch != epoch
        return
    with FreshDatabase() as db:
        from tests.conftest import Backend

        async with open_storage(make_settings(tmp_path, Backend("postgres", db.url))) as storage:
            assert storage.inbox.epoch != epoch


@pytest.mark.second_process_reads_only
async def test_another_process_sees_the_same_epoch_and_the_recorded_turns(storage, second_process):
    assert second_process.inbox.epoch == storage.inbox.epoch
    await record(storage, "t", "42", 0)
    assert [(p.thread_id, p.user_id, p.count) for p in await second_process.inbox.pending()] == [("t", "42", 1)]


async def test_a_paused_person_is_not_recorded_and_is_again_once_they_resume(storage, raw):
    await storage.prefs.set("42", paused=True)
    assert await record(storage, "t", "42", 0) == 0  # the pause is read with the insert: nothing stored
    assert await record(storage, "t", "7", 0) == 1  # someone else in the same thread is recorded
    assert await raw.count("inbox", "user_id = ?", ("42",)) == 0
    await storage.prefs.set("42", paused=False)
    assert await record(storage, "t", "42", 1) == 1
    assert [t.human for t in (await storage.inbox.batch("t", "42", context=0))[1]] == ["h1"]
