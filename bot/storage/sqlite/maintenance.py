"""Pruning, erasure and compaction on SQLite, including LangGraph's own checkpoint tables.

Checkpoints and memories live in files that LangGraph's savers own; reaching into their tables is this
backend's business only, so it happens here and nowhere else.
"""

from __future__ import annotations

import aiosqlite
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.store.sqlite.aio import AsyncSqliteStore

from bot.storage.shielding import shielded
from bot.storage.sqlite.connection import LedgerDb

VACUUM_FREE_PAGES = 256


async def _truncate_wal(conn: aiosqlite.Connection) -> None:
    await conn.commit()
    await conn.execute("PRAGMA incremental_vacuum")
    await conn.commit()
    await conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


class SqliteMaintenance:
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
                await conn.execute("PRAGMA incremental_vacuum")
                await conn.commit()

    @shielded
    async def erase_person_rows(self, user_id: str, *, guild_id: str | None = None) -> int:
        async with self._ledger.tx() as db:
            await db.execute("DELETE FROM embeddings WHERE user_id=?", (user_id,))
            if guild_id is None:
                cur = await db.execute("DELETE FROM memory_inbox WHERE user_id=?", (user_id,))
            else:
                cur = await db.execute(
                    "DELETE FROM memory_inbox WHERE user_id=? AND json_extract(origin, '$.guild_id')=?",
                    (user_id, guild_id),
                )
            return cur.rowcount

    async def compact(self) -> None:
        """Flush the write-ahead logs into the databases and truncate them, reclaiming free pages.

        The WAL files still hold page images written before the delete; ``secure_delete`` zeroed the
        pages in the main files.
        """
        async with self._saver.lock:
            await _truncate_wal(self._saver.conn)
        async with self._store.lock:
            await _truncate_wal(self._store.conn)
        async with self._ledger.lock:
            await self._ledger.conn.execute("PRAGMA incremental_vacuum")
            await self._ledger.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
