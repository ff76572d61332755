"""Semantic relevance through a real OpenAIEmbeddings client on loopback: memory vectors are made at write
time, the reply path embeds only the query and, once, the speaker's name (and only past the budget), a
failing provider falls back to BM25 with one log line."""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager

from pydantic import SecretStr

from bot.engine.engine import create_engine
from bot.engine.memories.repository import MemoryRepository
from bot.engine.state import Speaker
from bot.storage import open_storage
from tests.conftest import ScriptedChatModel, default_script, make_settings
from tests.fakes.openai_server import FakeOpenAIServer

CONCEPTS = {
    "pastry": ["croissant", "croissants", "pastries", "pastry", "bakeries", "bakery", "baguette"],
    "sport": ["football", "tennis", "match", "goal"],
    "music": ["jazz", "guitar", "concert", "band"],
}


def concept_vector(text: str) -> list[float]:
    """A tiny embedding model: one dimension per concept, plus a constant so no vector is zero."""
    words = text.lower().replace("?", " ").replace(".", " ").split()
    return [float(sum(w in vocab for w in words)) for vocab in CONCEPTS.values()] + [0.1]


FILLER = [f"Watched match number {i} of the football season" for i in range(30)] + \
         [f"Went to jazz concert number {i}" for i in range(30)]
TARGET = "Adores French pastries"


async def run(tmp_path, embeddings_status: int = 200):
    async with FakeOpenAIServer() as server:
        server.embed = concept_vector
        server.embed_status = embeddings_status
        settings = make_settings(tmp_path, memory={"prompt_budget_tokens": 60, "embeddings_model": "fake-embed", "semantic": "endpoint",
                                                   "embeddings_base_url": server.base_url})
        settings = settings.model_copy(update={"secrets": settings.secrets.model_copy(
            update={"embeddings_api_key": SecretStr("emb-key-123456")})})
        model = ScriptedChatModel(default_script)
        async with open_storage(settings) as storage:
            engine = create_engine(settings, storage, chat_model=model)
            repo = MemoryRepository(storage.store)
            await repo.apply("7", inserts=[(f, {"guild_id": "1"}) for f in FILLER[:30]])
            await repo.apply("7", inserts=[(TARGET, {"guild_id": "1"})])
            await repo.apply("7", inserts=[(f, {"guild_id": "1"}) for f in FILLER[30:]])
            await engine.semantic.index("7", await repo.list("7"))  # what a write does
            server.embedding_requests.clear()
            await engine.reply("t", Speaker(user_id="7", name="Sam"), "Where can I get a good croissant?")
            await engine.close()
            return model.chat_calls[-1].system, server.embedding_requests


async def test_semantic_ranking_finds_the_memory_bm25_cannot(tmp_path):
    system, requests = await run(tmp_path)
    assert TARGET in system  # no shared word with the question: only meaning connects them
    # The reply path embedded the query and, the first time this process sees the name, the speaker's name
    # (its direction is taken out of the comparison: bot/engine/recall/vectors.py, without_name).
    assert [r["model"] for r in requests] == ["fake-embed", "fake-embed"]
    inputs = sorted(t for r in requests for t in (r["input"] if isinstance(r["input"], list) else [r["input"]]))
    assert inputs == ["Sam", "Where can Sam get a good croissant?"]  # "I" read as the speaker's name


async def test_a_failing_embeddings_provider_falls_back_with_one_log_line(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="bot.engine.recall.vectors")
    system, _ = await run(tmp_path, embeddings_status=500)
    assert TARGET not in system  # lexical ranking cannot see it: the fallback is what it says
    assert "Watched match" in system or "jazz concert" in system
    lines = [r for r in caplog.records if "embeddings failed" in r.getMessage()]
    assert len(lines) == 1


@asynccontextmanager
async def sam_with_filler_and_no_vectors(tmp_path):
    """An engine on an embeddings endpoint (the fake server), and Sam (user 7) with the filler memories,
    none of them indexed yet: (server, storage, engine)."""
    async with FakeOpenAIServer() as server:
        server.embed = concept_vector
        settings = make_settings(tmp_path, memory={"prompt_budget_tokens": 60, "embeddings_model": "m", "semantic": "endpoint",
                                                   "embeddings_base_url": server.base_url})
        async with open_storage(settings) as storage:
            engine = create_engine(settings, storage, chat_model=ScriptedChatModel(default_script))
            await MemoryRepository(storage.store).apply("7", inserts=[(f, {"guild_id": "1"}) for f in FILLER])
            yield server, storage, engine


