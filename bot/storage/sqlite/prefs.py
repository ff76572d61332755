"""People's memory settings on SQLite, with a write-through cache (one process owns the file)."""

from __future__ import annotations

from bot.engine.stores import PREF_FIELDS, Prefs
from bot.storage.shielding import shielded
from bot.storage.sqlite.connection import LedgerDb

CACHE_LIMIT = 50_000


class SqlitePrefs:
    """Read on every reply, changed rarely: cached in memory, and every change goes through :meth:`set`.

    The cache is safe only because the SQLite backend is one process (see docs/operating.md, "One writer
    per SQLite data directory").
    """

    def __init__(self, db: LedgerDb) -> None:
        self._db = db
        self._cache: dict[str, Prefs] = {}

    async def get(self, user_id: str) -> Prefs:
        cached = self._cache.get(user_id)
        if cached is not None:
            return cached
        prefs = await self._load(user_id)
        if len(self._cache) > CACHE_LIMIT:
            self._cache.clear()
        self._cache[user_id] = prefs
        return prefs

    async def _load(self, user_id: str) -> Prefs:
        cur = await self._db.conn.execute(
            "SELECT paused, private, reactions, dm_in_servers, scope FROM prefs WHERE user_id=?", (user_id,)
        )
        row = await cur.fetchone()
        if row is None:
            return Prefs()
        return Prefs(bool(row[0]), bool(row[1]), bool(row[2]), None if row[3] is None else bool(row[3]), row[4])

    @shielded
    async def set(self, user_id: str, **values: bool | str | None) -> Prefs:
        unknown = set(values) - set(PREF_FIELDS)
        if unknown:
            raise ValueError(f"unknown preference {sorted(unknown)}")
        async with self._db.tx() as db:
            await db.execute("INSERT OR IGNORE INTO prefs (user_id) VALUES (?)", (user_id,))
            for name, value in values.items():  # names come from PREF_FIELDS, never from users
                await db.execute(f"UPDATE prefs SET {name}=? WHERE user_id=?", (value, user_id))
        prefs = await self._load(user_id)
        self._cache[user_id] = prefs
        return prefs
