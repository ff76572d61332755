"""What a memory gains beyond matching the question: the time the question names, and coverage (memories
learned together with the best candidates, or naming the same rare name), for answers that need facts
sharing no word with the question. See ``choose.py``'s docstring for how they enter the score.
"""

from __future__ import annotations

import bisect
import functools
import math
import re
from datetime import datetime, timedelta
from typing import Sequence

import numpy as np

from bot.engine.memories.records import StoredMemory
from bot.engine.recall.temporal import MONTHS, asks_when, closeness, mentions_time, time_window
from bot.engine.recall.weights import DEFAULT_WEIGHTS, Weights

TOGETHER = timedelta(minutes=30)  # memories learned this close together come from one conversation


def _around(t: datetime, span: timedelta) -> tuple[datetime, datetime]:
    """``t - span`` and ``t + span``, held at the calendar's ends: a memory stored with year 1 or 9999 (an
    import before imports refused such times) made every reply to its owner fail with OverflowError."""
    try:
        lo = t - span
    except OverflowError:
        lo = datetime.min.replace(tzinfo=t.tzinfo)
    try:
        hi = t + span
    except OverflowError:
        hi = datetime.max.replace(tzinfo=t.tzinfo)
    return lo, hi


def temporal_boost(memories: Sequence[StoredMemory], query: str, now: datetime | None,
                   weights: Weights = DEFAULT_WEIGHTS) -> list[float] | None:
    """What each memory gains from the time the query names or asks for (None: the query is not about time)."""
    window = time_window(query, now)
    when = asks_when(query)
    if window is None and not when:
        return None
    out = [0.0] * len(memories)
    for i, m in enumerate(memories):
        if window is not None:
            out[i] += weights.time * closeness(m.created_at, window)
        if when and mentions_time(m.content):
            out[i] += weights.dated
    return out


_CAPITALISED = re.compile(r"\b([A-Z][\w-]+)(?:'s)?")
_NOT_NAMES = frozenset(MONTHS) | frozenset("monday tuesday wednesday thursday friday saturday sunday i".split())


@functools.lru_cache(maxsize=65_536)
def _names(text: str) -> tuple[str | None, tuple[str, ...]]:
    """A memory's first word if capitalised, and its capitalised words after it (names, places, titles)."""
    found = [(m.start(), m.group(1).lower()) for m in _CAPITALISED.finditer(text)]
    first = found[0][1] if found and not text[: found[0][0]].strip() else None
    rest = tuple(dict.fromkeys(w for pos, w in found if w != first or pos > 0))
    return (first if first not in _NOT_NAMES else None), tuple(w for w in rest if w not in _NOT_NAMES)


def memory_names(memories: Sequence[StoredMemory]) -> list[tuple[str, ...]]:
    """The names each memory mentions. A first word counts only when some memory has it mid-sentence too:
    facts often start with a name ("Hedda is getting married"), but as often with a verb ("Lives in Ghent")."""
    parsed = [_names(m.content) for m in memories]
    inside = {w for _first, rest in parsed for w in rest}
    return [tuple(dict.fromkeys(((first,) if first in inside else ()) + rest)) for first, rest in parsed]


