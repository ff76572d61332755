"""Hub damping, coverage (learned together, shared names), time and first person in the choice."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from bot.engine.memories.records import StoredMemory
from bot.engine.recall import choose_memories, memory_line
from bot.engine.recall.boosts import coverage_boost, memory_names, temporal_boost
from bot.engine.recall.choose import DEFAULT_WEIGHTS, Weights, fused_scores, third_person

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


def mem(key: str, text: str, days: float = 0.0, updated_days: float | None = None, sources=()) -> StoredMemory:
    created = T0 + timedelta(days=days)
    updated = created if updated_days is None else T0 + timedelta(days=updated_days)
    return StoredMemory(key, text, {}, created, updated, tuple(sources))


def test_a_memory_shows_the_date_it_was_first_learned_not_its_last_patch():
    m = mem("k", "Lives in Porto", days=0, updated_days=60)
    assert memory_line(m) == "- [2024-01-01] Lives in Porto"


def test_first_person_words_become_the_speakers_name():
    assert third_person("When did I go camping?", "Ann") == "When did Ann go camping?"
    assert third_person("What is my dog called, and am I late?", "Ann") == "What is Ann's dog called, and is Ann late?"
    assert third_person("When did I go?", None) == "When did I go?"


def test_hubs_are_damped():
    memories = [mem(f"k{i}", f"fact {i}", days=i) for i in range(5)]
    semantic = [0.50, 0.48, 0.1, 0.1, 0.1]  # memory 0 is a hub: close to everything
    hubness = [0.9, 0.2, 0.2, 0.2, 0.2]
    plain = fused_scores(memories, "q", semantic, weights=Weights(lexical=0.0, recency=0.0))
    damped = fused_scores(memories, "q", semantic, weights=Weights(lexical=0.0, recency=0.0), hubness=hubness)
    assert plain[0] > plain[1] and damped[1] > damped[0]


def test_best_candidates_lend_to_memories_learned_with_them_and_to_shared_names():
    memories = [
        mem("seed", "Ann's younger sister is called Hedda.", days=10),
        mem("same-day", "Ann slept in a tent.", days=10.001),
        mem("named", "Hedda is getting married at a lighthouse.", days=40),
        mem("speaker-only", "Ann likes tea.", days=70),
    ] + [mem(f"f{i}", f"Filler number {i} about nothing.", days=100 + i) for i in range(20)]
    scores = [1.0, 0.0, 0.0, 0.0] + [0.0] * 20
    boost = coverage_boost(memories, scores, "Ann", Weights(seeds=1))
    assert boost[1] > 0 and boost[2] > 0  # learned together; names Hedda
    assert boost[3] == 0 and max(boost[4:]) == 0  # shares only the speaker's own name; unrelated


def test_a_shared_source_message_counts_as_learned_together():
    msg = {"message_id": "42"}
    memories = [mem("a", "Ann got a promotion.", days=1, sources=[msg]),
                mem("b", "Ann celebrated with cake.", days=50, updated_days=50, sources=[msg])] + \
        [mem(f"f{i}", f"filler {i}", days=100 + i) for i in range(10)]
    boost = coverage_boost(memories, [1.0] + [0.0] * 11, None, Weights(seeds=1, entity=0.0))
    assert boost[1] > 0 and max(boost[2:]) == 0


def test_time_named_in_the_question_prefers_memories_dated_then():
    memories = [mem("old", "Ann saw a jazz band live.", days=-200), mem("new", "Ann saw a folk band live.", days=40)]
    now = T0 + timedelta(days=60)
    boost = temporal_boost(memories, "Which band did Ann see last year?", now)
    assert boost[0] > boost[1] == 0.0
    assert temporal_boost(memories, "Which band does Ann like?", now) is None


async def test_choose_memories_uses_now_and_keeps_todays_behaviour_without_it():
    band_old = mem("old", "Ann saw a jazz band play live at a church.", days=-200)
    band_new = mem("new", "Ann saw a folk band play live at a bar.", days=40)
    filler = [mem(f"f{i:03d}", f"Ann did an ordinary thing number {i} at home.", days=i + 0.5) for i in range(60)]
    memories = [band_new, *filler, band_old]
    budget = 25  # room for one line
    now = T0 + timedelta(days=60)
    dated = await choose_memories(memories, "Which band did Ann see play live last year?", budget,
                                  user_id="u", now=now, speaker="Ann")
    assert [m.key for m in dated.memories] == ["old"]
    plain = await choose_memories(memories, "Which band did Ann see play live last year?", budget, user_id="u",
                                  weights=DEFAULT_WEIGHTS)
    assert [m.key for m in plain.memories] == ["new"]  # no date given: the newer of two equal matches


def test_a_first_word_is_a_name_only_when_it_also_appears_mid_sentence():

    names = memory_names([mem("a", "Lives in Ghent with Hedda."), mem("b", "Hedda is getting married in May."),
                          mem("c", "Likes tea.")])
    assert names == [("ghent", "hedda"), ("hedda",), ()]


def test_the_second_round_lifts_memories_near_the_first_rounds_best_without_a_new_embedding():
    import numpy as np

    from bot.engine.recall.choose import feedback_boost
    from bot.engine.recall.vectors import Relevance, unit

    # memory 0 matched the question; memory 1 shares nothing with the question but sits next to memory 0
    # (the other hobby); memories 2-5 are elsewhere. The query vector never enters the second round.
    vectors = [unit([1, 0, 0]), unit([0.9, 0.1, 0]), unit([0, 1, 0]), unit([0, 0, 1]), unit([0, 1, 1]), None]
    rel = Relevance(vectors, [0.9, 0.1, 0.1, 0.1, 0.1, None], [0.3] * 5 + [None])
    assert rel.near([0])[1] > rel.near([0])[2]
    boost = feedback_boost([1.0, 0.0, 0.0, 0.0, 0.0, 0.0], rel, Weights(feedback=0.5, feedback_seeds=1))
    assert boost is not None and boost[1] > max(boost[2:5]) and boost[1] <= 0.5
    assert feedback_boost([1.0] + [0.0] * 5, rel, Weights(feedback=0.0)) is None  # off
    assert feedback_boost([1.0] + [0.0] * 5, None) is None  # no vectors: the lexical path
    no_vectors = Relevance([None] * 6, [None] * 6, [None] * 6)
    assert feedback_boost([1.0] + [0.0] * 5, no_vectors, Weights(feedback_seeds=1)) is None
    assert np.isclose(float(np.linalg.norm(vectors[0])), 1.0)
