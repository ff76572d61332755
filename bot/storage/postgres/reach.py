"""Where a message's text reached, in the shared database (see :class:`bot.engine.stores.MessageReach`)."""

from __future__ import annotations

from typing import Iterable

from bot.storage.postgres.db import PgDb
from bot.storage.shielding import shielded


class PostgresReach:
    """(message, thread) pairs in ``bot_message_reach``; ``since`` from ``bot_meta`` (set by migration 5)."""

    def __init__(self, db: PgDb) -> None:
        self._db = db
        self._since: float | None = None

    @shielded
    async def reached(self, thread_id: str, message_ids: Iterable[str]) -> None:
        rows = [(str(m), str(thread_id)) for m in dict.fromkeys(message_ids) if m]
        if rows:
            async with self._db.connection() as conn:
                async with conn.cursor() as cur:
                    await cur.executemany("INSERT INTO bot_message_reach (message_id, thread_id) VALUES (%s, %s)"
                                          " ON CONFLICT DO NOTHING", rows)

    async def threads_of(self, message_ids: Iterable[str]) -> set[str]:
        ids = sorted({str(m) for m in message_ids})
        if not ids:
            return set()
        async with self._db.connection() as conn:
            cur = await conn.execute("SELECT DISTINCT thread_id FROM bot_message_reach WHERE message_id = ANY(%s)", (ids,))
            return {row["thread_id"] for row in await cur.fetchall()}

    async def since(self) -> float:
        if self._since is None:
            async with self._db.connection() as conn:
                cur = await conn.execute("SELECT value FROM bot_meta WHERE key = 'reach_since'")
                row = await cur.fetchone()
                self._since = float(row["value"]) if row else 0.0
        return self._since

    @shielded
    async def forget(self, message_ids: Iterable[str]) -> None:
        ids = sorted({str(m) for m in message_ids})
        if ids:
            async with self._db.connection() as conn:
                await conn.execute("DELETE FROM bot_message_reach WHERE message_id = ANY(%s)", (ids,))

    @shielded
    async def forget_thread(self, thread_id: str) -> None:
        async with self._db.connection() as conn:
            await conn.execute("DELETE FROM bot_message_reach WHERE thread_id = %s", (str(thread_id),))
