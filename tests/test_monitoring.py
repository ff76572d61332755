"""The operators' endpoint, scraped over real HTTP while real traffic flows through the harness."""

from __future__ import annotations

import math

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from bot.metrics import FAILURES, KINDS, OUTCOMES, SCOPES
from bot.probe import probe_health
from bot.settings import MonitoringSection
from tests.cogs.conftest import (
    ALICE,
    BOB,
    GENERAL,
    GUILD_ID,
    LISTED,
    MOD,
    OTHER_CHANNEL,
    OTHER_GUILD,
    rig,
)
from tests.conftest import ScriptedChatModel, default_script

ON = {"metrics": True, "health": True, "port": 0}
VOCABULARY = set(KINDS) | set(FAILURES) | set(OUTCOMES) | set(SCOPES) | {"prompt", "completion"}


async def scrape(r) -> dict[str, float]:
    """Every sample as ``name{label=value,...}`` -> value, over HTTP like Prometheus does."""
    url = f"http://127.0.0.1:{r.bot.monitoring.port}/metrics"
    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=")
        text = await resp.text()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}"] = s.value
    return out


async def health(r) -> tuple[int, dict]:
    url = f"http://127.0.0.1:{r.bot.monitoring.port}/health"
    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        return resp.status, await resp.json()


def label_values(samples: dict[str, float]) -> set[str]:
    values = set()
    for key in samples:
        inside = key[key.index("{") + 1 : -1]
        pairs = [pair.split("=", 1) for pair in inside.split(",") if pair]
        values |= {v for k, v in pairs if k != "le"}  # histogram bucket bounds are numbers we chose
    return values


async def test_figures_move_with_traffic_and_no_label_holds_personal_data(tmp_path):
    def script(call):
        if not call.is_extraction and "please fail" in call.prompt_text.split("\n")[-1]:
            raise ConnectionError("the model API is down")
        return default_script(call)

    async with rig(tmp_path, ScriptedChatModel(script), monitoring=ON) as r:
        assert await r.bot.start_monitoring(r.engine.metrics)
        before = await scrape(r)
        assert before["mnemo_model_calls_total{kind=reply}"] == 0
        assert before["mnemo_learning_backlog_turns{}"] == 0
        assert before["mnemo_guilds{}"] == 2

        secret_words = "my name is Zanzibar Quux and I like hidden-canary-words"
        await r.h.send_message(r.mentioning(ALICE, secret_words))
        bob_said = r.msg(BOB, "hello there from bob", channel_id=LISTED)
        await r.h.send_message(bob_said)
        await r.h.send_message(r.mentioning(ALICE, "please fail"))
        after = await scrape(r)

        assert after["mnemo_model_calls_total{kind=reply}"] == 3
        assert after["mnemo_model_failures_total{kind=reply,reason=connection}"] == 1
        assert after["mnemo_replies_total{outcome=answered}"] == 2
        assert after["mnemo_replies_total{outcome=failed}"] == 1
        assert after["mnemo_reply_seconds_count{}"] == 2
        assert after["mnemo_reply_first_text_seconds_count{}"] == 2
        assert after["mnemo_model_tokens_total{direction=prompt,kind=reply}"] > 0
        assert after["mnemo_active_channels{}"] == 2  # general and bot-chat
        assert after["mnemo_learning_backlog_turns{}"] == 2  # two answered turns wait to be learned
        assert after["mnemo_learning_backlog_age_seconds{}"] >= 0
        assert math.isnan(after["mnemo_gateway_latency_seconds{}"])  # no websocket in the harness

        await r.engine.scheduler.flush()  # learn now
        await r.engine.messages_deleted(str(LISTED), {bob_said["id"]})
        await r.engine.messages_deleted(str(LISTED), {"1234"})  # held nothing: not an erasure
        await r.engine.erase_person(str(BOB["id"]))
        await r.engine.erase_person(str(ALICE["id"]), guild_id=str(GUILD_ID))
        await r.engine.channel_deleted(str(GENERAL))
        await r.engine.channel_deleted(str(OTHER_CHANNEL))  # never stored: not an erasure
        learned = await scrape(r)
        assert learned["mnemo_learning_backlog_turns{}"] == 0
        assert learned["mnemo_learning_backlog_age_seconds{}"] == 0
        assert learned["mnemo_model_calls_total{kind=extraction}"] >= 1
        assert learned["mnemo_model_tokens_total{direction=completion,kind=extraction}"] > 0
        assert learned["mnemo_erasures_total{scope=person}"] == 1
        assert learned["mnemo_erasures_total{scope=server}"] == 1
        assert learned["mnemo_erasures_total{scope=message}"] == 1 and learned["mnemo_erasures_total{scope=channel}"] == 1

        values = label_values(learned)
        assert values <= VOCABULARY, values - VOCABULARY
        text = "\n".join(learned)
        for personal in (ALICE["id"], BOB["id"], MOD["id"], str(GUILD_ID), str(OTHER_GUILD), str(GENERAL),
                         str(LISTED), "alice", "Alice", "bob", "Zanzibar", "canary", "hello there"):
            assert personal not in text


