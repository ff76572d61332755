"""Times named in questions, relative to the message's own date, and the message's date itself."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace

from bot.engine.recall.temporal import (
    asks_when,
    closeness,
    mentions_time,
    message_time,
    reply_time,
    time_window,
    without_time,
)

NOW = datetime(2024, 3, 5, 12, tzinfo=timezone.utc)


def day(y: int, m: int, d: int) -> datetime:
    return datetime(y, m, d, tzinfo=timezone.utc)


def test_last_year_is_the_previous_calendar_year():
    assert time_window("Which band did Ann see last year?", NOW) == (day(2023, 1, 1), day(2024, 1, 1))
    assert time_window("¿Qué hizo el año pasado?", NOW) == (day(2023, 1, 1), day(2024, 1, 1))


def test_a_bare_month_is_its_latest_occurrence_not_after_now():
    assert time_window("Where did Ann travel in May?", NOW) == (day(2023, 5, 1), day(2023, 6, 1))
    assert time_window("What happened in February?", NOW) == (day(2024, 2, 1), day(2024, 3, 1))
    assert time_window("Where did Ann travel in October 2022?", NOW) == (day(2022, 10, 1), day(2022, 11, 1))


def test_may_the_verb_is_not_a_month_and_unknown_phrases_give_no_window():
    assert time_window("May I ask what Ann likes?", NOW) is None
    assert time_window("What does Ann like?", NOW) is None


def test_relative_spans():
    start, end = time_window("What did Ann buy last month?", NOW)
    assert end == NOW and (NOW - start).days == 45
    start, end = time_window("What did Ann do two weeks ago?", NOW)
    assert start < day(2024, 2, 20) < end < NOW
    assert time_window("yesterday", NOW)[1] == NOW


def test_without_now_only_absolute_times():
    assert time_window("in May 2023", None) == (day(2023, 5, 1), day(2023, 6, 1))
    assert time_window("in 2022", None) == (day(2022, 1, 1), day(2023, 1, 1))
    assert time_window("last year", None) is None


def test_when_questions_and_dated_facts():
    assert asks_when("When did Ann go camping?") and asks_when("Wann war das?")
    assert not asks_when("What is Ann's dog called?")


def test_a_when_that_joins_two_clauses_does_not_ask_for_a_time():
    """The first question word of a sentence decides; the query holds the recent turns, one per line."""
    assert not asks_when("What should the host skip when Emeric comes to the barbecue?")
    assert not asks_when("What did I do when I was in Paris?")
    assert asks_when("What did I do when I was in Paris? When was that?")
    assert asks_when("Do you remember when I went camping?")
    assert asks_when("thanks!\nwhen did I move to Porto")
    assert asks_when("What month did Ann move?") and asks_when("How long ago did Ann move?")
    assert asks_when("¿Cuándo fue Ann al hospital?")
    assert mentions_time("Ann went to Crete last week.") and mentions_time("Ann's sister marries in June.")
    assert not mentions_time("Ann likes tea.")


def test_closeness_falls_off_outside_the_window():
    window = (day(2023, 5, 1), day(2023, 6, 1))
    assert closeness(day(2023, 5, 20), window) == 1.0
    assert 0.0 < closeness(day(2023, 6, 10), window) < 1.0
    assert closeness(day(2023, 9, 1), window) == 0.0


def test_the_message_date_comes_from_its_metadata_else_the_clock():
    assert message_time({"sent_at": "2024-03-05T12:00:00+00:00"}) == NOW
    assert message_time({"timestamp": NOW.timestamp()}) == NOW
    assert message_time({"created_at": "garbage"}) is None and message_time(None) is None
    human = SimpleNamespace(type="human", additional_kwargs={"sent_at": NOW.isoformat()})
    bot = SimpleNamespace(type="ai", additional_kwargs={})
    assert reply_time([human, bot]) == NOW
    undated = SimpleNamespace(type="human", additional_kwargs={})
    assert reply_time([human, undated]).tzinfo is not None  # the latest human message has none: the clock


def test_the_time_phrase_read_as_a_window_leaves_the_words_to_compare():
    assert without_time("What did Ann buy last month?", NOW) == "What did Ann buy?"
    assert without_time("When did I go camping in May?", NOW) == "When did I go camping?"
    assert without_time("Where did Ann travel in October 2022, then?", None) == "Where did Ann travel, then?"
    assert without_time("What did Ann do two weeks ago?", NOW) == "What did Ann do?"
    assert without_time("¿Qué hizo Ann el año pasado?", NOW) == "¿Qué hizo Ann?"
    assert without_time("What did Ann do yesterday", NOW) == "What did Ann do"
    assert without_time("May I ask what Ann likes?", NOW) == "May I ask what Ann likes?"  # "may" the verb
    assert without_time("What did Ann buy last month?", None) == "What did Ann buy last month?"  # no window
    assert without_time("What does Ann like?", NOW) == "What does Ann like?"


def test_a_month_that_is_also_a_name_or_a_word_needs_a_preposition_a_day_or_a_year():
    """"What did I get April for her birthday?" named a person, not a month; "do I like mayo?" no month. Found
    in review 2026-12-07: such a window gave every memory of that month +0.35."""
    assert time_window("What did I get April for her birthday?", NOW) is None
    assert time_window("do I like mayo?", NOW) is None
    assert time_window("Did August call back?", NOW) is None
    assert time_window("What did I do on 8 May?", NOW) == (day(2023, 5, 1), day(2023, 6, 1))
    assert time_window("What did Ann do May 3?", NOW) == (day(2023, 5, 1), day(2023, 6, 1))
    assert time_window("Was hat Ann im Mai gemacht?", NOW) == (day(2023, 5, 1), day(2023, 6, 1))
    assert time_window("May I ask what happened in June?", NOW) == (day(2023, 6, 1), day(2023, 7, 1))  # the next one
    assert time_window("What did Ann do in October?", NOW) == (day(2023, 10, 1), day(2023, 11, 1))
    # and as a month with "last", "this", "mid-" (the first version of this rule missed them), never as a possessive
    assert time_window("What did I buy last June?", NOW) == (day(2023, 6, 1), day(2023, 7, 1))
    assert time_window("Where was Ann in mid-May?", NOW) == (day(2023, 5, 1), day(2023, 6, 1))
    assert time_window("What is the name of April's cat?", NOW) is None
    assert time_window("this may be a dumb question but what is my sister called?", NOW) is None
