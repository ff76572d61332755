"""How fast one person may be answered: the token bucket, and one notice per burst.

Over the limit a message is still recorded in the conversation (heard, not answered); the person is told
once per burst, and not again until one of their turns has been answered. Both maps are bounded.
"""

from __future__ import annotations

import time
from typing import Callable


class TokenBucket:
    """Per person: ``burst`` messages at once, then one more every ``refill_seconds``.

    ``take`` says whether a message may be answered. The map is bounded: people whose bucket is full again
    are forgotten first.
    """

    def __init__(self, burst: int, refill_seconds: float, *, clock: Callable[[], float] = time.monotonic,
                 max_people: int = 100_000) -> None:
        self.burst = burst
        self.refill_seconds = refill_seconds
        self.clock = clock
        self.max_people = max_people
        self._level: dict[int | str, tuple[float, float]] = {}  # person -> (tokens, at)

    def _tokens(self, user_id: int | str, now: float) -> float:
        tokens, at = self._level.get(user_id, (float(self.burst), now))
        if self.refill_seconds <= 0:
            return float(self.burst)
        return min(float(self.burst), tokens + (now - at) / self.refill_seconds)

    def take(self, user_id: int | str) -> bool:
        """Whether a message from ``user_id`` may be answered now (it uses one token if so)."""
        if self.burst <= 0:
            return True
        now = self.clock()
        tokens = self._tokens(user_id, now)
        allowed = tokens >= 1.0
        self._remember(user_id, tokens - 1.0 if allowed else tokens, now)
        return allowed

    def reserve(self, user_id: int | str) -> float:
        """Take a token for the person, now or the next one to come: how many seconds until it is theirs
        (0: now). The level may go below zero: each reservation is paid for, so reserving again and again
        only moves the wait further out. For work that must happen but may wait (a restart after an edit)."""
        if self.burst <= 0 or self.refill_seconds <= 0:
            return 0.0
        now = self.clock()
        tokens = self._tokens(user_id, now) - 1.0
        self._remember(user_id, tokens, now)
        return 0.0 if tokens >= 0 else -tokens * self.refill_seconds

    def _remember(self, user_id: int | str, tokens: float, now: float) -> None:
        if user_id not in self._level and len(self._level) >= self.max_people:
            full = [u for u in self._level if self._tokens(u, now) >= self.burst]
            for u in full or list(self._level)[: len(self._level) // 2]:
                self._level.pop(u, None)
        self._level[user_id] = (tokens, now)


class NoticeOnce:
    """One notice per burst: none again until one of the person's turns has been answered."""

    def __init__(self, max_people: int = 100_000) -> None:
        self.max_people = max_people
        self._noticed: set[int | str] = set()

    def due(self, user_id: int | str) -> bool:
        """Whether the person should be told now (and, if so, not again this burst)."""
        if user_id in self._noticed:
            return False
        if len(self._noticed) > self.max_people:
            self._noticed.clear()
        self._noticed.add(user_id)
        return True

    def answered(self, user_id: int | str) -> None:
        """A turn of theirs was answered: the next time they go over a limit they are told again."""
        self._noticed.discard(user_id)
