"""Servers that removed the bot while it was offline (``erasure/departures.py``): noticed at READY, swept later."""

from __future__ import annotations

import time

from bot.engine.erasure.departures import absent_at_ready
from tests.cogs.conftest import ALICE, rig
from tests.cogs.test_memories import seed


async def test_only_this_processs_servers_missing_from_ready_are_marked():
    marked: list[str] = []
    back: list[str] = []

    async def removed(g: str) -> None:
        marked.append(g)

    async def returned(g: str) -> None:
        back.append(g)

    gone = await absent_at_ready(lambda: ["1", "2"], {"1", "3", "4"}, mine=lambda g: g != "4", removed=removed,
                                 back=returned)
    assert gone == marked == ["3"]  # "4" belongs to another process's shards: its READY judges it
    assert sorted(back) == ["1", "2"]


async def test_a_server_gone_during_a_restart_is_swept_after_the_retention_and_nothing_else(tmp_path):
    async with rig(tmp_path) as r:
        await seed(r, ALICE, ["Alice said this in a server that removed the bot"], guild="999")
        await seed(r, ALICE, ["Alice likes tea"])
    async with rig(tmp_path) as r:  # the restart: server 999 is not in READY
        await r.h.settle()
        assert await r.engine.storage.removed_guilds.due(time.time() + 1) == ["999"]
        assert await r.engine.changes.sweep_removed_servers(now=time.time() + 3600) == []  # not yet
        swept = await r.engine.changes.sweep_removed_servers(now=time.time() + 8 * 86400)
        assert swept == ["999"]
        assert [m.content for m in await r.engine.list_memories(ALICE["id"])] == ["Alice likes tea"]
        assert r.engine.metrics.registry.get_sample_value("mnemo_erasures_total", {"scope": "removed_server"}) == 1
    async with rig(tmp_path) as r:  # and the next READY finds nothing more to mark
        await r.h.settle()
        assert await r.engine.storage.removed_guilds.due(time.time() + 1) == []


async def test_a_server_id_an_older_import_stored_unchecked_does_not_stop_the_sweep(tmp_path):
    """Imports did not check IDs: a source naming server "x" (or "²") made the READY sweep fail at int() for
    every server, so no server that removed the bot while it was offline was ever marked."""
    async with rig(tmp_path) as r:
        await seed(r, ALICE, ["Alice said this in a server that removed the bot"], guild="999")
        await seed(r, ALICE, ["an unchecked import"], guild="x")
        await seed(r, ALICE, ["another unchecked import"], guild="\u00b2")
    async with rig(tmp_path) as r:
        await r.h.settle()
        assert await r.engine.storage.removed_guilds.due(time.time() + 1) == ["999"]


async def test_a_server_that_adds_the_bot_back_during_a_sweep_keeps_its_data(tmp_path):
    """The sweep reads the servers due once, then erases them one by one (each can take a while): one that
    adds the bot back meanwhile is no longer due, and what was learned there stays."""
    async with rig(tmp_path) as r:
        await seed(r, ALICE, ["Alice said this in server 997"], guild="997")
        await seed(r, ALICE, ["Alice said this in server 998"], guild="998")
        removed = r.engine.storage.removed_guilds
        await removed.mark("997", time.time() - 60)
        await removed.mark("998", time.time() - 30)
        real = r.engine.eraser.erase_guild

        async def erase_then_998_comes_back(guild_id: str, **kw) -> int | None:
            erased = await real(guild_id, **kw)
            await r.engine.changes.server_back("998")  # GUILD_CREATE for 998 while 997 was being erased
            return erased

        r.engine.eraser.erase_guild = erase_then_998_comes_back
        swept = await r.engine.changes.sweep_removed_servers(now=time.time() + 8 * 86400)
        assert swept == ["997"]
        assert [m.content for m in await r.engine.list_memories(ALICE["id"])] == ["Alice said this in server 998"]