async def test_memories_written_without_vectors_are_indexed_off_the_reply_path(tmp_path):
    async with sam_with_filler_and_no_vectors(tmp_path) as (server, _storage, engine):
        for q in ("any croissant?", "any band tonight?"):
            await engine.reply("t", Speaker(user_id="7", name="Sam"), q)
            await engine.semantic.drain()
        await engine.close()
        documents = [r for r in server.embedding_requests if isinstance(r["input"], list) and len(r["input"]) > 1]
        # Indexed once, in the background after the first reply found them without vectors; never again.
        assert len(documents) == 1 and len(documents[0]["input"]) == len(FILLER)
        queries = sorted(t for r in server.embedding_requests if r not in documents
                         for t in (r["input"] if isinstance(r["input"], list) else [r["input"]]))
        # One query vector a reply, and the speaker's name once: the second reply reuses its vector.
        assert len(queries) == 3 and queries.count("Sam") == 1
        # The query: the message first, then the recent turns, newest first (the embedder cuts the end).
        second = next(q for q in queries if q.startswith("any band tonight?"))
        assert second.startswith("any band tonight?\nreply to") and second.endswith("\nany croissant?")


async def test_a_reply_indexes_the_memories_as_they_are_when_the_run_starts_not_as_the_reply_read_them(tmp_path):
    """A reply read Sam's memories, then one of them was deleted (its erasure over before the background run
    began, so no pause stopped it): the run indexes what is there now, and the deleted memory's vector is
    not written back (until 2026-12-06 it was, on SQLite, and stayed on disk)."""
    async with sam_with_filler_and_no_vectors(tmp_path) as (_server, storage, engine):
        repo = MemoryRepository(storage.store)
        read = await repo.list("7")  # what the reply read
        doomed = read[0]
        await repo.apply("7", deletes=[doomed.key])
        assert await engine.semantic.relevance("7", read, "any croissant?") is not None
        await engine.semantic.drain()
        stored = await storage.vectors.get("7")
        await engine.close()
        assert doomed.key not in stored
        assert set(stored) == {m.key for m in read[1:]}


async def test_no_query_vector_while_everything_fits(tmp_path):
    async with FakeOpenAIServer() as server:
        server.embed = concept_vector
        settings = make_settings(tmp_path, memory={"embeddings_model": "m", "semantic": "endpoint", "embeddings_base_url": server.base_url})
        async with open_storage(settings) as storage:
            engine = create_engine(settings, storage, chat_model=ScriptedChatModel(default_script))
            await MemoryRepository(storage.store).apply("7", inserts=[(f, {"guild_id": "1"}) for f in FILLER[:3]])
            await engine.reply("t", Speaker(user_id="7", name="Sam"), "any croissant?")
            await engine.close()
        assert server.embedding_requests == []


async def test_a_cached_vector_is_keyed_by_version_never_by_a_digest_of_the_text_and_follows_the_embedder():
    import hashlib
    from datetime import datetime, timezone

    from langchain_core.embeddings import Embeddings

    from bot.engine.memories.records import StoredMemory
    from bot.engine.recall.vectors import SemanticIndex

    class Cache:
        def __init__(self) -> None:
            self.rows: dict[str, dict[str, tuple[str, bytes]]] = {}

        async def get(self, user_id, embedder=None):
            return dict(self.rows.get(user_id, {}))

        async def put(self, user_id, rows, *, embedder="", texts=None):
            self.rows.setdefault(user_id, {}).update({k: (d, b) for k, d, b in rows})

        async def delete(self, user_id, keys):
            mine = self.rows.get(user_id, {})
            return sum(mine.pop(k, None) is not None for k in keys)

    class Fixed(Embeddings):
        calls = 0

        def embed_documents(self, texts):
            type(self).calls += len(texts)
            return [[1.0, float(len(t))] for t in texts]

        def embed_query(self, text):
            return [1.0, 0.0]

    class Other(Fixed):
        pass

    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    memory = StoredMemory(key="k1", content="my door code is 4417", origin={}, created_at=at, updated_at=at)
    cache = Cache()
    await SemanticIndex(Fixed(), cache).index("42", [memory])
    (version, _vector), = cache.rows["42"].values()
    for guess in ("my door code is 4417", "4417"):
        assert version != hashlib.sha256(guess.encode()).hexdigest()[:16]  # the row confirms no guessed phrase
    assert await SemanticIndex(Fixed(), cache).index("42", [memory]) == 0  # same embedder: nothing to re-make
    assert await SemanticIndex(Other(), cache).index("42", [memory]) == 1  # another embedder: made again
    later = StoredMemory(key="k1", content="my door code is secret", origin={}, created_at=at,
                         updated_at=datetime(2026, 1, 2, tzinfo=timezone.utc))
    assert await SemanticIndex(Other(), cache).index("42", [later]) == 1  # changed text: made again


