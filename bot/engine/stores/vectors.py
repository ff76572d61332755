"""Cached memory embeddings, so a memory's text is embedded once (see ``bot.engine.recall.vectors``).

A row is derived from a memory's text (its vector, and a version naming the memory as last changed): when
the memory is erased or its text replaced, the row goes too (:meth:`VectorCache.delete`, called by the
erasure steps), so nothing derived from erased text stays on disk. A replaced memory gets a fresh row from
its new text on demand.

Each row also records which embedder made it. Vectors of two embedders live in different spaces, so a
reader asks for one embedder's rows only (``get(user, embedder)``), and after a switch the rows of the old
one are found (``people_with_others``), made again and deleted (``delete_others``) in the background.
Rows written before embedders were recorded have the embedder ``""``: another embedder, made again.
"""

from __future__ import annotations

from typing import Mapping, Protocol


class VectorCache(Protocol):
    async def get(self, user_id: str, embedder: str | None = None) -> dict[str, tuple[str, bytes]]:
        """A person's cached vectors: memory key -> (version, unit float32 vector as bytes).

        With ``embedder``, only the rows that embedder made (what scoring reads); without, every row.
        """
        ...

    async def put(self, user_id: str, rows: list[tuple[str, str, bytes]], *, embedder: str = "",
                  texts: Mapping[str, str] | None = None) -> None:
        """Store or replace ``(memory key, version, vector)`` rows, recorded as made by ``embedder``.

        One row per memory: a row another embedder made for the same memory is replaced. A backend shared
        by several processes skips rows whose memory no longer exists, or whose person an erasure holds:
        ``SemanticIndex.paused`` stops only this process's indexing, and another's, started from a list
        read before a wipe, would otherwise write erased text's vectors back after it (PostgreSQL does so
        in the insert itself; SQLite has one process, whose pause is enough). ``texts`` (memory key ->
        the text its vector was made from; compared, never stored): such a backend also skips a row whose
        memory says something else by now (corrected by hand, redacted, edited in another process, whose
        removal of the old text's vector came before this write).
        """
        ...

    async def delete(self, user_id: str, keys: list[str]) -> int:
        """Delete the rows of these memory keys (absent keys are ignored); return how many went."""
        ...

    async def delete_others(self, user_id: str, embedder: str) -> int:
        """Delete the person's rows made by any embedder but ``embedder``; return how many went."""
        ...

    async def people_with_others(self, embedder: str, *, after: str = "", limit: int = 100) -> list[str]:
        """Up to ``limit`` people, in order and after ``after``, with a row made by another embedder than ``embedder``."""
        ...
