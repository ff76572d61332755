"""benchmarks/recall.py on our synthetic LoCoMo-format file, and on the gaps real LoCoMo files have."""

from __future__ import annotations

import json
import re

from benchmarks import recall

DATA = "benchmarks/data/synthetic_locomo.json"
LAST = re.compile(r"^recall: any=(\d+\.\d)% all=(\d+\.\d)% budget=(\d+) memories=(\d+) questions=(\d+)$")


def last_line(capsys) -> re.Match:
    out = capsys.readouterr().out.strip().splitlines()
    found = LAST.match(out[-1])
    assert found, out[-1]
    return found


def test_lexical_run_prints_the_table_and_the_last_line(capsys):
    assert recall.main(["--data", DATA, "--quick", "--lexical-only", "--memories", "100", "--budget", "600"]) == 0
    found = last_line(capsys)
    any_, all_, budget, memories, questions = found.groups()
    assert (budget, memories) == ("600", "100") and int(questions) > 100
    assert 50.0 <= float(all_) <= float(any_) <= 100.0


def test_real_file_gaps_are_counted_and_skipped(tmp_path, capsys):
    sample = {
        "conversation": {"speaker_a": "Ann", "speaker_b": "Ben", "session_1_date_time": "1:56 pm on 8 May, 2023",
                         "session_2_date_time": "not a date"},
        "observation": {
            "session_1_observation": {"Ann": [["Ann adopted a beagle called Pepper.", "D1:1"],
                                              ["Ann works at the harbour.", ["D1:2"]]],
                                      "Ben": [["Ben plays the cello.", "D1:3; D1:4"], "garbage", []]},
            "session_2_observation": {"Ben ": [{"fact": "Ben moved to Ghent.", "dia_id": "D:2:1"}]},
        },
        "qa": [
            {"question": "What is the name of Ann's dog?", "evidence": ["D1:1"], "category": 4},
            {"question": "Where did Ben move?", "evidence": "D2:1", "category": "2"},
            {"question": "Which instrument does Ben play?", "evidence": ["D1:4"], "category": 1},
            {"question": "Unmatched?", "evidence": ["D9:9"], "category": 4},
            {"question": "Adversarial?", "evidence": ["D1:1"], "category": 5},
            {"evidence": ["D1:1"], "category": 4},
            "not a dict",
        ],
    }
    path = tmp_path / "gappy.json"
    path.write_text(json.dumps([sample, {"conversation": {}}, "junk"]))
    assert recall.main(["--data", str(path), "--lexical-only", "--memories", "5", "--budget", "600"]) == 0
    out = capsys.readouterr().out
    assert "1 conversations (2 skipped)" in out and "3 questions asked" in out
    assert "1 with evidence matching no observation" in out
    assert out.strip().splitlines()[-1] == "recall: any=100.0% all=100.0% budget=600 memories=5 questions=3"


def test_dates_and_ids_are_read_in_their_real_shapes():
    fallback = recall.datetime(2020, 1, 1, tzinfo=recall.timezone.utc)
    assert recall.parse_date("1:56 pm on 8 May, 2023", fallback).date().isoformat() == "2023-05-08"
    assert recall.parse_date("10:37 am on 27 June, 2023", fallback).date().isoformat() == "2023-06-27"
    assert recall.parse_date("???", fallback) == fallback
    assert recall.dia_ids(["D10:19; D10:20", "D:3:4", None]) == ["D10:19", "D10:20", "D3:4"]


def test_other_peoples_observations_are_renamed_to_the_person():
    people, _questions, _counts = recall.load(__import__("pathlib").Path(DATA), 2)
    ann, others = people[0], people[1:]
    grown = recall.grown(ann, people, 40)
    assert len(grown) == 40 and grown[: len(ann.memories)] == ann.memories
    for m in grown[len(ann.memories):]:
        assert not any(re.search(rf"\b{o.name}\b", m.content) for o in others)


def test_the_per_category_table_counts_any_and_all_evidence():
    person = recall.Person("p", "Ann")
    q = lambda cat, tags=(): recall.Question(person, "?", {"a", "b"}, cat, None, tags)  # noqa: E731
    hits = [(q(4), True, True), (q(4), True, False), (q(4), False, False), (q(2, ("first-person",)), True, False),
            (q(6), True, True)]
    rows = {name: (n, any_, all_) for name, n, any_, all_ in recall.by_category(hits)}
    assert rows["single fact"] == (3, 200 / 3, 100 / 3)
    assert rows["about time"] == (1, 100.0, 0.0) and rows["tag: first-person"] == (1, 100.0, 0.0)
    assert rows["what changed"] == (1, 100.0, 100.0)
    assert rows["all"] == (5, 80.0, 40.0)
    assert [name for name, *_ in recall.by_category(hits)] == [
        "single fact", "about time", "what changed", "tag: first-person", "all"]
    lines = recall.category_table(hits)
    assert lines[2].startswith("| single fact") and "66.7%" in lines[2] and "33.3%" in lines[2]


def test_questions_carry_the_message_date_and_the_hard_sets_tags(tmp_path):
    sample = {
        "conversation": {"speaker_a": "Ann", "speaker_b": "Ben", "session_1_date_time": "1:56 pm on 8 May, 2023",
                         "session_2_date_time": "2:00 pm on 20 June, 2023"},
        "observation": {"session_1_observation": {"Ann": [["Ann adopted a beagle.", "D1:1"]]},
                        "session_2_observation": {"Ann": [["Ann moved to Ghent.", "D2:1"]]}},
        "qa": [{"question": "Where did I move?", "evidence": ["D1:1", "D2:1"], "category": 6, "tags": ["first-person"]}],
    }
    path = tmp_path / "one.json"
    path.write_text(json.dumps([sample]))
    _people, questions, _counts = recall.load(path)
    (question,) = questions
    assert question.now.date().isoformat() == "2023-06-21" and question.tags == ("first-person",)
    assert question.category == 6 and len(question.evidence) == 2
