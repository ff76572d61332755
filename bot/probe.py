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
    host = "127.0.0.1" if section.host in ("0.0.0.0", "::", "") else section.host
    if ":" in host:
        host = f"[{host}]"
    url = f"http://{host}:{section.port}/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - a fixed local URL
            return resp.status == 200, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return False, exc.read().decode("utf-8", "replace")
    except (OSError, ValueError) as exc:
        return False, json.dumps({"status": "unreachable", "url": url, "error": str(exc)})
