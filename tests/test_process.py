"""The real ``python -m bot`` process: it reaches the configured Discord API base, and a rejected token
ends it cleanly (exit 1, one clear line, no token in the output, databases created and closed)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "MTIz.fake-token-for-process-test.abcdef"


async def test_rejected_token_exits_1_with_a_clear_line(tmp_path):
    seen: list[str] = []

    async def anything(request: web.Request) -> web.Response:
        seen.append(f"{request.method} {request.path}")
        return web.json_response({"message": "401: Unauthorized", "code": 0}, status=401)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", anything)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        cfg = tmp_path / "config.toml"
        cfg.write_text(f'[bot]\ndata_dir = "data"\n[discord]\napi_base = "http://127.0.0.1:{port}/api/v10"\n')
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "--config", str(cfg), cwd=ROOT,
            env={"PATH": "/usr/bin:/bin", "DISCORD_TOKEN": TOKEN, "DEEPSEEK_API_KEY": "sk-process-test-1"},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        await runner.cleanup()
    text = out.decode() + err.decode()
    assert proc.returncode == 1, text
    assert "Discord rejected the token in DISCORD_TOKEN" in text
    assert TOKEN not in text and "sk-process-test-1" not in text
    assert "GET /api/v10/users/@me" in seen
    assert (tmp_path / "data" / "memories.sqlite").exists()
    assert not (tmp_path / "data" / "memories.sqlite-wal").exists() or \
        (tmp_path / "data" / "memories.sqlite-wal").stat().st_size == 0  # closed cleanly
