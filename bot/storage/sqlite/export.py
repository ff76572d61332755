"""Every row of the bot's own SQLite tables, for ``python -m bot migrate-storage`` (see bot/storage/migrate.py)."""

from __future__ import annotations

import json

from bot.storage.sqlite.connection import LedgerDb

TABLES = {
    "inbox": "SELECT id, thread_id, user_id, author, human, ai, origin, created, extracted FROM memory_inbox ORDER BY id",
    "prefs": "SELECT user_id, paused, private, reactions, dm_in_servers, scope FROM prefs",
    "embeddings": "SELECT user_id, memory_key, digest, vector, embedder FROM embeddings",
    "usage": "SELECT guild_id, user_id, day, calls, prompt_tokens, completion_tokens FROM usage",
    "erasures": ("SELECT id, kind, user_id, guild_id, actor, actor_id, quotes, requested, subject FROM erasures"
                 " ORDER BY id"),
    "guild_settings": "SELECT guild_id, version, data, updated_at FROM guild_settings",
    "removed_guilds": "SELECT guild_id, removed_at FROM removed_guilds",
    "message_reach": "SELECT message_id, thread_id FROM message_reach",
}


async def export_rows(db: LedgerDb) -> dict[str, list[dict]]:
    """Table name -> rows (as dicts, in the shape ``bot.storage.postgres.import_rows`` takes), plus the epoch."""
    out: dict[str, list[dict]] = {}
    for name, query in TABLES.items():
        cur = await db.conn.execute(query)
        cols = [d[0] for d in cur.description]
        out[name] = [dict(zip(cols, row)) for row in await cur.fetchall()]
    for row in out["inbox"]:
        row["origin"] = json.loads(row["origin"])
        row["extracted"] = bool(row["extracted"])
    for row in out["prefs"]:
        for key in ("paused", "private", "reactions"):
            row[key] = bool(row[key])
        row["dm_in_servers"] = None if row["dm_in_servers"] is None else bool(row["dm_in_servers"])
    # AUTOINCREMENT never hands out an ID again, even a deleted top row's: the copy's sequences continue
    # from there, not from the highest ID kept (an extraction watermark past deleted rows skipped new turns).
    cur = await db.conn.execute("SELECT name, seq FROM sqlite_sequence WHERE name IN ('memory_inbox', 'erasures')")
    out["sequences"] = [{"table": {"memory_inbox": "bot_inbox", "erasures": "bot_erasures"}[name], "seq": seq}
                        for name, seq in await cur.fetchall()]
    cur = await db.conn.execute("SELECT value FROM meta WHERE key='epoch'")
    out["epoch"] = [{"value": (await cur.fetchone())[0]}]
    # From when the reach rows are complete: the copy is exactly as complete as the original.
    cur = await db.conn.execute("SELECT value FROM meta WHERE key='reach_since'")
    out["reach_since"] = [{"value": row[0]} for row in [await cur.fetchone()] if row]
    return out
