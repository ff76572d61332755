"""Where a message's text reached, in the ledger file (see :class:`bot.engine.stores.MessageReach`)."""

from __future__ import annotations

from typing import Iterable

from bot.storage.shielding import shielded
from bot.storage.sqlite.connection import LedgerDb


class SqliteReach:
    """(message, thread) pairs in ``message_reach``; ``since`` read once from ``meta`` (set at setup)."""

    def __init__(self, db: LedgerDb, since: float) -> None:
        self._db = db
        self._since = since

    @shielded
    async def reached(self, thread_id: str, message_ids: Iterable[str]) -> None:
        rows = [(str(m), str(thread_id)) for m in dict.fromkeys(message_ids) if m]
        if rows:
            async with self._db.tx() as db:
                await db.executemany("INSERT OR IGNORE INTO message_reach (message_id, thread_id) VALUES (?, ?)", rows)

    async def threads_of(self, message_ids: Iterable[str]) -> set[str]:
        ids = sorted({str(m) for m in message_ids})
        if not ids:
            return set()
        marks = ",".join("?" * len(ids))
        cur = await self._db.conn.execute(f"SELECT DISTINCT thread_id FROM message_reach WHERE message_id IN ({marks})", ids)
        return {row[0] for row in await cur.fetchall()}

    async def since(self) -> float:
        return self._since

    @shielded
    async def forget(self, message_ids: Iterable[str]) -> None:
        ids = [(str(m),) for m in set(message_ids)]
        if ids:
            async with self._db.tx() as db:
                await db.executemany("DELETE FROM message_reach WHERE message_id=?", ids)

    @shielded
    async def forget_thread(self, thread_id: str) -> None:
        async with self._db.tx() as db:
            await db.execute("DELETE FROM message_reach WHERE thread_id=?", (str(thread_id),))
