"""The memory-store part of erasure: a person's memories and change log, and quotes in everyone else's.

A wipe removes all of a person's memories, their change log and extraction watermarks. A moderator purge
in server A removes what A contributed, judged over *all* of a memory's sources, not only the latest:

- a memory learned only in A goes, with its whole change log;
- a memory that A patched but that was first learned elsewhere is **reduced**: its text goes back to the
  last version written before A's first contribution (from the change log), its sources are cut to the
  ones before that, and every log entry from A's first contribution on is deleted, because each later
  version was built on A's text. So nothing A contributed stays, in the memory or in its history;
- a memory that came from A and has no change log that could say what it was before (an import without
  history) goes: when in doubt, the purge wins.

The person's remaining log keeps one content-free line saying a moderator purged (and reduced) memories.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterable

from langgraph.store.base import Item, PutOp

from bot.engine.erasure.quotes import REDACTED, QuoteRule
from bot.engine.memories.records import (
    NAMESPACE_ROOT,
    Actor,
    StoredMemory,
    _now,
    history_namespace,
    namespace,
    time_ordered_keys,
    watermark_namespace,
)
from bot.engine.memories.repository import MemoryRepository
from bot.engine.memories.sources import SourceChanges

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MemoryErasure:
    deleted: int
    reduced: int
    keys: tuple[str, ...] = ()  # every memory deleted or cut back: their cached vectors go too


def _place(value: dict) -> str:
    return str((value.get("origin") or {}).get("guild_id"))


def _by_memory(history: list[Item]) -> dict[str, list[Item]]:
    groups: dict[str, list[Item]] = {}
    for h in sorted(history, key=lambda h: (h.value.get("at", ""), h.key)):
        groups.setdefault(str(h.value.get("memory_key")), []).append(h)
    return groups


async def memory_texts(repo: MemoryRepository, user_id: str, guild_id: str | None = None) -> list[str]:
    """The texts an erasure removes from the store (memory versions and log texts), for the quote rule."""
    memories = await repo.items(namespace(user_id))
    history = await repo.items(history_namespace(user_id))
    if guild_id is None:
        texts = [str(i.value.get("content", "")) for i in memories]
        texts += [str(h.value.get(f) or "") for h in history for f in ("before", "after")]
        return [t for t in texts if t]
    g = str(guild_id)
    texts = []
    for entries in _by_memory(history).values():
        cut = next((i for i, h in enumerate(entries) if _place(h.value) == g), None)
        if cut is not None:
            texts += [str(h.value.get("after") or "") for h in entries[cut:]]
    for item in memories:
        if g in StoredMemory.from_item(item).places():
            texts.append(str(item.value.get("content", "")))
    return [t for t in texts if t]


async def erase_memories(
    repo: MemoryRepository, user_id: str | int, *, guild_id: str | None = None, record: Actor | None = None,
    record_key: str | None = None,
) -> MemoryErasure:
    """Erase a person's memories (all, or what server ``guild_id`` contributed); see the module docstring.

    ``record_key`` names the moderator's log line, so an erasure run again after a crash does not write a
    second one (nor overwrite the first with the zero counts of the rerun).
    """
    user = str(user_id)
    ns, hns = namespace(user), history_namespace(user)
    memories = await repo.items(ns)
    history = await repo.items(hns)
    ops: list[PutOp] = []
    if guild_id is None:
        ops += [PutOp(ns, i.key, None) for i in memories] + [PutOp(hns, h.key, None) for h in history]
        ops += [PutOp(watermark_namespace(user), w.key, None) for w in await repo.items(watermark_namespace(user))]
        taught = SourceChanges(user)  # the index of which message taught them what goes too: no trace
        for i in memories:
            taught.replace(i.key, i.value, None)
        ops += await taught.ops(repo.store)
        if ops:
            await repo.store.abatch(ops)
        return MemoryErasure(deleted=len(memories), reduced=0, keys=tuple(i.key for i in memories))

    g = str(guild_id)
    groups = _by_memory(history)
    doomed_history: set[str] = set()
    deleted = reduced = 0
    touched: list[str] = []
    now = _now()
    taught = SourceChanges(user)
    for key, entries in groups.items():  # every log, of memories that still exist or not: cut at A
        if key == "*":  # moderators' content-free lines stay
            continue
        cut = next((i for i, h in enumerate(entries) if _place(h.value) == g), None)
        if cut is not None:
            doomed_history.update(h.key for h in entries[cut:])
    for item in memories:
        memory = StoredMemory.from_item(item)
        if g not in memory.places():
            continue
        touched.append(item.key)
        entries = groups.get(item.key, [])
        cut = next((i for i, h in enumerate(entries) if _place(h.value) == g), None)
        first_here = next(i for i, s in enumerate(memory.sources) if str(s.get("guild_id")) == g)
        earlier = list(memory.sources[:first_here])
        before = entries[cut].value.get("before") if cut else None
        if cut and earlier and entries[cut].value.get("action") == "updated" and before:
            value = {**item.value, "content": before, "origin": dict(earlier[-1]), "sources": earlier, "updated_at": now}
            ops.append(PutOp(ns, item.key, value, index=False))
            taught.replace(item.key, item.value, value)
            reduced += 1
        else:
            ops.append(PutOp(ns, item.key, None))
            taught.replace(item.key, item.value, None)
            doomed_history.update(h.key for h in entries)
            deleted += 1
    ops += [PutOp(hns, k, None) for k in sorted(doomed_history)]
    if record_key is not None and record is not None and any(h.key == record_key for h in history):
        record = None  # a rerun after a crash: the line is already there
    if record is not None:
        # A moderator's ID stays out of the member's own history (and so out of their export): the mod log
        # keeps who purged whom for the server's staff; the member is told only that a moderator did.
        actor_id = None if record.kind == "moderator" else record.id
        entry = {"memory_key": "*", "action": "deleted", "actor": record.kind, "actor_id": actor_id, "at": now,
                 "before": None, "after": None, "origin": {"guild_id": g, "erased": deleted, "reduced": reduced}}
        ops.append(PutOp(hns, record_key or time_ordered_keys(1)[0], entry, index=False))
    ops += await taught.ops(repo.store)
    if ops:
        await repo.store.abatch(ops)
    return MemoryErasure(deleted=deleted, reduced=reduced, keys=tuple(touched))


def _only_markers(text: str) -> bool:
    return not text.replace(REDACTED, "").strip(" \t\n.,;:!?\"'-()[]")


async def people(repo: MemoryRepository) -> list[str]:
    """Everyone who has a memory namespace (paged)."""
    users: list[str] = []
    offset = 0
    while True:
        page = await repo.store.alist_namespaces(prefix=(NAMESPACE_ROOT,), max_depth=2, limit=500, offset=offset)
        users += [ns[1] for ns in page if len(ns) == 2]
        if len(page) < 500:
            return users
        offset += 500


async def redact_memories_of(repo: MemoryRepository, rule: QuoteRule, user: str) -> int:
    """Cut quotes of erased messages out of one person's memories and change log; return how many memories.

    A memory left with nothing but ``[erased]`` is deleted. Nothing is logged with text: like an
    erasure, a redaction must leave no copy of what it removes.
    """
    return len(await redact_memory_keys(repo, rule, user))


async def redact_memory_keys(repo: MemoryRepository, rule: QuoteRule, user: str) -> list[str]:
    """:func:`redact_memories_of`, returning the keys of the memories changed or deleted (their cached
    vectors, derived from the quoted text, must go too)."""
    if not rule:
        return []
    changed: list[str] = []
    ops: list[PutOp] = []
    taught = SourceChanges(user)
    for item in await repo.items(namespace(user)):
        content = str(item.value.get("content", ""))
        clean = rule.redact(content)
        if clean != content:
            changed.append(item.key)
            value = None if _only_markers(clean) else {**item.value, "content": clean}
            ops.append(PutOp(namespace(user), item.key, value, index=False) if value else PutOp(namespace(user), item.key, None))
            if value is None:
                taught.replace(item.key, item.value, None)
    for h in await repo.items(history_namespace(user)):
        update = {f: rule.redact(h.value[f]) for f in ("before", "after") if isinstance(h.value.get(f), str)}
        if any(update[f] != h.value[f] for f in update):
            ops.append(PutOp(history_namespace(user), h.key, {**h.value, **update}, index=False))
    ops += await taught.ops(repo.store)
    if ops:
        await repo.store.abatch(ops)
    return changed


async def quoting_people(repo: MemoryRepository, rule: QuoteRule, among: Iterable[str] | None = None) -> set[str]:
    """The people whose memories or change log copy a run of the erased words (read only); only those
    ``among`` when given (a deleted message: the people of the threads it reached), else everyone."""
    found: set[str] = set()
    if not rule:
        return found
    for user in (sorted(set(among)) if among is not None else await people(repo)):
        items = await repo.items(namespace(user)) + await repo.items(history_namespace(user))
        if any(rule.quotes(str(v)) for i in items for k, v in (i.value or {}).items()
               if k in ("content", "before", "after") and isinstance(v, str)):
            found.add(user)
    return found


async def redact_quotes_in_memories(repo: MemoryRepository, rule: QuoteRule, *, skip_user: str | None) -> int:
    """Cut quotes out of everyone else's memories (without holding anyone: for tests and tools)."""
    changed = 0
    for user in await quoting_people(repo, rule):
        if user != skip_user:
            changed += await redact_memories_of(repo, rule, user)
    return changed


