"""Semantic relevance: one unit vector per memory text, computed when memories are written.

Vectors are cached per person, keyed by memory and a *version* (the memory's key, when it was last changed,
its length and which embedder made the vector: never a digest of its text, from which a guessed phrase
could be confirmed; see ``version``), in storage's vector cache
(``bot.engine.stores.VectorCache``; the benchmark uses an in-memory one), and compared with one matrix
product: no vector extension is needed, so this works on a Python whose ``sqlite3`` cannot load sqlite-vec.

Each row records which embedder made it (``embedder_name``), and only the current embedder's rows are ever
read for scoring: a query vector is never compared with a vector of another space. After a switch of
embedder (``memory.local_embedder``, another endpoint model), ``remake_others`` runs in the background from
start-up: each person with rows of another embedder is indexed again and those rows are deleted. Until a
person's turn comes, their memories simply have no vector (ranked by words and recency) and the reply that
finds them so queues them first.

The reply path (``scores``) embeds one text, the query, and only the caller decides when (when a person's
memories exceed the budget); the first time a process sees a speaker's name it embeds that too, once
(``relevance``, ``without_name``). Memory vectors are made by ``index``, which the engine runs after
memories are written, off the reply path. A memory the reply finds without a vector (written by a path that
did not index it, or while the embedder was down) gets no semantic score this time and is indexed in the
background for the next reply. Any failure of the embedder is logged once and relevance falls back to
lexical and recency.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import AsyncIterator, Awaitable, Callable, Mapping, Sequence

import numpy as np
from langchain_core.embeddings import Embeddings

from bot.engine.memories.records import StoredMemory
from bot.engine.stores import VectorCache

log = logging.getLogger(__name__)

NAME_RETRY_SECONDS = 300.0  # after the speaker's name failed to embed, compare without taking it out meanwhile


class MemoryVectorCache:
    """A ``VectorCache`` in a dict, for the benchmark and for tools that open no storage."""

    def __init__(self) -> None:
        self._rows: dict[str, dict[str, tuple[str, bytes, str]]] = {}  # person -> key -> (version, vector, embedder)

    async def get(self, user_id: str, embedder: str | None = None) -> dict[str, tuple[str, bytes]]:
        return {k: (d, v) for k, (d, v, e) in self._rows.get(user_id, {}).items() if embedder in (None, e)}

    async def put(self, user_id: str, rows: list[tuple[str, str, bytes]], *, embedder: str = "",
                  texts: Mapping[str, str] | None = None) -> None:
        self._rows.setdefault(user_id, {}).update({k: (d, v, embedder) for k, d, v in rows})

    async def delete(self, user_id: str, keys: list[str]) -> int:
        rows = self._rows.get(user_id, {})
        return sum(rows.pop(k, None) is not None for k in set(keys))

    async def delete_others(self, user_id: str, embedder: str) -> int:
        rows = self._rows.get(user_id, {})
        others = [k for k, (_d, _v, e) in rows.items() if e != embedder]
        return sum(rows.pop(k) is not None for k in others)

    async def people_with_others(self, embedder: str, *, after: str = "", limit: int = 100) -> list[str]:
        people = sorted(u for u, rows in self._rows.items() if u > after and any(e != embedder for _d, _v, e in rows.values()))
        return people[:limit]


def unit(vector: Sequence[float]) -> np.ndarray:
    """The vector scaled to length 1, as float32 (what the cache stores)."""
    v = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(v)) or 1.0
    return v / norm


def version(memory: StoredMemory, embedder: str) -> str:
    """What a cached vector was made from: this memory as last changed, by this embedder.

    No text goes into it, so a row proves nothing about what a memory said (a digest of the text would let
    anyone with the files confirm a guessed phrase). Every change of a memory's text moves ``updated_at``
    (and a redaction its length); a vector of another embedder never matches, so switching embedders
    re-makes the vectors in the background instead of mixing two spaces.
    """
    raw = f"{memory.key}|{memory.updated_at.isoformat()}|{len(memory.content)}|{embedder}"
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:16]


def embedder_name(embeddings: Embeddings) -> str:
    """Which model makes the vectors: its ``embedder_id`` when it has one (the embedded models), else the
    class and the model it names when it names one (an endpoint's model)."""
    given = getattr(embeddings, "embedder_id", None)
    if isinstance(given, str) and given:
        return given
    model = getattr(embeddings, "model", None) or getattr(embeddings, "model_name", None)
    return f"{type(embeddings).__name__}:{model}" if isinstance(model, str) else type(embeddings).__name__


def _cosines(query: np.ndarray, vectors: list[np.ndarray | None]) -> list[float | None]:
    present = [v for v in vectors if v is not None]
    if not present:
        return [None] * len(vectors)
    values = iter((np.stack(present) @ query).tolist())
    return [None if v is None else next(values) for v in vectors]


class SemanticIndex:
    """Memory vectors written ahead of time, and cosine scores against one query vector at reply time."""

    def __init__(self, embeddings: Embeddings, cache: VectorCache, *, batch_size: int = 64,
                 read: Callable[[str], Awaitable[Sequence[StoredMemory]]] | None = None,
                 waiting: Callable[[], AbstractAsyncContextManager[object]] = nullcontext) -> None:
        """``read(user_id)``: the person's memories as they are now. A reply that finds memories without a
        vector indexes what ``read`` returns when the run starts, not the list the reply read: a memory
        deleted in between (an erasure that ended before the run began, so its pause stopped nothing)
        would otherwise get its vector written back after it was gone (without ``read``: that list).

        ``waiting()`` is entered around the reply's embeddings (``TurnScopes.waiting``): an embeddings
        endpoint can take as long as a model call, and a turn on PostgreSQL must not keep its pooled
        connection meanwhile (six slow replies held the default pool, and erasures' claims starved)."""
        self.read = read
        self.waiting = waiting
        self.embeddings = embeddings
        self.embedder = embedder_name(embeddings)
        self.cache = cache
        self.batch_size = batch_size
        self._warned = False
        self.failures = 0  # how many times the embedder (or the cache) failed: the switch's sweep stops on one
        self._background: dict[str, asyncio.Task] = {}
        self._paused: dict[str, int] = {}  # people being erased: no vectors are written for them meanwhile
        self._again: dict[str, Sequence[StoredMemory] | Callable[[], Awaitable[Sequence[StoredMemory]]]] = {}  # see index_later
        self.query_embeddings = 0  # how many query vectors the reply path computed (a benchmark figure)
        # (person, name) -> (its vector, or None after a failure, and when to try again): see ``relevance``
        self._names: OrderedDict[tuple[str, str], tuple[np.ndarray | None, float]] = OrderedDict()
        self._erasures = 0  # how many holds ``paused`` has begun: a name embedded across one is not kept
        self._priors: dict[tuple[str, ...], np.ndarray] = {}  # see ``_prior_centre``
        self._priors_retry: dict[tuple[str, ...], float] = {}  # monotonic time before which a failed one waits

    def _failed(self, exc: BaseException) -> None:
        """One warning an outage (not one a process: a blip at start-up used it up, and a key revoked a
        week later left recall on word matching for good with nothing in the log)."""
        self.failures += 1
        if not self._warned:
            log.warning("embeddings failed (%r); ranking memories by lexical relevance and recency only", exc)
            self._warned = True

    def _worked(self) -> None:
        if self._warned:
            log.info("embeddings work again")
            self._warned = False

    async def index(self, user_id: str, memories: Sequence[StoredMemory], *, complete: bool = False) -> int:
        """Compute and store vectors for the memories whose text has none yet; return how many.

        Runs after writes, never on the reply path. Raises nothing: a failing embedder is logged and the
        memories are indexed on a later write or reply. ``complete``: ``memories`` are all the person's, so
        a cached row of any other key (a memory gone, its row left by a crash) is deleted, and so, once every
        memory has a vector of this embedder, is every row another embedder made.
        """
        if user_id in self._paused:
            return 0
        try:
            cached = await self.cache.get(user_id, self.embedder)
            if complete:
                gone = sorted(set(cached) - {m.key for m in memories})
                if gone:
                    await self.cache.delete(user_id, gone)
            stale = [m for m in memories if cached.get(m.key, ("", b""))[0] != version(m, self.embedder)]
            for start in range(0, len(stale), self.batch_size):
                chunk = stale[start:start + self.batch_size]
                fresh = await self.embeddings.aembed_documents([m.content for m in chunk])
                if user_id in self._paused:  # an erasure began while this batch was being embedded
                    return 0
                rows = [(m.key, version(m, self.embedder), unit(v).tobytes()) for m, v in zip(chunk, fresh)]
                await self.cache.put(user_id, rows, embedder=self.embedder, texts={m.key: m.content for m in chunk})
            if complete:
                await self.cache.delete_others(user_id, self.embedder)
            if stale:
                self._worked()
            return len(stale)
        except Exception as exc:  # noqa: BLE001 - indexing is an optimisation; the reply path falls back
            self._failed(exc)
            return 0

    def index_later(
        self, user_id: str, memories: Sequence[StoredMemory] | Callable[[], Awaitable[Sequence[StoredMemory]]]
    ) -> None:
        """Index in the background (at most one run per person at a time).

        ``memories`` is the list, or an async function that reads it when the run starts (after a write).
        Asked while a run is going, the run goes again once it ends, with the newest ``memories``: it read
        its list before this write, and what this write added would otherwise wait for a reply to notice it.
        """
        if user_id in self._paused:
            return
        running = self._background.get(user_id)
        if running is not None and not running.done():
            self._again[user_id] = memories
            return

        async def run() -> int:
            done, source = 0, memories
            while True:
                try:
                    current = await source() if callable(source) else source
                except Exception as exc:  # noqa: BLE001 - the database is down: a later write or reply asks again
                    log.debug("could not read user %s's memories to index them: %r", user_id, exc)
                    return done
                done += await self.index(user_id, list(current), complete=callable(source))
                source = self._again.pop(user_id, None)
                if source is None or user_id in self._paused:
                    return done

        task = asyncio.create_task(run(), name=f"index-memories:{user_id}")
        self._background[user_id] = task
        task.add_done_callback(lambda t, u=user_id: self._background.pop(u, None) if self._background.get(u) is t else None)

    @asynccontextmanager
    async def paused(self, user_id: str) -> AsyncIterator[None]:
        """No vectors are written for the person inside (an erasure): a background run is stopped first.

        Vectors are derived from memory text, so one written after an erasure read the memories would
        bring erased text back in another form.
        """
        self._paused[user_id] = self._paused.get(user_id, 0) + 1
        self._erasures += 1  # a name being embedded now is not kept (``_name_vector``)
        for key in [k for k in self._names if k[0] == user_id]:  # their name's vector goes with their data
            del self._names[key]
        try:
            self._again.pop(user_id, None)
            running = self._background.get(user_id)
            if running is not None and not running.done():
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)
            yield
        finally:
            self._paused[user_id] -= 1
            if not self._paused[user_id]:
                del self._paused[user_id]

    async def remake_others(self, read: Callable[[str], Awaitable[Sequence[StoredMemory]]], *, page: int = 100) -> int:
        """Index again everyone who has vectors another embedder made, deleting those; return how many people.

        Runs in the background from start-up (a switch of embedder), one person at a time, as the same kind
        of background run a write starts (so an erasure's ``paused`` stops it for its person). Stops at the
        first failure of the embedder or the cache (logged once); the next start-up carries on.
        """
        after, done = "", 0
        while True:
            try:
                people = await self.cache.people_with_others(self.embedder, after=after, limit=page)
            except Exception as exc:  # noqa: BLE001 - the next start-up tries again; replies are unaffected
                self._failed(exc)
                return done
            if not people:
                if done:
                    log.info("memory vectors of another embedder made again for %d people (%s)", done, self.embedder)
                return done
            for user in people:
                if user in self._paused:  # an erasure: its person is seen again on the next start-up
                    continue
                failures = self.failures
                await self._run_now(user, read)
                if self.failures != failures:
                    return done
                done += 1
            after = people[-1]

    async def _run_now(self, user_id: str, read: Callable[[str], Awaitable[Sequence[StoredMemory]]]) -> None:
        """One complete background run for the person (after any run already going), awaited."""
        running = self._background.get(user_id)
        if running is not None and not running.done():
            await asyncio.gather(running, return_exceptions=True)
        self.index_later(user_id, lambda: read(user_id))
        task = self._background.get(user_id)
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)

    async def drain(self) -> None:
        """Wait for background indexing (shutdown, tests)."""
        tasks = list(self._background.values())
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def scores(self, user_id: str, memories: Sequence[StoredMemory], query: str) -> list[float | None] | None:
        """Cosine of each memory with the query (None for a memory not indexed yet), or None when unavailable.

        Embeds exactly one text, the query. Memories without a vector are indexed in the background.
        """
        found = await self.relevance(user_id, memories, query)
        return None if found is None else found.cosines

    async def relevance(self, user_id: str, memories: Sequence[StoredMemory], query: str, *,
                        about: str | None = None, name_share: float = 0.0,
                        hub_name_share: float | None = None, prior: tuple[str, ...] = ()) -> Relevance | None:
        """The query's cosine with each memory, each memory's hubness, and the vectors for a second round.

        Embeds one text, the query; everything else is matrix products over the stored vectors (about a
        millisecond for 1,000). Memories without a vector are indexed in the background.

        ``about``: whose memories these are (the speaker's name). ``name_share`` of the direction of that name's
        own vector is taken out of the query and of every memory vector before they are compared (see
        ``without_name``). The name's vector is embedded once per person and name and kept (an LRU of 1,024,
        emptied of a person by ``paused``), so a reply embeds a second text only the first time.

        ``hub_name_share`` (default: ``name_share``): how much of the name is out when each memory's hubness
        is measured. With more of the name in, centrality partly measures how much of a memory is the
        person's name: a short fact that names them ("Kolja joined a chess club") sits nearer the centre of
        their memories than a long sentence of chatter, and would be damped as a hub although it is specific.

        ``prior``: also each memory's cosine with the centre of these general sentences (the disposition or
        activity sentences of ``recall.dispositions``: embedded once per index, by the first question that
        asks for them).
        """
        if not memories or not query.strip():
            return None
        try:
            cached = await self.cache.get(user_id, self.embedder)  # this space only: never another embedder's
            self.query_embeddings += 1
            wanted = max(name_share, hub_name_share or 0.0) > 0
            async with self.waiting():
                if wanted and about and any(ch.isalnum() for ch in about):  # requested together
                    raw, named = await asyncio.gather(self.embeddings.aembed_query(query),
                                                      self._name_vector(user_id, about), return_exceptions=True)
                else:
                    raw, named = await self.embeddings.aembed_query(query), None
            if isinstance(raw, BaseException):
                raise raw
            query_vec = unit(raw)
            self._worked()
        except Exception as exc:  # noqa: BLE001 - relevance degrades to lexical, the reply goes on
            self._failed(exc)
            return None
        name_vec = named if isinstance(named, np.ndarray) and np.isfinite(named).all() else None
        if isinstance(named, BaseException):  # only the name failed: compare without taking it out, this once
            log.debug("the speaker's name could not be embedded (%r); their name is not taken out this time", named)
        vectors: list[np.ndarray | None] = []
        for m in memories:
            row = cached.get(m.key)
            v = np.frombuffer(row[1], dtype=np.float32) if row is not None and row[0] == version(m, self.embedder) else None
            vectors.append(v if v is not None and v.shape == query_vec.shape else None)
        if any(v is None for v in vectors):
            read = self.read
            self.index_later(user_id, memories if read is None else (lambda: read(user_id)))
        hub_vectors = vectors
        if name_vec is not None and name_vec.shape == query_vec.shape:
            raw_vectors = vectors
            query_vec, vectors = without_name(query_vec, raw_vectors, name_vec, min(name_share, 0.9))
            hub_vectors = vectors
            if hub_name_share is not None and hub_name_share != name_share:
                _, hub_vectors = without_name(query_vec, raw_vectors, name_vec, min(max(hub_name_share, 0.0), 0.9))
        centre = await self._prior_centre(prior) if prior else None
        near_prior = _cosines(centre, vectors) if centre is not None and centre.shape == query_vec.shape else None
        return Relevance(vectors, _cosines(query_vec, vectors), _hubness(hub_vectors), near_prior)

    async def _prior_centre(self, sentences: tuple[str, ...]) -> np.ndarray | None:
        """The centre of these sentences' vectors, embedded once, by the first question that asks for them
        (a few short sentences). None while the embedder fails: the question is ranked without it, and the
        sentences are asked for again ``NAME_RETRY_SECONDS`` later, not on every question."""
        if sentences not in self._priors:
            if time.monotonic() < self._priors_retry.get(sentences, 0.0):
                return None
            try:
                async with self.waiting():  # (once per index and set of sentences)
                    vectors = await self.embeddings.aembed_documents(list(sentences))
                self._priors[sentences] = unit(np.sum([unit(v) for v in vectors], axis=0))
            except Exception as exc:  # noqa: BLE001 - an optional signal: the choice goes on without it
                self._priors_retry[sentences] = time.monotonic() + NAME_RETRY_SECONDS
                log.debug("the prior's sentences could not be embedded: %r", exc)
                return None
        return self._priors[sentences]

    async def _name_vector(self, user_id: str, name: str) -> np.ndarray:
        """The unit vector of a person's name alone, embedded once per person and name (raises what the
        embedder raises). Kept per person so that an erasure (``paused``) drops it with the rest.

        A failure is remembered for ``NAME_RETRY_SECONDS``: an endpoint that refuses the name (a rate limit on
        the second request) is not asked again, and waited for, on every reply meanwhile.
        """
        key = (user_id, " ".join(name.split()))
        found = self._names.get(key)
        if found is not None:
            self._names.move_to_end(key)
            vec, retry_at = found
            if vec is not None:
                return vec
            if time.monotonic() < retry_at:
                raise LookupError("the name's embedding failed a moment ago")
        erasures = self._erasures

        def keep(value: np.ndarray | None, retry_at: float) -> None:
            if user_id not in self._paused and self._erasures == erasures:  # no erasure came meanwhile
                self._remember_name(key, value, retry_at)

        try:
            vec = unit(await self.embeddings.aembed_query(key[1]))
        except Exception:
            keep(None, time.monotonic() + NAME_RETRY_SECONDS)
            raise
        keep(vec, 0.0)
        return vec

    def _remember_name(self, key: tuple[str, str], vec: np.ndarray | None, retry_at: float) -> None:
        self._names[key] = (vec, retry_at)
        self._names.move_to_end(key)
        while len(self._names) > 1024:
            self._names.popitem(last=False)


