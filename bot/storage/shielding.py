"""Work that finishes even when its caller is cancelled (shared by every backend)."""

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


async def run_through(step: Awaitable[T]) -> tuple[asyncio.Future[T], bool]:
    """Run ``step`` to its end even if this task is cancelled meanwhile; return it (done) and whether a
    cancel came.

    For what must not be cut off half-way and whose outcome the caller must know: a lock statement that may
    already have been granted, a connection that may already be open. The caller undoes what it must, then
    re-raises the cancel. Unlike :func:`shielded` the caller waits until the step is over, so when a
    cancelled task ends nothing of its own is still running.
    """
    task = asyncio.ensure_future(step)
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait((task,))  # unlike awaiting the task, a cancel here does not reach it
        except asyncio.CancelledError:
            cancelled = True
    return task, cancelled


async def to_the_end(step: Awaitable[T]) -> T:
    """Run ``step`` to its end even if this task is cancelled meanwhile, then re-raise the cancel.

    For schema migrations: LangGraph's SQLite store applies a migration (``ALTER TABLE ... ADD COLUMN``) and
    records its version in two statements, so a cancel between them left the column without the record,
    and every later start failed on "duplicate column name". Finished instead, the next start finds it done.
    """
    task, cancelled = await run_through(step)
    if cancelled:
        raise asyncio.CancelledError
    return task.result()
