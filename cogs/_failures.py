"""How a failure a member was told about (the short apology) reaches the log.

Not an extension: a helper for the cogs that answer (chat, the menus) and the app-command error handler.
"""

from __future__ import annotations

import logging
from typing import Callable


def log_failure(logger: logging.Logger, outages: Callable[[BaseException], bool] | None, exc: BaseException,
                what: str, *args: object) -> None:
    """Log something that failed for a member (who got the apology): an outage as one line, a bug with
    its traceback. A database outage is announced once by storage (and once more when it is back): the
    per-message lines are DEBUG, or every message during the outage logged an ERROR with a traceback. A
    model outage (timeouts, 429, 5xx) is one WARNING line per failure."""
    if outages is not None and outages(exc):
        storage = getattr(outages, "storage", None)
        level = logging.DEBUG if storage is not None and storage(exc) else logging.WARNING
        logger.log(level, what + " (an outage: %s)", *args, type(exc).__name__)
    else:
        logger.error(what, *args, exc_info=exc)
