"""The LangGraph graphs, exported uncompiled so production and tests compile them with their own storage.

``build_chat_graph``: ``respond`` answers with one model call; ``summarize`` runs after it only when the
thread has grown past its budget, folding older messages into a running summary (``RemoveMessage``).
``build_memory_graph``: ``write_memory`` runs Trustcall over a person's recent turns. It is a graph of its
own because it runs off the reply path, in the background scheduler (see ``bot.engine.scheduler``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Awaitable, Callable, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, RemoveMessage, SystemMessage
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from bot.engine import prompts
from bot.engine.extraction import MemoryWriter, WriteRequest
from bot.engine.memory import MemoryRepository, StoredMemory
from bot.engine.recall import SemanticIndex, choose_memories, estimate_tokens, memory_line
from bot.engine.state import ChatState, Speaker
from bot.engine.visibility import allowed_here

log = logging.getLogger(__name__)

UsageCallback = Callable[[Speaker, BaseMessage], Awaitable[None]]


@dataclass
class ChatDeps:
    """What the chat graph's nodes need besides the state, the store and the speaker."""

    model: BaseChatModel
    persona: str
    memory_budget_tokens: int = 1000
    summarize_after_messages: int = 20
    summarize_after_tokens: int = 3000
    keep_messages: int = 6
    limiter: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(8))
    on_usage: UsageCallback | None = None
    semantic: SemanticIndex | None = None


def author_line(message: BaseMessage) -> str:
    """A human message as the model sees it: ``[Name | user 123] text``."""
    kw = message.additional_kwargs
    name = kw.get("author_name", "someone")
    return f"[{name} | user {kw.get('author_id', '?')}] {message.text}"


def for_model(messages: list[AnyMessage]) -> list[BaseMessage]:
    """Rebuild the history with authors inlined, so nothing Discord-specific reaches the API."""
    out: list[BaseMessage] = []
    for m in messages:
        if isinstance(m, HumanMessage):
            out.append(HumanMessage(content=author_line(m)))
        elif isinstance(m, AIMessage):
            out.append(AIMessage(content=m.text))
    return out


def system_prompt(deps: ChatDeps, speaker: Speaker, memories: list[StoredMemory], summary: str) -> str:
    persona = deps.persona
    if speaker.persona_addition:  # the server's instructions (/settings), after the operator's persona
        persona = prompts.SERVER_PERSONA.format(persona=persona, addition=speaker.persona_addition)
    if speaker.memories_off_here:
        block = prompts.SERVER_MEMORIES_OFF_BLOCK
    elif not speaker.use_memories:
        block = prompts.MEMORY_DISABLED_BLOCK.format(speaker=speaker.name)
    elif memories:
        lines = "\n".join(memory_line(m) for m in memories)
        block = prompts.MEMORY_BLOCK.format(speaker=speaker.name, memories=lines)
    else:
        block = prompts.NO_MEMORY_BLOCK.format(speaker=speaker.name)
    summary_block = prompts.SUMMARY_BLOCK.format(summary=summary) if summary else ""
    return prompts.REPLY_SYSTEM.format(
        persona=persona,
        place=speaker.place,
        speaker=speaker.name,
        speaker_id=speaker.user_id,
        memory_block=block,
        summary_block=summary_block,
    ).strip()


def recall_query(messages: list[AnyMessage], turns: int = 3, reply_chars: int = 200) -> str:
    """What memories are chosen for: the current message plus the recent turns (the bot's last reply cut short)."""
    recent = messages[-2 * turns:]
    parts = [m.text if isinstance(m, HumanMessage) else m.text[:reply_chars] for m in recent
             if isinstance(m, (HumanMessage, AIMessage))]
    return "\n".join(p for p in parts if p)


def needs_summary(messages: list[AnyMessage], deps: ChatDeps) -> bool:
    if len(messages) <= deps.keep_messages:
        return False
    if len(messages) > deps.summarize_after_messages:
        return True
    return sum(estimate_tokens(m.text) for m in messages) > deps.summarize_after_tokens


def build_chat_graph(deps: ChatDeps) -> StateGraph:
    """The conversation graph: ``respond`` then, when the thread is over budget, ``summarize``."""

    async def call(messages: list[BaseMessage], speaker: Speaker) -> AIMessage:
        async with deps.limiter:
            reply = await deps.model.ainvoke(messages)
        if deps.on_usage is not None:
            try:
                await deps.on_usage(speaker, reply)
            except Exception:  # noqa: BLE001 - accounting must never cost a reply
                log.exception("recording usage failed")
        return reply

    async def respond(state: ChatState, runtime: Runtime[Speaker]) -> dict:
        speaker = runtime.context
        memories: list[StoredMemory] = []
        if speaker.use_memories and runtime.store is not None:
            everything = await MemoryRepository(runtime.store).list(speaker.user_id)
            shown = allowed_here(everything, speaker.policy)
            selection = await choose_memories(
                shown, recall_query(state["messages"]), deps.memory_budget_tokens,
                user_id=speaker.user_id, index=deps.semantic,
            )
            memories = selection.memories
        system = SystemMessage(content=system_prompt(deps, speaker, memories, state.get("summary", "")))
        reply = await call([system, *for_model(state["messages"])], speaker)
        return {"messages": [AIMessage(content=reply.text, id=reply.id)], "guild_id": speaker.guild_id}

    async def summarize(state: ChatState, runtime: Runtime[Speaker]) -> dict:
        messages = state["messages"]
        fold = messages[: -deps.keep_messages]
        summary = state.get("summary", "")
        ask = prompts.SUMMARIZE_EXTEND.format(summary=summary) if summary else prompts.SUMMARIZE_NEW
        result = await call([*for_model(fold), HumanMessage(content=ask)], runtime.context)
        authors = set(state.get("summary_authors") or [])
        authors |= {str(m.additional_kwargs.get("author_id")) for m in fold if isinstance(m, HumanMessage)}
        return {
            "summary": result.text,
            "summary_authors": sorted(authors),
            "messages": [RemoveMessage(id=m.id) for m in fold],
        }

    def route(state: ChatState) -> str:
        return "summarize" if needs_summary(state["messages"], deps) else END

    graph = StateGraph(ChatState, context_schema=Speaker)
    graph.add_node("respond", respond)
    graph.add_node("summarize", summarize)
    graph.add_edge(START, "respond")
    graph.add_conditional_edges("respond", route, ["summarize", END])
    graph.add_edge("summarize", END)
    return graph


class MemoryGraphState(TypedDict, total=False):
    request: WriteRequest
    changes: dict


def build_memory_graph(writer: MemoryWriter) -> StateGraph:
    """The background memory graph: one ``write_memory`` node that reaches the store via the runtime."""

    async def write_memory(state: MemoryGraphState, runtime: Runtime) -> dict:
        changes = await writer.write(MemoryRepository(runtime.store), state["request"])
        return {"changes": {"inserted": changes.inserted, "updated": changes.updated, "deleted": changes.deleted}}

    graph = StateGraph(MemoryGraphState)
    graph.add_node("write_memory", write_memory)
    graph.add_edge(START, "write_memory")
    graph.add_edge("write_memory", END)
    return graph
