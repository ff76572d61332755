"""The one place memories are read and written: paged reads, batched writes with their change log.

What a memory is and how it is keyed is in :mod:`bot.engine.memories.records`; which message taught which
memory is indexed by :mod:`bot.engine.memories.sources` in the same batch as the write.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable

from langgraph.store.base import BaseStore, GetOp, Item, PutOp

from bot.engine.memories.records import (
    EXTRACTION,
    NAMESPACE_ROOT,
    PAGE_SIZE,
    Actor,
    HistoryEntry,
    MemoryChanges,
    StoredMemory,
    _now,
    hand_source,
    learned_at,
    history_namespace,
    merge_sources,
    namespace,
    time_ordered_keys,
    watermark_namespace,
)
from bot.engine.memories.sources import SourceChanges, users_taught_by

log = logging.getLogger(__name__)


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
                     "created_at": learned_at(sources, now), "updated_at": now}
            ops.append(PutOp(ns, key, value, index=False))
            taught.replace(key, None, value)
            log(key, "created", None, content, origin)
            changes.inserted.append(key)
        for key, content, origin, sources in updates:
            old = current.get(key)
            if old is None or key in deletes:
                continue
            if actor.kind == EXTRACTION.kind and content == old.value.get("content"):
                # The extractor must call a tool even when nothing is new: a "patch" to the same text moved
                # the memory's date (it then won on recency and at the cap), logged a change that was none,
                # and made the small talk it came with a source of the fact.
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
        extraction make room (an imported one too: a restored backup of what the bot learned must not stop
        all learning at the cap); what the person wrote themselves (``remember``, ``edit``) is never
        dropped to make room for something the bot inferred: when nothing else can go, the newest inserts
        are dropped instead. Either way the log says how many (never which text, at INFO).
        """
        items = [StoredMemory.from_item(i) for i in await self._all(namespace(user_id))]
        kept = [m for m in items if m.key not in set(deletes)]
        over = len(kept) + len(inserts) - cap
        if over <= 0:
            return inserts, deletes
        touched = {u[0] for u in updates}
        # The origin names the last writer: extraction patching a memory the person wrote makes it
        # "extraction" there, while its hand source still says whose it is.
        evictable = sorted((m for m in kept if m.key not in touched and m.origin.get("source", "extraction") == "extraction"
                            and not m.hand_written),
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
        """Insert one memory and return its key (the person's own, with a hand source: see ``records``)."""
        sources = [hand_source(origin)] if actor.kind == "user" else [origin]
        if actor.kind == "user":
            origin = {**origin, "source": "user"}
        return (await self.apply(user_id, inserts=[(content, origin, sources)], actor=actor)).inserted[0]

    async def edit(self, user_id: str | int, key: str, content: str, origin: dict, *, actor: Actor) -> bool:
        """Replace one memory's text; return whether it existed.

        The person's correction (``actor.kind == "user"``) adds a hand source to the memory's sources, so no
        later event on the message it was learned from undoes it (see ``records``); the origin keeps the
        place (and message) it was learned from.
        """
        sources = [hand_source(origin)] if actor.kind == "user" else [origin]
        if actor.kind == "user":
            origin = {**origin, "source": "user"}
        return bool((await self.apply(user_id, updates=[(key, content, origin, sources)], actor=actor)).updated)

    async def delete(self, user_id: str | int, key: str, *, actor: Actor = EXTRACTION) -> bool:
        """Delete one memory; return whether it existed."""
        return bool((await self.apply(user_id, deletes=[key], actor=actor)).deleted)

    async def learned_only_from(self, message_ids: set[str], *, authors: Iterable[str] = ()) -> dict[str, list[str]]:
        """Memories whose every source is one of ``message_ids`` (or a message deleted before): user ID -> keys.

        A hand-written memory (``StoredMemory.hand_written``) is never among them: it is the person's.

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
            keys = [m.key for m in await self.list(user)
                    if m.message_ids() and m.live_message_ids() <= message_ids and not m.hand_written]
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
