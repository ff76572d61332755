"""Time in questions: which stretch of time a message names, and whether it asks "when".

Memories carry the date of what they describe (``created_at``: when the fact was first learned), and a
question often names a time relative to the message's own date ("last year", "in May", "three weeks ago").
``time_window`` turns that into a window of dates so the choice can prefer facts dated inside it;
``asks_when`` says the question wants a date, so facts that carry one are worth more. Both are plain rules
over English (and a few German/Spanish month words); a phrase they do not know means no window, never a
wrong one on purpose.
"""

from __future__ import annotations

import functools
import re
from datetime import datetime, timedelta, timezone

MONTHS = {name: i + 1 for i, name in enumerate(
    "january february march april may june july august september october november december".split())}
MONTHS.update({name[:3]: i for name, i in list(MONTHS.items()) if name != "may"})
MONTHS.update({"sept": 9, "januar": 1, "februar": 2, "märz": 3, "mai": 5, "juni": 6, "juli": 7, "oktober": 10,
               "dezember": 12, "enero": 1, "febrero": 2, "marzo": 3, "abril": 4, "mayo": 5, "junio": 6, "julio": 7,
               "agosto": 8, "septiembre": 9, "octubre": 10, "noviembre": 11, "diciembre": 12})
UNITS = {"day": 1, "week": 7, "month": 30, "year": 365}
NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "couple": 2, "few": 3,
           "several": 4}
SEASONS = {"spring": (3, 5), "summer": (6, 8), "autumn": (9, 11), "fall": (9, 11), "winter": (12, 2)}

_MONTH_RE = "|".join(sorted(MONTHS, key=len, reverse=True))
_MONTH = re.compile(rf"\b(?:in|during|of|since|by|im|en|de)?\s*(?:early |late |mid-?)?({_MONTH_RE})\b\.?(?:\s+(?:of\s+)?(\d{{4}}))?",
                    re.IGNORECASE)
_YEAR = re.compile(r"\b(?:in|during|of|im|en)\s+((?:19|20)\d{2})\b", re.IGNORECASE)
_AGO = re.compile(r"\b(\d+|a|an|one|two|three|four|five|six|couple|few|several)\s+(?:of\s+)?(day|week|month|year)s?\s+ago\b",
                  re.IGNORECASE)
_RELATIVE = re.compile(r"\b(last|this|past|previous)\s+(week|month|year|spring|summer|autumn|fall|winter|weekend)\b",
                       re.IGNORECASE)
_YESTERDAY = re.compile(r"\b(yesterday|gestern|ayer)\b", re.IGNORECASE)
_LAST_YEAR_OTHER = re.compile(r"\b(letztes jahr|letzten jahr|el año pasado|año pasado)\b", re.IGNORECASE)
_WHEN = re.compile(r"\b(when|what date|what day|what month|what year|how long ago|since when|wann|cuándo|cuando)\b",
                   re.IGNORECASE)
_QUESTION_WORD = re.compile(r"\b(what date|what day|what month|what year|how long ago|since when|when|wann|cuándo|"
                            r"cuando|what|which|who|whom|whose|where|why|how)\b", re.IGNORECASE)
_SENTENCES = re.compile(r"[.?!\n]+")
_DATED = re.compile(rf"\b({_MONTH_RE}|yesterday|today|tonight|last (?:week|month|year|weekend|night)|ago|"
                    r"(?:19|20)\d{2}|monday|tuesday|wednesday|thursday|friday|saturday|sunday|next (?:week|month|year|"
                    r"spring|summer|autumn|winter))\b", re.IGNORECASE)

Window = tuple[datetime, datetime]

# Month words that are also everyday words or first names: a month only with a preposition ("in June", "im
# Mai"), a day ("8 May", "May 8th") or a year beside them. "What did I get April for her birthday?" names a
# person, and "do I like mayo?" no month.
_AMBIGUOUS = frozenset("may march mayo mai june april august jan julio abril".split())


def _dated_use(text: str, name: str) -> bool:
    """Whether the month word is used as one: "last March", "in June", "mid-May", "8 May", "May 3" (but not
    "April's cat": a possessive names a person). "last", "this", "next" and "past" do not make "may" a
    month: "this may be a dumb question" is the verb."""
    relative = "" if name == "may" else "last|this|next|past|previous|"
    return bool(re.search(rf"(?:\b(?:in|during|of|since|by|on|until|before|after|{relative}early|"
                          rf"late|im|en|de)\s+(?:early |late |mid-?)?|\bmid-?\s*|\d(?:st|nd|rd|th)?\s+(?:of\s+)?)"
                          rf"{name}\b(?!['’]s\b)|\b{name}\s+\d", text))


def _utc(t: datetime) -> datetime:
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def _month_span(year: int, month: int) -> Window:
    start = datetime(year, month, 1, tzinfo=timezone.utc)
    end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=timezone.utc)
    return start, end


def time_window(query: str, now: datetime | None) -> Window | None:
    """The stretch of time the query names, relative to ``now`` (the message's date), or None.

    A bare month means its latest occurrence not after ``now`` ("in May" asked in March 2024 is May 2023).
    Without ``now`` only absolute times (a month with its year, a year) are understood.
    """
    found = _named_time(query, now)
    return found[0] if found is not None else None


