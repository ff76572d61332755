"""Metrics: fixed label vocabularies, the reply timer, the active-channel window, the model-call observer."""

from __future__ import annotations

import asyncio

from langchain_core.messages import HumanMessage

from bot.metrics import Metrics, failure_reason
from tests.conftest import ScriptedChatModel


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def value(m: Metrics, name: str, **labels: str) -> float:
    return m.registry.get_sample_value(name, labels) or 0.0


def test_failure_reasons_are_words_never_messages():
    class RateLimitError(Exception):
        pass

    class Status(Exception):
        status_code = 503

    assert failure_reason(asyncio.TimeoutError()) == "timeout"
    assert failure_reason(RateLimitError("user 802 said: my secret")) == "rate_limited"
    assert failure_reason(Status()) == "server_error"
    assert failure_reason(ConnectionResetError()) == "connection"
    assert failure_reason(asyncio.CancelledError()) == "cancelled"
    assert failure_reason(ValueError("Alice's text")) == "other"


def test_unknown_label_values_become_other():
    m = Metrics()
    m.model_call("802")  # a caller passing something it should not
    m.erasure("guild:900")
    assert value(m, "mnemo_model_calls_total", kind="other") == 1
    assert value(m, "mnemo_erasures_total", scope="other") == 1
    labels = {v for family in m.registry.collect() for s in family.samples for v in s.labels.values()}
    assert "802" not in labels and "guild:900" not in labels  # (numbers may appear in values: timestamps)


def test_reply_timer_observes_first_text_once_and_the_end():
    clock = Clock()
    m = Metrics(clock=clock)
    timer = m.reply_timer()
    seen = []
    delta = timer.wrap(seen.append)
    clock.now += 0.3
    delta("Hel")
    clock.now += 0.5
    delta("Hello")
    timer.answered()
    assert seen == ["Hel", "Hello"]
    assert abs(value(m, "mnemo_reply_first_text_seconds_sum") - 0.3) < 1e-9
    assert value(m, "mnemo_reply_first_text_seconds_count") == 1
    assert abs(value(m, "mnemo_reply_seconds_sum") - 0.8) < 1e-9
    m.reply_timer().failed(asyncio.TimeoutError())
    assert value(m, "mnemo_replies_total", outcome="timed_out") == 1
    assert value(m, "mnemo_replies_total", outcome="answered") == 1


def test_active_channels_count_only_recent_ones():
    clock = Clock()
    m = Metrics(clock=clock, active_channel_seconds=60)
    m.note_channel("1")
    clock.now += 30
    m.note_channel("2")
    m.note_channel("2")
    assert value(m, "mnemo_active_channels") == 2
    clock.now += 45
    assert value(m, "mnemo_active_channels") == 1


def test_active_channels_stay_bounded_when_all_of_them_are_recent(monkeypatch):
    """Found in review 2026-12-07 (fourteenth session): past the bound, with every channel active within
    the window, pruning freed nothing and the map grew (each answer rebuilding it)."""
    from bot import metrics

    monkeypatch.setattr(metrics, "ACTIVE_CHANNELS_BOUND", 100)
    clock = Clock()
    m = Metrics(clock=clock, active_channel_seconds=3600)
    for i in range(1000):
        m.note_channel(str(i))
    assert 90 <= value(m, "mnemo_active_channels") <= 100
    assert "999" in m._active and "0" not in m._active  # the longest ago go first


async def test_observer_counts_calls_tokens_and_failures_of_a_real_chat_model():
    m = Metrics()
    calls = iter(["an answer", ConnectionError("down")])

    def script(call):
        out = next(calls)
        if isinstance(out, Exception):
            raise out
        return out

    model = ScriptedChatModel(script)
    config = {"callbacks": [m.observer("summary")]}
    await model.ainvoke([HumanMessage(content="hello")], config=config)
    try:
        await model.ainvoke([HumanMessage(content="hello")], config=config)
    except ConnectionError:
        pass
    assert value(m, "mnemo_model_calls_total", kind="summary") == 2
    assert value(m, "mnemo_model_failures_total", kind="summary", reason="connection") == 1
    assert value(m, "mnemo_model_tokens_total", kind="summary", direction="prompt") > 0


async def test_a_failing_refresher_keeps_the_previous_figures():
    m = Metrics()

    async def broken() -> None:
        raise OSError("database is locked")

    m.add_refresher(broken)
    m.backlog_turns.set(7)
    await m.refresh()
    assert value(m, "mnemo_learning_backlog_turns") == 7
