"""Cached memory embeddings, so a memory's text is embedded once (see ``bot.engine.recall.vectors``).

A row is derived from a memory's text (its digest and its vector): when the memory is erased or its text
replaced, the row goes too (:meth:`VectorCache.delete`, called by the erasure steps), so nothing derived
from erased text stays on disk. A replaced memory gets a fresh row from its new text on demand.
"""

from __future__ import annotations

from typing import Protocol


class VectorCache(Protocol):
    async def get(self, user_id: str) -> dict[str, tuple[str, bytes]]:
        """A person's cached vectors: memory key -> (text digest, unit float32 vector as bytes)."""
        ...

    async def put(self, user_id: str, rows: list[tuple[str, str, bytes]]) -> None:
        """Store or replace ``(memory key, digest, vector)`` rows."""
        ...

    async def delete(self, user_id: str, keys: list[str]) -> int:
        """Delete the rows of these memory keys (absent keys are ignored); return how many went."""
        ...
