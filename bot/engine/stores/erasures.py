"""The erasure journal: an erasure is recorded before it starts and finished after a crash at any point.

An erasure touches several files (conversations, memories, the inbox) and cannot be one transaction. So
it is written down first (who, which server, who asked, and the quote rule: keyed hashes of the erased
words, never the words), every step is idempotent, and the row is deleted only once every step is done
and the deleted content is unrecoverable (WAL truncated). At start-up unfinished erasures run again.
A row with ``quotes`` None was requested by another process (``python -m bot memories wipe`` while the
bot runs): the running bot gathers the words and does it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

OWED_COMPACTION = "compact"  # the kind of the rows recording a compaction owed (no IDs, no text)


@dataclass(frozen=True)
class ErasureJob:
    """One erasure, as recorded. ``kind`` is ``person`` (a wipe or purge), ``quotes``,
    ``messages`` (deleted Discord messages), ``thread`` (a deleted channel or thread), ``guild`` (a server
    the bot was removed from), ``edit`` (an edited message) or ``memories`` (memories the person deleted or
    corrected)."""

    id: int
    kind: str
    user_id: str
    guild_id: str | None
    actor: str | None
    actor_id: str | None
    quotes: bytes | None
    requested: float
    # What a deletion is about, as IDs only (JSON): ``{"thread", "messages", "authors"}`` for ``messages``,
    # ``{"thread"}`` for ``thread``; for ``edit`` the plan (IDs, the message's *new* text, never the old);
    # ``{"keys"[, "replaced"]}`` for ``memories``; None for the other kinds (``guild`` uses ``guild_id``).
    subject: str | None = None


class ErasureJournal(Protocol):
    async def begin(self, *, kind: str, user_id: str, guild_id: str | None = None, actor: str | None = None,
                    actor_id: str | None = None, quotes: bytes | None = None, subject: str | None = None) -> int:
        """Record an erasure before any of it happens (committed on return); return its ID."""
        ...

    async def set_quotes(self, job_id: int, quotes: bytes) -> None:
        """Store the quote rule of a requested erasure once its words are gathered (before any deletion)."""
        ...

    async def unfinished(self) -> list[ErasureJob]:
        """Erasures recorded and not yet finished, oldest first (an owed compaction is not one)."""
        ...

    async def owe_compaction(self) -> None:
        """Record, durably, that finished erasures owe a compaction (a record each; one compaction pays all).

        Written before a finished job's row goes, so a crash before the compaction still compacts at
        the next start (see ``bot.engine.erasure.compaction``). It holds no IDs, no text, no hashes.
        """
        ...

    async def compaction_owed(self) -> float | None:
        """When the compaction still owed was first owed (epoch seconds); None when nothing is owed."""
        ...

    async def owed_mark(self) -> int:
        """The newest debt recorded so far (0: none), read just before a compaction starts."""
        ...

    async def compaction_paid(self, up_to: int) -> None:
        """A compaction ran after the debts up to ``up_to`` (``owed_mark``) were recorded: forget those.

        A debt recorded while it ran (a turn taking back a wiped person's messages, which owes without the
        erasure lock) stays for the next compaction: it may be about words written after this one began.
        """
        ...

    async def finish(self, job_id: int) -> None:
        """Forget a finished erasure (its row, and so its quote hashes, go)."""
        ...
