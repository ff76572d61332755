"""The choice of memories for a reply prompt: all while they fit, the most relevant ones once they don't.

This is the one place that decides; the chat graph and ``benchmarks/recall.py`` both call
``choose_memories``. Relevance fuses three signals, each scaled to [0, 1] over the person's memories:

- lexical: BM25 of the memory against the query (names, rare words, exact phrases);
- semantic: cosine similarity of embeddings (meaning without shared words), when an index is available;
- recency: the memory's rank by date, so of two equally relevant facts the newer one wins.

The weights were chosen on the recall benchmark (see README: fused beats lexical and semantic alone at
every budget); without semantic scores the lexical and recency weights are used alone. The query is the
current message plus the recent turns. The chosen memories are shown oldest first, each with its date, so
a newer fact visibly follows (and supersedes) an older one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Sequence

from bot.engine.memories.records import StoredMemory
from bot.engine.recall.lexical import bm25_scores, estimate_tokens
from bot.engine.recall.vectors import SemanticIndex

Mode = Literal["lexical", "semantic", "fused"]


@dataclass(frozen=True)
class Weights:
    """How much each signal counts in the fused score."""

    lexical: float = 0.25
    semantic: float = 1.0
    recency: float = 0.05


DEFAULT_WEIGHTS = Weights()


@dataclass(frozen=True)
class Selection:
    """The memories chosen for a prompt (in display order, oldest first) and what they cost."""

    memories: list[StoredMemory]
    tokens: int
    total: int  # how many memories the person has (visible here)
    method: str  # "all" (everything fit), "lexical", "semantic" or "fused"


def memory_date(memory: StoredMemory) -> str:
    """The date a memory was learned or last changed, as the model sees it (UTC day)."""
    return memory.updated_at.strftime("%Y-%m-%d")


def memory_line(memory: StoredMemory) -> str:
    """One memory as a prompt line: ``- [2026-05-08] Likes jazz``."""
    return f"- [{memory_date(memory)}] {memory.content}"


def line_tokens(memory: StoredMemory) -> int:
    return estimate_tokens(memory_line(memory)) + 1  # + the newline


def fits(memories: Sequence[StoredMemory], budget_tokens: int) -> bool:
    return sum(line_tokens(m) for m in memories) <= budget_tokens


def _scaled(values: Sequence[float]) -> list[float]:
    """Min-max scaling to [0, 1] (all zeros when the values do not differ)."""
    lo, hi = min(values), max(values)
    if hi - lo <= 1e-12:
        return [0.0] * len(values)
    return [(v - lo) / (hi - lo) for v in values]


def recency_scores(memories: Sequence[StoredMemory]) -> list[float]:
    """Each memory's rank by date, scaled to (0, 1]: the newest is 1."""
    order = sorted(range(len(memories)), key=lambda i: (memories[i].updated_at, memories[i].key))
    out = [0.0] * len(memories)
    for pos, i in enumerate(order):
        out[i] = (pos + 1) / len(memories)
    return out


def fused_scores(
    memories: Sequence[StoredMemory],
    query: str,
    semantic: Sequence[float | None] | None,
    *,
    mode: Mode = "fused",
    weights: Weights = DEFAULT_WEIGHTS,
) -> list[float]:
    """One relevance score per memory (higher is better)."""
    lexical = _scaled(bm25_scores(query, [m.content for m in memories]))
    recency = recency_scores(memories)
    if semantic is None or mode == "lexical":
        return [weights.lexical * lx + weights.recency * rc for lx, rc in zip(lexical, recency)]
    known = [s for s in semantic if s is not None]
    if not known:
        return [weights.lexical * lx + weights.recency * rc for lx, rc in zip(lexical, recency)]
    floor = sorted(known)[len(known) // 2]  # a memory not indexed yet counts as typical, not as unrelated
    sem = _scaled([floor if s is None else s for s in semantic])
    if mode == "semantic":
        return [s + weights.recency * rc * 0.01 for s, rc in zip(sem, recency)]  # recency only breaks ties
    return [weights.lexical * lx + weights.semantic * s + weights.recency * rc
            for lx, s, rc in zip(lexical, sem, recency)]


def pack(memories: Sequence[StoredMemory], scores: Sequence[float], budget_tokens: int) -> tuple[list[StoredMemory], int]:
    """The best-scored memories that fit the budget (greedy, skipping one that does not fit), oldest first."""
    chosen: list[int] = []
    used = 0
    for i in sorted(range(len(memories)), key=lambda i: scores[i], reverse=True):
        cost = line_tokens(memories[i])
        if used + cost > budget_tokens:
            continue
        chosen.append(i)
        used += cost
    picked = [memories[i] for i in chosen]
    picked.sort(key=lambda m: (m.updated_at, m.key))
    return picked, used


async def choose_memories(
    memories: Sequence[StoredMemory],
    query: str,
    budget_tokens: int,
    *,
    user_id: str,
    index: SemanticIndex | None = None,
    mode: Mode = "fused",
    weights: Weights = DEFAULT_WEIGHTS,
    now: datetime | None = None,
    speaker: str | None = None,
) -> Selection:
    """Choose which of a person's memories go into a prompt.

    Args:
        memories: the memories the prompt may show (already filtered by where they may be shown).
        query: the current message plus the recent turns.
        budget_tokens: the most the memory lines may cost (estimated tokens).
        user_id: whose memories (the vector cache is per person).
        index: semantic relevance, when available; consulted (one query vector) only when the memories
            do not all fit.
        mode: ``fused`` in production; ``lexical`` and ``semantic`` exist for the benchmark's comparison.
    """
    memories = list(memories)
    ordered = sorted(memories, key=lambda m: (m.updated_at, m.key))
    if fits(ordered, budget_tokens):
        return Selection(ordered, sum(line_tokens(m) for m in ordered), len(memories), "all")
    semantic = None
    if index is not None and mode != "lexical":
        semantic = await index.scores(user_id, memories, query)
    method = mode if semantic is not None else "lexical"
    scores = fused_scores(memories, query, semantic, mode=method, weights=weights)
    picked, used = pack(memories, scores, budget_tokens)
    return Selection(picked, used, len(memories), method)


def related(memories: Sequence[StoredMemory], query: str, limit: int) -> list[StoredMemory]:
    """Up to ``limit`` memories most related to ``query`` (all of them when there are few), for extraction."""
    if len(memories) <= limit:
        return list(memories)
    scores = fused_scores(memories, query, None, weights=Weights(lexical=0.9, semantic=0.0, recency=0.1))
    best = sorted(range(len(memories)), key=lambda i: scores[i], reverse=True)[:limit]
    return [memories[i] for i in sorted(best)]
