"""The memory graph: ``write_memory`` runs Trustcall over a person's recent turns.

It is a graph of its own because it runs off the reply path, in the background scheduler (see
:mod:`bot.engine.learning.scheduler`), compiled with the store only (no checkpointer: nothing of it is kept).
"""

from __future__ import annotations

from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from bot.engine.learning.extraction import MemoryWriter, WriteRequest
from bot.engine.memories.repository import MemoryRepository


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
