"""Who may talk to the bot, and how fast: allow/block lists and the per-person token bucket.

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


class TokenBucket:
    """Per person: ``burst`` messages at once, then one more every ``refill_seconds``.

    ``take`` says whether a message may be answered. Messages over the limit are still recorded by the
    caller (heard, not answered), which also sends the one notice per burst. The map is bounded: people
    whose bucket is full again are forgotten first.
    """

    def __init__(self, burst: int, refill_seconds: float, *, clock=time.monotonic, max_people: int = 100_000) -> None:
        self.burst = burst
        self.refill_seconds = refill_seconds
        self.clock = clock
        self.max_people = max_people
        self._level: dict[int, tuple[float, float]] = {}  # person -> (tokens, at)

    def _tokens(self, user_id: int, now: float) -> float:
        tokens, at = self._level.get(user_id, (float(self.burst), now))
        if self.refill_seconds <= 0:
            return float(self.burst)
        return min(float(self.burst), tokens + (now - at) / self.refill_seconds)

    def take(self, user_id: int) -> bool:
        """Whether a message from ``user_id`` may be answered now (it uses one token if so)."""
        if self.burst <= 0:
            return True
        now = self.clock()
        tokens = self._tokens(user_id, now)
        allowed = tokens >= 1.0
        self._remember(user_id, tokens - 1.0 if allowed else tokens, now)
        return allowed

    def _remember(self, user_id: int, tokens: float, now: float) -> None:
        if user_id not in self._level and len(self._level) >= self.max_people:
            full = [u for u in self._level if self._tokens(u, now) >= self.burst]
            for u in full or list(self._level)[: len(self._level) // 2]:
                self._level.pop(u, None)
        self._level[user_id] = (tokens, now)
