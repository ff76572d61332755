"""A faithful re-implementation of the reference design (../shared/seeds), for side-by-side figures.

The LangGraph course's "memory agent with a collection schema" plus its summarizing SQLite chatbot:
``call_model`` puts every memory into the system prompt; ``write_memory`` runs Trustcall over the whole
thread with every existing memory; when the thread has more than six messages, ``summarize_conversation``
folds all but the last two into the summary. All three nodes run before the graph returns, so the reply
waits for them. Checkpoints are never pruned.

One deliberate deviation: the lesson's ``store.search(namespace)`` returns only 10 items (its default
limit), which would hide every memory after the tenth and make its prompts look artificially small. Here
every memory is loaded, which is what the lesson intends and what the issue's figures describe.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from langchain_core.messages import HumanMessage, RemoveMessage, SystemMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore
from pydantic import BaseModel, Field
from trustcall import create_extractor

MODEL_SYSTEM_MESSAGE = """You are a helpful chatbot. You are designed to be a companion to a user.

You have a long term memory which keeps track of information you learn about the user over time.

Current Memory (may include updated memories from this conversation):

{memory}"""

TRUSTCALL_INSTRUCTION = """Reflect on following interaction.

Use the provided tools to retain any necessary memories about the user.

Use parallel tool calling to handle updates and insertions simultaneously:

System Time: {time}"""


class Memory(BaseModel):
    content: str = Field(description="The main content of the memory. For example: User expressed interest in learning about French.")


class State(MessagesState):
    summary: str


async def all_items(store: BaseStore, namespace: tuple) -> list:
    items, offset = [], 0
    while True:
        page = await store.asearch(namespace, limit=500, offset=offset)
        items += page
        if len(page) < 500:
            return items
        offset += 500


def build_reference_graph(model) -> StateGraph:
    extractor = create_extractor(model, tools=[Memory], tool_choice="Memory", enable_inserts=True)

    async def call_model(state: State, runtime: Runtime[dict]):
        namespace = ("memories", runtime.context["user_id"])
        memories = await all_items(runtime.store, namespace)
        info = "\n".join(f"- {m.value['content']}" for m in memories)
        system = MODEL_SYSTEM_MESSAGE.format(memory=info)
        summary = state.get("summary", "")
        if summary:
            system += f"\n\nSummary of conversation earlier: {summary}"
        response = await model.ainvoke([SystemMessage(content=system)] + state["messages"])
        return {"messages": [response]}

    async def write_memory(state: State, runtime: Runtime[dict]):
        namespace = ("memories", runtime.context["user_id"])
        existing_items = await all_items(runtime.store, namespace)
        existing = [(i.key, "Memory", i.value) for i in existing_items] if existing_items else None
        updated = [SystemMessage(content=TRUSTCALL_INSTRUCTION.format(time=datetime.now().isoformat()))] + state["messages"]
        result = await extractor.ainvoke({"messages": updated, "existing": existing})
        for r, rmeta in zip(result["responses"], result["response_metadata"]):
            await runtime.store.aput(namespace, rmeta.get("json_doc_id", str(uuid.uuid4())), r.model_dump(mode="json"))

    async def summarize_conversation(state: State):
        summary = state.get("summary", "")
        if summary:
            prompt = (f"This is summary of the conversation to date: {summary}\n\n"
                      "Extend the summary by taking into account the new messages above:")
        else:
            prompt = "Create a summary of the conversation above:"
        response = await model.ainvoke(state["messages"] + [HumanMessage(content=prompt)])
        return {"summary": response.text, "messages": [RemoveMessage(id=m.id) for m in state["messages"][:-2]]}

    def should_continue(state: State):
        return "summarize_conversation" if len(state["messages"]) > 6 else END

    graph = StateGraph(State, context_schema=dict)
    graph.add_node("call_model", call_model)
    graph.add_node("write_memory", write_memory)
    graph.add_node("summarize_conversation", summarize_conversation)
    graph.add_edge(START, "call_model")
    graph.add_edge("call_model", "write_memory")
    graph.add_conditional_edges("write_memory", should_continue, ["summarize_conversation", END])
    graph.add_edge("summarize_conversation", END)
    return graph
