"""The bot's own small tables, beside the memory store: the memory inbox and token usage.

The *inbox* is why no memory work is lost: every turn is written here before the reply is returned, and
background extraction later reads the turns that a person has not had extracted yet. Rows that were
extracted are kept only as a short per-thread context window, so the table is bounded by threads, not by
turns. Everything is in SQLite, so pending work survives a crash or a restart.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import AsyncIterator

import aiosqlite

_SCHEMA = """
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
"""


@dataclass(frozen=True)
class InboxTurn:
    """One recorded turn: what a person said and what the bot answered."""

    id: int
    thread_id: str
    user_id: str
    author: str
    human: str
    ai: str
    origin: dict
    created: float


@dataclass(frozen=True)
class PendingKey:
    """A (thread, person) pair with turns waiting for extraction."""

    thread_id: str
    user_id: str
    count: int
    last_created: float


@dataclass(frozen=True)
class Prefs:
    """A person's memory settings. ``dm_in_servers`` None means "the server's default" (config)."""

    paused: bool = False
    private: bool = False
    reactions: bool = True
    dm_in_servers: bool | None = None


PREF_FIELDS = ("paused", "private", "reactions", "dm_in_servers")


@dataclass(frozen=True)
class UsageRow:
    guild_id: str
    user_id: str
    calls: int
    prompt_tokens: int
    completion_tokens: int


def _shielded(method):
    """Run a write to completion even if its caller is cancelled (the caller still sees the cancel)."""

    @functools.wraps(method)
    async def wrapper(self, *args, **kwargs):
        return await asyncio.shield(method(self, *args, **kwargs))

    return wrapper


def _turn(row: tuple) -> InboxTurn:
    return InboxTurn(row[0], row[1], row[2], row[3], row[4], row[5], json.loads(row[6]), row[7])


_TURN_COLS = "id, thread_id, user_id, author, human, ai, origin, created"


