"""Servers the bot was removed from, waiting for their data to be deleted (``retention.removed_server_days``).

Kept in storage so the sweep survives restarts: a removal recorded before a crash is still carried out
after it, and a server that adds the bot back before the deadline is taken off the list.
"""

from __future__ import annotations

from typing import Protocol


class RemovedGuilds(Protocol):
    async def mark(self, guild_id: str, removed_at: float) -> None:
        """Record that the bot left ``guild_id`` at ``removed_at`` (UNIX time); an earlier mark is kept."""
        ...

    async def unmark(self, guild_id: str) -> bool:
        """The bot is back in the server: nothing will be deleted; return whether it was marked."""
        ...

    async def due(self, removed_before: float) -> list[str]:
        """Servers removed before ``removed_before``: their data is to be deleted now."""
        ...

    async def done(self, guild_id: str) -> None:
        """The server's data was deleted: forget the mark."""
        ...
