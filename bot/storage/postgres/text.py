"""PostgreSQL ``text`` and ``jsonb`` cannot hold a NUL character (SQLite can): drop it on the way in.

A NUL carries nothing in a chat message or a memory, and refusing the write would lose the turn; so
strings written to the bot's tables and to the memory store lose their NULs, and nothing else changes.
"""

from __future__ import annotations

from typing import Any


def without_nul(value: Any) -> Any:
    """``value`` with every NUL removed from every string in it (dicts and lists walked)."""
    if isinstance(value, str):
        return value.replace("\x00", "") if "\x00" in value else value
    if isinstance(value, dict):
        return {without_nul(k): without_nul(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(without_nul(v) for v in value)
    return value
