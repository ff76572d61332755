"""People's memory settings on PostgreSQL: read through on every call, never cached.

Several processes share the database, so a pause or private-mode switch made through one of them must
hold at once in all the others: every read goes to the table (one indexed lookup per reply).
"""

from __future__ import annotations

from psycopg import sql

from bot.engine.stores import PREF_FIELDS, Prefs
from bot.storage.postgres.db import PgDb, retried
from bot.storage.shielding import shielded


_COLS = "paused, private, reactions, dm_in_servers, scope"


def _prefs(row: dict | None) -> Prefs:
    if row is None:
        return Prefs()
    return Prefs(row["paused"], row["private"], row["reactions"], row["dm_in_servers"], row["scope"])


class PostgresPrefs:
    """People's memory settings, one row a person; every read goes to the table (see the module docstring)."""

    def __init__(self, db: PgDb) -> None:
        self._db = db

    @retried
    async def get(self, user_id: str) -> Prefs:
        async with self._db.connection() as conn:
            cur = await conn.execute(
                f"SELECT {_COLS} FROM bot_prefs WHERE user_id = %s", (user_id,))
            return _prefs(await cur.fetchone())

    @shielded
    async def set(self, user_id: str, **values: bool | str | None) -> Prefs:
        unknown = set(values) - set(PREF_FIELDS)
        if unknown:
            raise ValueError(f"unknown preference {sorted(unknown)}")
        names = list(values)  # from PREF_FIELDS, never from users; quoted as identifiers anyway
        if names:
            query = sql.SQL(
                "INSERT INTO bot_prefs (user_id, {cols}) VALUES (%s, {vals}) ON CONFLICT (user_id) DO UPDATE SET {sets}"
                " RETURNING " + _COLS
            ).format(
                cols=sql.SQL(", ").join(map(sql.Identifier, names)),
                vals=sql.SQL(", ").join(sql.Placeholder() * len(names)),
                sets=sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(n)) for n in names),
            )
            params = (user_id, *values.values())
        else:
            query = sql.SQL(
                "INSERT INTO bot_prefs (user_id) VALUES (%s) ON CONFLICT (user_id) DO UPDATE SET user_id = EXCLUDED.user_id"
                " RETURNING " + _COLS)
            params = (user_id,)
        async with self._db.connection() as conn:
            cur = await conn.execute(query, params)
            return _prefs(await cur.fetchone())