def without_time(query: str, now: datetime | None) -> str:
    """The query without the time phrase ``time_window`` read from it ("what did Ann buy last month?" ->
    "what did Ann buy?").

    Once the phrase is a window of dates it has done its work. Left in the words that are compared, "last
    month" matches every memory that says "last week" ("harvested runner beans last week") better than the
    purchase that was asked about, whose text names no time at all.
    """
    found = _named_time(query, now)
    if found is None:
        return query
    start, end = found[1]
    return re.sub(r"\s+([?!.,])", r"\1", f"{query[:start].rstrip()} {query[end:].lstrip()}").strip()


def _named_time(query: str, now: datetime | None) -> tuple[Window, tuple[int, int]] | None:
    """The window the query names and where in the query it is named."""
    now = _utc(now) if now is not None else None
    text = query.lower()
    for m in _MONTH.finditer(query):
        name, year = m.group(1).lower(), m.group(2)
        month = MONTHS[name]
        if name in _AMBIGUOUS and not year and not _dated_use(text, name):
            continue  # "may" the verb, "march", "mayo", someone called June or April
        if year:
            return _month_span(int(year), month), m.span()
        if now is not None:
            y = now.year if month <= now.month else now.year - 1
            return _month_span(y, month), m.span()
        break
    if now is None:
        if y := _YEAR.search(query):
            year = int(y.group(1))
            return (datetime(year, 1, 1, tzinfo=timezone.utc), datetime(year + 1, 1, 1, tzinfo=timezone.utc)), y.span()
        return None
    if m := _YESTERDAY.search(query):
        return (now - timedelta(days=2), now), m.span()
    if m := _LAST_YEAR_OTHER.search(query):
        return (datetime(now.year - 1, 1, 1, tzinfo=timezone.utc), datetime(now.year, 1, 1, tzinfo=timezone.utc)), m.span()
    if m := _AGO.search(query):
        count = int(m.group(1)) if m.group(1).isdigit() else NUMBERS[m.group(1).lower()]
        days = count * UNITS[m.group(2).lower()]
        slack = max(2, days // 3)
        return (now - timedelta(days=days + slack), now - timedelta(days=max(0, days - slack))), m.span()
    if m := _RELATIVE.search(query):
        return _relative(m.group(1).lower(), m.group(2).lower(), now), m.span()
    if y := _YEAR.search(query):
        year = int(y.group(1))
        return (datetime(year, 1, 1, tzinfo=timezone.utc), datetime(year + 1, 1, 1, tzinfo=timezone.utc)), y.span()
    return None


def _relative(which: str, unit: str, now: datetime) -> Window:
    """"last/this/past/previous" with a week, month, year or season."""
    if unit in ("week", "weekend"):
        return (now - timedelta(days=14), now) if which != "this" else (now - timedelta(days=7), now)
    if unit == "month":
        return (now - timedelta(days=45), now) if which != "this" else (now - timedelta(days=31), now)
    if unit == "year":
        if which == "this":
            return datetime(now.year, 1, 1, tzinfo=timezone.utc), now
        if which == "past":
            return now - timedelta(days=365), now
        return datetime(now.year - 1, 1, 1, tzinfo=timezone.utc), datetime(now.year, 1, 1, tzinfo=timezone.utc)
    first, last = SEASONS[unit]
    year = now.year if which == "this" else now.year - 1
    if first > last:  # winter runs over the new year
        return datetime(year - 1, first, 1, tzinfo=timezone.utc), _month_span(year, last)[1]
    return _month_span(year, first)[0], _month_span(year, last)[1]


def asks_when(query: str) -> bool:
    """Whether the question asks for a time ("when did ...", "what month ...", "do you remember when ...").

    Per sentence, the first question word decides: in "what should the host skip when Emeric comes to
    dinner?" the question is "what", and "when" only joins two clauses, so the facts that carry a date are
    not what it asks for.
    """
    for sentence in _SENTENCES.split(query):
        first = _QUESTION_WORD.search(sentence)
        if first is not None and _WHEN.fullmatch(first.group(0)):
            return True
    return False


@functools.lru_cache(maxsize=65_536)
def mentions_time(text: str) -> bool:
    """Whether a memory's text itself carries a time ("in May", "last week", "2023"): a dated fact."""
    return bool(_DATED.search(text))


def closeness(when: datetime, window: Window, falloff_days: float = 30.0) -> float:
    """1 inside the window, falling off linearly to 0 at ``falloff_days`` outside it."""
    when = _utc(when)
    start, end = window
    if start <= when < end:
        return 1.0
    gap = (start - when).days if when < start else (when - end).days
    return max(0.0, 1.0 - gap / falloff_days)


_TIME_KEYS = ("sent_at", "created_at", "timestamp", "date")


def message_time(metadata: dict | None) -> datetime | None:
    """The date a message's metadata carries (ISO text, a datetime or epoch seconds), or None."""
    for key in _TIME_KEYS:
        value = (metadata or {}).get(key)
        if value is None or value == "":
            continue
        try:
            if isinstance(value, datetime):
                return _utc(value)
            if isinstance(value, (int, float)):
                return datetime.fromtimestamp(float(value), tz=timezone.utc)
            return _utc(datetime.fromisoformat(str(value)))
        except (ValueError, OverflowError, OSError):
            continue
    return None


def reply_time(messages: list) -> datetime:
    """"Now" for a reply: the date of the latest human message when its metadata has one, else the clock.

    The message's own date, not the moment the reply is computed, is what "last week" in it refers to.
    """
    for m in reversed(messages):
        if getattr(m, "type", None) == "human":
            found = message_time(getattr(m, "additional_kwargs", None))
            if found is not None:
                return found
            break
    return datetime.now(timezone.utc)
