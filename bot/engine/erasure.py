"""Erase what the bot holds about one person: the single place every wipe, purge and deletion goes through.

"Erased" means erased from disk, not hidden: the person's memories and their change log, their turns
waiting for extraction, their own messages in every stored conversation (and the bot's replies to them),
and any running summary that was built from their messages. Superseded checkpoints are pruned, SQLite
overwrites deleted content (``secure_delete``) and the write-ahead logs are checkpointed and truncated,
so a phrase the person typed is left in no file of the data directory.

Their words also go from wherever the bot repeated them (the quote rule, ``bot.engine.quotes``): its
answers to other people, summaries, other people's messages and pending turns, other people's memories.
The words to look for are gathered *before* anything is deleted, from everything the erasure removes.
A deleted message (``erase_quotes``) goes through the same rule.
"""

from __future__ import annotations

import logging
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass
from typing import Callable, Iterable

from bot.engine.conversations import ConversationEraser
from bot.engine.memory import Actor, MemoryRepository
from bot.engine.memory_erasure import erase_memories, memory_texts, redact_quotes_in_memories
from bot.engine.quotes import QuoteRule
from bot.engine.stores import Storage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ErasureResult:
    memories: int
    pending_turns: int
    messages: int
    reduced: int = 0  # memories of a purge that were also learned elsewhere and were cut back, not deleted
    quotes: int = 0  # texts elsewhere (answers, summaries, other people's messages and memories) redacted


Hold = Callable[[str], AbstractAsyncContextManager]


class Eraser:
    """Runs erasures: gathers the words to erase, then removes and redacts them everywhere, then compacts."""

    def __init__(
        self, storage: Storage, conversations: ConversationEraser | None, *, hold: Hold | None = None
    ) -> None:
        self.storage = storage
        self.conversations = conversations
        self.memories = MemoryRepository(storage.store)
        self.hold = hold or (lambda _user: nullcontext())

    async def words_of(self, user: str, guild_id: str | None) -> QuoteRule:
        """The quote rule for everything of ``user`` an erasure is about to remove."""
        texts: list[str] = []
        if self.conversations is not None:
            texts += await self.conversations.texts_of(user, guild_id=guild_id)
        texts += await memory_texts(self.memories, user, guild_id)
        texts += await self._pending_texts(user, guild_id)
        return QuoteRule.from_texts(texts)

    async def _pending_texts(self, user: str, guild_id: str | None) -> list[str]:
        texts = []
        for key in await self.storage.inbox.pending():
            if key.user_id != user:
                continue
            _, turns = await self.storage.inbox.batch(key.thread_id, user, 0)
            texts += [t.human for t in turns if guild_id is None or str(t.origin.get("guild_id")) == str(guild_id)]
        return texts

    async def erase_person(
        self, user_id: str | int, *, guild_id: str | None = None, by: Actor | None = None
    ) -> ErasureResult:
        """Erase a person's data (all of it, or what was learned in ``guild_id``); see the module docstring.

        Args:
            user_id: whose data.
            guild_id: limit to one server (a moderator purge).
            by: a moderator doing a purge: recorded, without any content, in the person's change log.
        """
        user = str(user_id)
        async with self.hold(user):
            quotes = await self.words_of(user, guild_id)
            messages = redacted = 0
            if self.conversations is not None:  # first: it waits for any turn of theirs in flight to finish
                messages, redacted = await self.conversations.erase_author(user, guild_id=guild_id, quotes=quotes)
            pending = await self.storage.maintenance.erase_person_rows(user, guild_id=guild_id)
            erased = await erase_memories(self.memories, user, guild_id=guild_id, record=by)
            redacted += await redact_quotes_in_memories(self.memories, quotes, skip_user=user)
            await self.storage.maintenance.compact()
        return ErasureResult(memories=erased.deleted, pending_turns=pending, messages=messages,
                             reduced=erased.reduced, quotes=redacted)

    async def erase_quotes(self, texts: Iterable[str], *, author: str | None = None) -> int:
        """Cut runs copied from ``texts`` (deleted messages) out of everything else; return how many texts.

        ``author``'s own messages and memories are left alone (removing those is the caller's decision).
        """
        quotes = QuoteRule.from_texts(texts)
        if not quotes:
            return 0
        redacted = 0
        if self.conversations is not None:
            _, redacted = await self.conversations.erase_author(None, quotes=quotes)
        redacted += await redact_quotes_in_memories(self.memories, quotes, skip_user=author)
        await self.storage.maintenance.compact()
        return redacted


async def erase_person(
    storage: Storage, user_id: str | int, *, guild_id: str | None = None, conversations=None, by: Actor | None = None
) -> ErasureResult:
    """Erase a person's data without an engine (see :class:`Eraser`)."""
    return await Eraser(storage, conversations).erase_person(user_id, guild_id=guild_id, by=by)
