"""The real ``python -m bot`` process: it reaches the configured Discord API base, and a rejected token
ends it cleanly (exit 1, one clear line, no token in the output, databases created and closed)."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "MTIz.fake-token-for-process-test.abcdef"


@asynccontextmanager
async def discord_on_loopback(handler) -> AsyncIterator[int]:
    """A stand-in for Discord's REST API on 127.0.0.1 answering every request with ``handler``; its port."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


async def test_rejected_token_exits_1_with_a_clear_line(tmp_path):
    seen: list[str] = []

    async def anything(request: web.Request) -> web.Response:
        seen.append(f"{request.method} {request.path}")
        return web.json_response({"message": "401: Unauthorized", "code": 0}, status=401)

    async with discord_on_loopback(anything) as port:
        cfg = tmp_path / "config.toml"
        cfg.write_text(f'[bot]\ndata_dir = "data"\n[discord]\napi_base = "http://127.0.0.1:{port}/api/v10"\n')
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "--config", str(cfg), cwd=ROOT,
            env={"PATH": "/usr/bin:/bin", "DISCORD_TOKEN": TOKEN, "DEEPSEEK_API_KEY": "sk-process-test-1"},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    text = out.decode() + err.decode()
    assert proc.returncode == 1, text
    assert "Discord rejected the token in DISCORD_TOKEN" in text
    assert "Traceback" not in text and "PyNaCl" not in text and "davey" not in text
    assert TOKEN not in text and "sk-process-test-1" not in text
    assert "GET /api/v10/users/@me" in seen
    assert (tmp_path / "data" / "memories.sqlite").exists()
    assert not (tmp_path / "data" / "memories.sqlite-wal").exists() or \
        (tmp_path / "data" / "memories.sqlite-wal").stat().st_size == 0  # closed cleanly


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


async def test_discord_unreachable_exits_1_with_one_line_and_no_traceback(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text('[bot]\ndata_dir = "data"\nlog_level = "WARNING"\n')
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", "--config", str(cfg), cwd=ROOT,  # --config after the command
        env={"PATH": "/usr/bin:/bin", "DISCORD_TOKEN": TOKEN, "DEEPSEEK_API_KEY": "sk-process-test-2",
             "DISCORD_API_BASE": f"http://127.0.0.1:{closed_port()}/api/v10"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    lines = [line for line in err.decode().splitlines() if line.strip()]
    assert proc.returncode == 1, err.decode()
    assert len(lines) == 1 and lines[0].startswith("cannot start: cannot reach Discord at http://127.0.0.1:"), lines
    assert TOKEN not in err.decode() and out == b""


async def test_sync_exits_1_with_one_line_when_discord_refuses_the_commands(tmp_path):
    """``python -m bot sync`` is for deploy scripts: a refused sync (a 403 for a missing
    ``applications.commands`` scope, the daily limit) logged an error and exited 0."""
    seen: list[str] = []
    me = {"id": "1100", "username": "mnemo", "discriminator": "0", "avatar": None, "bot": True}
    application = {"id": "1100", "name": "mnemo", "description": "", "icon": None, "bot_public": True,
                   "bot_require_code_grant": False, "verify_key": "00", "flags": 0, "owner": me}

    def as_discord(body: dict, status: int = 200) -> web.Response:  # no charset: discord.py compares exactly
        return web.Response(body=json.dumps(body).encode(), status=status, content_type="application/json")

    async def anything(request: web.Request) -> web.Response:
        seen.append(f"{request.method} {request.path}")
        if request.path.endswith("/users/@me"):
            return as_discord(me)
        if request.path.endswith("/oauth2/applications/@me"):
            return as_discord(application)
        return as_discord({"message": "Missing Access", "code": 50001}, status=403)

    async with discord_on_loopback(anything) as port:
        cfg = tmp_path / "config.toml"
        cfg.write_text(f'[bot]\ndata_dir = "data"\nlog_level = "WARNING"\n'
                       f'[discord]\napi_base = "http://127.0.0.1:{port}/api/v10"\n')
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "sync", "--config", str(cfg), cwd=ROOT,
            env={"PATH": "/usr/bin:/bin", "DISCORD_TOKEN": TOKEN, "DEEPSEEK_API_KEY": "sk-process-test-3"},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    lines = [line for line in err.decode().splitlines() if line.strip()]
    assert proc.returncode == 1, err.decode()
    assert "PUT /api/v10/applications/1100/commands" in seen, (seen, lines)
    assert len(lines) == 1 and lines[0].startswith("cannot start: Discord refused the slash commands (HTTP 403"), lines
    assert TOKEN not in err.decode() and out == b""