async def test_health_is_ready_only_when_the_gateway_is_up_and_storage_answers(tmp_path):
    async with rig(tmp_path, monitoring=ON) as r:
        assert await r.bot.start_monitoring(r.engine.metrics)
        status, body = await health(r)
        assert (status, body) == (200, {"status": "ok", "gateway": True, "storage": True})

        r.bot.dispatch("disconnect")  # what discord.py dispatches when the websocket drops
        await r.h.settle()
        status, body = await health(r)
        assert status == 503 and body["gateway"] is False and body["storage"] is True

        r.h.feed("RESUMED", {})  # the gateway resumes the session
        await r.h.settle()
        assert (await health(r))[0] == 200

        async def broken() -> bool:
            raise OSError("disk I/O error")

        r.bot.monitoring.health.checks["storage"] = broken
        status, body = await health(r)
        assert status == 503 and body == {"status": "unavailable", "gateway": True, "storage": False}


async def test_two_closes_at_once_stop_the_endpoint_without_an_error(tmp_path):
    """A SIGTERM's close and ``async with bot``'s close overlap; both used to clean up aiohttp's runner,
    and the second raised AttributeError: the process exited 1 after a clean shutdown."""
    import asyncio

    async with rig(tmp_path, monitoring=ON) as r:
        assert await r.bot.start_monitoring(r.engine.metrics)
        port = r.bot.monitoring.port
        server = r.bot.monitoring
        await asyncio.gather(server.close(), server.close())
        await asyncio.gather(r.bot.close(), r.bot.close())
        assert r.bot.monitoring is None
        async with aiohttp.ClientSession() as http:
            try:
                async with http.get(f"http://127.0.0.1:{port}/health"):
                    raise AssertionError("the endpoint still answers after close")
            except aiohttp.ClientConnectorError:
                pass


async def test_endpoints_are_off_unless_configured(tmp_path):
    async with rig(tmp_path, monitoring={"metrics": True, "port": 0}) as r:
        assert await r.bot.start_monitoring(r.engine.metrics)
        url = f"http://127.0.0.1:{r.bot.monitoring.port}/health"
        async with aiohttp.ClientSession() as http, http.get(url) as resp:
            assert resp.status == 404
    async with rig(tmp_path, monitoring={"port": 0}) as r:
        assert await r.bot.start_monitoring(r.engine.metrics)
        assert r.bot.monitoring.port is None  # nothing listens at all


async def test_a_taken_port_is_one_line_and_no_start(tmp_path, caplog):
    async with rig(tmp_path, monitoring=ON) as r:
        assert await r.bot.start_monitoring(r.engine.metrics)
        taken = r.bot.monitoring.port
        async with rig(tmp_path / "second", monitoring=dict(ON, port=taken)) as second:
            assert not await second.bot.start_monitoring(second.engine.metrics)
        assert any("cannot listen on 127.0.0.1:%d" % taken in rec.getMessage() for rec in caplog.records)


async def test_the_health_command_reports_what_the_endpoint_says(tmp_path):
    async with rig(tmp_path, monitoring=ON) as r:
        assert await r.bot.start_monitoring(r.engine.metrics)
        section = MonitoringSection(health=True, port=r.bot.monitoring.port)
        import asyncio

        healthy, line = await asyncio.to_thread(probe_health, section)
        assert healthy and '"status": "ok"' in line
        r.bot.dispatch("disconnect")
        await r.h.settle()
        healthy, line = await asyncio.to_thread(probe_health, section)
        assert not healthy and '"gateway": false' in line
    healthy, line = probe_health(MonitoringSection(health=True, port=section.port))  # the bot is gone
    assert not healthy and "unreachable" in line
    assert probe_health(MonitoringSection()) == (False, "the health endpoint is off: set monitoring.health = true")


