"""Token usage per server, person and UTC day: the daily budgets and ``python -m bot stats``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class UsageRow:
    """Usage summed over all days for one (server, person); ``guild_id`` is ``"dm"`` for DMs."""

    guild_id: str
    user_id: str
    calls: int
    prompt_tokens: int
    completion_tokens: int


class UsageStore(Protocol):
    async def record(self, guild_id: str, user_id: str, prompt_tokens: int, completion_tokens: int) -> None:
        """Count one model call against today (UTC)."""
        ...

    async def tokens_today(self, guild_id: str, user_id: str | None = None) -> int:
        """Tokens used today (UTC) in a server, or by one person in a server (or in DMs)."""
        ...

    async def totals(self) -> list[UsageRow]:
        """Usage summed over all days, per server and person, biggest first."""
        ...

    async def prune(self, before_day: str) -> int:
        """Delete the counts of days before ``before_day`` (``YYYY-MM-DD``, UTC); return how many rows."""
        ...
