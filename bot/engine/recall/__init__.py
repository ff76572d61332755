"""Recall: which of a person's memories go into a prompt, and how each is shown.

``choose_memories`` is the one function that decides (the chat graph and ``benchmarks/recall.py`` call
it); ``memory_lines`` renders them under their dates (``memory_line``: one on its own). Lexical relevance (BM25) always works; semantic
relevance comes from a ``SemanticIndex`` over an embedded model or an embeddings endpoint.
"""

from bot.engine.recall.choose import (
    DEFAULT_WEIGHTS,
    Mode,
    Selection,
    Weights,
    choose_memories,
    fits,
    memory_line,
    memory_lines,
    related,
)
from bot.engine.recall.boosts import _names
from bot.engine.recall.lexical import _tokens, bm25_scores, estimate_tokens
from bot.engine.recall.temporal import mentions_time
from bot.engine.recall.vectors import SemanticIndex


def forget_cached_texts() -> None:
    """Empty the memoised text caches (words, names, dates of memory and query texts).

    Called after every erasure: they are keyed by whole memory and message texts, so erased words would
    otherwise stay in the process's memory until evicted (in a quiet bot, for as long as it runs).
    """
    for cached in (_tokens, _names, mentions_time):
        cached.cache_clear()

__all__ = [
    "DEFAULT_WEIGHTS", "Mode", "Selection", "SemanticIndex", "Weights", "bm25_scores", "choose_memories",
    "estimate_tokens", "fits", "forget_cached_texts", "memory_line", "memory_lines", "related",
]
