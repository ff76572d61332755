"""Background memory extraction, debounced per (server or DMs, person), off the reply path.

A turn is recorded in the inbox before its reply is returned; this scheduler later runs the memory graph
for that pair when the conversation has been quiet for ``quiet_seconds`` or when ``after_messages`` turns
are waiting, whichever comes first. Pending work is in storage, so ``start()`` resumes whatever a previous
process left, and ``close()`` flushes what is waiting. One person never has two extractions at once.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, AsyncIterator, Awaitable, Callable

from bot.engine.errors import is_transient
from bot.engine.concurrency import BoundedDict, Locks
from bot.engine.learning.extraction import TurnText, WriteRequest
from bot.engine.learning.transcript import MAX_MESSAGE_CHARS, REPLY_CHARS
from bot.engine.recall import estimate_tokens
from bot.engine.stores import Inbox, InboxTurn
from bot.engine.stores.locks import ERASURE, EXTRACTION, ClaimLost, SingleProcessLocks

log = logging.getLogger(__name__)

RunWrite = Callable[[WriteRequest], Awaitable[dict]]
OnChange = Callable[[WriteRequest, dict], Awaitable[None]]
MAX_FAILURES = 3  # for errors that are not outages (a bug, a poison input): then the batch is skipped
STORAGE_RETRY_SECONDS = 2.0  # first retry after the database went away; doubles up to 60 s
CLAIMED_RETRY_SECONDS = 1.0  # another process is working on this person: look again after this



NEW_BUDGET_TOKENS = 1100  # new messages (with their shortened replies) in one call; the rest waits for the next


def _text(turn: InboxTurn) -> TurnText:
    return TurnText(author_id=turn.user_id, author=turn.author, human=turn.human, ai=turn.ai, at=turn.created,
                    sent=_epoch(turn.origin.get("sent_at")),
                    origin=dict(turn.origin), thread_id=turn.thread_id, turn_id=turn.id)


def _epoch(moment: Any) -> float:
    """An ISO time (a re-learned edit's ``sent_at``, see ``steps.learn_again``) as epoch seconds; 0: none."""
    try:
        when = datetime.fromisoformat(str(moment))
    except ValueError:
        return 0.0
    return when.timestamp() if when.tzinfo is not None else 0.0


def scope_of(origin: dict) -> str:
    """Where one extraction may gather turns from: one server (its ID), or the person's DMs ("dm")."""
    return str(origin.get("guild_id") or "dm")


def within_budget(turns: list[InboxTurn], budget: int) -> list[InboxTurn]:
    """The oldest turns whose text fits the budget (always at least one): each call stays bounded."""
    taken, used = [], 0
    for t in turns:
        cost = estimate_tokens(t.human[:MAX_MESSAGE_CHARS]) + estimate_tokens(t.ai[:REPLY_CHARS]) + 20  # + header
        if taken and used + cost > budget:
            break
        taken.append(t)
        used += cost
    return taken


class ExtractionScheduler:
    """Decides when to extract, and makes sure each pending turn is extracted exactly once.

    Work is keyed by (scope, person), where the scope is a server or the person's DMs: one extraction
    covers the person's pending turns in every channel of that server, so someone who says one thing in
    each of five channels costs one call, not five. Watermarks stay per thread (committed with the memory
    changes), so exactly-once after a crash is unchanged.
    """

    def __init__(
        self,
        inbox: Inbox,
        run_write: RunWrite,
        *,
        quiet_seconds: float,
        after_messages: int,
        context_turns: int,
        on_change: OnChange | None = None,
        applied_up_to: Callable[[str, str, str], Awaitable[int]] | None = None,
        storage_errors: tuple[type[BaseException], ...] = (),
        locks: Locks | None = None,
    ) -> None:
        self.inbox = inbox
        self.locks = locks or Locks(SingleProcessLocks())
        self.storage_errors = storage_errors
        self.applied_up_to = applied_up_to
        self.run_write = run_write
        self.quiet_seconds = quiet_seconds
        self.after_messages = after_messages
        self.context_turns = context_turns
        self.on_change = on_change
        self._timers: dict[tuple[str, str], asyncio.Task] = {}
        self._failures: BoundedDict[tuple[str, str], int] = BoundedDict(10_000)
        self._waits: BoundedDict[tuple[str, str], int] = BoundedDict(10_000)  # see run()
        self._closed = False
        self._sweeper: asyncio.Task | None = None

    async def _pending_by_scope(self, user_id: str | None = None) -> dict[tuple[str, str], float]:
        """(scope, person) -> newest pending turn time, for everyone (or one person)."""
        out: dict[tuple[str, str], float] = {}
        for p in await self.inbox.pending():
            if user_id is not None and p.user_id != user_id:
                continue
            _before, turns = await self.inbox.batch(p.thread_id, p.user_id, 0)
            if turns:
                key = (scope_of(turns[-1].origin), p.user_id)
                out[key] = max(out.get(key, 0.0), p.last_created)
        return out

    async def start(self) -> None:
        """Resume the work a previous process left pending."""
        pending = await self._pending_by_scope()
        now = time.time()
        for (scope, user_id), last in pending.items():
            self._schedule(scope, user_id, max(0.0, last + self.quiet_seconds - now))
        if pending:
            log.info("resuming memory extraction for %d person/place pair(s)", len(pending))
        sweep = self.locks.shared.sweep_seconds if self.locks is not None else None
        if sweep:
            self._sweeper = asyncio.create_task(self._sweep(sweep), name="extraction-sweep")

    async def _sweep(self, every: float) -> None:
        """On a shared database: pick up turns no timer here knows of (another process died with them).

        Only turns overdue by a whole sweep: the process that recorded them (alive) restarts its quiet timer
        at each new message, and another process's timer armed at the newest turn's time plus the quiet
        period fired in the middle of the conversation, every sweep: several extractions a conversation
        instead of one when it goes quiet."""
        while not self._closed:
            await asyncio.sleep(every)
            try:
                now = time.time()
                for (scope, user_id), last in (await self._pending_by_scope()).items():
                    timer = self._timers.get((scope, user_id))
                    if (timer is None or timer.done()) and now - last >= self.quiet_seconds + every:
                        self._schedule(scope, user_id, 0.0)
            except self.storage_errors as exc:
                log.debug("looking for left-over memory work waits for the database: %r", exc)
            except Exception:  # noqa: BLE001 - the next round tries again
                log.exception("looking for left-over memory work failed")

    def notify(self, thread_id: str, user_id: str, pending_count: int, scope: str = "dm") -> None:
        """A turn was recorded: restart the quiet timer, or extract now if enough turns are waiting.

        ``scope`` is the turn's server ID (or "dm"): the timer is the person's in that server, so a message
        in another channel of the same server postpones (and joins) the same extraction.
        """
        delay = 0.0 if pending_count >= self.after_messages else self.quiet_seconds
        self._schedule(str(scope or "dm"), user_id, delay)

    def _schedule(self, scope: str, user_id: str, delay: float) -> None:
        if self._closed:
            return
        key = (scope, user_id)
        old = self._timers.get(key)
        if old is not None and not old.done():
            old.cancel()
        # A fresh context: the extraction is no part of the turn that queued it and inherits nothing of
        # it (the turn's unit of work with storage, bot.engine.stores.scopes, ends with the turn).
        self._timers[key] = asyncio.create_task(self._after(key, delay), name=f"extract:{scope}:{user_id}",
                                                context=contextvars.Context())

    async def _after(self, key: tuple[str, str], delay: float) -> None:
        await asyncio.sleep(delay)
        # From here on the run is shielded: a newer message must not cancel an extraction half-way.
        task = asyncio.ensure_future(self.run(*key))
        try:
            await asyncio.shield(task)
        finally:
            if self._timers.get(key) is asyncio.current_task():
                del self._timers[key]

    async def _gather(self, scope: str, user_id: str) -> tuple[list[InboxTurn], list[InboxTurn]]:
        """(context, pending) for a person in one scope, across its threads; already-applied turns closed."""
        context: list[InboxTurn] = []
        pending: list[InboxTurn] = []
        for p in await self.inbox.pending():
            if p.user_id != user_id:
                continue
            before, turns = await self.inbox.batch(p.thread_id, user_id, self.context_turns)
            if not turns or scope_of(turns[-1].origin) != scope:
                continue
            if self.applied_up_to is not None:
                # Turns whose memory changes were committed before a crash cut the inbox update short.
                done = await self.applied_up_to(user_id, p.thread_id, self.inbox.epoch)
                already = [t.id for t in turns if t.id <= done]
                if already:
                    await self.inbox.mark_extracted(p.thread_id, already)
                    turns = [t for t in turns if t.id > done]
            if turns:
                pending += turns
                context += before
        pending.sort(key=lambda t: t.id)
        context.sort(key=lambda t: t.id)
        return context[-self.context_turns:] if self.context_turns > 0 else [], pending

    async def run(self, scope: str, user_id: str) -> dict | None:
        """Extract a person's pending turns in one scope now; return the changes (None when nothing was pending).

        When the database is unreachable the turns stay pending there and the pair is tried again later
        (the outage itself is logged once, by storage).
        """
        try:
            return await self._run(scope, user_id)
        except self.storage_errors as exc:
            key = (scope, user_id)
            # A count of its own: waits here (the database, an unfinished erasure) must not spend the model's
            # failures, after which a batch is skipped.
            waits = self._waits.get(key, 0) + 1
            self._waits[key] = waits
            log.debug("memory extraction for user %s waits (the database, or an unfinished erasure): %r", user_id, exc)
            self._schedule(scope, user_id, min(60.0, STORAGE_RETRY_SECONDS * 2 ** min(waits - 1, 5)))
            return None

    async def _run(self, scope: str, user_id: str) -> dict | None:
        leftover = False
        async with self.locks.person(user_id, kind=EXTRACTION, wait=False) as claimed:
            if not claimed:  # another process works on this person now; it may leave some for us
                self._schedule(scope, user_id, CLAIMED_RETRY_SECONDS)
                return None
            before, pending = await self._gather(scope, user_id)
            if not pending:
                return None
            taken = within_budget(pending, NEW_BUDGET_TOKENS)
            leftover = len(taken) < len(pending)
            marks: dict[str, int] = {}
            for t in taken:
                marks[t.thread_id] = max(marks.get(t.thread_id, 0), t.id)
            request = WriteRequest(
                user_id=user_id,
                speaker_name=taken[-1].author,
                new=[_text(t) for t in taken],
                context=[_text(t) for t in before],
                origin=taken[-1].origin,
                watermarks=tuple(marks.items()),
                inbox_epoch=self.inbox.epoch,
            )
            key = (scope, user_id)
            try:
                changes = await self.run_write(request)
            except self.storage_errors:
                raise  # see run(): an outage, not a bad batch
            except ClaimLost:
                log.info("memory extraction for user %s was taken over by another process", user_id)
                return None
            except Exception as exc:
                failures = self._failures.get(key, 0) + 1
                self._failures[key] = failures
                if is_transient(exc) or failures < MAX_FAILURES:
                    # The model API is down or busy: the turns stay pending (in the inbox) and are retried
                    # with a growing delay for as long as it takes. Nothing is dropped for an outage.
                    log.warning("memory extraction failed for user %s (attempt %d): %r; will retry",
                                user_id, failures, exc)
                    self._schedule(scope, user_id, min(300.0, 5.0 * 2 ** min(failures, 6)))
                    return None
                log.exception("memory extraction failed %d times for user %s; skipping these turns", failures, user_id)
                changes = {}
            self._failures.pop(key, None)
            self._waits.pop(key, None)
            for thread_id in marks:
                await self.inbox.mark_extracted(thread_id, [t.id for t in taken if t.thread_id == thread_id])
        if leftover:
            self._schedule(scope, user_id, 0.0)  # the rest of a long backlog, in the next bounded call
        if changes and any(changes.values()) and self.on_change is not None:
            try:
                await self.on_change(request, changes)
            except Exception:  # noqa: BLE001 - a notification must not undo the work
                log.exception("memory change notification failed")
        return changes

    @asynccontextmanager
    async def hold(self, user_id: str, *, kind: str = ERASURE) -> AsyncIterator[None]:
        """Keep a person's extraction stopped for the duration (an erasure), then resume what is left.

        Timers are cancelled and the person's lock is held throughout, so no extraction reads the data
        being erased; afterwards their remaining pending turns (other servers, after a purge) are
        scheduled again. ``kind`` ``EXTRACTION`` (a deleted message) excludes extraction only: on a shared
        database the person's new turns are still recorded meanwhile (an ``ERASURE`` claim refuses them).
        """
        for key in [k for k in self._timers if k[1] == user_id]:
            self._timers.pop(key).cancel()
        try:
            async with self.locks.person(user_id, kind=kind, wait=True):
                yield
        except BaseException:
            # A light hold (a deleted message, an edit) that failed inside must not leave the person's other
            # turns unscheduled: they wait for nothing. A failed wipe does: its rows are still being erased,
            # and its journal replay, once it succeeds, ends a hold like this one that schedules them.
            if kind != ERASURE:
                await self._resume(user_id)
            raise
        await self._resume(user_id)

    async def _resume(self, user_id: str) -> None:
        """Schedule the person's remaining turns after a hold; a failure is logged, never raised out of an
        erasure that is done (or that raised something of its own)."""
        try:
            for scope, _user in await self._pending_by_scope(user_id):
                self._schedule(scope, user_id, self.quiet_seconds)
        except Exception:  # noqa: BLE001
            log.warning("could not schedule the remaining extraction of a person after a hold "
                        "(it is scheduled when they speak again, or at the next start)", exc_info=True)

    async def flush(self) -> None:
        """Extract everything pending now (used at shutdown and by tests and the console)."""
        for task in list(self._timers.values()):
            task.cancel()
        self._timers.clear()
        while True:  # a long backlog is taken in bounded calls: go on while calls succeed
            progressed = False
            for scope, user_id in await self._pending_by_scope():
                if await self.run(scope, user_id) is not None:
                    progressed = True
                    self._drop_timer(scope, user_id)  # its leftovers are taken by the next round
            if not progressed:  # nothing left, or the model is failing (its retry timers stay)
                return

    def _drop_timer(self, scope: str, user_id: str) -> None:
        task = self._timers.pop((scope, user_id), None)
        if task is not None:
            task.cancel()

    async def close(self, timeout: float = 30.0) -> None:
        """Stop scheduling and flush pending work, within ``timeout``; what is left stays in the inbox."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        try:
            await asyncio.wait_for(self.flush(), timeout)
        except asyncio.TimeoutError:
            log.warning("memory extraction flush timed out; the rest resumes on next start")
        except self.storage_errors as exc:
            log.warning("memory extraction flush stopped: the database is unreachable (%r); "
                        "the rest resumes on next start", exc)
