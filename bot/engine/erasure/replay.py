"""Running the erasure journal again: what a crash, another process's request or a failure left.

A mixin of :class:`~bot.engine.erasure.eraser.Eraser`, which sets the attributes annotated here and
provides ``hold``, ``words_of``, ``_finish`` and ``compact_owed``. Every
step of every job is idempotent, so a job runs again from its start; each kind of job knows what its
row names (IDs, the quote rule's keyed hashes, an edit's new text) and nothing else.
"""

from __future__ import annotations

import json
import logging
import time
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Callable

from bot.engine.erasure.compaction import MOST_REST, OwedCompaction
from bot.engine.erasure.jobs import EDIT, GUILD, MEMORIES, MESSAGES, QUOTES, THREAD, counted
from bot.engine.erasure.quotes import QuoteRule
from bot.engine.erasure.steps import ErasureSteps
from bot.engine.memories.records import Actor
from bot.engine.stores import ErasureJob, Storage

log = logging.getLogger(__name__)


class JournalReplay:
    """``resume``: finish every recorded erasure nobody is running; ``run_job``: one of them."""

    storage: Storage
    steps: ErasureSteps
    active: int
    _running: set[int]
    _failures: dict[int, tuple[int, float]]
    _exclusive: Callable[[], AbstractAsyncContextManager]
    erasing: Callable[[str], AbstractContextManager[None]]
    owed: OwedCompaction
    _resumed: bool
    _compact_failures: tuple[int, float]  # (failures in a row, retry not before: monotonic)
    guild_ready: Callable[[str], bool]

    async def resume(self) -> int:
        """Finish every erasure in the journal that this process is not already running: those a crash
        left, those another process requested, those that failed here before; return how many finished.

        A job another live process is running is never run twice: :meth:`run_job` waits for the global
        erasure lock that process holds, then finds the row gone and does nothing. A failure is logged and
        the erasure stays recorded, retried later with a growing pause (a compaction a reader blocks for a
        long time must not stop the bot from starting).
        """
        done = 0
        now = time.monotonic()
        for job in await self.storage.erasures.unfinished():
            failures, not_before = self._failures.get(job.id, (0, 0.0))
            if job.id in self._running or now < not_before:
                continue
            if job.kind == GUILD and not self.guild_ready(str(job.guild_id)):
                continue  # after READY (``Eraser.guild_ready``)
            try:
                ran = await self.run_job(job)
            except Exception:  # noqa: BLE001 - stays in the journal; the next round retries
                self._failures[job.id] = (failures + 1, now + min(300.0, 5.0 * 2**failures))
                log.exception("erasure %d (user %s) failed; it stays recorded and will be retried", job.id, job.user_id)
                continue
            self._failures.pop(job.id, None)
            if ran:
                done += 1
                log.info("finished erasure %d (user %s) left in the journal", job.id, job.user_id)
        since = await self.storage.erasures.compaction_owed()
        if since is not None and self._compaction_due(since, now):
            try:
                if await self.compact_owed():
                    log.info("ran the compaction an earlier erasure left owed")
            except Exception:  # noqa: BLE001 - stays owed; retried with a growing pause
                log.exception("the owed compaction failed; it stays recorded and will be retried")
        self._resumed = True
        return done

    def _compaction_due(self, since: float, now: float) -> bool:
        """Whether this round pays the compaction owed: at start-up (a crash left it); not while this
        process's batch timer will, nor before a failure's pause is over; after a failure (a wipe's
        compaction a reader blocked); or once it waited longer than any batch does (its timer died with
        another process). Not while this process rests after a slow one; and a debt another process's
        timer may still pay (it rests up to ``MOST_REST`` after a slow compaction) is taken over only past
        that too: taken at ``most``, a second process compacted every few seconds under the global lock,
        ignoring the owner's rest."""
        if not self._resumed:
            return True
        failures, not_before = self._compact_failures
        if now < not_before or self.owed.waiting() or self.owed.resting():
            return False
        return failures > 0 or time.time() - since >= self.owed.most + MOST_REST

    @counted
    async def run_job(self, job: ErasureJob) -> bool:
        """Run one recorded erasure again, from the start (every step is idempotent); False if it was
        finished meanwhile (by another process, or by whoever held the person)."""
        async with self._exclusive():
            if job.id not in {j.id for j in await self.storage.erasures.unfinished()}:
                return False
            self._running.add(job.id)
            try:
                await self._run_job(job)
            finally:
                self._running.discard(job.id)
        return True

    async def _run_job(self, job: ErasureJob) -> None:
        if job.kind == EDIT:
            recorded = json.loads(job.subject or "{}")
            plan = await self.steps.still_held(recorded)  # deleted or wiped meanwhile: not brought back
            if plan is not None:
                await self.steps.edit(plan)  # (its holds are taken inside)
            if job.quotes:  # the taken-back words, gathered before the first run changed anything
                await self.steps.cut_taken_back(recorded["thread"], QuoteRule.from_bytes(job.quotes),
                                                job.user_id or None)
            if plan is not None:
                await self.steps.learn_again(plan)
            await self._finish(job.id)
            return
        if job.kind == MEMORIES:
            subject = json.loads(job.subject or "{}")
            # light, as on the live run: the person's own change, not a wipe (their new turns are recorded)
            async with self.holds.hold(job.user_id, light=True):
                if subject.get("replaced"):  # an edit by the person: the new text landed or it did not
                    await self.steps.drop_vectors(job.user_id, subject["keys"])
                else:
                    await self.steps.delete_memories(job.user_id, list(subject["keys"]),
                                                     Actor(job.actor or "user", job.actor_id),
                                                     subject.get("messages", ()))
            await self._finish(job.id)
            return
        if job.kind in (MESSAGES, THREAD, GUILD):
            subject = json.loads(job.subject or "{}")
            if job.kind == MESSAGES:
                recorded = QuoteRule.from_bytes(job.quotes or b"")
                await self.steps.messages(job.id, subject["thread"], set(subject["messages"]),
                                          list(subject.get("authors", [])), recorded)
            elif job.kind == THREAD:
                await self.steps.thread(subject["thread"], threads=bool(subject.get("threads")))
            elif str(job.guild_id) in await self.storage.removed_guilds.due(float("inf")):
                await self.steps.guild(str(job.guild_id))
            else:  # added back since (or its first run got as far as its last step): nothing more goes
                log.info("server %s is no longer marked removed: its interrupted erasure stops here", job.guild_id)
            await self._finish(job.id, compact_now=job.kind == GUILD)
            return

        if job.kind == QUOTES:
            await self.steps.cut_quotes(QuoteRule.from_bytes(job.quotes or b""), job.user_id or None)
            await self._finish(job.id)
            return
        with self.erasing(job.user_id):  # their turns meanwhile: no memories, nothing kept (as for a command)
            await self._run_person(job)

    async def _run_person(self, job: ErasureJob) -> None:
        by = Actor(job.actor, job.actor_id) if job.actor else None
        async with self.hold(job.user_id):
            if job.id not in {j.id for j in await self.storage.erasures.unfinished()}:
                return  # finished meanwhile by whoever held the person (it must not run twice)
            if job.quotes is None:  # requested by another process: gather the words first, then record them
                quotes = await self.words_of(job.user_id, job.guild_id)
                await self.storage.erasures.set_quotes(job.id, quotes.to_bytes())
            else:  # what is left now, plus what was gathered before the crash (same key)
                recorded = QuoteRule.from_bytes(job.quotes)
                quotes = await self.words_of(job.user_id, job.guild_id, recorded.key)
                quotes.merge(recorded)
            await self.steps.person(job.id, job.user_id, job.guild_id, by, quotes)
            if self.settled is not None:  # as for a command: their turns marked meanwhile take theirs back first
                await self.settled(job.user_id)
            await self.storage.locks.still_held()  # as for a command: a lapsed claim leaves the row for a rerun
            await self._finish(job.id, compact_now=True)
