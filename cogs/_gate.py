"""Who may talk to the bot, and how fast: allow/block lists and the per-person cooldown.

Not an extension: helpers for the chat cog. Slash commands are not gated: everyone can always see,
export and erase what the bot holds about them.
"""

from __future__ import annotations

import time

import discord

from bot.settings import AccessSection


def access_allows(message: discord.Message, access: AccessSection) -> bool:
    """Whether the lists in ``[access]`` let this message be answered."""
    author = message.author
    if author.id in access.block_users or (access.allow_users and author.id not in access.allow_users):
        return False
    if message.guild is None:
        return access.dms_enabled
    channel = message.channel
    ids = {channel.id, getattr(channel, "parent_id", None)}
    if ids & set(access.block_channels) or (access.allow_channels and not ids & set(access.allow_channels)):
        return False
    roles = {r.id for r in getattr(author, "roles", [])}
    if roles & set(access.block_roles) or (access.allow_roles and not roles & set(access.allow_roles)):
        return False
    return True


class Cooldown:
    """At most one answer per person every ``seconds``; one notice per window, not one per message."""

    def __init__(self, seconds: float, *, clock=time.monotonic) -> None:
        self.seconds = seconds
        self.clock = clock
        self._last: dict[int, float] = {}
        self._noticed: dict[int, float] = {}

    def check(self, user_id: int) -> tuple[bool, bool]:
        """Return (allowed, send_notice) for a message from ``user_id`` now."""
        if self.seconds <= 0:
            return True, False
        now = self.clock()
        last = self._last.get(user_id)
        if last is not None and now - last < self.seconds:
            noticed = self._noticed.get(user_id)
            notice = noticed is None or noticed < last
            if notice:
                self._noticed[user_id] = now
            return False, notice
        if len(self._last) > 100_000:  # bounded: forget people who were quiet for a while
            self._last = {u: t for u, t in self._last.items() if now - t < self.seconds}
            self._noticed.clear()
        self._last[user_id] = now
        return True, False
