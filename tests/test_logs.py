"""Logs: no message or memory text at INFO or above, whoever logged it (Trustcall quotes model output)."""

from __future__ import annotations

import io
import logging
import sys

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from pydantic import BaseModel, ValidationError
from trustcall import create_extractor

from bot.engine.memories.records import Memory
from bot.logs import setup_logging
from tests.conftest import ScriptedChatModel, tool_call

CANARY = "canary-memory-text-5e1f"


@pytest.fixture
def log_stream(monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    setup_logging("INFO", ["sk-not-a-real-key-123"])
    yield stream
    root.handlers[:], _ = saved
    root.setLevel(saved[1])


async def test_trustcall_validation_errors_reach_the_log_without_the_text(log_stream):
    model = ScriptedChatModel(lambda call: AIMessage(content="", tool_calls=[
        tool_call("Memory", {"content": {"nested": CANARY}})]))
    extractor = create_extractor(model, tools=[Memory], tool_choice="Memory")
    await extractor.ainvoke({"messages": [HumanMessage(content=f"I like {CANARY}")]})
    text = log_stream.getvalue()
    assert "extraction reported" in text, "Trustcall's error is still reported"
    assert CANARY not in text


def test_pydantic_input_values_are_withheld_from_any_logger(log_stream):
    class Doc(BaseModel):
        count: int

    try:
        Doc.model_validate({"count": f"the text {CANARY}"})
    except ValidationError as exc:
        logging.getLogger("some.library").warning("bad input: %s", exc)
        try:
            raise RuntimeError("wrapped") from exc
        except RuntimeError:
            logging.getLogger("another.library").exception("failed")
    logging.getLogger("bot.engine.x").debug("debug keeps detail: %s", "fine")
    text = log_stream.getvalue()
    assert "bad input" in text and "input_value=[text withheld]" in text
    assert CANARY not in text
