"""Write the rows ``bot.storage.sqlite.export.export_rows`` read into the bot's PostgreSQL tables, in one
transaction, keeping IDs (watermarks in the memory store refer to inbox IDs and the inbox epoch)."""

from __future__ import annotations

from psycopg.types.json import Jsonb

from bot.storage.postgres.db import PgDb
from bot.storage.postgres.text import without_nul

INSERTS = {
    "inbox": ("INSERT INTO bot_inbox (id, thread_id, user_id, author, human, ai, origin, created, extracted)"
              " OVERRIDING SYSTEM VALUE VALUES (%(id)s, %(thread_id)s, %(user_id)s, %(author)s, %(human)s, %(ai)s,"
              " %(origin)s, %(created)s, %(extracted)s)"),
    "prefs": ("INSERT INTO bot_prefs (user_id, paused, private, reactions, dm_in_servers, scope)"
              " VALUES (%(user_id)s, %(paused)s, %(private)s, %(reactions)s, %(dm_in_servers)s, %(scope)s)"),
    "embeddings": ("INSERT INTO bot_embeddings (user_id, memory_key, digest, vector, embedder)"
                   " VALUES (%(user_id)s, %(memory_key)s, %(digest)s, %(vector)s, %(embedder)s)"),
    "usage": ("INSERT INTO bot_usage (guild_id, user_id, day, calls, prompt_tokens, completion_tokens)"
              " VALUES (%(guild_id)s, %(user_id)s, %(day)s, %(calls)s, %(prompt_tokens)s, %(completion_tokens)s)"),
    "erasures": ("INSERT INTO bot_erasures (id, kind, user_id, guild_id, actor, actor_id, quotes, requested, subject)"
                 " OVERRIDING SYSTEM VALUE VALUES (%(id)s, %(kind)s, %(user_id)s, %(guild_id)s, %(actor)s,"
                 " %(actor_id)s, %(quotes)s, %(requested)s, %(subject)s)"),
    "guild_settings": ("INSERT INTO bot_guild_settings (guild_id, version, data, updated_at)"
                       " VALUES (%(guild_id)s, %(version)s, %(data)s, %(updated_at)s)"),
    # Servers still to sweep, and where each message's text reached (a deletion after the move finds every
    # copy): IDs only.
    "removed_guilds": ("INSERT INTO bot_removed_guilds (guild_id, removed_at) VALUES (%(guild_id)s, %(removed_at)s)"),
    "message_reach": ("INSERT INTO bot_message_reach (message_id, thread_id) VALUES (%(message_id)s, %(thread_id)s)"),
}
OWN_TABLES = ("bot_inbox", "bot_prefs", "bot_embeddings", "bot_usage", "bot_erasures", "bot_guild_settings",
              "bot_removed_guilds", "bot_message_reach")


async def holds_data(db: PgDb) -> bool:
    """Whether the database already has anything of a bot (then a migration would mix two histories)."""
    async with db.connection() as conn:
        for table in (*OWN_TABLES, "store", "checkpoints"):  # constant names
            if await (await conn.execute(f"SELECT 1 FROM {table} LIMIT 1")).fetchone():
                return True
    return False


async def import_rows(db: PgDb, rows: dict[str, list[dict]]) -> None:
    """Insert the exported rows with their IDs, move the ID sequences past them, and take over the inbox epoch."""
    async with db.tx() as conn:
        for name, query in INSERTS.items():
            batch = rows.get(name, [])
            if name == "inbox":
                batch = [{**r, **dict(zip(("author", "human", "ai"), without_nul((r["author"], r["human"], r["ai"])))),
                          "origin": Jsonb(without_nul(r["origin"]))} for r in batch]
            if batch:
                async with conn.cursor() as cur:
                    await cur.executemany(query, batch)
        seqs = {r["table"]: int(r["seq"]) for r in rows.get("sequences", [])}
        for table in ("bot_inbox", "bot_erasures"):  # new rows continue after every ID SQLite handed out
            await conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'),"
                               f" GREATEST((SELECT MAX(id) FROM {table}), %s, 1))", (seqs.get(table, 0),))
        await conn.execute("UPDATE bot_meta SET value = %s WHERE key = 'epoch'", (rows["epoch"][0]["value"],))
        for since in rows.get("reach_since", []):  # the reach rows are as complete as they were in SQLite
            await conn.execute("INSERT INTO bot_meta (key, value) VALUES ('reach_since', %s)"
                               " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value", (since["value"],))
