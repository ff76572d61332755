"""Lexical relevance: BM25 over memory texts, and the token estimate every prompt budget uses.

It needs no model and no index, so it works on every install and is the fallback whenever semantic
relevance is unavailable (no embedded model installed, an endpoint down).
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from typing import Sequence

_WORD = re.compile(r"[\w']+", re.UNICODE)
_STOP = frozenset(
    "a an and are as at be but by did do does for from had have has how i i'm in is it it's me my of on or so"
    " that the their them they this to was we were what when where which who why will with you your".split()
)


def estimate_tokens(text: str) -> int:
    """A cheap, stable token estimate (about four characters a token, as for English BPE)."""
    return max(1, (len(text) + 3) // 4)


def tokenize(text: str) -> list[str]:
    """Lower-case word tokens without stop words, with a crude plural fold ("bakeries" ~ "bakery")."""
    return list(_tokens(text))


@functools.lru_cache(maxsize=65_536)
def _tokens(text: str) -> tuple[str, ...]:
    """Memoised: a reply past the budget scores every memory, and memory texts rarely change (~10x faster)."""
    words = []
    for w in _WORD.findall(text.lower()):
        if w in _STOP or len(w) < 2:
            continue
        if w.endswith("'s"):
            w = w[:-2]
        if w.endswith("ies") and len(w) > 4:
            w = w[:-3] + "y"
        elif w.endswith("s") and not w.endswith("ss") and len(w) > 3:
            w = w[:-1]
        words.append(w)
    return tuple(words)


def bm25_scores(query: str, documents: Sequence[str], k1: float = 1.5, b: float = 0.75) -> list[float]:
    """Okapi BM25 score of every document against the query."""
    docs = [_tokens(d) for d in documents]
    if not docs:
        return []
    q_terms = set(tokenize(query))
    avg_len = sum(len(d) for d in docs) / len(docs) or 1.0
    hits = [Counter(t for t in d if t in q_terms) for d in docs]  # only the query's terms are counted
    df = Counter(t for h in hits for t in h)
    n = len(docs)
    idf = {t: math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in df}
    scores = []
    for d, tf in zip(docs, hits):
        s = 0.0
        for t, f in tf.items():
            s += idf[t] * f * (k1 + 1) / (f + k1 * (1 - b + b * len(d) / avg_len))
        scores.append(s)
    return scores
