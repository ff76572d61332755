"""The real ChatDeepSeek client, end to end, against a fake OpenAI-compatible endpoint on 127.0.0.1.

Replies (streamed) and Trustcall extraction (tool calls) both cross real HTTP, so request building,
response parsing, SSE streaming and tool-call decoding are exercised, not mocked.
"""

from __future__ import annotations

import base64
import re

import pytest
from langchain_deepseek import ChatDeepSeek
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from bot.engine.engine import create_engine
from bot.engine.state import Image, Incoming, Speaker
from bot.storage import open_storage
from tests.conftest import make_settings, real_chat_model
from tests.fakes.images import png, sqlite_holding
from tests.fakes.openai_server import FakeOpenAIServer, Reply, ToolCall

FACT = re.compile(r"(my name is \w+|I (?:also )?(?:like|enjoy) [\w ]+)", re.IGNORECASE)


def model_logic(request: dict) -> Reply:
    """A stand-in for DeepSeek: facts as Memory tool calls for extraction, plain text for chat."""
    if request.get("tools"):
        # Like a real model, read the transcript wherever it is in the conversation (Trustcall appends
        # repair prompts after it when a call failed).
        marker = "New messages to learn from"
        texts = [m.get("content") or "" for m in request["messages"] if marker in (m.get("content") or "")]
        body = texts[-1].split(marker, 1)[-1] if texts else ""
        said, in_reply = [], False
        for line in body.splitlines():  # the person's text is indented under "#n ..." headers
            if line.startswith("#"):
                in_reply = False
            elif line.startswith("  the assistant answered"):
                in_reply = True
            elif line.startswith("    | ") and not in_reply:
                said.append(line[6:])
        facts = [m.group(1).strip() for line in said for m in FACT.finditer(line)]
        return Reply(tool_calls=[ToolCall("Memory", {"content": f}) for f in facts])
    return Reply(text="Here is a thoughtful answer, streamed in pieces.")


async def test_seed_scenario_over_http_with_chatdeepseek(tmp_path):
    async with FakeOpenAIServer(handler=model_logic) as server:
        settings = make_settings(tmp_path, model={"base_url": server.base_url, "streaming": True})
        settings = settings.model_copy(
            update={"secrets": settings.secrets.model_copy(update={"model_api_key": SecretStr("sk-fake-key-123")})}
        )
        async with real_chat_model(settings) as model:
            assert isinstance(model, ChatDeepSeek)
        lance = Speaker(user_id="111", name="Lance", guild_id="900", channel_id="1", message_id="9")
        deltas: list[str] = []
        async with open_storage(settings) as storage:
            engine = create_engine(settings, storage)
            await engine.start()
            for text in ["Hi, my name is Lance", "I like to bike around San Francisco", "I also enjoy going to bakeries"]:
                reply = await engine.reply("1", lance, text, on_delta=deltas.append)
                assert reply.text == "Here is a thoughtful answer, streamed in pieces."
            await engine.scheduler.flush()
            memories = sorted(m.content for m in await engine.memories.list("111"))
            await engine.reply("2", lance, "What bakeries do you recommend for me?")
            await engine.close()

    assert memories == ["I also enjoy going to bakeries", "I like to bike around San Francisco", "my name is Lance"]
    chat = [r for r in server.requests if not r["json"].get("tools")]
    assert all(r["json"]["stream"] is True for r in chat)
    assert len(deltas) > 3 and deltas[-1] == "Here is a thoughtful answer, streamed in pieces."
    system = chat[-1]["json"]["messages"][0]["content"]
    assert all(m in system for m in memories)
    assert all(r["headers"]["authorization"] == "Bearer sk-fake-key-123" for r in server.requests)
    extraction = [r for r in server.requests if r["json"].get("tools")]
    # Thread 1's three messages were debounced into one extraction; thread 2's turn was flushed at close.
    assert len(extraction) == 2
    first = extraction[0]["json"]["messages"][-1]["content"]
    assert all(t in first for t in ["my name is Lance", "bike around", "bakeries"])
    async with open_storage(settings) as storage:
        usage = await storage.usage.totals()
    assert sum(u.prompt_tokens for u in usage) > 0


@pytest.mark.parametrize("provider, name, vision", [("openai_compatible", "gpt-4o-mini", "auto"),
                                                    ("deepseek", "deepseek-chat", "on")])
