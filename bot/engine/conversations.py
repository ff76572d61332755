"""Remove one person's messages from stored conversation state (part of erasure).

Every human message in a thread carries its author's ID (and server) in ``additional_kwargs``; the bot's
answer to it is the AI message right after it. Both go. A running summary that was built from the person's
messages (``summary_authors``) cannot be un-mixed, so it is dropped; the recent messages that remain keep
the conversation going. Old checkpoints are then pruned so the text is not left in history.

Quotes (see ``bot.engine.quotes``): in every thread, of any server, whatever remains (other people's
messages, the bot's answers to them, summaries not built from the person) has runs copied from the
erased messages cut out. The erased person's own messages that are not being erased (another server's,
after a purge) are theirs and stay as they are.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable

from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph

from bot.engine.quotes import QuoteRule

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

    async def _state(self, thread_id: str) -> tuple[dict, list, str | None]:
        snapshot = await self.graph.aget_state({"configurable": {"thread_id": thread_id}})
        values = snapshot.values or {}
        messages = values.get("messages", [])
        thread_guild = values.get("guild_id")
        if thread_guild is None:  # threads written before the state carried it
            guilds = {str(m.additional_kwargs.get("guild_id")) for m in messages if isinstance(m, HumanMessage)}
            thread_guild = guilds.pop() if len(guilds) == 1 else None
        return values, messages, thread_guild

    async def texts_of(self, user_id: str, *, guild_id: str | None = None) -> list[str]:
        """The person's messages an erasure will remove (for the quote rule), read before anything goes."""
        texts: list[str] = []
        for thread_id in await self.thread_ids():
            _, messages, thread_guild = await self._state(thread_id)
            if guild_id is not None and str(thread_guild) != str(guild_id):
                continue
            texts += [m.text for m in messages
                      if isinstance(m, HumanMessage) and str(m.additional_kwargs.get("author_id")) == user_id]
        return texts

    async def erase_author(
        self, user_id: str | None, *, guild_id: str | None = None, quotes: QuoteRule | None = None,
        keep_author: str | None = None,
    ) -> tuple[int, int]:
        """Remove the person's messages (in one server, or everywhere) and cut ``quotes`` out of the rest.

        ``user_id`` None only cuts quotes (deleted messages), leaving ``keep_author``'s own messages as
        they are. Returns (messages removed, texts redacted).
        """
        removed = redacted = 0
        for thread_id in await self.thread_ids():
            async with self.lock_for(thread_id):
                r, q = await self._erase_in_thread(thread_id, user_id, guild_id, quotes, keep_author or user_id)
                removed, redacted = removed + r, redacted + q
        return removed, redacted

    async def _erase_in_thread(
        self, thread_id: str, user_id: str | None, guild_id: str | None, quotes: QuoteRule | None,
        keep_author: str | None,
    ) -> tuple[int, int]:
        config = {"configurable": {"thread_id": thread_id}}
        values, messages, thread_guild = await self._state(thread_id)
        # A purge removes messages only in that server's threads; unknown means not provably theirs.
        in_scope = user_id is not None and (guild_id is None or str(thread_guild) == str(guild_id))

        def theirs(m, who: str | None = user_id) -> bool:
            return who is not None and isinstance(m, HumanMessage) and str(m.additional_kwargs.get("author_id")) == who

        doomed: list[str] = []
        if in_scope:
            for i, m in enumerate(messages):
                if theirs(m):
                    doomed.append(m.id)
                    if i + 1 < len(messages) and isinstance(messages[i + 1], AIMessage):
                        doomed.append(messages[i + 1].id)
        rewritten = []
        if quotes:
            for m in messages:
                if m.id in doomed or theirs(m, keep_author) or not isinstance(m.content, str):
                    continue
                clean = quotes.redact(m.content)
                if clean != m.content:
                    rewritten.append(m.model_copy(update={"content": clean}))
        authors = set(values.get("summary_authors") or [])
        summary = values.get("summary") or ""
        drop_summary = in_scope and bool(summary) and user_id in authors
        update: dict = {}
        if drop_summary:
            update["summary"] = ""
            update["summary_authors"] = []
        elif quotes and summary and quotes.redact(summary) != summary:
            update["summary"] = quotes.redact(summary)
        if self.prune is not None:
            # Every thread, even one with nothing (left) to change: an erasure cut short by a crash after
            # this thread's update but before its prune left the old text in superseded checkpoints.
            await self.prune(thread_id)
        if not doomed and not rewritten and not update:
            return 0, 0
        update["messages"] = [RemoveMessage(id=i) for i in doomed] + rewritten
        await self.graph.aupdate_state(config, update, as_node="summarize")
        if self.prune is not None:
            await self.prune(thread_id)
        log.info("erasure in thread %s: removed %d messages%s, cut quotes out of %d", thread_id, len(doomed),
                 " and the summary" if drop_summary else "", len(rewritten) + ("summary" in update and not drop_summary))
        return len(doomed), len(rewritten) + int("summary" in update and not drop_summary)
