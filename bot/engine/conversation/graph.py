"""The chat graph, exported uncompiled so production and tests compile it with their own storage.

``respond`` answers with one model call; ``summarize`` runs after it only when the thread has grown past its
budget, folding older messages into a running summary (``RemoveMessage``). What the model reads is
rendered by :mod:`bot.engine.conversation.rendering`; the memory graph is :mod:`bot.engine.learning.graph`.

Two things are left for after the answer, so a person waits for no write the answer does not need (the
turn runner, :mod:`bot.engine.conversation.turn`, does both): ``respond`` tells the runner on the
``custom`` stream whether the thread now needs a summary (``{"summarize": bool}``), and a model call's
usage record is left on the turn's :class:`Later` (:data:`AFTER_ANSWER`) when one is set.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AbstractAsyncContextManager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Awaitable, Callable, Container

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
)
from langgraph.config import get_config
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from bot.engine.errors import EmptyAnswer
from bot.engine.prompts import SUMMARIZE_EXTEND, SUMMARIZE_NEW
from bot.engine.conversation.rendering import (
    for_model, image_tokens, pending_start, quoted, recall_query, said, system_prompt,
)
from bot.engine.memories.records import StoredMemory
from bot.engine.memories.repository import MemoryRepository
from bot.engine.policy.visibility import allowed_here
from bot.engine.recall import (
    SemanticIndex,
    choose_memories,
    estimate_tokens,
)
from bot.engine.recall.temporal import reply_time
from bot.engine.state import ChatState, Image, Speaker

log = logging.getLogger(__name__)

# (speaker, the model's answer, the prompt's estimated tokens: used only when the answer reports no usage)
UsageCallback = Callable[[Speaker, BaseMessage, int], Awaitable[None]]



class Later:
    """Work a turn's nodes leave for after its answer is handed out (a model call's usage record).

    ``owe(speaker)`` is called as a piece is left for ``speaker`` and ``paid(speaker)`` once it has run,
    so whoever reads what that work writes can wait for it (the daily budgets: ``UsageMeter.owe``).
    """

    def __init__(self, owe: Callable[[Speaker], None] = lambda _s: None,
                 paid: Callable[[Speaker], None] = lambda _s: None,
                 failed: Callable[[BaseException], None] | None = None) -> None:
        self._work: list[tuple[Speaker, Callable[[], Awaitable[None]]]] = []
        self._owe, self._paid = owe, paid
        self._failed = failed or (lambda exc: log.error("work left for after the answer failed", exc_info=exc))

    def __bool__(self) -> bool:
        return bool(self._work)

    def add(self, speaker: Speaker, work: Callable[[], Awaitable[None]]) -> None:
        self._work.append((speaker, work))
        self._owe(speaker)

    async def run(self) -> None:
        """Run what is left, in order; a piece that fails is handed to ``failed`` and the rest still run
        (accounting must never cost a reply, and an outage is the runner's to report, once)."""
        while self._work:
            speaker, work = self._work.pop(0)
            try:
                await work()
            except Exception as exc:  # noqa: BLE001 - see the docstring
                self._failed(exc)
            finally:
                self._paid(speaker)


#: Set by the turn runner around each turn. Unset (a graph run on its own, as in tests), the work runs in place.
AFTER_ANSWER: ContextVar[Later | None] = ContextVar("after_answer", default=None)


@dataclass
class ChatDeps:
    """What the chat graph's nodes need besides the state, the store and the speaker."""

    model: BaseChatModel
    persona: str
    memory_budget_tokens: int = 1000
    summarize_after_messages: int = 20
    summarize_after_tokens: int = 3000
    keep_messages: int = 6
    limiter: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(8))
    on_usage: UsageCallback | None = None
    semantic: SemanticIndex | None = None
    #: Entered around each model call: the turn's storage gives back what it holds while the model thinks
    #: (``bot.engine.stores.scopes``).
    waiting: Callable[[], AbstractAsyncContextManager[object]] = nullcontext
    #: Told (thread ID, source message IDs) of the memories put in a prompt, before the model is called
    #: (``bot.engine.stores.reach.ShownSources``): deleting a source visits this thread's answers too.
    shown: Callable[[str, set[str]], Awaitable[None]] | None = None
    #: Discord message IDs deleted whose erasure has not finished (it waits for the global erasure lock,
    #: held by a wipe or a compaction for up to minutes): the model is not shown them meanwhile.
    being_deleted: Container[str] = frozenset()
    #: Whether an error is the database being away (storage logs that once; a charge it stopped is lost).
    outage: Callable[[BaseException], bool] = lambda _exc: False



