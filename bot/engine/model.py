"""The chat-model factory: DeepSeek by default, any OpenAI-compatible server on request."""

from __future__ import annotations

from langchain_core.language_models import BaseChatModel

from bot.settings import ModelSection, Settings


def build_chat_model(settings: Settings, *, streaming: bool | None = None) -> BaseChatModel:
    """Build the configured chat model.

    Args:
        settings: validated settings; the API key comes from its secrets (the environment).
        streaming: override ``model.streaming`` (extraction never needs token streaming).
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
    if m.provider == "deepseek":
        from langchain_deepseek import ChatDeepSeek

        extra = {"api_base": m.base_url} if m.base_url else {}
        return ChatDeepSeek(api_key=key or "missing", **extra, **common)
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(base_url=m.base_url, api_key=key or "not-needed", **common)
