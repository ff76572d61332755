"""Servers the bot was removed from, on SQLite (see :class:`bot.engine.stores.RemovedGuilds`)."""

from __future__ import annotations

from bot.storage.shielding import shielded
from bot.storage.sqlite.connection import LedgerDb


class SqliteRemovedGuilds:
    """When the bot was removed from each server, so that server's data is deleted once ``retention.removed_server_days`` have passed."""

    def __init__(self, db: LedgerDb) -> None:
        self._db = db

    @shielded
    async def mark(self, guild_id: str, removed_at: float) -> None:
        async with self._db.tx() as db:
            await db.execute(
                "INSERT OR IGNORE INTO removed_guilds (guild_id, removed_at) VALUES (?, ?)", (guild_id, removed_at)
            )

    @shielded
    async def unmark(self, guild_id: str) -> bool:
        async with self._db.tx() as db:
            cur = await db.execute("DELETE FROM removed_guilds WHERE guild_id=?", (guild_id,))
            return cur.rowcount > 0

    async def due(self, removed_before: float) -> list[str]:
        cur = await self._db.conn.execute(
            "SELECT guild_id FROM removed_guilds WHERE removed_at<=? ORDER BY removed_at", (removed_before,)
        )
        return [row[0] for row in await cur.fetchall()]

    @shielded
    async def done(self, guild_id: str) -> None:
        async with self._db.tx() as db:
            await db.execute("DELETE FROM removed_guilds WHERE guild_id=?", (guild_id,))