REFUSED = {400, 413, 415, 422}  # what a provider answers to images it will not take


def _refused(image: Image) -> Image:
    return image if not image.shown else Image(image.name, note="the model could not take this image")


def needs_summary(messages: list[AnyMessage], deps: ChatDeps) -> bool:
    """Whether the thread is past its budget (messages or tokens) and still holds more than it keeps verbatim."""
    if len(messages) <= deps.keep_messages:
        return False
    if len(messages) > deps.summarize_after_messages:
        return True
    return sum(estimate_tokens(m.text) for m in messages) > deps.summarize_after_tokens


def without_deleted(messages: list[AnyMessage], deleted: Container[str]) -> list[AnyMessage]:
    """What the model reads: the thread without messages deleted on Discord whose erasure still waits, nor
    the answers to any of them (the erasure takes those too: an answer often repeats what it answers), nor
    a reply of the bot's deleted on Discord (found by the Discord IDs it was sent as)."""
    if not deleted:
        return messages
    gone = {m.id for m in messages if str(m.additional_kwargs.get("message_id", "")) in deleted
            or any(str(i) in deleted for i in m.additional_kwargs.get("discord_ids", ()))}
    if not gone:
        return messages
    return [m for m in messages if m.id not in gone and not (
        isinstance(m, AIMessage) and set(m.additional_kwargs.get("answers") or ()) & gone)]


#: What one model call reads of the stored conversation, at most, in multiples of
#: ``summarize_after_tokens``: an answer's verbatim history, and what one summary folds. A thread is
#: summarised once past that budget, so a conversation never meets this cap; messages only recorded (a
#: spent daily budget, a long outage, a full queue) are not summarised until an answer, and a day of them
#: went to the model in one prompt, past the context window: the provider refused it, every later answer
#: in the channel failed the same way, and the summary that would have shrunk it never ran.
MOST_READ_FACTOR = 2


def newest_within(messages: list[AnyMessage], budget: int) -> list[AnyMessage]:
    """The newest messages whose texts fit ``budget`` tokens (the newest one always)."""
    start, used = len(messages), 0
    while start > 0:
        cost = estimate_tokens(messages[start - 1].text)
        if used + cost > budget and start < len(messages):
            break
        used += cost
        start -= 1
    return messages[start:]


def _clean_cuts(messages: list[AnyMessage]) -> list[bool]:
    """For each cut ``i`` (fold ``messages[:i]``): whether no question before it has its answer after it.

    After the bot's answer, always. After a message only recorded, or set aside as answered (a failed turn),
    when no later answer answers anything before the cut (an answer lists what it answers; an older answer
    without that list answers everything since the answer before it).
    """
    n = len(messages)
    first_answered = [n] * (n + 1)  # for each i: the earliest message answered by an answer at or after i
    index = {m.id: i for i, m in enumerate(messages)}
    previous_answer = -1
    for j, m in enumerate(messages):
        if isinstance(m, AIMessage):
            listed = m.additional_kwargs.get("answers")
            first_answered[j] = (previous_answer + 1 if listed is None
                                 else min((index[a] for a in listed if a in index), default=j))
            previous_answer = j
    for i in range(n - 1, -1, -1):
        first_answered[i] = min(first_answered[i], first_answered[i + 1])
    clean = [True] * (n + 1)
    for i in range(1, n + 1):
        before = messages[i - 1]
        clean[i] = isinstance(before, AIMessage) or (
            bool(before.additional_kwargs.get("heard") or before.additional_kwargs.get("answered"))
            and first_answered[i] >= i)
    return clean


