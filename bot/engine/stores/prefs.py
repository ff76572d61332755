"""A person's memory settings: pause learning, private mode, reactions, DM sharing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Prefs:
    """A person's memory settings. ``dm_in_servers`` None means "the server's default" (config)."""

    paused: bool = False
    private: bool = False
    reactions: bool = True
    dm_in_servers: bool | None = None
    scope: str | None = None  # "global" | "server"; None means the server's default (memory.scope)


PREF_FIELDS = ("paused", "private", "reactions", "dm_in_servers", "scope")


class PrefsStore(Protocol):
    """Read on every reply, changed rarely. A change must hold at once for every later read."""

    async def get(self, user_id: str) -> Prefs:
        """The person's settings (defaults when they never changed any)."""
        ...

    async def set(self, user_id: str, **values: bool | str | None) -> Prefs:
        """Change some settings (names from ``PREF_FIELDS``, in one transaction); return all of them.

        Raises:
            ValueError: a name not in ``PREF_FIELDS``.
        """
        ...