# ---------------------------------------------------------------- the person's own name is not what matches
class NamedEmbeddings:
    """A tiny model at the edge where a name dominates, as in a small real model: dimensions are the person's
    name (weighted 2), weddings, the commute, and a constant. ``fail_on``: texts it refuses (a rate limit);
    ``gate``: a name waits for it (an embedding in flight)."""

    def __init__(self, fail_on: tuple[str, ...] = (), gate: asyncio.Event | None = None) -> None:
        self.queries: list[str] = []
        self.fail_on = fail_on
        self.gate = gate

    def _vec(self, text: str) -> list[float]:
        t = text.lower()
        return [2.0 * ("saskia" in t), float("wedding" in t or "married" in t), float("commute" in t), 0.1]

    async def aembed_documents(self, texts):
        return [self._vec(t) for t in texts]

    async def aembed_query(self, text):
        self.queries.append(text)
        if text in self.fail_on:
            raise ConnectionError("429 too many requests")
        if self.gate is not None and text == "Saskia":
            await self.gate.wait()
        return self._vec(text)


def _two_memories():
    from datetime import datetime, timezone

    from bot.engine.memories.records import StoredMemory

    when = datetime(2026, 3, 1, tzinfo=timezone.utc)
    return [StoredMemory("a", "Saskia feels hopeful about the long commute", {}, when, when),
            StoredMemory("b", "Ulrich is getting married at a vineyard", {}, when, when)]


def test_without_name_takes_the_names_direction_out_and_keeps_vectors_unit():
    import numpy as np

    from bot.engine.recall.vectors import unit, without_name

    name = unit([1.0, 0.0, 0.0, 0.0])
    query = unit([3.0, 1.0, 0.0, 0.1])  # "Where is Saskia's sibling having the wedding?"
    chatter = unit([3.0, 0.0, 1.0, 0.1])  # "Saskia feels hopeful about the long commute"
    answer = unit([0.0, 1.0, 0.0, 0.1])  # "Ulrich is getting married at a vineyard" (does not name her)
    assert chatter @ query > answer @ query  # the name decides: the wrong memory wins
    q, (c, a, missing) = without_name(query, [chatter, answer, None], name, 1.0)
    assert missing is None  # a memory without a vector stays without one
    assert a @ q > c @ q  # with the name's direction out, the memory about a wedding wins
    assert all(abs(float(np.linalg.norm(v)) - 1.0) < 1e-5 for v in (q, c, a))
    q_half, (c_half, a_half, _) = without_name(query, [chatter, answer, None], name, 0.5)
    assert (c_half @ q_half - a_half @ q_half) < (chatter @ query - answer @ query)  # half way: the gap narrows
    q0, (c0, _a0, _) = without_name(query, [chatter, answer, None], name, 0.0)
    assert np.allclose(q0, query) and np.allclose(c0, chatter)


async def test_the_persons_name_is_embedded_once_and_only_when_asked():
    from datetime import datetime, timezone

    from bot.engine.memories.records import StoredMemory
    from bot.engine.recall.vectors import MemoryVectorCache, SemanticIndex

    when = datetime(2026, 3, 1, tzinfo=timezone.utc)
    memories = [StoredMemory("a", "Saskia feels hopeful about the long commute", {}, when, when),
                StoredMemory("b", "Ulrich is getting married at a vineyard", {}, when, when)]
    model = NamedEmbeddings()
    index = SemanticIndex(model, MemoryVectorCache())  # type: ignore[arg-type]
    await index.index("u", memories)
    plain = await index.relevance("u", memories, "Where is Saskia's sibling having the wedding?")
    assert plain is not None and plain.cosines[0] > plain.cosines[1]  # the name decides
    assert model.queries == ["Where is Saskia's sibling having the wedding?"]
    first = await index.relevance("u", memories, "Where is Saskia's sibling having the wedding?",
                                  about="Saskia", name_share=1.0)
    assert first is not None and first.cosines[1] > first.cosines[0]  # the wedding wins
    await index.relevance("u", memories, "Any wedding news, Saskia?", about="  Saskia ", name_share=1.0)
    assert model.queries.count("Saskia") == 1  # the name's vector is kept, keyed by the name as written
    await index.relevance("u", memories, "Any wedding news?", about="Saskia", name_share=0.0)
    assert model.queries.count("Saskia") == 1 and model.queries[-1] == "Any wedding news?"
    await index.relevance("v", memories, "Any wedding news?", about="Saskia", name_share=1.0)
    assert model.queries.count("Saskia") == 2  # kept per person: another person of the same name is theirs
    async with index.paused("u"):  # an erasure: nothing derived from the person is kept, their name's vector too
        pass
    await index.relevance("u", memories, "Any wedding news?", about="Saskia", name_share=1.0)
    assert model.queries.count("Saskia") == 3


