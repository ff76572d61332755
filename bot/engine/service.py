"""The engine's front door: one object the Discord cogs and the console both talk to.

``reply()`` runs the chat graph for one message and returns as soon as ``respond`` has produced the
answer; summarizing and recording the turn for memory extraction continue in the background while the
thread stays locked, so messages in one thread are handled one at a time, in arrival order, and different
threads run concurrently.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from dataclasses import dataclass, replace
from typing import Callable

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.graph.state import CompiledStateGraph

from bot.engine.conversations import ConversationEraser
from bot.engine.erasure import ErasureResult, erase_person
from bot.engine.extraction import MemoryWriter, WriteRequest
from bot.engine.graph import ChatDeps, build_chat_graph, build_memory_graph
from bot.engine.memory import Actor, MemoryRepository
from bot.engine.scheduler import ExtractionScheduler, OnChange
from bot.engine.semantic import SemanticScorer
from bot.engine.state import Speaker
from bot.engine.stores import Storage
from bot.settings import Settings

log = logging.getLogger(__name__)

DeltaCallback = Callable[[str], None]
PRUNE_EVERY = 8  # a thread keeps at most this many superseded checkpoints between prunes


@dataclass(frozen=True)
class Reply:
    """The answer to one message."""

    text: str


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
    ) -> None:
        self.settings = settings
        self.storage = storage
        self.store = storage.store
        self.checkpointer = storage.checkpointer
        self.inbox = storage.inbox
        self.prefs = storage.prefs
        self.usage = storage.usage
        self.memories = MemoryRepository(self.store)
        self.limiter = asyncio.Semaphore(settings.model.max_concurrent_calls)
        conv, mem = settings.conversation, settings.memory
        self.chat_deps = ChatDeps(
            model=chat_model,
            persona=settings.bot.persona,
            memory_budget_tokens=mem.prompt_budget_tokens,
            summarize_after_messages=conv.summarize_after_messages,
            summarize_after_tokens=conv.summarize_after_tokens,
            keep_messages=conv.keep_messages,
            limiter=self.limiter,
            on_usage=self._record_usage,
            semantic=SemanticScorer(embeddings, storage.vectors) if embeddings is not None else None,
        )
        self.graph: CompiledStateGraph = build_chat_graph(self.chat_deps).compile(
            checkpointer=self.checkpointer, store=self.store
        )
        self.writer = MemoryWriter(
            memory_model or chat_model,
            max_existing=mem.extraction_max_existing,
            limiter=self.limiter,
            on_usage=self._record_extraction_usage,
        )
        self.memory_graph: CompiledStateGraph = build_memory_graph(self.writer).compile(store=self.store)
        self.scheduler = ExtractionScheduler(
            self.inbox,
            self._write,
            quiet_seconds=mem.extraction_quiet_seconds,
            after_messages=mem.extraction_after_messages,
            context_turns=mem.extraction_context_messages,
            on_change=on_memory_change,
            applied_up_to=self.memories.watermark,
            storage_errors=storage.transient_errors,
        )
        self._thread_locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._tails: set[asyncio.Task] = set()
        self._turns_since_prune: dict[str, int] = {}
        self._started = False
        self._erased_at: dict[str, float] = {}  # person -> loop time of their latest erasure
        self.conversations = ConversationEraser(self.graph, self.checkpointer, self._lock, storage.maintenance.prune_thread)

    async def start(self) -> None:
        """Resume pending memory work left by a previous run."""
        self._started = True
        await self.scheduler.start()

    async def close(self) -> None:
        """Finish in-flight turns, then flush pending memory extraction (if this engine was started)."""
        if self._tails:
            await asyncio.gather(*self._tails, return_exceptions=True)
        if self._started:
            await self.scheduler.close()

    def _lock(self, thread_id: str) -> asyncio.Lock:
        lock = self._thread_locks.get(thread_id)
        if lock is None:
            lock = asyncio.Lock()
            self._thread_locks[thread_id] = lock
        return lock

    async def reply(
        self,
        thread_id: str,
        speaker: Speaker,
        text: str,
        *,
        on_delta: DeltaCallback | None = None,
        timeout: float | None = None,
    ) -> Reply:
        """Answer ``text`` from ``speaker`` in ``thread_id``.

        Returns once the answer exists (one model call); raises the model's exception if it failed, in
        which case the thread keeps the question and stays usable. ``on_delta`` receives the text so far
        while the model streams. ``timeout`` bounds the wait for the answer from the moment this message's
        turn starts (earlier messages of the thread are answered first and are not on its clock); past it
        the model call is cancelled and ``TimeoutError`` is raised.
        """
        prefs = await self.prefs.get(speaker.user_id)
        speaker = replace(
            speaker,
            use_memories=speaker.use_memories and not prefs.private,
            dm_in_servers=self.settings.memory.dm_memories_in_servers if prefs.dm_in_servers is None else prefs.dm_in_servers,
        )
        lock = self._lock(thread_id)
        answered: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(
            self._turn(lock, thread_id, speaker, text, answered, on_delta, not prefs.paused, timeout)
        )
        self._tails.add(task)
        task.add_done_callback(self._tails.discard)
        try:
            return await answered
        except asyncio.CancelledError:
            # The caller gave up (its deadline passed): stop the model call too, so the thread does not
            # keep an answer nobody saw. The question stays in the thread; the thread stays usable.
            task.cancel()
            raise

    async def _turn(self, lock, thread_id, speaker, text, answered, on_delta, learn: bool, timeout) -> None:
        message = HumanMessage(
            content=text,
            additional_kwargs={
                "author_id": speaker.user_id,
                "author_name": speaker.name,
                "message_id": speaker.message_id,
                "guild_id": speaker.guild_id,
            },
        )
        config = {"configurable": {"thread_id": thread_id}}
        started = asyncio.get_running_loop().time()
        async with lock:
            streamed = ""
            try:
                async with asyncio.timeout(None) as clock:
                    if timeout is not None:
                        clock.reschedule(asyncio.get_running_loop().time() + timeout)
                    async for mode, chunk in self.graph.astream(
                        {"messages": [message]}, config, context=speaker, stream_mode=["updates", "messages"]
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
                            erased = self._erased_at.get(speaker.user_id, float("-inf")) >= started
                            if learn and not erased:  # paused or erased meanwhile: never queued for learning
                                await self._after_answer(thread_id, speaker, text, ai.text)
                            if not answered.done():  # the caller may have given up waiting
                                answered.set_result(Reply(text=ai.text))
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

    async def _after_answer(self, thread_id: str, speaker: Speaker, human: str, ai: str) -> None:
        """Record the turn for background extraction (before the reply is handed out: nothing is lost).

        If the database is unreachable the error goes to the caller: the person gets the apology instead
        of an answer that would never be learned from.
        """
        try:
            count = await self.inbox.record(
                thread_id=thread_id,
                user_id=speaker.user_id,
                author=speaker.name,
                human=human,
                ai=ai,
                origin=speaker.origin(),
            )
        except self.storage.transient_errors:
            raise
        except Exception:  # noqa: BLE001 - the reply still goes out; the log says what was not recorded
            log.exception("could not record a turn for memory extraction in thread %s", thread_id)
            return
        self.scheduler.notify(thread_id, speaker.user_id, count)

    async def _write(self, request: WriteRequest) -> dict:
        prefs = await self.prefs.get(request.user_id)
        if prefs.paused:  # paused after these turns were queued: they are dropped, not learned
            return {}
        in_server = str(request.origin.get("guild_id", "dm")) != "dm"
        shared = self.settings.memory.dm_memories_in_servers if prefs.dm_in_servers is None else prefs.dm_in_servers
        request = replace(request, see_dm_memories=not in_server or shared)
        result = await self.memory_graph.ainvoke({"request": request})
        return result["changes"]

    async def _record_usage(self, speaker: Speaker, message: BaseMessage) -> None:
        p, c = _usage(message)
        await self.usage.record(speaker.guild_id, speaker.user_id, p, c)

    async def _record_extraction_usage(self, request: WriteRequest, message: BaseMessage) -> None:
        p, c = _usage(message)
        if p or c:
            await self.usage.record(str(request.origin.get("guild_id", "dm")), request.user_id, p, c)

    async def budget_exhausted(self, speaker: Speaker) -> str | None:
        """The budget bucket (a server, or a person's DMs) that has no tokens left today, if any."""
        limits = self.settings.limits
        if speaker.in_dm:
            if limits.dm_daily_tokens and await self.usage.tokens_today("dm", speaker.user_id) >= limits.dm_daily_tokens:
                return f"dm:{speaker.user_id}"
            return None
        if limits.guild_daily_tokens and await self.usage.tokens_today(speaker.guild_id) >= limits.guild_daily_tokens:
            return f"guild:{speaker.guild_id}"
        return None

    async def erase_person(
        self, user_id: str | int, *, guild_id: str | None = None, by: Actor | None = None
    ) -> ErasureResult:
        """Erase everything held about a person (or what was learned in one server); see bot.engine.erasure.

        A turn of theirs already in flight finishes first (erasing a thread takes its lock) and is not
        queued for learning (it started before the erasure).
        """
        user = str(user_id)
        self._erased_at[user] = asyncio.get_running_loop().time()
        async with self.scheduler.hold(user):
            return await erase_person(self.storage, user, guild_id=guild_id, conversations=self.conversations, by=by)

    async def thread_state(self, thread_id: str) -> dict:
        """The thread's current state values (messages, summary)."""
        snapshot = await self.graph.aget_state({"configurable": {"thread_id": thread_id}})
        return dict(snapshot.values)


def create_engine(settings: Settings, storage: Storage, *, chat_model=None, on_memory_change: OnChange | None = None) -> ChatEngine:
    """Build the engine over opened storage, with the configured model unless one is given."""
    from bot.engine.model import build_chat_model, build_embeddings

    model = chat_model or build_chat_model(settings)
    memory_model = chat_model or build_chat_model(settings, streaming=False)
    return ChatEngine(
        settings=settings,
        storage=storage,
        chat_model=model,
        memory_model=memory_model,
        on_memory_change=on_memory_change,
        embeddings=build_embeddings(settings),
    )
