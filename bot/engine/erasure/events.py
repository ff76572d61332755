"""Following what changes on Discord after the fact: edited and deleted messages, deleted channels, and
servers the bot was removed from. The Discord side (``cogs.message_events``) calls these; every removal
goes through the one :class:`~bot.engine.erasure.eraser.Eraser`, edits included (a journaled ``edit`` job).

What is not an edit changes nothing: an update whose text is what the bot stored for the message (see
:meth:`DiscordChanges.edit_message`). A memory the person wrote or corrected by hand is never erased or
re-learned by an event on the message it was first learned from.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import replace
from typing import Awaitable, Callable, Mapping

from langchain_core.messages import HumanMessage

from bot.engine.erasure.conversations import ConversationEraser
from bot.engine.erasure.eraser import Eraser, MessageErasure
from bot.engine.learning.scheduler import ExtractionScheduler
from bot.engine.memories.repository import MemoryRepository
from bot.engine.stores import Storage

log = logging.getLogger(__name__)

SWEEP_EVERY = 3600.0  # seconds between sweeps for servers whose retention ran out


class DiscordChanges:
    """Keeps conversations, the learning queue and memories in step with edits, deletions and removals."""

    def __init__(
        self,
        *,
        storage: Storage,
        conversations: ConversationEraser,
        eraser: Eraser,
        scheduler: ExtractionScheduler,
        thread_state: Callable,
        removed_server_days: float,
        forget_settings: Callable[[str], Awaitable[bool]] | None = None,
        forget_stored: Callable[[str | None], None] | None = None,
        being_deleted: Counter[str] | None = None,
        on_swept: Callable[[str], None] | None = None,
    ) -> None:
        self.storage = storage
        self.conversations = conversations
        self.eraser = eraser
        self.scheduler = scheduler
        self.thread_state = thread_state
        self.memories = MemoryRepository(storage.store)
        self.removed_server_days = removed_server_days
        self.forget_settings = forget_settings  # the server's /settings go with the rest of its data
        # This process's note of which threads have a checkpoint (``TurnRunner.forget_stored``; None: all).
        self.forget_stored = forget_stored or (lambda _thread: None)
        self._sweeper: asyncio.Task | None = None
        self.on_swept = on_swept or (lambda _guild: None)  # a removed server's data went (the metrics)
        # Sweeps wait for this process's first READY check: a server that added the bot back while it was
        # offline sends no GUILD_CREATE to an offline bot, and only READY can take its mark off. Swept at
        # start, before READY, its data went while the bot sat in it again. With several processes each
        # sweeps only its own shards' servers (``mine``), which its own READY has judged.
        self.judged = asyncio.Event()
        self.mine: Callable[[str], bool] = lambda _guild: True
        # Discord message IDs whose deletion is being erased (shared with the chat graph, which leaves them
        # out of what the model reads: the erasure can wait minutes for the global erasure lock).
        self.being_deleted: Counter[str] = being_deleted if being_deleted is not None else Counter()
        self.active = 0  # edits being applied right now (erasures are counted by the Eraser)
        # Edits and deletions are applied one at a time, in the order Discord sent them: an edit racing a
        # deletion of the same message must not re-learn what the deletion is erasing.
        self._one_at_a_time = asyncio.Lock()

    async def authors_in_thread(self, thread_id: str, message_ids: set[str]) -> set[str]:
        state = await self.thread_state(thread_id)
        return {str(m.additional_kwargs.get("author_id")) for m in state.get("messages", [])
                if isinstance(m, HumanMessage) and str(m.additional_kwargs.get("message_id")) in message_ids}

    # ---- deleted messages, channels, threads
    async def forget_messages(self, thread_id: str, message_ids: set[str] | list[str], *,
                              shown: Mapping[str, str] | None = None) -> MessageErasure:
        """Discord messages were deleted: erase them everywhere (see :meth:`Eraser.erase_messages`).

        Extraction for their known authors is held meanwhile, so nothing learned from them is written back;
        a turn of theirs in this thread finishes first (the thread's lock).
        """
        ids = {str(i) for i in message_ids}
        self.being_deleted.update(ids)  # hidden from the model from now until they are gone (ChatDeps)
        try:
            return await self._forget_messages(thread_id, ids, shown)
        finally:
            self.being_deleted.subtract(ids)
            for i in ids:  # in place: the chat graph holds this very Counter
                if self.being_deleted[i] <= 0:
                    del self.being_deleted[i]

    async def _forget_messages(self, thread_id: str, ids: set[str], shown: Mapping[str, str] | None) -> MessageErasure:
        async with self._one_at_a_time:
            authors = await self.authors_in_thread(thread_id, ids)
            replies = await self.conversations.replies_to(thread_id, ids)  # before the answers go
            result = await self.eraser.erase_messages(thread_id, ids, authors=authors, shown=shown)
            return replace(result, replies=tuple(replies))

    async def forget_thread(self, thread_id: str, *, threads: bool = False) -> bool:
        """Its channel or thread was deleted: delete the stored conversation and its pending turns;
        ``threads``: a channel's threads too."""
        try:
            return await self.eraser.erase_thread(thread_id, threads=threads)
        finally:
            self.forget_stored(None if threads else thread_id)

    # ---- edits
    async def edit_message(self, thread_id: str, message_id: str, text: str, *, edited_at: float | None = None,
                           names: Mapping[str, str] | None = None) -> bool:
        """A stored message was edited: see :meth:`Eraser.edit_message` (the one door; journaled).

        Returns False and changes nothing when the text is what the bot stored for the message (Discord
        resends an unchanged message when a link preview unfolds, it is pinned, a thread is started from
        it), or when nothing holds the message. ``edited_at`` (the payload's ``edited_timestamp``, epoch
        seconds) decides for an old message whose text the bot no longer holds: learned after it, no edit.
        """
        self.active += 1
        try:
            async with self._one_at_a_time:
                message_id = str(message_id)
                authors = await self.authors_in_thread(thread_id, {message_id})
                return await self.eraser.edit_message(thread_id, message_id, text, authors=authors,
                                                      edited_at=edited_at, names=names)
        finally:
            self.active -= 1

    # ---- servers the bot was removed from
    async def server_removed(self, guild_id: str, *, at: float | None = None) -> None:
        """The bot was removed from a server: its data goes after ``retention.removed_server_days``."""
        await self.storage.removed_guilds.mark(str(guild_id), time.time() if at is None else at)
        if self.removed_server_days == 0:
            await self.sweep_removed_servers()

    async def server_back(self, guild_id: str) -> None:
        """The bot is in the server (again): nothing of it is deleted."""
        if await self.storage.removed_guilds.unmark(str(guild_id)):
            log.info("server %s added the bot back before its data was deleted", guild_id)

    def servers_judged(self, mine: Callable[[str], bool]) -> None:
        """This process's READY was compared with the stored servers: sweeps may run, for ``mine`` only."""
        self.mine = mine
        self.judged.set()

    async def sweep_removed_servers(self, *, now: float | None = None) -> list[str]:
        """Delete the data of servers removed longer ago than the retention; return their IDs.

        Only servers this process's shards own (``mine``, set at READY): another process's READY may not
        have judged its servers yet."""
        now = time.time() if now is None else now
        cutoff = now - self.removed_server_days * 86400
        swept: list[str] = []
        seen: set[str] = set()
        # Read again after each server: one that added the bot back while another was erased is not due.
        while (due := [g for g in await self.storage.removed_guilds.due(cutoff) if g not in seen and self.mine(g)]):
            guild_id = due[0]
            seen.add(guild_id)

            async def still_due(guild_id: str = guild_id) -> bool:  # asked again under the erasure lock
                return guild_id in await self.storage.removed_guilds.due(cutoff)

            # The settings (persona, instructions: text admins wrote) go first, so the guild job's one
            # compaction also removes their old pages; a crash in between leaves the server marked, and the
            # next sweep repeats both (deleting absent settings is a no-op).
            forget = self.forget_settings
            try:
                erased = await self.eraser.erase_guild(
                    guild_id, still_due=still_due, first=None if forget is None else (lambda g=guild_id: forget(g)))
            finally:
                self.forget_stored(None)  # which threads were that server's is not kept here; all re-checked
            if erased is None:
                continue  # added back while the sweep waited for the erasure lock (or swept meanwhile)
            swept.append(guild_id)
            self.on_swept(guild_id)
        return swept

    def start(self) -> None:
        """Sweep once READY was judged, then every ``SWEEP_EVERY`` seconds: a removal recorded before a
        restart is kept. A process without a gateway (the console) never sweeps."""
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_forever(), name="removed-server-sweep")

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
            self._sweeper = None

    async def _sweep_forever(self) -> None:
        await self.judged.wait()
        while True:
            try:
                await self.sweep_removed_servers()
            except Exception:  # noqa: BLE001 - retried at the next round
                log.exception("sweeping removed servers failed; will retry")
            await asyncio.sleep(SWEEP_EVERY)
