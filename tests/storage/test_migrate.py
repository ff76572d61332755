"""``python -m bot migrate-storage``: a SQLite data directory moves into PostgreSQL and goes on from there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from langchain_core.messages import HumanMessage

from bot.engine.state import Speaker
from bot.storage import open_storage
from tests.conftest import ScriptedChatModel, default_script, make_settings, running_engine

ROOT = Path(__file__).resolve().parents[2]
ADA = Speaker(user_id="42", name="Ada", guild_id="900", channel_id="7", message_id="70")
BOB = Speaker(user_id="7", name="Bob", guild_id="900", channel_id="8", message_id="80")


def migrate(cfg: Path, database_url: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bot", "--config", str(cfg), "migrate-storage"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "DATABASE_URL": database_url})


async def test_a_sqlite_data_directory_moves_to_postgres_and_carries_on(tmp_path, pg_backend):
    data = tmp_path / "data"
    sqlite = make_settings(data)
    async with running_engine(sqlite, ScriptedChatModel(default_script)) as engine:
        await engine.reply("7", ADA, "I like tea")
        await engine.scheduler.flush()  # learned: a memory, its history, a watermark
        await engine.reply("7", ADA, "I like jam")  # still pending when the data moves
        await engine.reply("8", BOB, "hello there")
        await engine.prefs.set("7", paused=True)
        await engine.meter.settled()  # the last answer's usage is written just after it (policy.usage.owe)
        before_usage = sorted((r.guild_id, r.user_id, r.calls) for r in await engine.usage.totals())
        before_thread = [m.text for m in (await engine.thread_state("7"))["messages"]]
        # What deletions and sweeps still need after the move: an unfinished job and what it is about, where
        # a message's text reached, a server still to sweep (until 2026-12-06 none of them was copied).
        job = await engine.storage.erasures.begin(kind="messages", user_id="42", subject='{"thread": "7"}')
        gone = await engine.storage.erasures.begin(kind="memories", user_id="42")  # the top row, finished:
        await engine.storage.erasures.finish(gone)  # SQLite never hands out its ID again
        await engine.storage.removed_guilds.mark("901", 1000.0)
        await engine.storage.reach.reached("12", ["70"])  # Ada's message quoted in another thread
        reach_since = await engine.storage.reach.since()
        engine.scheduler._closed = True  # leave the pending turn pending (as a stopped bot does)
        engine.scheduler.close = _noop  # type: ignore[method-assign]
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[bot]\ndata_dir = "{data}"\n[storage]\nbackend = "postgres"\n')
    done = migrate(cfg, pg_backend.database_url)
    assert done.returncode == 0, done.stderr
    assert "copied 2 conversations" in done.stdout and "2 turns still to learn from" in done.stdout
    again = migrate(cfg, pg_backend.database_url)  # a second run would mix two histories: refused
    assert again.returncode == 1 and "already holds bot data" in again.stderr

    postgres = make_settings(tmp_path / "pg", pg_backend)
    async with open_storage(postgres) as storage:
        (moved,) = await storage.erasures.unfinished()
        assert (moved.id, moved.kind, moved.subject) == (job, "messages", '{"thread": "7"}')
        assert await storage.removed_guilds.due(2000.0) == ["901"]
        assert await storage.reach.threads_of(["70"]) == {"12"}
        assert await storage.reach.since() == reach_since
        await storage.erasures.finish(job)  # not this test's to replay
        later = await storage.erasures.begin(kind="memories", user_id="42")
        assert later > gone  # the sequence goes on from SQLite's, not from the highest row kept
        await storage.erasures.finish(later)
    async with running_engine(postgres, ScriptedChatModel(default_script)) as engine:
        assert [m.text for m in (await engine.thread_state("7"))["messages"]] == before_thread
        assert sorted((r.guild_id, r.user_id, r.calls) for r in await engine.usage.totals()) == before_usage
        assert (await engine.prefs.get("7")).paused
        await engine.scheduler.flush()  # the pending turn is learned now, and the learned one not again
        assert sorted(m.content for m in await engine.memories.list("42")) == ["I like jam", "I like tea"]
        history = await engine.memories.history("42")
        assert [h.after for h in history if h.action == "created"].count("I like tea") == 1
        await engine.reply("7", ADA, "still you?")
        humans = [m for m in (await engine.thread_state("7"))["messages"] if isinstance(m, HumanMessage)]
        assert humans[-1].text.endswith("still you?")


def test_migrating_needs_postgres_as_the_target(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text('[bot]\ndata_dir = "data"\n')
    done = subprocess.run([sys.executable, "-m", "bot", "--config", str(cfg), "migrate-storage"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2 and "storage.backend" in done.stderr


async def _noop(*_a, **_k) -> None:
    return None
