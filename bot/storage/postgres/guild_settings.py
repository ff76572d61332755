"""Server settings (``/settings``) on PostgreSQL, with LISTEN/NOTIFY so every process drops a stale copy.

The engine caches a server's settings per process (they are read on every message and change rarely).
Every successful write here also sends ``NOTIFY mnemo_guild_settings, '<guild id>'`` in the same
transaction, so it is delivered exactly when the change is committed; each process keeps one dedicated
connection that LISTENs and tells its engine which server changed. If that connection is lost, every
process is told "anything may have changed" (``None``) when it goes and again when it is back, since
notifications sent meanwhile are lost; the engine's ``server_settings.cache_seconds`` bounds what is left.

Writes are compare-and-set on a version number (see ``bot.engine.stores.guild_settings``): two processes
changing one server at once never lose either change.

Wiring (in ``open_postgres``): ``PostgresGuildSettings(db, dsn)``; ``await it.start()`` once the schema is
migrated and ``await it.close()`` before the pool closes. The table is migration ``GUILD_SETTINGS_MIGRATION``.
"""

from __future__ import annotations

import asyncio
import logging

import psycopg

from bot.engine.stores.guild_settings import Notify, ServerSettings
from bot.storage.postgres.db import PgDb, retried
from bot.storage.postgres.locks import keepalive_params

log = logging.getLogger(__name__)

CHANNEL = "mnemo_guild_settings"
GUILD_SETTINGS_MIGRATION = [
    "CREATE TABLE IF NOT EXISTS bot_guild_settings ("
    " guild_id TEXT PRIMARY KEY, version BIGINT NOT NULL, data TEXT NOT NULL,"
    " updated_at DOUBLE PRECISION NOT NULL)",
]
RECONNECT_SECONDS = (0.5, 1.0, 2.0, 5.0, 10.0)


class PostgresGuildSettings:
    """The store, over the backend's pooled connections (``db``), plus one listening connection."""

    def __init__(self, db: PgDb, dsn: str) -> None:
        self._db = db
        self._dsn = dsn
        self._notify: list[Notify] = []
        self._listener: asyncio.Task | None = None
        self.listening = asyncio.Event()  # set while LISTEN is active (tests wait on it)

    @retried
    async def get(self, guild_id: str) -> ServerSettings | None:
        async with self._db.connection() as conn:
            cur = await conn.execute("SELECT version, data FROM bot_guild_settings WHERE guild_id = %s", (guild_id,))
            row = await cur.fetchone()
        return None if row is None else ServerSettings.from_json(guild_id, int(row["version"]), row["data"])

    async def put(self, settings: ServerSettings, *, replaces: int) -> bool:
        async with self._db.tx() as conn:
            if replaces == 0:
                cur = await conn.execute(
                    "INSERT INTO bot_guild_settings (guild_id, version, data, updated_at) VALUES (%s, %s, %s, %s)"
                    " ON CONFLICT (guild_id) DO NOTHING",
                    (settings.guild_id, settings.version, settings.to_json(), settings.updated_at))
            else:
                cur = await conn.execute(
                    "UPDATE bot_guild_settings SET version = %s, data = %s, updated_at = %s"
                    " WHERE guild_id = %s AND version = %s",
                    (settings.version, settings.to_json(), settings.updated_at, settings.guild_id, replaces))
            if cur.rowcount != 1:
                return False
            await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, settings.guild_id))
        return True

    async def delete(self, guild_id: str) -> bool:
        async with self._db.tx() as conn:
            cur = await conn.execute("DELETE FROM bot_guild_settings WHERE guild_id = %s", (guild_id,))
            if cur.rowcount == 0:
                return False
            await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, guild_id))
        return True

    async def count(self) -> int:
        async with self._db.connection() as conn:
            row = await (await conn.execute("SELECT COUNT(*) AS n FROM bot_guild_settings")).fetchone()
        return int(row["n"])

    def subscribe(self, notify: Notify) -> None:
        self._notify.append(notify)

    def _deliver(self, guild_id: str | None) -> None:
        for notify in self._notify:
            try:
                notify(guild_id)
            except Exception:  # noqa: BLE001 - one bad subscriber must not stop the others
                log.exception("a server-settings change notification failed")

    async def start(self) -> None:
        """Start listening (returns once LISTEN is active, or after the first failed attempt)."""
        if self._listener is None:
            self._listener = asyncio.create_task(self._listen(), name="guild-settings-listener")
            done = asyncio.ensure_future(self.listening.wait())
            await asyncio.wait({done, self._listener}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
            done.cancel()

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            try:
                await self._listener
            except asyncio.CancelledError:
                pass
            self._listener = None

    async def _listen(self) -> None:
        attempt = 0
        while True:
            try:
                # TCP keepalives, as the lock connection has: after a silent network drop (a failover, a NAT
                # entry gone) ``notifies()`` would otherwise wait forever, "listening", while the other
                # processes' /settings changes never arrived (the error now ends it: reconnected below).
                conn = await psycopg.AsyncConnection.connect(self._dsn, autocommit=True,
                                                             **keepalive_params(self._dsn, server=False))
                try:
                    await conn.execute(f"LISTEN {CHANNEL}")  # a constant identifier
                    if attempt:
                        log.info("listening for server-settings changes again")
                        self._deliver(None)  # whatever was sent while we were away is lost: drop everything
                    attempt = 0
                    self.listening.set()
                    async for note in conn.notifies():
                        self._deliver(note.payload or None)
                finally:
                    self.listening.clear()
                    await conn.close()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the database went away: say so once, retry
                outages = getattr(self._db, "outages", None)  # the backend's one line per outage, if it has one
                if outages is not None and isinstance(exc, psycopg.OperationalError):
                    outages.down(exc)
                    log.debug("lost the server-settings change listener (%r); retrying", exc)
                elif attempt == 0:
                    log.warning("lost the server-settings change listener (%s); retrying",
                                str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
                self._deliver(None)
            await asyncio.sleep(RECONNECT_SECONDS[min(attempt, len(RECONNECT_SECONDS) - 1)])
            attempt += 1
