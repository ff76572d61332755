"""Storage housekeeping the engine asks for but cannot do itself: it touches the backend's own files and
LangGraph's tables, so each backend implements it."""

from __future__ import annotations

from typing import Protocol


class Maintenance(Protocol):
    async def prune_thread(self, thread_id: str) -> None:
        """Drop the thread's superseded checkpoints, keeping only the latest (nothing reads old ones)."""
        ...

    async def conversations_named(self, prefix: str) -> list[str]:
        """The stored conversations whose thread ID starts with ``prefix``: a listing of keys, no state read
        (the side conversations of a deleted thread, ``conversation.side``)."""
        ...

    async def erase_person_rows(self, user_id: str, *, guild_id: str | None = None) -> int:
        """Delete the person's rows from the engine's own stores; return how many pending turns went.

        All their inbox rows, pending or kept as context (or, with ``guild_id``, those from that server;
        only the pending ones are counted), and all their cached vectors (derived from memory text;
        recomputed on demand for what remains).
        """
        ...

    async def compact(self) -> dict[str, int]:
        """After an erasure: make deleted content unrecoverable from the live database.

        SQLite truncates the write-ahead logs (deleted pages were zeroed by ``secure_delete``); PostgreSQL
        vacuums the affected tables so no dead tuple keeps the text, and reads the verbose report. Returns the
        dead row versions that could not be removed yet, by table (an older snapshot still sees them; they
        are retried, then logged, and autovacuum removes them later); raises when compaction itself failed
        (an erasure then stays in its journal and is retried).
        """
        ...
