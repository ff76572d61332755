"""``python -m bot stats``: the operator's figures, read from the database (no Prometheus needed).

The figures the database holds: the model calls and tokens *charged* against the budgets (the usage table,
per server, person and day: a call the provider reported no figures for is charged its estimate, one cut
short after it was sent its prompt, and a refused or failed call nothing), the learning backlog and the
age of its oldest turn, and the number of servers (with usage, and with settings of their own). A running
bot's ``mnemo_model_calls_total`` counts every call started and ``mnemo_model_tokens_total`` only the
tokens the provider reported, so the two disagree a little by design. What exists only inside a running
process (reply latency, model failures, gateway latency, erasures: a wipe deliberately leaves no trace in
the database) is on ``/metrics`` only, and the output says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bot.metrics import Backlog

if TYPE_CHECKING:
    from bot.engine import Storage

ACTIVE_WINDOW_SECONDS = 86_400.0
TOP_ROWS = 20


@dataclass(frozen=True)
class UsageLine:
    """One row of the usage table, summed over the days kept: a person in a server (or in DMs)."""

    guild_id: str
    user_id: str
    calls: int
    prompt_tokens: int
    completion_tokens: int

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class StatsReport:
    """What ``stats`` prints; built by :func:`collect_stats`."""

    usage: list[UsageLine]
    backlog: Backlog
    servers: int
    people: int
    servers_with_settings: int = 0
    extra: dict[str, str] = field(default_factory=dict)  # figures a backend adds (one line each)

    @property
    def calls(self) -> int:
        return sum(u.calls for u in self.usage)

    @property
    def tokens(self) -> int:
        return sum(u.tokens for u in self.usage)


async def collect_stats(storage: Storage, *, now: float | None = None) -> StatsReport:
    """Read the figures from opened storage."""
    now = time.time() if now is None else now
    rows = [UsageLine(r.guild_id, r.user_id, r.calls, r.prompt_tokens, r.completion_tokens)
            for r in await storage.usage.totals()]
    pending = await storage.inbox.pending()
    oldest = min((p.last_created for p in pending), default=None)
    backlog = Backlog(turns=sum(p.count for p in pending), oldest_age_seconds=0.0 if oldest is None else now - oldest)
    return StatsReport(
        usage=rows,
        backlog=backlog,
        servers=len({r.guild_id for r in rows if r.guild_id != "dm"}),
        people=len({r.user_id for r in rows}),
        servers_with_settings=await storage.guild_settings.count(),
    )


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def render_stats(report: StatsReport, *, top: int = TOP_ROWS) -> list[str]:
    """The report as lines of text: totals first, then the biggest users of tokens."""
    b = report.backlog
    lines = [
        f"model calls charged  {report.calls}",
        f"tokens charged       {report.tokens}",
        f"servers with usage   {report.servers}",
        f"people with usage    {report.people}",
        f"servers with /settings  {report.servers_with_settings}",
        f"learning backlog     {b.turns} turns"
        + (f", longest waiting conversation quiet for {_age(b.oldest_age_seconds)}" if b.turns else ""),
        *(f"{name:<20} {value}" for name, value in report.extra.items()),
        "(reply latency, model failures, gateway latency and erasures exist only in a running bot: /metrics)",
        "",
        f"{'server':>20}  {'user':>20}  {'calls':>7}  {'prompt':>10}  {'completion':>10}",
    ]
    for r in report.usage[:top]:
        lines.append(f"{r.guild_id:>20}  {r.user_id:>20}  {r.calls:>7}  {r.prompt_tokens:>10}  {r.completion_tokens:>10}")
    if len(report.usage) > top:
        lines.append(f"... and {len(report.usage) - top} more")
    lines.append(f"total: {report.tokens} tokens in {report.calls} calls")
    return lines
