"""The erasure journal (``bot.engine.stores.erasures``): written before an erasure starts, forgotten only
when it is finished, and found again after a crash, so an erasure is never half-done for good."""

from __future__ import annotations

import json

import pytest

QUOTES = b"k" * 16 + b"h" * 8


async def test_the_erasure_journal_keeps_unfinished_jobs_across_reopening(open_again):
    async with open_again() as storage:
        first = await storage.erasures.begin(kind="person", user_id="42", guild_id="900", actor="moderator",
                                             actor_id="1", quotes=QUOTES)
        requested = await storage.erasures.begin(kind="person", user_id="43")
        await storage.erasures.set_quotes(requested, b"x" * 16)
    async with open_again() as storage:  # a restart: nothing of the journal is lost
        jobs = await storage.erasures.unfinished()
        assert [(j.id, j.user_id, j.guild_id, j.actor) for j in jobs] == [
            (first, "42", "900", "moderator"), (requested, "43", None, None)]
        assert jobs[0].quotes == QUOTES and jobs[1].quotes == b"x" * 16
        await storage.erasures.finish(first)
    async with open_again() as storage:  # and a finished job stays finished
        assert [j.id for j in await storage.erasures.unfinished()] == [requested]


async def test_every_field_of_a_job_comes_back_as_written(storage):
    subject = json.dumps({"thread": "7", "messages": ["70", "71"], "authors": ["42"]})
    quotes = bytes(range(256))  # keyed hashes are arbitrary bytes, NUL included
    job_id = await storage.erasures.begin(kind="messages", user_id="42", guild_id="900", actor="self",
                                          actor_id="42", quotes=quotes, subject=subject)
    (job,) = await storage.erasures.unfinished()
    assert (job.id, job.kind, job.user_id, job.guild_id, job.actor, job.actor_id, job.quotes, job.subject) == (
        job_id, "messages", "42", "900", "self", "42", quotes, subject)
    assert isinstance(job.id, int) and isinstance(job.requested, float) and job.requested > 0
    bare = await storage.erasures.begin(kind="guild", user_id="", guild_id="901")
    assert [(j.id, j.quotes, j.subject, j.actor_id) for j in await storage.erasures.unfinished()][1] == (
        bare, None, None, None)


async def test_unfinished_jobs_are_listed_oldest_first(storage):
    ids = [await storage.erasures.begin(kind="person", user_id=str(n)) for n in (5, 3, 9)]
    assert len(set(ids)) == 3
    assert [(j.id, j.user_id) for j in await storage.erasures.unfinished()] == list(zip(ids, ["5", "3", "9"]))
    await storage.erasures.finish(ids[2])
    newest = await storage.erasures.begin(kind="thread", user_id="", subject=json.dumps({"thread": "7"}))
    assert [j.id for j in await storage.erasures.unfinished()] == [ids[0], ids[1], newest]


async def test_steps_can_run_twice_after_a_crash(storage):
    """Every journal step is idempotent: an erasure retried after a crash repeats them harmlessly."""
    job = await storage.erasures.begin(kind="person", user_id="42")
    other = await storage.erasures.begin(kind="person", user_id="7", quotes=b"o" * 16)
    await storage.erasures.set_quotes(job, b"a" * 16)
    await storage.erasures.set_quotes(job, b"b" * 16)  # gathered again after a restart: the latest holds
    assert {j.id: j.quotes for j in await storage.erasures.unfinished()} == {job: b"b" * 16, other: b"o" * 16}
    await storage.erasures.finish(job)
    await storage.erasures.finish(job)  # finishing twice is not an error, and touches no other job
    await storage.erasures.set_quotes(job, b"c" * 16)  # a late step of a finished job brings nothing back
    assert [(j.id, j.quotes) for j in await storage.erasures.unfinished()] == [(other, b"o" * 16)]


async def test_finish_deletes_the_row_and_its_quote_hashes(storage, raw):
    job = await storage.erasures.begin(kind="quotes", user_id="42", quotes=QUOTES)
    assert await raw.count("erasures") == 1
    await storage.erasures.finish(job)
    assert await raw.count("erasures") == 0


@pytest.mark.second_process_reads_only
async def test_a_job_one_process_records_is_seen_by_another(storage, second_process):
    job = await storage.erasures.begin(kind="person", user_id="42", quotes=QUOTES)
    assert [(j.id, j.quotes) for j in await second_process.erasures.unfinished()] == [(job, QUOTES)]
    await storage.erasures.finish(job)
    assert await second_process.erasures.unfinished() == []


async def test_a_wipe_requested_from_another_process_is_completed_by_the_running_one(postgres_only, storage,
                                                                                    second_process):
    """``python -m bot memories wipe`` beside a running bot: it records a job without quotes; the bot
    gathers the words (``set_quotes``), does it, and finishes it; the shell sees it gone."""
    job = await second_process.erasures.begin(kind="person", user_id="42", actor="shell")
    (found,) = await storage.erasures.unfinished()
    assert (found.id, found.quotes, found.actor) == (job, None, "shell")
    await storage.erasures.set_quotes(job, QUOTES)
    assert [j.quotes for j in await second_process.erasures.unfinished()] == [QUOTES]
    await storage.erasures.finish(job)
    assert await second_process.erasures.unfinished() == []


async def test_an_owed_compaction_is_one_durable_record_apart_from_the_jobs(open_again):
    async with open_again() as storage:
        assert await storage.erasures.compaction_owed() is None
        job = await storage.erasures.begin(kind="messages", user_id="42", subject="{}")
        await storage.erasures.owe_compaction()
        await storage.erasures.owe_compaction()  # one debt however many records: the oldest says since when
        await storage.erasures.finish(job)
        assert await storage.erasures.unfinished() == []  # not an erasure to run again
    async with open_again() as storage:  # a crash before the compaction: the debt is still there
        since = await storage.erasures.compaction_owed()
        assert isinstance(since, float) and since > 0
        mark = await storage.erasures.owed_mark()
        await storage.erasures.owe_compaction()  # recorded while the compaction runs: not paid by it
        await storage.erasures.compaction_paid(mark)
        assert await storage.erasures.compaction_owed() is not None
        await storage.erasures.compaction_paid(await storage.erasures.owed_mark())
        assert await storage.erasures.compaction_owed() is None
