"""A fake OpenAI-compatible chat-completions server for tests and benchmarks.

Why a real HTTP server instead of mocking the client: the bot talks to DeepSeek
through ``langchain_deepseek.ChatDeepSeek`` -> ``openai.AsyncOpenAI`` -> httpx.
Mocking any of those layers skips the request serialisation, response parsing,
SSE streaming, retry and timeout logic we actually depend on.  Pointing the
real client at this server (``api_base=server.base_url``) exercises all of it.

The openai SDK posts to ``base_url + "/chat/completions"``, so with
``base_url == "http://127.0.0.1:PORT/v1"`` requests hit ``/v1/chat/completions``.
``/chat/completions`` (no ``/v1``) is served too, plus ``GET /v1/models``.

Choosing the reply for a request (first match wins):

1. ``server.handler`` if set: ``handler(request_json) -> Reply | str``
   (sync or async) answers *every* request.
2. Otherwise the FIFO queue filled by ``queue_text`` / ``queue_tool_call`` /
   ``queue_error`` / ``queue_delay`` / ``queue`` (entries may also be callables
   like ``handler``).
3. When the queue is empty, ``server.default(request_json)``; the stock
   :func:`default_reply` returns a tool call with ``{}`` arguments when
   ``tool_choice`` forces one function, and the text ``"ok"`` otherwise.
   Replace it with e.g. :func:`echo_reply` or ``lambda req: Reply("hi")``.

The server runs on the caller's event loop, so drive it with async clients
(``ainvoke``/``astream``); a sync ``invoke`` in the same loop would deadlock.
For sync or out-of-process use (benchmarks, manual runs) start it standalone:
``python -m tests.fakes.openai_server --port 8089 --text hi`` (or ``--echo``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import itertools
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Union

from aiohttp import web

log = logging.getLogger(__name__)

Arguments = Union[dict, str]  # a str is sent verbatim (lets tests send broken JSON)


@dataclass
class ToolCall:
    """One function call in an assistant message; ``id`` is generated if None."""

    name: str
    arguments: Arguments = field(default_factory=dict)
    id: str | None = None


@dataclass
class Reply:
    """What the server should answer to one request.

    ``status != 200`` turns it into an OpenAI-style error response with
    ``error_body`` (dict or str) and ``headers`` (e.g. ``Retry-After``).
    ``delay`` seconds are slept before answering (to trip client timeouts).
    """

    text: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    status: int = 200
    error_body: dict | str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    finish_reason: str | None = None  # default: "tool_calls" if tool_calls else "stop"


Handler = Callable[[dict], Union[Reply, str, Awaitable[Union[Reply, str]]]]


def default_reply(request: dict) -> Reply:
    """Stock fallback: honour a forced ``tool_choice`` with ``{}`` args, else "ok"."""
    choice = request.get("tool_choice")
    if request.get("tools") and isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        if name:
            return Reply(tool_calls=[ToolCall(name, {})])
    return Reply(text="ok")


def echo_reply(request: dict) -> Reply:
    """Reply with the text of the last user message (handy for manual testing)."""
    for msg in reversed(request.get("messages") or []):
        if msg.get("role") == "user":
            content = msg.get("content")
            if isinstance(content, list):  # multi-part content
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            return Reply(text=str(content or ""))
    return Reply(text="")


def trustcall_patch_call(json_doc_id: str, planned_edits: str, patches: list[dict]) -> tuple[str, dict]:
    """Tool call trustcall expects to *update* an existing doc (its ``PatchDoc`` tool).

    ``patches`` are RFC 6902 ops restricted to add/remove/replace, e.g.
    ``[{"op": "replace", "path": "/content", "value": "new"}]``.
    """
    return "PatchDoc", {"json_doc_id": json_doc_id, "planned_edits": planned_edits, "patches": patches}


def trustcall_remove_call(json_doc_id: str) -> tuple[str, dict]:
    """Tool call trustcall expects to *delete* a doc (``RemoveDoc``; needs enable_deletes)."""
    return "RemoveDoc", {"json_doc_id": json_doc_id}


def estimate_tokens(obj: Any) -> int:
    """~4 chars per token: crude, but non-zero and growing with the payload."""
    text = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
    return max(1, len(text) // 4)


class FakeOpenAIServer:
    """aiohttp server speaking enough of the OpenAI chat-completions API for ChatDeepSeek.

    Every chat-completion request is appended to ``requests`` as
    ``{"method", "path", "headers" (lower-cased keys), "json"}``; ``calls`` is
    ``len(requests)``.  ``/v1/models`` hits are not recorded.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, handler: Handler | None = None,
                 default: Handler = default_reply, chunk_chars: int = 4, chunk_delay: float = 0.0,
                 models: tuple[str, ...] = ("deepseek-chat", "deepseek-reasoner")) -> None:
        self.host, self.port = host, port
        self.handler = handler
        self.default = default
        self.chunk_chars = chunk_chars  # stream text/arguments in pieces this long
        self.chunk_delay = chunk_delay  # seconds between SSE chunks (benchmarks)
        self.models = models
        self.requests: list[dict] = []
        self._queue: list[Reply | Handler] = []
        self._runner: web.AppRunner | None = None
        self._ids = itertools.count(1)
        # Embeddings: ``embed(text) -> list[float]``; ``embed_status`` != 200 makes /embeddings fail.
        self.embed: Callable[[str], list[float]] = lambda text: [float(len(text) % 7), 1.0, 0.5]
        self.embed_status = 200
        self.embedding_requests: list[dict] = []

    # -- lifecycle -------------------------------------------------------
    async def start(self) -> "FakeOpenAIServer":
        app = web.Application()
        for prefix in ("/v1", ""):
            app.router.add_post(f"{prefix}/chat/completions", self._chat)
            app.router.add_get(f"{prefix}/models", self._models)
            app.router.add_post(f"{prefix}/embeddings", self._embeddings)
        # handler_cancellation: abandon a sleeping handler when the client times
        # out; short shutdown_timeout so stop() never waits on a stuck delay.
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.5,
                                     access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]  # resolve port 0
        log.info("fake OpenAI server listening on %s", self.base_url)
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> "FakeOpenAIServer":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def calls(self) -> int:
        return len(self.requests)

    @property
    def last_request(self) -> dict:
        return self.requests[-1]["json"]

    # -- scripting -------------------------------------------------------
    def queue(self, reply: Reply | str | Handler) -> "FakeOpenAIServer":
        """Append a Reply, plain text, or per-request callable to the FIFO."""
        self._queue.append(Reply(text=reply) if isinstance(reply, str) else reply)
        return self

    def queue_text(self, text: str, *, delay: float = 0.0) -> "FakeOpenAIServer":
        return self.queue(Reply(text=text, delay=delay))

    def queue_tool_call(self, name: str, arguments: Arguments | None = None, *,
                        text: str | None = None, delay: float = 0.0) -> "FakeOpenAIServer":
        return self.queue_tool_calls([(name, {} if arguments is None else arguments)], text=text, delay=delay)

    def queue_tool_calls(self, calls: list[tuple[str, Arguments]], *, text: str | None = None,
                         delay: float = 0.0) -> "FakeOpenAIServer":
        """Several tool calls in ONE assistant message (parallel tool calling)."""
        return self.queue(Reply(text=text, tool_calls=[ToolCall(n, a) for n, a in calls], delay=delay))

    def queue_error(self, status: int, body: dict | str | None = None, *,
                    headers: dict[str, str] | None = None) -> "FakeOpenAIServer":
        return self.queue(Reply(status=status, error_body=body, headers=dict(headers or {})))

    def queue_rate_limit(self, retry_after: float = 1) -> "FakeOpenAIServer":
        """HTTP 429 with ``Retry-After`` (the openai SDK honours it when retrying)."""
        return self.queue_error(429, {"error": {"message": "Rate limit reached", "type": "rate_limit_error",
                                                "code": "rate_limit_exceeded"}},
                                headers={"Retry-After": str(retry_after)})

    def queue_server_error(self, status: int = 500) -> "FakeOpenAIServer":
        return self.queue_error(status)

    def queue_delay(self, seconds: float, then: Reply | str | None = None) -> "FakeOpenAIServer":
        """Sleep ``seconds`` then answer ``then`` (default: ``self.default``'s reply)."""
        if then is None:
            async def delayed(req: dict) -> Reply:
                reply = await _resolve(self.default, req)
                reply.delay = seconds
                return reply
            return self.queue(delayed)
        reply = Reply(text=then) if isinstance(then, str) else then
        reply.delay = seconds
        return self.queue(reply)

    def queue_malformed_tool_call(self, name: str, raw_arguments: str = '{"content": "unterminated'
                                  ) -> "FakeOpenAIServer":
        """Tool call whose ``arguments`` string is not valid JSON."""
        return self.queue_tool_call(name, raw_arguments)

    @property
    def pending(self) -> int:
        """Queued replies not consumed yet."""
        return len(self._queue)

    def reset(self) -> None:
        self._queue.clear()
        self.requests.clear()

    # -- HTTP handlers ---------------------------------------------------
    async def _embeddings(self, request: web.Request) -> web.Response:
        """OpenAI ``/embeddings``: one vector per input string, from ``self.embed``."""
        body = await request.json()
        self.embedding_requests.append(body)
        if self.embed_status != 200:
            return _error(self.embed_status, "embeddings unavailable")
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = [{"object": "embedding", "index": i, "embedding": self.embed(str(t))} for i, t in enumerate(inputs)]
        return web.json_response({"object": "list", "data": data, "model": body.get("model", "fake"),
                                  "usage": {"prompt_tokens": 1, "total_tokens": 1}})

    async def _models(self, request: web.Request) -> web.Response:
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.models]
        return web.json_response({"object": "list", "data": data})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        if not isinstance(body, dict):
            return _error(400, "request body must be a JSON object")
        self.requests.append({"method": request.method, "path": request.path, "json": body,
                              "headers": {k.lower(): v for k, v in request.headers.items()}})
        source = self.handler or (self._queue.pop(0) if self._queue else self.default)
        reply = await _resolve(source, body)
        log.debug("request #%d (%s, stream=%s) -> %r", self.calls, request.path, body.get("stream"), reply)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.status != 200:
            return _error(reply.status, reply.error_body, reply.headers)
        if body.get("stream"):
            return await self._stream(request, body, reply)
        return web.json_response(self._completion(body, reply), headers=reply.headers)

    # -- payload building ------------------------------------------------
    def _tool_calls(self, reply: Reply) -> list[dict]:
        out = []
        for tc in reply.tool_calls:
            args = tc.arguments if isinstance(tc.arguments, str) else json.dumps(tc.arguments)
            tc.id = tc.id or f"call_{uuid.uuid4().hex[:24]}"
            out.append({"id": tc.id, "type": "function", "function": {"name": tc.name, "arguments": args}})
        return out

    def _usage(self, body: dict, reply: Reply, tool_calls: list[dict]) -> dict:
        prompt = estimate_tokens(body.get("messages") or [])
        completion = estimate_tokens((reply.text or "") + "".join(t["function"]["arguments"] for t in tool_calls))
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def _envelope(self, body: dict, obj: str, cid: str) -> dict:
        return {"id": cid, "object": obj, "created": int(time.time()),
                "model": body.get("model") or "deepseek-chat", "system_fingerprint": "fp_fake"}

    def _completion(self, body: dict, reply: Reply) -> dict:
        tool_calls = self._tool_calls(reply)
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if tool_calls:
            message["tool_calls"] = tool_calls
        finish = reply.finish_reason or ("tool_calls" if tool_calls else "stop")
        return {**self._envelope(body, "chat.completion", f"chatcmpl-{next(self._ids)}"),
                "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                "usage": self._usage(body, reply, tool_calls)}

    def _pieces(self, text: str) -> list[str]:
        n = max(1, self.chunk_chars)
        return [text[i:i + n] for i in range(0, len(text), n)]

    async def _stream(self, request: web.Request, body: dict, reply: Reply) -> web.StreamResponse:
        """SSE: role chunk, content/tool-call deltas, finish chunk, [usage], [DONE]."""
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           **reply.headers})
        await resp.prepare(request)
        env = self._envelope(body, "chat.completion.chunk", f"chatcmpl-{next(self._ids)}")
        tool_calls = self._tool_calls(reply)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        async def send(delta: dict, finish: str | None = None, **extra: Any) -> None:
            chunk = {**env, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
                     **extra}
            if include_usage and "usage" not in chunk:
                chunk["usage"] = None
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            if self.chunk_delay:
                await asyncio.sleep(self.chunk_delay)

        await send({"role": "assistant", "content": ""})
        for piece in self._pieces(reply.text or ""):
            await send({"content": piece})
        for index, tc in enumerate(tool_calls):
            fn = tc["function"]
            await send({"tool_calls": [{"index": index, "id": tc["id"], "type": "function",
                                        "function": {"name": fn["name"], "arguments": ""}}]})
            for piece in self._pieces(fn["arguments"]):
                await send({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        await send({}, reply.finish_reason or ("tool_calls" if tool_calls else "stop"))
        if include_usage:
            usage_chunk = {**env, "choices": [], "usage": self._usage(body, reply, tool_calls)}
            await resp.write(f"data: {json.dumps(usage_chunk)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


async def _resolve(source: Reply | Handler, body: dict) -> Reply:
    """Turn a queued Reply / handler result (maybe awaitable, maybe str) into a Reply."""
    result: Any = source(body) if callable(source) else source
    if inspect.isawaitable(result):
        result = await result
    if isinstance(result, str):
        return Reply(text=result)
    if not isinstance(result, Reply):
        raise TypeError(f"handler must return Reply or str, got {type(result).__name__}")
    return result


def _error(status: int, body: dict | str | None = None, headers: dict[str, str] | None = None) -> web.Response:
    """OpenAI-style error payload so the SDK raises the matching APIStatusError subclass."""
    if body is None or isinstance(body, str):
        kind = "server_error" if status >= 500 else "invalid_request_error"
        body = {"error": {"message": body or f"fake server error {status}", "type": kind, "code": None}}
    return web.json_response(body, status=status, headers=headers or {})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Fake OpenAI-compatible chat-completions server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8089)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--text", help="always reply with this text (default: stock default_reply)")
    group.add_argument("--echo", action="store_true", help="reply with the last user message")
    parser.add_argument("--chunk-delay", type=float, default=0.0, help="seconds between SSE chunks")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(message)s")
    default: Handler = echo_reply if args.echo else default_reply
    if args.text is not None:
        default = lambda _req: Reply(text=args.text)  # noqa: E731

    async def serve() -> None:
        async with FakeOpenAIServer(args.host, args.port, default=default, chunk_delay=args.chunk_delay) as srv:
            print(f"Fake OpenAI server at {srv.base_url} (api_key: anything). Ctrl+C to stop.", flush=True)
            await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main()
