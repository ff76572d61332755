"""Logging set-up with secret redaction.

Secrets are known at start-up (from the environment), so every record is scrubbed of them on its way
out, whatever logged it (our code, discord.py, httpx): a token can never reach a log line.
"""

from __future__ import annotations

import logging
import sys
from typing import Iterable

REDACTED = "[redacted]"


class RedactingFilter(logging.Filter):
    """Replace every known secret in a record's final message (and traceback) with ``[redacted]``."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.secrets = [s for s in secrets if len(s) >= 6]

    def _scrub(self, text: str) -> str:
        for s in self.secrets:
            text = text.replace(s, REDACTED)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        message = record.getMessage()
        clean = self._scrub(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self._scrub(record.exc_text)
        return True


def setup_logging(level: str, secrets: Iterable[str] = ()) -> None:
    """Log to stderr in one format; quiet chatty libraries; redact secrets everywhere."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("httpx", "httpcore", "openai", "discord.gateway", "discord.http", "aiosqlite"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
