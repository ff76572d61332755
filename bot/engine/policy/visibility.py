"""Where a person's memories may be used: one policy per person, resolved once per message, applied here.

A memory keeps every place that contributed to it (``StoredMemory.sources``), and the **strictest** rule
over all of them applies:

- a memory any of whose sources is a DM is used in DMs only, unless the person shares DM memories in
  servers (``/memories share-dm on``, default ``memory.dm_memories_in_servers``);
- with server scope (``memory.scope = "server"``, the default, or ``/memories scope server``) a memory
  any of whose sources is a server is used in that server only (and in the person's DMs): what someone
  said in one server stays out of the others. With ``"global"`` server-learned memories are used in
  every server;
- in the person's own DMs everything of theirs may be used (only they read the answer);
- a memory with no recorded place at all (written before origins existed) is treated as global.

A memory patched from two servers is therefore used in neither under server scope (only in DMs): it
holds words from both, and each server may only see its own.

The same policy decides which existing memories the extractor is shown (so a conversation in one place
can never patch, and so move, a memory that is not allowed there). Private mode (no memories in replies)
is part of the reply policy, not of extraction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Literal

from bot.engine.memories.records import StoredMemory
from bot.engine.stores import Prefs
from bot.settings import MemorySection

Scope = Literal["global", "server"]
DM = "dm"


@dataclass(frozen=True)
class Visibility:
    """One person's rules, resolved for the place being answered (a server ID, or ``"dm"``)."""

    place: str = DM
    use_memories: bool = True  # False in private mode: no memories in replies at all
    dm_in_servers: bool = False
    scope: Scope = "server"

    def allows(self, memory: StoredMemory) -> bool:
        """Whether every place this memory came from may be seen here."""
        if self.place == DM:
            return True
        for place in memory.places():
            if place == DM:
                if not self.dm_in_servers:
                    return False
            elif self.scope == "server" and place != self.place:
                return False
        return True


def resolve_visibility(prefs: Prefs, memory_settings: MemorySection, place: str, *, for_reply: bool = True) -> Visibility:
    """A person's policy at ``place``: their own settings where they chose, the server's defaults elsewhere.

    Args:
        prefs: the person's :class:`Prefs` (``dm_in_servers`` / ``scope`` None mean "the default").
        memory_settings: ``settings.memory`` (``dm_memories_in_servers``, ``scope``).
        place: where the message is (a server ID, or ``"dm"``).
        for_reply: False for extraction, which is not a reply and so ignores private mode.
    """
    dm_in_servers = getattr(prefs, "dm_in_servers", None)
    scope = getattr(prefs, "scope", None)
    return Visibility(
        place=str(place or DM),
        use_memories=not (for_reply and getattr(prefs, "private", False)),
        dm_in_servers=memory_settings.dm_memories_in_servers if dm_in_servers is None else bool(dm_in_servers),
        scope=memory_settings.scope if scope is None else scope,
    )


def allowed_here(memories: Iterable[StoredMemory], policy: Visibility) -> list[StoredMemory]:
    """The memories that may be used under ``policy`` (none at all in private mode), in their order."""
    if not policy.use_memories:
        return []
    return [m for m in memories if policy.allows(m)]