def best_with_strength(scores: Sequence[float], count: int) -> list[tuple[int, float]]:
    """The ``count`` best-scored memories, best first, each with its strength: how far its score stands above
    the median, relative to the best's (1.0 for the best). Empty when fewer than 3 or the scores do not differ.

    What a candidate lends (coverage, the second round) scales with this, so a weak "best" lends little.
    """
    n = len(scores)
    if n < 3 or count <= 0:
        return []
    ranked = sorted(range(n), key=lambda i: scores[i], reverse=True)
    middle, top = scores[ranked[n // 2]], scores[ranked[0]]
    if top - middle <= 1e-12:
        return []
    return [(i, (scores[i] - middle) / (top - middle)) for i in ranked[:count]]


def conversation_cosines(memories: Sequence[StoredMemory], cosines: Sequence[float | None],
                         vectors: Sequence[np.ndarray | None], weights: Weights = DEFAULT_WEIGHTS
                         ) -> list[float | None]:
    """Each memory's cosine with the query, taken for its vector plus ``weights.conversation`` of the mean
    of the vectors learned within ``TOGETHER`` of it (its conversation), made unit again, plus
    ``weights.mate`` of the best cosine among those mates.

    A fact learned beside others shares their subject even when its own words do not ("slept in a tent"
    beside "went camping"; the second hobby named in the same conversation as the first). The coverage loan
    reaches such a fact only when one of its mates is among the very best; this lets the whole conversation
    count a little for each of its facts, for every question. The vectors are unit, so the cosine with
    ``v + b·m`` is ``(cos(v) + b·mean(cos of mates)) / |v + b·m|``: no vector is compared again, and the
    cost is one pass over the vectors (prefix sums over time).

    The mean blurs one strong match among many mates ("had knee surgery" among the fifteen things said
    that evening lifts "spent three nights on a ward" by a fifteenth), so the best mate counts too: the fact
    that matched lifts each of the others of its episode by a quarter of its own cosine. Its own cosine is
    left out of its own lift (the matching fact gains by its best mate, not by itself); a memory learned
    alone is its own best mate, so being learned alone is neither a gain nor a loss against being learned
    with others. Cost: a sparse table over the cosines in time order, two lookups a memory.

    A memory without a vector keeps its own (missing) cosine and counts for no other.
    """
    share = weights.conversation
    n = len(memories)
    if (not share and not weights.mate) or n < 2 or len(vectors) != n or len(cosines) != n:
        return list(cosines)
    order = [i for i in sorted(range(n), key=lambda i: memories[i].created_at)
             if vectors[i] is not None and cosines[i] is not None]
    if len(order) < 2:
        return list(cosines)
    stamps = np.array([memories[i].created_at.timestamp() for i in order])
    matrix = np.stack([vectors[i] for i in order]).astype(np.float32, copy=False)
    own = np.array([float(cosines[i]) for i in order])
    vec_sums = np.vstack([np.zeros((1, matrix.shape[1]), dtype=np.float32), np.cumsum(matrix, axis=0)])
    cos_sums = np.concatenate([[0.0], np.cumsum(own)])
    window = TOGETHER.total_seconds()
    lo = np.searchsorted(stamps, stamps - window, side="left")
    hi = np.searchsorted(stamps, stamps + window, side="right")
    mates = hi - lo - 1
    alone = mates <= 0
    count = np.where(alone, 1, mates)
    mean_vec = (vec_sums[hi] - vec_sums[lo] - matrix) / count[:, None]
    mean_cos = (cos_sums[hi] - cos_sums[lo] - own) / count
    blend = matrix + share * mean_vec
    norms = np.sqrt(np.einsum("ij,ij->i", blend, blend))
    blended = np.where(alone | (norms <= 1e-9), own, (own + share * mean_cos) / np.maximum(norms, 1e-9))
    if weights.mate:
        positions = np.arange(len(order))
        best = np.maximum(_range_max(own, lo, positions), _range_max(own, positions + 1, hi))  # itself left out
        blended = blended + weights.mate * np.where(alone, own, best)
    out = list(cosines)
    for pos, i in enumerate(order):
        out[i] = float(blended[pos])
    return out


def _range_max(values: np.ndarray, start: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """``max(values[start[i]:stop[i]])`` for every i at once (-inf where the range is empty): a sparse table,
    so each range costs two lookups whatever its length."""
    n = len(values)
    table = [values.astype(np.float64)]
    width = 1
    while width * 2 <= n:
        prev = table[-1]
        table.append(np.maximum(prev[:-width], prev[width:]))
        width *= 2
    length = stop - start
    out = np.full(len(start), -np.inf)
    has = length > 0
    level = np.zeros(len(start), dtype=np.int64)
    level[has] = np.floor(np.log2(length[has])).astype(np.int64)
    for k in np.unique(level[has]):
        rows = np.nonzero(has & (level == k))[0]
        row = table[k]
        out[rows] = np.maximum(row[start[rows]], row[stop[rows] - (1 << int(k))])
    return out


def coverage_boost(memories: Sequence[StoredMemory], scores: Sequence[float], speaker: str | None,
                   weights: Weights = DEFAULT_WEIGHTS) -> list[float]:
    """What each memory gains from the best candidates: learned with one, or naming the same rare name.

    Each of the ``weights.seeds`` best lends a share of its own strength (its score over the median,
    relative to the best's), and a memory keeps the largest loan, so a big conversation does not pile up.
    """
    n = len(memories)
    out = [0.0] * n
    if weights.seeds <= 0 or (not weights.together and not weights.entity):
        return out
    best = best_with_strength(scores, max(weights.seeds, weights.entity_seeds))
    if not best:
        return out
    seeds = [i for i, _ in best[: weights.seeds]]
    strength = dict(best)
    # learned together: by shared source message, or created within TOGETHER of each other
    if weights.together:
        by_time = sorted(range(n), key=lambda i: memories[i].created_at)
        stamps = [memories[i].created_at for i in by_time]
        for s in seeds:
            start, end = _around(memories[s].created_at, TOGETHER)
            lo, hi = bisect.bisect_left(stamps, start), bisect.bisect_right(stamps, end)
            for j in by_time[lo:hi]:
                if j != s:
                    out[j] = max(out[j], weights.together * strength[s])
        if any(memories[s].sources for s in seeds):
            by_message: dict[str, list[int]] = {}
            for j, m in enumerate(memories):
                for mid in m.message_ids():
                    by_message.setdefault(mid, []).append(j)
            for s in seeds:
                for mid in memories[s].message_ids():
                    for j in by_message.get(mid, ()):
                        if j != s:
                            out[j] = max(out[j], weights.together * strength[s])
    # shared rare names: idf over the person's memories, the speaker's own name excluded
    if weights.entity:
        own = {w.lower() for w in (speaker or "").split()}
        names = memory_names(memories)
        seeds = [i for i, _ in best[: weights.entity_seeds]]
        wanted = {w for s in seeds for w in names[s]} - own
        if wanted:
            df: dict[str, int] = {}
            for ws in names:
                for w in ws:
                    if w in wanted:
                        df[w] = df.get(w, 0) + 1
            rare = {w: math.log(n / c) / math.log(n) for w, c in df.items() if c <= max(2, n // weights.rare)}
            for s in seeds:
                mine = [w for w in names[s] if w in rare]
                if not mine:
                    continue
                for j in range(n):
                    if j == s:
                        continue
                    shared = [rare[w] for w in names[j] if w in mine]
                    if shared:
                        out[j] = max(out[j], weights.entity * strength[s] * max(shared))
    return out
