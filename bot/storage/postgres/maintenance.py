"""Pruning, erasure and compaction on PostgreSQL.

Pruning uses the saver's own ``aprune(strategy="keep_latest")``. Compaction after an erasure is a plain
``VACUUM`` of every table that held the person's data: it removes the dead tuples the deletes left, so no
live row and no dead tuple holds their words afterwards. What VACUUM cannot reach (WAL segments already
written and archived, base backups, replicas' WAL, freed space inside pages until it is reused) is the
operator's to manage; see the README.
"""

from __future__ import annotations

import logging

import psycopg
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

from bot.storage.postgres.db import PgDb
from bot.storage.shielding import shielded

log = logging.getLogger(__name__)

# Everything that can hold a person's words: LangGraph's checkpoint tables and store, and the bot's own.
ERASURE_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes", "store", "bot_inbox", "bot_embeddings")
PRUNE_ATTEMPTS = 3


class PostgresMaintenance:
    def __init__(self, saver: AsyncPostgresSaver, db: PgDb) -> None:
        self._saver = saver
        self._db = db

    async def prune_thread(self, thread_id: str) -> None:
        """Keep only the thread's latest checkpoint (the saver's ``keep_latest``).

        ``keep_latest`` reads one snapshot and refuses to race another writer of the same thread with a
        serialization failure; turns of a thread run one at a time, so a retry is enough.
        """
        for attempt in range(1, PRUNE_ATTEMPTS + 1):
            try:
                await self._saver.aprune([thread_id], strategy="keep_latest")
                return
            except (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected):
                if attempt == PRUNE_ATTEMPTS:
                    raise
                log.debug("pruning thread %s raced a writer; retrying", thread_id)

    @shielded
    async def erase_person_rows(self, user_id: str, *, guild_id: str | None = None) -> int:
        async with self._db.tx() as conn:
            await conn.execute("DELETE FROM bot_embeddings WHERE user_id = %s", (user_id,))
            # Every row goes (turns kept as context too); what is counted is the pending ones, as promised.
            where, args = "user_id = %s", (user_id,)
            if guild_id is not None:
                where, args = "user_id = %s AND origin->>'guild_id' = %s", (user_id, str(guild_id))
            cur = await conn.execute(f"WITH gone AS (DELETE FROM bot_inbox WHERE {where} RETURNING extracted)"
                                     " SELECT COUNT(*) FILTER (WHERE NOT extracted) AS n FROM gone", args)
            return int((await cur.fetchone())["n"])

    @shielded
    async def compact(self) -> None:
        """VACUUM the tables an erasure touched (outside any transaction, as VACUUM requires)."""
        async with self._db.connection() as conn:
            await conn.execute("VACUUM " + ", ".join(ERASURE_TABLES))  # constant table names