def fold_point(messages: list[AnyMessage], deps: ChatDeps) -> int:
    """How many of the oldest messages a summary folds in.

    All but the last ``keep_messages``, and more while what is kept passes half the token budget: with
    long answers the kept messages alone were near it, so almost every turn summarised again (one extra
    model call each, under the channel's lock). At most ``MOST_READ_FACTOR`` budgets at once: a backlog
    of recorded messages is folded over the next answers, one bounded call each. Then back to where a turn
    starts: a cut between a question and its answer folded the question away and kept the answer, which a
    wipe of its asker then could not find (it takes an answer out with its question).
    """
    cut = max(0, len(messages) - deps.keep_messages)
    kept = sum(estimate_tokens(m.text) for m in messages[cut:])
    while cut < len(messages) - 2 and kept > deps.summarize_after_tokens // 2:
        kept -= estimate_tokens(messages[cut].text)
        cut += 1
    most, folded = deps.summarize_after_tokens * MOST_READ_FACTOR, 0
    for i, m in enumerate(messages[:cut]):
        folded += estimate_tokens(m.text)
        if folded > most:
            cut = max(1, i)
            break
    clean = _clean_cuts(messages)
    start = cut
    while cut > 0 and not clean[cut]:
        cut -= 1
    if cut == 0 and start > 0:
        # No clean cut within the cap (one long joined turn, a backlog before an answer written before
        # answers listed what they answer): the first clean one after it, past the cap, rather than none,
        # which stopped the thread's summaries for good.
        cut = next((i for i in range(start + 1, len(messages) - 1) if clean[i]), 0)
    return cut


