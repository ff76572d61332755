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
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable

from langgraph.store.base import BaseStore, GetOp, Item, PutOp
from pydantic import BaseModel, Field

from bot.engine.memories.sources import SourceChanges, users_taught_by

NAMESPACE_ROOT = "memories"
HISTORY_ROOT = "memory_history"
WATERMARK_ROOT = "extraction_marks"
PAGE_SIZE = 500


class Memory(BaseModel):
    """A durable fact about the person: who they are, what they like, what they do, what they plan."""

    content: str = Field(description="The fact, as one short sentence in the third person.")
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


def _source_id(source: dict[str, Any]) -> tuple:
    """What makes two sources the same: the message, or (for commands) the place and the actor kind."""
    message = source.get("message_id")
    if message:
        return ("message", str(message))
    return ("place", str(source.get("guild_id")), str(source.get("channel_id")), str(source.get("source")))


def merge_sources(*lists: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Concatenate source lists, oldest first, keeping the first occurrence of each source."""
    seen: set[tuple] = set()
    out: list[dict[str, Any]] = []
    for sources in lists:
        for source in sources:
            ident = _source_id(source)
            if ident not in seen:
                seen.add(ident)
                out.append(dict(source))
    return out


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _parse(value: Any, fallback: datetime) -> datetime:
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return fallback


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


class MemoryRepository:
    """Reads and writes one person's memories (and their change log) through a LangGraph ``BaseStore``.

    Every read pages through the namespace (``BaseStore.search`` returns 10 items unless told otherwise).
    """

    def __init__(self, store: BaseStore) -> None:
        self.store = store

    async def items(self, ns: tuple[str, ...], **filters: Any) -> list[Item]:
        """Every item of a namespace (paged), optionally filtered on value fields."""
        return await self._all(ns, **filters)

    async def _all(self, ns: tuple[str, ...], **filters: Any) -> list[Item]:
        items: list[Item] = []
        offset = 0
        while True:
            page = await self.store.asearch(ns, filter=filters or None, limit=PAGE_SIZE, offset=offset)
            items.extend(page)
            if len(page) < PAGE_SIZE:
                return items
            offset += PAGE_SIZE

    async def list(self, user_id: str | int) -> list[StoredMemory]:
        """All of a person's memories, oldest first."""
        memories = [StoredMemory.from_item(i) for i in await self._all(namespace(user_id))]
        memories.sort(key=lambda m: (m.created_at, m.key))
        return memories

    async def count(self, user_id: str | int) -> int:
        return len(await self._all(namespace(user_id)))

    async def get(self, user_id: str | int, key: str) -> StoredMemory | None:
        item = await self.store.aget(namespace(user_id), key)
        return StoredMemory.from_item(item) if item else None

    async def resolve(self, user_id: str | int, key_or_prefix: str) -> StoredMemory | None:
        """Find one of the person's memories by full key, short ID, or an unambiguous key prefix."""
        key_or_prefix = key_or_prefix.strip()
        if not key_or_prefix:
            return None
        exact = await self.get(user_id, key_or_prefix)
        if exact:
            return exact
        matches = [m for m in await self.list(user_id) if m.short_id == key_or_prefix or m.key.startswith(key_or_prefix)]
        return matches[0] if len(matches) == 1 else None

    async def watermark(self, user_id: str | int, thread_id: str, epoch: str) -> int:
        """The newest inbox turn of this thread whose extraction is committed, for inbox ``epoch``."""
        item = await self.store.aget(watermark_namespace(user_id), thread_id)
        if item is None or item.value.get("epoch") != epoch:
            return 0
        return int(item.value.get("last_turn_id", 0))

    async def history(self, user_id: str | int, memory_key: str | None = None) -> list[HistoryEntry]:
        """A person's change log (one memory's, when ``memory_key`` is given), oldest first."""
        filters = {"memory_key": memory_key} if memory_key else {}
        entries = [HistoryEntry.from_item(i) for i in await self._all(history_namespace(user_id), **filters)]
        entries.sort(key=lambda e: (e.at, e.key))
        return entries

    async def apply(
        self,
        user_id: str | int,
        *,
        inserts: Iterable[tuple[str, dict] | tuple[str, dict, list[dict]]] = (),
        updates: Iterable[tuple[str, str, dict] | tuple[str, str, dict, list[dict]]] = (),
        deletes: Iterable[str] = (),
        actor: Actor = EXTRACTION,
        watermark: tuple[str, int, str] | None = None,
        watermarks: Iterable[tuple[str, int, str]] = (),
        cap: int | None = None,
    ) -> MemoryChanges:
        """Apply inserts ``(content, origin[, sources])``, updates ``(key, content, origin[, sources])`` and
        deletes, logged, in one batch.

        ``sources`` (the messages a change came from) default to ``[origin]``; an update appends them to
        the memory's existing sources. Updates and deletes of keys the person does not have are ignored.
        ``watermark`` (thread ID, inbox turn ID, inbox epoch) is written in the same transaction, so after
        a crash the scheduler knows these turns were applied and does not extract them twice.
        ``cap`` (the most memories one person may have) makes room for inserts (see :meth:`_make_room`).
        """
        ns, hns = namespace(user_id), history_namespace(user_id)
        inserts = [(i[0], i[1], list(i[2]) if len(i) > 2 else [i[1]]) for i in inserts]
        updates = [(u[0], u[1], u[2], list(u[3]) if len(u) > 3 else [u[2]]) for u in updates]
        deletes = list(dict.fromkeys(deletes))
        if cap is not None and inserts:
            inserts, deletes = await self._make_room(user_id, cap, inserts, updates, deletes)
        touched = [u[0] for u in updates] + deletes
        current: dict[str, Item] = {}
        if touched:
            found = await self.store.abatch([GetOp(ns, k) for k in touched])
            current = {item.key: item for item in found if item is not None}
        now = _now()
        ops: list[PutOp] = []
        changes = MemoryChanges()
        taught = SourceChanges(user_id)
        log_keys = iter(time_ordered_keys(len(inserts) + len(updates) + len(deletes)))

        def log(memory_key: str, action: str, before: str | None, after: str | None, origin: dict) -> None:
            entry = {"memory_key": memory_key, "action": action, "actor": actor.kind, "actor_id": actor.id,
                     "at": now, "before": before, "after": after, "origin": origin}
            ops.append(PutOp(hns, next(log_keys), entry, index=False))

        for (content, origin, sources), key in zip(inserts, time_ordered_keys(len(inserts))):
            value = {"content": content, "origin": origin, "sources": merge_sources(sources),
                     "created_at": now, "updated_at": now}
            ops.append(PutOp(ns, key, value, index=False))
            taught.replace(key, None, value)
            log(key, "created", None, content, origin)
            changes.inserted.append(key)
        for key, content, origin, sources in updates:
            old = current.get(key)
            if old is None or key in deletes:
                continue
            before = StoredMemory.from_item(old).sources
            value = {**old.value, "content": content, "origin": origin, "sources": merge_sources(before, sources),
                     "updated_at": now}
            value.setdefault("created_at", old.created_at.isoformat())
            ops.append(PutOp(ns, key, value, index=False))
            taught.replace(key, old.value, value)
            log(key, "updated", old.value.get("content"), content, origin)
            changes.updated.append(key)
        for key in deletes:
            old = current.get(key)
            if old is None:
                continue
            ops.append(PutOp(ns, key, None))
            taught.replace(key, old.value, None)
            log(key, "deleted", old.value.get("content"), None, dict(old.value.get("origin") or {}))
            changes.deleted.append(key)
        # One extraction can cover turns of several threads (channels of one server): one mark each.
        for thread_id, turn_id, epoch in [*([watermark] if watermark is not None else []), *watermarks]:
            ops.append(PutOp(watermark_namespace(user_id), thread_id,
                             {"last_turn_id": turn_id, "epoch": epoch}, index=False))
        ops += await taught.ops(self.store)
        if ops:
            await self.store.abatch(ops)
        return changes

    async def _make_room(self, user_id, cap: int, inserts: list, updates: list, deletes: list) -> tuple[list, list]:
        """Keep a person at ``cap`` memories when extraction learns more: drop the least recently used.

        "Used" is when a memory was last learned or confirmed (``updated_at``). Only memories learned by
        extraction make room; what the person wrote themselves (``remember``, ``edit``, an import) is never
        dropped to make room for something the bot inferred: when nothing else can go, the newest inserts
        are dropped instead. Either way the log says how many (never which text, at INFO).
        """
        items = [StoredMemory.from_item(i) for i in await self._all(namespace(user_id))]
        kept = [m for m in items if m.key not in set(deletes)]
        over = len(kept) + len(inserts) - cap
        if over <= 0:
            return inserts, deletes
        touched = {u[0] for u in updates}
        evictable = sorted((m for m in kept if m.key not in touched and m.origin.get("source", "extraction") == "extraction"),
                           key=lambda m: (m.updated_at, m.key))
        evicted = [m.key for m in evictable[:over]]
        dropped = max(0, over - len(evicted))
        if dropped:
            inserts = inserts[: len(inserts) - dropped]
        logging.getLogger(__name__).warning(
            "user %s is at the cap of %d memories: dropped %d least recently used, skipped %d new",
            user_id, cap, len(evicted), dropped)
        return inserts, deletes + evicted

    async def room(self, user_id: str | int, cap: int) -> int:
        """How many more memories a person may have under ``cap`` (0 when full)."""
        return max(0, cap - await self.count(user_id))

    async def add(self, user_id: str | int, content: str, origin: dict, *, actor: Actor = EXTRACTION) -> str:
        """Insert one memory and return its key."""
        return (await self.apply(user_id, inserts=[(content, origin)], actor=actor)).inserted[0]

    async def edit(self, user_id: str | int, key: str, content: str, origin: dict, *, actor: Actor) -> bool:
        """Replace one memory's text; return whether it existed."""
        return bool((await self.apply(user_id, updates=[(key, content, origin)], actor=actor)).updated)

    async def delete(self, user_id: str | int, key: str, *, actor: Actor = EXTRACTION) -> bool:
        """Delete one memory; return whether it existed."""
        return bool((await self.apply(user_id, deletes=[key], actor=actor)).deleted)

    async def erase(self, user_id: str | int, *, guild_id: str | None = None, record: Actor | None = None) -> int:
        """Erase memories and their change log, leaving no trace; return how many memories were removed.

        See :func:`bot.engine.erasure.memories.erase_memories` (a purge reduces memories that were also
        learned elsewhere instead of deleting them).
        """
        from bot.engine.erasure.memories import erase_memories

        return (await erase_memories(self, user_id, guild_id=guild_id, record=record)).deleted

    async def learned_only_from(self, message_ids: set[str], *, authors: Iterable[str] = ()) -> dict[str, list[str]]:
        """Memories whose every source is one of ``message_ids`` (or a message deleted before): user ID -> keys.

        Whoever has a memory taught by one of the messages is found in the index written with every memory
        change (``bot.engine.memories.sources``), on every backend. ``authors`` (the messages' authors, when
        known) are checked directly. Memories written before the index existed are found as before: by
        asking the store for memories whose latest origin is one of the messages (such a memory's latest
        origin necessarily is); the SQLite store answers that dotted filter, the PostgreSQL store (top-level
        keys only) answers nothing, so there only known authors and the index count.
        """
        candidates = set(authors)
        candidates |= await self.taught_by(message_ids)
        for message_id in sorted(message_ids):
            for item in await self._all((NAMESPACE_ROOT,), **{"origin.message_id": message_id}):
                if len(item.namespace) == 2:
                    candidates.add(item.namespace[1])
        found: dict[str, list[str]] = {}
        for user in sorted(candidates):
            keys = [m.key for m in await self.list(user) if m.message_ids() and m.live_message_ids() <= message_ids]
            if keys:
                found[user] = keys
        return found

    async def taught_by(self, message_ids: set[str]) -> set[str]:
        """Everyone with a memory that lists one of ``message_ids`` among its sources (per the index)."""
        users: set[str] = set()
        for message_id in sorted(message_ids):
            users |= set(await users_taught_by(self.store, message_id))
        return users

    async def restore(self, user_id: str | int, memories: list[dict], history: list[dict]) -> int:
        """Write exported memories and log entries back under their own keys, in one batch."""
        ns, hns = namespace(user_id), history_namespace(user_id)
        values = {m["id"]: {"content": m["content"], "origin": m["origin"],
                            "sources": merge_sources(m.get("sources") or [m["origin"]]),
                            "created_at": m["created_at"], "updated_at": m["updated_at"]} for m in memories}
        ops = [PutOp(ns, key, value, index=False) for key, value in values.items()]
        taught = SourceChanges(user_id)
        found = await self.store.abatch([GetOp(ns, key) for key in values]) if values else []
        for (key, value), old in zip(values.items(), found):
            taught.replace(key, old.value if old is not None else None, value)
        ops += await taught.ops(self.store)
        ops += [PutOp(hns, h["key"], {k: v for k, v in h.items() if k != "key"}, index=False) for h in history]
        if ops:
            await self.store.abatch(ops)
        return len(memories)
