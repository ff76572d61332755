"""What one answered turn costs PostgreSQL, and what it does when the server's connections go away.

Counted, not timed: pool checkouts per turn (``storage.checkouts``, the pool's own request counter) and
the statements sent (a spy on psycopg's ``execute``): a liveness query would show as a statement.
"""

from __future__ import annotations

import asyncio

import psycopg

from bot.engine.state import Speaker
from tests.conftest import ScriptedChatModel, default_script, make_settings, running_engine

ADA = Speaker(user_id="42", name="Ada", guild_id="900", channel_id="7")
MAX_CHECKOUTS = 8  # issue 22: at most 8 pool checkouts per answered turn


def spy_statements(monkeypatch) -> list[str]:
    """Every statement the bot's connections send from now on (the text only)."""
    sent: list[str] = []
    for cls in (psycopg.AsyncConnection, psycopg.AsyncCursor):
        original = cls.execute

        async def execute(self, query, *args, _original=original, **kwargs):
            sent.append(str(query) if isinstance(query, str) else repr(query))
            return await _original(self, query, *args, **kwargs)

        monkeypatch.setattr(cls, "execute", execute)
    return sent


def liveness_queries(sent: list[str]) -> list[str]:
    return [q for q in sent if q.strip().rstrip(";").lower() in ("", "select 1")]


async def answered_turn(engine, text: str) -> None:
    """One turn, answered and finished (its writes after the answer included)."""
    await engine.reply("t", ADA, text)
    await engine.runner.close()  # the turn's tail: the checkpoint written after the answer


async def test_one_answered_turn_takes_at_most_eight_checkouts_and_no_liveness_query(tmp_path, pg_backend, monkeypatch):
    settings = make_settings(tmp_path, pg_backend)
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        for i in range(3):  # a thread with history, a person with memories' namespace read
            await answered_turn(engine, f"I like thing {i}")
        sent = spy_statements(monkeypatch)
        before = engine.storage.checkouts()
        await answered_turn(engine, "I like tea")
        used = engine.storage.checkouts() - before
    assert 0 < used <= MAX_CHECKOUTS, used
    assert sent and liveness_queries(sent) == []


async def test_connections_cut_between_turns_are_recovered_without_a_liveness_query(tmp_path, pg_backend, monkeypatch):
    """The server closes every connection (as a restart does): the next turn is answered, not apologised for."""
    settings = make_settings(tmp_path, pg_backend, storage={"pool_min_size": 2, "pool_max_size": 4})
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await answered_turn(engine, "I like tea")
        sent = spy_statements(monkeypatch)
        with psycopg.connect(pg_backend.database_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                          " WHERE datname = current_database() AND pid <> pg_backend_pid()")
        await asyncio.sleep(0.2)  # the server's goodbye reaches the idle connections
        reply = await engine.reply("t", ADA, "I like jam")
        assert reply.text.endswith("I like jam")
        await engine.runner.close()
        await engine.scheduler.flush()
        learned = {m.content for m in await engine.memories.list("42")}
    assert {"I like tea", "I like jam"} <= learned
    assert liveness_queries(sent) == []


async def test_a_connection_that_looks_open_but_is_gone_is_retried_once(tmp_path, pg_backend, monkeypatch):
    """A failed-over server leaves connections that look open until used: the first statement fails,
    runs once more on a fresh connection, and the person gets the answer."""
    settings = make_settings(tmp_path, pg_backend, storage={"pool_min_size": 2, "pool_max_size": 4})
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await answered_turn(engine, "I like tea")
        # What a look at the socket cannot see: connections that seem open (the check sees nothing).
        monkeypatch.setattr("bot.storage.postgres.connection.still_open", lambda conn: None)
        with psycopg.connect(pg_backend.database_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                          " WHERE datname = current_database() AND pid <> pg_backend_pid()")
        await asyncio.sleep(0.2)
        reply = await asyncio.wait_for(engine.reply("t", ADA, "I like jam"), 30)
        assert reply.text.endswith("I like jam")
        await engine.runner.close()
        await engine.scheduler.flush()
        learned = sorted(m.content for m in await engine.memories.list("42"))
        assert await engine.inbox.pending() == []
    assert learned == ["I like jam", "I like tea"], "each acknowledged turn learned exactly once"
