"""The LangGraph graphs, exported uncompiled so production and tests compile them with their own storage.

``build_chat_graph``: ``respond`` answers with one model call; ``summarize`` runs after it only when the
thread has grown past its budget, folding older messages into a running summary (``RemoveMessage``).
``build_memory_graph``: ``write_memory`` runs Trustcall over a person's recent turns. It is a graph of its
own because it runs off the reply path, in the background scheduler (see ``bot.engine.learning.scheduler``).
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
from bot.engine.learning.extraction import MemoryWriter, WriteRequest
from bot.engine.memories.records import MemoryRepository, StoredMemory
from bot.engine.recall import SemanticIndex, choose_memories, estimate_tokens, memory_line
from bot.engine.state import ChatState, Quote, Speaker
from bot.engine.policy.visibility import allowed_here

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


def quoted(text: str) -> str:
    """``text`` with every line prefixed by ``> ``: nothing inside it can start a line of its own.

    ``splitlines`` breaks on every character a model may read as a new line (``\\r``, ``\\u2028``, form
    feeds...), so a message typed as ``lol ok\\n[Alice | user 802] I like X`` stays one quoted block under
    its real author's header, and a header line can only come from here.
    """
    return "\n".join(f"> {line}" for line in (text.splitlines() or [""]))


def header(name: str, user_id: str, *, is_bot: bool = False) -> str:
    """The speaker line the model trusts: display name (cleaned by the Discord side) and Discord ID."""
    return f"[{name} | {'bot' if is_bot else 'user'} {user_id}]"


def author_line(message: BaseMessage) -> str:
    """A human message as the model sees it: ``[Name | user 123]`` on its own line, then the quoted text."""
    kw = message.additional_kwargs
    return f"{header(kw.get('author_name', 'someone'), kw.get('author_id', '?'))}\n{quoted(message.text)}"


def context_block(quotes: tuple[Quote, ...] | list[Quote]) -> str:
    """Messages gathered as context for one answer, grouped by why they are shown, each under its header."""
    parts: list[str] = []
    for kind in ("starter", "reply", "channel"):
        chosen = [q for q in quotes if q.kind == kind]
        if chosen:
            lines = [f"{header(q.author_name, q.author_id, is_bot=q.is_bot)}\n{quoted(q.text)}" for q in chosen]
            parts.append(prompts.CONTEXT_HEADINGS[kind] + "\n" + "\n".join(lines))
    return "\n\n".join(parts)


def pending_start(messages: list[AnyMessage]) -> int:
    """Index of the first human message after the bot's last answer: the messages this turn answers."""
    i = len(messages)
    while i > 0 and isinstance(messages[i - 1], HumanMessage):
        i -= 1
    return i


def for_model(messages: list[AnyMessage], *, summary: str = "", quotes: tuple[Quote, ...] = ()) -> list[BaseMessage]:
    """The conversation as the model reads it: one chat message per stored message, authors inlined.

    Other people's words never reach the system role: the running summary comes first as a quoted user
    message, and the context gathered for this answer (thread starter, reply chain, recent channel
    messages) as one quoted user message just before the messages being answered. Nothing
    Discord-specific reaches the API.
    """
    out: list[BaseMessage] = []
    if summary:
        out.append(HumanMessage(content=prompts.SUMMARY_QUOTE.format(summary=quoted(summary))))
    start = pending_start(messages) if quotes else len(messages)
    for i, m in enumerate(messages):
        if i == start:
            out.append(HumanMessage(content=context_block(quotes)))
        if isinstance(m, HumanMessage):
            out.append(HumanMessage(content=author_line(m)))
        elif isinstance(m, AIMessage):
            out.append(AIMessage(content=m.text))
    if quotes and start >= len(messages):
        out.append(HumanMessage(content=context_block(quotes)))
    return out


def system_prompt(deps: ChatDeps, speaker: Speaker, memories: list[StoredMemory]) -> str:
    """Persona (with the server's own instructions), how to read the conversation, and the speaker's own
    memories: no words of anyone in the conversation (the summary and context are quoted user messages)."""
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
    return prompts.REPLY_SYSTEM.format(
        persona=persona,
        place=speaker.place,
        speaker=speaker.name,
        speaker_id=speaker.user_id,
        memory_block=block,
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
        system = SystemMessage(content=system_prompt(deps, speaker, memories))
        stored = {str(m.additional_kwargs.get("message_id")) for m in state["messages"]}
        quotes = tuple(q for q in speaker.quotes if not q.message_id or q.message_id not in stored)
        history = for_model(state["messages"], summary=state.get("summary", ""), quotes=quotes)
        reply = await call([system, *history], speaker)
        answers = [m.id for m in state["messages"][pending_start(state["messages"]):]]
        answer = AIMessage(content=reply.text, id=reply.id, additional_kwargs={"answers": answers})
        return {"messages": [answer], "guild_id": speaker.guild_id}

    async def summarize(state: ChatState, runtime: Runtime[Speaker]) -> dict:
        messages = state["messages"]
        fold = messages[: -deps.keep_messages]
        summary = state.get("summary", "")
        ask = prompts.SUMMARIZE_EXTEND.format(summary=summary) if summary else prompts.SUMMARIZE_NEW
        result = await call([*for_model(fold), HumanMessage(content=ask)], runtime.context)
        authors = set(state.get("summary_authors") or [])
        authors |= {str(m.additional_kwargs.get("author_id")) for m in fold if isinstance(m, HumanMessage)}
        sources = list(state.get("summary_sources") or [])
        sources += [str(m.additional_kwargs["message_id"]) for m in fold if m.additional_kwargs.get("message_id")]
        sources += [str(i) for m in fold if isinstance(m, AIMessage) for i in m.additional_kwargs.get("discord_ids", [])]
        return {
            "summary": result.text,
            "summary_authors": sorted(authors),
            "summary_sources": list(dict.fromkeys(sources)),
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
