"""When erased content is made unrecoverable: one compaction per erasure job, small removals batched.

A compaction (``Maintenance.compact``: SQLite's rebuild of each file and checked WAL truncation,
PostgreSQL's verbose clean-up of the erased tables) is the expensive part of an erasure, and it used to
run after every step. Now:

- every job ends with exactly one, after all its steps and after its journal row is gone (the row's
  quote hashes must leave no page behind either);
- a wipe, a purge and a removed server's sweep run theirs at once, before the job returns: the person
  is told "Done" only once the words are in no file;
- small removals nobody is told "Done" about in those words (a deleted message, an edit, a deleted
  channel, ``/memories delete`` and ``forget``, whose change log keeps the text anyway) only *owe* one:
  the owed compaction runs in the background after :data:`QUIET_SECONDS` without another small removal,
  and at most :data:`MOST_SECONDS` after the first, so a burst of ten deletions costs one; its cost grows
  with the data (SQLite rewrites whole files), so after one that took *d* seconds the next batch waits at
  least :data:`REST_FACTOR` · *d* (a 1 s rebuild: 20 s), keeping rebuilds under ~5% of the time;
- the debt is durable: before a job's row goes, a ``compact`` row is written to the journal (no text,
  no hashes), and it is finished only after a compaction. A crash in between leaves it, and the next
  start (or, on a shared database, another process's poll once it is :data:`MOST_SECONDS` old)
  compacts. Nothing here runs on the reply path: the timer is a task of its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable

log = logging.getLogger(__name__)

QUIET_SECONDS = 2.0  # a small removal waits this long for another before the batch is compacted
MOST_SECONDS = 10.0  # and never longer than this after the first one of the batch
REST_FACTOR = 20.0  # after a compaction that took d seconds, the next batch waits at least 20·d after it
MOST_REST = 120.0  # but never longer (d includes waits for a busy reader, which say nothing of the cost)
TICK_SECONDS = 0.25  # how often a waiting timer looks at its deadline again


class OwedCompaction:
    """The debounce timer of the owed compaction (the durable half is the journal's ``compact`` row).

    ``run()`` compacts whatever the journal owes (under the erasure lock; see ``Eraser.compact_owed``).
    """

    def __init__(self, run: Callable[[], Awaitable[bool]], *, quiet: float = QUIET_SECONDS,
                 most: float = MOST_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self._run = run
        self.quiet = quiet
        self.most = most
        self.clock = clock
        self._first: float | None = None  # when the batch began owing
        self._last = 0.0  # the latest small removal of the batch
        self._task: asyncio.Task | None = None
        self._rest_until = 0.0  # a slow compaction's rest: the next batch runs no earlier (REST_FACTOR)

    def due(self) -> None:
        """A small removal finished owing a compaction: (re)start the quiet period, within the longest wait."""
        now = self.clock()
        self._last = now
        if self._first is None:
            self._first = now
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._wait_then_run(), name="owed-compaction")

    def waiting(self) -> bool:
        """Whether this process's timer will compact what is owed (the poll then leaves it to the timer)."""
        return self._task is not None and not self._task.done()

    def resting(self) -> bool:
        """Whether a slow compaction's rest (see :meth:`took`) is still on: no compaction before it ends."""
        return self.clock() < self._rest_until

    def paid(self) -> None:
        """A compaction just ran (a wipe's, or start-up's): whatever was owed before it is paid."""
        self._first = None

    def took(self, seconds: float) -> None:
        """A compaction (this batch's, or a wipe's) just took ``seconds``: the next batch rests
        ``REST_FACTOR`` times that first, at most :data:`MOST_REST`. Measured around the storage's compaction
        (not the wait for the erasure lock; a reader it waited for counts, hence the cap)."""
        self._rest_until = self.clock() + min(REST_FACTOR * seconds, MOST_REST)

    def _deadline(self) -> float:
        first = self._first if self._first is not None else self._last
        return max(min(self._last + self.quiet, first + self.most), self._rest_until)

    async def _wait_then_run(self) -> None:
        while self._first is not None:
            wait = self._deadline() - self.clock()
            if wait > 0:  # (in short steps: a later removal moves the deadline, and tests move the clock)
                await asyncio.sleep(min(wait, TICK_SECONDS))
                continue
            self._first = None  # a removal finishing from now on starts the next batch
            try:
                await self._run()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the journal keeps the debt; the poll retries it
                log.warning("the owed compaction failed (%s); it stays recorded and is retried", type(exc).__name__)
            return

    async def settle(self) -> None:
        """Wait until the timer has run (tests and shutdown); nothing to wait for when nothing is owed."""
        while self._task is not None and not self._task.done():
            await asyncio.wait({self._task})

    async def close(self) -> None:
        """Stop the timer (the caller compacts what is still owed, or the next start does)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
