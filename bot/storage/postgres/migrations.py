"""The bot's own schema on PostgreSQL, and every ``setup()`` run at start-up, safely and once.

Migrations run on an autocommit connection, one statement at a time (``CREATE INDEX CONCURRENTLY``
cannot run inside a transaction), and every statement is idempotent, so a start-up that dies half-way
simply runs again. Processes starting together take turns through an advisory lock. A database whose
schema is newer than this code knows is refused with one line rather than written to.

To change the schema, append a new list of statements to ``MIGRATIONS``; never edit a released one.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid

import psycopg
from psycopg import sql as pgsql
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.postgres.base import BasePostgresSaver
from langgraph.store.postgres.aio import AsyncPostgresStore
from langgraph.store.postgres.base import BasePostgresStore

from bot.engine.stores import StorageUnavailable
from bot.storage.postgres.guild_settings import GUILD_SETTINGS_MIGRATION

log = logging.getLogger(__name__)

MIGRATION_LOCK = 0x6D6E656D6F  # "mnemo": the advisory lock processes take turns on while migrating
MIGRATION_POLL_SECONDS = 0.1

MIGRATIONS: list[list[str]] = [
    [  # 1: the tables of the SQLite ledger, one-to-one
        "CREATE TABLE IF NOT EXISTS bot_inbox ("
        " id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
        " thread_id TEXT NOT NULL, user_id TEXT NOT NULL, author TEXT NOT NULL,"
        " human TEXT NOT NULL, ai TEXT NOT NULL, origin JSONB NOT NULL,"
        " created DOUBLE PRECISION NOT NULL, extracted BOOLEAN NOT NULL DEFAULT FALSE)",
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS bot_inbox_pending ON bot_inbox (user_id, thread_id) WHERE NOT extracted",
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS bot_inbox_thread ON bot_inbox (thread_id, id)",
        "CREATE TABLE IF NOT EXISTS bot_prefs ("
        " user_id TEXT PRIMARY KEY, paused BOOLEAN NOT NULL DEFAULT FALSE, private BOOLEAN NOT NULL DEFAULT FALSE,"
        " reactions BOOLEAN NOT NULL DEFAULT TRUE, dm_in_servers BOOLEAN, scope TEXT)",
        "CREATE TABLE IF NOT EXISTS bot_embeddings ("
        " user_id TEXT NOT NULL, memory_key TEXT NOT NULL, digest TEXT NOT NULL, vector BYTEA NOT NULL,"
        " PRIMARY KEY (user_id, memory_key))",
        "CREATE TABLE IF NOT EXISTS bot_usage ("
        " guild_id TEXT NOT NULL, user_id TEXT NOT NULL, day TEXT NOT NULL, calls BIGINT NOT NULL DEFAULT 0,"
        " prompt_tokens BIGINT NOT NULL DEFAULT 0, completion_tokens BIGINT NOT NULL DEFAULT 0,"
        " PRIMARY KEY (guild_id, user_id, day))",
        # The daily-budget query asks for one server's day (and pruning for old days).
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS bot_usage_guild_day ON bot_usage (guild_id, day)",
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS bot_usage_day ON bot_usage (day)",
        # Erasures in progress (bot.engine.stores.erasures): no text, only keyed hashes of the erased words.
        "CREATE TABLE IF NOT EXISTS bot_erasures ("
        " id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, kind TEXT NOT NULL, user_id TEXT NOT NULL,"
        " guild_id TEXT, actor TEXT, actor_id TEXT, quotes BYTEA, requested DOUBLE PRECISION NOT NULL)",
        *GUILD_SETTINGS_MIGRATION,
        # Claims on people across processes (bot/storage/postgres/locks.py): who, and until when.
        "CREATE TABLE IF NOT EXISTS bot_claims ("
        " user_id TEXT PRIMARY KEY, owner TEXT NOT NULL, kind TEXT NOT NULL, lease_until TIMESTAMPTZ NOT NULL)",
    ],
    [  # 2: servers the bot was removed from, until their data is swept (bot.engine.stores.removed_guilds)
        "CREATE TABLE IF NOT EXISTS bot_removed_guilds (guild_id TEXT PRIMARY KEY, removed_at DOUBLE PRECISION NOT NULL)",
        # Edits and deletions find a message's queued turns by its Discord ID.
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS bot_inbox_message ON bot_inbox ((origin->>'message_id'))",
    ],
    [  # 3: deleted messages, threads and servers are journaled too: what they are about, as IDs only
        "ALTER TABLE bot_erasures ADD COLUMN IF NOT EXISTS subject TEXT",
    ],
    [  # 4: which embedder made each memory vector ('' for older rows: made again, bot.engine.stores.vectors)
        "ALTER TABLE bot_embeddings ADD COLUMN IF NOT EXISTS embedder TEXT NOT NULL DEFAULT ''",
    ],
    [  # 5: where a message's text reached (bot.engine.stores.reach), IDs only; complete from 'reach_since'
        "CREATE TABLE IF NOT EXISTS bot_message_reach (message_id TEXT NOT NULL, thread_id TEXT NOT NULL,"
        " PRIMARY KEY (message_id, thread_id))",
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS bot_message_reach_thread ON bot_message_reach (thread_id)",
        # A database in use before (its epoch exists) may hold reaches nobody recorded: complete only from now on.
        "INSERT INTO bot_meta (key, value) SELECT 'reach_since', CASE WHEN EXISTS (SELECT 1 FROM bot_meta WHERE key = 'epoch')"
        " THEN extract(epoch FROM now())::text ELSE '0' END ON CONFLICT (key) DO NOTHING",
    ],
    [  # 6: the index also records where memories shown in a prompt carried their source messages' words
        # (bot.engine.stores.reach.ShownSources): a database in use before is complete only from now on.
        "UPDATE bot_meta SET value = extract(epoch FROM now())::text WHERE key = 'reach_since'"
        " AND EXISTS (SELECT 1 FROM bot_meta WHERE key = 'epoch')",
    ],
]
SCHEMA_VERSION = len(MIGRATIONS)


async def _version(conn: psycopg.AsyncConnection) -> int:
    await conn.execute("CREATE TABLE IF NOT EXISTS bot_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    row = await (await conn.execute("SELECT value FROM bot_meta WHERE key = 'schema_version'")).fetchone()
    return int(row["value"]) if row else 0


async def _newest(conn: psycopg.AsyncConnection, table: str) -> int:
    """The newest migration a LangGraph table set has recorded (-1 when it has none yet)."""
    exists = await (await conn.execute("SELECT to_regclass(%s) AS t", (table,))).fetchone()
    if exists["t"] is None:
        return -1
    row = await (await conn.execute(f"SELECT MAX(v) AS v FROM {table}")).fetchone()  # table: a constant
    return -1 if row["v"] is None else int(row["v"])


async def _refuse_newer(conn: psycopg.AsyncConnection, version: int) -> None:
    if version > SCHEMA_VERSION:
        raise StorageUnavailable(
            f"the database's bot schema is at version {version}, newer than this bot's {SCHEMA_VERSION}: "
            "upgrade the bot before pointing it at this database")
    for table, known in (("checkpoint_migrations", len(BasePostgresSaver.MIGRATIONS) - 1),
                         ("store_migrations", len(BasePostgresStore.MIGRATIONS) - 1)):
        if await _newest(conn, table) > known:
            raise StorageUnavailable(
                f"the database's {table} is newer than this bot's langgraph-checkpoint-postgres knows: "
                "upgrade the bot before pointing it at this database")


async def _take_migration_lock(conn: psycopg.AsyncConnection) -> None:
    """Wait for the migration lock by polling, never inside a statement.

    A session blocked in ``pg_advisory_lock`` holds a snapshot, and ``CREATE INDEX CONCURRENTLY`` in the
    session that has the lock waits for every snapshot to go: the two would wait for each other forever.
    """
    waited = 0.0
    while not (await (await conn.execute("SELECT pg_try_advisory_lock(%s) AS ok", (MIGRATION_LOCK,))).fetchone())["ok"]:
        if waited == 0.0:
            log.info("another process is migrating the database; waiting for it")
        await asyncio.sleep(MIGRATION_POLL_SECONDS)
        waited += MIGRATION_POLL_SECONDS


async def _rebuild_invalid_indexes(conn: psycopg.AsyncConnection) -> None:
    """Rebuild the indexes a ``CREATE INDEX CONCURRENTLY`` left invalid (its start-up was killed or cut
    off part-way). ``IF NOT EXISTS`` then skips the name, and the version was recorded all the same: the
    index stayed unused for good, and every memory search (``store_prefix_idx``) scanned the whole table.
    Each is dropped and created again by the statement that created it (the bot's or LangGraph's)."""
    rows = await (await conn.execute(
        "SELECT c.relname AS name FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE NOT i.indisvalid AND n.nspname = current_schema()"
    )).fetchall()
    if not rows:
        return
    statements = [text for group in MIGRATIONS for text in group]
    statements += [text for text in (*BasePostgresSaver.MIGRATIONS, *BasePostgresStore.MIGRATIONS)
                   if isinstance(text, str)]
    for row in rows:
        name = row["name"]
        creating = [text for text in statements
                    if "CREATE" in text.upper() and re.search(rf"\b{re.escape(name)}\s+ON\b", text)]
        log.warning("index %s was left invalid by an interrupted migration: rebuilding it", name)
        await conn.execute(pgsql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(pgsql.Identifier(name)))
        for text in creating[:1]:
            await conn.execute(text)


async def migrate(conn: psycopg.AsyncConnection, saver: AsyncPostgresSaver, store: AsyncPostgresStore) -> str:
    """Bring the schema up to date (LangGraph's tables, then the bot's); return the inbox epoch.

    ``conn`` must be in autocommit mode: every statement commits on its own.
    """
    await _take_migration_lock(conn)
    try:
        await _rebuild_invalid_indexes(conn)
        version = await _version(conn)
        await _refuse_newer(conn, version)
        await saver.setup()
        await store.setup()
        for number, statements in enumerate(MIGRATIONS[version:], start=version + 1):
            for sql in statements:
                await conn.execute(sql)
            await conn.execute(
                "INSERT INTO bot_meta (key, value) VALUES ('schema_version', %s)"
                " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value", (str(number),))
            log.info("bot schema migrated to version %d", number)
        # The inbox's identity (see Inbox.epoch): created once, with the database.
        await conn.execute("INSERT INTO bot_meta (key, value) VALUES ('epoch', %s) ON CONFLICT (key) DO NOTHING",
                           (uuid.uuid4().hex,))
        row = await (await conn.execute("SELECT value FROM bot_meta WHERE key = 'epoch'")).fetchone()
        return row["value"]
    finally:
        await conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
