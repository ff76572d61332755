"""Semantic relevance for memories, when an embeddings provider is configured.

Vectors are computed once per memory text (cached in storage's vector cache, keyed by a digest of the text) and
compared in Python, in a worker thread: no vector extension is needed, so this works the same on a
Python whose ``sqlite3`` cannot load sqlite-vec (this machine's) and on Docker's. It is only consulted
when a person's memories do not all fit the prompt budget, so most replies make no embeddings call.
Any failure of the provider is logged and the ranking falls back to BM25 and recency.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import operator
from array import array
from typing import Sequence

from langchain_core.embeddings import Embeddings

from bot.engine.memory import StoredMemory
from bot.engine.stores import VectorCache

log = logging.getLogger(__name__)


def _unit(vector: Sequence[float]) -> array:
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return array("f", (x / norm for x in vector))


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _cosines(query: array, vectors: list[array]) -> list[float]:
    return [sum(map(operator.mul, query, v)) for v in vectors]


class SemanticScorer:
    """Cosine similarity between the current messages and each memory, in [-1, 1]."""

    def __init__(self, embeddings: Embeddings, vectors: VectorCache) -> None:
        self.embeddings = embeddings
        self.vectors = vectors
        self._warned = False

    async def scores(self, user_id: str, memories: Sequence[StoredMemory], query: str) -> list[float] | None:
        """One score per memory, or None when the provider is unavailable (the caller falls back)."""
        if not memories or not query.strip():
            return None
        try:
            cached = await self.vectors.get(user_id)
            wanted = {m.key: digest(m.content) for m in memories}
            stale = [m for m in memories if cached.get(m.key, ("", b""))[0] != wanted[m.key]]
            if stale:
                fresh = await self.embeddings.aembed_documents([m.content for m in stale])
                rows = [(m.key, wanted[m.key], _unit(v).tobytes()) for m, v in zip(stale, fresh)]
                await self.vectors.put(user_id, rows)
                cached.update({k: (d, b) for k, d, b in rows})
            query_vec = _unit(await self.embeddings.aembed_query(query))
        except Exception as exc:  # noqa: BLE001 - relevance degrades to lexical, the reply goes on
            if not self._warned:
                log.warning("embeddings provider failed (%r); ranking memories by BM25 and recency only", exc)
                self._warned = True
            return None
        vectors = []
        for m in memories:
            v = array("f")
            v.frombytes(cached[m.key][1])
            vectors.append(v)
        return await asyncio.to_thread(_cosines, query_vec, vectors)
