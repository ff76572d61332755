"""Token usage counters on PostgreSQL (see :class:`bot.engine.stores.UsageStore`)."""

from __future__ import annotations

import time

from bot.engine.stores import UsageRow
from bot.storage.postgres.db import PgDb, retried
from bot.storage.shielding import shielded


def today() -> str:
    """Today's UTC date (``YYYY-MM-DD``): the day a usage count belongs to (budgets reset at UTC midnight)."""
    return time.strftime("%Y-%m-%d", time.gmtime())


class PostgresUsage:
    """Calls and tokens per server, person and UTC day, in the shared database: the daily budgets and ``stats`` read them."""

    def __init__(self, db: PgDb) -> None:
        self._db = db

    @shielded
    @retried  # a commit whose answer was lost is counted twice: a budget errs towards spent
    async def record(self, guild_id: str, user_id: str, prompt_tokens: int, completion_tokens: int) -> None:
        async with self._db.connection() as conn:
            await conn.execute(
                "INSERT INTO bot_usage (guild_id, user_id, day, calls, prompt_tokens, completion_tokens)"
                " VALUES (%s, %s, %s, 1, %s, %s) ON CONFLICT (guild_id, user_id, day) DO UPDATE SET"
                " calls = bot_usage.calls + 1, prompt_tokens = bot_usage.prompt_tokens + EXCLUDED.prompt_tokens,"
                " completion_tokens = bot_usage.completion_tokens + EXCLUDED.completion_tokens",
                (guild_id, user_id, today(), prompt_tokens, completion_tokens),
            )

    @retried
    async def tokens_today(self, guild_id: str, user_id: str | None = None) -> int:
        query = ("SELECT COALESCE(SUM(prompt_tokens + completion_tokens), 0) AS n FROM bot_usage"
                 " WHERE guild_id = %s AND day = %s")
        args: tuple = (guild_id, today())
        if user_id is not None:
            query += " AND user_id = %s"
            args += (user_id,)
        async with self._db.connection() as conn:
            return int((await (await conn.execute(query, args)).fetchone())["n"])

    @shielded
    async def prune(self, before_day: str) -> int:
        async with self._db.connection() as conn:
            return (await conn.execute("DELETE FROM bot_usage WHERE day < %s", (before_day,))).rowcount

    async def totals(self) -> list[UsageRow]:
        async with self._db.connection() as conn:
            cur = await conn.execute(
                "SELECT guild_id, user_id, SUM(calls) AS c, SUM(prompt_tokens) AS p, SUM(completion_tokens) AS o"
                " FROM bot_usage GROUP BY guild_id, user_id ORDER BY SUM(prompt_tokens + completion_tokens) DESC"
            )
            return [UsageRow(r["guild_id"], r["user_id"], int(r["c"]), int(r["p"]), int(r["o"]))
                    for r in await cur.fetchall()]
