"""Servers the bot was removed from, on PostgreSQL (see :class:`bot.engine.stores.RemovedGuilds`)."""

from __future__ import annotations

from bot.storage.postgres.db import PgDb
from bot.storage.shielding import shielded


class PostgresRemovedGuilds:
    """When the bot was removed from each server, so that server's data is deleted once ``retention.removed_server_days`` have passed."""

    def __init__(self, db: PgDb) -> None:
        self._db = db

    @shielded
    async def mark(self, guild_id: str, removed_at: float) -> None:
        async with self._db.tx() as conn:
            await conn.execute("INSERT INTO bot_removed_guilds (guild_id, removed_at) VALUES (%s, %s)"
                               " ON CONFLICT (guild_id) DO NOTHING", (guild_id, removed_at))

    @shielded
    async def unmark(self, guild_id: str) -> bool:
        async with self._db.tx() as conn:
            cur = await conn.execute("DELETE FROM bot_removed_guilds WHERE guild_id = %s", (guild_id,))
            return cur.rowcount > 0

    async def due(self, removed_before: float) -> list[str]:
        async with self._db.connection() as conn:
            cur = await conn.execute("SELECT guild_id FROM bot_removed_guilds WHERE removed_at <= %s"
                                     " ORDER BY removed_at", (removed_before,))
            return [row["guild_id"] for row in await cur.fetchall()]

    @shielded
    async def done(self, guild_id: str) -> None:
        async with self._db.tx() as conn:
            await conn.execute("DELETE FROM bot_removed_guilds WHERE guild_id = %s", (guild_id,))