async def test_choose_memories_passes_the_speaker_so_the_answer_that_does_not_name_them_is_chosen():
    from datetime import datetime, timedelta, timezone

    from bot.engine.memories.records import StoredMemory
    from bot.engine.recall import choose_memories
    from bot.engine.recall.choose import line_tokens
    from bot.engine.recall.vectors import MemoryVectorCache, SemanticIndex
    from bot.engine.recall.weights import Weights

    t0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
    chatter = [StoredMemory(f"c{i}", f"Saskia feels hopeful about the long commute, day {i}", {},
                            t0 + timedelta(days=i), t0 + timedelta(days=i)) for i in range(20)]
    before = t0 - timedelta(days=30)  # learned in a conversation of its own (not beside the chatter)
    answer = StoredMemory("w", "Ulrich is getting married at a vineyard next spring", {}, before, before)
    memories = [*chatter, answer]
    index = SemanticIndex(NamedEmbeddings(), MemoryVectorCache())  # type: ignore[arg-type]
    await index.index("u", memories)
    budget = line_tokens(answer) + 2  # room for one line
    ask = dict(user_id="u", index=index, speaker="Saskia")
    with_name = await choose_memories(memories, "Where is my sibling having the wedding?", budget,
                                      weights=Weights(name=0.0), **ask)
    shipped = await choose_memories(memories, "Where is my sibling having the wedding?", budget, **ask)  # 0.4
    assert answer not in with_name.memories and answer in shipped.memories


async def test_when_only_the_name_fails_the_query_still_ranks_by_meaning_and_the_name_is_not_asked_again():
    from bot.engine.recall.vectors import MemoryVectorCache, SemanticIndex

    memories = _two_memories()
    model = NamedEmbeddings(fail_on=("Saskia",))
    index = SemanticIndex(model, MemoryVectorCache())  # type: ignore[arg-type]
    await index.index("u", memories)
    question = "Where is Saskia's sibling having the wedding?"
    plain = await index.relevance("u", memories, question)
    for _ in range(2):
        found = await index.relevance("u", memories, question, about="Saskia", name_share=0.4)
        assert found is not None and found.cosines == plain.cosines  # as if no name were given
    assert index.failures == 0  # not an outage: the embedder-switch sweep and the warning are not triggered
    assert model.queries.count("Saskia") == 1  # remembered as failed for a while, not asked on every reply


async def test_a_name_embedded_while_an_erasure_comes_and_goes_is_not_kept():
    from bot.engine.recall.vectors import MemoryVectorCache, SemanticIndex

    memories = _two_memories()
    gate = asyncio.Event()
    model = NamedEmbeddings(gate=gate)
    index = SemanticIndex(model, MemoryVectorCache())  # type: ignore[arg-type]
    await index.index("u", memories)
    reply = asyncio.create_task(index.relevance("u", memories, "Any wedding news?", about="Saskia", name_share=0.4))
    while "Saskia" not in model.queries:
        await asyncio.sleep(0)
    async with index.paused("u"):  # the erasure starts and ends while the name is being embedded
        pass
    gate.set()
    assert await reply is not None
    await index.relevance("u", memories, "Any wedding news?", about="Saskia", name_share=0.4)
    assert model.queries.count("Saskia") == 2  # the vector made across the erasure was not kept


