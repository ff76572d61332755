"""The engine's front door: one object the Discord cogs and the console both talk to.

``reply()`` runs the chat graph for one message and returns as soon as ``respond`` has produced the
answer; summarizing and recording the turn for memory extraction continue in the background while the
thread stays locked, so messages in one thread are handled one at a time, in arrival order, and different
threads run concurrently.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace
from typing import Callable

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.graph.state import CompiledStateGraph

from bot.engine.concurrency import InflightTurns, RateLimiter
from bot.engine.erasure.conversations import ConversationEraser
from bot.engine.erasure.events import DiscordChanges
from bot.engine.erasure.eraser import Eraser, ErasureResult
from bot.engine.learning.extraction import MemoryWriter, WriteRequest
from bot.engine.conversation.graph import ChatDeps, build_chat_graph, build_memory_graph, pending_start
from bot.engine.policy.server_settings import GuildPolicy, GuildSettingsService, OperatorDefaults
from bot.engine.memories.records import Actor, MemoryRepository
from bot.engine.locking import Locks
from bot.engine.learning.scheduler import ExtractionScheduler, OnChange
from bot.engine.recall import SemanticIndex
from bot.engine.recall.embedders import LocalMiniLM
from bot.engine.state import Incoming, Speaker
from bot.engine.stores import Storage
from bot.engine.policy.visibility import resolve_visibility
from bot.metrics import Backlog, Metrics
from bot.settings import Settings

log = logging.getLogger(__name__)

DeltaCallback = Callable[[str], None]
PRUNE_EVERY = 8
ERASURE_POLL_SECONDS = 2.0  # how often the journal is checked for wipes requested by another process  # a thread keeps at most this many superseded checkpoints between prunes


@dataclass(frozen=True)
class Reply:
    """The answer to one message."""

    text: str
    message_id: str = ""  # the answer's ID in the thread (see ChatEngine.attach_sent)


def _usage(message: BaseMessage) -> tuple[int, int]:
    meta = getattr(message, "usage_metadata", None) or {}
    return int(meta.get("input_tokens", 0)), int(meta.get("output_tokens", 0))


class ChatEngine:
    """Conversation + memory engine over injected storage and models."""

    def __init__(
        self,
        *,
        settings: Settings,
        storage: Storage,
        chat_model,
        memory_model=None,
        on_memory_change: OnChange | None = None,
        embeddings=None,
        metrics: Metrics | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics if metrics is not None else Metrics()
        self._chat_observer = self.metrics.observer()
        self.storage = storage
        self.store = storage.store
        self.checkpointer = storage.checkpointer
        self.inbox = storage.inbox
        self.prefs = storage.prefs
        self.usage = storage.usage
        self.memories = MemoryRepository(self.store)
        self.guild_settings = GuildSettingsService(
            storage.guild_settings,
            OperatorDefaults.from_settings(settings),
            cache_seconds=settings.server_settings.cache_seconds,
        )
        self.limiter = asyncio.Semaphore(settings.model.max_concurrent_calls)
        conv, mem = settings.conversation, settings.memory
        self.embeddings = embeddings
        self.semantic = SemanticIndex(embeddings, storage.vectors) if embeddings is not None else None
        self.chat_deps = ChatDeps(
            model=chat_model,
            persona=settings.bot.persona,
            memory_budget_tokens=mem.prompt_budget_tokens,
            summarize_after_messages=conv.summarize_after_messages,
            summarize_after_tokens=conv.summarize_after_tokens,
            keep_messages=conv.keep_messages,
            limiter=self.limiter,
            on_usage=self._record_usage,
            semantic=self.semantic,
        )
        self.graph: CompiledStateGraph = build_chat_graph(self.chat_deps).compile(
            checkpointer=self.checkpointer, store=self.store
        )
        self.writer = MemoryWriter(
            memory_model or chat_model,
            max_existing=mem.extraction_max_existing,
            limiter=self.limiter,
            on_usage=self._record_extraction_usage,
            callbacks=[self.metrics.observer("extraction")],
        )
        self.memory_graph: CompiledStateGraph = build_memory_graph(self.writer).compile(store=self.store)
        self.locks = Locks(storage.locks)  # every lock the engine takes (bot.engine.locking)
        self.scheduler = ExtractionScheduler(
            self.inbox,
            self._write,
            quiet_seconds=mem.extraction_quiet_seconds,
            after_messages=mem.extraction_after_messages,
            context_turns=mem.extraction_context_messages,
            on_change=on_memory_change,
            applied_up_to=self.memories.watermark,
            storage_errors=storage.transient_errors,
            locks=self.locks,
        )
        self._tails: set[asyncio.Task] = set()
        self._turns_since_prune: dict[str, int] = {}
        self._started = False
        self._journal_watch: asyncio.Task | None = None
        self._usage_pruned_on = ""
        self._inflight = InflightTurns()
        # /memories remember and import, per person per hour: bounded like every map keyed by person.
        self.memory_commands: RateLimiter[str] = RateLimiter(settings.limits.memory_commands_per_hour, 3600.0)
        self.conversations = ConversationEraser(self.graph, self.checkpointer, self.locks.channel,
                                                storage.maintenance.prune_thread)
        self.eraser = Eraser(storage, self.conversations, hold=self.scheduler.hold, on_erase=self._inflight.mark_erased)
        self.changes = DiscordChanges(storage=storage, conversations=self.conversations, eraser=self.eraser,
                                      scheduler=self.scheduler, thread_state=self.thread_state,
                                      removed_server_days=settings.retention.removed_server_days,
                                      forget_settings=self.guild_settings.forget)

    async def start(self) -> None:
        """Finish erasures and resume pending memory work left by a previous run; watch for wipe requests;
        sweep servers the bot was removed from.

        Erasures come first, so nothing of an erased person is learned from on the way back up.
        """
        self._started = True
        await self.eraser.resume()
        await self.prune_usage()
        if isinstance(self.embeddings, LocalMiniLM):
            # Load the embedded model in the background now, so no reply waits for it.
            self._warming = asyncio.create_task(self.embeddings.warm(), name="load-embedding-model")
            self._warming.add_done_callback(_log_failure)
        await self.scheduler.start()
        self.changes.start()
        self._journal_watch = asyncio.create_task(self._watch_erasure_requests(), name="erasure-requests")

    async def _watch_erasure_requests(self) -> None:
        """Do the wipes other processes recorded, and retry erasures that failed here.

        ``python -m bot memories wipe`` cannot erase safely beside a running bot (an extraction in flight
        would write back what it erased), so it records the request in the journal and this process does
        it, under the same per-person hold as any other erasure.
        """
        while True:
            await asyncio.sleep(ERASURE_POLL_SECONDS)
            try:
                await self.eraser.resume()
            except self.storage.transient_errors as exc:  # the outage is logged once, by storage
                log.debug("checking the erasure journal waits for the database: %r", exc)
            except Exception:  # noqa: BLE001 - reading the journal failed; the next round tries again
                log.exception("checking the erasure journal failed")

    async def prune_usage(self) -> int:
        """Drop usage counts older than ``limits.usage_retention_days`` (at start-up and once a day)."""
        today = time.strftime("%Y-%m-%d", time.gmtime())
        self._usage_pruned_on = today
        cutoff = time.strftime("%Y-%m-%d", time.gmtime(time.time() - 86400 * self.settings.limits.usage_retention_days))
        try:
            return await self.usage.prune(cutoff)
        except Exception:  # noqa: BLE001 - housekeeping; tomorrow tries again
            log.exception("pruning old usage counts failed")
            return 0

    async def close(self) -> None:
        """Finish in-flight turns, then flush pending memory extraction (if this engine was started)."""
        await self.changes.close()
        if self._tails:
            await asyncio.gather(*self._tails, return_exceptions=True)
        if self._journal_watch is not None:
            self._journal_watch.cancel()
            await asyncio.gather(self._journal_watch, return_exceptions=True)
        if self._started:
            await self.scheduler.close()
        if self.semantic is not None:
            await self.semantic.drain()

    async def reply(
        self,
        thread_id: str,
        speaker: Speaker,
        text: str,
        *,
        on_delta: DeltaCallback | None = None,
        timeout: float | None = None,
        policy: GuildPolicy | None = None,
    ) -> Reply:
        """Answer ``text`` from ``speaker`` in ``thread_id`` (one message; see :meth:`reply_to`)."""
        return await self.reply_to(thread_id, [Incoming(speaker, text)], on_delta=on_delta, timeout=timeout,
                                   policy=policy)

    async def reply_to(
        self,
        thread_id: str,
        incoming: list[Incoming],
        *,
        on_delta: DeltaCallback | None = None,
        timeout: float | None = None,
        policy: GuildPolicy | None = None,
    ) -> Reply:
        """Answer the messages of one turn together, with one model call, as the last answered speaker.

        ``incoming`` is in arrival order; the model sees every message under its own author's header. The
        answer is addressed to the author of the last message with ``answer`` set (their memories, their
        place); messages without it were heard over a limit and are part of the conversation all the same.
        A message whose ``message_id`` is already waiting unanswered in the thread (a turn restarted to
        take in follow-ups) replaces it instead of being added twice.

        Returns once the answer exists; raises the model's exception if it failed, in which case the
        thread keeps the messages and stays usable. ``on_delta`` receives the text so far while the model
        streams. ``timeout`` bounds the wait for the answer from the moment this turn starts (earlier
        turns of the thread are answered first and are not on its clock); past it the model call is
        cancelled and ``TimeoutError`` is raised. ``policy`` is the server's effective settings as the
        caller resolved them for this message (looked up when not given).
        """
        if not incoming:
            raise ValueError("a turn needs at least one message")
        timer = self.metrics.reply_timer()
        answering = next((m.speaker for m in reversed(incoming) if m.answer), incoming[-1].speaker)
        policy = policy or await self.guild_policy(answering.guild_id)
        prefs = await self.prefs.get(answering.user_id)
        visibility = resolve_visibility(prefs, self.settings.memory, answering.guild_id)
        if not policy.use_memories:  # the server's admins keep memories out of replies there
            visibility = replace(visibility, use_memories=False)
        speaker = replace(answering, visibility=visibility, persona_addition=policy.persona_addition,
                          memories_off_here=not policy.use_memories)
        speaker = replace(speaker, quotes=await self._shown_quotes(speaker))
        lock = self.locks.channel(thread_id)  # entered by the turn's task: FIFO in the order messages came
        answered: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(
            self._turn(lock, thread_id, speaker, incoming, answered, timer.wrap(on_delta), policy.learning, timeout)
        )
        self._tails.add(task)
        task.add_done_callback(self._tails.discard)
        try:
            reply = await answered
        except asyncio.CancelledError:
            # The caller gave up (its deadline passed, or it restarts the turn with follow-ups): stop the
            # model call too, so the thread never keeps an answer nobody saw. The messages stay in the
            # thread; the thread stays usable.
            task.cancel()
            if answered.done() and not answered.cancelled() and answered.exception() is None:
                # The answer was written just as the caller gave up: take it back out of the thread.
                unseen = asyncio.create_task(self.conversations.drop_answer(thread_id, answered.result().message_id))
                self._tails.add(unseen)
                unseen.add_done_callback(self._tails.discard)
            raise
        except Exception as exc:
            timer.failed(exc)
            raise
        timer.answered()
        self.metrics.note_channel(thread_id)
        return reply

    async def hear(self, thread_id: str, incoming: list[Incoming]) -> None:
        """Record messages in the conversation without answering them (a rate limit or a full queue).

        They are in the thread for the next answer and queued for learning like any other message (where
        the server allows learning), so what someone said over a limit is never lost; no model is called.
        """
        if not incoming:
            return
        learning = (await self.guild_policy(incoming[-1].speaker.guild_id)).learning
        tickets = self._open_tickets(incoming)
        async with self.locks.channel(thread_id):
            messages = await self._human_messages(thread_id, incoming)
            config = {"configurable": {"thread_id": thread_id}}
            await self.graph.aupdate_state(config, {"messages": messages}, as_node="summarize")  # routes to END
            if learning:
                await self._queue_for_learning(thread_id, incoming, None, tickets)
            await self._maybe_prune(thread_id)  # a flood of heard messages must not pile up checkpoints

    async def _shown_quotes(self, speaker: Speaker) -> tuple:
        """Context quotes minus those of people in private mode (their words are not used for others)."""
        shown = []
        for q in speaker.quotes:
            if q.author_id != speaker.user_id and not q.is_bot and (await self.prefs.get(q.author_id)).private:
                continue
            shown.append(q)
        return tuple(shown)

    async def _human_messages(self, thread_id: str, incoming: list[Incoming]) -> list[HumanMessage]:
        """The turn's messages for the thread; IDs reused for messages already waiting unanswered there."""
        waiting: dict[str, str] = {}
        if len(incoming) > 1 or not incoming[0].answer:
            snapshot = await self.graph.aget_state({"configurable": {"thread_id": thread_id}})
            stored = (snapshot.values or {}).get("messages", [])
            for m in stored[pending_start(stored):]:
                if m.additional_kwargs.get("message_id"):
                    waiting[str(m.additional_kwargs["message_id"])] = m.id
        out = []
        for item in incoming:
            sp = item.speaker
            out.append(HumanMessage(
                content=item.text,
                id=waiting.get(sp.message_id) if sp.message_id else None,
                additional_kwargs={
                    "author_id": sp.user_id,
                    "author_name": sp.name,
                    "message_id": sp.message_id,
                    "guild_id": sp.guild_id,
                },
            ))
        return out

    async def _turn(self, lock, thread_id, speaker, incoming, answered, on_delta, learning: bool, timeout) -> None:
        config = {"configurable": {"thread_id": thread_id}, "callbacks": [self._chat_observer]}
        tickets = self._open_tickets(incoming)  # an erasure from now on means: don't learn from that person
        async with lock:
            streamed = ""
            try:
                async with asyncio.timeout(None) as clock:
                    if timeout is not None:
                        clock.reschedule(asyncio.get_running_loop().time() + timeout)
                    messages = await self._human_messages(thread_id, incoming)
                    async for mode, chunk in self.graph.astream(
                        {"messages": messages}, config, context=speaker, stream_mode=["updates", "messages"]
                    ):
                        if mode == "messages":
                            piece, meta = chunk
                            if on_delta and meta.get("langgraph_node") == "respond" and piece.text:
                                streamed += piece.text
                                on_delta(streamed)
                            continue
                        if "respond" in chunk:
                            clock.reschedule(None)  # answered: the summary after it is on nobody's clock
                            ai: AIMessage = chunk["respond"]["messages"][-1]
                            if learning:  # the server's admins may have turned learning off there
                                await self._queue_for_learning(thread_id, incoming, ai.text, tickets)
                            if not answered.done():  # the caller may have given up waiting
                                answered.set_result(Reply(text=ai.text, message_id=ai.id or ""))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, or logged
                if not answered.done():
                    answered.set_exception(exc)
                elif isinstance(exc, asyncio.CancelledError):
                    log.debug("turn in thread %s cancelled: the caller stopped waiting", thread_id)
                elif isinstance(exc, self.storage.transient_errors):  # the outage is logged once, by storage
                    log.debug("finishing turn in thread %s waits for the database: %r", thread_id, exc)
                else:
                    log.exception("finishing turn in thread %s failed after the reply", thread_id)
                if not isinstance(exc, Exception):
                    raise
            if not answered.done():  # pragma: no cover - the graph always runs respond
                answered.set_exception(RuntimeError("the graph produced no reply"))
            await self._maybe_prune(thread_id)

    async def _maybe_prune(self, thread_id: str) -> None:
        """Prune a thread's old checkpoints every ``PRUNE_EVERY`` turns: bounded, without a write per turn."""
        turns = self._turns_since_prune.pop(thread_id, 0) + 1
        if turns < PRUNE_EVERY:
            if len(self._turns_since_prune) < 100_000:
                self._turns_since_prune[thread_id] = turns
            return
        try:
            await self.storage.maintenance.prune_thread(thread_id)
        except self.storage.transient_errors as exc:  # the outage is logged once, by storage
            log.debug("pruning thread %s waits for the database: %r", thread_id, exc)
        except Exception:  # noqa: BLE001 - pruning is housekeeping; a later turn tries again
            log.exception("pruning thread %s failed", thread_id)

    def _open_tickets(self, incoming: list[Incoming]) -> dict[str, "_Ticket"]:
        """One in-flight ticket per author of the turn, closed when the current task ends."""
        tickets = {sp: self._inflight.open(sp) for sp in dict.fromkeys(m.speaker.user_id for m in incoming)}

        def close(_task) -> None:
            for ticket in tickets.values():
                self._inflight.close(ticket)

        asyncio.current_task().add_done_callback(close)
        return tickets

    async def _queue_for_learning(
        self, thread_id: str, incoming: list[Incoming], ai: str | None, tickets: dict[str, "_Ticket"]
    ) -> None:
        """Record a turn's messages for background extraction (before the reply is handed out).

        One inbox row per message, under its own author: the bot's answer goes with the last message it
        answers (the others carry none). People who paused learning, or were erased since the turn
        started, are left out.
        """
        last_answered = max((i for i, m in enumerate(incoming) if m.answer), default=len(incoming) - 1)
        counts: dict[str, tuple[int, str]] = {}
        for i, item in enumerate(incoming):
            sp = item.speaker
            if tickets[sp.user_id].erased:
                continue
            if (await self.prefs.get(sp.user_id)).paused:
                continue
            try:
                count = await self.inbox.record(
                    thread_id=thread_id,
                    user_id=sp.user_id,
                    author=sp.name,
                    human=item.text,
                    ai=(ai or "") if i == last_answered and ai is not None else "",
                    origin=sp.origin(),
                )
                counts[sp.user_id] = (count, sp.guild_id)
            except self.storage.transient_errors:
                raise  # the database is down: the person gets the apology, not an answer never learned from
            except Exception:  # noqa: BLE001 - the reply still goes out; the log says what was not recorded
                log.exception("could not record a turn for memory extraction in thread %s", thread_id)
        for user_id, (count, scope) in counts.items():
            self.scheduler.notify(thread_id, user_id, count, scope=scope)

    async def _write(self, request: WriteRequest) -> dict:
        prefs = await self.prefs.get(request.user_id)
        if prefs.paused:  # paused after these turns were queued: they are dropped, not learned
            return {}
        place = str(request.origin.get("guild_id", "dm"))
        if not (await self.guild_policy(place)).learning:
            return {}  # the server turned learning off after these turns were queued: dropped too
        request = replace(request, visibility=resolve_visibility(prefs, self.settings.memory, place, for_reply=False),
                          max_memories=self.settings.memory.max_per_person)
        result = await self.memory_graph.ainvoke({"request": request})
        changes = result["changes"]
        if self.semantic is not None and (changes.get("inserted") or changes.get("updated")):
            # Memory vectors are made at write time, off the reply path.
            user = request.user_id
            self.semantic.index_later(user, lambda: self.memories.list(user))
        return changes

    async def _record_usage(self, speaker: Speaker, message: BaseMessage) -> None:
        p, c = _usage(message)
        await self.usage.record(speaker.guild_id, speaker.user_id, p, c)
        if self._usage_pruned_on != time.strftime("%Y-%m-%d", time.gmtime()):  # a new UTC day
            await self.prune_usage()

    async def _record_extraction_usage(self, request: WriteRequest, message: BaseMessage) -> None:
        p, c = _usage(message)
        if p or c:
            await self.usage.record(str(request.origin.get("guild_id", "dm")), request.user_id, p, c)

    async def tokens_today(self, guild_id: str, user_id: str | None = None) -> int:
        """Tokens used today (UTC) in a server (or by one person there, or in DMs)."""
        return await self.usage.tokens_today(guild_id, user_id)

    async def guild_policy(self, guild_id: str | int | None) -> GuildPolicy:
        """A server's effective settings (``"dm"``/None: DMs), cached; see ``bot.engine.policy.server_settings``."""
        return await self.guild_settings.policy(guild_id)

    async def budget_exhausted(self, speaker: Speaker, policy: GuildPolicy | None = None) -> str | None:
        """The budget bucket (a server, a member there, or a person's DMs) with no tokens left today, if any.

        A server's budgets are its admins' choice within the operator's caps (``policy``).
        """
        limits = self.settings.limits
        if speaker.in_dm:
            if limits.dm_daily_tokens and await self.usage.tokens_today("dm", speaker.user_id) >= limits.dm_daily_tokens:
                return f"dm:{speaker.user_id}"
            return None
        policy = policy or await self.guild_policy(speaker.guild_id)
        if policy.daily_tokens and await self.usage.tokens_today(speaker.guild_id) >= policy.daily_tokens:
            return f"guild:{speaker.guild_id}"
        member = policy.member_daily_tokens
        if member and await self.usage.tokens_today(speaker.guild_id, speaker.user_id) >= member:
            return f"member:{speaker.guild_id}:{speaker.user_id}"
        return None

    def idle(self) -> bool:
        """No erasure running (turns are the Discord side's to report)."""
        return self.eraser.active == 0 and self.changes.active == 0

    async def erase_person(
        self, user_id: str | int, *, guild_id: str | None = None, by: Actor | None = None
    ) -> ErasureResult:
        """Erase everything held about a person (or what was learned in one server); see bot.engine.erasure.eraser.

        A turn of theirs already in flight finishes first (erasing a thread takes its lock) and is not
        queued for learning (it started before the erasure).
        """
        if self.semantic is None:
            result = await self.eraser.erase_person(user_id, guild_id=guild_id, by=by)
        else:
            async with self.semantic.paused(str(user_id)):  # no memory vectors written while it runs
                result = await self.eraser.erase_person(user_id, guild_id=guild_id, by=by)
        self.metrics.erasure("person" if guild_id is None else "server")
        return result

    async def learning_backlog(self) -> Backlog:
        """Turns waiting to be learned from (in every process sharing this storage), and the oldest's age."""
        pending = await self.inbox.pending()
        if not pending:
            return Backlog(turns=0, oldest_age_seconds=0.0)
        oldest = min(p.last_created for p in pending)
        return Backlog(turns=sum(p.count for p in pending), oldest_age_seconds=time.time() - oldest)

    async def storage_answers(self) -> bool:
        """Whether the databases answer a read right now (the health check's storage half)."""
        await self.store.aget(("health",), "ping")
        await self.usage.tokens_today("health")
        return True

    async def sample_backlog(self) -> None:
        """Refresh the backlog gauges from storage (run before each metrics scrape)."""
        self.metrics.set_backlog(await self.learning_backlog())

    async def attach_sent(self, thread_id: str, reply: Reply, discord_ids: list[str]) -> None:
        """Remember which Discord messages carry ``reply``, so a moderator deleting one removes it."""
        await self.conversations.attach_sent(thread_id, reply.message_id, discord_ids)

    async def thread_state(self, thread_id: str) -> dict:
        """The thread's current state values (messages, summary)."""
        snapshot = await self.graph.aget_state({"configurable": {"thread_id": thread_id}})
        return dict(snapshot.values)


def _log_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("loading the embedded embedding model failed: %r; memories are ranked lexically", task.exception())


def create_engine(
    settings: Settings,
    storage: Storage,
    *,
    chat_model=None,
    on_memory_change: OnChange | None = None,
    metrics: Metrics | None = None,
) -> ChatEngine:
    """Build the engine over opened storage, with the configured model unless one is given."""
    from bot.engine.model import build_chat_model
    from bot.engine.recall.embedders import build_embeddings

    model = chat_model or build_chat_model(settings)
    memory_model = chat_model or build_chat_model(settings, streaming=False)
    return ChatEngine(
        settings=settings,
        storage=storage,
        chat_model=model,
        memory_model=memory_model,
        on_memory_change=on_memory_change,
        embeddings=build_embeddings(settings),
        metrics=metrics,
    )