async def test_a_server_that_adds_the_bot_back_while_its_erasure_waits_for_the_lock_keeps_everything(tmp_path):
    """Erasures run one at a time (across processes too): while the sweep waits its turn, the server adds the
    bot back. It is asked again once the lock is held, so its memories and its settings stay."""
    from contextlib import asynccontextmanager

    from bot.engine.policy.server_settings import set_field

    async with rig(tmp_path) as r:
        await seed(r, ALICE, ["Alice said this in server 996"], guild="996")
        await r.engine.change_settings("996", set_field("persona", "a pirate_canary_996"), by="1")
        await r.engine.storage.removed_guilds.mark("996", time.time() - 60)
        real = r.engine.eraser._exclusive

        @asynccontextmanager
        async def back_while_waiting():
            await r.engine.changes.server_back("996")  # GUILD_CREATE while another erasure held the lock
            async with real():
                yield

        r.engine.eraser._exclusive = back_while_waiting
        assert await r.engine.changes.sweep_removed_servers(now=time.time() + 8 * 86400) == []
        assert [m.content for m in await r.engine.list_memories(ALICE["id"])] == ["Alice said this in server 996"]
        assert (await r.engine.guild_policy("996")).persona_addition == "a pirate_canary_996"
        assert await r.engine.storage.removed_guilds.due(time.time() + 8 * 86400) == []


async def test_two_sweeps_at_once_erase_a_removed_server_once(tmp_path):
    """Found in review 2026-12-07: the server was marked done after the erasure lock was released, so a
    second sweep waiting for the lock found it still due and erased it again (a second full compaction)."""
    import asyncio

    async with rig(tmp_path) as r:
        await seed(r, ALICE, ["Alice said this in a server that removed the bot"], guild="999")
        await r.engine.storage.removed_guilds.mark("999", time.time() - 9 * 86400)
        runs: list[str] = []
        steps = r.engine.eraser.steps
        real = steps.guild

        async def counted(guild_id: str) -> int:
            runs.append(guild_id)
            return await real(guild_id)

        steps.guild = counted
        later = time.time() + 8 * 86400
        first, second = await asyncio.gather(r.engine.changes.sweep_removed_servers(now=later),
                                             r.engine.changes.sweep_removed_servers(now=later))
        assert runs == ["999"] and sorted(first + second) == ["999"]


async def test_a_server_sweep_cut_short_and_run_again_from_the_journal_is_marked_swept(tmp_path):
    """Found in review 2026-12-07: the journal's re-run of a server's erasure (after a crash) left the server
    marked removed, so the next sweep erased it all again, with a second full compaction."""
    async with rig(tmp_path) as r:
        await seed(r, ALICE, ["Alice said this in a server that removed the bot"], guild="999")
        await r.engine.storage.removed_guilds.mark("999", time.time() - 9 * 86400)
        await r.engine.storage.erasures.begin(kind="guild", user_id="", guild_id="999")  # the crash left it
        await r.engine.eraser.resume()
        assert await r.engine.storage.removed_guilds.due(time.time() + 30 * 86400) == []
        assert await r.engine.list_memories(ALICE["id"]) == []


async def test_no_removed_server_is_swept_before_this_processs_ready_was_judged(tmp_path, monkeypatch):
    """Found in review 2026-12-07 (fourteenth session): the sweep ran at start, before READY. A server that
    added the bot back while it was offline (no GUILD_CREATE reaches an offline bot) was still marked, and
    its data went a few seconds before READY would have taken the mark off."""
    import asyncio

    from bot.engine.erasure.events import DiscordChanges
    from tests.conftest import ScriptedChatModel, default_script, make_settings, running_engine

    calls: list[int] = []
    real = DiscordChanges.sweep_removed_servers

    async def counted(self, **kw):
        calls.append(1)
        return await real(self, **kw)

    monkeypatch.setattr(DiscordChanges, "sweep_removed_servers", counted)
    async with running_engine(make_settings(tmp_path / "data"), ScriptedChatModel(default_script)) as engine:
        await engine.storage.removed_guilds.mark("999", time.time() - 9 * 86400)
        for _ in range(20):
            await asyncio.sleep(0)
        assert calls == []  # started, and waiting for READY
        assert await engine.servers_at_ready(lambda: ["999"]) == []  # READY lists it: it came back
        for _ in range(100):
            if calls:
                break
            await asyncio.sleep(0.05)
        assert calls == [1] and await engine.storage.removed_guilds.due(time.time()) == []


