"""The memory-embedding cache on PostgreSQL (see :class:`bot.engine.stores.VectorCache`)."""

from __future__ import annotations

from typing import Mapping

from bot.engine.memories.records import namespace
from bot.storage.postgres.db import PgDb
from bot.storage.postgres.locks import PostgresLocks
from bot.storage.shielding import shielded


class PostgresVectors:
    def __init__(self, db: PgDb) -> None:
        self._db = db

    async def get(self, user_id: str, embedder: str | None = None) -> dict[str, tuple[str, bytes]]:
        async with self._db.connection() as conn:
            if embedder is None:
                cur = await conn.execute(
                    "SELECT memory_key, digest, vector FROM bot_embeddings WHERE user_id = %s", (user_id,))
            else:
                cur = await conn.execute(
                    "SELECT memory_key, digest, vector FROM bot_embeddings WHERE user_id = %s AND embedder = %s",
                    (user_id, embedder))
            return {r["memory_key"]: (r["digest"], bytes(r["vector"])) for r in await cur.fetchall()}

    @shielded
    async def put(self, user_id: str, rows: list[tuple[str, str, bytes]], *, embedder: str = "",
                  texts: Mapping[str, str] | None = None) -> None:
        if not rows:
            return
        # Only for a memory that still exists (and, with ``texts``, still says what was embedded), and not
        # while an erasure of the person holds its claim: the pause of the semantic index is one process's,
        # and another process's background indexing (started before a wipe or an edit, from a list read
        # before it) would otherwise write erased or replaced text's vectors back after the removal said it
        # was done. The text is a parameter of the comparison, never written. ``FOR SHARE SKIP LOCKED``: the
        # memory's row is locked until this commits, so a deletion or a rewrite committing later waits and
        # then drops the vector this wrote; one not yet committed holds the row, which is then skipped (no
        # vector: a vector is a cache, made again by the next reply that finds none). Under READ COMMITTED
        # the check alone saw the row as it was before such a change, and the vector was written after the
        # change had dropped the memory's. Skipping rather than waiting also cannot deadlock with a batch
        # of memory writes that locks the same rows in another order.
        prefix = ".".join(namespace(user_id))  # LangGraph's store keeps a namespace as its dotted text
        same_text = " AND (%(text)s::text IS NULL OR value->>'content' = %(text)s::text)"
        texts = texts or {}
        async with self._db.tx() as conn:
            async with conn.cursor() as cur:
                await cur.executemany(
                    "INSERT INTO bot_embeddings (user_id, memory_key, digest, vector, embedder)"
                    " SELECT %(user)s, %(key)s, %(digest)s, %(vector)s, %(embedder)s"
                    " WHERE EXISTS (SELECT 1 FROM store WHERE prefix = %(prefix)s AND key = %(key)s" + same_text +
                    " FOR SHARE SKIP LOCKED)"
                    " AND NOT " + PostgresLocks.erasing_clause() +
                    " ON CONFLICT (user_id, memory_key) DO UPDATE SET digest = EXCLUDED.digest, vector = EXCLUDED.vector,"
                    " embedder = EXCLUDED.embedder",
                    [{"user": user_id, "key": k, "digest": d, "vector": v, "embedder": embedder, "prefix": prefix,
                      "text": texts.get(k)} for k, d, v in rows],
                )

    @shielded
    async def delete(self, user_id: str, keys: list[str]) -> int:
        if not keys:
            return 0
        async with self._db.tx() as conn:
            cur = await conn.execute("DELETE FROM bot_embeddings WHERE user_id = %s AND memory_key = ANY(%s)",
                                     (user_id, sorted(set(keys))))
            return cur.rowcount

    @shielded
    async def delete_others(self, user_id: str, embedder: str) -> int:
        async with self._db.tx() as conn:
            cur = await conn.execute("DELETE FROM bot_embeddings WHERE user_id = %s AND embedder <> %s", (user_id, embedder))
            return cur.rowcount

    async def people_with_others(self, embedder: str, *, after: str = "", limit: int = 100) -> list[str]:
        async with self._db.connection() as conn:
            cur = await conn.execute(
                "SELECT DISTINCT user_id FROM bot_embeddings WHERE embedder <> %s AND user_id > %s ORDER BY user_id LIMIT %s",
                (embedder, after, limit))
            return [r["user_id"] for r in await cur.fetchall()]
