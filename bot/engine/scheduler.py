"""Background memory extraction, debounced per (thread, person), off the reply path.

A turn is recorded in the inbox before its reply is returned; this scheduler later runs the memory graph
for that pair when the conversation has been quiet for ``quiet_seconds`` or when ``after_messages`` turns
are waiting, whichever comes first. Pending work is in storage, so ``start()`` resumes whatever a previous
process left, and ``close()`` flushes what is waiting. One person never has two extractions at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager
from typing import AsyncIterator, Awaitable, Callable

from bot.engine.extraction import TurnText, WriteRequest
from bot.engine.stores import Inbox, InboxTurn

log = logging.getLogger(__name__)

RunWrite = Callable[[WriteRequest], Awaitable[dict]]
OnChange = Callable[[WriteRequest, dict], Awaitable[None]]
MAX_FAILURES = 3  # for errors that are not outages (a bug, a poison input): then the batch is skipped
STORAGE_RETRY_SECONDS = 2.0  # first retry after the database went away; doubles up to 60 s
TRANSIENT_STATUS = {408, 409, 429}


def is_transient(exc: BaseException) -> bool:
    """An outage worth waiting out: timeouts, connection errors, 429 and 5xx from the model API."""
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError)):
        return True
    if type(exc).__name__ in {"APITimeoutError", "APIConnectionError", "RateLimitError", "InternalServerError",
                              "ExtractionInterrupted"}:
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status >= 500 or status in TRANSIENT_STATUS)


def _text(turn: InboxTurn) -> TurnText:
    return TurnText(author=turn.author, human=turn.human, ai=turn.ai)


class ExtractionScheduler:
    """Decides when to extract, and makes sure each pending turn is extracted exactly once."""

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
    ) -> None:
        self.inbox = inbox
        self.storage_errors = storage_errors
        self.applied_up_to = applied_up_to
        self.run_write = run_write
        self.quiet_seconds = quiet_seconds
        self.after_messages = after_messages
        self.context_turns = context_turns
        self.on_change = on_change
        self._timers: dict[tuple[str, str], asyncio.Task] = {}
        self._user_locks: dict[str, asyncio.Lock] = {}
        self._failures: dict[tuple[str, str], int] = {}
        self._closed = False

    async def start(self) -> None:
        """Resume the work a previous process left pending."""
        pending = await self.inbox.pending()
        now = time.time()
        for p in pending:
            self._schedule(p.thread_id, p.user_id, max(0.0, p.last_created + self.quiet_seconds - now))
        if pending:
            log.info("resuming memory extraction for %d conversation(s)", len(pending))

    def notify(self, thread_id: str, user_id: str, pending_count: int) -> None:
        """A turn was recorded: restart the quiet timer, or extract now if enough turns are waiting."""
        delay = 0.0 if pending_count >= self.after_messages else self.quiet_seconds
        self._schedule(thread_id, user_id, delay)

    def _schedule(self, thread_id: str, user_id: str, delay: float) -> None:
        if self._closed:
            return
        key = (thread_id, user_id)
        old = self._timers.get(key)
        if old is not None and not old.done():
            old.cancel()
        self._timers[key] = asyncio.create_task(self._after(key, delay), name=f"extract:{thread_id}:{user_id}")

    async def _after(self, key: tuple[str, str], delay: float) -> None:
        await asyncio.sleep(delay)
        # From here on the run is shielded: a newer message must not cancel an extraction half-way.
        task = asyncio.ensure_future(self.run(*key))
        try:
            await asyncio.shield(task)
        finally:
            if self._timers.get(key) is asyncio.current_task():
                del self._timers[key]

    async def run(self, thread_id: str, user_id: str) -> dict | None:
        """Extract a pair's pending turns now; return the changes (None when nothing was pending).

        When the database is unreachable the turns stay pending there and the pair is tried again later
        (the outage itself is logged once, by storage).
        """
        try:
            return await self._run(thread_id, user_id)
        except self.storage_errors as exc:
            key = (thread_id, user_id)
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
            log.debug("memory extraction for user %s waits for the database: %r", user_id, exc)
            self._schedule(thread_id, user_id, min(60.0, STORAGE_RETRY_SECONDS * 2 ** min(failures - 1, 5)))
            return None

    async def _run(self, thread_id: str, user_id: str) -> dict | None:
        lock = self._user_locks.setdefault(user_id, asyncio.Lock())
        async with lock:
            before, pending = await self.inbox.batch(thread_id, user_id, self.context_turns)
            if not pending:
                return None
            if self.applied_up_to is not None:
                # Turns whose memory changes were committed before a crash cut the inbox update short.
                done = await self.applied_up_to(user_id, thread_id, self.inbox.epoch)
                already = [t.id for t in pending if t.id <= done]
                if already:
                    await self.inbox.mark_extracted(thread_id, already)
                    pending = [t for t in pending if t.id > done]
                    if not pending:
                        return None
            request = WriteRequest(
                user_id=user_id,
                speaker_name=pending[-1].author,
                new=[_text(t) for t in pending],
                context=[_text(t) for t in before],
                origin=pending[-1].origin,
                thread_id=thread_id,
                last_turn_id=pending[-1].id,
                inbox_epoch=self.inbox.epoch,
            )
            key = (thread_id, user_id)
            try:
                changes = await self.run_write(request)
            except self.storage_errors:
                raise  # see run(): an outage, not a bad batch
            except Exception as exc:
                failures = self._failures.get(key, 0) + 1
                self._failures[key] = failures
                if is_transient(exc) or failures < MAX_FAILURES:
                    # The model API is down or busy: the turns stay pending (in storage) and are retried
                    # with a growing delay for as long as it takes. Nothing is dropped for an outage.
                    log.warning("memory extraction failed for user %s (attempt %d): %r; will retry",
                                user_id, failures, exc)
                    self._schedule(thread_id, user_id, min(300.0, 5.0 * 2 ** min(failures, 6)))
                    return None
                log.exception("memory extraction failed %d times for user %s; skipping these turns", failures, user_id)
                changes = {}
            self._failures.pop(key, None)
            await self.inbox.mark_extracted(thread_id, [t.id for t in pending])
        if changes and any(changes.values()) and self.on_change is not None:
            try:
                await self.on_change(request, changes)
            except Exception:  # noqa: BLE001 - a notification must not undo the work
                log.exception("memory change notification failed")
        return changes

    @asynccontextmanager
    async def hold(self, user_id: str) -> AsyncIterator[None]:
        """Keep a person's extraction stopped for the duration (an erasure), then resume what is left.

        Timers are cancelled and the person's lock is held throughout, so no extraction reads the data
        being erased; afterwards their remaining pending turns (other servers, after a purge) are
        scheduled again.
        """
        for key in [k for k in self._timers if k[1] == user_id]:
            self._timers.pop(key).cancel()
        lock = self._user_locks.setdefault(user_id, asyncio.Lock())
        async with lock:
            yield
        for p in await self.inbox.pending():
            if p.user_id == user_id:
                self._schedule(p.thread_id, user_id, self.quiet_seconds)

    async def flush(self) -> None:
        """Extract everything pending now (used at shutdown and by tests and the console)."""
        for task in list(self._timers.values()):
            task.cancel()
        self._timers.clear()
        for p in await self.inbox.pending():
            await self.run(p.thread_id, p.user_id)

    async def close(self, timeout: float = 30.0) -> None:
        """Stop scheduling and flush pending work, within ``timeout``; what is left stays in the inbox."""
        self._closed = True
        try:
            await asyncio.wait_for(self.flush(), timeout)
        except asyncio.TimeoutError:
            log.warning("memory extraction flush timed out; the rest resumes on next start")
        except self.storage_errors as exc:
            log.warning("memory extraction flush stopped: the database is unreachable (%r); "
                        "the rest resumes on next start", exc)
