"""Server settings (``/settings``) on SQLite: one row per server, the values as JSON, a version number.

One process owns the SQLite files, so every change goes through this process's engine, which drops its
cached copy itself: ``subscribe`` has nothing to deliver here.
"""

from __future__ import annotations

from bot.engine.stores.guild_settings import Notify, ServerSettings
from bot.storage.shielding import shielded
from bot.storage.sqlite.connection import LedgerDb


class SqliteGuildSettings:
    """Server settings in the ledger file; ``put`` is a compare-and-set on ``version`` (a stale write is refused)."""

    def __init__(self, db: LedgerDb) -> None:
        self._db = db

    async def get(self, guild_id: str) -> ServerSettings | None:
        cur = await self._db.conn.execute("SELECT version, data FROM guild_settings WHERE guild_id=?", (guild_id,))
        row = await cur.fetchone()
        return None if row is None else ServerSettings.from_json(guild_id, row[0], row[1])

    @shielded
    async def put(self, settings: ServerSettings, *, replaces: int) -> bool:
        async with self._db.tx() as db:
            if replaces == 0:
                cur = await db.execute(
                    "INSERT OR IGNORE INTO guild_settings (guild_id, version, data, updated_at) VALUES (?, ?, ?, ?)",
                    (settings.guild_id, settings.version, settings.to_json(), settings.updated_at),
                )
            else:
                cur = await db.execute(
                    "UPDATE guild_settings SET version=?, data=?, updated_at=? WHERE guild_id=? AND version=?",
                    (settings.version, settings.to_json(), settings.updated_at, settings.guild_id, replaces),
                )
            return cur.rowcount == 1

    @shielded
    async def delete(self, guild_id: str) -> bool:
        async with self._db.tx() as db:
            cur = await db.execute("DELETE FROM guild_settings WHERE guild_id=?", (guild_id,))
            return cur.rowcount > 0

    async def count(self) -> int:
        cur = await self._db.conn.execute("SELECT COUNT(*) FROM guild_settings")
        (n,) = await cur.fetchone()
        return int(n)

    def subscribe(self, notify: Notify) -> None:
        """Nothing to deliver: one process, and it invalidates its own cache on every change."""