class Ledger:
    """Pending memory work and usage counters on one SQLite connection (autocommit mode)."""

    def __init__(self, conn: aiosqlite.Connection, *, context_window: int = 8) -> None:
        self._conn = conn
        self._lock = asyncio.Lock()
        self.context_window = context_window
        self._prefs: dict[str, Prefs] = {}
        self.epoch = ""  # write-through cache: read on every reply, changed rarely

    async def setup(self) -> None:
        await self._conn.executescript(_SCHEMA)
        # An identity for this ledger file: extraction watermarks in the memory store are only trusted
        # for the ledger that wrote them (inbox IDs restart if the file is ever recreated).
        await self._conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('epoch', ?)", (uuid.uuid4().hex,))
        cur = await self._conn.execute("SELECT value FROM meta WHERE key='epoch'")
        (self.epoch,) = await cur.fetchone()

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[aiosqlite.Connection]:
        """One immediate transaction: all of it or none of it.

        Public writers run their transaction in a shielded task (see ``_shielded``), so a caller that is
        cancelled (a reply deadline) cannot leave the connection inside an open transaction.
        """
        async with self._lock:
            began = False
            try:
                await self._conn.execute("BEGIN IMMEDIATE")
                began = True
                yield self._conn
            except BaseException:
                if began or self._conn.in_transaction:
                    await self._conn.execute("ROLLBACK")
                raise
            await self._conn.execute("COMMIT")

    @_shielded
    async def record_turn(
        self, *, thread_id: str, user_id: str, author: str, human: str, ai: str, origin: dict
    ) -> int:
        """Store a finished turn for later extraction; return how many are now pending for that pair."""
        async with self._tx() as db:
            await db.execute(
                "INSERT INTO memory_inbox (thread_id, user_id, author, human, ai, origin, created)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (thread_id, user_id, author, human, ai, json.dumps(origin), time.time()),
            )
            cur = await db.execute(
                "SELECT COUNT(*) FROM memory_inbox WHERE thread_id=? AND user_id=? AND extracted=0",
                (thread_id, user_id),
            )
            (count,) = await cur.fetchone()
        return count

    async def pending(self) -> list[PendingKey]:
        """Every (thread, person) pair with unextracted turns, oldest activity first."""
        cur = await self._conn.execute(
            "SELECT thread_id, user_id, COUNT(*), MAX(created) FROM memory_inbox WHERE extracted=0"
            " GROUP BY thread_id, user_id ORDER BY MAX(created)"
        )
        return [PendingKey(*row) for row in await cur.fetchall()]

    async def batch(self, thread_id: str, user_id: str, context: int) -> tuple[list[InboxTurn], list[InboxTurn]]:
        """Return (context turns before the first pending one, pending turns) for a pair."""
        cur = await self._conn.execute(
            f"SELECT {_TURN_COLS} FROM memory_inbox WHERE thread_id=? AND user_id=? AND extracted=0 ORDER BY id",
            (thread_id, user_id),
        )
        pending = [_turn(r) for r in await cur.fetchall()]
        if not pending or context <= 0:
            return [], pending
        cur = await self._conn.execute(
            f"SELECT {_TURN_COLS} FROM memory_inbox WHERE thread_id=? AND id<? ORDER BY id DESC LIMIT ?",
            (thread_id, pending[0].id, context),
        )
        before = [_turn(r) for r in reversed(await cur.fetchall())]
        return before, pending

    @_shielded
    async def mark_extracted(self, thread_id: str, ids: list[int]) -> None:
        """Mark turns done and trim the thread's extracted turns to the context window."""
        if not ids:
            return
        async with self._tx() as db:
            await db.executemany("UPDATE memory_inbox SET extracted=1 WHERE id=?", [(i,) for i in ids])
            await db.execute(
                "DELETE FROM memory_inbox WHERE thread_id=? AND extracted=1 AND id NOT IN"
                " (SELECT id FROM memory_inbox WHERE thread_id=? ORDER BY id DESC LIMIT ?)",
                (thread_id, thread_id, self.context_window),
            )

    async def vectors(self, user_id: str) -> dict[str, tuple[str, bytes]]:
        """A person's cached memory embeddings: key -> (text digest, unit float32 vector)."""
        cur = await self._conn.execute("SELECT memory_key, digest, vector FROM embeddings WHERE user_id=?", (user_id,))
        return {k: (d, v) for k, d, v in await cur.fetchall()}

    @_shielded
    async def store_vectors(self, user_id: str, rows: list[tuple[str, str, bytes]]) -> None:
        async with self._tx() as db:
            await db.executemany(
                "INSERT OR REPLACE INTO embeddings (user_id, memory_key, digest, vector) VALUES (?, ?, ?, ?)",
                [(user_id, k, d, v) for k, d, v in rows],
            )

    @_shielded
    async def forget_user(self, user_id: str, *, guild_id: str | None = None) -> int:
        """Remove a person's inbox rows (all, or those from one server) and cached vectors; return the count."""
        async with self._tx() as db:
            # Vectors are derived from memory text: they go too (recomputed on demand for what remains).
            await db.execute("DELETE FROM embeddings WHERE user_id=?", (user_id,))
            if guild_id is None:
                cur = await db.execute("DELETE FROM memory_inbox WHERE user_id=?", (user_id,))
            else:
                cur = await db.execute(
                    "DELETE FROM memory_inbox WHERE user_id=? AND json_extract(origin, '$.guild_id')=?",
                    (user_id, guild_id),
                )
            return cur.rowcount

    async def prefs(self, user_id: str) -> Prefs:
        cached = self._prefs.get(user_id)
        if cached is not None:
            return cached
        prefs = await self._load_prefs(user_id)
        if len(self._prefs) > 50_000:
            self._prefs.clear()
        self._prefs[user_id] = prefs
        return prefs

    async def _load_prefs(self, user_id: str) -> Prefs:
        cur = await self._conn.execute(
            "SELECT paused, private, reactions, dm_in_servers FROM prefs WHERE user_id=?", (user_id,)
        )
        row = await cur.fetchone()
        if row is None:
            return Prefs()
        return Prefs(bool(row[0]), bool(row[1]), bool(row[2]), None if row[3] is None else bool(row[3]))

    @_shielded
    async def set_prefs(self, user_id: str, **values: bool | None) -> Prefs:
        """Change some of a person's settings (only those given, in one transaction); return all of them."""
        unknown = set(values) - set(PREF_FIELDS)
        if unknown:
            raise ValueError(f"unknown preference {sorted(unknown)}")
        async with self._tx() as db:
            await db.execute("INSERT OR IGNORE INTO prefs (user_id) VALUES (?)", (user_id,))
            for name, value in values.items():  # names come from PREF_FIELDS, never from users
                await db.execute(f"UPDATE prefs SET {name}=? WHERE user_id=?", (value, user_id))
        prefs = await self._load_prefs(user_id)
        self._prefs[user_id] = prefs
        return prefs

    async def checkpoint(self) -> None:
        """Move the WAL into the database file and truncate it (after an erasure)."""
        async with self._lock:
            await self._conn.execute("PRAGMA incremental_vacuum")
            await self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    @_shielded
    async def record_usage(self, guild_id: str, user_id: str, prompt_tokens: int, completion_tokens: int) -> None:
        day = time.strftime("%Y-%m-%d", time.gmtime())
        async with self._tx() as db:
            await db.execute(
                "INSERT INTO usage (guild_id, user_id, day, calls, prompt_tokens, completion_tokens)"
                " VALUES (?, ?, ?, 1, ?, ?) ON CONFLICT (guild_id, user_id, day) DO UPDATE SET"
                " calls=calls+1, prompt_tokens=prompt_tokens+excluded.prompt_tokens,"
                " completion_tokens=completion_tokens+excluded.completion_tokens",
                (guild_id, user_id, day, prompt_tokens, completion_tokens),
            )

    async def tokens_today(self, guild_id: str, user_id: str | None = None) -> int:
        """Tokens used today (UTC) in a server, or by one person in a server (or in DMs)."""
        day = time.strftime("%Y-%m-%d", time.gmtime())
        sql = "SELECT COALESCE(SUM(prompt_tokens + completion_tokens), 0) FROM usage WHERE guild_id=? AND day=?"
        args: tuple = (guild_id, day)
        if user_id is not None:
            sql += " AND user_id=?"
            args += (user_id,)
        cur = await self._conn.execute(sql, args)
        (total,) = await cur.fetchone()
        return int(total)

    async def usage(self) -> list[UsageRow]:
        """Token usage summed over all days, per server and person, biggest first."""
        cur = await self._conn.execute(
            "SELECT guild_id, user_id, SUM(calls), SUM(prompt_tokens), SUM(completion_tokens) FROM usage"
            " GROUP BY guild_id, user_id ORDER BY SUM(prompt_tokens + completion_tokens) DESC"
        )
        return [UsageRow(*row) for row in await cur.fetchall()]
