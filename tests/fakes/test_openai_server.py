"""Prove FakeOpenAIServer works with the REAL ChatDeepSeek client (and trustcall)."""

from __future__ import annotations

import aiohttp
import openai
import pytest
import pytest_asyncio
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_deepseek import ChatDeepSeek
from pydantic import BaseModel

from bot.engine.model import model_http_client
from tests.fakes.openai_server import (
    FakeOpenAIServer,
    Reply,
    ToolCall,
    echo_reply,
    trustcall_patch_call,
    trustcall_remove_call,
)


class Memory(BaseModel):
    """A fact worth remembering about the user."""

    content: str


def make_llm(server: FakeOpenAIServer, **kwargs) -> ChatDeepSeek:
    """A real ChatDeepSeek on the fake server, its connection pool closed with the server's fixture (left
    to garbage collection, it would be closed on some later test's event loop, and fail there)."""
    kwargs.setdefault("max_retries", 0)
    pool = model_http_client()
    server.pools.append(pool)
    return ChatDeepSeek(model="deepseek-chat", api_key="test-key", api_base=server.base_url,
                        http_async_client=pool, **kwargs)


@pytest_asyncio.fixture
async def server():
    async with FakeOpenAIServer() as srv:
        srv.pools = []
        yield srv
        for pool in srv.pools:
            await pool.aclose()


@pytest.mark.asyncio
async def test_ainvoke_gets_scripted_text_and_request_is_recorded(server):
    server.queue_text("hello there")
    llm = make_llm(server)
    msg = await llm.ainvoke([SystemMessage("be nice"), HumanMessage("hi bot")])
    assert msg.content == "hello there"
    assert server.calls == 1
    req = server.requests[0]
    assert req["path"] == "/v1/chat/completions"  # openai SDK appends /chat/completions
    assert req["headers"]["authorization"] == "Bearer test-key"
    assert req["json"]["model"] == "deepseek-chat"
    assert req["json"]["messages"] == [
        {"role": "system", "content": "be nice"},
        {"role": "user", "content": "hi bot"},
    ]


@pytest.mark.asyncio
async def test_usage_metadata_is_populated_and_grows_with_prompt(server):
    llm = make_llm(server)
    small = await llm.ainvoke("hi")
    big = await llm.ainvoke("hi " * 400)
    assert small.content == big.content == "ok"  # stock default reply
    for m in (small, big):
        u = m.usage_metadata
        assert u["input_tokens"] > 0 and u["output_tokens"] > 0
        assert u["total_tokens"] == u["input_tokens"] + u["output_tokens"]
    assert big.usage_metadata["input_tokens"] > small.usage_metadata["input_tokens"] + 200
    assert small.response_metadata["finish_reason"] == "stop"


@pytest.mark.asyncio
async def test_bind_tools_forced_choice_returns_parsed_tool_call(server):
    server.queue_tool_call("Memory", {"content": "likes bikes"})
    llm = make_llm(server).bind_tools([Memory], tool_choice="Memory")
    msg = await llm.ainvoke("remember I like bikes")
    assert msg.tool_calls == [
        {"name": "Memory", "args": {"content": "likes bikes"}, "id": msg.tool_calls[0]["id"], "type": "tool_call"}
    ]
    assert msg.tool_calls[0]["id"].startswith("call_")
    assert msg.response_metadata["finish_reason"] == "tool_calls"
    sent = server.last_request
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "Memory"}}
    assert sent["tools"][0]["function"]["name"] == "Memory"


@pytest.mark.asyncio
async def test_several_tool_calls_in_one_reply(server):
    server.queue_tool_calls([("Memory", {"content": "a"}), ("Memory", {"content": "b"})])
    msg = await make_llm(server).bind_tools([Memory]).ainvoke("x")
    assert [tc["args"] for tc in msg.tool_calls] == [{"content": "a"}, {"content": "b"}]
    assert len({tc["id"] for tc in msg.tool_calls}) == 2


