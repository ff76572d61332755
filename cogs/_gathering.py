"""Turns per channel: every addressed message lands in one, and quick follow-ups share one answer.

Not an extension: a helper the chat cog uses. Why it is shaped like this:

- **A lone message is never delayed.** A message from someone who has not written in this channel for
  ``gather_seconds`` starts its turn at once (if nothing is ahead of it), so reply latency is what it was.
- **Follow-ups are answered together.** A message from the same person that arrives while their turn
  is still being answered (the answer not yet delivered) joins that turn: the attempt in flight is
  cancelled (its model call stopped, a streamed preview kept for the new answer) and the turn starts
  again with every message, once the person has been quiet for ``gather_seconds``. A message within
  ``gather_seconds`` of their previous one that finds no turn in flight waits for that same quiet
  moment, so "hey" / "can you help with my CV?" / "hello??" get one answer. Both targets hold because
  only a message that *is* a follow-up ever waits.
- **Bounded without silence.** At most ``max_waiting`` turns wait per channel; a message that would
  open one more is refused here, and the caller records it in the conversation (heard, not answered)
  with a notice. A person's further messages join their waiting turn without opening another.
- Turns run one at a time per channel, in arrival order, so the conversation reads as it happened.
- **Follow-ups restart an answer at most ``MAX_RESTARTS`` times.** Someone sending one more message every
  few seconds (within the rate limit) would otherwise cancel every attempt for ever: the channel's other
  turns never start, and a cancelled model call is paid to the provider but counted in no budget. After
  that many restarts the answer in flight is finished, and further follow-ups wait in a turn of their own
  behind it (and behind everyone already waiting).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_RESTARTS = 3  # follow-ups that may cancel and restart one answer; later ones get a turn of their own


@dataclass
class Turn(Generic[T]):
    """Messages of one person answered together; ``items`` in arrival order."""

    author_id: int
    items: list[T]
    not_before: float = 0.0  # loop time: a follow-up waits for a quiet moment
    attempt: asyncio.Task | None = None
    delivered: bool = False  # the answer exists and is being sent: no more restarts
    restart: bool = False
    follow_ups: int = 0  # attempts a follow-up cancelled (at most MAX_RESTARTS)
    state: dict = field(default_factory=dict)  # what the runner keeps between attempts (a streamed preview)

    def start_again(self, *, again: bool = True) -> None:
        """Stop the attempt in flight; ``again``: answer the turn once more (False: it has nothing left)."""
        self.restart = again
        if self.attempt is not None and not self.attempt.done():
            self.attempt.cancel()


class ChannelTurns(Generic[T]):
    """The waiting and running turns of one channel."""

    def __init__(self, run: Callable[[Turn[T]], Awaitable[None]], *, gather_seconds: float, max_waiting: int) -> None:
        self.run = run
        self.gather = gather_seconds
        self.max_waiting = max_waiting
        self.waiting: deque[Turn[T]] = deque()
        self.current: Turn[T] | None = None
        self.worker: asyncio.Task | None = None
        self.last_seen: dict[int, float] = {}  # person -> loop time of their latest message here

    @property
    def idle(self) -> bool:
        now = asyncio.get_running_loop().time()
        quiet = all(now - t > self.gather for t in self.last_seen.values())
        return not self.waiting and self.current is None and (self.worker is None or self.worker.done()) and quiet

    def offer(self, author_id: int, item: T) -> bool:
        """Put a message into a turn; False when the channel already has ``max_waiting`` turns waiting."""
        now = asyncio.get_running_loop().time()
        previous = self.last_seen.get(author_id)
        follow_up = previous is not None and now - previous <= self.gather
        current = self.current
        if (current is not None and current.author_id == author_id and not current.delivered
                and current.follow_ups < MAX_RESTARTS):
            if current.attempt is not None and not current.attempt.done():
                current.follow_ups += 1  # it cancels an attempt; lines typed while it waits to start again do not
            current.items.append(item)
            current.not_before = now + self.gather
            current.start_again()  # answered again, with everything, once they pause
            self.last_seen[author_id] = now
            return True
        if self.join_waiting(author_id, item, not_before=now + self.gather if follow_up else None):
            self.last_seen[author_id] = now
            return True
        if len(self.waiting) >= self.max_waiting:
            return False
        self.last_seen[author_id] = now
        self.waiting.append(Turn(author_id, [item], not_before=now + self.gather if follow_up else now))
        if self.worker is None or self.worker.done():
            self.worker = asyncio.create_task(self._work(), name="channel-turns")
        return True

    def join_waiting(self, author_id: int, item: T, *, not_before: float | None = None,
                     most: int | None = None) -> bool:
        """Add a message to the author's turn that is waiting to start, if there is one (also a follow-up
        while the bot shuts down: answered with what it follows, in order; never a new turn). ``not_before``:
        the turn waits at least until then (a quiet moment after a quick follow-up); ``most``: not into a
        turn that holds that many messages already."""
        for turn in self.waiting:
            if turn.author_id == author_id and (most is None or len(turn.items) < most):
                turn.items.append(item)
                if not_before is not None:
                    turn.not_before = max(turn.not_before, not_before)
                return True
        return False

    def remove(self, match: Callable[[T], bool]) -> list[T]:
        """Take matching messages out of waiting turns and the undelivered one (deleted before an answer)."""
        removed: list[T] = []
        for turn in list(self.waiting):
            removed += [i for i in turn.items if match(i)]
            turn.items = [i for i in turn.items if not match(i)]
            if not turn.items:
                self.waiting.remove(turn)
        current = self.current
        if current is not None and not current.delivered and any(match(i) for i in current.items):
            removed += [i for i in current.items if match(i)]
            current.items = [i for i in current.items if not match(i)]
            current.start_again(again=bool(current.items))
        return removed

    def restart(self, match: Callable[[T], bool], delay: Callable[[int], float] = lambda _author: 0.0) -> bool:
        """Answer the turn being answered again from the start if one of its messages matches (it was
        edited): the attempt in flight is cancelled as for a follow-up, and the new one waits
        ``delay(author)`` seconds. Asked only when an attempt is in flight: an edit while the turn waits to
        start again costs no new model call (the next attempt reads the latest text anyway)."""
        current = self.current
        if current is None or current.delivered or not any(match(i) for i in current.items):
            return False
        if current.attempt is not None and not current.attempt.done():
            wait = delay(current.author_id)
            if wait > 0:
                current.not_before = max(current.not_before, asyncio.get_running_loop().time() + wait)
        current.start_again()
        return True

    def items(self) -> list[T]:
        """Every message not yet answered (for edits)."""
        turns = ([self.current] if self.current is not None and not self.current.delivered else []) + list(self.waiting)
        return [i for t in turns for i in t.items]

    async def _wait_until(self, turn: Turn[T]) -> None:
        loop = asyncio.get_running_loop()
        while (delay := turn.not_before - loop.time()) > 0:  # the window moves while they keep typing
            await asyncio.sleep(delay)

    async def _work(self) -> None:
        while self.waiting:
            turn = self.waiting[0]
            await self._wait_until(turn)
            if not self.waiting or self.waiting[0] is not turn:
                continue
            self.waiting.popleft()
            self.current = turn
            try:
                while turn.items:
                    turn.restart = False
                    turn.attempt = asyncio.create_task(self.run(turn))
                    await asyncio.wait([turn.attempt])
                    if not turn.restart:
                        if not turn.attempt.cancelled() and turn.attempt.exception() is not None:
                            log.error("a turn failed", exc_info=turn.attempt.exception())
                        break
                    await self._wait_until(turn)
            finally:
                self.current = None
