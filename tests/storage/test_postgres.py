"""What only the PostgreSQL backend has to get right: transactional batches, migrations, bad DSNs,
a busy pool, and erasure that leaves no dead tuple behind."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from langgraph.store.base import PutOp

from bot.engine.state import Speaker
from bot.engine.stores import StorageUnavailable
from bot.storage import open_storage
from bot.storage.postgres import migrations
from bot.storage.postgres.maintenance import ERASURE_TABLES as ERASURE_TABLES_NAMES
from tests.conftest import POSTGRES_SERVER, ScriptedChatModel, default_script, make_settings, running_engine

ROOT = Path(__file__).resolve().parents[2]
NS = ("memories", "42")
POISON = """
CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'poisoned write'; END $$;
CREATE TRIGGER refuse_poison BEFORE INSERT ON store FOR EACH ROW WHEN (NEW.key = 'poison')
EXECUTE FUNCTION refuse_poison();
"""


async def test_a_batch_that_fails_half_way_leaves_nothing_behind(tmp_path, pg_backend):
    """A delete, then an insert the database refuses: the delete is rolled back with it."""
    settings = make_settings(tmp_path, pg_backend)
    async with open_storage(settings) as storage:
        async with await psycopg.AsyncConnection.connect(pg_backend.database_url, autocommit=True) as conn:
            await conn.execute(POISON)
        await storage.store.aput(NS, "keep", {"content": "old memory"})
        with pytest.raises(psycopg.Error, match="poisoned write"):
            await storage.store.abatch([PutOp(NS, "keep", None), PutOp(NS, "other", {"content": "new"}),
                                        PutOp(NS, "poison", {"content": "x"})])
        assert (await storage.store.aget(NS, "keep")).value == {"content": "old memory"}
        assert await storage.store.aget(NS, "other") is None
        # and the pool's connections came back clean: the next batch works
        await storage.store.abatch([PutOp(NS, "keep", None)])
        assert await storage.store.aget(NS, "keep") is None


@pytest.mark.parametrize("change", ["DELETE FROM store", "UPDATE store SET value = '{\"content\": \"new text\"}'"],
                         ids=["deleted", "rewritten"])
async def test_a_vector_written_while_its_memory_changes_is_not_kept(tmp_path, pg_backend, change):
    """Background indexing (another process's, from a list read before) writes a memory's vector while a
    deletion or a correction of that memory is committing. Under READ COMMITTED the existence check saw the
    row as it was, and the old text's vector outlived the removal that had already dropped the memory's.
    The check now locks the row, and skips one a change holds: no vector is written (a cache, made again
    later), before the change commits or after."""
    settings = make_settings(tmp_path, pg_backend)
    async with open_storage(settings) as storage:
        await storage.store.aput(NS, "k", {"content": "old text"}, index=False)
        async with await psycopg.AsyncConnection.connect(pg_backend.database_url) as other:
            await other.execute(change + " WHERE prefix = 'memories.42' AND key = 'k'")  # not committed yet
            await asyncio.wait_for(storage.vectors.put("42", [("k", "d", b"\x01")], texts={"k": "old text"}), 10)
            await other.commit()
        assert await storage.vectors.get("42") == {}


async def test_a_batch_is_one_explicit_transaction(tmp_path, pg_backend):
    """Every write of one batch carries the same transaction ID (not one implicit transaction per Sync)."""
    settings = make_settings(tmp_path, pg_backend)
    async with open_storage(settings) as storage:
        await storage.store.abatch([PutOp(NS, f"k{i}", {"content": str(i)}) for i in range(3)]
                                   + [PutOp(("memory_history", "42"), "h", {"memory_key": "k0"})])
        async with await psycopg.AsyncConnection.connect(pg_backend.database_url) as conn:
            rows = await (await conn.execute("SELECT DISTINCT xmin::text FROM store")).fetchall()
        assert len(rows) == 1


async def test_a_batch_larger_than_a_statements_parameters_is_still_one_transaction(tmp_path, pg_backend):
    """70,000 history lines (a wipe's deletes of a long-lived person): upstream would write them as one
    statement, over PostgreSQL's 65,535 parameters; in chunks they go, in one transaction, all or nothing."""
    from bot.storage.postgres.store import PUT_CHUNK

    settings = make_settings(tmp_path, pg_backend)
    hns = ("memory_history", "42")
    count = 70_000
    assert count > 65_535 > PUT_CHUNK * 5
    async with open_storage(settings) as storage:
        await storage.store.abatch([PutOp(hns, f"h{i:05d}", {"memory_key": "k"}, index=False) for i in range(count)])
        async with await psycopg.AsyncConnection.connect(pg_backend.database_url) as conn:
            rows = await (await conn.execute("SELECT count(*), count(DISTINCT xmin::text) FROM store")).fetchone()
        assert rows == (count, 1)
        async with await psycopg.AsyncConnection.connect(pg_backend.database_url, autocommit=True) as conn:
            await conn.execute(POISON)
        with pytest.raises(psycopg.Error, match="poisoned write"):  # the last chunk fails: the first ones go back
            await storage.store.abatch([PutOp(hns, f"h{i:05d}", None) for i in range(count)]
                                       + [PutOp(NS, "poison", {"content": "x"})])
        assert await storage.store.aget(hns, "h00000") is not None
        await storage.store.abatch([PutOp(hns, f"h{i:05d}", None) for i in range(count)])
        async with await psycopg.AsyncConnection.connect(pg_backend.database_url) as conn:
            assert (await (await conn.execute("SELECT count(*) FROM store")).fetchone())[0] == 0


async def test_migrations_are_idempotent_and_concurrent_starts_take_turns(tmp_path, pg_backend):
    settings = make_settings(tmp_path, pg_backend)

    async def start() -> str:
        async with open_storage(settings) as storage:
            return storage.inbox.epoch

    epochs = await asyncio.gather(*(start() for _ in range(3)))  # three processes starting together
    assert len(set(epochs)) == 1
    assert await start() == epochs[0]
    async with await psycopg.AsyncConnection.connect(pg_backend.database_url) as conn:
        row = await (await conn.execute("SELECT value FROM bot_meta WHERE key='schema_version'")).fetchone()
        assert int(row[0]) == migrations.SCHEMA_VERSION
        indexes = {r[0] for r in await (await conn.execute("SELECT indexname FROM pg_indexes")).fetchall()}
        assert {"bot_inbox_pending", "bot_inbox_thread", "checkpoints_thread_id_idx"} <= indexes


async def test_a_database_at_a_newer_schema_is_refused_with_one_line(tmp_path, pg_backend):
    settings = make_settings(tmp_path, pg_backend)
    async with open_storage(settings):
        pass
    async with await psycopg.AsyncConnection.connect(pg_backend.database_url, autocommit=True) as conn:
        await conn.execute("UPDATE bot_meta SET value = %s WHERE key = 'schema_version'",
                           (str(migrations.SCHEMA_VERSION + 1),))
    with pytest.raises(StorageUnavailable) as refused:
        async with open_storage(settings):
            pass
    assert "newer than this bot" in str(refused.value) and "\n" not in str(refused.value)


def run_cli(tmp_path: Path, database_url: str | None) -> subprocess.CompletedProcess:
    cfg = tmp_path / "config.toml"
    cfg.write_text('[bot]\ndata_dir = "data"\n[storage]\nbackend = "postgres"\n')
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    if database_url is not None:
        env["DATABASE_URL"] = database_url
    return subprocess.run([sys.executable, "-m", "bot", "--config", str(cfg), "stats"], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=60)


@pytest.mark.parametrize("url, code, says", [
    (None, 2, "missing secret 'DATABASE_URL'"),
    ("host=127.0.0.1 port=5432 nonsense", 1, "not a valid PostgreSQL connection string"),
    ("postgresql://postgres:hunter2-secret@127.0.0.1:1/test", 1, "cannot connect to PostgreSQL at postgres@127.0.0.1:1/test"),
    ("postgresql://postgres:hunter2-secret@127.0.0.1:5432/no_such_database_here", 1, "does not exist"),
    # Passwords libpq misparses (an unencoded "/", a bad "%" escape): its error quoted them once.
    ("postgresql://postgres:hunter2/secret@127.0.0.1:1/test", 1, "cannot connect to PostgreSQL"),
    ("postgresql://postgres:hunter2%zzsecret@127.0.0.1:1/test", 1, "not a valid PostgreSQL connection string"),
    ("postgresql://postgres:pw@hunter2@127.0.0.1:1/test", 1, "cannot connect to PostgreSQL"),
])
def test_a_wrong_or_unreachable_database_stops_start_up_with_one_line(tmp_path, url, code, says):
    result = run_cli(tmp_path, url)
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], result.stderr
    assert "hunter2" not in result.stderr + result.stdout


async def test_an_exhausted_pool_makes_requests_wait_not_fail(tmp_path, pg_backend):
    """Two connections, forty channels at once: every message is answered and recorded."""
    settings = make_settings(tmp_path, pg_backend, storage={"pool_min_size": 1, "pool_max_size": 2,
                                                            "pool_timeout_seconds": 60})
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        replies = await asyncio.gather(*(
            engine.reply(f"c{i}", Speaker(user_id=f"u{i}", name=f"U{i}"), f"I like thing {i}") for i in range(40)))
        assert [r.text for r in replies] == [f"reply to [U{i} | user u{i}]\n> I like thing {i}" for i in range(40)]
        assert sorted(p.thread_id for p in await engine.inbox.pending()) == sorted(f"c{i}" for i in range(40))


async def test_a_request_that_cannot_get_a_connection_fails_cleanly_and_loses_nothing(tmp_path, pg_backend):
    settings = make_settings(tmp_path, pg_backend, storage={"pool_min_size": 1, "pool_max_size": 2,
                                                            "pool_timeout_seconds": 0.5})
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("t", Speaker(user_id="42", name="Ada"), "I like tea")
        pool = engine.storage.checkpointer.conn
        async with pool.connection(), pool.connection():  # someone else holds every connection
            with pytest.raises(engine.storage.transient_errors):
                await engine.reply("t", Speaker(user_id="42", name="Ada"), "I like jam")
        again = await engine.reply("t", Speaker(user_id="42", name="Ada"), "I like honey")
        assert again.text.endswith("I like honey")
        await engine.scheduler.flush()
        learned = {m.content for m in await engine.memories.list("42")}
        assert {"I like tea", "I like honey"} <= learned


async def page_bytes(url: str, tables: tuple[str, ...]) -> bytes:
    """Every tuple's bytes, live or dead, in every page of the tables and their TOAST tables."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
        out = bytearray()
        for table in tables:
            cur = await conn.execute(
                "SELECT c.oid::regclass::text, t.oid::regclass::text FROM pg_class c"
                " LEFT JOIN pg_class t ON t.oid = c.reltoastrelid WHERE c.oid = %s::regclass", (table,))
            for rel in (r for r in await cur.fetchone() if r):
                blocks = (await (await conn.execute("SELECT pg_relation_size(%s::regclass) / current_setting('block_size')::int",
                                                    (rel,))).fetchone())[0]
                for blk in range(blocks):
                    cur = await conn.execute("SELECT t_data FROM heap_page_items(get_raw_page(%s, %s))", (rel, blk))
                    out += b"".join(bytes(r[0]) for r in await cur.fetchall() if r[0] is not None)
        return bytes(out)


async def test_erasure_leaves_no_live_row_and_no_dead_tuple(tmp_path, pg_backend):
    from bot.storage.postgres.maintenance import ERASURE_TABLES

    canary = "zebra-canary-7731"
    settings = make_settings(tmp_path, pg_backend)
    ada = Speaker(user_id="42", name="Ada", guild_id="900", channel_id="7", message_id="70")
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        for i in range(3):
            await engine.reply("t", ada, f"I like {canary} number {i}")
        await engine.reply("t", Speaker(user_id="7", name="Bob"), "I like plain bread")
        await engine.scheduler.flush()
        await engine.reply("t", ada, f"I like {canary} pending")  # still in the inbox
        assert canary.encode() in await page_bytes(pg_backend.database_url, ERASURE_TABLES)
        real_compact = engine.storage.maintenance.compact
        engine.storage.maintenance.compact = _skip  # first without the VACUUM: the dead tuples are there
        await engine.erase_person("42")
        assert canary.encode() in await page_bytes(pg_backend.database_url, ERASURE_TABLES)
        assert await real_compact() == {}  # VACUUM VERBOSE: no dead row version it could not remove
        assert canary.encode() not in await page_bytes(pg_backend.database_url, ERASURE_TABLES)
        assert b"plain bread" in await page_bytes(pg_backend.database_url, ERASURE_TABLES)
        assert await engine.memories.list("42") == []


async def _skip() -> dict:
    return {}


async def test_an_old_snapshot_holding_erased_rows_is_retried_then_reported_and_cleared_later(tmp_path, pg_backend,
                                                                                                caplog):
    """VACUUM cannot remove what an older transaction may still read: the report says so, counts only."""
    canary = "walrus-canary-5521"
    settings = make_settings(tmp_path, pg_backend)
    ada = Speaker(user_id="42", name="Ada", guild_id="900", channel_id="7", message_id="70")
    async with running_engine(settings, ScriptedChatModel(default_script)) as engine:
        await engine.reply("t", ada, f"I like {canary}")
        await engine.scheduler.flush()
        async with await psycopg.AsyncConnection.connect(pg_backend.database_url) as reader:
            await reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            await reader.execute("SELECT count(*) FROM store")  # its snapshot predates the erasure
            engine.storage.maintenance.compact, real_compact = _skip, engine.storage.maintenance.compact
            await engine.erase_person("42")
            caplog.set_level(logging.WARNING, logger="bot.storage.postgres.maintenance")
            held = await real_compact()
            assert held and all(n > 0 for n in held.values()) and set(held) <= set(ERASURE_TABLES_NAMES)
            warning = " ".join(r.getMessage() for r in caplog.records)
            assert "could not yet remove" in warning and canary not in warning
            await reader.rollback()
        assert await real_compact() == {}  # the snapshot ended: everything goes
        assert canary.encode() not in await page_bytes(pg_backend.database_url, ERASURE_TABLES_NAMES)


async def test_synchronous_commit_follows_the_config(tmp_path, pg_backend):
    for wanted, shown in ((True, "on"), (False, "off")):
        settings = make_settings(tmp_path, pg_backend, storage={"synchronous_commit": wanted})
        async with open_storage(settings) as storage:
            async with storage.store.conn.connection() as conn:
                assert (await (await conn.execute("SHOW synchronous_commit")).fetchone())["synchronous_commit"] == shown


def test_the_test_server_is_the_one_ci_uses():
    assert POSTGRES_SERVER.startswith("postgresql://")


async def test_the_lock_connection_notices_a_silent_peer_within_a_minute(tmp_path, pg_backend):
    """The one connection that holds every channel lock and the erasure lock sits idle between turns: with
    TCP keepalives (and a user timeout) on it, a server gone without a word is noticed in about a minute,
    not after the kernel's default two hours of believing locks held that the server has dropped."""
    async with open_storage(make_settings(tmp_path, pg_backend)) as storage:
        async with storage.locks.channel("c1"):
            params = storage.locks._conn.info.get_parameters()
    assert params.get("keepalives") == "1" and int(params["keepalives_idle"]) <= 60
    assert int(params["keepalives_idle"]) + int(params["keepalives_interval"]) * int(params["keepalives_count"]) <= 120
    assert 0 < int(params["tcp_user_timeout"]) <= 120_000


async def test_a_lock_connection_given_up_on_leaves_no_session_holding_its_locks(tmp_path, pg_backend):
    """The client's keepalives give up on a silent server first; the server would keep that session, and
    every lock it holds for every process, until its own keepalives (which the lock connection sets too)
    notice. When the process opens a new lock connection it ends the old session itself."""
    import psycopg

    from bot.storage.postgres.locks import CHANNEL_LOCK_CLASS

    async with open_storage(make_settings(tmp_path, pg_backend)) as storage:
        locks = storage.locks
        async with locks.channel("c1"):
            old = locks._conn
            idle = (await (await old.execute("SELECT current_setting('tcp_keepalives_idle')")).fetchone())[0]
            assert idle.rstrip("s") == "30"  # the server's side of the keepalives (a TCP connection here)
            locks._conn = None  # given up on without a word to the server, as when its keepalives fail
            async with locks.channel("c2"):
                assert locks._conn is not old
            async with await psycopg.AsyncConnection.connect(POSTGRES_SERVER, autocommit=True) as other:
                cur = await other.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", (CHANNEL_LOCK_CLASS, "c1"))
                assert (await cur.fetchone())[0] is True  # the old session's lock went with it
                await other.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (CHANNEL_LOCK_CLASS, "c1"))
        await old.close()


