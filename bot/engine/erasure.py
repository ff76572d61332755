"""Erase what the bot holds about one person: the single place every wipe and purge goes through."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from bot.engine.memory import MemoryRepository

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ErasureResult:
    memories: int
    pending_turns: int


async def erase_person(storage, user_id: str | int, *, guild_id: str | None = None) -> ErasureResult:
    """Delete a person's memories (all, or only those learned in ``guild_id``) and their pending turns.

    Pending turns are dropped too, otherwise a background extraction could re-learn what was just erased.
    """
    repo = MemoryRepository(storage.store)
    user = str(user_id)
    if guild_id is None:
        count = await repo.wipe(user)
        pending = await storage.ledger.forget_user(user)
    else:
        keys = [m.key for m in await repo.list(user) if str(m.origin.get("guild_id")) == str(guild_id)]
        await repo.apply(user, deletes=keys)
        count = len(keys)
        pending = await storage.ledger.forget_user(user, guild_id=str(guild_id))
    return ErasureResult(memories=count, pending_turns=pending)
