"""Cached memory embeddings, so a memory's text is embedded once (see ``bot.engine.recall.vectors``)."""

from __future__ import annotations

from typing import Protocol


class VectorCache(Protocol):
    async def get(self, user_id: str) -> dict[str, tuple[str, bytes]]:
        """A person's cached vectors: memory key -> (text digest, unit float32 vector as bytes)."""
        ...

    async def put(self, user_id: str, rows: list[tuple[str, str, bytes]]) -> None:
        """Store or replace ``(memory key, digest, vector)`` rows."""
        ...
