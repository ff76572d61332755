"""Pruning, erasure and compaction on PostgreSQL.

Pruning uses the saver's own ``aprune(strategy="keep_latest")``. Compaction after an erasure is a plain
``VACUUM`` of every table that held the person's data: it removes the dead tuples the deletes left, so no
live row and no dead tuple holds their words afterwards. What VACUUM cannot reach (WAL segments already
written and archived, base backups, replicas' WAL, freed space inside pages until it is reused) is the
operator's to manage; see docs/operating.md (Running with PostgreSQL).
"""

from __future__ import annotations

import asyncio
import logging
import re

import psycopg
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

from bot.storage.postgres.db import PgDb
from bot.storage.shielding import shielded

log = logging.getLogger(__name__)

# Everything that can hold a person's words: LangGraph's checkpoint tables and store, and the bot's own.
# The erasure journal is one of them: its rows carry quote hashes and people's IDs until the job finishes.
ERASURE_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes", "store", "bot_inbox", "bot_embeddings",
                  "bot_erasures", "bot_guild_settings")
PRUNE_ATTEMPTS = 3
# VACUUM cannot remove a dead row version an older snapshot may still see (a long transaction, a
# replication slot): it is retried after these pauses, then reported, and autovacuum removes it later.
COMPACT_RETRY_SECONDS = (0.2, 1.0)
_FINISHED = re.compile(r'finished vacuuming "(?:[^"]*\.)?([^".]+)"')
_HELD_BACK = re.compile(r"tuples: \d+ removed, \d+ remain, (\d+) are dead but not yet removable")
# A page another process was reading (pinned) is skipped: its dead rows stay, reported on a line of their
# own ("tuples missed: N dead from M pages not removed due to cleanup lock contention"; PostgreSQL 14 and
# older: "N skipped due to pins"). Held back as well: retried, then reported, never "Done" unseen.
_MISSED = re.compile(r"tuples missed: (\d+) dead|(\d+) skipped due to pins")


def held_back(reports: list[str]) -> dict[str, int]:
    """Dead row versions ``VACUUM (VERBOSE)`` left, by table, read from its per-table reports: those an
    older snapshot may still see, and those on pages another session had pinned (skipped, not waited for)."""
    held: dict[str, int] = {}
    for report in reports:
        table = _FINISHED.search(report)
        if table is None:
            continue
        dead = _HELD_BACK.search(report)
        left = int(dead.group(1)) if dead else 0
        left += sum(int(m.group(1) or m.group(2)) for m in _MISSED.finditer(report))
        if left:
            held[table.group(1)] = held.get(table.group(1), 0) + left
    return held


class PostgresMaintenance:
    """Pruning (the saver's own ``aprune``), erasing a person's rows, and ``VACUUM`` after an erasure."""

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

    async def conversations_named(self, prefix: str) -> list[str]:
        async with self._db.connection() as conn:
            cur = await conn.execute(
                "SELECT DISTINCT thread_id FROM checkpoints WHERE left(thread_id, %s) = %s", (len(prefix), prefix))
            return sorted(str(row["thread_id"]) for row in await cur.fetchall())

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
    async def compact(self) -> dict[str, int]:
        """VACUUM the tables an erasure touched (outside any transaction, as VACUUM requires), and read its
        report: dead row versions it could not remove yet are retried, then logged (counts only).

        Returns those held back, by table (empty: every dead row version of the erased data is gone). The
        erasure is not failed for them: the rows are deleted, and what an old snapshot still holds is
        removed by autovacuum once that snapshot ends; retrying the whole erasure would only repeat this.
        """
        held: dict[str, int] = {}
        for pause in (*COMPACT_RETRY_SECONDS, None):
            held = await self._vacuum_report()
            if not held or pause is None:
                break
            await asyncio.sleep(pause)
        if held:
            log.warning("after an erasure VACUUM could not yet remove %s dead row versions (an older transaction "
                        "or replication slot still sees them); autovacuum removes them when it ends",
                        ", ".join(f"{n} in {t}" for t, n in sorted(held.items())))
        return held

    async def _vacuum_report(self) -> dict[str, int]:
        reports: list[str] = []

        def collect(diag: psycopg.errors.Diagnostic) -> None:
            reports.append(diag.message_primary or "")

        async with self._db.connection() as conn:  # a pooled connection: the handler leaves with the call
            conn.add_notice_handler(collect)
            try:
                await conn.execute("VACUUM (VERBOSE) " + ", ".join(ERASURE_TABLES))  # constant table names
            finally:
                conn.remove_notice_handler(collect)
        return held_back(reports)
