"""The steps of an erasure, each idempotent: run once, or again after a crash, to the same end.

:class:`bot.engine.erasure.eraser.Eraser` is the door (the journal, the order, the holds, and the job's one
compaction, after its last step: ``erasure/compaction.py``); these are what it does behind it, one method per
kind of removal plus the quote rule's sweep over everything else. No step compacts.

Derived data goes with what it was derived from: every memory a step erases, cuts back or redacts also
loses its cached vector row (the embedding and the text digest, ``VectorCache.delete``), in the same step;
a memory whose text changed gets a fresh one from its new text on demand.

An edited message (``edit_plan``, ``edit``, ``learn_again``): the plan is read under the holds, before any
change, and recorded in the journal (IDs, the message's *new* text and who learns it again; never the old
text), so a crash part-way is finished with the new text. Memories the person wrote or corrected by hand
are never part of it (``StoredMemory.hand_written``).
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import AbstractSet, Any, Callable, Iterable, Mapping

from bot.engine.concurrency import Holds
from bot.engine.conversation.side import side_prefix
from bot.engine.erasure.conversations import ConversationEraser
from bot.engine.erasure.memories import (
    erase_keys,
    erase_memories,
    mark_deleted_sources,
    people,
    quoting_people,
    redact_memory_keys,
)
from bot.engine.erasure.quotes import QuoteRule, redaction_of, taken_back
from bot.engine.memories.records import Actor, MemoryChanges, StoredMemory
from bot.engine.memories.repository import MemoryRepository
from bot.engine.stores import Storage, still_queued

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MessageErasure:
    """What deleting some Discord messages removed."""

    messages: int  # stored conversation messages (theirs and the bot's answers to them)
    pending_turns: int
    memories: int
    quotes: int = 0
    # The Discord IDs of the bot's own messages that carried its answers to the deleted messages (every
    # part of a split answer), read before they were erased: for ``/settings delete-replies``.
    replies: tuple[str, ...] = ()


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
                 holds: Holds, notify: Callable[[str, str, int, str], None] | None = None) -> None:
        self.storage = storage
        self.conversations = conversations
        self.memories = memories
        self.holds = holds
        self.notify = notify or (lambda _thread, _user, _count, _scope: None)  # a turn was queued for learning

    # ---- derived data
    async def drop_vectors(self, user: str, keys: Iterable[str]) -> int:
        """The cached vectors (embedding and text digest) of erased or rewritten memories go too."""
        keys = sorted(set(keys))
        return await self.storage.vectors.delete(str(user), keys) if keys else 0

    async def erase_keys(self, user: str, keys: Iterable[str]) -> int:
        """Erase memories without a trace (with their change log and cached vectors); return how many."""
        keys = sorted(set(keys))
        erased = await erase_keys(self.memories, user, keys)
        await self.drop_vectors(user, keys)
        return erased

    # ---- memories the person chose (``/memories delete``, ``forget``, ``edit``)
    async def delete_memories(self, user: str, keys: list[str], by: Actor,
                              messages: Iterable[str] = ()) -> MemoryChanges:
        """Delete memories the person chose; the change log keeps its entry (``/memories history``).

        ``messages``: the person's messages they asked to be forgotten ("Forget this"): their rows still
        waiting in the learning queue go first, or what was forgotten would be learned again moments later
        (a message not learned yet, or queued again by an edit).
        """
        messages = {str(m) for m in messages}
        if messages:
            await self.storage.inbox.forget_messages(messages)
            # Read again under the hold: an extraction that was running when the person asked has finished
            # now, and what it learned from the message goes too.
            keys = sorted(set(keys) | {m.key for m in await self.memories.list(user) if messages & m.about_messages()})
        changes = await self.memories.apply(user, deletes=keys, actor=by)
        await self.drop_vectors(user, keys)
        return changes

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
            for user in authors:  # light: extraction stops, their new messages are still recorded
                if user not in held:
                    await stack.enter_async_context(self.holds.hold(user, light=True))
            quotes, learned, _ = await self.message_words(thread_id, ids, authors, recorded.key)
            quotes.merge(recorded)
            removed = 0
            if self.conversations is not None:
                # First the answers' copies in the learning queue (a replay after a crash between the two
                # still finds the answers in the thread), then the thread.
                await self.forget_answers(thread_id, await self.conversations.answers_removed_with(thread_id, ids))
                removed, _ = await self.conversations.erase_messages(thread_id, ids)
            pending = await self.storage.inbox.forget_messages(ids)
            memories = 0
            for user, keys in learned.items():
                async with self.holds.hold(user, light=True):  # re-entrant: an author is held already
                    memories += await self.erase_keys(user, keys)
            for user in sorted(await self.memories.taught_by(ids)):  # memories other messages taught too
                async with self.holds.hold(user, light=True):
                    await mark_deleted_sources(self.memories, user, ids)
            if removed or pending or memories:
                log.info("deleted messages erased from thread %s: %d stored messages, %d pending turns, %d memories",
                         thread_id, removed, pending, memories)
        author = authors[0] if len(authors) == 1 else None
        redacted = 0
        if quotes:
            reached = await self.reached(thread_id, ids)
            redacted = await (self.cut_quotes(quotes, author) if reached is None
                              else self.cut_quotes_in(reached, quotes, author))
        await self.storage.reach.forget(ids)  # last: a rerun after a crash still finds where they went
        return MessageErasure(messages=removed, pending_turns=pending, memories=memories, quotes=redacted)

    async def forget_answers(self, thread_id: str, answers: set[str], *, skip: AbstractSet[str] = frozenset()) -> int:
        """Blank the ``ai`` text of the thread's queued turns that carry one of these (removed) answers, each
        person held meanwhile: extraction reads that text as context, and the row outlives the thread's
        copy (a deleted reply of the bot's; an answer to a gathered turn whose first message was deleted).
        ``skip``: people whose rows are not touched (being erased: their rows go with them, and a hold on
        them here would wait for the very erasure that waits for this). Returns how many rows it blanked."""
        if not answers:
            return 0
        rows = [t for t in await self.storage.inbox.every_turn() if t.thread_id == thread_id and t.ai in answers
                and t.user_id not in skip]
        for person in sorted({t.user_id for t in rows}):
            async with self.holds.hold(person, light=True):
                await self.storage.inbox.rewrite_turns({t.id: (t.human, "") for t in rows if t.user_id == person})
        return len(rows)

    async def reached(self, thread_id: str, ids: set[str]) -> set[str] | None:
        """The threads deleted messages' text reached (where they were posted, and every thread the index
        recorded); None when one of them was posted before the index was complete (or its ID tells no
        date): then every thread and person is searched, as before the index."""
        since = await self.storage.reach.since()
        if since > 0 and any((posted_at(i) or 0.0) < since for i in ids):
            return None
        return {thread_id} | await self.storage.reach.threads_of(ids)

    async def cut_quotes_in(self, threads: set[str], quotes: QuoteRule, author: str | None) -> int:
        """The quote rule over the threads a deleted message reached only: their messages but ``author``'s,
        the bot's answers, their summaries, their queued turns, and the memories of the people in them (who
        could have learned the words there). Each person whose turns or memories quote it is held while
        theirs change, as in :meth:`cut_quotes_in_learning`."""
        redacted = 0
        people: set[str] = set()
        for t in sorted(threads):
            if self.conversations is not None:
                redacted += await self.conversations.cut_quotes_in_thread(t, quotes, keep_author=author)
                people |= await self.conversations.speakers(t)
        turns = [t for t in await self.storage.inbox.every_turn() if t.thread_id in threads]
        # everyone queued there: an extraction of theirs in flight may have read the message as context;
        # the author too where the bot's answer to them repeats it (their memory shown in another thread)
        hit = {t.user_id for t in turns if t.user_id != author or self._redacted_turn(quotes, t, author)}
        hit |= await quoting_people(self.memories, quotes, among=(people | {t.user_id for t in turns}) - {author})
        for person in sorted(hit):
            redacted += await self._cut_persons_quotes(person, quotes, author, threads=threads, light=True)
        return redacted

    async def thread(self, thread_id: str, *, threads: bool = False) -> bool:
        """A thread's conversation, pending turns and reach rows; with ``threads``, a deleted channel's, and
        those of every thread in it (replayed after a crash: those not yet gone are found again)."""
        doomed = [thread_id]
        if threads and self.conversations is not None:
            doomed += await self.conversations.threads_in_channel(thread_id)
        for one in list(doomed):  # the side conversations asked there ("Ask about this"), by name: no scan
            doomed += [s for s in await self.storage.maintenance.conversations_named(side_prefix(one)) if s not in doomed]
        gone = False
        for one in doomed:
            # The conversation last: it is what finds a thread of the channel again on a replay. Erased
            # first, a crash before its queued turns went left them to be learned (and kept) for good.
            queued = await self.storage.inbox.forget_thread(one)
            await self.storage.reach.forget_thread(one)  # (IDs only: no text, nothing to compact for)
            erased = await self.conversations.erase_thread(one) if self.conversations is not None else False
            gone = gone or erased or queued > 0
        return gone

    async def guild(self, guild_id: str) -> int:
        if self.conversations is not None:
            for thread_id in await self.conversations.threads_of_guild(guild_id):
                await self.conversations.erase_thread(thread_id)
                await self.storage.reach.forget_thread(thread_id)
        await self.storage.inbox.forget_guild(guild_id)
        memories = 0
        for user in await people(self.memories):
            async with self.holds.hold(user, light=True):  # what they say elsewhere meanwhile is kept
                erased = await erase_memories(self.memories, user, guild_id=guild_id)
                await self.drop_vectors(user, erased.keys)
                memories += erased.deleted
        # Last, under the same lock (the live sweep and the journal's re-run alike): left marked removed,
        # the next sweep, here or in another process, erased the server all over again.
        await self.storage.removed_guilds.done(guild_id)
        return memories

    async def person(
        self, job_id: int, user: str, guild_id: str | None, by: Actor | None, quotes: QuoteRule
    ) -> ErasureResult:
        messages = redacted = 0
        beside = await self.learning_beside(user, guild_id)  # read before their rows go
        if self.conversations is not None:
            # The answers to their messages leave the queue's copies first (someone else's row, when a
            # gathered turn ended with another person's message; a rerun after a crash still finds them).
            for thread_id, answers in (await self.conversations.answers_to(user, guild_id=guild_id)).items():
                await self.forget_answers(thread_id, answers)
            # then the thread: it waits for any turn of theirs in flight to finish
            messages, redacted = await self.conversations.erase_author(user, guild_id=guild_id, quotes=quotes)
        # and again, last thing before their rows go: whoever queued beside them while every thread was walked
        beside |= await self.learning_beside(user, guild_id)
        pending = await self.storage.maintenance.erase_person_rows(user, guild_id=guild_id)
        erased = await erase_memories(self.memories, user, guild_id=guild_id, record=by, record_key=f"erasure-{job_id}")
        await self.drop_vectors(user, erased.keys)  # (erase_person_rows dropped them all already; a rerun too)
        redacted += await self.cut_quotes_in_learning(quotes, user, also=beside)
        return ErasureResult(memories=erased.deleted, pending_turns=pending, messages=messages,
                             reduced=erased.reduced, quotes=redacted)

    async def cut_quotes(self, quotes: QuoteRule, author: str | None) -> int:
        redacted = 0
        if self.conversations is not None:
            _, redacted = await self.conversations.erase_author(None, quotes=quotes, keep_author=author)
        redacted += await self.cut_quotes_in_learning(quotes, author)
        return redacted

    async def learning_beside(self, user: str, guild_id: str | None) -> set[str]:
        """The other people with turns queued in the threads where ``user`` has queued turns (in
        ``guild_id``, when given): an extraction of theirs reads ``user``'s turns there as context, and one
        in flight during an erasure could write ``user``'s words into a memory of theirs afterwards."""
        turns = await self.storage.inbox.every_turn()
        threads = {t.thread_id for t in turns if t.user_id == user
                   and (guild_id is None or str(t.origin.get("guild_id")) == str(guild_id))}
        return {t.user_id for t in turns if t.thread_id in threads} - {user}

    async def cut_quotes_in_learning(self, quotes: QuoteRule, author: str | None, *,
                                     also: Iterable[str] = ()) -> int:
        """Other people's turns waiting to be learned from, and their memories, lose the quoted runs.

        Each person whose data quotes the erased words is held while theirs is rewritten (turns first,
        then memories): an extraction of theirs in flight finishes first, and none starts until both are
        clean, so no extraction can write a quote back into a memory. ``also``: people held and checked
        the same way although nothing of theirs quotes the words yet (their extraction may have the words
        as context: ``learning_beside``). ``author``'s own are not theirs to redact (the erased person's,
        or a deleted message's author's).
        """
        if not quotes:
            return 0
        hit = {t.user_id for t in await self.storage.inbox.every_turn() if self._redacted_turn(quotes, t, author)}
        people = hit | set(also) | (await quoting_people(self.memories, quotes) - {author})
        changed = 0
        for person in sorted(people):
            # (Eraser.hold is re-entrant: the erased person, already held, is held again at no cost.)
            # light: a bystander's extraction waits, their new turns are still queued meanwhile
            changed += await self._cut_persons_quotes(person, quotes, author, light=person != author)
        return changed

    async def _cut_persons_quotes(self, person: str, quotes: QuoteRule, author: str | None, *,
                                  threads: set[str] | None = None, light: bool = False) -> int:
        """One person's queued turns (in ``threads`` only, when given) and memories lose the quoted runs,
        under their hold (``light``: only their extraction waits). For the author only the bot's answers in
        their remaining turns change, never their words or memories."""
        async with self.holds.hold(person, light=light):
            texts = {t.id: cut for t in await self.storage.inbox.every_turn()
                     if t.user_id == person and (threads is None or t.thread_id in threads)
                     and (cut := self._redacted_turn(quotes, t, author))}
            await self.storage.inbox.rewrite_turns(texts)
            changed = len(texts)
            if person != author:
                keys = await redact_memory_keys(self.memories, quotes, person)
                await self.drop_vectors(person, keys)
                changed += len(keys)
        return changed

    @staticmethod
    def _redacted_turn(quotes: QuoteRule, turn, author: str | None) -> tuple[str, str] | None:
        human = turn.human if turn.user_id == author else quotes.redact(turn.human)
        ai = quotes.redact(turn.ai)
        return (human, ai) if (human, ai) != (turn.human, turn.ai) else None

    # ---- an edited message
    async def edit_authors(self, thread_id: str, message_id: str, in_thread: Iterable[str]) -> list[str]:
        """Who may hold something of the message: its author in the thread, its rows in the learning queue,
        and whoever has memories learned from it (read only, before the holds)."""
        ids = {message_id}
        users = set(in_thread) | {t.user_id for t in await self.storage.inbox.every_turn()
                                  if str(t.origin.get("message_id")) == message_id}
        users |= await self.memories.taught_by(ids)
        users |= set(await self.memories.learned_only_from(ids))  # memories older than the sources index
        return sorted(users)

    async def edit_plan(self, thread_id: str, message_id: str, text: str, authors: Iterable[str],
                        edited_at: float | None = None, *, names: Mapping[str, str] | None = None) -> dict[str, Any] | None:
        """What applying an edit changes, read under the holds (nothing is written); None: nothing to do.

        Not an edit (None) when every stored text of the message (in the thread, in the learning queue)
        already is ``text``; or, when the bot holds no text of it any more, when everything learned from
        it was learned after its last edit (``edited_at``, epoch seconds). None too when nothing holds it.
        """
        rows = [t for t in await self.storage.inbox.every_turn() if str(t.origin.get("message_id")) == message_id]
        said, in_thread = ([], False)
        if self.conversations is not None:
            said, in_thread = await self.conversations.texts_of_messages(thread_id, {message_id})
        held = said + [t.human for t in rows]
        if held and all(t == text or redaction_of(t, text) for t in held):
            # a link preview, a pin, a thread started from it: the same text, not an edit (also where an
            # erasure has cut someone else's words out of the bot's copy since: they must not come back)
            return None
        erase: dict[str, list[str]] = {}
        relearn: dict[str, dict[str, Any]] = {}
        for user in sorted(set(authors)):
            # Live sources only: a message deleted since is never learned from again, whatever update of it
            # arrives after its deletion. An imported file's word is no proof they wrote it: theirs stays.
            hits = [m for m in await self.memories.list(user) if message_id in m.live_message_ids()
                    and not m.hand_written and not m.imported_from(message_id)]
            if not hits:
                continue
            erase[user] = [m.key for m in hits if m.live_message_ids() <= {message_id}]
            # The queue keeps 8 rows a channel: an older message's author is named from the update itself.
            author = next((r.author for r in rows if r.user_id == user), None) or (names or {}).get(user) or user
            relearn[user] = {"author": author, "origin": _origin_of(hits, message_id)}
        if not held and relearn and edited_at is not None and _learned_after(
                [m for u in relearn for m in await self.memories.list(u) if message_id in m.live_message_ids()],
                message_id, edited_at):
            return None  # an old message the bot learned after its last edit: this update changes nothing
        if not (held or in_thread or erase or relearn):
            return None
        return {"thread": thread_id, "message": message_id, "text": text, "authors": sorted(set(authors)),
                "erase": erase, "relearn": relearn}

    async def taken_back(self, thread_id: str, message_id: str, text: str) -> QuoteRule:
        """The rule of the words an edit takes back (read before anything changes; see ``quotes.taken_back``)."""
        rows = [t.human for t in await self.storage.inbox.every_turn() if str(t.origin.get("message_id")) == message_id]
        said: list[str] = []
        if self.conversations is not None:
            said, _ = await self.conversations.texts_of_messages(thread_id, {message_id})
        return taken_back([*said, *rows], text)

    async def cut_taken_back(self, thread_id: str, rule: QuoteRule, author: str | None) -> int:
        """An edit's taken-back words leave the thread (the bot's answers that repeated them, the summary,
        others' messages), that thread's queued turns (the bot's answers kept with them) and the memories of
        the people in it (who could have learned them there), as a deletion's do; idempotent."""
        if not rule:
            return 0
        return await self.cut_quotes_in({thread_id}, rule, author)

    async def edit(self, plan: dict[str, Any]) -> int:
        """Apply an edit's plan (idempotent): the thread and the learning queue take the new text (a summary
        built from the old one is dropped), and the memories learned only from the old text go without a
        trace. Returns how many memories were erased."""
        thread_id, message_id, text = plan["thread"], plan["message"], plan["text"]
        erased = 0
        async with AsyncExitStack() as stack:
            for user in plan["authors"]:  # light, as on the live run (re-entrant: held already there); a
                # replay after a crash holds them here first, and their new turns must still be recorded
                await stack.enter_async_context(self.holds.hold(user, light=True))
            if self.conversations is not None:
                await self.conversations.edit_message(thread_id, message_id, text)
            await self.storage.inbox.edit_message(message_id, text)
            for user, keys in plan["erase"].items():
                erased += await self.erase_keys(user, keys)
        if erased:
            log.info("an edit of message %s erased %d memories learned from its old text", message_id, erased)
        return erased

    async def still_held(self, plan: dict[str, Any]) -> dict[str, Any] | None:
        """An edit's plan as a replay may still apply it (read under the erasure lock); None: nothing left.

        A journaled edit that failed (a database outage) is run again seconds or minutes later. Meanwhile
        the message may have been deleted, or a person who had learned from it wiped: both erase everything
        the edit would touch, and the plan's ``learn_again`` would queue the text once more, to be learned
        after the removal said it was done. So a replay learns again only for whoever still holds something
        of the message (its row in their learning queue, a memory that cites it and was not deleted with it),
        or while a conversation still holds it; when nothing holds it, nothing of the plan is applied.

        The cost: a replay of an edit whose first run had already erased the memories learned only from the
        old text, of a message no longer in any conversation or queue, does not learn it again (the memory
        is lost, not leaked).
        """
        message_id, thread_id = plan["message"], plan["thread"]
        rows = [t for t in await self.storage.inbox.every_turn() if str(t.origin.get("message_id")) == message_id]
        said, in_thread = ([], False)
        if self.conversations is not None:
            said, in_thread = await self.conversations.texts_of_messages(thread_id, {message_id})
        stored = bool(said or in_thread)
        relearn = {}
        for user, info in plan["relearn"].items():
            cites = any(message_id in m.live_message_ids() for m in await self.memories.list(user))
            if stored or cites or any(t.user_id == user for t in rows):
                relearn[user] = info
        if not (stored or rows or relearn):
            return None
        return {**plan, "relearn": relearn}

    async def learn_again(self, plan: dict[str, Any]) -> int:
        """Queue the edited message once more for whoever had learned from it (after the holds: a shared
        database refuses new turns of a person being erased); idempotent. Returns how many were queued."""
        message_id, text = plan["message"], plan["text"]
        queued = 0
        sent = posted_at(message_id)
        for user, info in plan["relearn"].items():
            origin = dict(info["origin"])
            if sent is not None:  # queued now, said then: "yesterday" in it, and its memory's date, are then's
                origin["sent_at"] = datetime.fromtimestamp(sent, timezone.utc).isoformat(timespec="seconds")
            where = origin.get("channel_id") or plan["thread"]
            if await still_queued(self.storage.inbox, where, user, message_id):
                continue  # still waiting (or queued by a first run): it already carries the new text
            if (await self.storage.prefs.get(user)).paused:
                continue
            count = await self.storage.inbox.record(thread_id=where, user_id=user, author=info["author"], human=text,
                                                    ai="", origin=origin)
            if count:
                self.notify(where, user, count, str(origin.get("guild_id") or "dm"))
                queued += 1
        return queued


