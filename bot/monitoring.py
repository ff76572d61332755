"""The operators' HTTP endpoint: ``/metrics`` (Prometheus text format) and ``/health`` (for containers).

Both are off by default (``[monitoring]``) and listen on 127.0.0.1 unless configured, so nothing is
exposed by accident. The server runs in the bot's own event loop (aiohttp, already a discord.py
dependency): a health check can then ask the live gateway and the live database pool, not a copy.

``/health`` answers 200 ``{"status": "ok", ...}`` when every check passes (the gateway is connected, the
database answers within ``health_timeout_seconds``) and 503 with the failing checks otherwise, which is
what Docker's ``HEALTHCHECK`` and Kubernetes readiness probes expect. ``python -m bot health`` asks it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from aiohttp import web

from bot.metrics import CONTENT_TYPE, Metrics
from bot.settings import MonitoringSection

log = logging.getLogger(__name__)

Check = Callable[[], Awaitable[bool]]


class Health:
    """Named readiness checks; each must answer True within the timeout."""

    def __init__(self, checks: dict[str, Check], *, timeout: float = 3.0) -> None:
        self.checks = checks
        self.timeout = timeout
        self._failing: set[str] = set()

    async def run(self) -> dict[str, bool]:
        """Every check's result; a check that raises or takes too long counts as failed.

        Logged once when a check starts failing and once when it passes again: Docker probes every 30 s,
        and a line per probe made a database outage 120 warnings an hour (the operating guide promises one).
        """
        results: dict[str, bool] = {}
        for name, check in self.checks.items():
            try:
                results[name] = bool(await asyncio.wait_for(check(), self.timeout))
            except Exception as exc:  # noqa: BLE001 - a failing check is an answer, not a crash
                if name not in self._failing:
                    log.warning("health check %r failed: %r (logged again only once it passes)", name, exc)
                    self._failing.add(name)
                results[name] = False
            if results[name] and name in self._failing:
                log.info("health check %r passes again", name)
                self._failing.discard(name)
        return results


class MonitoringServer:
    """Serves ``/metrics`` and ``/health`` as configured; ``async with`` it around the bot's run."""

    def __init__(self, section: MonitoringSection, metrics: Metrics, health: Health) -> None:
        self.section = section
        self.metrics = metrics
        self.health = health
        self._runner: web.AppRunner | None = None
        self.port: int | None = None  # the bound port (differs from the config when it is 0)

    @property
    def enabled(self) -> bool:
        return self.section.metrics or self.section.health

    def app(self) -> web.Application:
        app = web.Application()
        if self.section.metrics:
            app.router.add_get("/metrics", self._metrics)
        if self.section.health:
            app.router.add_get("/health", self._health)
        return app

    async def _metrics(self, request: web.Request) -> web.Response:
        await self.metrics.refresh()
        return web.Response(body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    async def _health(self, request: web.Request) -> web.Response:
        results = await self.health.run()
        ok = all(results.values())
        body = {"status": "ok" if ok else "unavailable", **results}
        return web.json_response(body, status=200 if ok else 503)

    async def start(self) -> None:
        if not self.enabled:
            return
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.section.host, self.section.port)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []  # noqa: SLF001 - the only way to read port 0
        self.port = sockets[0].getsockname()[1] if sockets else self.section.port
        paths = [p for p, on in (("/metrics", self.section.metrics), ("/health", self.section.health)) if on]
        log.info("monitoring endpoint on http://%s:%s (%s)", self.section.host, self.port, ", ".join(paths))

    async def close(self) -> None:
        """Stop serving; safe to call twice at once (a signal's close and ``async with bot`` both close).

        The runner is taken before the first await: until 2026-12-07 two overlapping calls both cleaned it
        up, and aiohttp's second ``cleanup`` crashed the exit with an AttributeError (exit code 1).
        """
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> "MonitoringServer":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
