"""The engine's front door: one object the Discord cogs, the console and the CLI talk to.

It wires the parts (each has its own home, see ``docs/architecture.md``) and offers one short method per
verb: answer a turn, hear messages over a limit, follow edits and deletions, list and change memories,
erase a person, read and change a server's settings. The cogs parse, defer, call one of these, and format;
every decision (budgets, limits, privacy, what to learn) is the engine's.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Any, AsyncIterator, Awaitable, Callable

from langgraph.graph.state import CompiledStateGraph

from bot.engine.concurrency import Locks, RateLimiter
from bot.engine.conversation.graph import ChatDeps, build_chat_graph
from bot.engine.conversation.turn import DeltaCallback, Reply, TakenBack, TurnRunner
from bot.engine.erasure.conversations import ConversationEraser
from bot.engine.erasure.eraser import Eraser
from bot.engine.erasure.events import DiscordChanges
from bot.engine.erasure.jobs import ErasurePending, erasure_owed
from bot.engine.erasure.verbs import ChangeVerbs
from bot.engine.errors import Outages
from bot.engine.health import HealthVerbs
from bot.engine.learning.extraction import MemoryWriter, WriteRequest
from bot.engine.learning.graph import build_memory_graph
from bot.engine.learning.scheduler import ExtractionScheduler, OnChange
from bot.engine.memories.repository import MemoryRepository
from bot.engine.memories.verbs import MemoryVerbs
from bot.engine.policy.limits import NoticeOnce, TokenBucket
from bot.engine.policy.server_settings import GuildPolicy, GuildSettingsService, OperatorDefaults
from bot.engine.policy.turn_policy import Policies
from bot.engine.policy.usage import UsageMeter
from bot.engine.policy.verbs import SettingsVerbs
from bot.engine.recall import SemanticIndex, forget_cached_texts
from bot.engine.recall.minilm import LocalMiniLM
from bot.engine.state import Image, Incoming, Quote, Speaker
from bot.engine.stores import Storage
from bot.engine.stores.locks import ERASURE, EXTRACTION
from bot.engine.stores.reach import ShownSources
from bot.metrics import Metrics
from bot.settings import Settings

log = logging.getLogger(__name__)

ERASURE_POLL_SECONDS = 2.0  # how often the journal is checked for wipes requested by another process
SPENT = {"guild": "server", "member": "member", "dm": "dm"}  # a budget bucket's kind, as TurnResult.spent names it
MAX_RESTART_DELAY = 30.0  # the longest an edit's restart waits for the person's next token (see restart_delay)

__all__ = ["ChatEngine", "Reply", "TurnResult", "create_engine"]


@dataclass(frozen=True)
class TurnResult:
    """How the engine took a turn: answered (``reply``), or heard without an answer (``reply`` None).

    ``notice`` names the notice the person should see, when one is due: ``"out_of_budget"`` (once per
    budget bucket per UTC day). ``spent`` says whose daily allowance ran out, whenever one did (even when
    the notice is not due): ``"server"``, ``"member"`` (this person's share of a server's) or ``"dm"``, so
    a member over their own share is not told the bot is resting for everyone. The Discord side words it.
    """

    reply: Reply | None
    notice: str | None = None
    spent: str | None = None


class ChatEngine(ChangeVerbs, MemoryVerbs, SettingsVerbs, HealthVerbs):
    """Conversation + memory engine over injected storage and models.

    The verbs for Discord's changes and erasures (``erasure/verbs.py``), memories (``memories/verbs.py``),
    server settings (``policy/verbs.py``) and health (``health.py``) are mixed in from their homes, so this
    file keeps the wiring, the life cycle, turns and learning.
    """

    def __init__(self, *, settings: Settings, storage: Storage, chat_model: Any, memory_model: Any = None,
                 on_memory_change: OnChange | None = None, embeddings: Any = None,
                 metrics: Metrics | None = None) -> None:
        self.settings, self.storage = settings, storage
        self.metrics = metrics if metrics is not None else Metrics()
        self.store, self.checkpointer = storage.store, storage.checkpointer
        self.inbox, self.prefs, self.usage = storage.inbox, storage.prefs, storage.usage
        self.outages = Outages(storage.transient_errors)
        self.memories = MemoryRepository(self.store)
        self.guild_settings = GuildSettingsService(storage.guild_settings, OperatorDefaults.from_settings(settings),
                                                   cache_seconds=settings.server_settings.cache_seconds)
        self.policies = Policies(settings, storage.prefs, self.guild_settings)
        self.meter = UsageMeter(storage.usage, settings.limits)
        self.limiter = asyncio.Semaphore(settings.model.max_concurrent_calls)
        self.embeddings = embeddings
        #: What closes after everything else (the model's HTTP connection pool, which ``create_engine`` owns).
        self.closing: list[Callable[[], Awaitable[None]]] = []
        # An embeddings endpoint can take as long as a model call: the turn's pooled connection goes back
        # meanwhile. The in-process model answers in milliseconds; giving it back would cost a checkout a reply.
        waiting = nullcontext if isinstance(embeddings, LocalMiniLM) else storage.scopes.waiting
        self.semantic = (SemanticIndex(embeddings, storage.vectors, read=self.memories.list, waiting=waiting)
                         if embeddings is not None else None)
        self.shown_sources = ShownSources(storage.reach)
        self.being_deleted: Counter[str] = Counter()  # see DiscordChanges.being_deleted
        self.graph: CompiledStateGraph = build_chat_graph(self._chat_deps(chat_model)).compile(
            checkpointer=self.checkpointer, store=self.store)
        mem = settings.memory
        self.writer = MemoryWriter(memory_model or chat_model, max_existing=mem.extraction_max_existing,
                                   limiter=self.limiter, on_usage=self.meter.record_extraction,
                                   callbacks=[self.metrics.observer("extraction")], outage=self.outages.storage)
        self.memory_graph: CompiledStateGraph = build_memory_graph(self.writer).compile(store=self.store)
        self.locks = Locks(storage.locks)
        self.scheduler = ExtractionScheduler(
            self.inbox, self.learn, quiet_seconds=mem.extraction_quiet_seconds,
            after_messages=mem.extraction_after_messages, context_turns=mem.extraction_context_messages,
            on_change=on_memory_change, applied_up_to=self.memories.watermark,
            storage_errors=(*storage.transient_errors, ErasurePending), locks=self.locks)
        self.conversations = ConversationEraser(self.graph, self.checkpointer, self.locks.channel,
                                                storage.maintenance.prune_thread)
        self.runner = TurnRunner(graph=self.graph, inbox=self.inbox, maintenance=storage.maintenance,
                                 locks=self.locks, scheduler=self.scheduler, policies=self.policies,
                                 outages=self.outages, observer=self.metrics.observer(),
                                 drop_answer=self._take_back_answer,
                                 drop_messages=self._drop_erased, drop_held=self._drop_erased_held,
                                 owe_compaction=self._owe_compaction,
                                 scopes=storage.scopes,
                                 owed=(self.meter.owe, self.meter.paid))
        self.turns_done = self.runner.turns_done
        self.not_learned = self.runner.not_learned
        self.eraser = Eraser(storage, self.conversations, hold=self._hold, light_hold=self._light_hold,
                             erasing=self.runner.inflight.erasing, exclusive=self.locks.erasures,
                             notify=self.scheduler.notify, settled=self._settled, after=self._after_erasure)
        self.changes = DiscordChanges(storage=storage, conversations=self.conversations, eraser=self.eraser,
                                      scheduler=self.scheduler, thread_state=self.thread_state,
                                      removed_server_days=settings.retention.removed_server_days,
                                      forget_settings=self.guild_settings.forget,
                                      forget_stored=self.runner.forget_stored, being_deleted=self.being_deleted,
                                      on_swept=lambda _guild: self.metrics.erasure("removed_server"))
        self.eraser.guild_ready = lambda guild: self.changes.judged.is_set() and self.changes.mine(guild)
        limits = settings.limits
        # /memories remember and import, per person per hour: bounded like every map keyed by person.
        self.memory_commands: RateLimiter[str] = RateLimiter(limits.memory_commands_per_hour, 3600.0)
        self.bucket = TokenBucket(limits.burst, limits.refill_seconds)
        self.notices = NoticeOnce()
        self._started = False
        self._closing = False
        self._start_done = asyncio.Event()  # set when ``start`` returns (or fails): ``close`` waits for it
        self._background: list[asyncio.Task] = []

    def _after_erasure(self) -> None:
        """What in-process caches an erasure invalidates: recall's (they hold whole texts) and which reach
        rows were written (the erasure may have deleted some)."""
        forget_cached_texts()
        self.shown_sources.forget()

    async def _settled(self, user: str) -> None:
        """A wipe's wait for the person's marked turns here: as long as a turn can take, and a little more."""
        await self.runner.inflight.settled(user, most=self.settings.model.timeout_seconds + 30.0)

    async def _owe_compaction(self) -> None:
        await self.eraser.owe_compaction()

    async def _take_back_answer(self, thread_id: str, answer_id: str) -> None:
        await self.eraser.take_back_answer(thread_id, answer_id)

    async def _drop_erased(self, thread_id: str, message_ids: set[str], people: set[str], taken: TakenBack) -> None:
        """A turn's messages of a person erased while it ran, taken back out of its thread. They were written
        after the erasure passed: a compaction is owed (durably), for a wipe in another process that said
        "Done" before this turn ended (one here waits for it: ``_settled``)."""
        await self.eraser.take_back_messages(thread_id, message_ids, people, taken=taken)

    async def _drop_erased_held(self, thread_id: str, message_ids: set[str], people: set[str]) -> TakenBack:
        return await self.eraser.take_back_in_thread(thread_id, message_ids, people)

    @asynccontextmanager
    async def _hold(self, user: str, kind: str = ERASURE) -> AsyncIterator[None]:
        """An erasure's hold on a person: no extraction, and no memory vectors written meanwhile; with
        ``EXTRACTION`` (a deleted message's light hold) their new turns are still recorded."""
        try:
            async with self.scheduler.hold(user, kind=kind), (
                    self.semantic.paused(user) if self.semantic else nullcontext()):
                yield
        finally:
            self._after_erasure()

    def _light_hold(self, user: str) -> AbstractAsyncContextManager[None]:
        return self._hold(user, EXTRACTION)

    def _chat_deps(self, chat_model: Any) -> ChatDeps:
        conv, mem = self.settings.conversation, self.settings.memory
        return ChatDeps(model=chat_model, persona=self.settings.bot.persona,
                        memory_budget_tokens=mem.prompt_budget_tokens,
                        summarize_after_messages=conv.summarize_after_messages,
                        summarize_after_tokens=conv.summarize_after_tokens, keep_messages=conv.keep_messages,
                        limiter=self.limiter, on_usage=self.meter.record, semantic=self.semantic,
                        waiting=self.storage.scopes.waiting, shown=self.shown_sources, being_deleted=self.being_deleted,
                        outage=self.outages.storage)

    # ---- life cycle
    async def start(self) -> None:
        """Finish erasures and resume pending memory work left by a previous run; watch for wipe requests;
        sweep servers the bot was removed from. Erasures come first, so nothing of an erased person is
        learned from on the way back up.

        A shutdown asked for meanwhile (SIGTERM during start-up) lets the step running end and starts
        nothing more: ``close`` waits for that, so no sweep, journal watcher or learning begins after the
        engine closed, and its final pass of learning never runs beside the erasures still being resumed.
        """
        if self._closing:  # closed before it started (a signal while the extensions loaded)
            return
        self._started = True
        try:
            for step in (self.eraser.resume, self.meter.prune, self._start_background):
                if self._closing:
                    break
                await step()
        finally:
            self._start_done.set()

    async def _start_background(self) -> None:
        if isinstance(self.embeddings, LocalMiniLM):  # load the embedded model now, so no reply waits for it
            self._background.append(_logged(asyncio.create_task(self.embeddings.warm(), name="load-embedding-model")))
        if self.semantic is not None:  # vectors another embedder made (a switch) are made again, off the reply path
            self._background.append(_logged(asyncio.create_task(self.semantic.remake_others(self.memories.list),
                                                                name="remake-memory-vectors")))
        await self.scheduler.start()
        if self._closing:
            return
        self.changes.start()
        self._background.append(asyncio.create_task(self._watch_erasure_requests(), name="erasure-requests"))

    async def _watch_erasure_requests(self) -> None:
        """Do the wipes other processes recorded (``python -m bot memories wipe`` records one instead of
        erasing beside a running bot), and retry erasures that failed here."""
        while True:
            await asyncio.sleep(ERASURE_POLL_SECONDS)
            try:
                await self.eraser.resume()
            except Exception as exc:  # noqa: BLE001 - reading the journal failed; the next round tries again
                if self.outages.storage(exc):  # the outage is logged once, by storage
                    log.debug("checking the erasure journal waits for the database: %r", exc)
                else:
                    log.exception("checking the erasure journal failed")

    async def close(self) -> None:
        """Finish in-flight turns, then flush pending memory extraction (if this engine was started). An
        erasure running meanwhile is waited for too: the owed compaction takes the erasure lock it holds.
        A start-up still running is waited for first (see :meth:`start`)."""
        self._closing = True
        if self._started:
            await self._start_done.wait()
        await self.changes.close()
        await self.runner.close()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self._started:
            await self.scheduler.close()
        await self.eraser.close(pay=self._started)  # the compaction small removals still owe
        if self.semantic is not None:
            await self.semantic.drain()
        for close in self.closing:
            await close()
        self.closing.clear()

    def idle(self) -> bool:
        """No erasure running, nor a compaction it owes waiting (turns are the Discord side's to report)."""
        return self.eraser.active == 0 and self.changes.active == 0 and not self.eraser.owed.waiting()

    # ---- turns
    async def turn(self, thread_id: str, incoming: list[Incoming], *,
                   context: Callable[[], Awaitable[tuple[Quote, ...]]] | None = None,
                   images: Callable[[], Awaitable[list[tuple[Image, ...]]]] | None = None,
                   while_answering: Callable[[], AbstractAsyncContextManager] | None = None,
                   policy: GuildPolicy | None = None, on_delta: DeltaCallback | None = None,
                   timeout: float | None = None) -> TurnResult:
        """Take one turn: answered, or (a daily budget spent) heard with a notice when one is due.

        ``context()`` gathers the quotes for the answer (reply chains, the channel); it is called only when
        the turn will be answered, so a turn out of budget costs no Discord requests; so is ``images()``,
        the pictures of each of ``incoming`` in order (no downloads for a member over their budget);
        ``while_answering()`` is entered around the answer (the typing indicator).
        """
        answering = next((m.speaker for m in reversed(incoming) if m.answer), incoming[-1].speaker)
        policy = policy or await self.guild_policy(answering.guild_id)
        bucket = await self.meter.exhausted(answering, policy)
        if bucket is not None:
            await self.hear(thread_id, [replace(m, answer=False, images=()) for m in incoming], policy=policy)
            return TurnResult(None, "out_of_budget" if self.meter.first_notice_today(bucket) else None,
                              spent=SPENT[bucket.partition(":")[0]])
        async with while_answering() if while_answering is not None else nullcontext():
            if images is not None:
                incoming = [replace(m, images=shown) for m, shown in zip(incoming, await images(), strict=True)]
            quotes = await context() if context is not None else ()
            reply = await self.reply_to(thread_id, incoming, quotes=quotes, policy=policy, on_delta=on_delta,
                                        timeout=timeout)
        self.notices.answered(answering.user_id)
        return TurnResult(reply)

    async def reply(self, thread_id: str, speaker: Speaker, text: str, *, on_delta: DeltaCallback | None = None,
                    timeout: float | None = None, policy: GuildPolicy | None = None) -> Reply:
        """Answer ``text`` from ``speaker`` in ``thread_id`` (one message; see :meth:`reply_to`)."""
        return await self.reply_to(thread_id, [Incoming(speaker, text)], on_delta=on_delta, timeout=timeout,
                                   policy=policy)

    async def reply_to(self, thread_id: str, incoming: list[Incoming], *, quotes: tuple[Quote, ...] = (),
                       on_delta: DeltaCallback | None = None, timeout: float | None = None,
                       policy: GuildPolicy | None = None) -> Reply:
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
        caller resolved them for this message (looked up when not given); ``quotes`` the context gathered.
        """
        if not incoming:
            raise ValueError("a turn needs at least one message")
        timer = self.metrics.reply_timer()
        quoted = [q.message_id for q in quotes if q.message_id]
        if quoted:  # before the answer can repeat them: deleting one of them visits this thread too
            await self.storage.reach.reached(thread_id, quoted)
        resolved = await self.policies.for_turn(incoming, quotes=quotes, server=policy)
        try:
            reply = await self.runner.answer(thread_id, incoming, resolved, on_delta=timer.wrap(on_delta),
                                             timeout=timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            timer.failed(exc)
            raise
        timer.answered()
        # the channel, not the conversation: an "Ask about this" side conversation is one per person there
        self.metrics.note_channel(next((m.speaker.channel_id for m in reversed(incoming)
                                        if m.answer and m.speaker.channel_id), thread_id))
        return reply

    async def hear(self, thread_id: str, incoming: list[Incoming], *, policy: GuildPolicy | None = None) -> None:
        """Record messages in the conversation without answering them (a rate limit or a full queue).

        They are in the thread for the next answer and queued for learning like any other message (where
        the server allows learning), so what someone said over a limit is never lost; no model is called.
        ``policy``: the settings the caller resolved for them (an "Ask about this" side thread learns
        nothing, whatever its server allows); looked up when not given.
        """
        if incoming:
            policy = policy or await self.guild_policy(incoming[-1].speaker.guild_id)
            learning = policy.learning
            await self.runner.hear(thread_id, incoming, learning=learning)

    def admit(self, user_id: int | str) -> bool:
        """Whether a message from this person may be answered now (the per-person token bucket)."""
        return self.bucket.take(user_id)

    def restart_delay(self, user_id: int | str) -> float:
        """How long a turn restarted by the person's edit waits before its new model call: it takes a token
        from the person's bucket (a restart is a new answer, like a message), now or the next one to come,
        and waits until then, at most ``MAX_RESTART_DELAY`` (the channel's other turns wait behind it).
        Without it, editing a message being answered over and over made a model call per edit, none of them
        charged (a cancelled call records no usage)."""
        return min(self.bucket.reserve(user_id), MAX_RESTART_DELAY)

    def notice_due(self, user_id: int | str) -> bool:
        """Whether the person, over a limit, should be told now (once per burst)."""
        return self.notices.due(user_id)

    async def attach_sent(self, thread_id: str, reply: Reply, discord_ids: list[str]) -> None:
        """Remember which Discord messages carry ``reply``, so a moderator deleting one removes it."""
        await self.conversations.attach_sent(thread_id, reply.message_id, discord_ids)

    async def answer_not_sent(self, thread_id: str, reply: Reply) -> None:
        """Discord refused ``reply`` (the bot lost its permission, the DM was closed, the thread locked):
        nobody saw it, so later turns must not read it as said, nor extraction learn from it."""
        await self.turns_done(thread_id)  # its checkpoint is written in the turn's tail, after the answer
        await self.eraser.take_back_answer(thread_id, reply.message_id, refused=True)

    async def thread_state(self, thread_id: str) -> dict:
        """The thread's current state values (messages, summary)."""
        return await self.runner.thread_state(thread_id)

    # ---- learning
    async def learn(self, request: WriteRequest) -> dict:
        """Run one extraction (the scheduler calls this), under the policy as it stands now."""
        request = await self.policies.for_learning(request)
        if request is None:
            return {}
        place = request.origin.get("guild_id")
        said = [*request.new, *request.context]
        if await erasure_owed(self.storage.erasures, request.user_id, str(place) if place else None,
                              messages={str(t.origin.get("message_id")) for t in said if t.origin.get("message_id")},
                              threads={t.thread_id for t in said if t.thread_id}):
            raise ErasurePending(f"an erasure of user {request.user_id} (or of their server or messages) is unfinished")
        changes = (await self.memory_graph.ainvoke({"request": request}))["changes"]
        if changes.get("deleted") or changes.get("updated"):  # (the cap's drops are among the deletions)
            await self.eraser.drop_derived(request.user_id, [*changes.get("deleted", []), *changes.get("updated", [])])
        if changes.get("inserted") or changes.get("updated"):
            self.index_soon(request.user_id)  # memory vectors are made at write time, off the reply path
        return changes

    def on_memory_change(self, callback: OnChange | None) -> None:
        """Be told after each extraction that changed memories (None: stop)."""
        self.scheduler.on_change = callback

    async def flush_learning(self) -> None:
        """Extract everything pending now (the console and shutdown)."""
        await self.scheduler.flush()


def _logged(task: asyncio.Task) -> asyncio.Task:
    """Log a background semantic task's failure (loading the model, re-making vectors) once, as an error."""
    def report(done: asyncio.Task) -> None:
        if not done.cancelled() and done.exception() is not None:
            log.error("%s failed: %r; memories are ranked lexically", done.get_name(), done.exception())

    task.add_done_callback(report)
    return task


def create_engine(settings: Settings, storage: Storage, *, chat_model: Any = None,
                  on_memory_change: OnChange | None = None, metrics: Metrics | None = None) -> ChatEngine:
    """Build the engine over opened storage, with the configured model unless one is given."""
    from bot.engine.model import build_chat_model, model_http_client
    from bot.engine.recall.embedders import build_embeddings

    http = model_http_client() if chat_model is None else None
    model = chat_model or build_chat_model(settings, http_async_client=http)
    memory_model = chat_model or build_chat_model(settings, streaming=False, http_async_client=http)
    engine = ChatEngine(settings=settings, storage=storage, chat_model=model, memory_model=memory_model,
                        on_memory_change=on_memory_change, embeddings=build_embeddings(settings), metrics=metrics)
    if http is not None:
        engine.closing.append(http.aclose)
    return engine