@pytest.mark.asyncio
async def test_default_reply_honours_forced_tool_choice(server):
    msg = await make_llm(server).bind_tools([Memory], tool_choice="Memory").ainvoke("x")
    assert [(tc["name"], tc["args"]) for tc in msg.tool_calls] == [("Memory", {})]


@pytest.mark.asyncio
async def test_custom_default_and_handler(server):
    server.default = echo_reply
    llm = make_llm(server)
    assert (await llm.ainvoke("parrot me")).content == "parrot me"

    async def handler(req: dict) -> Reply:
        return Reply(text=f"{len(req['messages'])} messages")

    server.queue_text("never used")  # handler takes precedence over the queue
    server.handler = handler
    assert (await llm.ainvoke([HumanMessage("a"), HumanMessage("b")])).content == "2 messages"
    server.handler = lambda req: "sync handler"
    assert (await llm.ainvoke("x")).content == "sync handler"
    assert server.pending == 1


@pytest.mark.asyncio
async def test_astream_yields_several_chunks_joining_to_text(server):
    text = "Streaming works across several chunks."
    server.queue_text(text)
    chunks = [c async for c in make_llm(server).astream("go", stream_usage=True)]
    contents = [c.content for c in chunks if c.content]
    assert len(contents) >= 3
    assert "".join(contents) == text
    total = chunks[0]
    for c in chunks[1:]:
        total = total + c
    assert total.content == text
    assert total.usage_metadata["input_tokens"] > 0 and total.usage_metadata["output_tokens"] > 0
    assert total.response_metadata["finish_reason"] == "stop"
    sent = server.last_request
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


@pytest.mark.asyncio
async def test_astream_tool_calls(server):
    server.queue_tool_calls([("Memory", {"content": "streamed fact"}), ("Memory", {"content": "two"})])
    llm = make_llm(server).bind_tools([Memory])
    total = None
    n = 0
    async for c in llm.astream("x"):
        total = c if total is None else total + c
        n += 1
    assert n > 4
    assert [tc["args"] for tc in total.tool_calls] == [{"content": "streamed fact"}, {"content": "two"}]
    assert total.response_metadata["finish_reason"] == "tool_calls"


@pytest.mark.asyncio
async def test_injected_500_raises(server):
    server.queue_server_error()
    with pytest.raises(openai.InternalServerError):
        await make_llm(server).ainvoke("x")
    # queue consumed: next call falls back to the default reply
    assert (await make_llm(server).ainvoke("x")).content == "ok"


@pytest.mark.asyncio
async def test_429_with_retry_after_is_retried_by_sdk(server):
    server.queue_rate_limit(retry_after=0)
    with pytest.raises(openai.RateLimitError) as exc:
        await make_llm(server).ainvoke("x")
    assert exc.value.response.headers["retry-after"] == "0"
    assert exc.value.status_code == 429
    server.queue_rate_limit(retry_after=0)
    server.queue_text("after retry")
    msg = await make_llm(server, max_retries=1).ainvoke("x")
    assert msg.content == "after retry" and server.calls == 3


@pytest.mark.asyncio
async def test_delay_longer_than_client_timeout(server):
    server.queue_delay(5, then="too late")
    with pytest.raises(openai.APITimeoutError):
        await make_llm(server, timeout=0.3).ainvoke("x")
    assert (await make_llm(server).ainvoke("x")).content == "ok"


@pytest.mark.asyncio
async def test_malformed_tool_call_arguments(server):
    server.queue_malformed_tool_call("Memory")
    msg = await make_llm(server).bind_tools([Memory]).ainvoke("x")
    assert msg.tool_calls == []
    assert msg.invalid_tool_calls[0]["name"] == "Memory"
    assert msg.invalid_tool_calls[0]["args"] == '{"content": "unterminated'


