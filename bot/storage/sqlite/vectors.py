"""The memory-embedding cache on SQLite (see :class:`bot.engine.stores.VectorCache`)."""

from __future__ import annotations

from typing import Mapping

from bot.storage.shielding import shielded
from bot.storage.sqlite.connection import LedgerDb


class SqliteVectors:
    def __init__(self, db: LedgerDb) -> None:
        self._db = db

    async def get(self, user_id: str, embedder: str | None = None) -> dict[str, tuple[str, bytes]]:
        if embedder is None:
            cur = await self._db.conn.execute(
                "SELECT memory_key, digest, vector FROM embeddings WHERE user_id=?", (user_id,))
        else:
            cur = await self._db.conn.execute(
                "SELECT memory_key, digest, vector FROM embeddings WHERE user_id=? AND embedder=?", (user_id, embedder))
        return {k: (d, v) for k, d, v in await cur.fetchall()}

    @shielded
    async def put(self, user_id: str, rows: list[tuple[str, str, bytes]], *, embedder: str = "",
                  texts: Mapping[str, str] | None = None) -> None:
        # One process: its own pause of the index is enough, so ``texts`` is not compared (see the protocol).
        async with self._db.tx() as db:
            await db.executemany(
                "INSERT OR REPLACE INTO embeddings (user_id, memory_key, digest, vector, embedder) VALUES (?, ?, ?, ?, ?)",
                [(user_id, k, d, v, embedder) for k, d, v in rows],
            )

    @shielded
    async def delete(self, user_id: str, keys: list[str]) -> int:
        if not keys:
            return 0
        async with self._db.tx() as db:
            cur = await db.executemany(
                "DELETE FROM embeddings WHERE user_id=? AND memory_key=?", [(user_id, k) for k in sorted(set(keys))])
            return max(0, cur.rowcount)

    @shielded
    async def delete_others(self, user_id: str, embedder: str) -> int:
        async with self._db.tx() as db:
            cur = await db.execute("DELETE FROM embeddings WHERE user_id=? AND embedder<>?", (user_id, embedder))
            return max(0, cur.rowcount)

    async def people_with_others(self, embedder: str, *, after: str = "", limit: int = 100) -> list[str]:
        cur = await self._db.conn.execute(
            "SELECT DISTINCT user_id FROM embeddings WHERE embedder<>? AND user_id>? ORDER BY user_id LIMIT ?",
            (embedder, after, limit))
        return [u for (u,) in await cur.fetchall()]
