"""bot/console.py: a failed answer is one line in the terminal and, as on Discord, in the log."""

from __future__ import annotations

import logging

import bot.console
from tests.conftest import ScriptedChatModel, running_engine


async def test_a_failed_answer_reaches_the_log_an_outage_as_one_line_a_bug_with_its_traceback(settings, monkeypatch,
                                                                                              caplog, capsys):
    """Until 2026-12-07 it was logged at DEBUG only: a failing console left nothing in the log."""
    failures = [ConnectionError("model API unreachable"), KeyError("a bug")]

    def script(call):
        raise failures.pop(0)

    lines = iter(["hello", "again", "/quit"])

    async def typed(prompt: str) -> str | None:
        return next(lines)

    monkeypatch.setattr(bot.console, "_read_line", typed)
    async with running_engine(settings, ScriptedChatModel(script)) as engine:
        with caplog.at_level(logging.INFO, logger="bot.console"):
            await bot.console.run_console(engine, "lance", "main")
    records = [r for r in caplog.records if r.name == "bot.console"]
    assert [(r.levelname, r.exc_info is not None) for r in records] == [("WARNING", False), ("ERROR", True)]
    assert "ConnectionError" in records[0].getMessage()
    out = capsys.readouterr().out
    assert "bot> (sorry, that failed: ConnectionError)" in out and "bot> (sorry, that failed: KeyError)" in out
