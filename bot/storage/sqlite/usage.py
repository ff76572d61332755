"""Token usage counters on SQLite (see :class:`bot.engine.stores.UsageStore`)."""

from __future__ import annotations

import time

from bot.engine.stores import UsageRow
from bot.storage.shielding import shielded
from bot.storage.sqlite.connection import LedgerDb


def today() -> str:
    """Today's UTC date (``YYYY-MM-DD``): the day a usage count belongs to (budgets reset at UTC midnight)."""
    return time.strftime("%Y-%m-%d", time.gmtime())


class SqliteUsage:
    """Calls and tokens per server, person and UTC day, in the ledger file: the daily budgets and ``stats`` read them."""

    def __init__(self, db: LedgerDb) -> None:
        self._db = db

    @shielded
    async def record(self, guild_id: str, user_id: str, prompt_tokens: int, completion_tokens: int) -> None:
        async with self._db.tx() as db:
            await db.execute(
                "INSERT INTO usage (guild_id, user_id, day, calls, prompt_tokens, completion_tokens)"
                " VALUES (?, ?, ?, 1, ?, ?) ON CONFLICT (guild_id, user_id, day) DO UPDATE SET"
                " calls=calls+1, prompt_tokens=prompt_tokens+excluded.prompt_tokens,"
                " completion_tokens=completion_tokens+excluded.completion_tokens",
                (guild_id, user_id, today(), prompt_tokens, completion_tokens),
            )

    async def tokens_today(self, guild_id: str, user_id: str | None = None) -> int:
        sql = "SELECT COALESCE(SUM(prompt_tokens + completion_tokens), 0) FROM usage WHERE guild_id=? AND day=?"
        args: tuple = (guild_id, today())
        if user_id is not None:
            sql += " AND user_id=?"
            args += (user_id,)
        cur = await self._db.conn.execute(sql, args)
        (total,) = await cur.fetchone()
        return int(total)

    @shielded
    async def prune(self, before_day: str) -> int:
        async with self._db.tx() as db:
            cur = await db.execute("DELETE FROM usage WHERE day<?", (before_day,))
            return cur.rowcount

    async def totals(self) -> list[UsageRow]:
        cur = await self._db.conn.execute(
            "SELECT guild_id, user_id, SUM(calls), SUM(prompt_tokens), SUM(completion_tokens) FROM usage"
            " GROUP BY guild_id, user_id ORDER BY SUM(prompt_tokens + completion_tokens) DESC"
        )
        return [UsageRow(*row) for row in await cur.fetchall()]
