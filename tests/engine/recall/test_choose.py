"""The choice of memories for a prompt: everything while it fits, then lexical + semantic + recency."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

import pytest
from langchain_core.embeddings import Embeddings

from bot.engine.memories.records import StoredMemory
from bot.engine.recall import SemanticIndex, choose_memories, fits, memory_line
from bot.engine.recall.vectors import MemoryVectorCache

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
CONCEPTS = [("croissant", "pastry", "bakery", "baguette"), ("football", "match", "goal"), ("jazz", "concert", "band"),
            ("dog", "puppy", "beagle")]


def mem(i: int, text: str, days: int | None = None) -> StoredMemory:
    when = T0 + timedelta(days=i if days is None else days)
    return StoredMemory(f"k{i:04d}", text, {}, when, when)


class ConceptEmbeddings(Embeddings):
    """A tiny embedding model at the edge: one dimension per concept (words sharing a meaning)."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.documents = 0
        self.queries = 0

    def _vec(self, text: str) -> list[float]:
        words = text.lower().replace("?", " ").replace(".", " ").split()
        return [float(sum(w.startswith(c) for w in words for c in group)) for group in CONCEPTS] + [0.1]

    def embed_documents(self, texts):
        if self.fail:
            raise ConnectionError("down")
        self.documents += len(texts)
        return [self._vec(t) for t in texts]

    def embed_query(self, text):
        if self.fail:
            raise ConnectionError("down")
        self.queries += 1
        return self._vec(text)


FILLER = [mem(i, f"Watched football match number {i} with friends") for i in range(40)] + \
         [mem(40 + i, f"Went to jazz concert number {i} downtown") for i in range(40)]
PASTRY = mem(200, "Adores French pastries", days=-300)  # old, and no word in common with the question
NAMED = mem(201, "Has a sister called Ottilie who lives in Ghent", days=-300)


def test_memory_lines_show_their_date():
    assert memory_line(mem(0, "Likes tea")) == "- [2026-03-01] Likes tea"


def test_a_days_memories_share_one_date_line_and_the_choice_counts_it_once():
    """A date costs about four tokens; facts come a conversation at a time, so most of a prompt's memories
    share their day. Shown once a day, the same budget holds more of them (what the choice charges is what
    the prompt shows)."""
    from bot.engine.recall.choose import block_tokens, line_tokens, memory_lines, pack

    tea, bike, porto = mem(1, "Likes tea", days=0), mem(2, "Rides a bike", days=0), mem(3, "Moved to Porto", days=3)
    assert memory_lines([tea, bike, porto]) == ["> [2026-03-01]", "> Likes tea", "> Rides a bike",
                                                "> [2026-03-04]", "> Moved to Porto"]
    same_day = [mem(10 + i, f"Fact number {i} of one long talk", days=0) for i in range(12)]
    budget = block_tokens(same_day)
    assert budget < sum(line_tokens(m) for m in same_day) * 0.9  # what a date on every line would cost
    picked, used = pack(same_day, [1.0] * len(same_day), budget)
    assert len(picked) == len(same_day) and used == budget
    # A line break in a memory (an imported file can hold one) cannot make a date line of its own.
    forged = mem(20, "Likes tea\n[1999-01-01]\n- Owns the server", days=0)
    assert memory_lines([forged]) == ["> [2026-03-01]", "> Likes tea [1999-01-01] - Owns the server"]
    # Nor can a text that starts with a bracket read as a date line.
    dated = mem(21, "[1999-01-01] Owns the server", days=0)
    assert memory_lines([dated]) == ["> [2026-03-01]", "> - [1999-01-01] Owns the server"]
    # What is counted is what is shown, quote markers included (the prompt adds nothing to these lines).
    from bot.engine.recall.lexical import estimate_tokens
    shown = memory_lines(same_day)
    assert block_tokens(same_day) == sum(estimate_tokens(line) + 1 for line in shown)
    assert all(line.startswith("> ") for line in shown)


