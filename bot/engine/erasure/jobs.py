"""The kinds of erasure job the journal holds, and the count of erasures running (for shutdown checks)."""

from __future__ import annotations

import functools
from typing import Any, Awaitable, Callable, TypeVar

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
