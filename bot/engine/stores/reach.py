"""Where a message's text reached: the threads whose prompts showed it, so deleting it visits only those.

A message is posted in one thread (the deletion names it), but its text also reaches other threads'
prompts: a reply chain or a thread starter quoted there, *Ask about this* (the asker's side thread), a
forward. The bot may repeat it in its answers there (and in the turns queued for learning with them),
which the quote rule must find when the message is deleted. So each time a message's text is shown in a
thread other than through the thread itself, the pair (message ID, thread ID) is recorded here (IDs only).

Messages posted before this index existed may have reached threads nobody recorded: ``since()`` says from
when the record is complete, and the engine falls back to its full scan for older messages.
"""

from __future__ import annotations

from typing import Iterable, Protocol


class MessageReach(Protocol):
    async def reached(self, thread_id: str, message_ids: Iterable[str]) -> None:
        """Record that these messages' text was shown in ``thread_id`` (idempotent; committed on return)."""
        ...

    async def threads_of(self, message_ids: Iterable[str]) -> set[str]:
        """Every thread recorded for any of these messages."""
        ...

    async def since(self) -> float:
        """Epoch seconds from which every reach is recorded (0: since this database was created)."""
        ...

    async def forget(self, message_ids: Iterable[str]) -> None:
        """The messages were deleted (and erased everywhere they reached): their rows go."""
        ...

    async def forget_thread(self, thread_id: str) -> None:
        """A thread was deleted: the rows naming it go."""
        ...
