"""Choose which memories go into a prompt: all while they fit, the most relevant once they don't.

Relevance is BM25 over the person's memories against the current messages, blended with recency so a
fresh fact beats an old one of equal relevance. It needs no model call and no vector index, so it works
on every SQLite build (see README: the machine's Python cannot load sqlite-vec).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Sequence

from bot.engine.memory import StoredMemory

_WORD = re.compile(r"[\w']+", re.UNICODE)
_STOP = frozenset(
    "a an and are as at be but by do does for from have has i i'm in is it it's me my of on or so that the"
    " their them they this to was we what when where which who will with you your".split()
)


def estimate_tokens(text: str) -> int:
    """A cheap, stable token estimate (about four characters a token, as for English BPE)."""
    return max(1, (len(text) + 3) // 4)


def tokenize(text: str) -> list[str]:
    """Lower-case word tokens without stop words, with a crude plural fold ("bakeries" ~ "bakery")."""
    words = []
    for w in _WORD.findall(text.lower()):
        if w in _STOP or len(w) < 2:
            continue
        if w.endswith("ies") and len(w) > 4:
            w = w[:-3] + "y"
        elif w.endswith("s") and not w.endswith("ss") and len(w) > 3:
            w = w[:-1]
        words.append(w)
    return words


def bm25_scores(query: str, documents: Sequence[str], k1: float = 1.5, b: float = 0.75) -> list[float]:
    """Okapi BM25 score of every document against the query."""
    docs = [tokenize(d) for d in documents]
    if not docs:
        return []
    q_terms = set(tokenize(query))
    avg_len = sum(len(d) for d in docs) / len(docs) or 1.0
    df = Counter(t for d in docs for t in set(d) if t in q_terms)
    n = len(docs)
    scores = []
    for d in docs:
        tf = Counter(d)
        s = 0.0
        for t in q_terms:
            if t not in tf:
                continue
            idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
            s += idf * tf[t] * (k1 + 1) / (tf[t] + k1 * (1 - b + b * len(d) / avg_len))
        scores.append(s)
    return scores


def rank(
    memories: Sequence[StoredMemory],
    query: str,
    recency_weight: float = 0.25,
    semantic: Sequence[float] | None = None,
) -> list[StoredMemory]:
    """Memories ordered by relevance to ``query`` blended with recency, best first.

    Relevance is BM25, or, when ``semantic`` scores (cosine similarities) are given, their average
    with BM25, so exact words and meaning both count.
    """
    if not memories:
        return []
    rel = bm25_scores(query, [m.content for m in memories])
    top = max(rel) or 1.0
    if semantic is not None:
        rel = [0.5 * (r / top) + 0.5 * max(0.0, s) for r, s in zip(rel, semantic)]
        top = max(rel) or 1.0
    by_age = sorted(range(len(memories)), key=lambda i: memories[i].updated_at)
    recency = [0.0] * len(memories)
    for pos, i in enumerate(by_age):
        recency[i] = (pos + 1) / len(memories)
    blended = [(1 - recency_weight) * (r / top) + recency_weight * rc for r, rc in zip(rel, recency)]
    order = sorted(range(len(memories)), key=lambda i: blended[i], reverse=True)
    return [memories[i] for i in order]


def fits(memories: Sequence[StoredMemory], budget_tokens: int) -> bool:
    return sum(estimate_tokens(m.content) + 2 for m in memories) <= budget_tokens


def select_within_budget(
    memories: Sequence[StoredMemory], query: str, budget_tokens: int, semantic: Sequence[float] | None = None
) -> list[StoredMemory]:
    """All memories (oldest first) if they fit the budget; otherwise the best-ranked ones that fit."""
    if fits(memories, budget_tokens):
        return list(memories)
    chosen: list[StoredMemory] = []
    used = 0
    for m in rank(memories, query, semantic=semantic):
        c = estimate_tokens(m.content) + 2
        if used + c > budget_tokens:
            continue
        chosen.append(m)
        used += c
    return chosen


def related(memories: Sequence[StoredMemory], query: str, limit: int) -> list[StoredMemory]:
    """Up to ``limit`` memories most related to ``query`` (all of them when there are few)."""
    if len(memories) <= limit:
        return list(memories)
    return rank(memories, query, recency_weight=0.1)[:limit]
