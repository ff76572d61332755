"""Pruning, erasure and compaction on SQLite, including LangGraph's own checkpoint tables.

Checkpoints and memories live in files that LangGraph's savers own; reaching into their tables is this
backend's business only, so it happens here and nowhere else.
"""

from __future__ import annotations

import asyncio
import sqlite3

import aiosqlite
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.store.sqlite.aio import AsyncSqliteStore

from bot.storage.shielding import shielded
from bot.storage.sqlite.connection import LedgerDb

VACUUM_FREE_PAGES = 256


TRUNCATE_ATTEMPTS = 8
CHECKPOINT_BUSY_MS = 1000  # each attempt waits this long for readers (the connection's usual wait is 30 s)
BUSY_MS = 30000  # as set in connection.connect


class CompactionIncomplete(RuntimeError):
    """A write-ahead log could not be truncated (another connection kept reading): erased pages may remain."""


async def vacuum_free_pages(conn: aiosqlite.Connection) -> None:
    """Give every free page back to the file system (``auto_vacuum=INCREMENTAL``).

    ``PRAGMA incremental_vacuum`` frees one page per step of its statement, and Python's ``execute`` steps
    a statement without result columns only once: 300 free pages became 299. ``executescript`` runs it to
    the end (it commits first: callers have committed already).
    """
    await conn.executescript("PRAGMA incremental_vacuum;")


async def compact_file(conn: aiosqlite.Connection, name: str, *, commit: bool) -> None:
    """Rebuild one file and empty its WAL (checkpoint-and-truncate), retrying while a reader blocks it;
    raise if it never works.

    ``secure_delete`` zeroes deleted cells and free pages, but not the unused gap inside a live page, where
    SQLite's page rebuilds leave stale copies of cells moved earlier: a deleted row's bytes can survive
    there. ``VACUUM`` writes every live row into fresh pages, so nothing deleted is left in the main file;
    its cost grows with the file, which is why small removals batch their compaction (``erasure/compaction``).
    ``wal_checkpoint(TRUNCATE)`` answers ``(busy, wal pages, checkpointed pages)``: busy 1 means a reader
    (another process: a shell command) holds an old snapshot and the log was not emptied. The result is
    checked, the step retried with a growing pause, and a failure raised, so an erasure is never
    reported done while its text may still be in a ``-wal`` file (the journal keeps it for a retry).
    """
    rebuilt = False
    for attempt in range(TRUNCATE_ATTEMPTS):
        try:
            if commit:
                await conn.commit()
            if not rebuilt:  # once: a retry waits for a reader, and each rebuild writes the whole file again
                await conn.execute("VACUUM")
                rebuilt = True
            await conn.execute(f"PRAGMA busy_timeout={CHECKPOINT_BUSY_MS}")
            try:
                async with conn.execute("PRAGMA wal_checkpoint(TRUNCATE)") as cur:
                    busy, pages, _ = await cur.fetchone()
            finally:
                await conn.execute(f"PRAGMA busy_timeout={BUSY_MS}")
            if busy == 0 and pages in (0, -1):  # -1: not in WAL mode (nothing to truncate)
                return
        except sqlite3.OperationalError as exc:
            # "database table is locked", "cannot VACUUM - SQL statements in progress": a statement of this
            # connection not yet finalized (a cursor the garbage collector has not reached). It is gone after
            # a moment, so this is retried too.
            if "locked" not in str(exc) and "in progress" not in str(exc):
                raise
        await asyncio.sleep(min(2.0, 0.05 * 2**attempt))
    raise CompactionIncomplete(f"the write-ahead log of {name} could not be truncated (a reader kept it busy)")


class SqliteMaintenance:
    """Pruning checkpoints, erasing a person's ledger rows, and compaction: every file's write-ahead log emptied."""

    def __init__(self, saver: AsyncSqliteSaver, store: AsyncSqliteStore, ledger: LedgerDb) -> None:
        self._saver = saver
        self._store = store
        self._ledger = ledger

    async def prune_thread(self, thread_id: str) -> None:
        """Keep only a thread's latest checkpoint and its writes; reclaim free pages now and then.

        Nothing reads old checkpoints (no time travel, no human-in-the-loop resume), and every checkpoint
        holds the whole state, so without this the file grows with every turn forever. Checkpoint IDs are
        time-ordered, so the latest is the maximum. Free pages go back to the file system through
        incremental vacuum once enough have piled up, so one thread's footprint stops growing.
        """
        async with self._saver.lock:
            conn = self._saver.conn
            cur = await conn.execute(
                "SELECT MAX(checkpoint_id) FROM checkpoints WHERE thread_id=? AND checkpoint_ns=''", (thread_id,)
            )
            row = await cur.fetchone()
            if not row or row[0] is None:
                return
            latest = row[0]
            await conn.execute("DELETE FROM checkpoints WHERE thread_id=? AND checkpoint_id<>?", (thread_id, latest))
            await conn.execute("DELETE FROM writes WHERE thread_id=? AND checkpoint_id<>?", (thread_id, latest))
            await conn.commit()
            cur = await conn.execute("PRAGMA freelist_count")
            (free,) = await cur.fetchone()
            if free >= VACUUM_FREE_PAGES:
                await vacuum_free_pages(conn)
                await conn.commit()

    async def conversations_named(self, prefix: str) -> list[str]:
        async with self._saver.lock:
            cur = await self._saver.conn.execute(
                "SELECT DISTINCT thread_id FROM checkpoints WHERE substr(thread_id, 1, ?) = ?", (len(prefix), prefix))
            return sorted(str(row[0]) for row in await cur.fetchall())

    @shielded
    async def erase_person_rows(self, user_id: str, *, guild_id: str | None = None) -> int:
        async with self._ledger.tx() as db:
            await db.execute("DELETE FROM embeddings WHERE user_id=?", (user_id,))
            # Every row goes (turns kept as context too); what is counted is the pending ones, as promised.
            where, args = "user_id=?", (user_id,)
            if guild_id is not None:
                where, args = "user_id=? AND json_extract(origin, '$.guild_id')=?", (user_id, guild_id)
            cur = await db.execute(f"SELECT COUNT(*) FROM memory_inbox WHERE {where} AND extracted=0", args)
            (pending,) = await cur.fetchone()
            await db.execute(f"DELETE FROM memory_inbox WHERE {where}", args)
            return int(pending)

    async def compact(self) -> dict[str, int]:
        """Rebuild each file and truncate its write-ahead log (see :func:`compact_file`).

        The WAL files still hold page images written before the delete, and live pages may hold stale
        copies of deleted rows; both are gone after this. Nothing is ever held back here (one process owns
        the files): returns {}.
        """
        async with self._saver.lock:
            await compact_file(self._saver.conn, "conversations", commit=True)
        async with self._store.lock:
            await compact_file(self._store.conn, "memories", commit=True)
        async with self._ledger.lock:
            await compact_file(self._ledger.conn, "the ledger", commit=False)
        return {}
