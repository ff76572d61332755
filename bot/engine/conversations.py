"""Remove one person's messages from stored conversation state (part of erasure).

Every human message in a thread carries its author's ID (and server) in ``additional_kwargs``; the bot's
answer to it is the AI message right after it. Both go. A running summary that was built from the person's
messages (``summary_authors``) cannot be un-mixed, so it is dropped; the recent messages that remain keep
the conversation going. Old checkpoints are then pruned so the text is not left in history.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable

from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph

log = logging.getLogger(__name__)


class ConversationEraser:
    """Finds every thread and rewrites the ones where a person spoke."""

    def __init__(
        self,
        graph: CompiledStateGraph,
        checkpointer: BaseCheckpointSaver,
        lock_for: Callable[[str], object],
        prune: Callable[[str], Awaitable[None]] | None,
    ) -> None:
        self.graph = graph
        self.checkpointer = checkpointer
        self.lock_for = lock_for
        self.prune = prune

    async def thread_ids(self) -> list[str]:
        seen: dict[str, None] = {}
        async for tup in self.checkpointer.alist(None):
            seen[str(tup.config["configurable"]["thread_id"])] = None
        return list(seen)

    async def erase_author(self, user_id: str, *, guild_id: str | None = None) -> int:
        """Remove the person's messages (in one server, or everywhere); return how many were removed."""
        removed = 0
        for thread_id in await self.thread_ids():
            async with self.lock_for(thread_id):
                removed += await self._erase_in_thread(thread_id, user_id, guild_id)
        return removed

    async def _erase_in_thread(self, thread_id: str, user_id: str, guild_id: str | None) -> int:
        config = {"configurable": {"thread_id": thread_id}}
        snapshot = await self.graph.aget_state(config)
        values = snapshot.values or {}
        messages = values.get("messages", [])
        thread_guild = values.get("guild_id")
        if thread_guild is None:  # threads written before the state carried it
            guilds = {str(m.additional_kwargs.get("guild_id")) for m in messages if isinstance(m, HumanMessage)}
            thread_guild = guilds.pop() if len(guilds) == 1 else None
        if guild_id is not None and str(thread_guild) != str(guild_id):
            return 0  # a purge touches only that server's threads; unknown means not provably theirs
        doomed: list[str] = []
        for i, m in enumerate(messages):
            if isinstance(m, HumanMessage) and str(m.additional_kwargs.get("author_id")) == user_id:
                doomed.append(m.id)
                if i + 1 < len(messages) and isinstance(messages[i + 1], AIMessage):
                    doomed.append(messages[i + 1].id)
        authors = set(values.get("summary_authors") or [])
        drop_summary = bool(values.get("summary")) and user_id in authors
        if not doomed and not drop_summary:
            return 0
        update: dict = {"messages": [RemoveMessage(id=i) for i in doomed]}
        if drop_summary:
            update["summary"] = ""
            update["summary_authors"] = []
        await self.graph.aupdate_state(config, update, as_node="summarize")
        if self.prune is not None:
            await self.prune(thread_id)
        log.info("erased %d messages of user %s from thread %s%s", len(doomed), user_id, thread_id,
                 " and its summary" if drop_summary else "")
        return len(doomed)
