"""The JSON document a person gets when they export what the bot knows about them."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Sequence

from bot.engine.memory import StoredMemory

EXPORT_VERSION = 1


def export_memories(user_id: str, memories: Sequence[StoredMemory]) -> dict:
    """A self-describing, versioned export of one person's memories."""
    return {
        "format": "remembering-bot.memories",
        "version": EXPORT_VERSION,
        "user_id": str(user_id),
        "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "memories": [
            {
                "id": m.key,
                "content": m.content,
                "origin": m.origin,
                "created_at": m.created_at.isoformat(),
                "updated_at": m.updated_at.isoformat(),
            }
            for m in memories
        ],
    }