async def test_a_pooler_that_refuses_the_options_parameter_still_gets_a_lock_connection(tmp_path, pg_backend,
                                                                                       monkeypatch, caplog):
    """PgBouncer refuses an ``options`` startup parameter unless told to ignore it: the lock connection then
    goes without the server's keepalives (as before they were added), says so once, and locks still work."""
    import psycopg

    real = psycopg.AsyncConnection.connect
    tried: list[str] = []

    async def pooler(dsn, **kw):
        tried.append(kw.get("options", ""))
        if "tcp_keepalives" in kw.get("options", ""):
            raise psycopg.OperationalError('unsupported startup parameter: options')
        return await real(dsn, **kw)

    monkeypatch.setattr(psycopg.AsyncConnection, "connect", pooler)
    async with open_storage(make_settings(tmp_path, pg_backend)) as storage:
        async with storage.locks.channel("c1"):
            pass
        storage.locks._conn = None  # a second connection: the refusal is remembered, not tried again
        async with storage.locks.channel("c2"):
            pass
    lock_tries = [o for o in tried if "tcp_keepalives" in o]
    assert len(lock_tries) == 1
    assert sum("server keepalives" in r.getMessage() for r in caplog.records) == 1


def test_dead_rows_vacuum_skipped_on_a_pinned_page_count_as_held_back():
    """VACUUM does not wait for a page another session is reading: its dead rows stay and are reported on a
    line of their own, which was not read, so "Done" was said with the words in dead tuples. Reports as
    PostgreSQL 15 and 14 word them."""
    from bot.storage.postgres.maintenance import held_back

    pg15 = ('finished vacuuming "test.public.store": index scans: 0\\n'
            "pages: 0 removed, 1 remain, 1 scanned (100.00% of total)\\n"
            "tuples: 0 removed, 10 remain, 0 are dead but not yet removable\\n"
            "tuples missed: 10 dead from 1 pages not removed due to cleanup lock contention\\n"
            "removable cutoff: 1234, which was 0 XIDs old when operation ended")
    pg14 = ('finished vacuuming "test.public.bot_inbox": index scans: 0\\n'
            "pages: 0 removed, 2 remain, 0 skipped due to pins, 0 skipped frozen\\n"
            "tuples: 3 removed, 5 remain, 2 are dead but not yet removable, oldest xmin: 1200")
    pinned14 = pg14.replace("0 skipped due to pins", "1 skipped due to pins")
    clean = ('finished vacuuming "test.public.checkpoints": index scans: 0\\n'
             "tuples: 4 removed, 0 remain, 0 are dead but not yet removable")
    assert held_back([pg15, clean]) == {"store": 10}
    assert held_back([pg14]) == {"bot_inbox": 2}
    assert held_back([pinned14]) == {"bot_inbox": 3}
    assert held_back([clean]) == {}


