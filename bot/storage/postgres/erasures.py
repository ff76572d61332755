"""The erasure journal on PostgreSQL (see :class:`bot.engine.stores.ErasureJournal`).

Shared by every process on the database: an erasure one process recorded and did not finish (it died)
is found by ``unfinished()`` in the others' next start, and by the same process on restart.
"""

from __future__ import annotations

import time

from bot.engine.stores import ErasureJob
from bot.engine.stores.erasures import OWED_COMPACTION as OWED
from bot.storage.postgres.db import PgDb
from bot.storage.shielding import shielded

_COLS = "id, kind, user_id, guild_id, actor, actor_id, quotes, requested, subject"


def _job(row: dict) -> ErasureJob:
    quotes = row["quotes"]
    return ErasureJob(int(row["id"]), row["kind"], row["user_id"], row["guild_id"], row["actor"], row["actor_id"],
                      None if quotes is None else bytes(quotes), row["requested"], row["subject"])


class PostgresErasures:
    """The erasure journal in the shared database: written before an erasure starts, deleted once it is done."""

    def __init__(self, db: PgDb) -> None:
        self._db = db

    @shielded
    async def begin(self, *, kind: str, user_id: str, guild_id: str | None = None, actor: str | None = None,
                    actor_id: str | None = None, quotes: bytes | None = None, subject: str | None = None) -> int:
        async with self._db.connection() as conn:
            cur = await conn.execute(
                "INSERT INTO bot_erasures (kind, user_id, guild_id, actor, actor_id, quotes, requested, subject)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
                (kind, user_id, guild_id, actor, actor_id, quotes, time.time(), subject),
            )
            return int((await cur.fetchone())["id"])

    @shielded
    async def set_quotes(self, job_id: int, quotes: bytes) -> None:
        async with self._db.connection() as conn:
            await conn.execute("UPDATE bot_erasures SET quotes = %s WHERE id = %s", (quotes, job_id))

    async def unfinished(self) -> list[ErasureJob]:
        async with self._db.connection() as conn:
            cur = await conn.execute(f"SELECT {_COLS} FROM bot_erasures WHERE kind <> %s ORDER BY id", (OWED,))
            return [_job(r) for r in await cur.fetchall()]

    @shielded
    async def owe_compaction(self) -> None:
        async with self._db.connection() as conn:
            await conn.execute("INSERT INTO bot_erasures (kind, user_id, requested) VALUES (%s, '', %s)",
                               (OWED, time.time()))

    async def owed_mark(self) -> int:
        async with self._db.connection() as conn:
            cur = await conn.execute("SELECT COALESCE(MAX(id), 0) AS mark FROM bot_erasures WHERE kind = %s", (OWED,))
            return int((await cur.fetchone())["mark"])

    async def compaction_owed(self) -> float | None:
        async with self._db.connection() as conn:
            cur = await conn.execute("SELECT MIN(requested) AS since FROM bot_erasures WHERE kind = %s", (OWED,))
            return (await cur.fetchone())["since"]

    @shielded
    async def compaction_paid(self, up_to: int) -> None:
        async with self._db.connection() as conn:
            await conn.execute("DELETE FROM bot_erasures WHERE kind = %s AND id <= %s", (OWED, up_to))

    @shielded
    async def finish(self, job_id: int) -> None:
        async with self._db.connection() as conn:
            await conn.execute("DELETE FROM bot_erasures WHERE id = %s", (job_id,))
