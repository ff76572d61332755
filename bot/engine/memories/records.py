"""Memories: one store namespace per person, one item per fact, every change logged in the same batch.

A memory's value is ``{"content", "origin", "sources", "created_at", "updated_at"}``. ``origin`` says
where the current text was learned: ``guild_id`` (a server ID, or ``"dm"``), ``channel_id``,
``message_id`` and ``source``. ``sources`` lists *every* message (or command) that contributed to the
memory, oldest first: the one that created it and each that patched or edited it, de-duplicated by
message. A memory remembers all the places it came from, not only the last, so that per-place rules
(DM facts stay out of servers, a purge in one server) and the deletion of one message can find every
memory it touched. The timestamps live in the value (ISO 8601, UTC) rather than only in the store's own
columns so that an export can be imported back exactly.

Every insert, update and delete also writes a change-log entry into ``("memory_history", user_id)``: the
action, who did it (extraction, the person, a moderator, an import), when, the text before and after, and
the origin. Memories and their log entries are written in one ``abatch`` call, which the SQLite store runs
in one transaction: an extraction's changes land all together, with their history, or not at all. The same
batch keeps the index of which message taught which memory (``bot.engine.memories.sources``).

Hand-written memories are the person's: a memory written with ``/memories remember`` or corrected with
``/memories edit`` carries a *hand source* (``"source": "user"``, no ``message_id``, see
:func:`hand_source`) in its ``sources`` and as its ``origin``. Events on Discord messages (an edit, a
link preview unfolding, a deletion) never erase or re-learn a memory that has one
(:attr:`StoredMemory.hand_written`): what the person wrote by hand is not undone by what happens to the
message it was first learned from. The message stays listed in ``sources`` (where it was learned still
decides where it may be used, and a moderator purge of that server still finds it); a wipe and
``/memories delete`` / ``forget`` remove it as any other.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable

from langgraph.store.base import Item
from pydantic import BaseModel, Field

NAMESPACE_ROOT = "memories"
HISTORY_ROOT = "memory_history"
WATERMARK_ROOT = "extraction_marks"
# A namespace is read in one statement (``MemoryRepository._all``): one snapshot. Pages by offset, ordered
# by when each item last changed, skipped a memory an extraction moved (or an erasure took from an earlier
# page) between two pages' reads, and showed another twice. The list is held whole anyway; a person's
# memories are bounded by the cap. Pages go on past this only for a namespace larger than any cap.
PAGE_SIZE = 100_000


class Memory(BaseModel):
    """A durable fact about the person: who they are, what they like, what they do, what they plan."""

    content: str = Field(description="The fact, as one short sentence in the third person; empty when there is"
                                     " nothing new worth remembering.")
    source_messages: list[int] = Field(
        default_factory=list,
        description="The numbers (#1, #2, ...) of the new messages this fact comes from.",
    )


@dataclass(frozen=True)
class Actor:
    """Who changed a memory: ``extraction``, ``user`` (the person), ``moderator`` or ``import``."""

    kind: str
    id: str | None = None


EXTRACTION = Actor("extraction")
HAND_SOURCES = frozenset({"user"})  # ``source`` values of what a person wrote or corrected themselves


def is_snowflake(value: object) -> bool:
    """Whether ``value`` is a Discord ID the bot can turn into a number (a server, channel or message):
    ASCII digits only, at most 20 of them. ``str.isdigit`` also accepts "²", which ``int()`` refuses, and
    an import or an older release may have stored any text where an ID belongs."""
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else value
    return isinstance(text, str) and 0 < len(text) <= 20 and text.isascii() and text.isdigit()


def hand_source(origin: dict[str, Any]) -> dict[str, Any]:
    """The provenance of a memory the person wrote or corrected by hand, from where the command was used
    (or, for an edit, where the memory was learned): the place stays, the message goes, the source is them."""
    out = {k: v for k, v in origin.items() if k not in ("message_id", "deleted", "from_message")}
    out["message_id"] = ""
    out["source"] = "user"
    if origin.get("message_id") or origin.get("from_message"):  # "Remember this" on a message, or a correction:
        out["from_message"] = str(origin.get("message_id") or origin["from_message"])  # which one, for "Forget this"
    return out


def _source_id(source: dict[str, Any]) -> tuple:
    """What makes two sources the same: the message, or (for commands) the place and the actor kind."""
    message = source.get("message_id")
    if message:
        return ("message", str(message))
    return ("place", str(source.get("guild_id")), str(source.get("channel_id")), str(source.get("source")))


MAX_CONTENT = 2000  # characters of one memory: what a person can write, an import takes, extraction keeps


def clipped(content: str) -> str:
    """A memory's text within :data:`MAX_CONTENT` (a model that wrote a page is cut, at a word)."""
    if len(content) <= MAX_CONTENT:
        return content
    return content[: MAX_CONTENT - 1].rsplit(" ", 1)[0].rstrip() + "…"


