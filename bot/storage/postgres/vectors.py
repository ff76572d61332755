"""The memory-embedding cache on PostgreSQL (see :class:`bot.engine.stores.VectorCache`)."""

from __future__ import annotations

from bot.storage.postgres.db import PgDb
from bot.storage.shielding import shielded


class PostgresVectors:
    def __init__(self, db: PgDb) -> None:
        self._db = db

    async def get(self, user_id: str) -> dict[str, tuple[str, bytes]]:
        async with self._db.connection() as conn:
            cur = await conn.execute(
                "SELECT memory_key, digest, vector FROM bot_embeddings WHERE user_id = %s", (user_id,))
            return {r["memory_key"]: (r["digest"], bytes(r["vector"])) for r in await cur.fetchall()}

    @shielded
    async def put(self, user_id: str, rows: list[tuple[str, str, bytes]]) -> None:
        if not rows:
            return
        async with self._db.tx() as conn:
            async with conn.cursor() as cur:
                await cur.executemany(
                    "INSERT INTO bot_embeddings (user_id, memory_key, digest, vector) VALUES (%s, %s, %s, %s)"
                    " ON CONFLICT (user_id, memory_key) DO UPDATE SET digest = EXCLUDED.digest, vector = EXCLUDED.vector",
                    [(user_id, k, d, v) for k, d, v in rows],
                )

    @shielded
    async def delete(self, user_id: str, keys: list[str]) -> int:
        if not keys:
            return 0
        async with self._db.tx() as conn:
            cur = await conn.execute("DELETE FROM bot_embeddings WHERE user_id = %s AND memory_key = ANY(%s)",
                                     (user_id, sorted(set(keys))))
            return cur.rowcount
