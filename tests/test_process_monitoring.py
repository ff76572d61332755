"""The real ``python -m bot`` process serves /metrics and /health while the Discord gateway is out of reach.

A fake Discord REST API accepts the token and the command sync but hands out a gateway URL nobody listens
on, so the process keeps trying to connect: /health must say the gateway is down (503) while storage is
fine, /metrics must answer, and SIGTERM must still stop the process.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from pathlib import Path

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "MTIz.fake-token-for-monitoring-test.abcdef"
BOT = {"id": "100000000000000001", "username": "Mnemo", "discriminator": "0", "global_name": None, "avatar": None,
       "bot": True, "system": False, "flags": 0, "public_flags": 0, "verified": True, "mfa_enabled": False,
       "locale": "en-US", "email": None, "banner": None, "accent_color": None, "premium_type": 0}


def as_discord(data) -> web.Response:
    """JSON with the exact content type Discord sends (discord.py reads anything else as text)."""
    import json

    return web.Response(body=json.dumps(data).encode(), headers={"Content-Type": "application/json"})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def fake_discord(gateway_port: int) -> tuple[web.AppRunner, int]:
    async def me(request: web.Request) -> web.Response:
        return as_discord(BOT)

    async def app_info(request: web.Request) -> web.Response:
        return as_discord({"id": BOT["id"], "name": "Mnemo", "description": "", "icon": None,
                                  "bot_public": True, "bot_require_code_grant": False, "owner": BOT,
                                  "verify_key": "00", "flags": 0})

    async def commands(request: web.Request) -> web.Response:
        sent = await request.json()
        # Discord answers every command with a description: "" for context menus, which send none.
        return as_discord([{"description": "", **c, "id": str(1000 + n), "application_id": BOT["id"], "version": "1"}
                           for n, c in enumerate(sent)])

    async def gateway(request: web.Request) -> web.Response:
        return as_discord({"url": f"ws://127.0.0.1:{gateway_port}", "shards": 1,
                                  "session_start_limit": {"total": 1000, "remaining": 1000, "reset_after": 0,
                                                          "max_concurrency": 1}})

    app = web.Application()
    app.router.add_get("/api/v10/users/@me", me)
    app.router.add_get("/api/v10/oauth2/applications/@me", app_info)
    app.router.add_put("/api/v10/applications/{app}/commands", commands)
    app.router.add_get("/api/v10/gateway/bot", gateway)
    app.router.add_get("/api/v10/gateway", gateway)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, runner.addresses[0][1]


async def started(tmp_path: Path, config: str, model_key: str, *args: str) -> asyncio.subprocess.Process:
    """The real ``python -m bot [args]`` with this config file, the test token and ``model_key`` in a bare
    environment."""
    cfg = tmp_path / "config.toml"
    cfg.write_text(config)
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args, "--config", str(cfg), cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "DISCORD_TOKEN": TOKEN, "DEEPSEEK_API_KEY": model_key},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def stopped(proc: asyncio.subprocess.Process) -> str:
    """SIGTERM the bot process (unless it ended already), wait for it; everything it printed."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    except asyncio.TimeoutError:  # not left running after the test
        proc.kill()
        out, err = await proc.communicate()
        raise AssertionError("the process did not end on SIGTERM: " + (out + err).decode()[-2000:]) from None
    return out.decode() + err.decode()


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(url, timeout=aiohttp.ClientTimeout(total=5)) as resp:
        return resp.status, await resp.text()


async def test_a_real_process_reports_the_gateway_down_and_still_serves_metrics(tmp_path):
    runner, rest_port = await fake_discord(gateway_port=free_port())
    port = free_port()
    proc = await started(tmp_path, f'[bot]\ndata_dir = "data"\n[discord]\napi_base = "http://127.0.0.1:{rest_port}/api/v10"\n'
                         f'[monitoring]\nmetrics = true\nhealth = true\nport = {port}\n', "sk-monitoring-test")
    try:
        health = None
        for _ in range(300):  # the endpoint comes up before the gateway is tried
            try:
                health = await get(f"http://127.0.0.1:{port}/health")
                break
            except aiohttp.ClientError:
                await asyncio.sleep(0.1)
        if health is None:
            try:
                proc.kill()
            except ProcessLookupError:
                pass
            out, err = await proc.communicate()
            raise AssertionError("the health endpoint never answered: " + (out + err).decode()[-4000:])
        status, body = health
        assert status == 503 and '"gateway": false' in body and '"storage": true' in body
        metrics_answer = None
        for _ in range(50):  # on a loaded machine a connection can be refused once in a while: ask again
            try:
                metrics_answer = await get(f"http://127.0.0.1:{port}/metrics")
                break
            except aiohttp.ClientConnectorError:
                await asyncio.sleep(0.1)
        assert metrics_answer is not None, "the metrics endpoint stopped answering while the gateway was down"
        status, metrics = metrics_answer
        assert status == 200 and "mnemo_guilds 0.0" in metrics and "mnemo_gateway_latency_seconds NaN" in metrics
    finally:
        text = await stopped(proc)
        await runner.cleanup()
    # It keeps trying the gateway (discord.py's own first retry crashed the process until 2026-12-07:
    # bot.client.connect) and ends cleanly on SIGTERM.
    assert proc.returncode == 0, text[-4000:]
    assert "monitoring endpoint on http://127.0.0.1:%d (/metrics, /health)" % port in text
    assert TOKEN not in text and "sk-monitoring-test" not in text


async def test_a_sharded_process_waiting_for_the_gateway_ends_on_sigterm(tmp_path):
    """With ``--shards`` discord.py retries each shard's first connection every 5 seconds and never asked
    whether the bot was stopped: a SIGTERM while the gateway was out of reach left the process running."""
    runner, rest_port = await fake_discord(gateway_port=free_port())
    port = free_port()
    proc = await started(tmp_path, f'[bot]\ndata_dir = "data"\n[discord]\napi_base = "http://127.0.0.1:{rest_port}/api/v10"\n'
                         f'[monitoring]\nhealth = true\nport = {port}\n', "sk-monitoring-test",
                         "run", "--shards", "0-1", "--shard-count", "2")
    try:
        for _ in range(300):  # up, and trying the gateway
            try:
                status, _body = await get(f"http://127.0.0.1:{port}/health")
                break
            except aiohttp.ClientError:
                await asyncio.sleep(0.1)
        else:
            raise AssertionError("the health endpoint never answered")
        assert status == 503
        await asyncio.sleep(1.0)  # a shard's first attempt has failed: it waits to try again
    finally:
        text = await stopped(proc)  # (60 s at most: it used to run on)
        await runner.cleanup()
    assert proc.returncode == 0, text[-4000:]

