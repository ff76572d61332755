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


async def test_a_model_servers_error_body_and_request_lines_stay_below_info(tmp_path, log_stream):
    """Some OpenAI-compatible servers quote the request in a 400's body, which the client puts in the
    exception's text; and the client's HTTP library logs every request at INFO. Both stay out."""
    from langchain_core.messages import HumanMessage as Human

    from tests.conftest import make_settings, real_chat_model
    from tests.fakes.openai_server import FakeOpenAIServer, Reply

    def echoing(request: dict) -> Reply:
        said = request["messages"][-1]["content"]
        return Reply(status=400, error_body={"error": {"message": f"could not parse message 3:\nnear: {said}",
                                                       "type": "x"}})

    async with FakeOpenAIServer(handler=echoing) as server:
        settings = make_settings(tmp_path, model={"base_url": server.base_url, "streaming": False, "max_retries": 0})
        async with real_chat_model(settings) as model:
            try:
                await model.ainvoke([Human(f"my secret is {CANARY}")])
            except Exception as exc:  # noqa: BLE001 - logged as the chat cog does
                logging.getLogger("cogs.chat").error("answering failed: %r", exc, exc_info=exc)
    text = log_stream.getvalue()
    assert "Error code: 400" in text and "answering failed" in text
    assert CANARY not in text and "POST" not in text