@pytest.mark.asyncio
async def test_raw_http_models_and_unprefixed_path(server):
    server.queue(Reply(tool_calls=[ToolCall("f", "not json", id="call_x")]))
    root = server.base_url.removesuffix("/v1")
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{server.base_url}/models") as r:
            assert "deepseek-chat" in [m["id"] for m in (await r.json())["data"]]
        async with s.post(f"{root}/chat/completions", json={"model": "m", "messages": []}) as r:
            data = await r.json()
        async with s.post(f"{root}/chat/completions", data="{broken") as r:
            assert r.status == 400
    assert data["object"] == "chat.completion" and data["model"] == "m"
    choice = data["choices"][0]
    assert choice["message"]["content"] is None
    assert choice["message"]["tool_calls"] == [
        {"id": "call_x", "type": "function", "function": {"name": "f", "arguments": "not json"}}]
    assert data["usage"]["total_tokens"] == data["usage"]["prompt_tokens"] + data["usage"]["completion_tokens"]
    assert server.requests[0]["path"] == "/chat/completions"


# --------------------------------------------------------------------------- trustcall


@pytest.mark.asyncio
async def test_trustcall_extracts_new_memory(server):
    from trustcall import create_extractor

    server.queue_tool_call("Memory", {"content": "likes bikes"})
    extractor = create_extractor(make_llm(server), tools=[Memory], tool_choice="Memory", enable_inserts=True)
    result = await extractor.ainvoke({"messages": [("user", "I like bikes")]})
    assert len(result["responses"]) == 1
    assert isinstance(result["responses"][0], Memory)
    assert result["responses"][0].content == "likes bikes"
    assert server.calls == 1
    assert server.last_request["tool_choice"] == {"type": "function", "function": {"name": "Memory"}}


@pytest.mark.asyncio
async def test_trustcall_patches_existing_doc(server):
    from trustcall import create_extractor

    server.queue_tool_calls([
        trustcall_patch_call("k1", "replace content", [{"op": "replace", "path": "/content", "value": "new"}]),
    ])
    extractor = create_extractor(make_llm(server), tools=[Memory], tool_choice="Memory", enable_inserts=True)
    result = await extractor.ainvoke({"messages": [("user", "actually new")],
                                      "existing": [("k1", "Memory", {"content": "old"})]})
    assert [r.content for r in result["responses"]] == ["new"]
    assert isinstance(result["responses"][0], Memory)
    assert result["response_metadata"][0]["json_doc_id"] == "k1"
    sent = server.last_request
    assert sorted(t["function"]["name"] for t in sent["tools"]) == ["Memory", "PatchDoc"]
    assert sent["tool_choice"] == "required"  # trustcall's "any" -> OpenAI "required"
    assert "<instance id=k1 schema_type=\"Memory\">" in sent["messages"][0]["content"]


@pytest.mark.asyncio
async def test_trustcall_remove_doc(server):
    from trustcall import create_extractor

    server.queue_tool_calls([
        trustcall_remove_call("k1"),
        trustcall_patch_call("k2", "update", [{"op": "replace", "path": "/content", "value": "k2 new"}]),
        ("Memory", {"content": "brand new"}),
    ])
    extractor = create_extractor(make_llm(server), tools=[Memory], tool_choice="Memory",
                                 enable_inserts=True, enable_deletes=True)
    result = await extractor.ainvoke({"messages": [("user", "forget k1")],
                                      "existing": [("k1", "Memory", {"content": "old"}),
                                                   ("k2", "Memory", {"content": "k2 old"})]})
    responses, meta = result["responses"], result["response_metadata"]
    assert [type(r).__name__ for r in responses] == ["RemoveDoc", "Memory", "Memory"]
    assert responses[0].json_doc_id == "k1"
    assert "json_doc_id" not in meta[0]  # deletions carry the id on the RemoveDoc itself
    assert (responses[1].content, meta[1]["json_doc_id"]) == ("k2 new", "k2")
    assert responses[2].content == "brand new" and "json_doc_id" not in meta[2]
    sent = server.last_request
    assert sorted(t["function"]["name"] for t in sent["tools"]) == ["Memory", "PatchDoc", "RemoveDoc"]
    assert sent["tool_choice"] == "required"