async def test_an_image_crosses_real_http_as_an_image_part(tmp_path, provider, name, vision):
    """ChatOpenAI (a vision model by name) and ChatDeepSeek (vision forced on, e.g. a compatible endpoint that
    takes images) both send the image as an OpenAI ``image_url`` part in the user message's content list."""
    picture = png(seed=99)
    url = f"data:image/png;base64,{base64.b64encode(picture).decode()}"
    async with FakeOpenAIServer(handler=model_logic) as server:
        settings = make_settings(tmp_path, model={"provider": provider, "name": name, "vision": vision,
                                                  "base_url": server.base_url, "streaming": True})
        assert settings.model.takes_images
        async with real_chat_model(settings) as model:
            assert isinstance(model, ChatOpenAI if provider == "openai_compatible" else ChatDeepSeek)
        lance = Speaker(user_id="111", name="Lance", guild_id="900", channel_id="1", message_id="9")
        image = Image("cat.png", "image/png", picture, width=32, height=32)
        async with open_storage(settings) as storage:
            engine = create_engine(settings, storage)
            await engine.start()
            reply = await engine.reply_to("1", [Incoming(lance, "what is this?\n[image: cat.png, 3 KB]",
                                                         images=(image,))])
            assert reply.text == "Here is a thoughtful answer, streamed in pieces."
            stored = (await engine.thread_state("1"))["messages"][0].content
            await engine.close()
    assert stored == "what is this?\n[image: cat.png, 3 KB]"
    (chat,) = [r["json"] for r in server.requests if not r["json"].get("tools")]
    user = [m for m in chat["messages"] if m["role"] == "user" and isinstance(m["content"], list)]
    (content,) = [m["content"] for m in user]
    assert content[0]["type"] == "text" and "what is this?" in content[0]["text"]
    assert {"type": "image_url", "image_url": {"url": url}} in content
    assert not sqlite_holding(tmp_path, picture)


@pytest.mark.parametrize("provider, field, sent", [("openai_compatible", None, "max_tokens"),
                                                   ("openai_compatible", "max_completion_tokens", "max_completion_tokens"),
                                                   ("deepseek", None, "max_tokens")])
async def test_the_answers_token_cap_goes_in_the_field_the_server_reads(tmp_path, provider, field, sent):
    """ChatOpenAI renames ``max_tokens`` to ``max_completion_tokens``, which llama.cpp's server and others
    ignore or refuse: an OpenAI-compatible server gets ``max_tokens`` unless the config names the other."""
    async with FakeOpenAIServer(handler=model_logic) as server:
        extra = {"max_tokens_field": field} if field else {}
        settings = make_settings(tmp_path, model={"provider": provider, "name": "local-model", "streaming": True,
                                                  "base_url": server.base_url, "max_output_tokens": 321, **extra})
        lance = Speaker(user_id="111", name="Lance", guild_id="900", channel_id="1", message_id="9")
        async with open_storage(settings) as storage:
            engine = create_engine(settings, storage)
            await engine.start()
            await engine.reply("1", lance, "hello")
            await engine.close()
    (chat,) = [r["json"] for r in server.requests if not r["json"].get("tools")]
    other = {"max_tokens", "max_completion_tokens"} - {sent}
    assert chat[sent] == 321 and not other & set(chat)

async def test_the_engine_owns_and_closes_its_models_connection_pool(tmp_path, monkeypatch):
    """Both models share one pool the engine closes: none is left for garbage collection to close on some
    later event loop (where it fails and asyncio logs an error in whatever runs then)."""
    import bot.engine.model

    pools = []

    def recorded():
        pools.append(make_pool())
        return pools[-1]

    make_pool = bot.engine.model.model_http_client
    monkeypatch.setattr(bot.engine.model, "model_http_client", recorded)
    async with FakeOpenAIServer(handler=model_logic) as server:
        settings = make_settings(tmp_path, model={"base_url": server.base_url})
        lance = Speaker(user_id="111", name="Lance", guild_id="900", channel_id="1", message_id="9")
        async with open_storage(settings) as storage:
            engine = create_engine(settings, storage)
            await engine.start()
            await engine.reply("1", lance, "Hi, my name is Lance")
            await engine.scheduler.flush()
            (pool,) = pools
            assert not pool.is_closed
            await engine.close()
    assert pool.is_closed
    assert [r for r in server.requests if r["json"].get("tools")], "extraction crossed HTTP too"


@pytest.mark.parametrize("what, transient", [("refused", True), ("timeout", True), ("500", True), ("429", True),
                                              ("401", True), ("403", True), ("404", True), ("400", False)])
async def test_the_real_clients_errors_are_told_apart_as_outages_or_not(tmp_path, what, transient):
    """An outage is waited out and the learning queue kept; anything else is a bug or bad input. The classes
    come from the real client (langchain-openai wraps openai's in its own subclasses, with no status code
    on a connection error or a timeout: a refused connection once counted as permanent and queued turns
    were dropped after three tries). A revoked key (401, 403) or a wrong base URL path (404) is the operator's
    to fix: learning waits for it as for an outage (until 2026-12-07 a new person's turns were dropped)."""
    import socket

    from langchain_core.messages import HumanMessage

    from bot.engine.errors import is_transient

    def failing(request: dict) -> Reply:
        if what == "timeout":
            return Reply(text="too late", delay=3)
        return Reply(status=int(what), error_body={"error": {"message": "no", "type": "x"}})

    async with FakeOpenAIServer(handler=failing) as server:
        base = server.base_url
        if what == "refused":
            with socket.socket() as s:  # a port nothing listens on
                s.bind(("127.0.0.1", 0))
                base = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
        settings = make_settings(tmp_path, model={"base_url": base, "streaming": False, "timeout_seconds": 1,
                                                  "max_retries": 0})
        async with real_chat_model(settings) as model:
            with pytest.raises(Exception) as raised:
                await model.ainvoke([HumanMessage("hello")])
        assert is_transient(raised.value) is transient, type(raised.value).__mro__
