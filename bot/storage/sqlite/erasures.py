"""The erasure journal on SQLite (see :class:`bot.engine.stores.ErasureJournal`)."""

from __future__ import annotations

import time

from bot.engine.stores import ErasureJob
from bot.engine.stores.erasures import OWED_COMPACTION as OWED
from bot.storage.shielding import shielded
from bot.storage.sqlite.connection import LedgerDb


class SqliteErasures:
    """The erasure journal in the ledger file: written before an erasure starts, deleted once it is done."""

    def __init__(self, db: LedgerDb) -> None:
        self._db = db

    @shielded
    async def begin(self, *, kind: str, user_id: str, guild_id: str | None = None, actor: str | None = None,
                    actor_id: str | None = None, quotes: bytes | None = None, subject: str | None = None) -> int:
        async with self._db.tx() as db:
            cur = await db.execute(
                "INSERT INTO erasures (kind, user_id, guild_id, actor, actor_id, quotes, requested, subject)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (kind, user_id, guild_id, actor, actor_id, quotes, time.time(), subject),
            )
            return int(cur.lastrowid)

    @shielded
    async def set_quotes(self, job_id: int, quotes: bytes) -> None:
        async with self._db.tx() as db:
            await db.execute("UPDATE erasures SET quotes=? WHERE id=?", (quotes, job_id))

    async def unfinished(self) -> list[ErasureJob]:
        cur = await self._db.conn.execute(
            "SELECT id, kind, user_id, guild_id, actor, actor_id, quotes, requested, subject FROM erasures"
            " WHERE kind <> ? ORDER BY id", (OWED,)
        )
        return [ErasureJob(*row) for row in await cur.fetchall()]

    @shielded
    async def owe_compaction(self) -> None:
        async with self._db.tx() as db:
            await db.execute("INSERT INTO erasures (kind, user_id, requested) VALUES (?, '', ?)", (OWED, time.time()))

    async def owed_mark(self) -> int:
        cur = await self._db.conn.execute("SELECT COALESCE(MAX(id), 0) FROM erasures WHERE kind = ?", (OWED,))
        (mark,) = await cur.fetchone()
        return int(mark)

    async def compaction_owed(self) -> float | None:
        cur = await self._db.conn.execute("SELECT MIN(requested) FROM erasures WHERE kind = ?", (OWED,))
        (since,) = await cur.fetchone()
        return since

    @shielded
    async def compaction_paid(self, up_to: int) -> None:
        async with self._db.tx() as db:
            await db.execute("DELETE FROM erasures WHERE kind = ? AND id <= ?", (OWED, up_to))

    @shielded
    async def finish(self, job_id: int) -> None:
        async with self._db.tx() as db:
            await db.execute("DELETE FROM erasures WHERE id=?", (job_id,))