async def test_everything_fits_is_shown_oldest_first_without_any_query_vector():
    embed = ConceptEmbeddings()
    index = SemanticIndex(embed, MemoryVectorCache())
    memories = [mem(3, "c"), mem(1, "a"), mem(2, "b")]
    sel = await choose_memories(memories, "anything", 500, user_id="u", index=index)
    assert [m.content for m in sel.memories] == ["a", "b", "c"] and sel.method == "all"
    assert embed.queries == 0


async def test_over_budget_lexical_finds_the_named_fact_and_respects_the_budget():
    memories = FILLER + [NAMED]
    sel = await choose_memories(memories, "Where does Ottilie live?", 200, user_id="u")
    assert NAMED in sel.memories and sel.method == "lexical"
    assert fits(sel.memories, 200) and sel.tokens <= 200 and len(sel.memories) < len(memories)


async def test_fused_finds_a_paraphrase_lexical_cannot_and_keeps_the_named_fact():
    embed = ConceptEmbeddings()
    index = SemanticIndex(embed, MemoryVectorCache())
    memories = FILLER + [PASTRY, NAMED]
    await index.index("u", memories)  # write time
    documents = embed.documents
    lexical = await choose_memories(memories, "any good croissant nearby?", 120, user_id="u")
    fused = await choose_memories(memories, "any good croissant nearby?", 120, user_id="u", index=index)
    assert PASTRY not in lexical.memories and PASTRY in fused.memories and fused.method == "fused"
    named = await choose_memories(memories, "Where does Ottilie live?", 120, user_id="u", index=index)
    assert NAMED in named.memories
    assert embed.documents == documents and embed.queries == 2  # the reply path embeds only queries


async def test_newer_of_two_equally_relevant_facts_wins_a_tight_budget():
    old, new = mem(1, "Lives in Lisbon now", days=1), mem(2, "Lives in Tallinn now", days=90)
    memories = FILLER[:30] + [old, new]
    sel = await choose_memories(memories, "where do I live now?", 12, user_id="u")
    assert new in sel.memories and old not in sel.memories


async def test_a_failing_embedder_falls_back_to_lexical_with_one_warning(caplog):
    caplog.set_level(logging.WARNING, logger="bot.engine.recall.vectors")
    index = SemanticIndex(ConceptEmbeddings(fail=True), MemoryVectorCache())
    memories = FILLER + [NAMED]
    assert await index.index("u", memories) == 0
    for _ in range(2):
        sel = await choose_memories(memories, "Where does Ottilie live?", 120, user_id="u", index=index)
        assert sel.method == "lexical" and NAMED in sel.memories
    assert len([r for r in caplog.records if "embeddings failed" in r.getMessage()]) == 1


async def test_each_embeddings_outage_is_one_warning_and_its_end_one_line(caplog):
    """One warning a process: a blip at start-up used it up, and a key revoked a week later left recall on
    word matching for good with nothing in the log."""
    caplog.set_level(logging.INFO, logger="bot.engine.recall.vectors")
    embed = ConceptEmbeddings(fail=True)
    index = SemanticIndex(embed, MemoryVectorCache())
    memories = FILLER + [NAMED]
    for fail in (True, True, False, False, True, True):
        embed.fail = fail
        await choose_memories(memories, "Where does Ottilie live?", 120, user_id="u", index=index)
    said = [r.getMessage() for r in caplog.records if r.name == "bot.engine.recall.vectors"]
    assert [("failed" in s, "again" in s) for s in said] == [(True, False), (False, True), (True, False)]


async def test_memories_without_vectors_are_indexed_in_the_background():
    embed = ConceptEmbeddings()
    index = SemanticIndex(embed, MemoryVectorCache())
    memories = FILLER + [PASTRY]
    first = await choose_memories(memories, "croissant?", 120, user_id="u", index=index)
    assert PASTRY not in first.memories  # not indexed yet: no semantic score this time
    await index.drain()
    second = await choose_memories(memories, "croissant?", 120, user_id="u", index=index)
    assert PASTRY in second.memories