async def test_hubness_is_measured_with_more_of_the_name_out_and_the_query_comparison_is_unchanged():
    """A short fact that names the person sits near the centre of their memories through the name alone, and
    would be damped as a hub although it is specific; hubness is measured with more of the name out."""
    from datetime import datetime, timedelta, timezone

    from bot.engine.memories.records import StoredMemory
    from bot.engine.recall.vectors import MemoryVectorCache, SemanticIndex

    t0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
    chatter = [StoredMemory(f"c{i}", f"Saskia feels hopeful about the long commute, day {i}", {},
                            t0 + timedelta(days=i), t0 + timedelta(days=i)) for i in range(10)]
    fact = StoredMemory("f", "Saskia got married", {}, t0, t0)
    memories = [*chatter, fact]
    model = NamedEmbeddings()
    index = SemanticIndex(model, MemoryVectorCache())  # type: ignore[arg-type]
    await index.index("u", memories)
    question = "Any news from Saskia?"
    same = await index.relevance("u", memories, question, about="Saskia", name_share=0.4)
    more = await index.relevance("u", memories, question, about="Saskia", name_share=0.4, hub_name_share=0.9)
    assert same is not None and more is not None
    assert more.cosines == same.cosines  # what the query matches does not change
    gap = lambda r: r.hubness[0] - r.hubness[-1]  # noqa: E731 - chatter's centrality over the fact's
    assert gap(more) > 2 * gap(same)  # with more of the name in, the fact looks far more like a hub
    model.queries.clear()
    only_hubs = await index.relevance("u", memories, question, about="Saskia", name_share=0.0, hub_name_share=0.9)
    assert only_hubs is not None and gap(only_hubs) > 2 * gap(same)  # the name is fetched for hubness alone too
    assert "Saskia" not in model.queries  # kept from before: embedded once per person and name


async def test_choose_memories_measures_hubs_with_the_shipped_share_of_the_name_out():
    from datetime import datetime, timezone

    from bot.engine.memories.records import StoredMemory
    from bot.engine.recall import choose_memories
    from bot.engine.recall.vectors import MemoryVectorCache, SemanticIndex
    from bot.engine.recall.weights import DEFAULT_WEIGHTS

    class Spy(SemanticIndex):
        asked: dict = {}

        async def relevance(self, *args, **kwargs):
            Spy.asked = kwargs
            return await super().relevance(*args, **kwargs)

    when = datetime(2026, 3, 1, tzinfo=timezone.utc)
    memories = [StoredMemory(f"m{i}", f"Saskia feels hopeful about the long commute, day {i}", {}, when, when)
                for i in range(40)]
    index = Spy(NamedEmbeddings(), MemoryVectorCache())  # type: ignore[arg-type]
    await index.index("u", memories)
    await choose_memories(memories, "How is my commute?", 30, user_id="u", index=index, speaker="Saskia")
    assert Spy.asked == {"about": "Saskia", "name_share": DEFAULT_WEIGHTS.name,
                         "hub_name_share": DEFAULT_WEIGHTS.hub_name, "prior": ()}
    assert DEFAULT_WEIGHTS.hub_name > DEFAULT_WEIGHTS.name


async def test_a_memory_taught_edited_or_imported_gets_its_vector_at_once_not_at_the_next_reply(tmp_path):
    """Found in review 2026-12-07: only extraction indexed what it wrote. A memory from /memories remember,
    edit or import had no vector until a reply noticed, and at that reply it counted as typical (the median
    cosine): at 1,000 memories, "what's my PIN hint?" just after teaching it did not choose it."""
    from bot.engine import Actor, export_file, parse_import

    async with sam_with_filler_and_no_vectors(tmp_path) as (_server, storage, engine):
        me = Actor("user", "7")
        taught = await engine.remember("7", "Sam's PIN hint is the cat's name", {}, by=me)
        await engine.semantic.drain()
        cached = await storage.vectors.get("7", engine.semantic.embedder)
        assert taught in cached
        await engine.edit_memory("7", taught, "Sam's PIN hint is the dog's name", {}, by=me)
        await engine.semantic.drain()
        edited = await engine.find_memory("7", taught)
        assert (await storage.vectors.get("7", engine.semantic.embedder))[taught][0] != cached[taught][0]  # a new version
        data, _ending = export_file(await engine.export("7"))
        await engine.delete_memories("7", [taught], by=me)
        memories, history = parse_import(data, "7")
        assert await engine.restore_memories("7", memories, history, by=me)
        await engine.semantic.drain()
        back = await storage.vectors.get("7", engine.semantic.embedder)
        assert taught in back and edited is not None
        await engine.close()
