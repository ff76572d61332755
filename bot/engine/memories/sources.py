"""Which memories each Discord message taught: an index kept inside the memory store itself.

A deleted message must find every memory learned from it, also when the message is no longer in any
stored conversation or waiting turn (so its author is unknown). The SQLite store can filter on a memory's
``origin.message_id``, the PostgreSQL store only on top-level value keys; and ``origin`` is only the latest
source. So every memory write also writes, in the *same* ``abatch`` (one transaction on both backends),
one item per (message, person): namespace ``("memory_sources", message_id)``, key the person's user ID,
value ``{"keys": [memory keys]}``: the person's memories that list the message among their ``sources``.

Bounded: an item holds only keys of memories that exist and list the message; when its last key goes,
the item is deleted. It holds IDs only, never text. Memories written before the index existed are not in
it; :meth:`~bot.engine.memories.records.MemoryRepository.learned_only_from` still finds those the old way.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from langgraph.store.base import BaseStore, GetOp, PutOp

SOURCES_ROOT = "memory_sources"


def sources_namespace(message_id: str | int) -> tuple[str, str]:
    """The index namespace of one Discord message: ``("memory_sources", "<message id>")``."""
    return (SOURCES_ROOT, str(message_id))


def message_ids(value: Mapping[str, Any] | None) -> set[str]:
    """The Discord message IDs a memory value lists among its sources (or its origin, for old memories)."""
    value = value or {}
    origin = value.get("origin") or {}
    sources = value.get("sources") or ([origin] if origin else [])
    return {str(s["message_id"]) for s in sources if isinstance(s, Mapping) and s.get("message_id")}


class SourceChanges:
    """Index changes for one person, gathered while a batch is built and turned into ``PutOp``s at the end
    (several changes to one message's item in one batch must become one write)."""

    def __init__(self, user_id: str | int) -> None:
        self.user = str(user_id)
        self._add: dict[str, set[str]] = {}
        self._remove: dict[str, set[str]] = {}

    def add(self, key: str, ids: Iterable[str]) -> None:
        for mid in ids:
            self._add.setdefault(str(mid), set()).add(key)
            self._remove.get(str(mid), set()).discard(key)

    def remove(self, key: str, ids: Iterable[str]) -> None:
        for mid in ids:
            self._remove.setdefault(str(mid), set()).add(key)
            self._add.get(str(mid), set()).discard(key)

    def replace(self, key: str, before: Mapping | None, after: Mapping | None) -> None:
        """A memory's value changed from ``before`` to ``after`` (None: absent)."""
        old, new = message_ids(before), message_ids(after) if after is not None else set()
        self.remove(key, old - new)
        self.add(key, new)

    async def ops(self, store: BaseStore) -> list[PutOp]:
        """The writes that bring the index up to date (reads the touched items first)."""
        touched = sorted(set(self._add) | set(self._remove))
        if not touched:
            return []
        found = await store.abatch([GetOp(sources_namespace(mid), self.user) for mid in touched])
        out: list[PutOp] = []
        for mid, item in zip(touched, found):
            before = set((item.value or {}).get("keys") or []) if item is not None else set()
            after = (before | self._add.get(mid, set())) - self._remove.get(mid, set())
            if after == before and (item is not None or not after):
                continue
            ns = sources_namespace(mid)
            out.append(PutOp(ns, self.user, {"keys": sorted(after)}, index=False) if after else PutOp(ns, self.user, None))
        return out


async def users_taught_by(store: BaseStore, message_id: str) -> dict[str, set[str]]:
    """Who has memories listing ``message_id`` among their sources, per the index: user ID -> keys."""
    out: dict[str, set[str]] = {}
    offset = 0
    while True:
        page = await store.asearch(sources_namespace(message_id), limit=500, offset=offset)
        for item in page:
            if tuple(item.namespace) == sources_namespace(message_id):
                out[item.key] = set((item.value or {}).get("keys") or [])
        if len(page) < 500:
            return out
        offset += 500