ORIGIN_FIELDS = ("guild_id", "channel_id", "message_id")
DISCORD_EPOCH_MS = 1420070400000


def posted_at(message_id: str) -> float | None:
    """When a Discord message was posted (epoch seconds, from its snowflake ID); None: not a Discord ID."""
    try:
        return ((int(message_id) >> 22) + DISCORD_EPOCH_MS) / 1000
    except ValueError:
        return None


def _origin_of(memories: list[StoredMemory], message_id: str) -> dict[str, str]:
    """Where the message was said, from the memories learned from it (the queued turn's origin)."""
    source = next((m.origin for m in memories if str(m.origin.get("message_id")) == message_id),
                  next((s for m in memories for s in m.sources if str(s.get("message_id")) == message_id), {}))
    origin = {k: str(v) for k, v in source.items() if k in ORIGIN_FIELDS and v is not None}
    origin["message_id"] = message_id
    return origin


def _learned_after(memories: list[StoredMemory], message_id: str, edited_at: float) -> bool:
    """Whether the message was learned (again) at or after ``edited_at``: the bot has read its edited text.

    The latest source counts, not the earliest: a memory the old text taught with another message stays
    after the edit (still citing it from before), next to what the edited text taught; judged by that
    older source, every later pin or link preview was an edit again. One second of slack: a source's
    ``at`` is kept to the whole second, so a message learned again 0.3 s after its edit reads as 0.7 s
    before it.
    """
    stamps = []
    for m in memories:
        for s in m.sources:
            if str(s.get("message_id")) == message_id:
                try:
                    stamps.append(datetime.fromisoformat(str(s.get("at"))).timestamp())
                except ValueError:
                    return False
    return bool(stamps) and max(stamps) + 1.0 >= edited_at
