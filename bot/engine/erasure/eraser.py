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

Edits and the person's own removals come through here too (decided for "one door for every change and
removal"):

- An edited message (:meth:`Eraser.edit_message`) is a journaled job (``edit``): the memories learned only
  from its old text go, the thread and the learning queue take the new text, and the message is queued
  to be learned again. Its row names the message by IDs and holds its *new* text (what the message says
  now, which the thread keeps anyway; never the old), so :meth:`resume` finishes it with the new text.
  The words the edit takes back (``quotes.taken_back``: every run of the old text through a word the new
  text dropped) leave the thread's other texts, the bot's answers first, and its queued turns; the row
  holds them as keyed hashes, like a deletion's.
- ``/memories delete`` and ``forget`` (:meth:`Eraser.erase_memories`), ``/memories edit``
  (:meth:`Eraser.replace_memory`) and ``/memories import`` (:meth:`Eraser.restore_memories`, whose file may
  replace texts) are journaled jobs (``memories``) under the person's hold. The change log
  keeps its entry with the old text, as before (``/memories history`` explains it); the cached vector of
  the old text goes.
- The per-person cap's drops and extraction's own deletions are part of the extraction's one batch (with
  their change-log entries), so there is nothing to resume; their cached vectors go right after, through
  :meth:`Eraser.drop_derived`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from contextlib import AbstractAsyncContextManager, AbstractContextManager, AsyncExitStack, asynccontextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import AbstractSet, AsyncIterator, Awaitable, Callable, Iterable, Mapping, TypeVar

from bot.engine.concurrency import Hold, Holds
from bot.engine.erasure.conversations import ConversationEraser
from bot.engine.erasure.compaction import OwedCompaction
from bot.engine.errors import is_transient
from bot.engine.erasure.jobs import EDIT, GUILD, MEMORIES, MESSAGES, PERSON, QUOTES, THREAD, counted
from bot.engine.erasure.memories import memory_texts
from bot.engine.erasure.quotes import QuoteRule
from bot.engine.erasure.replay import JournalReplay
from bot.engine.erasure.steps import ErasureResult, ErasureSteps, MessageErasure
from bot.engine.memories.records import Actor, MemoryChanges
from bot.engine.memories.repository import MemoryRepository
from bot.engine.stores import Storage

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class _Job:
    """A journaled job as its body sees it: ``owes`` False when it removed nothing (no compaction)."""

    owes: bool = True

__all__ = ["ErasureResult", "Eraser", "MessageErasure", "request_erasure"]


async def request_erasure(storage: Storage, user_id: str | int) -> int:
    """Record a wipe for the running bot to do (``python -m bot memories wipe`` beside it); the journal ID."""
    return await storage.erasures.begin(kind=PERSON, user_id=str(user_id))


def _one_at_a_time() -> Callable[[], AbstractAsyncContextManager]:
    lock = asyncio.Lock()
    return lambda: lock


