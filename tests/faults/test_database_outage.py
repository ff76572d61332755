"""PostgreSQL goes away mid-run and comes back, twice: answers resume, no acknowledged turn is lost,
and each outage is one line in the log."""

from __future__ import annotations

import asyncio
import logging

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from bot.engine.state import Speaker
from tests.conftest import (
    Backend,
    ScriptedChatModel,
    default_script,
    make_settings,
    record_figure,
    running_engine,
)
from tests.fakes.tcp_proxy import TcpProxy


async def answer_when_back(engine, thread: str, speaker: Speaker, text: str, within: float = 30.0):
    """Keep asking (as people do) until the database answers again."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while True:
        try:
            return await engine.reply(thread, speaker, text)
        except engine.storage.transient_errors:
            assert loop.time() < end, "the bot did not come back after the database did"
            await asyncio.sleep(0.2)


async def test_two_outages_lose_nothing_and_each_is_one_log_line(tmp_path, pg_backend, caplog):
    caplog.set_level(logging.DEBUG)
    info = conninfo_to_dict(pg_backend.database_url)
    proxy = TcpProxy(info.get("host") or "127.0.0.1", int(info.get("port") or 5432))
    await proxy.up()
    via_proxy = Backend("postgres", make_conninfo(pg_backend.database_url, host="127.0.0.1", port=str(proxy.port)))
    settings = make_settings(tmp_path, via_proxy, memory={"extraction_quiet_seconds": 0.05, "extraction_after_messages": 1},
                             storage={"pool_min_size": 1, "pool_max_size": 3, "pool_timeout_seconds": 1})
    ada = Speaker(user_id="42", name="Ada", guild_id="900", channel_id="7", message_id="70")
    acked: list[str] = []
    failed = 0
    try:
        async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
            n = 0
            for outage in range(2):
                for _ in range(3):
                    n += 1
                    await engine.reply("t", ada, f"I like thing{n}")
                    acked.append(f"I like thing{n}")
                await proxy.down()
                for _ in range(2):  # people keep writing during the outage: each gets the apology
                    n += 1
                    try:
                        await engine.reply("t", ada, f"I like lost{n}")
                    except engine.storage.transient_errors:
                        failed += 1
                await asyncio.sleep(0.5)  # extraction retries meet the outage too
                await proxy.up()
                n += 1
                await answer_when_back(engine, "t", ada, f"I like thing{n}")
                acked.append(f"I like thing{n}")
            await engine.scheduler.flush()
            learned = [m.content for m in await engine.memories.list("42")]
            assert await engine.inbox.pending() == []
    finally:
        await proxy.down()
    assert failed == 4
    assert sorted(learned) == sorted(acked), "every acknowledged turn learned exactly once"
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    outage_lines = [r for r in loud if "is unreachable" in r.getMessage()]
    assert len(outage_lines) == 2, [r.getMessage() for r in loud]
    assert loud == outage_lines, [r.getMessage() for r in loud]  # nothing else shouted meanwhile
    back = [r for r in caplog.records if "reachable again" in r.getMessage()]
    assert len(back) == 2
    record_figure("database outages [postgres]", 2,
                  f"{len(acked)} acknowledged turns all learned once; {failed} messages during outages got the apology; "
                  "one warning line per outage")