def build_chat_graph(deps: ChatDeps) -> StateGraph:
    """The conversation graph: ``respond`` then, when the thread is over budget, ``summarize``."""

    charging: set[asyncio.Future] = set()  # charges of calls cut short, being written

    def _charged(charge: asyncio.Future) -> None:
        charging.discard(charge)
        if not charge.cancelled() and charge.exception() is not None:
            if deps.outage(charge.exception()):
                log.debug("the usage of a call cut short was not recorded: the database is away")
            else:
                log.error("recording the usage of a call cut short failed", exc_info=charge.exception())

    async def call(messages: list[BaseMessage], speaker: Speaker, extra_tokens: int = 0) -> AIMessage:
        estimate = sum(estimate_tokens(m.text) for m in messages) + extra_tokens  # images: extra_tokens
        sent = False
        try:
            async with deps.waiting(), deps.limiter:
                sent = True
                reply = await deps.model.ainvoke(messages)
        except (asyncio.CancelledError, asyncio.TimeoutError, TimeoutError):
            # Sent and cut short (an edit or deletion restarting the turn, the deadline, shutdown): the
            # provider bills the prompt. Uncharged, restarting a turn again and again spent tokens no budget
            # saw. A refused or failed request is not charged (providers do not bill those).
            if sent and deps.on_usage is not None:  # written beside, not awaited: the apology does not wait on it
                charge = asyncio.ensure_future(deps.on_usage(speaker, AIMessage(content=""), estimate))
                charging.add(charge)
                charge.add_done_callback(_charged)
            raise
        if deps.on_usage is not None:

            async def record() -> None:
                await deps.on_usage(speaker, reply, estimate)

            later = AFTER_ANSWER.get()
            if later is not None:  # the limits read it at the person's next message: written just after the answer
                later.add(speaker, record)
            else:
                try:
                    await record()
                except Exception:  # noqa: BLE001 - accounting must never cost a reply
                    log.exception("recording usage failed")
        return reply

    async def respond(state: ChatState, runtime: Runtime[Speaker]) -> dict:
        speaker = runtime.context
        visible = without_deleted(state["messages"], deps.being_deleted)
        memories: list[StoredMemory] = []
        if speaker.use_memories and runtime.store is not None:
            everything = await MemoryRepository(runtime.store).list(speaker.user_id)
            shown = allowed_here(everything, speaker.policy)
            asked, context = recall_query(visible, speaker)
            selection = await choose_memories(
                shown, asked, deps.memory_budget_tokens, context=context,
                user_id=speaker.user_id, index=deps.semantic,
                now=reply_time(state["messages"]), speaker=speaker.name,
            )
            memories = selection.memories
            if deps.shown is not None and memories:
                thread_id = str(get_config()["configurable"]["thread_id"])
                await deps.shown(thread_id, {str(s["message_id"]) for m in memories for s in m.sources
                                             if s.get("message_id") and str(s.get("channel_id", "")) != thread_id})
        system = SystemMessage(content=system_prompt(deps.persona, speaker, memories))
        stored = {str(m.additional_kwargs.get("message_id")) for m in state["messages"]}
        # and the Discord messages that carry its own stored answers (a reply to the bot's last answer quoted
        # that answer a second time, as another bot's message)
        stored |= {str(i) for m in state["messages"] for i in m.additional_kwargs.get("discord_ids", [])}
        quotes = tuple(q for q in speaker.quotes if not q.message_id or q.message_id not in stored)
        # Images for this call only (runtime context): the turn's, and those of a replied-to message the
        # thread already holds (its quote is not repeated, its images go with the stored message).
        images = dict(speaker.images)
        for q in speaker.quotes:
            if q.images and q.message_id in stored:
                images.setdefault(q.message_id, q.images)
        summary = state.get("summary", "")
        if deps.being_deleted and any(i in deps.being_deleted for i in state.get("summary_sources") or ()):
            summary = ""  # it holds a message being deleted (the erasure drops it)
        # The newest of it, within what one call reads (``MOST_READ_FACTOR``): the summary catches up after.
        visible = newest_within(visible, deps.summarize_after_tokens * MOST_READ_FACTOR)
        history = for_model(visible, summary=summary, quotes=quotes, speaker=speaker, images=images)
        try:
            reply = await call([system, *history], speaker, image_tokens(visible, images, quotes))
        except Exception as exc:
            if not (images or any(q.images for q in quotes)) or getattr(exc, "status_code", None) not in REFUSED:
                raise
            # The provider refused the request with images (a model that takes none, a file it cannot
            # read): answer from the text, the model told the images could not be shown.
            log.warning("the model refused a request with images (%s); answering without them",
                        type(exc).__name__)
            quotes = tuple(q if not q.images else replace(q, images=tuple(_refused(i) for i in q.images))
                           for q in quotes)
            history = for_model(visible, summary=summary, quotes=quotes,
                                speaker=speaker, images={k: tuple(_refused(i) for i in v) for k, v in images.items()})
            reply = await call([system, *history], speaker)
        reply = reply.model_copy(update={"content": said(reply.text)})  # (inline reasoning is not said)
        if not reply.text.strip():  # "(no answer)" posted, stored and learned from was the old result
            raise EmptyAnswer(f"the model answered with no text (finish reason: "
                              f"{reply.response_metadata.get('finish_reason', 'unknown')})")
        # What this answer answers: the messages since the last answer, but not those only heard (over a
        # limit, a full queue): the deletion of one of those takes its words out of this answer (the quote
        # rule), not the whole answer to someone else (docs/decisions.md, review fixes, seventh session).
        answers = [m.id for m in visible[pending_start(visible):]  # (not a message it was not shown)
                   if not m.additional_kwargs.get("heard")]
        answer = AIMessage(content=reply.text, id=reply.id, additional_kwargs={"answers": answers})
        runtime.stream_writer({"summarize": needs_summary([*state["messages"], answer], deps)})  # what route decides
        return {"messages": [answer], "guild_id": speaker.guild_id, "parent_id": speaker.parent_id}

    async def summarize(state: ChatState, runtime: Runtime[Speaker]) -> dict:
        messages = state["messages"]
        fold = messages[: fold_point(messages, deps)]
        if not fold:
            return {}
        summary = state.get("summary", "")
        ask = SUMMARIZE_EXTEND.format(summary=quoted(summary)) if summary else SUMMARIZE_NEW
        result = await call([*for_model(fold), HumanMessage(content=ask)], runtime.context)
        text = said(result.text).strip()  # a reasoning model's inline thinking is not the summary
        if not text:  # nothing came back: the messages stay, and a later answer tries again
            log.warning("the model returned an empty summary; the conversation is kept as it is")
            return {}
        authors = set(state.get("summary_authors") or [])
        authors |= {str(m.additional_kwargs.get("author_id")) for m in fold if isinstance(m, HumanMessage)}
        sources = list(state.get("summary_sources") or [])
        sources += [str(m.additional_kwargs["message_id"]) for m in fold if m.additional_kwargs.get("message_id")]
        sources += [str(i) for m in fold if isinstance(m, AIMessage) for i in m.additional_kwargs.get("discord_ids", [])]
        return {
            "summary": text,
            "summary_authors": sorted(authors),
            "summary_sources": list(dict.fromkeys(sources)),
            "messages": [RemoveMessage(id=m.id) for m in fold],
        }

    def route(state: ChatState) -> str:
        return "summarize" if needs_summary(state["messages"], deps) else END

    graph = StateGraph(ChatState, context_schema=Speaker)
    graph.add_node("respond", respond)
    graph.add_node("summarize", summarize)
    graph.add_edge(START, "respond")
    graph.add_conditional_edges("respond", route, ["summarize", END])
    graph.add_edge("summarize", END)
    return graph
