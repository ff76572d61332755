"""python -m bot stats: the figures from the database, from real stores."""

from __future__ import annotations

from bot.engine.stores import ServerSettings
from bot.stats import collect_stats, render_stats
from bot.storage import open_storage
from tests.conftest import make_settings


async def test_stats_read_usage_backlog_and_settings_from_the_database(tmp_path):
    async with open_storage(make_settings(tmp_path / "data")) as storage:
        await storage.usage.record("900", "1", 100, 20)
        await storage.usage.record("900", "2", 50, 5)
        await storage.usage.record("dm", "1", 10, 1)
        for n in range(3):
            await storage.inbox.record(thread_id="t", user_id="1", author="a", human=f"h{n}", ai="x",
                                       origin={"guild_id": "900", "channel_id": "t", "message_id": str(n)})
        await storage.guild_settings.put(ServerSettings(guild_id="900", learning=False, version=1), replaces=0)
        pending = await storage.inbox.pending()
        report = await collect_stats(storage, now=pending[0].last_created + 90)
    assert (report.calls, report.tokens) == (3, 186)
    assert (report.servers, report.people, report.servers_with_settings) == (1, 2, 1)
    assert report.backlog.turns == 3 and 89 <= report.backlog.oldest_age_seconds <= 91
    text = "\n".join(render_stats(report))
    assert "learning backlog     3 turns, longest waiting conversation quiet for 90 s" in text
    assert "servers with /settings  1" in text and "total: 186 tokens in 3 calls" in text
    assert "/metrics" in text  # says which figures exist only in a running bot
