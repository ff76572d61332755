"""Side conversations: one person's private exchange with the bot about a channel ("Ask about this").

Each has its own stored conversation, so nobody else's holds it, named after the channel (or thread) it was
asked in and the person. The name is the engine's, not the cog's: deleting a thread or channel takes its
side conversations along (``erasure.steps``), and Discord sends no deletion for the messages of a deleted
thread, so the answers about them would otherwise stay. Finding them is a listing of keys by this prefix.
"""

from __future__ import annotations

PREFIX = "ask:"


def side_thread(channel_id: str | int, user_id: str | int) -> str:
    """The conversation of ``user_id``'s side questions in one channel or thread."""
    return f"{PREFIX}{channel_id}:{user_id}"


def side_prefix(channel_id: str | int) -> str:
    """What every side conversation of one channel or thread starts with."""
    return f"{PREFIX}{channel_id}:"
