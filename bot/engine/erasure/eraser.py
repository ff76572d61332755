"""Erase what the bot holds about one person: the single place every wipe, purge and deletion goes through.

"Erased" means erased from disk, not hidden: the person's memories and their change log, their turns
waiting for extraction, their own messages in every stored conversation (and the bot's replies to them),
and any running summary that was built from their messages. Superseded checkpoints are pruned, SQLite
overwrites deleted content (``secure_delete``) and the write-ahead logs are checkpointed and truncated
(checked, and retried while another reader blocks it), so a phrase the person typed is left in no file.

Their words also go from wherever the bot repeated them (the quote rule, ``bot.engine.erasure.quotes``): its
answers to other people, summaries, other people's messages and pending turns, other people's memories.
The words to look for are gathered *before* anything is deleted, from everything the erasure removes.
A deleted message (``erase_messages``, with :meth:`Eraser.erase_quotes`) goes through the same rule; a
deleted channel or thread (``erase_thread``) and a server the bot was removed from (``erase_guild``) are
erased here too.

Durability: an erasure is written to the journal (``bot.engine.stores.erasures``: who, where, and the
quote rule as keyed hashes, never words) before its first deletion; every step is idempotent; the
journal row goes only after the last step and a checked compaction. A crash at any point leaves the row,
and :meth:`Eraser.resume` (at start-up) runs the erasure again to the end. Deleted messages, threads
and servers are journaled the same way (Discord does not resend the event, so the journal is the only
thing that can finish them): the row names them by IDs only (``subject``), and a message deletion's row
holds its quote rule, gathered before anything is deleted.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager, nullcontext
from dataclasses import dataclass
from typing import AsyncIterator, Callable, Iterable

from bot.engine.erasure.conversations import ConversationEraser
from bot.engine.memories.records import Actor, MemoryRepository
from bot.engine.erasure.memories import (
    erase_keys, mark_deleted_sources, erase_memories, memory_texts, people, quoting_people, redact_memories_of,
)
from bot.engine.erasure.quotes import QuoteRule
from bot.engine.stores import ErasureJob, Storage

log = logging.getLogger(__name__)

PERSON, QUOTES, MESSAGES, THREAD, GUILD = "person", "quotes", "messages", "thread", "guild"


@dataclass(frozen=True)
class MessageErasure:
    """What deleting some Discord messages removed."""

    messages: int  # stored conversation messages (theirs and the bot's answers to them)
    pending_turns: int
    memories: int
    quotes: int = 0


@dataclass(frozen=True)
class ErasureResult:
    memories: int
    pending_turns: int
    messages: int
    reduced: int = 0  # memories of a purge that were also learned elsewhere and were cut back, not deleted
    quotes: int = 0  # texts elsewhere (answers, summaries, other people's messages and memories) redacted


Hold = Callable[[str], AbstractAsyncContextManager]


def counted(method):
    """Count the erasure as running while it runs (``Eraser.active``: for shutdown checks and tests)."""

    @functools.wraps(method)
    async def wrapper(self, *args, **kwargs):
        self.active += 1
        try:
            return await method(self, *args, **kwargs)
        finally:
            self.active -= 1

    return wrapper


class Eraser:
    """Runs erasures: records them, gathers the words, removes and redacts them everywhere, compacts."""

    def __init__(
        self, storage: Storage, conversations: ConversationEraser | None, *, hold: Hold | None = None,
        on_erase: Callable[[str], None] | None = None,
    ) -> None:
        """``hold(user)`` keeps the person's extraction stopped meanwhile; ``on_erase(user)`` is told as a
        person's erasure starts (the engine marks their turns in flight as not to be learned from)."""
        self.storage = storage
        self.conversations = conversations
        self.memories = MemoryRepository(storage.store)
        self._hold = hold or (lambda _user: nullcontext())
        self._holding: dict[str, asyncio.Task | None] = {}  # person -> the task holding them through us
        self.on_erase = on_erase or (lambda _user: None)
        self._running: set[int] = set()  # journal IDs being run by this process right now
        self._failures: dict[int, tuple[int, float]] = {}  # journal ID -> (failures, retry not before)
        # One erasure at a time: each holds its person and, while rewriting their data, each person whose
        # data quotes them; two erasures holding people in opposite order would wait for each other.
        self._serial = asyncio.Lock()
        self.active = 0  # erasures running right now

    @asynccontextmanager
    async def hold(self, user: str) -> AsyncIterator[None]:
        """Hold a person's extraction (here and, on a shared database, in every process) while their data
        changes. Re-entrant within one task: an erasure holding a person may reach them again (a deleted
        message's author, quotes in their own turns) without waiting for itself, and without claiming the
        cross-process lease a second time.
        """
        me = asyncio.current_task()
        if me is not None and self._holding.get(user) is me:
            yield
            return
        async with self._hold(user):
            self._holding[user] = me
            try:
                yield
            finally:
                self._holding.pop(user, None)

    # ---- the words to erase
    async def words_of(self, user: str, guild_id: str | None, key: bytes | None = None) -> QuoteRule:
        """The quote rule for everything of ``user`` an erasure is about to remove (read, nothing changed)."""
        texts: list[str] = []
        if self.conversations is not None:
            texts += await self.conversations.texts_of(user, guild_id=guild_id)
        texts += await memory_texts(self.memories, user, guild_id)
        texts += [t.human for t in await self.storage.inbox.every_turn()
                  if t.user_id == user and (guild_id is None or str(t.origin.get("guild_id")) == str(guild_id))]
        return QuoteRule.from_texts(texts, key)

    # ---- entry points
    @counted
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
        self.on_erase(user)
        async with self._serial, self.hold(user):
            quotes = await self.words_of(user, guild_id)
            job_id = await self.storage.erasures.begin(kind=PERSON, user_id=user, guild_id=guild_id,
                                                       actor=by.kind if by else None, actor_id=by.id if by else None,
                                                       quotes=quotes.to_bytes())
            self._running.add(job_id)
            try:
                result = await self._erase_person(job_id, user, guild_id, by, quotes)
                await self._finish(job_id)
            finally:
                self._running.discard(job_id)
        return result

    @counted
    async def erase_quotes(self, texts: Iterable[str], *, author: str | None = None) -> int:
        """Cut runs copied from ``texts`` (deleted messages) out of everything else; return how many texts.

        ``author``'s own messages and memories are left alone (removing those is the caller's decision).
        """
        quotes = QuoteRule.from_texts(texts)
        if not quotes:
            return 0
        async with self._serial:
            job_id = await self.storage.erasures.begin(kind=QUOTES, user_id=author or "", quotes=quotes.to_bytes())
            self._running.add(job_id)
            try:
                redacted = await self._cut_quotes(quotes, author or None)
                await self._finish(job_id)
            finally:
                self._running.discard(job_id)
        return redacted

    async def request(self, user_id: str) -> int:
        """Record a wipe for the running bot to do (from another process); return the journal ID."""
        return await self.storage.erasures.begin(kind=PERSON, user_id=str(user_id))

    async def resume(self) -> int:
        """Finish every erasure in the journal that this process is not already running: those a crash
        left, those another process requested, those that failed here before; return how many finished.

        A failure is logged and the erasure stays recorded, retried later with a growing pause (a
        compaction a reader blocks for a long time must not stop the bot from starting).
        """
        done = 0
        now = time.monotonic()
        for job in await self.storage.erasures.unfinished():
            failures, not_before = self._failures.get(job.id, (0, 0.0))
            if job.id in self._running or now < not_before:
                continue
            try:
                await self.run_job(job)
            except Exception:  # noqa: BLE001 - stays in the journal; the next round retries
                self._failures[job.id] = (failures + 1, now + min(300.0, 5.0 * 2**failures))
                log.exception("erasure %d (user %s) failed; it stays recorded and will be retried", job.id, job.user_id)
                continue
            self._failures.pop(job.id, None)
            done += 1
            log.info("finished erasure %d (user %s) left in the journal", job.id, job.user_id)
        return done

    @counted
    async def run_job(self, job: ErasureJob) -> None:
        """Run one recorded erasure again, from the start (every step is idempotent)."""
        async with self._serial:
            self._running.add(job.id)
            try:
                await self._run_job(job)
            finally:
                self._running.discard(job.id)

    async def _run_job(self, job: ErasureJob) -> None:
        if job.kind in (MESSAGES, THREAD, GUILD):
            subject = json.loads(job.subject or "{}")
            if job.kind == MESSAGES:
                recorded = QuoteRule.from_bytes(job.quotes or b"")
                await self._erase_messages(job.id, subject["thread"], set(subject["messages"]),
                                           list(subject.get("authors", [])), recorded)
            elif job.kind == THREAD:
                await self._erase_thread(subject["thread"])
            else:
                await self._erase_guild(str(job.guild_id))
            await self._finish(job.id)
            return
        if job.kind == QUOTES:
            await self._cut_quotes(QuoteRule.from_bytes(job.quotes or b""), job.user_id or None)
            await self._finish(job.id)
            return
        by = Actor(job.actor, job.actor_id) if job.actor else None
        self.on_erase(job.user_id)
        async with self.hold(job.user_id):
            if job.id not in {j.id for j in await self.storage.erasures.unfinished()}:
                return  # finished meanwhile by whoever held the person (it must not run twice)
            if job.quotes is None:  # requested by another process: gather the words first, then record them
                quotes = await self.words_of(job.user_id, job.guild_id)
                await self.storage.erasures.set_quotes(job.id, quotes.to_bytes())
            else:  # what is left now, plus what was gathered before the crash (same key)
                recorded = QuoteRule.from_bytes(job.quotes)
                quotes = await self.words_of(job.user_id, job.guild_id, recorded.key)
                quotes.merge(recorded)
            await self._erase_person(job.id, job.user_id, job.guild_id, by, quotes)
            await self._finish(job.id)

    @counted
    async def erase_messages(self, thread_id: str, message_ids: set[str], *, authors: Iterable[str] = ()) -> MessageErasure:
        """Erase deleted Discord messages: from the conversation (with the answers to them and any summary
        built from them), from the learning queue, every memory learned only from them, and their words
        wherever the bot repeated them; then compact, as after a wipe. Unknown IDs write nothing.

        Journaled like a wipe: the words are gathered (as the quote rule's hashes) and the row written
        before the first deletion, so a crash part-way is finished by :meth:`resume`. Extraction of the
        ``authors`` known beforehand is held throughout (and of anyone whose memories turn out to be
        learned from them, while those go), so nothing is written back.
        """
        ids = {str(i) for i in message_ids}
        authors = sorted(set(authors))
        async with self._serial, AsyncExitStack() as stack:
            for user in authors:
                await stack.enter_async_context(self.hold(user))
            quotes, learned, found = await self._message_words(thread_id, ids, authors)
            if not (quotes or learned or found):
                return MessageErasure(messages=0, pending_turns=0, memories=0)  # unknown IDs: nothing written
            known = sorted(set(authors) | {t.user_id for t in await self.storage.inbox.every_turn()
                                           if str(t.origin.get("message_id")) in ids})
            subject = json.dumps({"thread": thread_id, "messages": sorted(ids), "authors": known})
            job_id = await self.storage.erasures.begin(kind=MESSAGES, user_id=authors[0] if len(authors) == 1 else "",
                                                       quotes=quotes.to_bytes(), subject=subject)
            self._running.add(job_id)
            try:
                result = await self._erase_messages(job_id, thread_id, ids, known, quotes, held=authors)
                await self._finish(job_id)
            finally:
                self._running.discard(job_id)
        return result

    async def _message_words(self, thread_id: str, ids: set[str], authors: Iterable[str],
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

    async def _erase_messages(self, job_id: int, thread_id: str, ids: set[str], authors: list[str],
                              recorded: QuoteRule, *, held: Iterable[str] = ()) -> MessageErasure:
        """The steps of a message deletion (each idempotent): run at once, or again after a crash with the
        recorded rule merged with whatever words are still left."""
        held = set(held)
        async with AsyncExitStack() as stack:
            for user in authors:
                if user not in held:
                    await stack.enter_async_context(self.hold(user))
            quotes, learned, _ = await self._message_words(thread_id, ids, authors, recorded.key)
            quotes.merge(recorded)
            removed = 0
            if self.conversations is not None:
                removed, _ = await self.conversations.erase_messages(thread_id, ids)
            pending = await self.storage.inbox.forget_messages(ids)
            memories = 0
            for user, keys in learned.items():
                async with self.hold(user):  # re-entrant: an author is held already
                    memories += await erase_keys(self.memories, user, keys)
            for user in sorted(await self.memories.taught_by(ids)):  # memories other messages taught too
                async with self.hold(user):
                    await mark_deleted_sources(self.memories, user, ids)
            if removed or pending or memories:
                await self.storage.maintenance.compact()
                log.info("deleted messages erased from thread %s: %d stored messages, %d pending turns, %d memories",
                         thread_id, removed, pending, memories)
        author = authors[0] if len(authors) == 1 else None
        redacted = await self._cut_quotes(quotes, author) if quotes else 0
        return MessageErasure(messages=removed, pending_turns=pending, memories=memories, quotes=redacted)

    @counted
    async def erase_thread(self, thread_id: str) -> bool:
        """A channel or thread was deleted: its stored conversation goes, and its pending turns (journaled)."""
        async with self._serial:
            job_id = await self.storage.erasures.begin(kind=THREAD, user_id="", subject=json.dumps({"thread": thread_id}))
            self._running.add(job_id)
            try:
                gone = await self._erase_thread(thread_id)
                await self._finish(job_id)
            finally:
                self._running.discard(job_id)
        return gone

    async def _erase_thread(self, thread_id: str) -> bool:
        gone = await self.conversations.erase_thread(thread_id) if self.conversations is not None else False
        pending = await self.storage.inbox.forget_thread(thread_id)
        if gone or pending:
            await self.storage.maintenance.compact()
        return gone

    @counted
    async def erase_guild(self, guild_id: str) -> int:
        """The bot was removed from a server for good: its conversations, its learning queue and what was
        learned there go (judged over all of a memory's sources, as a moderator purge of that server is).
        Journaled. Returns how many memories were erased.
        """
        async with self._serial:
            job_id = await self.storage.erasures.begin(kind=GUILD, user_id="", guild_id=str(guild_id))
            self._running.add(job_id)
            try:
                memories = await self._erase_guild(str(guild_id))
                await self._finish(job_id)
            finally:
                self._running.discard(job_id)
        log.info("deleted what was kept from server %s: %d memories", guild_id, memories)
        return memories

    async def _erase_guild(self, guild_id: str) -> int:
        if self.conversations is not None:
            for thread_id in await self.conversations.threads_of_guild(guild_id):
                await self.conversations.erase_thread(thread_id)
        await self.storage.inbox.forget_guild(guild_id)
        memories = 0
        for user in await people(self.memories):
            async with self.hold(user):
                memories += (await erase_memories(self.memories, user, guild_id=guild_id)).deleted
        await self.storage.maintenance.compact()
        return memories

    # ---- the steps (each idempotent)
    async def _erase_person(
        self, job_id: int, user: str, guild_id: str | None, by: Actor | None, quotes: QuoteRule
    ) -> ErasureResult:
        messages = redacted = 0
        if self.conversations is not None:  # first: it waits for any turn of theirs in flight to finish
            messages, redacted = await self.conversations.erase_author(user, guild_id=guild_id, quotes=quotes)
        pending = await self.storage.maintenance.erase_person_rows(user, guild_id=guild_id)
        erased = await erase_memories(self.memories, user, guild_id=guild_id, record=by, record_key=f"erasure-{job_id}")
        redacted += await self._cut_quotes_in_learning(quotes, user)
        await self.storage.maintenance.compact()
        return ErasureResult(memories=erased.deleted, pending_turns=pending, messages=messages,
                             reduced=erased.reduced, quotes=redacted)

    async def _cut_quotes(self, quotes: QuoteRule, author: str | None) -> int:
        redacted = 0
        if self.conversations is not None:
            _, redacted = await self.conversations.erase_author(None, quotes=quotes, keep_author=author)
        redacted += await self._cut_quotes_in_learning(quotes, author)
        await self.storage.maintenance.compact()
        return redacted

    async def _cut_quotes_in_learning(self, quotes: QuoteRule, author: str | None) -> int:
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
            async with self.hold(person):
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

    async def _finish(self, job_id: int) -> None:
        await self.storage.erasures.finish(job_id)
        await self.storage.maintenance.compact()  # the journal row (quote hashes) leaves no page behind
