"""``python -m bot health``: ask a running bot's ``/health`` endpoint.

Its own module, importing nothing of the bot but the settings: Docker runs it every 30 seconds, and the
monitoring server's module pulls in aiohttp and the metrics' LangChain callbacks (1.5 s of CPU, 110 MB).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from bot.settings import MonitoringSection


def probe_health(section: MonitoringSection, *, timeout: float = 10.0) -> tuple[bool, str]:
    """Ask a running bot's ``/health`` (``python -m bot health``); return (healthy, one line to print)."""
    if not section.health:
        return False, "the health endpoint is off: set monitoring.health = true"
    # "::" binds IPv6 only (asyncio sets IPV6_V6ONLY): 127.0.0.1 was refused there
    host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(section.host, section.host)
    if ":" in host:
        host = f"[{host}]"
    url = f"http://{host}:{section.port}/health"
    try:
        # No proxy: Docker hands its client proxy settings (http_proxy) to containers, and urllib sent this
        # loopback request through them, so a healthy bot was reported unreachable, for good.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(url, timeout=timeout) as resp:
            return resp.status == 200, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return False, exc.read().decode("utf-8", "replace")
    except (OSError, ValueError) as exc:
        return False, json.dumps({"status": "unreachable", "url": url, "error": str(exc)})
