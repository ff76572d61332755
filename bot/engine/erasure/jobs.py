"""The kinds of erasure job the journal holds, the count of erasures running (for shutdown checks), and
whether a recorded erasure still owes a person's or a server's data."""

from __future__ import annotations

import functools
import json
from typing import Any, Awaitable, Callable, Iterable, TypeVar

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


async def erasure_owed(journal: ErasureJournal, user_id: str, place: str | None, *,
                       messages: Iterable[str] = (), threads: Iterable[str] = ()) -> bool:
    """Whether an erasure of this person (everywhere, or in ``place``, a server ID) or of that server was
    recorded and has not finished: a shutdown cut it short, or it waits to be run again at start-up. So
    does a recorded deletion or edit of one of ``messages`` (those the extraction reads), and a recorded
    deletion of one of ``threads``.

    What it erases is not learned meanwhile. A shutdown cancels the journal's re-run of a wipe mid-way,
    releasing the person's hold, and the final pass of learning came just after: it learned from the
    words the unfinished wipe was removing. A deletion or an edit cut short the same way let the deleted
    message (or the old text of a typo fixed at once) be learned, and its re-run did not take it back out.
    """
    messages, threads = {str(m) for m in messages}, {str(t) for t in threads}
    for job in await journal.unfinished():
        if job.kind == PERSON and job.user_id == user_id and job.guild_id in (None, place):
            return True
        if job.kind == GUILD and place is not None and job.guild_id == place:
            return True
        if job.kind in (MESSAGES, EDIT, THREAD):
            # Only what the extraction reads: held back by author, one stuck deletion stopped all of a
            # person's learning everywhere (and an edit's "authors" names everyone who learned from it).
            subject = _subject(job.subject)
            named = {str(m) for m in subject.get("messages") or ()} | {str(subject.get("message") or "")}
            if named & messages or (job.kind == THREAD and str(subject.get("thread") or "") in threads):
                return True
    return False


def _subject(raw: str | None) -> dict[str, Any]:
    try:
        subject = json.loads(raw or "{}")
    except ValueError:
        return {}
    return subject if isinstance(subject, dict) else {}
