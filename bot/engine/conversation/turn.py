"""Running one turn of a channel: the chat graph for the turn's messages, under the channel's lock.

:meth:`TurnRunner.answer` returns as soon as ``respond`` has produced the answer; summarizing and
recording the turn for memory extraction continue in the background while the channel stays locked, so
messages in one channel are handled one at a time, in arrival order, and different channels run
concurrently. :meth:`TurnRunner.hear` records messages without answering them (over a limit).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import AbstractSet, Any, Awaitable, Callable, Coroutine

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.graph.state import CompiledStateGraph

from bot.engine.concurrency import BoundedDict, InflightTurns, Locks
from bot.engine.conversation.graph import AFTER_ANSWER, Later
from bot.engine.conversation.rendering import marked_answered, pending_start, said
from bot.engine.errors import Outages
from bot.engine.learning.scheduler import ExtractionScheduler
from bot.engine.policy.turn_policy import Policies, TurnPolicy
from bot.engine.state import Incoming, Speaker
from bot.engine.stores import Inbox, Maintenance, NoScopes, TurnScopes

log = logging.getLogger(__name__)

DeltaCallback = Callable[[str], None]
PRUNE_EVERY = 8  # a thread keeps at most this many superseded checkpoints between prunes
MAX_PRUNE_COUNTERS = 100_000
KNOWN_THREADS = 4096  # threads this process has seen stored (see TurnRunner._durability); about 0.4 MB


@dataclass(frozen=True)
class Reply:
    """The answer to one message."""

    text: str
    message_id: str = ""  # the answer's ID in the thread (see ChatEngine.attach_sent)


TakenBack = AbstractSet[str]  # the texts of the answers a take-back removed from the thread
NOTHING_TAKEN: TakenBack = frozenset()


@dataclass
class _Turn:
    """One turn in flight: what it answers and where the answer goes."""

    thread_id: str
    speaker: Speaker
    incoming: list[Incoming]
    answered: asyncio.Future
    on_delta: DeltaCallback | None
    learning: bool
    timeout: float | None
    replaced: bool = False  # it stored a message over its earlier text (a turn restarted by an edit)
    taken: TakenBack | None = None  # what it took back of erased people before releasing the channel
    stored: frozenset[str] = frozenset()  # the IDs its messages have in the thread (see ``_set_aside``)


class TurnRunner:
    """Runs turns through the compiled chat graph and queues them for learning."""

    def __init__(self, *, graph: CompiledStateGraph, inbox: Inbox, maintenance: Maintenance, locks: Locks,
                 scheduler: ExtractionScheduler, policies: Policies, outages: Outages, observer: object,
                 drop_answer: Callable[[str, str], Awaitable[None]],
                 drop_messages: Callable[[str, set[str], set[str], TakenBack], Awaitable[object]] | None = None,
                 drop_held: Callable[[str, set[str], set[str]], Awaitable[TakenBack]] | None = None,
                 owe_compaction: Callable[[], Awaitable[object]] | None = None,
                 scopes: TurnScopes | None = None,
                 owed: tuple[Callable[[Speaker], None], Callable[[Speaker], None]] = (lambda _s: None,
                                                                                      lambda _s: None)) -> None:
        """``drop_answer(thread, answer_id)`` takes an unseen answer back out, ``drop_messages(thread, ids,
        people, taken)`` Discord messages of erased ``people`` with their answers (the eraser's), and
        ``drop_held(thread, ids, people)`` their thread part while the turn still holds the channel
        (``_take_back_held``); ``owe_compaction()`` is owed
        when a turn stored a message over its earlier text (an edit while it was answered: the old words
        are in superseded pages until a compaction, as after the eraser's own edits). ``scopes`` mark a turn's
        storage work as one unit (``bot.engine.stores.scopes``: one pooled connection on PostgreSQL).
        ``owed`` (owe, paid) is told about each usage record left for after an answer (``Later``)."""
        self.graph = graph
        self.inbox = inbox
        self.maintenance = maintenance
        self.locks = locks
        self.scheduler = scheduler
        self.policies = policies
        self.outages = outages
        self.observer = observer
        self._drop_answer = drop_answer
        self._drop_messages = drop_messages
        self._drop_held = drop_held
        self._owe_compaction = owe_compaction
        self.scopes = scopes if scopes is not None else NoScopes()
        self.owed = owed
        self.inflight = InflightTurns()  # an erasure marks a person's turns in flight: none is learned from
        # Messages their authors chose "Forget this" on before they were answered (bounded): never queued.
        self.not_learned: BoundedDict[str, None] = BoundedDict(10_000)
        self.tails: set[asyncio.Task] = set()
        self._turns: dict[str, set[asyncio.Task]] = {}  # each thread's turns in flight (see thread_state)
        self._turns_since_prune: dict[str, int] = {}
        self._stored: OrderedDict[str, None] = OrderedDict()  # threads known to have a checkpoint

    def spawn(self, coro: Coroutine[Any, Any, object]) -> asyncio.Task:
        """Run ``coro`` in the background; :meth:`close` waits for it."""
        task = asyncio.create_task(coro)
        self.tails.add(task)
        task.add_done_callback(self.tails.discard)
        return task

    async def close(self) -> None:
        """Wait for every turn still finishing in the background."""
        if self.tails:
            await asyncio.gather(*self.tails, return_exceptions=True)

    async def answer(self, thread_id: str, incoming: list[Incoming], policy: TurnPolicy, *,
                     on_delta: DeltaCallback | None, timeout: float | None) -> Reply:
        """Answer the turn (see ``ChatEngine.reply_to``); raises what the model raised."""
        answered: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        turn = _Turn(thread_id, policy.speaker, incoming, answered, on_delta, policy.learning, timeout)
        task = self.spawn(self._run(turn))  # the task enters the channel lock: FIFO in the order messages came
        turns = self._turns.setdefault(thread_id, set())
        turns.add(task)
        task.add_done_callback(lambda done: (turns.discard(done), turns or self._turns.pop(thread_id, None)))
        try:
            return await answered
        except asyncio.CancelledError:
            # The caller gave up (its deadline passed, or it restarts the turn with follow-ups): stop the
            # model call too, so the thread never keeps an answer nobody saw. The messages stay in the
            # thread; the thread stays usable.
            task.cancel()
            if answered.done() and not answered.cancelled() and answered.exception() is None:
                # The answer was written just as the caller gave up: take it back out of the thread.
                self.spawn(self._drop_answer(thread_id, answered.result().message_id))
            raise

    async def hear(self, thread_id: str, incoming: list[Incoming], *, learning: bool) -> None:
        """Record messages in the conversation without answering them (a rate limit or a full queue)."""
        tickets = self._open_tickets(incoming, with_task=False)
        try:
            await self._hear(thread_id, incoming, tickets, learning=learning)
        finally:  # closed here, not with the caller's task (which lives on: a wipe waits for open tickets)
            for ticket in tickets.values():
                self.inflight.close(ticket)

    async def _hear(self, thread_id: str, incoming: list[Incoming], tickets: dict, *, learning: bool) -> None:
        await self._mark_erased_elsewhere(tickets)
        incoming = [i for i in incoming if not tickets[i.speaker.user_id].erased]  # being erased: not kept
        if not incoming:
            return
        taken: TakenBack | None = None
        try:
            async with self.locks.channel(thread_id), self.scopes.turn():
                try:
                    messages, again, rewritten = await self._human_messages(thread_id, incoming)
                    config = {"configurable": {"thread_id": thread_id}}
                    await self.graph.aupdate_state(config, {"messages": messages}, as_node="summarize")  # to END
                    self._remember_stored(thread_id)
                    if learning:
                        await self._queue_for_learning(thread_id, incoming, None, tickets, again=again)
                    # A flood of heard messages must not pile up checkpoints; a text stored over must leave none.
                    await self._maybe_prune(thread_id, now=rewritten)
                    if rewritten:
                        await self._owe()
                finally:  # before the next turn gets the channel (see ``_take_back_held``)
                    taken = await self._take_back_held(thread_id, incoming, tickets)
        finally:  # an erasure that began meanwhile
            if taken is None:
                await self._mark_erased_elsewhere(tickets)
            await self._forget_erased(thread_id, incoming, tickets, taken or NOTHING_TAKEN)

    async def _mark_erased_elsewhere(self, tickets: dict) -> None:
        """Mark the tickets of people an erasure in another process holds now (see ``InflightTurns``: the
        erasing process marks only its own turns, and one here may have started after it passed this
        thread)."""
        for user in await self.locks.erasing_elsewhere([u for u, t in tickets.items() if not t.erased]):
            tickets[user].erased = True

    async def thread_state(self, thread_id: str) -> dict:
        """The thread's state values (messages, summary) once this process's turns in it have finished.

        A turn writes its checkpoint as it ends (see :meth:`_stream`), so a message being answered is in
        the thread only once its turn is done: a reader (who wrote a message that is being deleted or
        edited; a test after a reply) waits for it, as the erasure itself waits for the channel's lock.
        """
        await self.turns_done(thread_id)
        return await self._read_state(thread_id)

    async def turns_done(self, thread_id: str) -> None:
        """Wait until this process's turns in a thread have ended (each queues its messages for learning
        and writes its checkpoint as it ends). The caller's own turn, if it is one, is not waited for."""
        me = asyncio.current_task()
        running = [t for t in self._turns.get(thread_id, ()) if t is not me]
        if running:
            await asyncio.wait(running)

    async def _durability(self, thread_id: str) -> str:
        """How a turn's run writes its checkpoints: once, as it stops (``"exit"``), in a thread already stored.

        A thread's first turn writes its messages before the model call (``"sync"``): an erasure finds the
        threads to visit by their checkpoints, so a brand-new thread whose only message is being answered
        must be stored before the answer, or an erasure of its author (in another process, where this
        turn is not marked) would pass it by and the turn would write the message, and queue it, after
        "Done". Once stored, the erasure finds the thread and waits for its lock, which the turn holds until
        its checkpoint is written. Whether a thread is stored is read once per thread and process (an
        ``aget_tuple`` on the turn's connection), then remembered, for the ``KNOWN_THREADS`` most recent.
        """
        if thread_id in self._stored:
            self._stored.move_to_end(thread_id)
            return "exit"
        config = {"configurable": {"thread_id": thread_id}}
        stored = await self.graph.checkpointer.aget_tuple(config) is not None
        if stored:
            self._remember_stored(thread_id)
        return "exit" if stored else "sync"

    def forget_stored(self, thread_id: str | None) -> None:
        """A thread's conversation was deleted (None: a server's, threads unknown): its next turn here is a
        first turn again and writes before the model call (see ``_durability``)."""
        if thread_id is None:
            self._stored.clear()
        else:
            self._stored.pop(thread_id, None)

    def _remember_stored(self, thread_id: str) -> None:
        self._stored[thread_id] = None
        self._stored.move_to_end(thread_id)
        while len(self._stored) > KNOWN_THREADS:
            self._stored.popitem(last=False)

    async def _read_state(self, thread_id: str) -> dict:
        snapshot = await self.graph.aget_state({"configurable": {"thread_id": thread_id}})
        return dict(snapshot.values)

    async def _human_messages(self, thread_id: str,
                              incoming: list[Incoming]) -> tuple[list[HumanMessage], set[str], bool]:
        """The turn's messages for the thread, and the Discord IDs of those already waiting unanswered there
        (a turn restarted to take in follow-ups): their stored message is replaced, not added twice; and
        whether any of those stored texts differs from the new one (an edit restarted the turn)."""
        waiting: dict[str, BaseMessage] = {}  # Discord message ID -> its stored message
        if len(incoming) > 1 or not incoming[0].answer or incoming[0].again:
            stored = (await self._read_state(thread_id)).get("messages", [])
            for m in stored[pending_start(stored):]:
                if m.additional_kwargs.get("message_id"):
                    waiting[str(m.additional_kwargs["message_id"])] = m
        rewritten = any(i.speaker.message_id in waiting and waiting[i.speaker.message_id].content != i.text
                        for i in incoming)
        out = []
        for item in incoming:
            sp = item.speaker
            meta = {"author_id": sp.user_id, "author_name": sp.name, "message_id": sp.message_id,
                    "guild_id": sp.guild_id}
            if sp.sent_at:  # the reply's "now" for time words (recall's reply_time), not the clock at reply
                meta["sent_at"] = sp.sent_at
            if sp.parent_id:  # a thread's channel, for a thread only heard (no answer wrote the state's)
                meta["parent_id"] = sp.parent_id
            if not item.answer:  # stored without an answer (a limit): a later answer to someone else is not its
                meta["heard"] = True
            out.append(HumanMessage(
                content=item.text,
                # IDs given here, not by the graph: a turn that fails knows which messages were its own
                id=waiting[sp.message_id].id if sp.message_id in waiting else str(uuid.uuid4()),
                additional_kwargs=meta,
            ))
        return out, {i.speaker.message_id for i in incoming if i.speaker.message_id in waiting}, rewritten

    async def _run(self, turn: _Turn) -> None:
        tickets = self._open_tickets(turn.incoming)  # an erasure from now on means: don't learn from that person
        try:
            await self._run_locked(turn, tickets)
        except BaseException as exc:  # the channel's lock could not be taken (the database is away)
            if not turn.answered.done():  # the caller waits for an answer: it gets the failure instead
                turn.answered.cancel() if isinstance(exc, asyncio.CancelledError) else turn.answered.set_exception(exc)
            elif isinstance(exc, Exception):  # after the answer (its prune, a debt): nobody else hears of it
                log.error("the end of a turn in thread %s failed: %r", turn.thread_id, exc, exc_info=exc)
            if not isinstance(exc, Exception):  # handed to the caller; a cancel or an exit goes on
                raise
        finally:
            try:
                if turn.taken is None:  # (asked already when the turn took them back under its lock)
                    await self._mark_erased_elsewhere(tickets)
            finally:
                await self._forget_erased(turn.thread_id, turn.incoming, tickets, turn.taken or NOTHING_TAKEN)

    @staticmethod
    def _erased_ids(incoming: list[Incoming], tickets: dict) -> set[str]:
        return {i.speaker.message_id for i in incoming if tickets[i.speaker.user_id].erased and i.speaker.message_id}

    @staticmethod
    def _erased_people(incoming: list[Incoming], tickets: dict) -> set[str]:
        return {i.speaker.user_id for i in incoming if tickets[i.speaker.user_id].erased}

    async def _take_back_held(self, thread_id: str, incoming: list[Incoming], tickets: dict) -> TakenBack:
        """Before the turn lets the channel go: the messages of people erased while it ran leave the thread
        now, so the turn waiting next (here or in another process) never reads them, nor repeats them in an
        answer the erasure's quote rule, read before this turn wrote them, would not cut. Only the thread:
        their answers' queued copies need people's holds, which come before a channel in the global order
        (``_forget_erased`` does the rest once the lock is released, and all of it if this is cut short)."""
        try:
            await self._mark_erased_elsewhere(tickets)
            gone = self._erased_ids(incoming, tickets)
            if not gone or self._drop_held is None:
                return NOTHING_TAKEN
            return await self._drop_held(thread_id, gone, self._erased_people(incoming, tickets))
        except Exception:  # noqa: BLE001 - the database went away: ``_forget_erased`` tries again after
            log.warning("taking an erased person's messages back out of thread %s failed; tried again after",
                        thread_id, exc_info=True)
            return NOTHING_TAKEN

    async def _forget_erased(self, thread_id: str, incoming: list[Incoming], tickets: dict,
                             taken: TakenBack = NOTHING_TAKEN) -> None:
        """Take the messages of people erased while the turn ran (or started) back out of the thread.

        The erasure may have passed this thread before the turn stored them; nothing of theirs from this
        turn is kept after "Done" (the answers to them go too, and those answers' copies in the learning
        queue). After the channel lock: it is taken again, to find what ``_take_back_held`` did not.
        """
        gone = self._erased_ids(incoming, tickets)
        if gone and self._drop_messages is not None:
            await asyncio.shield(self._drop_messages(thread_id, gone, self._erased_people(incoming, tickets), taken))

    async def _run_locked(self, turn: _Turn, tickets: dict) -> None:
        # The unit of work starts once the channel is ours: waiting for it holds nothing of storage's.
        async with self.locks.channel(turn.thread_id), self.scopes.turn():
            # Asked once the channel is the turn's, not before: a wipe that began while the turn waited
            # behind another (here or in another process) waits for this one before it reaches the
            # person's memories, which must then not be read.
            await self._mark_erased_elsewhere(tickets)
            if tickets[turn.speaker.user_id].erased:  # being erased right now: their memories are going
                turn.speaker = replace(turn.speaker, visibility=replace(turn.speaker.policy, use_memories=False),
                                       memories_going=True)
            try:
                try:
                    await self._stream(turn, tickets)
                except BaseException as exc:  # noqa: BLE001 - handed to the caller, or logged
                    unanswered = not turn.answered.done()
                    self._after_failure(turn, exc)
                    if not isinstance(exc, Exception):
                        raise
                    if unanswered:
                        await self._set_aside(turn)
                if not turn.answered.done():  # pragma: no cover - the graph always runs respond
                    turn.answered.set_exception(RuntimeError("the graph produced no reply"))
                # A restarted turn stored its messages over their earlier text (an edit while it was answered:
                # the cancelled run wrote the old words as it ended). Superseded checkpoints still hold them:
                # prune now, not up to PRUNE_EVERY turns later (a quiet thread might never get there).
                await self._maybe_prune(turn.thread_id, now=turn.replaced)
                if turn.replaced:
                    await self._owe()
            finally:  # a cancelled run wrote its messages as it ended: they go before the next turn's too
                turn.taken = await self._take_back_held(turn.thread_id, turn.incoming, tickets)

    async def _set_aside(self, turn: _Turn) -> None:
        """A turn that failed before its answer (the model down, the deadline, an empty answer): its messages,
        which the run stored as it ended, stay as context but are marked answered. The person got an
        apology; left waiting, they were answered again by the next turn in the channel, someone else's,
        whose answer then went with them (deleting the failed message took that answer out too)."""
        if not turn.stored:
            return
        try:
            messages = (await self._read_state(turn.thread_id)).get("messages", [])
            marked = [marked_answered(m) for m in messages[pending_start(messages):]
                      if isinstance(m, HumanMessage) and m.id in turn.stored]
            if marked:
                await self.graph.aupdate_state({"configurable": {"thread_id": turn.thread_id}},
                                               {"messages": marked}, as_node="summarize")
        except Exception as exc:  # noqa: BLE001 - the database is what failed: the messages wait as before
            log.debug("could not set aside the failed turn's messages in thread %s: %r", turn.thread_id, exc)

    async def _owe(self) -> None:
        """A compaction, owed durably: the edited-away words are on disk until it runs."""
        if self._owe_compaction is not None:
            await self._owe_compaction()

    async def _stream(self, turn: _Turn, tickets: dict) -> None:
        """Run the graph, streaming the answer to ``on_delta``; the answer is handed out once it exists.

        Checkpoints: the run stops after ``respond`` (``interrupt_after``) and writes its checkpoint once,
        as it stops (``durability="exit"``), in the turn's tail after the answer is handed out; when the
        thread needs a summary, the run is resumed for ``summarize`` and writes once more. LangGraph's
        default writes the turn's messages before the model call and the graph's steps before the answer
        too: three checkpoints a turn, and on PostgreSQL three commits a person waits for. A run that fails
        or is cancelled writes what it has as it ends (the turn's messages stay in the thread). What this
        gives up: a process killed while the model is answering loses that unanswered message from the
        thread (docs/decisions.md); the learning queue is written before the answer, as before.
        """
        config = {"configurable": {"thread_id": turn.thread_id}, "callbacks": [self.observer]}
        streamed = ""
        summarize = False
        later = Later(*self.owed, failed=self._usage_failed)
        token = AFTER_ANSWER.set(later)
        try:
            async with asyncio.timeout(None) as clock:
                if turn.timeout is not None:
                    clock.reschedule(asyncio.get_running_loop().time() + turn.timeout)
                messages, again, turn.replaced = await self._human_messages(turn.thread_id, turn.incoming)
                turn.stored = frozenset(m.id for m in messages)
                durability = await self._durability(turn.thread_id)
                # Closed here, not by the garbage collector: when this loop's body raises (a learning-queue
                # insert in an outage, the caller's stream callback), the run's one checkpoint is written as
                # the stream closes, and that must happen before the channel is released to the next turn.
                run = self.graph.astream(
                    {"messages": messages}, config, context=turn.speaker, durability=durability,
                    interrupt_after=["respond"], stream_mode=["updates", "messages", "custom"])
                async with contextlib.aclosing(run) as stream:
                    async for mode, chunk in stream:
                        if mode == "custom":
                            summarize = summarize or bool(isinstance(chunk, dict) and chunk.get("summarize"))
                            continue
                        if mode == "messages":
                            piece, meta = chunk
                            if turn.on_delta and meta.get("langgraph_node") == "respond" and piece.text:
                                streamed += piece.text
                                if shown := said(streamed):  # (inline reasoning is never previewed)
                                    turn.on_delta(shown)
                            continue
                        if "respond" in chunk:
                            clock.reschedule(None)  # answered: the summary after it is on nobody's clock
                            ai: AIMessage = chunk["respond"]["messages"][-1]
                            if turn.learning:  # the server's admins may have turned learning off there
                                await self._queue_for_learning(turn.thread_id, turn.incoming, ai.text, tickets,
                                                               again=again)
                            if not turn.answered.done():  # the caller may have given up waiting
                                turn.answered.set_result(Reply(text=ai.text, message_id=ai.id or ""))
                if durability == "sync":  # its first checkpoint is written now (later turns: already noted)
                    self._remember_stored(turn.thread_id)
                await later.run()  # the answer's usage
                if summarize:  # resumes the run where it stopped: summarize, then one more checkpoint
                    await self._summarize(turn, config)
        finally:
            AFTER_ANSWER.reset(token)
            if later:  # usage of calls made before a failure (the summary's, or the answer's if its turn failed)
                await asyncio.shield(later.run())

    async def _summarize(self, turn: _Turn, config: dict) -> None:
        """The summary after an answer, within the turn's own deadline: it still holds the channel, so the
        next member's turn waits for it. A model that keeps a slow call open (keep-alive lines reset the
        client's timeout) or asks to retry in a minute froze the channel with "typing" shown; past the
        deadline the summary is dropped, and tried again after a later answer."""
        try:
            async with asyncio.timeout(turn.timeout):
                await self.graph.ainvoke(None, config, context=turn.speaker, durability="exit")
        except TimeoutError:
            log.warning("the summary of thread %s took longer than %s s: dropped, tried again later",
                        turn.thread_id, turn.timeout)

    def _usage_failed(self, exc: BaseException) -> None:
        """A usage record left for after the answer failed: an outage is reported once, by the storage
        (``Outages``), so it is quiet here; anything else is a bug worth its traceback."""
        if self.outages.storage(exc):
            log.debug("usage not recorded: the database is unreachable (%s)", type(exc).__name__)
        else:
            log.error("recording usage failed", exc_info=exc)

    def _after_failure(self, turn: _Turn, exc: BaseException) -> None:
        if not turn.answered.done():
            turn.answered.set_exception(exc)
        elif isinstance(exc, asyncio.CancelledError):
            log.debug("turn in thread %s cancelled: the caller stopped waiting", turn.thread_id)
        elif self.outages.storage(exc):  # the outage is logged once, by storage
            log.debug("finishing turn in thread %s waits for the database: %r", turn.thread_id, exc)
        else:
            log.exception("finishing turn in thread %s failed after the reply", turn.thread_id)

    async def _maybe_prune(self, thread_id: str, *, now: bool = False) -> None:
        """Prune a thread's old checkpoints every ``PRUNE_EVERY`` turns: bounded, without a write per turn
        (``now``: this turn, whatever the count)."""
        turns = self._turns_since_prune.pop(thread_id, 0) + 1
        if turns < PRUNE_EVERY and not now:
            if len(self._turns_since_prune) < MAX_PRUNE_COUNTERS:
                self._turns_since_prune[thread_id] = turns
            return
        try:
            await self.maintenance.prune_thread(thread_id)
        except Exception as exc:  # noqa: BLE001 - pruning is housekeeping; a later turn tries again
            if self.outages.storage(exc):  # the outage is logged once, by storage
                log.debug("pruning thread %s waits for the database: %r", thread_id, exc)
            else:
                log.exception("pruning thread %s failed", thread_id)

    def _open_tickets(self, incoming: list[Incoming], *, with_task: bool = True) -> dict:
        """One in-flight ticket per author of the turn, closed when the current task ends (``with_task``;
        else the caller closes them)."""
        tickets = {sp: self.inflight.open(sp) for sp in dict.fromkeys(m.speaker.user_id for m in incoming)}
        if not with_task:
            return tickets

        def close(_task: asyncio.Task) -> None:
            for ticket in tickets.values():
                self.inflight.close(ticket)

        asyncio.current_task().add_done_callback(close)
        return tickets

    async def _queue_for_learning(self, thread_id: str, incoming: list[Incoming], ai: str | None,
                                  tickets: dict, *, again: set[str] = frozenset()) -> None:
        """Record a turn's messages for background extraction (before the reply is handed out).

        One inbox row per message, under its own author: the bot's answer goes with the last message it
        answers (the others carry none). People erased since the turn started are left out, and so are
        people who paused learning (the inbox checks the pause in the same statement as the insert:
        ``Inbox.record``). A message ``again`` (already in the thread: its earlier answer was written
        just as a follow-up restarted the turn) that is already queued is not queued twice: each message
        is learned from exactly once.
        """
        last_answered = max((i for i, m in enumerate(incoming) if m.answer), default=len(incoming) - 1)
        queued = await self._already_queued(thread_id, incoming, again)
        counts: dict[str, tuple[int, str]] = {}
        for i, item in enumerate(incoming):
            sp = item.speaker
            if (sp.user_id, sp.message_id) in queued:
                continue
            if tickets[sp.user_id].erased or sp.message_id in self.not_learned:
                continue
            try:
                count = await self.inbox.record(
                    thread_id=thread_id, user_id=sp.user_id, author=sp.name, human=item.text,
                    ai=(ai or "") if i == last_answered and ai is not None else "", origin=sp.origin(),
                )
                if count:
                    counts[sp.user_id] = (count, sp.guild_id)
            except Exception as exc:  # noqa: BLE001 - the reply still goes out; the log says what was not recorded
                if self.outages.storage(exc):
                    raise  # the database is down: the person gets the apology, not an answer never learned from
                log.exception("could not record a turn for memory extraction in thread %s", thread_id)
        for user_id, (count, scope) in counts.items():
            self.scheduler.notify(thread_id, user_id, count, scope=scope)

    async def _already_queued(self, thread_id: str, incoming: list[Incoming], again: set[str]) -> set[tuple[str, str]]:
        """(person, message ID) of the messages ``again`` that wait in the learning queue already.

        Read only for a restarted turn (``again`` empty otherwise: no extra read on the usual path).
        """
        found: set[tuple[str, str]] = set()
        for user_id in dict.fromkeys(i.speaker.user_id for i in incoming if i.speaker.message_id in again):
            _, pending = await self.inbox.batch(thread_id, user_id, 0)
            found |= {(user_id, str(t.origin.get("message_id"))) for t in pending if t.origin.get("message_id")}
        return found
