"""A scripted chat model for benchmarks: fixed latency per call, streaming, and honest accounting.

Both designs under test get the same instance type, so calls, prompt tokens and latency are counted the
same way for each. Prompt tokens are estimated as characters / 4 over every message plus the JSON of any
bound tool schemas (what a real API would bill), using the same function for both designs.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

REPLY = "Sounds good! Tell me more about that, I'd love to hear how it goes."


def prompt_tokens(messages: list[BaseMessage], tools: Any = None) -> int:
    chars = sum(len(m.text) for m in messages) + (len(json.dumps(tools)) if tools else 0)
    return max(1, chars // 4)


@dataclass
class Ledger:
    """Every call the model received: (kind, prompt tokens, turn tag)."""

    calls: list[tuple[str, int, int]] = field(default_factory=list)
    turn: int = 0

    def count(self, kind: str | None = None) -> int:
        return sum(1 for k, _, _ in self.calls if kind is None or k == kind)

    def tokens_for_turns(self, first: int, last: int) -> int:
        return sum(t for _, t, turn in self.calls if first <= turn <= last)


class BenchModel(BaseChatModel):
    """Answers after ``latency`` seconds; streams the reply in four pieces; extraction finds nothing new."""

    latency: float = 0.0
    ledger: Any = Field(default_factory=Ledger)

    @property
    def _llm_type(self) -> str:
        return "bench"

    def bind_tools(self, tools, *, tool_choice=None, **kwargs):
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], tool_choice=tool_choice, **kwargs)

    def _kind(self, messages: list[BaseMessage], kwargs: dict) -> str:
        if kwargs.get("tools"):
            return "extract"
        last = (messages[-1].text if messages else "").lower()
        return "summarize" if "summar" in last and "conversation" in last else "reply"

    def _record(self, messages, kwargs) -> tuple[str, int]:
        kind = self._kind(messages, kwargs)
        tokens = prompt_tokens(messages, kwargs.get("tools"))
        self.ledger.calls.append((kind, tokens, self.ledger.turn))
        return kind, tokens

    def _answer(self, kind: str, tokens: int) -> AIMessage:
        text = "A short running summary of the conversation so far." if kind == "summarize" else ("" if kind == "extract" else REPLY)
        usage = {"input_tokens": tokens, "output_tokens": max(1, len(text) // 4), "total_tokens": tokens + len(text) // 4}
        return AIMessage(content=text, tool_calls=[], usage_metadata=usage)

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:  # pragma: no cover
        raise NotImplementedError("benchmarks are async")

    async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        kind, tokens = self._record(messages, kwargs)
        if self.latency:
            await asyncio.sleep(self.latency)
        return ChatResult(generations=[ChatGeneration(message=self._answer(kind, tokens))])

    async def _astream(self, messages, stop=None, run_manager=None, **kwargs) -> AsyncIterator[ChatGenerationChunk]:
        kind, tokens = self._record(messages, kwargs)
        message = self._answer(kind, tokens)
        text = message.text
        pieces = [text[i * len(text) // 4 : (i + 1) * len(text) // 4] for i in range(4)] if text else [""]
        for i, piece in enumerate(pieces):
            # First text after 30% of the latency (time to first token), the rest spread over the remainder.
            if self.latency:
                await asyncio.sleep(self.latency * (0.3 if i == 0 else 0.7 / max(1, len(pieces) - 1)))
            chunk = AIMessageChunk(content=piece)
            if i == len(pieces) - 1:
                chunk.usage_metadata = message.usage_metadata
            yield ChatGenerationChunk(message=chunk)
