"""``bot/engine/recall/boosts.py``: what a memory gains beyond matching the question (here: its conversation)."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone

import numpy as np

from bot.engine.memories.records import StoredMemory
from bot.engine.recall.boosts import conversation_cosines
from bot.engine.recall.weights import DEFAULT_WEIGHTS

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
    out = conversation_cosines(memories, cosines, vectors, DEFAULT_WEIGHTS)
    assert out[2] == cosines[2]  # nothing learned within half an hour of it
    blended = vectors[1] + DEFAULT_WEIGHTS.conversation * vectors[0]
    assert abs(out[1] - float(query @ (blended / np.linalg.norm(blended)))) < 1e-6
    assert cosines[1] == cosines[2] == 0.0 and out[1] > out[2]  # it rose past the unrelated one
    assert out[0] < cosines[0]  # the matching fact shares a little of its conversation's weaker match


def test_without_the_share_or_without_vectors_the_cosines_are_unchanged():
    memories = [mem("a", 0), mem("b", 5), mem("c", 7)]
    vectors = [unit(1, 0), None, unit(0, 1)]
    cosines = [0.9, None, 0.1]
    off = dataclasses.replace(DEFAULT_WEIGHTS, conversation=0.0)
    assert conversation_cosines(memories, cosines, vectors, off) == cosines
    out = conversation_cosines(memories, cosines, vectors, DEFAULT_WEIGHTS)
    assert out[1] is None  # no vector: left to the median, as before
    assert out[0] != 0.9 and out[2] != 0.1  # the two with vectors count each other
