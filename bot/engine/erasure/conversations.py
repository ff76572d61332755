"""Change stored conversation state after the fact: erase a person, a message, a thread; apply an edit.

Every human message in a thread carries its author's ID, server and Discord message ID in
``additional_kwargs``; the bot's answer lists the IDs of the messages it answered (``answers``; for
threads written before that, it is the AI message right after) and, once sent, the Discord IDs of its
parts (``discord_ids``). A message goes together with the answer to it, and a deleted answer goes alone.
A running summary built from a removed or edited message (``summary_authors``, ``summary_sources``)
cannot be un-mixed, so it is dropped; the recent messages that remain keep the conversation going. Old
checkpoints are then pruned so the text is not left in history (the caller compacts the files).

Quotes (see ``bot.engine.erasure.quotes``): in every thread, of any server, whatever remains (other people's
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

from bot.engine.conversation.rendering import marked_answered
from bot.engine.erasure.quotes import QuoteRule

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

    async def answers_to(self, user_id: str, *, guild_id: str | None = None) -> dict[str, set[str]]:
        """The texts of the bot's answers :meth:`erase_author` would remove with the person's messages, by
        thread (read only): an answer to a gathered turn is kept on the learning-queue row of its last
        message, which may be someone else's."""
        found: dict[str, set[str]] = {}
        for thread_id in await self.thread_ids():
            values, messages, thread_guild = await self._state(thread_id)
            if guild_id is not None and str(thread_guild) != str(guild_id):
                continue
            theirs = {m.id for m in messages if isinstance(m, HumanMessage)
                      and str(m.additional_kwargs.get("author_id")) == user_id}
            doomed = set(with_answers(messages, theirs)) if theirs else set()
            texts = {m.text for m in messages if isinstance(m, AIMessage) and m.text and m.id in doomed}
            if texts:
                found[thread_id] = texts
        return found

    async def cut_quotes_in_thread(self, thread_id: str, quotes: QuoteRule, *, keep_author: str | None) -> int:
        """Cut ``quotes`` out of one thread (its messages but ``keep_author``'s, the bot's answers, the summary);
        return how many texts changed. For an edit's taken-back words: they were said in this thread."""
        async with self.lock_for(thread_id):
            return (await self._erase_in_thread(thread_id, None, None, quotes, keep_author))[1]

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

        doomed = with_answers(messages, {m.id for m in messages if theirs(m)}) if in_scope else []
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
            update.update(summary="", summary_authors=[], summary_sources=[])
        elif quotes and summary and quotes.redact(summary) != summary:
            update["summary"] = quotes.redact(summary)
        if self.prune is not None:
            # Every thread, even one with nothing (left) to change: an erasure cut short by a crash after
            # this thread's update but before its prune left the old text in superseded checkpoints.
            await self.prune(thread_id)
        if not doomed and not rewritten and not update:
            return 0, 0
        # others' questions whose answer goes with the person's messages (a gathered turn) stay answered
        cut = {m.id: m for m in rewritten}
        stay = _still_answered(messages, doomed)
        for m in messages:
            if m.id in stay:
                cut[m.id] = marked_answered(cut.get(m.id, m))
        update["messages"] = [RemoveMessage(id=i) for i in doomed] + list(cut.values())
        await self.graph.aupdate_state(config, update, as_node="summarize")
        if self.prune is not None:
            await self.prune(thread_id)
        log.info("erasure in thread %s: removed %d messages%s, cut quotes out of %d", thread_id, len(doomed),
                 " and the summary" if drop_summary else "", len(rewritten) + ("summary" in update and not drop_summary))
        return len(doomed), len(rewritten) + int("summary" in update and not drop_summary)

    async def _rewrite(self, thread_id: str, doomed: list[str], drop_summary: bool, extra: list | None = None) -> None:
        """Remove ``doomed`` message IDs (and the summary), add ``extra`` updates, then prune old checkpoints."""
        update: dict = {"messages": [RemoveMessage(id=i) for i in doomed] + list(extra or [])}
        if drop_summary:
            update.update(summary="", summary_authors=[], summary_sources=[])
        await self.graph.aupdate_state({"configurable": {"thread_id": thread_id}}, update, as_node="summarize")
        if self.prune is not None:
            await self.prune(thread_id)

    async def _values(self, thread_id: str) -> dict:
        snapshot = await self.graph.aget_state({"configurable": {"thread_id": thread_id}})
        return snapshot.values or {}

    async def texts_of_messages(self, thread_id: str, message_ids: set[str]) -> tuple[list[str], bool]:
        """The stored texts of these Discord messages in a thread, and whether the thread holds anything
        :meth:`erase_messages` would remove (read only: for a deletion's quote rule and journal)."""
        values = await self._values(thread_id)
        messages = values.get("messages", [])
        texts = [m.text for m in messages if isinstance(m, HumanMessage)
                 and str(m.additional_kwargs.get("message_id", "")) in message_ids]
        replies = any(isinstance(m, AIMessage) and message_ids & {str(i) for i in m.additional_kwargs.get("discord_ids", [])}
                      for m in messages)
        summary = bool(values.get("summary")) and bool(message_ids & set(values.get("summary_sources") or []))
        return texts, bool(texts or replies or summary)

    async def speakers(self, thread_id: str) -> set[str]:
        """Who has messages in a thread (read only: whose memories a quote there may have reached)."""
        messages = (await self._values(thread_id)).get("messages", [])
        return {str(m.additional_kwargs.get("author_id")) for m in messages
                if isinstance(m, HumanMessage) and m.additional_kwargs.get("author_id")}

    async def replies_to(self, thread_id: str, message_ids: set[str]) -> list[str]:
        """The Discord IDs of the bot's messages that carry its stored answers to these messages (every part
        of an answer split at Discord's length), in thread order; read only. The bot's own messages among
        ``message_ids`` are not answers to them and are left out."""
        messages = (await self._values(thread_id)).get("messages", [])
        hit = {m.id for m in messages if isinstance(m, HumanMessage)
               and str(m.additional_kwargs.get("message_id", "")) in message_ids}
        answers = set(with_answers(messages, hit)) - hit
        out: list[str] = []
        for m in messages:
            if m.id in answers and isinstance(m, AIMessage):
                out += [str(i) for i in m.additional_kwargs.get("discord_ids", []) if str(i) not in message_ids]
        return list(dict.fromkeys(out))

    async def answers_removed_with(self, thread_id: str, message_ids: set[str]) -> set[str]:
        """The texts of the bot's answers :meth:`erase_messages` would remove with these messages (read only):
        the learning queue keeps an answer's text on the row of the last message it answered, which may be
        another message than the deleted one (a gathered turn) or none of them (a deleted reply)."""
        messages = (await self._values(thread_id)).get("messages", [])
        doomed = set(_doomed(messages, message_ids)[1])
        return {m.text for m in messages if isinstance(m, AIMessage) and m.text and m.id in doomed}

    async def erase_messages(self, thread_id: str, message_ids: set[str]) -> tuple[int, list[str]]:
        """Remove Discord messages from a thread: people's messages with the answers to them, and bot replies.

        Returns how many stored messages went (0 when the thread never held any of them: nothing written)
        and the removed people's texts (for the quote rule).
        """
        async with self.lock_for(thread_id):
            return await self.erase_messages_held(thread_id, message_ids)

    async def erase_messages_held(self, thread_id: str, message_ids: set[str]) -> tuple[int, list[str]]:
        """:meth:`erase_messages` for a caller that holds the thread's lock already (a turn taking its erased
        person's messages back before it lets the next turn in: the lock is not re-entrant)."""
        values = await self._values(thread_id)
        messages = values.get("messages", [])
        hit, doomed = _doomed(messages, message_ids)
        drop_summary = bool(values.get("summary")) and bool(message_ids & set(values.get("summary_sources") or []))
        if not doomed and not drop_summary:
            if values and self.prune is not None:
                # Gone from the latest state, but a deletion cut short by a crash after the rewrite and
                # before its prune left the text in superseded checkpoints: the replay prunes them.
                await self.prune(thread_id)
            return 0, []
        said = [m.text for m in messages if m.id in hit]
        stay = _still_answered(messages, doomed)
        await self._rewrite(thread_id, doomed, drop_summary, [marked_answered(m) for m in messages if m.id in stay])
        log.info("removed %d deleted messages from thread %s%s", len(doomed), thread_id,
                 " and its summary" if drop_summary else "")
        return len(doomed), said

    async def edit_message(self, thread_id: str, message_id: str, text: str) -> bool:
        """Replace a stored message's text with its edited text; return whether the thread held it.

        A summary folded from the old text is dropped: the pre-edit words are kept nowhere.
        """
        async with self.lock_for(thread_id):
            values = await self._values(thread_id)
            found = [m for m in values.get("messages", []) if isinstance(m, HumanMessage)
                     and str(m.additional_kwargs.get("message_id", "")) == message_id]
            drop_summary = bool(values.get("summary")) and message_id in set(values.get("summary_sources") or [])
            if not found and not drop_summary:
                return False
            edited = [m.model_copy(update={"content": text}) for m in found]
            await self._rewrite(thread_id, [], drop_summary, edited)
            return True

    async def attach_sent(self, thread_id: str, answer_id: str, discord_ids: list[str]) -> None:
        """Note which Discord messages carry an answer, so deleting one of them removes the answer."""
        if not answer_id or not discord_ids:
            return
        async with self.lock_for(thread_id):
            values = await self._values(thread_id)
            for m in values.get("messages", []):
                if m.id == answer_id and isinstance(m, AIMessage):
                    kwargs = {**m.additional_kwargs, "discord_ids": [str(i) for i in discord_ids]}
                    update = {"messages": [m.model_copy(update={"additional_kwargs": kwargs})]}
                    await self.graph.aupdate_state({"configurable": {"thread_id": thread_id}}, update,
                                                   as_node="summarize")
                    return

    async def answer_text(self, thread_id: str, answer_id: str) -> str | None:
        """The text of one of the bot's answers in a thread (read only); None when it is not there."""
        messages = (await self._values(thread_id)).get("messages", [])
        return next((m.text for m in messages if m.id == answer_id and isinstance(m, AIMessage)), None)

    async def drop_answer(self, thread_id: str, answer_id: str, *, refused: bool = False) -> str | None:
        """Remove an answer nobody saw (its turn was cancelled right after it was written, or Discord refused
        it); its text, when it was there. ``refused``: the person got an apology instead, so the messages it
        answered stay as context, marked answered (else the next person's answer answered them too); a
        cancelled turn's stay waiting, for its restart to answer."""
        async with self.lock_for(thread_id):
            messages = (await self._values(thread_id)).get("messages", [])
            found = [m for m in messages if m.id == answer_id and isinstance(m, AIMessage)]
            if not found:
                return None
            stay = _still_answered(messages, [answer_id]) if refused else set()
            await self._rewrite(thread_id, [answer_id], False, [marked_answered(m) for m in messages if m.id in stay])
            return found[0].text

    async def erase_thread(self, thread_id: str) -> bool:
        """Delete a thread's whole stored conversation (its channel or thread was deleted)."""
        async with self.lock_for(thread_id):
            if not (await self._values(thread_id)):
                return False
            await self.checkpointer.adelete_thread(thread_id)
            log.info("deleted the stored conversation of thread %s", thread_id)
            return True

    async def threads_in_channel(self, channel_id: str) -> list[str]:
        """The threads (and forum posts) of a channel whose conversation is stored, archived ones included
        (Discord sends their deletion only for the threads it still has open when the channel goes), and
        any other conversation that names it as its channel (the chat cog's "Ask about this" ones)."""
        found = []
        for thread_id in await self.thread_ids():
            values, messages, _ = await self._state(thread_id)
            parent = values.get("parent_id")
            if not parent:  # only heard there, or written before the state carried it
                parents = {str(m.additional_kwargs.get("parent_id") or "") for m in messages
                           if isinstance(m, HumanMessage)} - {""}
                parent = parents.pop() if len(parents) == 1 else None
            if parent is not None and str(parent) == str(channel_id) and thread_id != str(channel_id):
                found.append(thread_id)
        return found

    async def threads_of_guild(self, guild_id: str) -> list[str]:
        """The threads whose conversation belongs to one server."""
        return [t for t in await self.thread_ids() if await self.guild_of(t) == str(guild_id)]

    async def guild_of(self, thread_id: str) -> str | None:
        """The server a thread's conversation belongs to ("dm" for DMs; None: not known)."""
        _, _, guild = await self._state(thread_id)
        return None if guild is None else str(guild)


