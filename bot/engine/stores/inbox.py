"""The learning inbox: why no memory work is lost.

Every answered turn is recorded before its reply is returned; background extraction later reads the
turns a person has not had extracted yet and marks them done. Extracted turns are kept only as a short
per-thread context window, so the inbox is bounded by threads, not by turns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class InboxTurn:
    """One recorded turn: what a person said and what the bot answered."""

    id: int
    thread_id: str
    user_id: str
    author: str
    human: str
    ai: str
    origin: dict
    created: float


@dataclass(frozen=True)
class PendingKey:
    """A (thread, person) pair with turns waiting for extraction."""

    thread_id: str
    user_id: str
    count: int
    last_created: float


class Inbox(Protocol):
    """Turns waiting to be learned from, in recording order (IDs increase)."""

    @property
    def epoch(self) -> str:
        """An identity for this inbox's ID sequence.

        Extraction watermarks in the memory store are trusted only for the epoch that wrote them: if the
        inbox is ever recreated its IDs restart, and an old watermark must not skip new turns.
        """
        ...

    async def record(self, *, thread_id: str, user_id: str, author: str, human: str, ai: str, origin: dict) -> int:
        """Store a finished turn; return how many are now pending for that (thread, person).

        Returns 0, storing nothing, while the person has paused learning (``Prefs.paused``), and while an
        ``ERASURE`` claim on the person is held in any process (a shared backend; see
        :class:`bot.engine.stores.locks.CrossProcessLocks`). The pause is read in the same statement as
        the insert, not before it: a pause committed before the record holds (one made while the model
        answered included), and a reply spends one round trip on it instead of two.
        """
        ...

    async def pending(self) -> list[PendingKey]:
        """Every (thread, person) pair with unextracted turns, oldest activity first."""
        ...

    async def batch(self, thread_id: str, user_id: str, context: int) -> tuple[list[InboxTurn], list[InboxTurn]]:
        """Return (up to ``context`` turns of the thread before the first pending one, the pending turns)."""
        ...

    async def mark_extracted(self, thread_id: str, ids: list[int]) -> None:
        """Mark turns done and trim the thread's extracted turns to the context window."""
        ...

    async def edit_message(self, message_id: str, human: str) -> list[InboxTurn]:
        """A recorded message was edited: its rows (pending or kept as context) get the new text.

        Returns the rows as they were *before* the edit, so the caller can tell what was already learned.
        """
        ...

    async def forget_messages(self, message_ids: set[str]) -> int:
        """Delete the rows of these Discord messages (pending or kept as context); return how many."""
        ...

    async def forget_thread(self, thread_id: str) -> int:
        """Delete every row of a thread (its channel was deleted); return how many."""
        ...

    async def forget_guild(self, guild_id: str) -> int:
        """Delete every row learned in one server (the bot was removed from it); return how many."""
    async def every_turn(self) -> list[InboxTurn]:
        """Every turn held, pending or kept as context (for erasure: quotes in other people's turns).

        Bounded by threads times the context window plus what is pending, not by history.
        """
        ...

    async def rewrite_turns(self, texts: dict[int, tuple[str, str]]) -> None:
        """Replace the ``(human, ai)`` texts of some turns, in one transaction (quotes cut out)."""
        ...


async def still_queued(inbox: Inbox, thread_id: str, user_id: str, message_id: str) -> bool:
    """Whether one of a person's messages waits in the learning queue, not learned yet (or queued again)."""
    _, pending = await inbox.batch(str(thread_id), str(user_id), 0)
    return any(str(t.origin.get("message_id")) == str(message_id) for t in pending)
