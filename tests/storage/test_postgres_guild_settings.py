"""Server settings on a real PostgreSQL server: the contract, two processes at once, and LISTEN/NOTIFY."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from bot.engine.policy.server_settings import GuildSettingsService, OperatorDefaults, set_field
from bot.engine.stores import ServerSettings
from tests.storage.pg_guild_settings import opened as _opened

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def dsn(pg_backend) -> str:
    """A fresh database on the test server (dropped afterwards): each process migrates it on open."""
    return pg_backend.database_url


@pytest.fixture
def opened(tmp_path):
    count = iter(range(100))
    return lambda url: _opened(url, tmp_path / f"process-{next(count)}")


async def eventually(check, timeout: float = 10.0) -> bool:
    """Poll ``check()`` until it is true (notifications are asynchronous); False if it never is."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if await check():
            return True
        await asyncio.sleep(0.02)
    return False


async def test_the_contract_on_postgres(dsn, opened):
    async with opened(dsn) as gs:
        assert await gs.get("900") is None and await gs.count() == 0
        first = ServerSettings(guild_id="900", mentions_off=frozenset({"4"}), persona="Be kind.", version=1,
                               updated_by="5", updated_at=10.0)
        assert await gs.put(first, replaces=0) is True
        assert await gs.put(first, replaces=0) is False
        assert await gs.get("900") == first
        second = ServerSettings(guild_id="900", learning=False, version=2, updated_by="6", updated_at=11.0)
        assert await gs.put(second, replaces=5) is False and await gs.get("900") == first
        assert await gs.put(second, replaces=1) is True and await gs.get("900") == second
        assert await gs.count() == 1
        assert await gs.delete("900") is True and await gs.delete("900") is False


async def test_two_processes_changing_settings_at_once_lose_nothing(dsn, opened, tmp_path):
    count = 15
    procs = [await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.storage.pg_guild_settings", dsn, name, str(count), str(tmp_path / name), cwd=ROOT,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        for name in ("a", "b")]
    for p in procs:
        assert (await asyncio.wait_for(p.stdout.readline(), 60)).strip() == b"ready", await p.stderr.read()
    for p in procs:  # both start now
        p.stdin.write(b"go\n")
        await p.stdin.drain()
    results = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in procs)), 120)
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0 and out.strip() == b"done", err.decode()
    async with opened(dsn) as gs:
        record = await gs.get("900")
    assert record.respond_channels == {f"{w}{n}" for w in "ab" for n in range(count)}
    assert record.version == 2 * count  # every change a version of its own: none overwrote another


async def test_a_change_in_one_process_reaches_the_others_cache_at_once(dsn, opened):
    async with opened(dsn) as mine, opened(dsn) as theirs:
        reader = GuildSettingsService(mine, OperatorDefaults(), cache_seconds=3600)  # trusts its cache long
        writer = GuildSettingsService(theirs, OperatorDefaults(), cache_seconds=3600)
        assert (await reader.policy("900")).learning is True  # cached
        await writer.change("900", set_field("learning", False), by="7")

        async def seen() -> bool:
            return (await reader.policy("900")).learning is False

        assert await eventually(seen)  # the NOTIFY dropped the cached copy; without it: an hour
        await writer.forget("900")

        async def forgotten() -> bool:
            return (await reader.policy("900")).learning is True

        assert await eventually(forgotten)


async def test_a_lost_listener_drops_every_cached_copy_and_comes_back(dsn, opened):
    import psycopg

    async with opened(dsn) as mine, opened(dsn) as theirs:
        reader = GuildSettingsService(mine, OperatorDefaults(), cache_seconds=3600)
        await reader.policy("900")
        assert "900" in reader._cache
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                                " WHERE query LIKE 'LISTEN%%' AND pid <> pg_backend_pid()")

        async def dropped() -> bool:
            return "900" not in reader._cache

        assert await eventually(dropped)
        assert await eventually(lambda: _is_set(mine.listening))
        writer = GuildSettingsService(theirs, OperatorDefaults())
        await reader.policy("900")
        await writer.change("900", set_field("use_memories", False), by="7")

        async def seen() -> bool:
            return (await reader.policy("900")).use_memories is False

        assert await eventually(seen)  # listening again after the reconnect


async def _is_set(event: asyncio.Event) -> bool:
    return event.is_set()


async def test_two_bot_processes_take_settings_from_discord_at_once(dsn, opened, tmp_path):
    """Two real bots (harness-driven) on one PostgreSQL database: admins change settings in both at once
    through /settings; every change lands, and each bot then answers in the channels the *other* turned on,
    without a restart (the change reached its hour-long cache through NOTIFY)."""
    import json

    procs = {}
    for me in ("a", "b"):
        procs[me] = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.cogs.pg_settings_bot", dsn, me, str(tmp_path / me), cwd=ROOT,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)

    async def expect(p, word: str) -> str:
        got = (await asyncio.wait_for(p.stdout.readline(), 120)).decode().strip()
        if word and got != word:
            raise AssertionError(f"expected {word!r}, got {got!r}: {(await p.stderr.read()).decode()[-3000:]}")
        return got

    async def tell(p, word: str) -> None:
        p.stdin.write(word.encode() + b"\n")
        await p.stdin.drain()

    a, b = procs["a"], procs["b"]

    async def ask(p, command: str, answer: str = "") -> str:
        await tell(p, command)
        return await expect(p, answer)

    try:
        for p in (a, b):
            await expect(p, "ready")
        for p in (a, b):  # both at once: six changes each, through /settings, interleaved
            await tell(p, "go")
        for p in (a, b):
            await expect(p, "changed")
        for p in (a, b):
            await ask(p, "warm", "warm")  # each now holds the settings in its cache (for an hour)
        await ask(a, "extra", "changed")  # a change in a: only a NOTIFY can tell b
        first = json.loads(await ask(b, "check"))
        await ask(b, "extra", "changed")
        second = json.loads(await ask(a, "check"))
        for p in (a, b):
            await tell(p, "quit")
            assert await asyncio.wait_for(p.wait(), 60) == 0
    finally:
        for p in procs.values():
            if p.returncode is None:
                p.kill()
    assert first == {"answered": 7, "errors": 0}  # a's six and a's extra, seen by b without a restart
    assert second == {"answered": 7, "errors": 0}
    async with opened(dsn) as gs:
        record = await gs.get("900")
    assert len(record.respond_channels) == 14 and record.version == 14


async def test_the_listener_connection_has_tcp_keepalives(dsn, opened, monkeypatch):
    """Found in review 2026-12-07: a plain connection, so after a silent network drop ``notifies()`` waited
    forever while "listening", and the other processes' changes never arrived (only the cache's expiry)."""
    import psycopg

    seen: list[dict] = []
    real = psycopg.AsyncConnection.connect

    async def connect(*args, **kwargs):
        import inspect

        if any(f.function == "_listen" for f in inspect.stack()):  # the settings listener's connection
            seen.append(kwargs)
        return await real(*args, **kwargs)

    monkeypatch.setattr(psycopg.AsyncConnection, "connect", connect)
    async with opened(dsn) as mine:
        assert await eventually(lambda: _is_set(mine.listening))
    assert seen and all(k.get("keepalives") == 1 and k.get("keepalives_idle") for k in seen)