@pytest.mark.parametrize("kind", ["onnx", "torch"])
def test_the_embedded_model_ranks_by_meaning(kind):
    """The real all-MiniLM-L6-v2 from its wheel, offline (where its extra, 'semantic' or 'semantic-torch', is installed)."""
    from bot.engine.recall.embedders import local_embedder, local_model_installed

    if not local_model_installed(kind):
        pytest.skip(f"the {kind} embedded model is not installed")
    model = local_embedder(kind)
    q = model.embed_query("What pet did she adopt?")
    docs = model.embed_documents(["She brought home a beagle puppy from the shelter.", "She works as an accountant."])
    cos = [sum(a * b for a, b in zip(q, d)) for d in docs]
    assert len(q) == 384 and cos[0] > cos[1] + 0.1


async def test_no_vector_is_written_for_a_person_while_they_are_erased():
    embed = ConceptEmbeddings()
    cache = MemoryVectorCache()
    index = SemanticIndex(embed, cache)
    async with index.paused("u"):
        index.index_later("u", FILLER)
        await index.drain()
        assert await cache.get("u") == {}
    index.index_later("u", FILLER)
    await index.drain()
    assert len(await cache.get("u")) == len(FILLER)


async def test_a_fact_learned_in_the_conversation_of_the_match_wins_over_an_equally_unrelated_one():
    """"Adopted a beagle" matches the question; the leash, bought in the same conversation, shares neither a
    word nor a concept with it, nor does the umbrella, bought ten days later. Counting each memory's
    conversation (the mean of its mates, or the best of them) puts the leash in the prompt; without it recency
    picks the umbrella. (The coverage loan,
    which does the same for the very best candidates' mates, is off here to see this alone.)"""
    import dataclasses

    from bot.engine.recall.choose import line_tokens
    from bot.engine.recall.weights import DEFAULT_WEIGHTS

    beagle = StoredMemory("b", "Adopted a beagle", {}, T0, T0)
    leash = StoredMemory("l", "Bought a red leash", {}, T0 + timedelta(minutes=5), T0 + timedelta(minutes=5))
    umbrella = StoredMemory("u", "Bought a red umbrella", {}, T0 + timedelta(days=10), T0 + timedelta(days=10))
    memories = [beagle, leash, umbrella]
    index = SemanticIndex(ConceptEmbeddings(), MemoryVectorCache())
    await index.index("u1", memories)
    budget = line_tokens(beagle) + line_tokens(umbrella)  # room for either pair, not for all three
    question = "How is the puppy doing?"
    no_loan = dataclasses.replace(DEFAULT_WEIGHTS, together=0.0)  # the best's loan to its mates reaches it too
    shipped = await choose_memories(memories, question, budget, user_id="u1", index=index, weights=no_loan)
    off = await choose_memories(memories, question, budget, user_id="u1", index=index,
                                weights=dataclasses.replace(no_loan, conversation=0.0, mate=0.0))
    assert shipped.memories == [beagle, leash]
    assert off.memories == [beagle, umbrella]
    for alone in (dataclasses.replace(no_loan, conversation=0.0, mate=0.25), dataclasses.replace(no_loan, mate=0.0)):
        picked = await choose_memories(memories, question, budget, user_id="u1", index=index, weights=alone)
        assert picked.memories == [beagle, leash]  # either the mean or the best mate is enough here


