"""Logging set-up with secret redaction and no message or memory text at INFO or above.

Secrets are known at start-up (from the environment), so every record is scrubbed of them on its way
out, whatever logged it (our code, discord.py, httpx): a token can never reach a log line.

Our own code never logs message or memory text at INFO or above; libraries are not so careful. Trustcall
(logger ``extraction``) logs a validation error or a failed patch with the model's output in it, and
pydantic's errors quote the input (``input_value=...``). :class:`ContentFilter` rewrites such records to
say what happened without the text (the full record is still there at DEBUG level, when asked for).
"""

from __future__ import annotations

import logging
import re
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


# Loggers of libraries that put model input or output in their records.
CONTENT_LOGGERS = ("extraction", "trustcall")
_INPUT_VALUE = re.compile(r"input_value=.*?(?=, input_type=|\]$|$)", re.MULTILINE | re.DOTALL)
WITHHELD = "[text withheld]"
# An OpenAI-compatible server's error body ("Error code: 400 - {...}"): some servers quote the request in it
# (the member's words). The status stays at INFO and above; the body only at DEBUG.
# The body may run over several lines: everything to the end of that exception's text goes (in a traceback,
# up to the blank line before a chained exception, or the end).
_API_ERROR_BODY = re.compile(r"(Error code: \d{3}) - .*?(?=\n\s*\n|\nDuring handling|\nThe above exception|\Z)",
                             re.DOTALL)


class ContentFilter(logging.Filter):
    """Keep message and memory text out of records at INFO and above, whichever library wrote them."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.INFO:
            return True
        if record.name.split(".")[0] in CONTENT_LOGGERS:
            kind = type(record.msg).__name__ if isinstance(record.msg, BaseException) else "a message"
            first = str(record.msg).split(":", 1)[0] if not isinstance(record.msg, BaseException) else kind
            record.msg, record.args = f"{record.name} reported {first[:80]} ({WITHHELD})", None
            record.exc_info, record.exc_text = None, None
            return True
        message = record.getMessage()
        clean = _API_ERROR_BODY.sub(r"\1 - (body withheld at this level)", _INPUT_VALUE.sub(f"input_value={WITHHELD}", message))
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = _API_ERROR_BODY.sub(r"\1 - (body withheld at this level)",
                                                  _INPUT_VALUE.sub(f"input_value={WITHHELD}", record.exc_text))
        return True


def setup_logging(level: str, secrets: Iterable[str] = ()) -> None:
    """Log to stderr in one format; quiet chatty libraries; redact secrets everywhere."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter(secrets))
    handler.addFilter(ContentFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("httpx", "httpcore", "httpx2", "httpcore2", "openai", "discord.gateway", "discord.http", "aiosqlite"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
