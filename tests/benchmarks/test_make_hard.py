"""The hard recall set's generator: questions fully written, first person where tagged, splits disjoint, and
people as large as real speakers (so the other people's facts that grow a person are mostly chatter)."""

from __future__ import annotations

import json
import re

from benchmarks.data import make_hard


def _speakers(samples: list[dict]) -> set[str]:
    return {s["conversation"][k] for s in samples for k in ("speaker_a", "speaker_b")}


def test_every_question_is_written_out_and_first_person_ones_say_i_or_my():
    samples = make_hard.make_split("tune")
    questions = [q for s in samples for q in s["qa"]]
    assert questions and not [q["question"] for q in questions if "{" in q["question"] or "}" in q["question"]]
    first = [q["question"] for q in questions if "first-person" in (q.get("tags") or [])]
    assert first and all(re.search(r"\b(I|my|me|am I)\b", q) for q in first), first


def test_splits_share_no_speaker_and_people_hold_a_realistic_number_of_facts():
    tune, test = make_hard.make_split("tune"), make_hard.make_split("test")
    assert not _speakers(tune) & _speakers(test)
    for sample in tune:
        per_person: dict[str, int] = {}
        for session in sample["observation"].values():
            for name, facts in session.items():
                per_person[name] = per_person.get(name, 0) + len(facts)
        assert min(per_person.values()) >= make_hard.LIFE_FACTS[0]
        evidence = {d for q in sample["qa"] for d in q["evidence"]}
        dia = {item[1] for session in sample["observation"].values() for facts in session.values() for item in facts}
        assert evidence <= dia  # every question's evidence is an observation of that conversation


def test_the_generator_is_deterministic_and_matches_the_shipped_files():
    for split in ("tune", "test"):
        shipped = json.loads((make_hard.HERE / f"hard_{split}_locomo.json").read_text(encoding="utf-8"))
        assert shipped == make_hard.make_split(split)


def test_a_question_that_names_a_time_has_its_evidence_inside_that_time():
    """"What did I pick up this year?" answered by facts from last year is a question nobody could answer
    from its evidence; the bot's own reading of the time (``time_window``) is the judge."""
    from datetime import timedelta
    from pathlib import Path

    from benchmarks.recall import load
    from bot.engine.recall.temporal import time_window

    checked = 0
    for split in ("tune", "test"):
        everyone, questions, _ = load(Path(make_hard.HERE / f"hard_{split}_locomo.json"))
        dated = {m.key: m.created_at for p in everyone for m in p.memories}
        for q in questions:
            window = time_window(q.text, q.now)
            if window is None:
                continue
            checked += 1
            outside = [k for k in q.evidence if not window[0] <= dated[k] < window[1] + timedelta(days=1)]
            assert not outside, (q.text, window, [dated[k] for k in outside])
    assert checked > 50  # the sets do ask about times


def test_a_two_fact_inference_needs_two_inference_facts_that_have_no_question_of_their_own():
    """Real "would she ..." questions often need two facts together; a pair's question replaces the two
    one-fact questions, so neither fact can be answered on its own by an easier question about it."""
    # what each inference fact says after the name, up to its first pronoun ("found out", "has been raising ...")
    stems = [t.split("{n}", 1)[1].split("{", 1)[0].strip().rstrip(".") for t, _q, _a in make_hard.INFERENCE]
    checked = 0
    for split in ("tune", "test"):
        for sample in make_hard.make_split(split):
            observed = {item[1]: item[0] for session in sample["observation"].values()
                        for facts in session.values() for item in facts}
            inference = [q for q in sample["qa"] if q["category"] == 3]
            pairs = [q for q in inference if "two facts" in q["tags"]]
            for q in pairs:
                checked += 1
                assert len(set(q["evidence"])) == 2 and not re.search(r"\b(I|my|me)\b", q["question"])
                assert all(any(stem in observed[d] for stem in stems) for d in q["evidence"]), q["question"]
                singles = {d for other in inference if other is not q for d in other["evidence"]}
                assert not singles & set(q["evidence"]), q["question"]
    assert checked >= 20
