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


class ShownSources:
    """Records the source messages of the memories put in a prompt, as reaching that prompt's thread.

    A memory repeats its source message's words, and an answer may repeat the memory: "your door code is
    4417" in a DM, learned from a message in #general. Deleting that message must take those words out of
    the DM too, so the pair (source message, thread) goes into the index before the model is called, like
    a quoted message. Sources posted in the thread itself need no row (the deletion visits it anyway).

    The same memories are shown in the same thread turn after turn: pairs written by this process are
    remembered (bounded), so a reply writes only what is new. A forgotten pair is written again at worst
    (the write is idempotent).
    """

    LIMIT = 100_000

    def __init__(self, reach: MessageReach) -> None:
        self._reach = reach
        self._written: dict[tuple[str, str], None] = {}

    def forget(self) -> None:
        """Forget which pairs were written (after any erasure: it may have deleted rows, and the same pair
        must then be written again)."""
        self._written.clear()

    async def __call__(self, thread_id: str, message_ids: Iterable[str]) -> None:
        new = [m for m in dict.fromkeys(str(i) for i in message_ids) if m and (m, thread_id) not in self._written]
        if not new:
            return
        await self._reach.reached(thread_id, new)
        if len(self._written) + len(new) > self.LIMIT:
            self._written.clear()
        self._written.update(((m, thread_id), None) for m in new)
