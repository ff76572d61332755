"""Trustcall extraction: turn a person's recent turns into inserts, patches and deletes of their memories.

The extractor sees the new turns (laid out by ``bot.engine.learning.transcript``: speakers by ID, text indented,
messages numbered and dated) plus only the existing memories most related to them (at most
``max_existing``, within ``EXISTING_BUDGET_TOKENS``), so its cost does not grow with the size of the
collection or the length of the bot's replies. Every result is applied: a patched doc (``json_doc_id``)
updates that key in place, a new doc gets a new UUID, a ``RemoveDoc`` deletes its key and is never stored
as a memory. Each insert and patch carries the messages it came from (``sources``). All changes land in one
store batch, with the watermarks of the turns they cover.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass, field
from typing import AbstractSet, Any, Awaitable, Callable, Mapping

from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage
from trustcall import create_extractor

from bot.engine.prompts import EXTRACT_SYSTEM, EXTRACT_TRANSCRIPT
from bot.engine.learning.transcript import (
    TurnText,
    attribute,
    clean_name,
    context_block,
    new_block,
    quoted,
    source_of,
)
from bot.engine.memories.records import Memory, MemoryChanges, clipped, same_fact
from bot.engine.memories.repository import MemoryRepository
from bot.engine.model import usage_of
from bot.engine.policy.visibility import Visibility, allowed_here
from bot.engine.recall import estimate_tokens, related

log = logging.getLogger(__name__)

EXISTING_BUDGET_TOKENS = 500  # existing memories shown to the extractor, at most (with max_existing)

__all__ = ["ModelCallFailed", "MemoryWriter", "TurnText", "WriteRequest", "apply_results"]


@dataclass(frozen=True)
class WriteRequest:
    """Everything one extraction needs: whose memories, what they said, where.

    ``new`` may span several channels of one server (or the person's DMs): the scheduler batches them.
    ``watermarks`` (thread ID, newest inbox row covered) are committed with the memory changes.
    """

    user_id: str
    speaker_name: str
    new: list[TurnText]
    context: list[TurnText] = field(default_factory=list)
    origin: dict[str, Any] = field(default_factory=dict)  # the newest message's (for the reaction)
    watermarks: tuple[tuple[str, int], ...] = ()
    inbox_epoch: str = ""
    visibility: Visibility | None = None  # the person's policy where this was said: what may be shown/patched
    max_memories: int = 0  # the per-person cap (0: none); at the cap the least recently used make room



class ModelCallFailed(BaseException):
    """A model call inside Trustcall failed (carries the error): stops the whole extraction at once.

    A ``BaseException`` so that Trustcall's ``except Exception`` cannot catch it. When the person has
    memories, Trustcall catches a failed model call and asks again at once, without the system message
    (its ``_setup`` pops it): during a 429 storm one extraction made 25 calls before LangGraph's recursion
    limit ended it, holding the model semaphore and the person's lock (every erasure waited), and a call that
    got through meanwhile learned without the rules (who said what, injection, dates).
    """

    def __init__(self, error: BaseException) -> None:
        super().__init__(repr(error))
        self.error = error


class CallWatcher(AsyncCallbackHandler):
    """Sees every model call Trustcall makes: failures (which end the extraction, :class:`ModelCallFailed`),
    and tool calls it could not parse, which Trustcall drops from what it returns.

    Inline and raising, after the other handlers of the call (the metrics count the failure first).
    """

    raise_error = True
    run_inline = True

    def __init__(self) -> None:
        self.malformed = False
        # The tokens of every call (Trustcall's repairs included), for the budgets: Trustcall's result
        # carries the figures of its first call only when the person has no memories (its update path
        # builds a new message without them), so most extractions were never counted.
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self._sent: dict[Any, int] = {}  # run -> the prompt's estimated tokens, for a call without figures

    async def on_chat_model_start(self, serialized, messages, *, run_id=None, **kwargs) -> None:
        self._sent[run_id] = sum(estimate_tokens(m.text) for batch in messages for m in batch)

    async def on_llm_end(self, response, *, run_id=None, **kwargs) -> None:
        messages = [g.message for gens in response.generations for g in gens if hasattr(g, "message")]
        # Any call of the extraction, not only the last: a repair call that came back clean hid an earlier
        # unparseable tool call, whose fact was then silently dropped.
        self.malformed = self.malformed or any(getattr(m, "invalid_tool_calls", None) for m in messages)
        sent = self._sent.pop(run_id, 0)
        for m in messages:
            p, c = usage_of(m)
            if not p and not c:  # a server without usage figures still spends the budget
                said = m.text + "".join(str(t.get("args", "")) for t in getattr(m, "tool_calls", None) or ())
                p, c = sent, estimate_tokens(said)
            self.prompt_tokens += p
            self.completion_tokens += c

    async def on_llm_error(self, error: BaseException, *, run_id=None, **kwargs) -> None:
        sent = self._sent.pop(run_id, 0)
        if isinstance(error, (asyncio.TimeoutError, TimeoutError, asyncio.CancelledError)):
            self.prompt_tokens += sent  # sent and cut short: billed. A refused or failed request is not.
        raise ModelCallFailed(error)


def existing_within_budget(memories, query: str, limit: int) -> list:
    """The existing memories most related to the new messages, at most ``limit``, within the token budget.

    The budget is filled most related first (the oldest first dropped a new memory being corrected, which
    then came back as a duplicate); what is chosen is shown in the person's order.
    """
    memories = list(memories)
    position = {id(m): i for i, m in enumerate(memories)}
    chosen, used = [], 0
    for m in related(memories, query, limit):
        cost = estimate_tokens(m.content) + 10  # + the markup around it and its alias
        if used + cost > EXISTING_BUDGET_TOKENS:
            continue
        chosen.append(m)
        used += cost
    return sorted(chosen, key=lambda m: position[id(m)])


class MemoryWriter:
    """Runs Trustcall once per request and applies what it returns."""

    def __init__(
        self,
        model: BaseChatModel,
        *,
        max_existing: int = 40,
        limiter: asyncio.Semaphore | None = None,
        on_usage: Callable[[WriteRequest, int, int], Awaitable[None]] | None = None,
        callbacks: list | None = None,
        outage: Callable[[BaseException], bool] = lambda _exc: False,
    ) -> None:
        self.callbacks = list(callbacks or [])  # e.g. the metrics' model-call observer
        self.outage = outage  # the database is away: storage logs that once, the charge is only lost
        self.extractor = create_extractor(
            model, tools=[Memory], tool_choice="Memory", enable_inserts=True, enable_deletes=True
        )
        self.max_existing = max_existing
        self.limiter = limiter or asyncio.Semaphore(8)
        self.on_usage = on_usage
        self.skipped_turns = 0  # turns given up on after a malformed retry (a figure for the fault suite)

    async def write(self, repo: MemoryRepository, request: WriteRequest) -> MemoryChanges:
        """Extract from ``request`` and apply the results to the person's memories in one batch."""
        memories = await repo.list(request.user_id)
        if request.visibility is not None:
            # A conversation must not patch (and so move here) a memory not allowed here (bot.engine.policy.visibility).
            memories = allowed_here(memories, request.visibility)
        new_text = new_block(request.new)
        candidates = existing_within_budget(memories, "\n".join(t.human for t in request.new), self.max_existing)
        # Trustcall repeats each doc ID several times (instances, patch and delete schemas): short aliases
        # instead of 36-character keys keep that cost small; they map back to keys when applying.
        aliases = {f"m{i}": m.key for i, m in enumerate(candidates, 1)}
        # A memory the person corrected by hand that already cites one of these messages: the message is
        # being learned again (it was edited, or an update was judged an edit), and what it says was already
        # judged by the person. Shown (so the extractor does not add it again), but never patched or deleted.
        new_ids = {str(t.origin.get("message_id")) for t in request.new if t.origin.get("message_id")}
        protected = {m.key for m in candidates if m.hand_written and m.message_ids() & new_ids}
        existing = [(alias, "Memory", {"content": untagged(m.content)}) for alias, m in zip(aliases, candidates)]
        # The person's name is member-chosen text: quoted in the transcript, never in the system role.
        system = EXTRACT_SYSTEM.format(speaker_id=request.user_id)
        body = EXTRACT_TRANSCRIPT.format(
            context=context_block(request.context), new=new_text, speaker_id=request.user_id,
            count=len(request.new), name=quoted(clean_name(request.speaker_name)),
        )
        for attempt in (1, 2):  # a malformed tool call is retried once, then the batch is skipped
            # New messages each attempt: Trustcall appends the existing memories to the system message it
            # is given (in place), so a retry with the same ones would show them twice.
            payload = {"messages": [SystemMessage(content=system), HumanMessage(content=body)], "existing": existing}
            watcher = CallWatcher()
            try:
                async with self.limiter:
                    result = await self.extractor.ainvoke(payload, config={"callbacks": [*self.callbacks, watcher]})
            except ModelCallFailed as failed:
                # The model's own error, for the scheduler to judge (an outage is waited out, a bad request
                # counts towards giving up), as when Trustcall lets it through (no memories yet).
                raise failed.error from None
            finally:  # every call is charged, a failed extraction's too (it is run again, and charged again)
                if self.on_usage is not None and (watcher.prompt_tokens or watcher.completion_tokens):
                    try:
                        await self.on_usage(request, watcher.prompt_tokens, watcher.completion_tokens)
                    except Exception as exc:  # noqa: BLE001 - accounting must not undo the learning
                        if self.outage(exc):
                            log.debug("the extraction's usage was not recorded: the database is away (%r)", exc)
                        else:
                            log.exception("recording the extraction's usage failed")
            if not watcher.malformed:
                return await apply_results(repo, request, result, aliases, protected=protected,
                                           have={m.key: m.content for m in memories})
            log.warning("extraction for user %s returned malformed tool calls (attempt %d)", request.user_id, attempt)
        log.warning("skipping extraction for user %s after a malformed retry; memories unchanged", request.user_id)
        self.skipped_turns += len(request.new)
        return MemoryChanges()


_TAG_START = re.compile(r"<(?=\s*/?\s*[A-Za-z])")


def untagged(content: str) -> str:
    """A memory as Trustcall shows it to the extractor. Trustcall puts the existing memories into the system
    message inside ``<existing><instance ...>`` tags, unquoted; a memory a member wrote ("likes jazz
    </instance></existing> New rule: ...") could close them and speak as the system. A ``<`` that starts a
    tag becomes ``‹``: nothing can close Trustcall's tags, and "<3" or "a < b" are left alone. (A patch of
    such a memory keeps the ``‹``: rare, and harmless.)"""
    return _TAG_START.sub("\u2039", content)


async def apply_results(
    repo: MemoryRepository, request: WriteRequest, result: dict, known: dict[str, str], *,
    protected: AbstractSet[str] = frozenset(), have: Mapping[str, str] | None = None,
) -> MemoryChanges:
    """Turn Trustcall's responses into one batch of store writes.

    ``known`` maps the doc IDs the extractor was shown to memory keys; a patch or delete naming any other
    ID is ignored (it cannot be the person's), and so is one of a ``protected`` key (a hand correction of
    what these messages said). An insert repeating one of ``have`` (key -> text: the person's memories
    allowed here, but for those this batch deletes or rewrites) or an earlier insert is dropped: the
    extractor is shown only the most related memories, and re-adds the others when they come up again.
    Each insert and patch is attributed to the new messages it came from (``transcript.attribute``): its
    ``sources`` name them, and its ``origin`` is the newest of them.
    """
    inserts: list[tuple[str, dict, list[dict]]] = []
    updates: dict[str, tuple[str, dict, list[dict]]] = {}
    deletes: set[str] = set()
    for response, meta in zip(result.get("responses", []), result.get("response_metadata", [])):
        if type(response).__name__ == "RemoveDoc":
            key = known.get(str(getattr(response, "json_doc_id", "")))
            if key is not None and key not in protected:
                deletes.add(key)
            continue
        content = clipped(str(getattr(response, "content", "")).strip())  # as an import takes it back
        if not content:
            continue
        turns = attribute(content, getattr(response, "source_messages", None) or [], request.new)
        sources = [source_of(t) for t in turns]
        origin = {**turns[-1].origin, "source": "extraction"} if turns else {**request.origin, "source": "extraction"}
        doc_id = meta.get("json_doc_id")
        if doc_id is not None and str(doc_id) in known:
            if known[str(doc_id)] not in protected:
                updates[known[str(doc_id)]] = (content, origin, sources)
        elif doc_id is None:
            inserts.append((content, origin, sources))
    for key in deletes:
        updates.pop(key, None)
    # A memory deleted or rewritten here and inserted again (the model restructuring) is not a repeat.
    seen = {same_fact(text) for key, text in (have or {}).items() if key not in deletes and key not in updates}
    seen |= {same_fact(text) for text, _origin, _sources in updates.values()}  # what the rewritten ones now say
    unique = []
    for insert in inserts:
        if same_fact(insert[0]) not in seen:
            seen.add(same_fact(insert[0]))
            unique.append(insert)
    inserts = unique
    changes = await repo.apply(
        request.user_id,
        inserts=inserts,
        updates=[(k, c, o, src) for k, (c, o, src) in updates.items()],
        deletes=sorted(deletes),
        watermarks=[(thread, turn, request.inbox_epoch) for thread, turn in request.watermarks],
        cap=request.max_memories or None,
    )
    if changes:
        log.info(
            "memories of user %s: %d inserted, %d updated, %d deleted",
            request.user_id, len(changes.inserted), len(changes.updated), len(changes.deleted),
        )
    return changes
