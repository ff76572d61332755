"""The bot's own tables in ``ledger.sqlite`` (LangGraph's savers create theirs in their own files)."""

from __future__ import annotations

import time
import uuid

from bot.storage.sqlite.connection import LedgerDb

SCHEMA = """
CREATE TABLE IF NOT EXISTS memory_inbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    thread_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    author TEXT NOT NULL,
    human TEXT NOT NULL,
    ai TEXT NOT NULL,
    origin TEXT NOT NULL,
    created REAL NOT NULL,
    extracted INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS inbox_pending ON memory_inbox (user_id, thread_id, extracted);
CREATE INDEX IF NOT EXISTS inbox_thread ON memory_inbox (thread_id, id);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS prefs (
    user_id TEXT PRIMARY KEY,
    paused INTEGER NOT NULL DEFAULT 0,
    private INTEGER NOT NULL DEFAULT 0,
    reactions INTEGER NOT NULL DEFAULT 1,
    dm_in_servers INTEGER
);
CREATE TABLE IF NOT EXISTS embeddings (
    user_id TEXT NOT NULL,
    memory_key TEXT NOT NULL,
    digest TEXT NOT NULL,
    vector BLOB NOT NULL,
    embedder TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (user_id, memory_key)
);
CREATE TABLE IF NOT EXISTS usage (
    guild_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    day TEXT NOT NULL,
    calls INTEGER NOT NULL DEFAULT 0,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (guild_id, user_id, day)
);
CREATE TABLE IF NOT EXISTS removed_guilds (
    guild_id TEXT PRIMARY KEY,
    removed_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS guild_settings (
    guild_id TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    data TEXT NOT NULL,
    updated_at REAL NOT NULL
);
-- The daily-budget query asks for one server's day (and pruning for old days).
CREATE INDEX IF NOT EXISTS usage_guild_day ON usage (guild_id, day);
CREATE INDEX IF NOT EXISTS usage_day ON usage (day);
-- Where a message's text reached (bot.engine.stores.reach): IDs only.
CREATE TABLE IF NOT EXISTS message_reach (
    message_id TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    PRIMARY KEY (message_id, thread_id)
);
CREATE INDEX IF NOT EXISTS message_reach_thread ON message_reach (thread_id);
-- Erasures in progress (bot.engine.stores.erasures): no text, only keyed hashes of the erased words.
CREATE TABLE IF NOT EXISTS erasures (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    user_id TEXT NOT NULL,
    guild_id TEXT,
    actor TEXT,
    actor_id TEXT,
    quotes BLOB,
    requested REAL NOT NULL,
    subject TEXT
);
"""

# Columns added after a table first shipped: (table, column, definition). Added when missing.
ADDED_COLUMNS = [("prefs", "scope", "TEXT"), ("erasures", "subject", "TEXT"),
                 # which embedder made a vector (bot.engine.stores.vectors); '' for rows older than the column
                 ("embeddings", "embedder", "TEXT NOT NULL DEFAULT ''")]


async def setup(db: LedgerDb) -> str:
    """Create the tables (idempotent); return the file's epoch, created on first run.

    The epoch is an identity for this ledger file: extraction watermarks in the memory store are only
    trusted for the ledger that wrote them (inbox IDs restart if the file is ever recreated).
    """
    await db.conn.executescript(SCHEMA)
    for table, column, definition in ADDED_COLUMNS:
        cur = await db.conn.execute(f"PRAGMA table_info({table})")
        if column not in {row[1] for row in await cur.fetchall()}:
            await db.conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")
    # A ledger in use before (its epoch exists) may hold reaches nobody recorded: complete only from now on.
    cur = await db.conn.execute("SELECT COUNT(*) FROM meta WHERE key='epoch'")
    (used,) = await cur.fetchone()
    await db.conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('reach_since', ?)",
                          (str(time.time()) if used else "0",))
    # The index also records where memories shown in a prompt carried their source messages' words
    # (bot.engine.stores.reach.ShownSources, 2026-12-07): a ledger used before is complete only from now on.
    cur = await db.conn.execute("SELECT COUNT(*) FROM meta WHERE key='reach_sources'")
    (recorded,) = await cur.fetchone()
    if not recorded:
        if used:
            await db.conn.execute("UPDATE meta SET value=? WHERE key='reach_since'", (str(time.time()),))
        await db.conn.execute("INSERT INTO meta (key, value) VALUES ('reach_sources', '1')")
    await db.conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('epoch', ?)", (uuid.uuid4().hex,))
    cur = await db.conn.execute("SELECT value FROM meta WHERE key='epoch'")
    (epoch,) = await cur.fetchone()
    return epoch


async def reach_since(db: LedgerDb) -> float:
    """From when the message-reach index is complete (epoch seconds; 0: since the ledger was created)."""
    cur = await db.conn.execute("SELECT value FROM meta WHERE key='reach_since'")
    row = await cur.fetchone()
    return float(row[0]) if row else 0.0
