"""``bot/engine/recall/boosts.py``: what a memory gains beyond matching the question (here: its conversation)."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone

import numpy as np

from bot.engine.memories.records import StoredMemory
from bot.engine.recall.boosts import _range_max, conversation_cosines
from bot.engine.recall.weights import DEFAULT_WEIGHTS

MEAN_ONLY = dataclasses.replace(DEFAULT_WEIGHTS, mate=0.0)

T0 = datetime(2026, 3, 1, 12, tzinfo=timezone.utc)


def mem(key: str, minutes: float) -> StoredMemory:
    when = T0 + timedelta(minutes=minutes)
    return StoredMemory(key, key, {}, when, when)


def unit(*xs: float) -> np.ndarray:
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_a_fact_learned_beside_a_matching_one_gains_and_one_learned_alone_does_not():
    """"Went camping" matches the question; "slept in a tent", learned ten minutes later, shares nothing
    with it. With its conversation counted, the tent fact ranks above an equally unrelated fact learned on
    another day; each cosine is the one with the vector plus half its mates' mean, made unit."""
    query = unit(1, 0, 0)
    memories = [mem("went camping", 0), mem("slept in a tent", 10), mem("likes tea", 60 * 24)]
    vectors = [unit(1, 0.2, 0), unit(0, 1, 0.3), unit(0, 0.3, 1)]
    cosines = [float(query @ v) for v in vectors]
    out = conversation_cosines(memories, cosines, vectors, MEAN_ONLY)
    assert out[2] == cosines[2]  # nothing learned within half an hour of it
    blended = vectors[1] + MEAN_ONLY.conversation * vectors[0]
    assert abs(out[1] - float(query @ (blended / np.linalg.norm(blended)))) < 1e-6
    assert cosines[1] == cosines[2] == 0.0 and out[1] > out[2]  # it rose past the unrelated one
    assert out[0] < cosines[0]  # the matching fact shares a little of its conversation's weaker match


def test_the_best_mate_lifts_the_rest_of_its_episode_which_the_mean_alone_blurs():
    """"Had knee surgery" matches "when was I in hospital"; "spent three nights on a ward" was said the same
    evening among a dozen other things. The mean of its mates barely moves it; the best mate lifts it by a
    quarter of the surgery fact's cosine, above an unrelated fact of an evening where nothing matched."""
    query = unit(1, 0, 0, 0)
    dim = 4
    rng = np.random.default_rng(7)

    def chatter() -> np.ndarray:  # orthogonal to the query
        return unit(0, *rng.uniform(0.1, 1.0, dim - 1))

    evening = [mem("had knee surgery", 0), mem("spent three nights on a ward", 1)]
    evening += [mem(f"chatter {k}", 2 + k) for k in range(12)]
    other_day = [mem("unrelated", 60 * 24)] + [mem(f"more chatter {k}", 60 * 24 + 1 + k) for k in range(12)]
    memories = evening + other_day
    vectors = [unit(1, 0.1, 0, 0), unit(0, 1, 0.1, 0)] + [chatter() for _ in range(12)]
    vectors += [unit(0, 0.1, 1, 0)] + [chatter() for _ in range(12)]
    cosines = [float(query @ v) for v in vectors]
    mean_only = conversation_cosines(memories, cosines, vectors, MEAN_ONLY)
    with_mate = dataclasses.replace(MEAN_ONLY, mate=0.25)  # (off by default since 2026-12-07: decisions, issue 20, item 30)
    both = conversation_cosines(memories, cosines, vectors, with_mate)
    ward, unrelated, surgery = 1, 14, 0
    assert mean_only[ward] - mean_only[unrelated] < 0.1  # a thirteenth of the match: blurred
    lift = with_mate.mate * cosines[surgery]
    assert abs(both[ward] - (mean_only[ward] + lift)) < 1e-6
    assert both[ward] - both[unrelated] > 0.2
    # the surgery fact is not lifted by its own cosine, only by its best mate's (the ward's, 0 here)
    assert abs(both[surgery] - mean_only[surgery]) < 1e-6


def test_a_memory_learned_alone_is_its_own_best_mate():
    """Learned alone is neither a gain nor a loss against learned with others: no mean to blend, and the
    best mate's share taken of its own cosine."""
    query = unit(1, 0)
    memories = [mem("alone", 0), mem("pair a", 60 * 24), mem("pair b", 60 * 24 + 5)]
    vectors = [unit(1, 1), unit(1, 1), unit(1, 1)]
    cosines = [float(query @ v) for v in vectors]
    out = conversation_cosines(memories, cosines, vectors, DEFAULT_WEIGHTS)
    assert abs(out[0] - cosines[0] * (1 + DEFAULT_WEIGHTS.mate)) < 1e-6
    assert abs(out[0] - out[1]) < 1e-6 and abs(out[1] - out[2]) < 1e-6  # same vector, same score


def test_without_the_shares_or_without_vectors_the_cosines_are_unchanged():
    memories = [mem("a", 0), mem("b", 5), mem("c", 7)]
    vectors = [unit(1, 0), None, unit(0, 1)]
    cosines = [0.9, None, 0.1]
    off = dataclasses.replace(DEFAULT_WEIGHTS, conversation=0.0, mate=0.0)
    assert conversation_cosines(memories, cosines, vectors, off) == cosines
    out = conversation_cosines(memories, cosines, vectors, DEFAULT_WEIGHTS)
    assert out[1] is None  # no vector: left to the median, as before
    assert out[0] != 0.9 and out[2] != 0.1  # the two with vectors count each other
    mate_only = dataclasses.replace(DEFAULT_WEIGHTS, conversation=0.0, mate=0.25)
    out = conversation_cosines(memories, cosines, vectors, mate_only)
    assert abs(out[0] - (0.9 + mate_only.mate * 0.1)) < 1e-6  # the vectorless one is no one's mate
    assert abs(out[2] - (0.1 + mate_only.mate * 0.9)) < 1e-6


def test_range_max_matches_a_plain_loop():
    rng = np.random.default_rng(3)
    for n in (1, 2, 3, 5, 8, 9, 64, 300):
        values = rng.normal(size=n)
        a, b = rng.integers(0, n + 1, 100), rng.integers(0, n + 1, 100)
        start, stop = np.minimum(a, b), np.maximum(a, b)
        expected = [values[x:y].max() if y > x else -np.inf for x, y in zip(start, stop)]
        assert list(_range_max(values, start, stop)) == expected


def test_memories_at_the_calendars_ends_do_not_break_the_choice():
    """Year 1 and 9999 ("never" placeholders a hand-edited import once let in) made ``t - 30 minutes``
    overflow, and every reply to their owner failed until the memory was found and deleted."""
    from bot.engine.recall.boosts import coverage_boost

    first = datetime.min.replace(tzinfo=timezone.utc)
    last = datetime.max.replace(tzinfo=timezone.utc)
    memories = [StoredMemory("a", "a", {}, first, first), StoredMemory("b", "b", {}, last, last), mem("c", 0),
                StoredMemory("d", "d", {}, first + timedelta(minutes=5), first)]
    out = coverage_boost(memories, [0.9, 0.8, 0.1, 0.05], None)
    assert out[3] > 0 and out[2] == 0  # learned beside the best one, at year 1, it still gains; c does not
