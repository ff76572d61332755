"""Secrets never appear in logs or errors: known fake secrets are searched for in every line a real
process writes, at DEBUG level, including when the model API echoes the key back in an error."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path

from bot.logs import REDACTED, RedactingFilter
from tests.conftest import record_figure

ROOT = Path(__file__).resolve().parents[2]
MODEL_KEY = "sk-canary-model-key-7f3a9c1e"
DISCORD_TOKEN = "MTIzNDU2Nzg5.canary.discord-token-5b2d"


def test_a_real_process_never_logs_the_secrets(tmp_path):
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.openai_server", "--port", "0", "--echo", "--log-level", "WARNING"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        base_url = re.search(r"(http://127\.0\.0\.1:\d+/v1)", server.stdout.readline()).group(1)
        cfg = tmp_path / "config.toml"
        cfg.write_text(f'[bot]\nlog_level = "DEBUG"\n[model]\nbase_url = "{base_url}"\nstreaming = false\n'
                       f'max_retries = 0\n[memory]\nextraction_quiet_seconds = 0\n')
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "DEEPSEEK_API_KEY": MODEL_KEY,
               "DISCORD_TOKEN": DISCORD_TOKEN}
        # The echo server repeats the user's text, so the model "says" the key back, and the key is
        # typed by the user: it must still never reach the log.
        chat = subprocess.run(
            [sys.executable, "-m", "bot", "--config", str(cfg), "console", "--user", "u1"],
            input=f"my key is {MODEL_KEY} and token {DISCORD_TOKEN}\n/memories\n/quit\n",
            capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
        )
    finally:
        server.terminate()
        server.wait(timeout=10)
    lines = chat.stderr.splitlines()
    assert chat.returncode == 0, chat.stderr[-2000:]
    assert len(lines) > 5, "DEBUG logging produced lines to search"
    leaked = [line for line in lines if MODEL_KEY in line or DISCORD_TOKEN in line]
    assert leaked == []
    record_figure("log lines searched for secrets", len(lines), "0 contained the model key or the Discord token")


def test_wrong_key_error_echoing_the_key_is_redacted(tmp_path, caplog):
    """OpenAI-style 401 bodies quote the key; the redacting filter scrubs messages and tracebacks."""
    logger = logging.getLogger("test.redaction")
    handler = logging.StreamHandler(stream := __import__("io").StringIO())
    handler.addFilter(RedactingFilter([MODEL_KEY, DISCORD_TOKEN]))
    logger.addHandler(handler)
    try:
        logger.error("Incorrect API key provided: %s", MODEL_KEY)
        try:
            raise RuntimeError(f"401 Unauthorized for token {DISCORD_TOKEN}")
        except RuntimeError:
            logger.exception("login failed")
    finally:
        logger.removeHandler(handler)
    out = stream.getvalue()
    assert MODEL_KEY not in out and DISCORD_TOKEN not in out
    assert out.count(REDACTED) == 2  # the message and the exception line of the traceback