def _doomed(messages: list, message_ids: set[str]) -> tuple[set[str], list[str]]:
    """What removing these Discord messages removes from a thread: the stored IDs of people's messages among
    them, and those plus the bot's answers to them and the bot's replies among them, in thread order."""
    hit = {m.id for m in messages if isinstance(m, HumanMessage)
           and str(m.additional_kwargs.get("message_id", "")) in message_ids}
    doomed = with_answers(messages, hit)
    doomed += [m.id for m in messages if isinstance(m, AIMessage) and m.id not in doomed
               and message_ids & {str(i) for i in m.additional_kwargs.get("discord_ids", [])}]
    return hit, doomed


def _still_answered(messages: list, doomed: list[str]) -> set[str]:
    """The people's messages that stay while the answer to them goes (a moderator deleted the bot's reply, a
    wipe took a gathered turn's answer): marked ``answered`` (``rendering.marked_answered``), since after the last
    answer they would read as waiting (``rendering.pending_start``), and the next person's answer would
    answer them again and list them as its own."""
    gone = set(doomed)
    answered: set[str] = set()
    for m in messages:
        if isinstance(m, AIMessage) and m.id in gone:
            answered |= set(m.additional_kwargs.get("answers") or [])
    return {m.id for m in messages if isinstance(m, HumanMessage) and m.id in answered - gone}


def with_answers(messages: list, human_ids: set[str]) -> list[str]:
    """``human_ids`` plus the IDs of the bot's answers to any of them, in thread order."""
    doomed: list[str] = []
    for i, m in enumerate(messages):
        if m.id in human_ids:
            doomed.append(m.id)
        elif isinstance(m, AIMessage):
            answers = m.additional_kwargs.get("answers")
            if answers is None:  # written before answers were recorded: the answer is the next AI message
                answers = [messages[i - 1].id] if i and isinstance(messages[i - 1], HumanMessage) else []
            if human_ids & set(answers):
                doomed.append(m.id)
    return doomed