def without_name(query: np.ndarray, vectors: list[np.ndarray | None], name: np.ndarray,
                 share: float) -> tuple[np.ndarray, list[np.ndarray | None]]:
    """The query and memory vectors with ``share`` of the name's direction taken out, each made unit again.

    Why: every memory of a person is about that person, and most say their name ("Saskia's little brother is
    called Ulrich"), as does the question ("Where is Saskia's sibling having the wedding?"). In a small model
    the name then carries much of each cosine. A fact that does not name the person ("Ulrich is getting
    married at a vineyard") ranks near the bottom, although it is the answer. The name tells nothing about
    which of the person's memories matters. Measured on the hard set's tune split (docs/decisions.md, issue
    20, item 16), taking 0.4 of it out lifts "all" most, on questions that need several facts.
    """
    present = [i for i, v in enumerate(vectors) if v is not None]
    matrix = np.stack([query, *(vectors[i] for i in present)])  # the query is row 0, projected the same way
    matrix = matrix - share * np.outer(matrix @ name, name)
    matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
    result: list[np.ndarray | None] = [None] * len(vectors)
    for row, i in enumerate(present, start=1):
        result[i] = matrix[row]
    return matrix[0], result


class Relevance:
    """What one query vector says about a person's memories, and what their own vectors say of each other.

    - ``cosines``: each memory's cosine with the query (None: no vector yet);
    - ``hubness``: each memory's cosine with the mean of all the person's vectors. A memory close to the
      centre of everything the person said ("has been busy lately") is close to every question too, and
      wins for questions it does not answer; the choice damps it by this figure;
    - ``near(seeds)``: each memory's cosine with the centre of a few chosen memories, the second round of
      the choice (an answer's other facts sit near the ones that matched: the other hobbies, the rest of the
      trip), with no second embedding.
    """

    def __init__(self, vectors: list[np.ndarray | None], cosines: list[float | None],
                 hubness: list[float | None], prior: list[float | None] | None = None) -> None:
        self.vectors = vectors
        self.cosines = cosines
        self.hubness = hubness
        self.prior = prior  # each memory's cosine with the prior's sentences (when the question asks for one)

    def near(self, seeds: Sequence[int], weights: Sequence[float] | None = None) -> list[float | None] | None:
        """Each memory's cosine with the (weighted) centre of the seed memories' vectors (None: no seed has one)."""
        picked = [(self.vectors[i], 1.0 if weights is None else max(0.0, weights[k])) for k, i in enumerate(seeds)]
        picked = [(v, w) for v, w in picked if v is not None and w > 0]
        if not picked:
            return None
        centre = unit(sum(w * v for v, w in picked))
        return _cosines(centre, self.vectors)


def _hubness(vectors: list[np.ndarray | None]) -> list[float | None]:
    present = [v for v in vectors if v is not None]
    if len(present) < 2:
        return [None] * len(vectors)
    centre = unit(np.stack(present).mean(axis=0))
    return _cosines(centre, vectors)