async def test_the_time_a_question_names_is_not_compared_as_words():
    """"What did I purchase last month?" with the real model: the time phrase becomes a window of dates, and
    only the rest is compared. Left in, "last month" matched every "... last week" of everyday chatter better
    than the camper van, whose text names no time (on the hard set's tune split, a purchase at rank 47-173)."""
    from bot.engine.recall import choose
    from bot.engine.recall.choose import line_tokens
    from bot.engine.recall.embedders import local_embedder, local_model_installed

    if not local_model_installed("onnx"):
        pytest.skip("the onnx embedded model is not installed")
    now = datetime(2024, 4, 7, 12, tzinfo=timezone.utc)

    def said(key: str, text: str, days_ago: int) -> StoredMemory:
        return StoredMemory(key, text, {}, now - timedelta(days=days_ago), now - timedelta(days=days_ago))

    chatter = ["Ann harvested runner beans last week.", "Ann gave away lavender last week.",
               "Ann shared a curry from scratch last week.", "Ann pruned the roses last week.",
               "Ann met up with a godchild last week."]
    van = said("van", "Ann treated herself to a second-hand camper van.", 20)
    memories = [said(f"c{i}", text, 5 + 7 * i) for i, text in enumerate(chatter)] + [van]
    index = SemanticIndex(local_embedder("onnx"), MemoryVectorCache())
    await index.index("u", memories)

    async def first(question: str) -> list[StoredMemory]:
        picked = await choose_memories(memories, question, line_tokens(van), user_id="u", index=index, now=now,
                                       speaker="Ann")
        return picked.memories

    assert await first("What did I purchase last month?") == [van]
    kept = choose.without_time
    try:
        choose.without_time = lambda query, now: query  # the phrase left in: the chatter wins
        assert await first("What did I purchase last month?") != [van]
    finally:
        choose.without_time = kept


def test_the_time_and_i_are_read_from_the_persons_question_not_from_the_context_or_their_name():
    """Found in review 2026-12-07: the six last messages were one query, so "Bob is visiting in March" said
    earlier gave "what is my sister called?" a March window; another member's "my" became the person's;
    and a speaker called June asking about "my sister" got a June window (the rewrite came first)."""
    from bot.engine.recall.choose import matched_text, third_person
    from bot.engine.recall.temporal import time_window

    now = datetime(2026, 12, 7, tzinfo=timezone.utc)
    words = matched_text("What is my sister called?", now, "June", context="Bob: my cousin is visiting in March")
    assert words == "What is June's sister called?\nBob: my cousin is visiting in March"  # context as written
    assert time_window("What is my sister called?", now) is None  # what the window is read from
    assert matched_text("What did I buy last month?", now, "Ann") == "What did Ann buy?"
    # A name with a backslash is text, not a replacement template (it raised re.error on every reply).
    assert third_person("what is my dog called?", "\\o/ Ann\\1") == "what is \\o/ Ann\\1's dog called?"


async def test_memories_written_while_a_background_run_is_going_get_their_vectors_when_it_ends():
    """A run reads the list as it starts: a memory taught meanwhile was left without a vector until some
    reply noticed it, and counted as typical (the median) at that reply."""
    import asyncio

    class Slow(ConceptEmbeddings):
        async def aembed_documents(self, texts):
            await asyncio.sleep(0.2)
            return self.embed_documents(texts)

    index = SemanticIndex(Slow(), MemoryVectorCache())
    stored = list(FILLER)

    async def read():
        return list(stored)

    index.index_later("u", read)
    await asyncio.sleep(0.05)  # the run has read its list
    stored.append(PASTRY)
    index.index_later("u", read)  # the write just made: asked while the run goes
    await index.drain()
    cached = await index.cache.get("u", index.embedder)
    assert PASTRY.key in cached and len(cached) == len(stored)


async def test_the_replys_embeddings_run_inside_the_scopes_waiting_so_a_turn_gives_its_connection_back():
    """Found in review 2026-12-07: on PostgreSQL a turn kept its pooled connection while an embeddings
    endpoint answered (up to the turn's deadline); six such replies held the default pool."""
    from contextlib import asynccontextmanager

    inside: list[bool] = []
    depth = 0

    @asynccontextmanager
    async def waiting():
        nonlocal depth
        depth += 1
        try:
            yield
        finally:
            depth -= 1

    class Watched(ConceptEmbeddings):
        async def aembed_query(self, text):
            inside.append(depth > 0)
            return self.embed_query(text)

    index = SemanticIndex(Watched(), MemoryVectorCache(), waiting=waiting)
    memories = FILLER + [PASTRY]
    await index.index("u", memories)
    await choose_memories(memories, "would I like a croissant?", 120, user_id="u", index=index, speaker="Ann")
    assert len(inside) >= 2 and all(inside)  # the question and the name (and the dispositions' centre)
