"""Servers that removed the bot while it was offline, noticed at start-up.

Discord sends GUILD_DELETE only to a connected bot: a server that removes it during a restart or an outage
is simply missing from the next READY. So at READY the servers this process now sees are compared with
the servers it holds data of (stored conversations and what was learned there); one it holds data of but
no longer sees is recorded as removed, and swept after ``retention.removed_server_days`` like a removal
seen live. A server that shows up again (GUILD_CREATE) is taken off the list, as always.

With several processes each sees only its own shards' servers, so only servers owned by this process's
shards are judged (``mine``); the others belong to another process's READY.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable, Iterable

from bot.engine.erasure.conversations import ConversationEraser
from bot.engine.erasure.memories import people
from bot.engine.memories.records import is_snowflake
from bot.engine.memories.repository import MemoryRepository

log = logging.getLogger(__name__)


async def servers_with_data(conversations: ConversationEraser | None, memories: MemoryRepository) -> set[str]:
    """Every server ID that stored conversations or memories' sources name (DMs left out); a source an
    import brought is the file's word, not a sign the bot was ever in that server, and is left out."""
    found: set[str] = set()
    if conversations is not None:
        for thread_id in await conversations.thread_ids():
            guild = await conversations.guild_of(thread_id)
            if guild is not None:
                found.add(guild)
    for user in await people(memories):
        for memory in await memories.list(user):
            found |= {str(s["guild_id"]) for s in memory.sources if s.get("guild_id") is not None and not s.get("imported")}
    # Only snowflakes: a server ID some older import stored unchecked ("x", "²") cannot be asked about, and
    # one such ID made the whole sweep of servers that removed the bot fail (``int()`` of it).
    return {g for g in found if is_snowflake(g)}


async def absent_at_ready(
    present: Callable[[], Iterable[str]], known: set[str], *, mine: Callable[[str], bool],
    removed: Callable[[str], Awaitable[None]], back: Callable[[str], Awaitable[None]],
) -> list[str]:
    """Record as removed every known server of this process's shards the bot is not in; return them.

    ``present()`` is read after the slow scan that made ``known``, and again before each mark: a list taken
    at READY, before a scan of minutes, marked a server that added the bot back meanwhile as removed, and
    took the mark off one that removed it meanwhile (its GUILD_DELETE had just marked it)."""
    here = {str(g) for g in present()}
    for guild_id in here:
        await back(guild_id)
    gone = []
    for guild_id in sorted(g for g in known - here if mine(g)):
        if guild_id not in {str(g) for g in present()}:  # not joined again meanwhile
            gone.append(guild_id)
            await removed(guild_id)
    if gone:
        log.info("%d servers with stored data were not in READY: removed while offline; swept after the retention",
                 len(gone))
    return gone
