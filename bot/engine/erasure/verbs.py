"""The front door's verbs for what changes or leaves: Discord's edits and deletions, servers, erasing a person.

A mixin of :class:`bot.engine.ChatEngine` (see ``memories/verbs.py`` for why mixins): every one of them
ends in the one :class:`~bot.engine.erasure.eraser.Eraser`, through ``DiscordChanges`` for Discord's events.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

from bot.engine.erasure.conversations import ConversationEraser
from bot.engine.erasure.departures import absent_at_ready, servers_with_data
from bot.engine.erasure.eraser import Eraser
from bot.engine.erasure.events import DiscordChanges
from bot.engine.erasure.jobs import PERSON
from bot.engine.erasure.steps import ErasureResult, MessageErasure
from bot.engine.memories.records import Actor
from bot.engine.memories.repository import MemoryRepository
from bot.metrics import Metrics


class ChangeVerbs:
    """Follow Discord's edits, deletions and servers; erase a person."""

    changes: DiscordChanges
    conversations: ConversationEraser
    eraser: Eraser
    memories: MemoryRepository
    metrics: Metrics

    async def message_edited(self, thread_id: str, message_id: str, text: str, *, edited_at: float | None = None,
                             names: Mapping[str, str] | None = None) -> bool:
        """A message was edited on Discord; ``text`` is what the bot would have stored for it. False, and
        nothing touched, when that is what it stored (not an edit); ``edited_at``: see ``erasure.events``.
        ``names``: user ID -> the name the author goes by now (for learning the new text again)."""
        return await self.changes.edit_message(thread_id, message_id, text, edited_at=edited_at, names=names)

    async def messages_deleted(self, thread_id: str, message_ids: set[str], *,
                               shown: Mapping[str, str] | None = None) -> MessageErasure:
        """Messages were deleted on Discord: they go everywhere (see ``erasure``). The result names, in
        ``replies``, the bot's own Discord messages that answered them (for ``/settings delete-replies``).
        ``shown``: their texts, where Discord's cache still has them (for one only ever shown as context)."""
        result = await self.changes.forget_messages(thread_id, message_ids, shown=shown)
        if result.messages or result.pending_turns or result.memories or result.quotes:
            self.metrics.erasure("message")  # counted when something was held (most deletions hold nothing)
        return result

    async def channel_deleted(self, thread_id: str, *, threads: bool = True) -> None:
        """A channel or thread was deleted: its stored conversation goes, and (``threads``, for a channel)
        those of the threads and forum posts in it, archived ones included. A thread's own deletion passes
        False: it has none, and looking costs a read of every stored conversation."""
        if await self.changes.forget_thread(thread_id, threads=threads):
            self.metrics.erasure("channel")

    async def server_removed(self, guild_id: str) -> None:
        """The bot left (or was removed from) a server: its data goes after the retention period."""
        await self.changes.server_removed(guild_id)

    async def server_back(self, guild_id: str) -> None:
        """The bot is in a server again (joined, or it was seen at start-up): nothing of it is swept."""
        await self.changes.server_back(guild_id)

    async def servers_at_ready(self, present: Callable[[], Iterable[str]], *,
                               mine: Callable[[str], bool] = lambda _: True) -> list[str]:
        """After READY: servers this process's shards own (``mine``) that hold data here but are not among
        ``present()`` (the servers the bot is in now) were removed while the bot was offline; they are swept
        after the retention (see ``erasure/departures.py``). Returns them. Until this has run once (the
        client retries it until it does), no removed server is swept, nor an interrupted server erasure
        re-run (``DiscordChanges.judged``)."""
        known = await servers_with_data(self.conversations, self.memories)
        gone = await absent_at_ready(present, known, mine=mine, removed=self.server_removed, back=self.server_back)
        self.changes.servers_judged(mine)  # the servers present are unmarked: sweeps may run now
        return gone

    async def erasure_recorded(self, user_id: str | int) -> bool:
        """Whether an erasure of the person is in the journal, unfinished: it will be finished (the journal
        is replayed), so a wipe that failed part-way can say so instead of "try again"."""
        return any(j.kind == PERSON and j.user_id == str(user_id) for j in await self.eraser.storage.erasures.unfinished())

    async def erase_person(self, user_id: str | int, *, guild_id: str | None = None,
                           by: Actor | None = None) -> ErasureResult:
        """Erase everything held about a person (or what was learned in one server); see ``erasure``.

        A turn of theirs already in flight finishes first (erasing a thread takes its lock) and is not
        queued for learning; one that starts while the erasure runs is answered without their memories,
        and neither its messages nor its answer are kept or learned from (``conversation/turn.py``).
        """
        # Their turns meanwhile: no memories, nothing kept (the eraser marks them, for the journal's replay
        # too). No memory vectors are written either: the eraser's hold on a person pauses them, see _hold.
        result = await self.eraser.erase_person(user_id, guild_id=guild_id, by=by)
        self.metrics.erasure("person" if guild_id is None else "server")
        return result
