"""The quote rule: four words or twenty characters copied from an erased message are cut out, no less."""

from __future__ import annotations

from bot.engine.erasure.quotes import REDACTED, QuoteRule

ERASED = "I like the zebra-quartz-7731 project and my cat sleeps on the piano every night"


def rule() -> QuoteRule:
    return QuoteRule.from_texts([ERASED])


def test_four_words_copied_anywhere_are_redacted_whatever_the_case_and_punctuation():
    text = 'Bob: Alice told me "My CAT sleeps on the Piano", funny!'
    assert rule().redact(text) == f'Bob: Alice told me "{REDACTED}", funny!'


def test_twenty_characters_in_fewer_words_are_redacted():
    assert rule().redact("what is zebra-quartz-7731 project?") == f"what is {REDACTED}?"
    assert rule().redact("**zebra-quartz-7731**") == "**zebra-quartz-7731**"  # 17 characters alone: too short


def test_three_short_words_and_paraphrase_stay():
    for text in ("I like the weather", "my cat sleeps", "Alice has a cat that naps on her piano at night"):
        assert rule().redact(text) == text, text


def test_a_long_quote_becomes_one_marker_and_the_rest_of_the_text_stays():
    text = f"She said: {ERASED}. Anyway, lunch?"
    assert rule().redact(text) == f"She said: {REDACTED}. Anyway, lunch?"


def test_the_rule_round_trips_through_bytes_without_any_words():
    r = rule()
    data = r.to_bytes()
    assert b"zebra" not in data and b"piano" not in data
    again = QuoteRule.from_bytes(data)
    assert again.redact("the zebra-quartz-7731 project") == REDACTED
    assert again.grams == r.grams


def test_an_empty_rule_changes_nothing():
    assert QuoteRule().redact(ERASED) == ERASED
    assert not QuoteRule.from_texts(["", "   "])
