"""Chat with the engine in a terminal: same graph, same databases, no Discord token needed."""

from __future__ import annotations

import asyncio
import logging
import sys

from bot.engine import ChatEngine, Speaker

log = logging.getLogger(__name__)

HELP = "Type a message and press Enter. /memories shows what I remember about you, /quit leaves."


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


async def _read_line(prompt: str) -> str | None:
    sys.stdout.write(prompt)
    sys.stdout.flush()
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    return None if line == "" else line.rstrip("\n")


async def run_console(engine: ChatEngine, user: str, thread: str) -> None:
    """Read lines from stdin until EOF or /quit, answering each as the engine would on Discord."""
    speaker = Speaker(user_id=user, name=user, guild_id="dm", channel_id=f"console:{thread}", place="a terminal")
    _out(HELP)
    n = 0
    while True:
        line = await _read_line(f"{user}> ")
        if line is None or line.strip() == "/quit":
            break
        if not line.strip():
            continue
        if line.strip() == "/memories":
            await engine.flush_learning()
            memories = await engine.list_memories(user)
            _out("\n".join(f"  {m.short_id}  {m.content}" for m in memories) or "  (nothing yet)")
            continue
        n += 1
        current = Speaker(**{**speaker.__dict__, "message_id": f"console-{n}"})
        try:
            reply = await engine.reply(f"console:{thread}", current, line, timeout=engine.settings.model.timeout_seconds)
        except Exception as exc:  # noqa: BLE001 - the terminal gets one line, the log the details
            # As on Discord: an outage is one line, anything else (a bug, storage) its traceback. Until
            # 2026-12-07 it went to DEBUG only, so a failing console left nothing in the log.
            if engine.outages(exc):
                log.warning("the console's answer failed (an outage: %s)", type(exc).__name__)
            else:
                log.error("the console's answer failed", exc_info=exc)
            _out(f"bot> (sorry, that failed: {type(exc).__name__})")
            continue
        _out(f"bot> {reply.text}")