async def erase_keys(repo: MemoryRepository, user_id: str | int, keys) -> int:
    """Erase some memories and their change log without a trace (a deleted message took them away).

    Only the memory store: the erasure steps (``ErasureSteps.erase_keys``) also drop their cached vectors.
    """
    keys = set(keys)
    if not keys:
        return 0
    ns, hns = namespace(user_id), history_namespace(user_id)
    existing = [item for k in sorted(keys) if (item := await repo.store.aget(ns, k)) is not None]
    history = [h for h in await repo.items(hns) if h.value.get("memory_key") in keys]
    ops = [PutOp(ns, i.key, None) for i in existing] + [PutOp(hns, h.key, None) for h in history]
    taught = SourceChanges(user_id)
    for i in existing:
        taught.replace(i.key, i.value, None)
    ops += await taught.ops(repo.store)
    if ops:
        await repo.store.abatch(ops)
    return len(existing)


async def mark_deleted_sources(repo: MemoryRepository, user_id: str | int, message_ids: set[str]) -> int:
    """Deleted messages are marked ``"deleted": true`` in the sources of the person's memories that other
    messages also taught (or that the person wrote or corrected by hand, which stay). The memory stays and
    keeps the place (a moderator purge of that server still finds what it contributed), but deleting its
    other messages later finds it as learned only from deleted messages. Returns how many memories
    changed; idempotent.
    """
    ns = namespace(user_id)
    ops: list[PutOp] = []
    for item in await repo.items(ns):
        memory = StoredMemory.from_item(item)
        live = memory.live_message_ids()
        if not (live & message_ids) or (live <= message_ids and not memory.hand_written):
            continue  # (one learned only from them is erased instead; a hand-written one stays, marked)
        sources = [{**s, "deleted": True} if str(s.get("message_id") or "") in message_ids else dict(s)
                   for s in memory.sources]
        ops.append(PutOp(ns, item.key, {**item.value, "sources": sources}, index=False))
    if ops:
        await repo.store.abatch(ops)
    return len(ops)