class Eraser(JournalReplay):
    """Runs erasures: records them, gathers the words, removes and redacts them everywhere, compacts.

    Every erasure first takes ``exclusive()`` (one erasure at a time over the whole database, see
    :meth:`bot.engine.concurrency.Locks.erasures`), then holds the people whose data it changes. Running
    the journal again after a crash (``resume``) is :class:`~bot.engine.erasure.replay.JournalReplay`'s.
    """

    def __init__(
        self, storage: Storage, conversations: ConversationEraser | None, *, hold: Hold | None = None,
        light_hold: Hold | None = None, erasing: Callable[[str], AbstractContextManager[None]] | None = None,
        exclusive: Callable[[], AbstractAsyncContextManager] | None = None,
        notify: Callable[[str, str, int, str], None] | None = None,
        settled: Callable[[str], Awaitable[None]] | None = None,
        after: Callable[[], None] | None = None,
    ) -> None:
        """``hold(user)`` keeps the person's extraction stopped meanwhile; ``erasing(user)`` is entered for
        the length of a person's erasure, whoever asked for it (a command, the journal: a wipe from the
        shell handed to the running bot): the engine marks their turns in flight, and those that start
        meanwhile, to be answered without memories and neither kept nor learned from;
        ``exclusive()`` is the global erasure lock (in-process only when not given); ``notify(thread, user,
        pending, scope)`` is told when an edited message is queued to be learned again; ``settled(user)``
        returns once the person's turns marked by the erasure have ended here (their messages taken back
        out), so a wipe compacts after them; ``after()`` empties the in-process caches of texts once a
        removal is done (every journaled job, held or not: a deleted channel takes no person's hold)."""
        self.storage = storage
        self.conversations = conversations
        self.memories = MemoryRepository(storage.store)
        self.holds = Holds(hold, light_hold)
        self.steps = ErasureSteps(storage, conversations, self.memories, self.holds, notify)
        self.erasing = erasing or (lambda _user: nullcontext())
        self.settled = settled
        self.after = after or (lambda: None)
        self._exclusive = exclusive or _one_at_a_time()
        self._running: set[int] = set()  # journal IDs being run by this process right now
        # Whether an interrupted server erasure may be re-run here (the engine: once this process's READY
        # unmarked the servers it is in, and for its own shards' servers only): re-run at start-up, before
        # READY, it went on erasing a server that had added the bot back while it was offline.
        self.guild_ready: Callable[[str], bool] = lambda _guild: True
        self._failures: dict[int, tuple[int, float]] = {}  # journal ID -> (failures, retry not before)
        self.active = 0  # erasures running right now
        self.owed = OwedCompaction(self.compact_owed)  # small removals' one compaction, batched
        self._resumed = False  # the first resume (start-up) pays any compaction a crash left owed
        # People being erased here -> messages their turns took back out of threads meanwhile (a turn of
        # theirs in flight takes its own messages back before the next turn may read them: the wipe's count)
        self._taken_back: dict[str, int] = {}
        self._compact_failures: tuple[int, float] = (0, 0.0)  # failed compactions in a row, retry not before

    def hold(self, user: str) -> AbstractAsyncContextManager[None]:
        """Hold a person's extraction while their data changes (re-entrant; see :class:`Holds`)."""
        return self.holds.hold(user)

    @asynccontextmanager
    async def _journaled(self, job_id: int, *, compact_now: bool = False) -> AsyncIterator[_Job]:
        """Mark a journal row as run by this process for the duration, and finish it if the body succeeds
        (compacting at once with ``compact_now``, else owing the batch's compaction; see ``compaction``;
        none when the body found nothing to remove and says so: ``_Job.owes``)."""
        self._running.add(job_id)
        job = _Job()
        try:
            yield job
            await self._finish(job_id, compact_now=compact_now, owes=job.owes)
        finally:
            self._running.discard(job_id)

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
        return await self._erase_person(str(user_id), guild_id, by)

    async def _erase_person(self, user: str, guild_id: str | None, by: Actor | None) -> ErasureResult:
        self._taken_back.setdefault(user, 0)
        try:
            result = await self._erase_person_held(user, guild_id, by)
            return replace(result, messages=result.messages + self._taken_back.get(user, 0))
        finally:
            self._taken_back.pop(user, None)

    async def _erase_person_held(self, user: str, guild_id: str | None, by: Actor | None) -> ErasureResult:
        # Their turns are marked (answered without memories, neither kept nor learned) only once the erasure
        # holds the global lock: marked while it waited (minutes behind a wipe or a server's sweep), a purge
        # in one server made them "remembered nothing" everywhere for all that time. A turn that ends
        # before the mark is recorded and queued as usual, and the steps below take it out.
        async with self._exclusive(), self.hold(user):
            with self.erasing(user):
                quotes = await self.words_of(user, guild_id)
                job_id = await self.storage.erasures.begin(kind=PERSON, user_id=user, guild_id=guild_id,
                                                           actor=by.kind if by else None, actor_id=by.id if by else None,
                                                           quotes=quotes.to_bytes())
                async with self._journaled(job_id, compact_now=True):  # "Done" only once no file holds the words
                    result = await self.steps.person(job_id, user, guild_id, by, quotes)
                    if self.settled is not None:  # a turn of theirs that started meanwhile takes its messages back
                        await self.settled(user)
                    # Still theirs? A lease that ran out meanwhile (no fenced write since) let other processes
                    # record the person's turns: not "Done" then, the journal runs it again.
                    await self.storage.locks.still_held()
        return result

    @counted
    async def erase_quotes(self, texts: Iterable[str], *, author: str | None = None) -> int:
        """Cut runs copied from ``texts`` (deleted messages) out of everything else; return how many texts.

        ``author``'s own messages and memories are left alone (removing those is the caller's decision).
        """
        quotes = QuoteRule.from_texts(texts)
        if not quotes:
            return 0
        async with self._exclusive():
            job_id = await self.storage.erasures.begin(kind=QUOTES, user_id=author or "", quotes=quotes.to_bytes())
            async with self._journaled(job_id):
                redacted = await self.steps.cut_quotes(quotes, author or None)
        return redacted

    async def request(self, user_id: str) -> int:
        """Record a wipe for the running bot to do (from another process); return the journal ID."""
        return await request_erasure(self.storage, user_id)

    @counted
    async def erase_messages(self, thread_id: str, message_ids: set[str], *, authors: Iterable[str] = (),
                             shown: Mapping[str, str] | None = None) -> MessageErasure:
        """Erase deleted Discord messages: from the conversation (with the answers to them and any summary
        built from them), from the learning queue, every memory learned only from them, and their words
        wherever the bot repeated them; then compact, as after a wipe. Unknown IDs write nothing.

        Journaled like a wipe: the words are gathered (as the quote rule's hashes) and the row written
        before the first deletion, so a crash part-way is finished by :meth:`resume`. Extraction of the
        ``authors`` known beforehand is held throughout (and of anyone whose memories turn out to be
        learned from them, while those go), so nothing is written back.

        ``shown``: the deleted messages' texts as Discord's cache still had them. A message the bot never
        stored but showed as context (a reply chain, channel context, a forward) left no words to gather,
        yet an answer may repeat it: when the index says it reached a thread, these texts join the rule.
        """
        ids = {str(i) for i in message_ids}
        authors = sorted(set(authors))
        async with self._exclusive(), AsyncExitStack() as stack:
            for user in authors:  # a light hold: their new messages are still recorded meanwhile
                await stack.enter_async_context(self.holds.hold(user, light=True))
            quotes, learned, found = await self.steps.message_words(thread_id, ids, authors)
            texts = [t for i, t in (shown or {}).items() if str(i) in ids and t.strip()]
            if texts and await self.storage.reach.threads_of(ids):  # shown in a thread: may be repeated there
                shown_rule = QuoteRule.from_texts(texts, quotes.key)
                quotes.merge(shown_rule)
                found = found or bool(shown_rule)  # ("ok lol" has no run to cut: nothing to do for it)
            if not (quotes or learned or found):
                return MessageErasure(messages=0, pending_turns=0, memories=0)  # unknown IDs: nothing written
            known = sorted(set(authors) | {t.user_id for t in await self.storage.inbox.every_turn()
                                           if str(t.origin.get("message_id")) in ids})
            subject = json.dumps({"thread": thread_id, "messages": sorted(ids), "authors": known})
            job_id = await self.storage.erasures.begin(kind=MESSAGES, user_id=authors[0] if len(authors) == 1 else "",
                                                       quotes=quotes.to_bytes(), subject=subject)
            async with self._journaled(job_id):
                result = await self.steps.messages(job_id, thread_id, ids, known, quotes, held=authors)
        return result

    @counted
    async def edit_message(self, thread_id: str, message_id: str, text: str, *, authors: Iterable[str] = (),
                           edited_at: float | None = None, names: Mapping[str, str] | None = None) -> bool:
        """A stored message was edited: from now on only the new text is kept, answered from and learned.

        The thread and the learning queue get the new text (a summary folded from the old one is dropped).
        What was learned from it is learned again: a memory learned only from this message is erased
        without a trace (with its vector), and the message is queued once more with its new text; a memory
        other messages contributed to stays, shown to the extractor next to it so it can be patched. A
        memory the person wrote or corrected by hand is theirs and is left alone.

        Returns False, changing nothing, when this is not an edit (``ErasureSteps.edit_plan``: the text is
        what is stored) or nothing holds the message. Journaled (``edit``); an extraction of the people
        concerned that is running finishes first, so what it learned from the old text is found and erased.
        """
        message_id = str(message_id)
        candidates = await self.steps.edit_authors(thread_id, message_id, authors)
        async with self._exclusive(), AsyncExitStack() as stack:
            for user in candidates:  # light: the author goes on talking meanwhile, and is learned from
                await stack.enter_async_context(self.holds.hold(user, light=True))
            await self._earlier_edits_of(thread_id, message_id)
            plan = await self.steps.edit_plan(thread_id, message_id, text, candidates, edited_at, names=names)
            if plan is None:
                return False
            rule = await self.steps.taken_back(thread_id, message_id, text)  # before the old text goes
            author = candidates[0] if len(candidates) == 1 else ""
            job_id = await self.storage.erasures.begin(kind=EDIT, user_id=author, subject=json.dumps(plan),
                                                       quotes=rule.to_bytes())
            async with self._journaled(job_id):
                await self.steps.edit(plan)
                await self.steps.cut_taken_back(thread_id, rule, author or None)
                await stack.aclose()  # the holds go first: the message's extraction waits for its person
                await self.steps.learn_again(plan)
        return True

    async def _earlier_edits_of(self, thread_id: str, message_id: str) -> None:
        """Finish, first, an earlier edit of the same message the journal still holds (it failed part-way
        and waits for its retry). Replayed after this one, it wrote its older text over the newer one, in
        the thread and the learning queue: words the author had edited away were kept and learned again.
        Run under the global erasure lock (the caller's), so the journal's order is Discord's."""
        for job in await self.storage.erasures.unfinished():
            if job.kind != EDIT or job.id in self._running:
                continue
            recorded = json.loads(job.subject or "{}")
            if recorded.get("thread") == thread_id and recorded.get("message") == message_id:
                self._running.add(job.id)
                try:
                    await self._run_job(job)
                except Exception as exc:
                    if is_transient(exc, self.storage.transient_errors):
                        raise  # the database is away: this edit is retried, the earlier one with it
                    # Failing for good (a bug, a poisoned row): it must not hold back every later edit of
                    # the message (Discord sends each once). This edit redoes its work on what is stored
                    # now (what was learned from the message goes, the newest text is learned), so the
                    # earlier one is superseded and dropped; its replay would write the older text back.
                    log.exception("an earlier edit of message %s (erasure %d) failed again; superseded by this one",
                                  message_id, job.id)
                    await self._finish(job.id)
                finally:
                    self._running.discard(job.id)

    @counted
    async def erase_memories(self, user_id: str | int, keys: list[str], *, by: Actor,
                             messages: Iterable[str] = ()) -> MemoryChanges:
        """Memories the person (``/memories delete``, ``forget``) chose go, with their cached vectors;
        journaled (``memories``), under the person's hold. The change log keeps its entry. ``messages``:
        their messages ("Forget this") whose turns waiting to be learned go too (``steps.delete_memories``)."""
        user, messages = str(user_id), sorted({str(m) for m in messages})
        async with self._memories_job(user, by, {"keys": sorted(set(keys)), "messages": messages}):
            return await self.steps.delete_memories(user, list(keys), by, messages)

    @counted
    async def replace_memory(self, user_id: str | int, key: str, text: str, origin: dict, *, by: Actor) -> bool:
        """The person corrected a memory (``/memories edit``): the new text is theirs (a hand source, see
        ``memories.records``) and the old text's cached vector goes; journaled (``memories``)."""
        user = str(user_id)
        async with self._memories_job(user, by, {"keys": [key], "replaced": True}):
            done = await self.memories.edit(user, key, text, origin, actor=by)
            await self.steps.drop_vectors(user, [key])
        return done

    @counted
    async def restore_memories(self, user_id: str | int, memories: list[dict], history: list[dict], *,
                               by: Actor) -> int:
        """``/memories import``: the file's memories come back under their own keys; returns how many.

        Where the file's text replaces what a memory says now, that is a removal of the current text, as
        ``/memories edit`` is: under the person's hold (their extraction, which reads and rewrites the same
        memories and their sources index, waits meanwhile) and journaled (``memories``, ``replaced``), so a
        crash after the write still drops the replaced texts' cached vectors when the journal is run again.
        """
        user = str(user_id)
        keys = sorted({str(m["id"]) for m in memories})
        async with self._memories_job(user, by, {"keys": keys, "replaced": True}):
            restored = await self.memories.restore(user, memories, history)
            await self.steps.drop_vectors(user, keys)
        return restored

    @asynccontextmanager
    async def adding(self, user: str) -> AsyncIterator[None]:
        """A memory the person writes by hand is added here: under the erasure lock and a light hold, like
        their other changes. Added while their wipe (or a moderator's purge) ran, after it had read what to
        delete, it outlived the "Done" (on PostgreSQL no claim fenced it out). Not journaled: nothing goes."""
        async with self._exclusive(), self.holds.hold(user, light=True):
            yield

    @asynccontextmanager
    async def _memories_job(self, user: str, by: Actor, subject: dict) -> AsyncIterator[None]:
        """A person's own change to their memories as a journaled ``memories`` job (``subject``: its keys,
        and ``replaced`` when texts are replaced rather than deleted; see ``replay``), under the erasure
        lock and a light hold on them: their new turns are still queued, their extraction waits."""
        async with self._exclusive(), self.holds.hold(user, light=True):
            job_id = await self.storage.erasures.begin(kind=MEMORIES, user_id=user, actor=by.kind, actor_id=by.id,
                                                       subject=json.dumps(subject))
            async with self._journaled(job_id):
                yield

    async def take_back_answer(self, thread_id: str, answer_id: str, *, refused: bool = False) -> None:
        """An answer nobody saw (Discord refused it, or its turn was cancelled just after it was written) out
        of the thread and out of the learning queue's copy, which extraction would otherwise read as said.
        ``refused``: see ``ConversationEraser.drop_answer``."""
        if self.conversations is None:
            return
        text = await self.conversations.answer_text(thread_id, answer_id)
        if not text:
            return
        # The debt first, durably (a failure part-way must still leave its text compacted), then the queue's
        # copy: a failure before the thread's rewrite must not leave it to be learned as said (with the
        # thread's copy gone, nothing would find it again). Then the thread's, owing again after it (a
        # compaction in between paid the first debt).
        await self.owe_compaction()
        await self.steps.forget_answers(thread_id, {text})
        if await self.conversations.drop_answer(thread_id, answer_id, refused=refused):
            self.after()
            await self.owe_compaction()

    async def take_back_in_thread(self, thread_id: str, message_ids: set[str],
                                  people: Iterable[str] = ()) -> AbstractSet[str]:
        """The thread part of :meth:`take_back_messages`, for a turn that still holds the thread's lock: the
        next turn waiting for it must not read an erased person's messages. Takes no person's hold (the
        global order is person, then channel); returns the removed answers' texts, for
        :meth:`take_back_messages` to finish once the lock is released."""
        if self.conversations is None:
            return frozenset()
        # The debt first, durably, as ``_finish`` does: a crash after the rewrite must leave something that
        # compacts (a wipe in another process may have said "Done" already).
        await self.owe_compaction()
        answers = await self.conversations.answers_removed_with(thread_id, message_ids)
        removed, _ = await self.conversations.erase_messages_held(thread_id, message_ids)
        if removed:
            self.after()
            # And again after it: a compaction that ran in between (another process's wipe, the batch's
            # timer) paid the first debt before this rewrite wrote anything.
            await self.owe_compaction()
        for person in people:  # counted in the "Done" of their erasure running here, as its own work
            if person in self._taken_back:
                self._taken_back[person] += removed
        return answers

    async def take_back_messages(self, thread_id: str, message_ids: set[str], people: AbstractSet[str], *,
                                 taken: AbstractSet[str] = frozenset()) -> None:
        """A turn's messages of a person erased while it ran, out of the thread with the answers to them (and
        those answers' copies on other people's queued turns). Written after the erasure passed: a
        compaction is owed (durably), for a wipe that said "Done" before this turn ended. ``people``: whose
        messages these are (being erased: their own queued rows are left to their erasure); ``taken``: the
        answers :meth:`take_back_in_thread` already removed under the turn's lock (which owed and
        invalidated for what it removed)."""
        if self.conversations is None:
            return
        answers = set(taken) | await self.conversations.answers_removed_with(thread_id, message_ids)
        blanked = await self.steps.forget_answers(thread_id, answers, skip=people)
        removed, _ = await self.conversations.erase_messages(thread_id, message_ids)
        if removed or blanked:
            self.after()
            await self.owe_compaction()

    async def drop_derived(self, user_id: str | int, keys: Iterable[str]) -> int:
        """Extraction deleted or rewrote memories (its own deletions, the cap's drops, patches): their
        cached vectors go. Not journaled: the memory change was one batch already; a vector row left by a
        crash in between names a key that no longer exists (dropped at the person's next indexing)."""
        return await self.steps.drop_vectors(str(user_id), keys)

    @counted
    async def erase_thread(self, thread_id: str, *, threads: bool = False) -> bool:
        """A channel or thread was deleted: its stored conversation goes, and its pending turns (journaled).
        ``threads``: a channel, whose threads go too (see ``ConversationEraser.threads_in_channel``)."""
        return bool(await self._simple(THREAD, lambda: self.steps.thread(thread_id, threads=threads), removed=bool,
                                       subject=json.dumps({"thread": thread_id, "threads": threads})))

    @counted
    async def erase_guild(self, guild_id: str, *, still_due: Callable[[], Awaitable[bool]] | None = None,
                          first: Callable[[], Awaitable[object]] | None = None) -> int | None:
        """The bot was removed from a server for good: its conversations, its learning queue and what was
        learned there go (judged over all of a memory's sources, as a moderator purge of that server is).
        Journaled. Returns how many memories were erased; None when ``still_due`` says no.

        ``still_due`` is asked once the erasure lock is held, and ``first`` (the server's settings) runs
        after it: waiting for the lock can take long (another erasure, another process sweeping the same
        server), and a server that added the bot back meanwhile keeps everything. The step marks the server
        swept, still under the lock: marked after it, a second sweep waiting for the lock found the server
        still due and erased it again, with a second full compaction.
        """
        async def ready() -> bool:
            if still_due is not None and not await still_due():
                log.info("server %s added the bot back before its data was deleted", guild_id)
                return False
            if first is not None:
                await first()
            return True

        memories = await self._simple(GUILD, lambda: self.steps.guild(str(guild_id)), guild_id=str(guild_id),
                                      compact_now=True, ready=ready)
        if memories is not None:
            log.info("deleted what was kept from server %s: %d memories", guild_id, memories)
        return memories

    async def _simple(self, kind: str, step: Callable[[], Awaitable[T]], *, compact_now: bool = False,
                      ready: Callable[[], Awaitable[bool]] | None = None,
                      removed: Callable[[T], bool] | None = None, **row: str) -> T | None:
        """Journal a removal named by IDs only, run its step, finish the row. ``ready`` runs first, under
        the erasure lock and before anything is journaled: False, and nothing is done (None). ``removed``
        judges the step's result: False, and no compaction is owed (a channel the bot never saw: a
        ticket or temporary-voice bot deletes them all day, and each would owe a compaction)."""
        async with self._exclusive():
            if ready is not None and not await ready():
                return None
            job_id = await self.storage.erasures.begin(kind=kind, user_id="", **row)
            async with self._journaled(job_id, compact_now=compact_now) as job:
                result = await step()
                job.owes = removed is None or removed(result)
                return result

    # ---- the one compaction of a job (see ``erasure/compaction.py``)
    async def _finish(self, job_id: int, *, compact_now: bool = False, owes: bool = True) -> None:
        """The job's steps are done: record the compaction it owes, drop its row, then compact now or later.

        The debt is written before the row goes, so a crash between them leaves something that compacts;
        the compaction comes after the row is gone, so its quote hashes leave no page behind either.
        Called with the erasure lock held.
        """
        if owes:
            await self._owe()
        await self.storage.erasures.finish(job_id)
        self.after()
        if not owes:
            return
        if compact_now:
            await self._compact()
        else:
            self.owed.due()

    async def owe_compaction(self) -> None:
        """Something erased outside a journaled job (a turn's messages taken back): compact it in the batch."""
        await self._owe()
        self.owed.due()

    async def _owe(self) -> None:
        await self.storage.erasures.owe_compaction()

    async def _compact(self) -> None:
        """One compaction, paying every debt recorded before it (with the erasure lock held)."""
        self.owed.paid()
        mark = await self.storage.erasures.owed_mark()  # a debt recorded while it runs waits for the next
        began = self.owed.clock()
        try:
            await self.storage.maintenance.compact()
            self.owed.took(self.owed.clock() - began)
        except Exception:
            failures = self._compact_failures[0] + 1
            self._compact_failures = (failures, time.monotonic() + min(300.0, 5.0 * 2 ** (failures - 1)))
            raise
        self._compact_failures = (0, 0.0)
        await self.storage.erasures.compaction_paid(mark)  # (rows with no text or hashes: nothing left to hide)

    async def compact_owed(self) -> bool:
        """Run the compaction small removals owe, if any (the batch's timer, shutdown, start-up, the
        poll); return whether one ran. Under the erasure lock: no job finishes halfway through it."""
        async with self._exclusive():
            if await self.storage.erasures.compaction_owed() is None:
                self.owed.paid()
                return False
            await self._compact()
            return True

    async def close(self, *, pay: bool = True) -> None:
        """Stop the batch's timer and pay what is owed now (else the next start does). ``pay`` False: an
        engine never started (``python -m bot sync`` beside a running bot) holds no writer lock, and would
        rebuild the running bot's files outside its erasure lock."""
        await self.owed.close()
        if not pay:
            return
        try:
            await self.compact_owed()
        except Exception as exc:  # noqa: BLE001 - the debt stays in the journal for the next start
            log.warning("the owed compaction could not run at shutdown (%s); the next start runs it",
                        type(exc).__name__)