def same_fact(text: str) -> str:
    """A fact's text for telling repeats apart: case, spacing and the closing full stop do not count."""
    return " ".join(text.casefold().split()).rstrip(".!")


def merge_sources(*lists: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Concatenate source lists, oldest first, keeping the first occurrence of each source.

    A source cited again keeps its place and takes the later time: a message learned again after its edit
    must read as learned after it (``steps._learned_after``), or every later pin or link preview of it
    would be taken for the edit once more, erasing and re-learning what it taught.
    """
    seen: dict[tuple, dict[str, Any]] = {}
    out: list[dict[str, Any]] = []
    for sources in lists:
        for source in sources:
            ident = _source_id(source)
            if ident not in seen:
                seen[ident] = dict(source)
                out.append(seen[ident])
            elif _later(source.get("at"), seen[ident].get("at")):
                seen[ident]["at"] = source["at"]
    return out


def _later(at: Any, than: Any) -> bool:
    """Whether the source time ``at`` is after ``than`` (an unreadable one is never later)."""
    try:
        return datetime.fromisoformat(str(at)) > datetime.fromisoformat(str(than))
    except (TypeError, ValueError):
        return False


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


LEARNED_AT_REACH = timedelta(days=30)


def learned_at(sources: Iterable[dict[str, Any]], now: str) -> str:
    """When a new memory was learned: the time of the earliest message it came from, else ``now``.

    Extraction runs after a conversation has gone quiet, and after a model outage or a restart it can run
    hours later; the memory's date (``created_at``, shown in the prompt and read by "when did ...") should
    be the day the person said it, not the day the queue got to it. A source time in the future, or more
    than 30 days before ``now`` (a source without a real time reads as 1970), is not trusted, and ``now``
    is used: it never moves a memory's date later than before. A message learned again after an edit
    carries when it was sent (``sent_at``, from its Discord ID): that is its date however old.
    """
    current = datetime.fromisoformat(now)
    best = current
    for source in sources:
        sent = source.get("sent_at")
        try:
            at = datetime.fromisoformat(str(sent or source.get("at")))
        except ValueError:
            continue
        if at.tzinfo is None:
            continue
        if (sent or current - LEARNED_AT_REACH <= at) and at < best:
            best = at
    return now if best == current else best.astimezone(timezone.utc).isoformat(timespec="microseconds")


def as_utc(value: datetime) -> datetime:
    """A time without a zone read as UTC, as the bot writes every time (a hand-edited import file has them)."""
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


def _parse(value: Any, fallback: datetime) -> datetime:
    """A stored time, always with a zone: one without (written into an imported file by hand, before imports
    read such times as UTC) is read as UTC, since a list that mixes the two cannot be sorted at all."""
    try:
        return as_utc(datetime.fromisoformat(str(value)))
    except ValueError:
        return as_utc(fallback)


@dataclass(frozen=True)
class StoredMemory:
    """A memory as read from the store."""

    key: str
    content: str
    origin: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    sources: tuple[dict[str, Any], ...] = ()

    @property
    def short_id(self) -> str:
        """The last 8 characters of the key (random, unlike the time-ordered start)."""
        return self.key[-8:]

    @classmethod
    def from_item(cls, item: Item) -> "StoredMemory":
        value = item.value or {}
        origin = dict(value.get("origin") or {})
        sources = value.get("sources") or ([origin] if origin else [])
        return cls(
            key=item.key,
            content=str(value.get("content", "")),
            origin=origin,
            created_at=_parse(value.get("created_at"), item.created_at),
            updated_at=_parse(value.get("updated_at"), item.updated_at),
            sources=tuple(dict(s) for s in sources),
        )

    def places(self) -> set[str]:
        """Every ``guild_id`` (a server ID, or ``"dm"``) that contributed to this memory."""
        return {str(s.get("guild_id")) for s in self.sources if s.get("guild_id") is not None}

    def message_ids(self) -> set[str]:
        """Every Discord message ID this memory was learned or changed from."""
        return {str(s["message_id"]) for s in self.sources if s.get("message_id")}

    def about_messages(self) -> set[str]:
        """The messages this memory came from, the ones a person remembered by hand included (those are
        not among :meth:`message_ids`: events on them leave the memory alone, but "Forget this" finds it)."""
        return self.message_ids() | {str(s["from_message"]) for s in self.sources if s.get("from_message")}

    @property
    def hand_written(self) -> bool:
        """Written or corrected by the person (``remember``, ``edit``): events on messages leave it alone."""
        return str(self.origin.get("source")) in HAND_SOURCES or any(
            str(s.get("source")) in HAND_SOURCES for s in self.sources)

    def imported_from(self, message_id: str) -> bool:
        """Whether the only word that ``message_id`` taught this memory is a file the person imported: the
        bot never saw that message teach it, so it does not know who wrote the message (see
        ``export.parse_import``); an edit of the message re-learns nothing from it for them."""
        linked = [s for s in self.sources if str(s.get("message_id") or "") == str(message_id)]
        return bool(linked) and all(s.get("imported") for s in linked)

    def live_message_ids(self) -> set[str]:
        """The message IDs among the sources whose messages were not deleted (a deleted message that other
        messages also taught this memory is kept in ``sources``, marked ``"deleted": true``)."""
        return {str(s["message_id"]) for s in self.sources if s.get("message_id") and not s.get("deleted")}


@dataclass(frozen=True)
class HistoryEntry:
    """One change to one memory."""

    key: str
    memory_key: str
    action: str  # created | updated | deleted
    actor: str
    actor_id: str | None
    at: str
    before: str | None
    after: str | None
    origin: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}

    @classmethod
    def from_item(cls, item: Item) -> "HistoryEntry":
        v = item.value
        return cls(item.key, v["memory_key"], v["action"], v["actor"], v.get("actor_id"), v["at"],
                   v.get("before"), v.get("after"), dict(v.get("origin") or {}))


@dataclass
class MemoryChanges:
    """What one batch of writes did, by key."""

    inserted: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.inserted or self.updated or self.deleted)


def time_ordered_keys(n: int) -> list[str]:
    """``n`` new UUIDv7 keys in creation order: listing by key is listing by when it was learned.

    The store's timestamps have one-second resolution, so a batch of inserts would otherwise come back in
    random order. The 12-bit ``rand_a`` field carries the position in the batch.
    """
    ms = time.time_ns() // 1_000_000
    keys = []
    for i in range(n):
        stamp, seq = ms + i // 4096, i % 4096
        rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
        value = (stamp << 80) | (0x7 << 76) | (seq << 64) | (0b10 << 62) | rand_b
        keys.append(str(uuid.UUID(int=value)))
    return keys


def namespace(user_id: str | int) -> tuple[str, str]:
    """The store namespace of one person's memories: ``("memories", "<discord user id>")``."""
    return (NAMESPACE_ROOT, str(user_id))


def watermark_namespace(user_id: str | int) -> tuple[str, str]:
    """Per person, per thread: the newest inbox turn whose extraction is committed (no content)."""
    return (WATERMARK_ROOT, str(user_id))


def history_namespace(user_id: str | int) -> tuple[str, str]:
    """The store namespace of one person's change log."""
    return (HISTORY_ROOT, str(user_id))
