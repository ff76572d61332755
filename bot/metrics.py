"""What the bot measures about itself, for operators: one home for every metric.

A :class:`Metrics` object owns its own ``prometheus_client`` registry (never the library's global one): it
is created in ``main()`` (or by a test) and handed to the engine and the bot, which call its small methods
at the natural points: the reply path (latency to first text and to the whole answer), every model call
(through :class:`ModelCallObserver`, a LangChain callback that sees each call the graphs and Trustcall
make), the learning backlog (sampled from storage at scrape time), erasures, and the gateway.

Privacy: no label ever carries a user ID, a name, a server or channel ID, or any text. Every label value
comes from a small fixed vocabulary (see ``KINDS``, ``FAILURES``, ``OUTCOMES``, ``SCOPES``); anything
else is recorded as ``"other"``. Channel IDs are kept in memory only to count active channels.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage
    from langchain_core.outputs import LLMResult

log = logging.getLogger(__name__)

KINDS = ("reply", "summary", "extraction", "other")  # what a model call was for
FAILURES = ("timeout", "rate_limited", "server_error", "connection", "cancelled", "other")
OUTCOMES = ("answered", "failed", "timed_out")
SCOPES = ("person", "server", "message", "channel", "removed_server")  # what an erasure covered
NODE_KINDS = {"respond": "reply", "summarize": "summary", "write_memory": "extraction"}
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 20.0, 30.0, 60.0, 120.0)
CONTENT_TYPE = CONTENT_TYPE_LATEST
ACTIVE_CHANNELS_BOUND = 100_000

Refresher = Callable[[], Awaitable[None]]


def _label(value: str, allowed: tuple[str, ...]) -> str:
    return value if value in allowed else "other"


def failure_reason(error: BaseException) -> str:
    """A model error as one word from ``FAILURES`` (never the message: it could quote the prompt)."""
    if isinstance(error, asyncio.CancelledError):
        return "cancelled"
    name = type(error).__name__
    if isinstance(error, (TimeoutError, asyncio.TimeoutError)) or name in {"APITimeoutError", "ReadTimeout"}:
        return "timeout"
    status = getattr(error, "status_code", None)
    if name == "RateLimitError" or status == 429:
        return "rate_limited"
    if name == "InternalServerError" or (isinstance(status, int) and status >= 500):
        return "server_error"
    if isinstance(error, ConnectionError) or name == "APIConnectionError":
        return "connection"
    return "other"


@dataclass(frozen=True)
class Backlog:
    """The learning backlog: turns waiting to be learned from, and how overdue the most overdue is.

    ``oldest_age_seconds`` is measured from the *last* turn of the conversation that has waited longest:
    a conversation is learned from once it has been quiet for ``memory.extraction_quiet_seconds``, so this
    is the figure that says whether learning keeps up.
    """

    turns: int
    oldest_age_seconds: float


class Metrics:
    """Every figure the bot exports, over a registry of its own.

    Args:
        registry: where the metrics live (a fresh one by default).
        active_channel_seconds: a channel counts as active for this long after the bot answered there.
        clock: monotonic seconds (injected so tests need not sleep).
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        active_channel_seconds: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.clock = clock
        self.active_channel_seconds = active_channel_seconds
        self._active: dict[str, float] = {}
        self._refreshers: list[Refresher] = []
        r = self.registry
        self.reply_first_text = Histogram(
            "mnemo_reply_first_text_seconds",
            "Time from a message reaching the engine to the first text of its answer (streamed or whole).",
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.reply_full = Histogram(
            "mnemo_reply_seconds", "Time from a message reaching the engine to its complete answer.",
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.replies = Counter("mnemo_replies", "Messages the engine was asked to answer, by outcome.",
                               ["outcome"], registry=r)
        self.model_calls = Counter("mnemo_model_calls", "Model calls started, by what they were for.",
                                   ["kind"], registry=r)
        self.model_failures = Counter("mnemo_model_failures", "Model calls that failed, by kind and reason.",
                                      ["kind", "reason"], registry=r)
        self.tokens = Counter("mnemo_model_tokens", "Tokens the model reported, by kind and direction.",
                              ["kind", "direction"], registry=r)
        self.backlog_turns = Gauge("mnemo_learning_backlog_turns", "Turns waiting to be learned from.", registry=r)
        self.backlog_age = Gauge("mnemo_learning_backlog_age_seconds",
                                 "Seconds since the last turn of the conversation that has waited longest to be "
                                 "learned from (0: nothing waits). Learning starts after memory.extraction_quiet_"
                                 "seconds of quiet, so a figure well above that means learning is behind.",
                                 registry=r)
        self.erasures = Counter("mnemo_erasures", "Erasures carried out, by what they covered.", ["scope"],
                                registry=r)
        self.gateway_latency = Gauge("mnemo_gateway_latency_seconds",
                                     "Discord gateway heartbeat latency (NaN when not connected).", registry=r)
        self.guilds = Gauge("mnemo_guilds", "Servers the bot is in.", registry=r)
        self.active_channels = Gauge("mnemo_active_channels", "Channels answered in recently (see config).",
                                     registry=r)
        self.active_channels.set_function(self._count_active)
        self.settings_changes = Counter("mnemo_server_settings_changes",
                                        "Server settings changed by admins with /settings.", registry=r)
        self.gateway_latency.set(math.nan)
        for kind in KINDS:  # every series exists from the start, so rates work from the first scrape
            self.model_calls.labels(kind)
        for outcome in OUTCOMES:
            self.replies.labels(outcome)

    # ---- the reply path
    def reply_timer(self) -> "ReplyTimer":
        """A timer for one message: started now, fed by the answer's first text and its end."""
        return ReplyTimer(self)

    def note_channel(self, channel_id: str) -> None:
        """The bot answered in this channel now (kept in memory only, to count active channels). Kept in the
        order of their last answer, so past the bound (all of them active within the window) the tenth
        answered longest ago goes: the figure then reads the bound, and memory stays bounded."""
        now = self.clock()
        self._active.pop(channel_id, None)
        self._active[channel_id] = now
        if len(self._active) > ACTIVE_CHANNELS_BOUND:
            self._prune(now)
            if len(self._active) > ACTIVE_CHANNELS_BOUND:
                for stale in list(self._active)[: ACTIVE_CHANNELS_BOUND // 10]:
                    del self._active[stale]

    def _prune(self, now: float) -> None:
        horizon = now - self.active_channel_seconds
        self._active = {c: t for c, t in self._active.items() if t >= horizon}

    def _count_active(self) -> float:
        self._prune(self.clock())
        return float(len(self._active))

    # ---- model calls
    def model_call(self, kind: str) -> None:
        self.model_calls.labels(_label(kind, KINDS)).inc()

    def model_failure(self, kind: str, error: BaseException) -> None:
        self.model_failures.labels(_label(kind, KINDS), failure_reason(error)).inc()

    def model_tokens(self, kind: str, prompt: int, completion: int) -> None:
        kind = _label(kind, KINDS)
        if prompt:
            self.tokens.labels(kind, "prompt").inc(prompt)
        if completion:
            self.tokens.labels(kind, "completion").inc(completion)

    def observer(self, kind: str | None = None) -> "ModelCallObserver":
        """A LangChain callback counting model calls; ``kind`` None means "from the graph node"."""
        return ModelCallObserver(self, kind)

    # ---- the rest
    def erasure(self, scope: str) -> None:
        self.erasures.labels(_label(scope, SCOPES)).inc()

    def set_backlog(self, backlog: Backlog) -> None:
        self.backlog_turns.set(backlog.turns)
        self.backlog_age.set(max(0.0, backlog.oldest_age_seconds))

    def watch(self, gauge: Gauge, read: Callable[[], float]) -> None:
        """Read ``gauge`` from ``read()`` at every scrape (for figures the bot already knows)."""
        gauge.set_function(read)

    def add_refresher(self, refresh: Refresher) -> None:
        """An async step run before each scrape (figures that need a database read)."""
        self._refreshers.append(refresh)

    async def refresh(self, timeout: float = 5.0) -> None:
        """Run the refreshers; one that fails or hangs leaves its figures as they were, and is logged."""
        for refresh in self._refreshers:
            try:
                await asyncio.wait_for(refresh(), timeout)
            except Exception as exc:  # noqa: BLE001 - a scrape must still answer
                # one line (a database outage would add a traceback to every scrape); the details at DEBUG
                log.warning("refreshing a metric failed (%s); serving the previous value", type(exc).__name__)
                log.debug("refreshing a metric failed", exc_info=True)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)


class ReplyTimer:
    """Latency of one answer: to its first text and to its end, observed once each."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.started = metrics.clock()
        self._first_seen = False

    def first_text(self) -> None:
        if not self._first_seen:
            self._first_seen = True
            self.metrics.reply_first_text.observe(self.metrics.clock() - self.started)

    def wrap(self, on_delta: Callable[[str], None] | None) -> Callable[[str], None]:
        """``on_delta`` that also marks the first streamed text."""

        def delta(text: str) -> None:
            if text:
                self.first_text()
            if on_delta is not None:
                on_delta(text)

        return delta

    def answered(self) -> None:
        self.first_text()  # not streamed: the whole answer is its first text
        self.metrics.reply_full.observe(self.metrics.clock() - self.started)
        self.metrics.replies.labels("answered").inc()

    def failed(self, error: BaseException) -> None:
        timed_out = isinstance(error, (TimeoutError, asyncio.TimeoutError))
        self.metrics.replies.labels("timed_out" if timed_out else "failed").inc()


class ModelCallObserver(BaseCallbackHandler):
    """Counts every model call the graphs make (Trustcall's retries included), with tokens and failures.

    Runs inline in the event loop (``run_inline``): it only bumps counters. The kind of a call is fixed
    (extraction) or read from the LangGraph node that made it.
    """

    run_inline = True

    def __init__(self, metrics: Metrics, kind: str | None = None) -> None:
        super().__init__()
        self.metrics = metrics
        self.kind = kind
        self._kinds: dict[UUID, str] = {}

    def _start(self, run_id: UUID, metadata: dict | None) -> None:
        kind = self.kind or NODE_KINDS.get((metadata or {}).get("langgraph_node", ""), "other")
        if len(self._kinds) < 10_000:  # bounded even if a run never ends
            self._kinds[run_id] = kind
        self.metrics.model_call(kind)

    def on_chat_model_start(self, serialized: dict[str, Any], messages: list[list[BaseMessage]], *, run_id: UUID,
                            metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self._start(run_id, metadata)

    def on_llm_start(self, serialized: dict[str, Any], prompts: list[str], *, run_id: UUID,
                     metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self._start(run_id, metadata)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        kind = self._kinds.pop(run_id, self.kind or "other")
        prompt = completion = 0
        for generations in response.generations:
            for g in generations:
                meta = getattr(getattr(g, "message", None), "usage_metadata", None) or {}
                prompt += int(meta.get("input_tokens", 0))
                completion += int(meta.get("output_tokens", 0))
        self.metrics.model_tokens(kind, prompt, completion)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        kind = self._kinds.pop(run_id, self.kind or "other")
        self.metrics.model_failure(kind, error)
