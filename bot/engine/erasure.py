"""Erase what the bot holds about one person: the single place every wipe and purge goes through.

"Erased" means erased from disk, not hidden: the person's memories and their change log, their turns
waiting for extraction, their own messages in every stored conversation (and the bot's replies to them),
and any running summary that was built from their messages. Superseded checkpoints are pruned and the
backend compacts what was deleted (``Maintenance.compact``: on SQLite ``secure_delete`` plus a truncated
write-ahead log), so a phrase the person typed is left in no file of the data directory.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from bot.engine.memory import Actor, MemoryRepository
from bot.engine.stores import Storage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ErasureResult:
    memories: int
    pending_turns: int
    messages: int


async def erase_person(
    storage: Storage, user_id: str | int, *, guild_id: str | None = None, conversations=None, by: Actor | None = None
) -> ErasureResult:
    """Erase a person's data (all of it, or what was learned in ``guild_id``); see the module docstring.

    Args:
        storage: the opened storage (see :class:`bot.engine.stores.Storage`).
        user_id: whose data.
        guild_id: limit to one server (a moderator purge).
        conversations: the engine's :class:`~bot.engine.conversations.ConversationEraser`, when the
            person's messages should be removed from conversation state too.
        by: a moderator doing a purge: recorded, without any content, in the person's change log.
    """
    user = str(user_id)
    messages = 0
    if conversations is not None:  # first: it waits for any turn of theirs in flight to finish
        messages = await conversations.erase_author(user, guild_id=guild_id)
    pending = await storage.maintenance.erase_person_rows(user, guild_id=guild_id)
    count = await MemoryRepository(storage.store).erase(user, guild_id=guild_id, record=by)
    await storage.maintenance.compact()
    return ErasureResult(memories=count, pending_turns=pending, messages=messages)


@dataclass(frozen=True)
class MessageErasure:
    """What deleting some Discord messages removed."""

    messages: int  # stored conversation messages (theirs and the bot's answers to them)
    pending_turns: int
    memories: int


async def erase_messages(storage: Storage, thread_id: str, message_ids: set[str], *, conversations) -> MessageErasure:
    """Erase deleted Discord messages: from the conversation (with the answers to them and any summary
    built from them), from the learning queue, and every memory learned only from them; then compact,
    so their words are in no file, as after a wipe. Unknown IDs cost a lookup and write nothing.
    """
    ids = {str(i) for i in message_ids}
    messages = await conversations.erase_messages(thread_id, ids)
    pending = await storage.inbox.forget_messages(ids)
    repo = MemoryRepository(storage.store)
    memories = 0
    for user, keys in (await repo.learned_only_from(ids)).items():
        memories += await repo.erase_keys(user, keys)
    if messages or pending or memories:
        await storage.maintenance.compact()
        log.info("deleted messages erased from thread %s: %d stored messages, %d pending turns, %d memories",
                 thread_id, messages, pending, memories)
    return MessageErasure(messages=messages, pending_turns=pending, memories=memories)


async def erase_thread(storage: Storage, thread_id: str, *, conversations) -> bool:
    """A channel or thread was deleted: its stored conversation goes, and its pending turns."""
    gone = await conversations.erase_thread(thread_id)
    pending = await storage.inbox.forget_thread(thread_id)
    if gone or pending:
        await storage.maintenance.compact()
    return gone


async def erase_guild(storage: Storage, guild_id: str, *, conversations) -> int:
    """The bot was removed from a server for good: its conversations, its learning queue and every memory
    learned there go (a memory other places also contributed to is handled as a moderator purge of that
    server handles it). Returns how many memories were erased.
    """
    for thread_id in await conversations.threads_of_guild(guild_id):
        await conversations.erase_thread(thread_id)
    await storage.inbox.forget_guild(guild_id)
    repo = MemoryRepository(storage.store)
    memories = 0
    for user in await repo.people():
        memories += await repo.erase(user, guild_id=guild_id)
    await storage.maintenance.compact()
    log.info("deleted what was kept from server %s: %d memories", guild_id, memories)
    return memories
