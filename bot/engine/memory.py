"""Memories: one store namespace per person, one item per fact, read and written in whole batches.

A memory's value is ``{"content": str, "origin": {...}}``. ``origin`` says where the current text was
learned: ``guild_id`` (a server ID, or ``"dm"``), ``channel_id`` and ``message_id``, plus ``source``
(``"extraction"``, ``"user"`` or ``"moderator"``). The store keeps ``created_at``/``updated_at``.
When extraction patches a memory, the origin moves to the message that changed it: the text and the place
it came from always go together.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable

from langgraph.store.base import BaseStore, Item, PutOp
from pydantic import BaseModel, Field

NAMESPACE_ROOT = "memories"
PAGE_SIZE = 500


class Memory(BaseModel):
    """A durable fact about the person: who they are, what they like, what they do, what they plan."""

    content: str = Field(description="The fact, as one short sentence in the third person.")


@dataclass(frozen=True)
class StoredMemory:
    """A memory as read from the store."""

    key: str
    content: str
    origin: dict[str, Any]
    created_at: datetime
    updated_at: datetime

    @property
    def short_id(self) -> str:
        """The last 8 characters of the key (random, unlike the time-ordered start)."""
        return self.key[-8:]

    @classmethod
    def from_item(cls, item: Item) -> "StoredMemory":
        value = item.value or {}
        return cls(
            key=item.key,
            content=str(value.get("content", "")),
            origin=dict(value.get("origin") or {}),
            created_at=item.created_at,
            updated_at=item.updated_at,
        )


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


class MemoryRepository:
    """Reads and writes one person's memories through a LangGraph ``BaseStore``.

    Every read pages through the namespace (``BaseStore.search`` returns 10 items unless told otherwise);
    every multi-item write goes through one ``abatch`` call, which the SQLite store runs in one
    transaction, so an extraction's changes land all together or not at all.
    """

    def __init__(self, store: BaseStore) -> None:
        self.store = store

    async def list(self, user_id: str | int) -> list[StoredMemory]:
        """All of a person's memories, oldest first."""
        items: list[Item] = []
        offset = 0
        while True:
            page = await self.store.asearch(namespace(user_id), limit=PAGE_SIZE, offset=offset)
            items.extend(page)
            if len(page) < PAGE_SIZE:
                break
            offset += PAGE_SIZE
        memories = [StoredMemory.from_item(i) for i in items]
        memories.sort(key=lambda m: m.key)  # time-ordered keys: oldest first
        return memories

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

    async def apply(
        self,
        user_id: str | int,
        *,
        inserts: Iterable[tuple[str, dict]] = (),
        updates: Iterable[tuple[str, str, dict]] = (),
        deletes: Iterable[str] = (),
    ) -> MemoryChanges:
        """Apply inserts ``(content, origin)``, updates ``(key, content, origin)`` and deletes in one batch."""
        ns = namespace(user_id)
        ops: list[PutOp] = []
        changes = MemoryChanges()
        inserts = list(inserts)
        for (content, origin), key in zip(inserts, time_ordered_keys(len(inserts))):
            ops.append(PutOp(ns, key, {"content": content, "origin": origin}, index=False))
            changes.inserted.append(key)
        for key, content, origin in updates:
            ops.append(PutOp(ns, key, {"content": content, "origin": origin}, index=False))
            changes.updated.append(key)
        for key in deletes:
            ops.append(PutOp(ns, key, None))
            changes.deleted.append(key)
        if ops:
            await self.store.abatch(ops)
        return changes

    async def add(self, user_id: str | int, content: str, origin: dict) -> str:
        """Insert one memory and return its key."""
        return (await self.apply(user_id, inserts=[(content, origin)])).inserted[0]

    async def delete(self, user_id: str | int, key: str) -> bool:
        """Delete one memory; return whether it existed."""
        if await self.get(user_id, key) is None:
            return False
        await self.apply(user_id, deletes=[key])
        return True

    async def wipe(self, user_id: str | int) -> int:
        """Delete every memory of a person in one transaction; return how many there were."""
        keys = [m.key for m in await self.list(user_id)]
        await self.apply(user_id, deletes=keys)
        return len(keys)