async def test_a_server_that_comes_back_or_leaves_during_the_ready_scan_is_judged_by_what_is_true_after_it(tmp_path):
    """Found in review 2026-12-07 (fourteenth session): the servers present were read at READY, before a scan
    of every stored conversation and memory; one that added the bot back meanwhile was marked removed."""
    from bot.engine.erasure import verbs

    async with rig(tmp_path) as r:
        await seed(r, ALICE, ["Alice said this in server 995"], guild="995")
        await seed(r, ALICE, ["Alice said this in server 994"], guild="994")
        present = {"995", "994"}
        real = verbs.servers_with_data

        async def slow_scan(*args):
            found = await real(*args)
            present.discard("994")  # 994 removes the bot during the scan: its GUILD_DELETE marks it
            await r.engine.server_removed("994")
            present.add("993")  # and 993 adds it back
            return found | {"993"}

        verbs.servers_with_data = slow_scan
        try:
            assert await r.engine.servers_at_ready(lambda: set(present)) == ["994"]  # 993 is not marked
        finally:
            verbs.servers_with_data = real
        assert await r.engine.storage.removed_guilds.due(time.time() + 1) == ["994"]  # the live removal stands


async def test_memories_imported_from_another_bots_server_are_not_swept_as_a_removed_server(tmp_path):
    """Found in review 2026-12-07 (fourteenth session): an import's sources name servers this bot was never in
    (an export from another bot); the check at READY took one for a server that removed the bot while it
    was offline, and a week later the sweep erased the imported memories."""
    import json

    from tests.cogs.test_memory_controls import import_file

    foreign = "123456789012345678"
    doc = {"format": "remembering-bot.memories", "version": 2, "user_id": str(ALICE["id"]), "exported_at": "x",
           "history": [], "memories": [{
               "id": "a1", "content": "Alice grows chillies", "origin": {"guild_id": foreign, "source": "extraction"},
               "sources": [{"guild_id": foreign, "at": "2025-01-01T00:00:00+00:00"}],
               "created_at": "2025-01-01T00:00:00+00:00", "updated_at": "2025-01-01T00:00:00+00:00"}]}
    async with rig(tmp_path) as r:
        await import_file(r, ALICE, json.dumps(doc).encode())
        assert [m.content for m in await r.engine.list_memories(ALICE["id"])] == ["Alice grows chillies"]
    async with rig(tmp_path) as r:  # the restart: READY does not list the foreign server
        await r.h.settle()
        assert await r.engine.storage.removed_guilds.due(time.time() + 1) == []
        assert await r.engine.changes.sweep_removed_servers(now=time.time() + 8 * 86400) == []
        assert [m.content for m in await r.engine.list_memories(ALICE["id"])] == ["Alice grows chillies"]


async def test_an_interrupted_server_sweep_is_not_finished_once_the_server_added_the_bot_back(tmp_path):
    """Found in review 2026-12-07 (fourteenth session): the journal's re-run of a server's erasure did not ask
    whether the server was still removed; added back meanwhile, it lost what was said there since."""
    async with rig(tmp_path) as r:
        await seed(r, ALICE, ["Alice said this in server 999 after it added the bot back"], guild="999")
        await r.engine.storage.removed_guilds.mark("999", time.time() - 9 * 86400)
        await r.engine.storage.erasures.begin(kind="guild", user_id="", guild_id="999")  # a crash left it
        await r.engine.server_back("999")
        await r.engine.eraser.resume()
        assert await r.engine.storage.erasures.unfinished() == []
        assert [m.content for m in await r.engine.list_memories(ALICE["id"])] == [
            "Alice said this in server 999 after it added the bot back"]


async def test_a_ready_check_the_database_failed_is_tried_again_until_sweeps_may_run(tmp_path, monkeypatch):
    """Found in review of this session's change: one failed READY check (the database away as the bot
    connects) left sweeps waiting for the next READY, which a resumed session may not see for weeks."""
    from bot import client
    from bot.engine.engine import ChatEngine

    monkeypatch.setattr(client, "READY_RETRY_FIRST", 0.05)
    real, failures = ChatEngine.servers_at_ready, [ConnectionError("the database is away")]

    async def flaky(self, *args, **kwargs):
        if failures:
            raise failures.pop()
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(ChatEngine, "servers_at_ready", flaky)
    async with rig(tmp_path) as r:
        await r.h.settle()
        assert not failures and r.engine.changes.judged.is_set()
