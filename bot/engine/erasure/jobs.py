"""The kinds of erasure job the journal holds, the count of erasures running (for shutdown checks), and
whether a recorded erasure still owes a person's or a server's data."""

from __future__ import annotations

import functools
from typing import Any, Awaitable, Callable, TypeVar

from bot.engine.stores import ErasureJournal

PERSON, QUOTES, MESSAGES, THREAD, GUILD = "person", "quotes", "messages", "thread", "guild"
EDIT, MEMORIES = "edit", "memories"

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def counted(method: F) -> F:
    """Count the erasure as running while it runs (``Eraser.active``: for shutdown checks and tests)."""

    @functools.wraps(method)
    async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        self.active += 1
        try:
            return await method(self, *args, **kwargs)
        finally:
            self.active -= 1

    return wrapper  # type: ignore[return-value]


class ErasurePending(Exception):
    """Learning waits: an erasure of this person (or server) is recorded and unfinished (see
    :func:`erasure_owed`). Their turns stay queued, retried with the database's back-off; the erasure,
    once it runs again, takes them out."""


async def erasure_owed(journal: ErasureJournal, user_id: str, place: str | None) -> bool:
    """Whether an erasure of this person (everywhere, or in ``place``, a server ID) or of that server was
    recorded and has not finished: a shutdown cut it short, or it waits to be run again at start-up.

    What it erases is not learned meanwhile. A shutdown cancels the journal's re-run of a wipe mid-way,
    releasing the person's hold, and the final pass of learning came just after: it learned from the
    words the unfinished wipe was removing.
    """
    for job in await journal.unfinished():
        if job.kind == PERSON and job.user_id == user_id and job.guild_id in (None, place):
            return True
        if job.kind == GUILD and place is not None and job.guild_id == place:
            return True
    return False
