"""Switching embedders never mixes two vector spaces: each stored vector records which embedder made it,
a query of one embedder is scored only against that embedder's vectors, and at start-up the vectors of
another embedder are made again in the background and the old rows deleted. On SQLite files and on
PostgreSQL (the ``backend`` fixture)."""

from __future__ import annotations

import asyncio

from langchain_core.embeddings import Embeddings

from bot.engine.memories.repository import MemoryRepository
from bot.engine.recall.vectors import SemanticIndex
from bot.storage import open_storage
from tests.conftest import ScriptedChatModel, default_script, make_settings, running_engine

ADA, BOB = "501", "502"
ORIGIN = {"guild_id": "1"}


class Fake(Embeddings):
    """A tiny embedder with its own id and its own number of dimensions; it counts what it embeds."""

    def __init__(self, embedder_id: str, dims: int) -> None:
        self.embedder_id, self.dims = embedder_id, dims
        self.documents = 0
        self.queries = 0

    def _vec(self, text: str) -> list[float]:
        return [1.0 + (len(text) + i) % 5 for i in range(self.dims)]

    def embed_documents(self, texts):
        self.documents += len(texts)
        return [self._vec(t) for t in texts]

    def embed_query(self, text):
        self.queries += 1
        return self._vec(text)


async def embedders_of(raw_storage, user: str) -> list[str]:
    """The embedder recorded on each of the person's rows, read with the backend's own SQL."""
    vectors = raw_storage.vectors
    if hasattr(vectors._db, "conn"):  # SQLite's ledger
        cur = await vectors._db.conn.execute("SELECT embedder FROM embeddings WHERE user_id=? ORDER BY memory_key", (user,))
        return [e for (e,) in await cur.fetchall()]
    async with vectors._db.connection() as conn:
        cur = await conn.execute("SELECT embedder FROM bot_embeddings WHERE user_id = %s ORDER BY memory_key", (user,))
        return [r["embedder"] for r in await cur.fetchall()]


async def test_a_switch_of_embedder_never_mixes_spaces_and_remakes_the_old_vectors_in_the_background(tmp_path, backend):
    settings = make_settings(tmp_path / "data", backend)
    a, b = Fake("fake-A", 3), Fake("fake-B", 3)  # the same shape on purpose: only the recorded id tells them apart
    async with open_storage(settings) as storage:
        repo = MemoryRepository(storage.store)
        await repo.apply(ADA, inserts=[(f"Ada fact number {i}", ORIGIN) for i in range(5)])
        await repo.apply(BOB, inserts=[(f"Bob fact {i}", ORIGIN) for i in range(3)])
        index_a = SemanticIndex(a, storage.vectors)
        for user in (ADA, BOB):
            assert await index_a.index(user, await repo.list(user)) > 0
        assert await embedders_of(storage, ADA) == ["fake-A"] * 5
        gone = (await repo.list(BOB))[0].key
        await repo.delete(BOB, gone)  # a memory deleted while its A row stayed (as after a crash)

        # Restarted with B: A's vectors are never scored against B's query, and the reply path embeds only the query.
        index_b = SemanticIndex(b, storage.vectors)
        memories = await repo.list(ADA)
        scores = await index_b.scores(ADA, memories, "what about Ada?")
        assert scores == [None] * len(memories)
        assert (b.queries, b.documents) == (1, 0)
        queued = index_b._background[ADA]  # they are queued for the background instead
        queued.cancel()  # (stopped here: the start-up sweep below is what is tested)
        await asyncio.gather(queued, return_exceptions=True)
        assert await embedders_of(storage, ADA) == ["fake-A"] * 5

    async with running_engine(settings, ScriptedChatModel(default_script), embeddings=b) as engine:
        sweep = next(t for t in engine._background if t.get_name() == "remake-memory-vectors")
        assert await asyncio.wait_for(sweep, 30) == 2  # both people, in the background from start-up
        await engine.semantic.drain()
        assert await embedders_of(engine.storage, ADA) == ["fake-B"] * 5
        assert await embedders_of(engine.storage, BOB) == ["fake-B"] * 2  # the deleted memory's old row is gone
        assert await engine.storage.vectors.people_with_others("fake-B") == []
        # Now B's query is scored against B's vectors.
        memories = await engine.memories.list(ADA)
        assert all(s is not None for s in await engine.semantic.scores(ADA, memories, "what about Ada?"))

    async with running_engine(settings, ScriptedChatModel(default_script), embeddings=b) as engine:
        sweep = next(t for t in engine._background if t.get_name() == "remake-memory-vectors")
        documents = b.documents
        assert await asyncio.wait_for(sweep, 30) == 0  # the same embedder again: nothing to make
        assert b.documents == documents


async def test_rows_from_before_embedders_were_recorded_count_as_another_embedder(tmp_path, backend):
    settings = make_settings(tmp_path / "data", backend)
    async with open_storage(settings) as storage:
        repo = MemoryRepository(storage.store)
        await repo.apply(ADA, inserts=[("Ada likes tea", ORIGIN)])
        (memory,) = await repo.list(ADA)
        await storage.vectors.put(ADA, [(memory.key, "old-version", b"\x00" * 12)])  # no embedder recorded: ''
        assert await storage.vectors.people_with_others("fake-B") == [ADA]
        index = SemanticIndex(Fake("fake-B", 3), storage.vectors)
        assert await index.remake_others(repo.list) == 1
        assert await embedders_of(storage, ADA) == ["fake-B"]


async def test_a_failing_embedder_stops_the_sweep_and_leaves_the_old_rows_for_the_next_start(tmp_path):
    from bot.engine.recall.vectors import MemoryVectorCache

    class Down(Fake):
        def embed_documents(self, texts):
            raise ConnectionError("embedder down")

    cache = MemoryVectorCache()
    await cache.put(ADA, [("k1", "v", b"\x00" * 12)], embedder="fake-A")
    await cache.put(BOB, [("k1", "v", b"\x00" * 12)], embedder="fake-A")
    from datetime import datetime, timezone

    from bot.engine.memories.records import StoredMemory

    at = datetime(2026, 1, 1, tzinfo=timezone.utc)

    async def read(user):
        return [StoredMemory(key="k1", content="a fact", origin={}, created_at=at, updated_at=at)]

    index = SemanticIndex(Down("fake-B", 3), cache)
    assert await index.remake_others(read) == 0
    assert await cache.people_with_others("fake-B") == [ADA, BOB]  # nothing lost: made on a later start
