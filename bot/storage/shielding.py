"""Writes that finish even when their caller is cancelled (shared by every backend)."""

from __future__ import annotations

import asyncio
import functools
from typing import Awaitable, Callable, Concatenate, ParamSpec, TypeVar

S = TypeVar("S")
P = ParamSpec("P")
T = TypeVar("T")


def shielded(method: Callable[Concatenate[S, P], Awaitable[T]]) -> Callable[Concatenate[S, P], Awaitable[T]]:
    """Run a write to completion even if its caller is cancelled (the caller still sees the cancel).

    A reply deadline cancels the task that is waiting; without this a write could stop half-way and leave
    a connection inside an open transaction.
    """

    @functools.wraps(method)
    async def wrapper(self: S, *args: P.args, **kwargs: P.kwargs) -> T:
        return await asyncio.shield(method(self, *args, **kwargs))

    return wrapper
