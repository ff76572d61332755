"""The steps of an erasure, each idempotent: run once, or again after a crash, to the same end.

:class:`bot.engine.erasure.eraser.Eraser` is the door (the journal, the order, the holds); these are what it
does behind it, one method per kind of removal plus the quote rule's sweep over everything else.
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Iterable

from bot.engine.concurrency import Holds
from bot.engine.erasure.conversations import ConversationEraser
from bot.engine.erasure.memories import (
    erase_keys,
    erase_memories,
    mark_deleted_sources,
    people,
    quoting_people,
    redact_memories_of,
)
from bot.engine.erasure.quotes import QuoteRule
from bot.engine.memories.records import Actor
from bot.engine.memories.repository import MemoryRepository
from bot.engine.stores import Storage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MessageErasure:
    """What deleting some Discord messages removed."""

    messages: int  # stored conversation messages (theirs and the bot's answers to them)
    pending_turns: int
    memories: int
    quotes: int = 0


@dataclass(frozen=True)
class ErasureResult:
    """What erasing a person (or what was learned about them in one server) removed."""

    memories: int
    pending_turns: int
    messages: int
    reduced: int = 0  # memories of a purge that were also learned elsewhere and were cut back, not deleted
    quotes: int = 0  # texts elsewhere (answers, summaries, other people's messages and memories) redacted


class ErasureSteps:
    """The removals themselves, over storage, the stored conversations and the memory store."""

    def __init__(self, storage: Storage, conversations: ConversationEraser | None, memories: MemoryRepository,
                 holds: Holds) -> None:
        self.storage = storage
        self.conversations = conversations
        self.memories = memories
        self.holds = holds

    async def message_words(self, thread_id: str, ids: set[str], authors: Iterable[str],
                             key: bytes | None = None) -> tuple[QuoteRule, dict[str, list[str]], bool]:
        """The quote rule of deleted messages (their stored and queued texts, and the memories learned only
        from them), those memories (user -> keys), and whether anything holds the messages; read only."""
        rows = [t for t in await self.storage.inbox.every_turn() if str(t.origin.get("message_id")) in ids]
        texts = [t.human for t in rows]
        found = bool(rows)
        if self.conversations is not None:
            said, in_thread = await self.conversations.texts_of_messages(thread_id, ids)
            texts += said
            found = found or in_thread
        learned = await self.memories.learned_only_from(ids, authors=set(authors) | {t.user_id for t in rows})
        for user, keys in learned.items():
            texts += [m.content for m in await self.memories.list(user) if m.key in keys]
        found = found or bool(await self.memories.taught_by(ids))  # memories other messages taught too
        return QuoteRule.from_texts(texts, key), learned, found

    async def messages(self, job_id: int, thread_id: str, ids: set[str], authors: list[str],
                              recorded: QuoteRule, *, held: Iterable[str] = ()) -> MessageErasure:
        """The steps of a message deletion (each idempotent): run at once, or again after a crash with the
        recorded rule merged with whatever words are still left."""
        held = set(held)
        async with AsyncExitStack() as stack:
            for user in authors:
                if user not in held:
                    await stack.enter_async_context(self.holds.hold(user))
            quotes, learned, _ = await self.message_words(thread_id, ids, authors, recorded.key)
            quotes.merge(recorded)
            removed = 0
            if self.conversations is not None:
                removed, _ = await self.conversations.erase_messages(thread_id, ids)
            pending = await self.storage.inbox.forget_messages(ids)
            memories = 0
            for user, keys in learned.items():
                async with self.holds.hold(user):  # re-entrant: an author is held already
                    memories += await erase_keys(self.memories, user, keys)
            for user in sorted(await self.memories.taught_by(ids)):  # memories other messages taught too
                async with self.holds.hold(user):
                    await mark_deleted_sources(self.memories, user, ids)
            if removed or pending or memories:
                await self.storage.maintenance.compact()
                log.info("deleted messages erased from thread %s: %d stored messages, %d pending turns, %d memories",
                         thread_id, removed, pending, memories)
        author = authors[0] if len(authors) == 1 else None
        redacted = await self.cut_quotes(quotes, author) if quotes else 0
        return MessageErasure(messages=removed, pending_turns=pending, memories=memories, quotes=redacted)

    async def thread(self, thread_id: str) -> bool:
        gone = await self.conversations.erase_thread(thread_id) if self.conversations is not None else False
        pending = await self.storage.inbox.forget_thread(thread_id)
        if gone or pending:
            await self.storage.maintenance.compact()
        return gone

    async def guild(self, guild_id: str) -> int:
        if self.conversations is not None:
            for thread_id in await self.conversations.threads_of_guild(guild_id):
                await self.conversations.erase_thread(thread_id)
        await self.storage.inbox.forget_guild(guild_id)
        memories = 0
        for user in await people(self.memories):
            async with self.holds.hold(user):
                memories += (await erase_memories(self.memories, user, guild_id=guild_id)).deleted
        await self.storage.maintenance.compact()
        return memories

    async def person(
        self, job_id: int, user: str, guild_id: str | None, by: Actor | None, quotes: QuoteRule
    ) -> ErasureResult:
        messages = redacted = 0
        if self.conversations is not None:  # first: it waits for any turn of theirs in flight to finish
            messages, redacted = await self.conversations.erase_author(user, guild_id=guild_id, quotes=quotes)
        pending = await self.storage.maintenance.erase_person_rows(user, guild_id=guild_id)
        erased = await erase_memories(self.memories, user, guild_id=guild_id, record=by, record_key=f"erasure-{job_id}")
        redacted += await self.cut_quotes_in_learning(quotes, user)
        await self.storage.maintenance.compact()
        return ErasureResult(memories=erased.deleted, pending_turns=pending, messages=messages,
                             reduced=erased.reduced, quotes=redacted)

    async def cut_quotes(self, quotes: QuoteRule, author: str | None) -> int:
        redacted = 0
        if self.conversations is not None:
            _, redacted = await self.conversations.erase_author(None, quotes=quotes, keep_author=author)
        redacted += await self.cut_quotes_in_learning(quotes, author)
        await self.storage.maintenance.compact()
        return redacted

    async def cut_quotes_in_learning(self, quotes: QuoteRule, author: str | None) -> int:
        """Other people's turns waiting to be learned from, and their memories, lose the quoted runs.

        Each person whose data quotes the erased words is held while theirs is rewritten (turns first,
        then memories): an extraction of theirs in flight finishes first, and none starts until both are
        clean, so no extraction can write a quote back into a memory. ``author``'s own are not theirs to
        redact (the erased person's, or a deleted message's author's).
        """
        if not quotes:
            return 0
        hit = {t.user_id for t in await self.storage.inbox.every_turn() if self._redacted_turn(quotes, t, author)}
        people = hit | (await quoting_people(self.memories, quotes) - {author})
        changed = 0
        for person in sorted(people):
            # (Eraser.hold is re-entrant: the erased person, already held, is held again at no cost.) For the
            # author only the bot's answers in their remaining turns change, never their words or memories.
            async with self.holds.hold(person):
                texts = {t.id: cut for t in await self.storage.inbox.every_turn()
                         if t.user_id == person and (cut := self._redacted_turn(quotes, t, author))}
                await self.storage.inbox.rewrite_turns(texts)
                changed += len(texts)
                if person != author:
                    changed += await redact_memories_of(self.memories, quotes, person)
        return changed

    @staticmethod
    def _redacted_turn(quotes: QuoteRule, turn, author: str | None) -> tuple[str, str] | None:
        human = turn.human if turn.user_id == author else quotes.redact(turn.human)
        ai = quotes.redact(turn.ai)
        return (human, ai) if (human, ai) != (turn.human, turn.ai) else None