async def test_an_index_left_invalid_by_an_interrupted_start_is_rebuilt_at_the_next(tmp_path, pg_backend):
    """A start-up killed during ``CREATE INDEX CONCURRENTLY`` leaves the index invalid: ``IF NOT EXISTS``
    then skipped its name for good, and PostgreSQL never used it (every memory search scanned the whole
    store). The next start drops and creates it again, the bot's and LangGraph's alike."""
    settings = make_settings(tmp_path, pg_backend)
    async with open_storage(settings):
        pass
    invalid = "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE NOT i.indisvalid"
    async with await psycopg.AsyncConnection.connect(pg_backend.database_url, autocommit=True) as conn:
        for name in ("bot_inbox_thread", "store_prefix_idx"):  # as an interrupted build leaves them
            await conn.execute("UPDATE pg_index SET indisvalid = false WHERE indexrelid = %s::regclass", (name,))
        assert sorted(r[0] for r in await (await conn.execute(invalid)).fetchall()) == ["bot_inbox_thread",
                                                                                       "store_prefix_idx"]
    async with open_storage(settings):
        pass
    async with await psycopg.AsyncConnection.connect(pg_backend.database_url, autocommit=True) as conn:
        assert await (await conn.execute(invalid)).fetchall() == []
        names = {r[0] for r in await (await conn.execute("SELECT indexname FROM pg_indexes")).fetchall()}
        assert {"bot_inbox_thread", "store_prefix_idx"} <= names
