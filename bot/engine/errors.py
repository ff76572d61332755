"""The engine's own exceptions, and the one answer to "is this an outage?".

An outage (the model API timing out or rate-limiting, the database unreachable) is waited out and
retried; anything else is a bug or a bad input, logged with its traceback. Which storage errors are
outages is storage's to say: each backend lists them in ``Storage.transient_errors`` (the seam keeps the
layers apart: the engine never imports a database driver), and :class:`Outages` combines that list with
the model API's.
"""

from __future__ import annotations

import asyncio

from bot.engine.stores import StorageUnavailable
from bot.engine.stores.locks import ClaimLost

__all__ = [
    "ClaimLost", "EmptyAnswer", "ImportRefused", "Outages", "SettingRefused", "StorageUnavailable",
    "is_transient",
]

# 401, 403 and 404 too: a revoked or mistyped key, a wrong base URL path. Those are the operator's to fix,
# and until they do, learning waits (as for an outage) instead of dropping the turns as unlearnable.
TRANSIENT_STATUS = {401, 403, 404, 408, 409, 429}
# The OpenAI client's classes and LangChain's model-error classes, matched by name anywhere in the
# exception's class hierarchy (without importing either): langchain-openai 1.7 raises its own subclasses
# (``OpenAIConnectionError(openai.APIConnectionError, ModelConnectionError)``), which carry no status code.
MODEL_OUTAGES = {"APITimeoutError", "APIConnectionError", "RateLimitError", "InternalServerError",
                 "AuthenticationError", "PermissionDeniedError", "NotFoundError",
                 "ModelConnectionError", "ModelTimeoutError", "ModelRateLimitError"}


class SettingRefused(ValueError):
    """A server setting change that breaks a rule; the message is one sentence for the admin."""


class ImportRefused(ValueError):
    """Why a file cannot be imported, in words for the person.

    The reason quotes the file (its version, the key where it is not valid), which the file can make
    thousands of characters long; it goes into a Discord answer of at most 2,000, so it is cut here, once.
    """

    LIMIT = 300

    def __init__(self, reason: str) -> None:
        super().__init__(reason if len(reason) <= self.LIMIT else reason[: self.LIMIT - 1] + "\u2026")


class EmptyAnswer(RuntimeError):
    """The model answered with no text (it spent its output tokens reasoning, or a content filter fired).

    Raised instead of storing and posting an empty answer: the member gets the same short apology as for any
    failed answer, and nothing of the failed attempt is stored or queued for learning.
    """


def is_transient(exc: BaseException, storage_errors: tuple[type[BaseException], ...] = ()) -> bool:
    """An outage worth waiting out: timeouts, connection errors, 429 and 5xx from the model API, and the
    storage errors its backend calls outages."""
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError)):
        return True
    if storage_errors and isinstance(exc, storage_errors):
        return True
    if any(k.__name__ in MODEL_OUTAGES for k in type(exc).__mro__):
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status >= 500 or status in TRANSIENT_STATUS)


class Outages:
    """:func:`is_transient` bound to one storage backend's outage errors."""

    def __init__(self, storage_errors: tuple[type[BaseException], ...] = ()) -> None:
        self.storage_errors = storage_errors

    def storage(self, exc: BaseException) -> bool:
        """The database is unreachable right now (an outage, an exhausted pool), not a bug."""
        return bool(self.storage_errors) and isinstance(exc, self.storage_errors)

    def __call__(self, exc: BaseException) -> bool:
        """Any outage: the model API's or storage's."""
        return is_transient(exc, self.storage_errors)
