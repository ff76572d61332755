"""The server backend: LangGraph's ``AsyncPostgresSaver`` and ``AsyncPostgresStore`` plus the bot's own
tables, all on one ``psycopg_pool.AsyncConnectionPool``; several bot processes may share the database.

The connection string comes only from ``DATABASE_URL`` (``settings.secrets.database_url``); pool sizes
from ``[storage]``. At start-up: one test connection (a wrong DSN or a refused connection stops with one
line), then the pool, then every migration (``migrations.py``).
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import AsyncIterator

import psycopg
from psycopg_pool import PoolTimeout

from bot.engine.stores import StorageUnavailable
from bot.settings import Settings
from bot.storage.bundle import OpenStorage
from bot.storage.postgres.connection import POOL_LOGGER, PSYCOPG_LOGGER, Outages, check_reachable, describe, first_line, make_pool, secrets
from bot.storage.postgres.db import PgDb
from bot.storage.postgres.erasures import PostgresErasures
from bot.storage.postgres.reach import PostgresReach
from bot.storage.postgres.guild_settings import PostgresGuildSettings
from bot.storage.postgres.inbox import PostgresInbox
from bot.storage.postgres.locks import PostgresLocks
from bot.storage.postgres.maintenance import PostgresMaintenance
from bot.storage.postgres.migrations import migrate
from bot.storage.shielding import to_the_end
from bot.storage.postgres.prefs import PostgresPrefs
from bot.storage.postgres.removed_guilds import PostgresRemovedGuilds
from bot.storage.postgres.saver import NulFreePostgresSaver
from bot.storage.postgres.scope import PostgresScopes
from bot.storage.postgres.store import TransactionalPostgresStore
from bot.storage.postgres.usage import PostgresUsage
from bot.storage.postgres.vectors import PostgresVectors

log = logging.getLogger(__name__)

#: An outage or a pool with no free connection: the request fails, the work stays for a retry.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout)


@asynccontextmanager
async def open_postgres(settings: Settings) -> AsyncIterator[OpenStorage]:
    """Connect, migrate, and hand out the stores; close the pool on exit, even after an error."""
    if settings.secrets.database_url is None:  # load_settings refuses this earlier; tests build settings directly
        raise StorageUnavailable("missing secret 'DATABASE_URL': set it in the environment")
    dsn = settings.secrets.database_url.get_secret_value()
    config = settings.storage
    await check_reachable(dsn, config.pool_timeout_seconds)
    outages = Outages(describe(dsn), secrets(dsn))
    # The pool's logger and psycopg's own (a pipeline that cannot end on a broken connection says so there):
    # outage symptoms become the one outage line.
    watched = [logging.getLogger(POOL_LOGGER), logging.getLogger(PSYCOPG_LOGGER)]
    for logger in watched:
        logger.addFilter(outages.filter)
    pool = make_pool(dsn, config, outages)
    try:
        try:
            await pool.open(wait=True, timeout=config.pool_timeout_seconds)
        except PoolTimeout as exc:
            raise StorageUnavailable(f"cannot open a connection pool to PostgreSQL at {describe(dsn)}: "
                                     f"{first_line(exc)}") from None
        saver = NulFreePostgresSaver(pool, outages)
        store = TransactionalPostgresStore(pool, outages)
        async with pool.connection() as conn:
            # to its end even if start-up is cancelled: a CREATE INDEX CONCURRENTLY cut off leaves an invalid
            # index (rebuilt at the next start, see migrations) and LangGraph's own steps half-recorded
            try:
                epoch = await to_the_end(migrate(conn, saver, store))
            except psycopg.Error as exc:  # a role that may not create tables, a lost connection: one line
                raise StorageUnavailable(f"cannot prepare the tables in PostgreSQL at {describe(dsn)}: "
                                         f"{first_line(exc, secrets(dsn))}") from None
        db = PgDb(pool, outages)
        guild_settings = PostgresGuildSettings(db, dsn)
        await guild_settings.start()  # its LISTEN connection: other processes' /settings changes
        locks = PostgresLocks(db, dsn, config.claim_lease_seconds)
        log.info("storage open on PostgreSQL at %s", describe(dsn))
        try:
            yield OpenStorage(
                backend="postgres",
                checkpointer=saver,
                store=store,
                inbox=PostgresInbox(db, epoch),
                prefs=PostgresPrefs(db),
                usage=PostgresUsage(db),
                vectors=PostgresVectors(db),
                maintenance=PostgresMaintenance(saver, db),
                guild_settings=guild_settings,
                erasures=PostgresErasures(db),
                reach=PostgresReach(db),
                removed_guilds=PostgresRemovedGuilds(db),
                locks=locks,
                transient_errors=TRANSIENT_ERRORS,
                scopes=PostgresScopes(pool),
                checkouts=lambda: int(pool.get_stats().get("requests_num", 0)),
            )
        finally:
            await locks.close()
            await guild_settings.close()
    finally:
        try:
            await pool.close()
        finally:
            for logger in watched:
                logger.removeFilter(outages.filter)
        log.info("storage closed")