async def test_docker_healthcheck_command_exits_0_only_when_healthy(tmp_path):
    """The exact command of the Dockerfile's HEALTHCHECK, as a real process, against a running bot."""
    import asyncio
    import re
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    dockerfile = (root / "Dockerfile").read_text()
    command = re.search(r'HEALTHCHECK .*?CMD \[(.*?)\]', dockerfile, re.S).group(1)
    argv = [a.strip().strip('"') for a in command.split(",")]
    assert argv[:3] == ["python", "-m", "bot"] and argv[-1] == "health"

    async with rig(tmp_path, monitoring=ON) as r:
        assert await r.bot.start_monitoring(r.engine.metrics)
        cfg = tmp_path / "config.toml"
        cfg.write_text(f'[monitoring]\nhealth = true\nport = {r.bot.monitoring.port}\n')
        run = [sys.executable, *argv[1:3], "--config", str(cfg), "health"]

        def probe() -> subprocess.CompletedProcess:
            return subprocess.run(run, capture_output=True, text=True, cwd=root, timeout=60,
                                  env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)})

        ok = await asyncio.to_thread(probe)
        assert ok.returncode == 0 and '"status": "ok"' in ok.stdout, ok.stderr
        r.bot.dispatch("disconnect")
        await r.h.settle()
        down = await asyncio.to_thread(probe)
        assert down.returncode == 1 and '"gateway": false' in down.stdout


def test_the_image_config_turns_the_health_endpoint_on(tmp_path):
    """The Dockerfile's sed over config.toml yields a valid config with /health on and data in /data."""
    import re
    import subprocess
    from pathlib import Path

    from bot.settings import load_settings

    root = Path(__file__).resolve().parents[1]
    sed = re.search(r"RUN (sed -i .*?) /app/config.toml", (root / "Dockerfile").read_text()).group(1)
    cfg = tmp_path / "config.toml"
    cfg.write_text((root / "config.toml").read_text())
    subprocess.run(f"{sed} {cfg}", shell=True, check=True)
    settings = load_settings(cfg, env={}, need_model=False)
    assert settings.monitoring.health is True and settings.monitoring.metrics is False
    assert settings.monitoring.host == "127.0.0.1"
    assert str(settings.bot.data_dir) == "/data"


async def test_the_health_command_ignores_proxy_settings(tmp_path, monkeypatch):
    """Docker hands its client proxy settings to containers; urllib sent the loopback probe through them."""
    import asyncio
    import urllib.request

    monkeypatch.setattr(urllib.request, "_opener", None)  # urlopen's opener reads the proxies once, when built
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    async with rig(tmp_path, monitoring=ON) as r:
        assert await r.bot.start_monitoring(r.engine.metrics)
        section = MonitoringSection(health=True, host="0.0.0.0", port=r.bot.monitoring.port)
        healthy, line = await asyncio.to_thread(probe_health, section)
        assert healthy, line


def test_the_health_command_asks_the_ipv6_loopback_when_the_bot_listens_on_all_ipv6_addresses(monkeypatch):
    asked = []

    class Opener:
        def open(self, url, timeout):
            asked.append(url)
            raise OSError("refused")

    import urllib.request

    monkeypatch.setattr(urllib.request, "build_opener", lambda *handlers: Opener())
    probe_health(MonitoringSection(health=True, host="::", port=8080))
    probe_health(MonitoringSection(health=True, host="0.0.0.0", port=8080))
    assert asked == ["http://[::1]:8080/health", "http://127.0.0.1:8080/health"]


async def test_a_failing_check_is_logged_when_it_starts_failing_and_when_it_passes_again(caplog):
    """Docker probes every 30 s: a warning per probe made a database outage 120 lines an hour."""
    from bot.monitoring import Health

    down = [True]

    async def storage() -> bool:
        if down[0]:
            raise TimeoutError()
        return True

    import logging

    caplog.set_level(logging.INFO, logger="bot.monitoring")
    health = Health({"storage": storage})
    for _ in range(5):
        assert await health.run() == {"storage": False}
    down[0] = False
    assert await health.run() == {"storage": True}
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "bot.monitoring"]
    assert [level for level, _ in said] == ["WARNING", "INFO"] and "passes again" in said[1][1]


async def test_the_gateway_latency_is_nan_while_disconnected(tmp_path):
    """discord.py keeps the old websocket after a drop: its latency stayed at the last heartbeat's."""
    from types import SimpleNamespace

    async with rig(tmp_path, monitoring=ON) as r:
        assert await r.bot.start_monitoring(r.engine.metrics)
        r.bot.ws = SimpleNamespace(latency=0.042)  # the websocket discord.py keeps across a drop
        try:
            assert (await scrape(r))["mnemo_gateway_latency_seconds{}"] == 0.042
            r.bot.dispatch("disconnect")
            await r.h.settle()
            assert math.isnan((await scrape(r))["mnemo_gateway_latency_seconds{}"])
            r.h.feed("RESUMED", {})
            await r.h.settle()
            assert (await scrape(r))["mnemo_gateway_latency_seconds{}"] == 0.042
        finally:
            r.bot.ws = None
