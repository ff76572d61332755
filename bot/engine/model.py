"""The chat-model factory: DeepSeek by default, any OpenAI-compatible server on request."""

from __future__ import annotations

import functools
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage

from bot.settings import ModelSection, Settings


def model_http_client() -> Any:
    """One HTTP connection pool for the engine's model calls, which the engine closes when it closes.

    Without it the OpenAI SDK gives every model object its own pool, closed only when garbage collection
    finds it: by then it may be on another event loop (a restarted engine, every test), where closing fails
    with "Event loop is closed" and asyncio logs an error nobody caused.
    """
    import openai

    return openai.DefaultAsyncHttpxClient()


def build_chat_model(settings: Settings, *, streaming: bool | None = None,
                     http_async_client: Any = None) -> BaseChatModel:
    """Build the configured chat model.

    Args:
        settings: validated settings; the API key comes from its secrets (the environment).
        streaming: override ``model.streaming`` (extraction never needs token streaming).
        http_async_client: the connection pool to use (``model_http_client()``), owned by the caller.
    """
    m: ModelSection = settings.model
    key = settings.secrets.model_api_key.get_secret_value() if settings.secrets.model_api_key else None
    common = dict(
        model=m.name,
        temperature=m.temperature,
        max_tokens=m.max_output_tokens,
        timeout=m.timeout_seconds,
        max_retries=m.max_retries,
        streaming=m.streaming if streaming is None else streaming,
        stream_usage=True,
    )
    if http_async_client is not None:
        common["http_async_client"] = http_async_client
    if m.provider == "deepseek":
        from langchain_deepseek import ChatDeepSeek

        extra = {"api_base": m.base_url} if m.base_url else {}
        return ChatDeepSeek(api_key=key or "missing", **extra, **common)
    return _compatible_model(m.max_tokens_field)(base_url=m.base_url, api_key=key or "not-needed", **common)


@functools.cache
def _compatible_model(field: str) -> type[BaseChatModel]:
    """``ChatOpenAI``, sending the answer's token cap in ``field``.

    ``ChatOpenAI`` always renames ``max_tokens`` to ``max_completion_tokens``, which OpenAI's reasoning
    models need, but which llama.cpp's server and others ignore (answers then run until the timeout) or
    refuse (every reply an apology). ``model.max_tokens_field`` picks; ``max_tokens`` by default, as
    OpenAI-compatible servers other than OpenAI's read it.
    """
    from langchain_openai import ChatOpenAI

    if field == "max_completion_tokens":
        return ChatOpenAI

    class CompatibleChatOpenAI(ChatOpenAI):
        def _get_request_payload(self, input_: Any, *, stop: list[str] | None = None, **kwargs: Any) -> dict:
            payload = super()._get_request_payload(input_, stop=stop, **kwargs)
            if "max_completion_tokens" in payload:
                payload["max_tokens"] = payload.pop("max_completion_tokens")
            return payload

    return CompatibleChatOpenAI


def usage_of(message: BaseMessage) -> tuple[int, int]:
    """(prompt tokens, completion tokens) from a model answer's usage figures, 0 where missing."""
    meta = getattr(message, "usage_metadata", None) or {}
    return int(meta.get("input_tokens", 0)), int(meta.get("output_tokens", 0))
