"""bot/client.py: slash commands are pushed only when they change, and every extension loads."""

from __future__ import annotations

from tests.cogs.conftest import rig

PUT_GLOBAL = "/applications/{application_id}/commands"


async def test_commands_sync_once_then_only_when_they_change(tmp_path):
    async with rig(tmp_path) as r:
        (first,) = r.h.calls_to("PUT", PUT_GLOBAL)
        names = sorted(c["name"] for c in first.json)
        assert names == ["Ask about this", "Forget this", "Purge memories", "Remember this", "memories", "purge-memories", "settings"]
        assert {e for e in r.bot.extensions} == {"cogs.errors", "cogs.chat", "cogs.message_events", "cogs.memories",
                                                  "cogs.memory_signal", "cogs.moderation", "cogs.settings",
                                                  "cogs.context_menus"}
    async with rig(tmp_path) as r:  # same data dir, same commands: nothing pushed
        assert r.h.calls_to("PUT", PUT_GLOBAL) == []
    fingerprints = tmp_path / "data" / "commands.sha256"
    app, kind, digest = fingerprints.read_text().split(":")
    assert app == str(r.bot.application_id) and kind == "global"
    fingerprints.write_text(f"{int(app) + 1}:global:{digest}")  # the same commands, another application's
    async with rig(tmp_path) as r:  # a new token on the same data: the new application gets the commands
        assert len(r.h.calls_to("PUT", PUT_GLOBAL)) == 1
    fingerprints.write_text(f"{app}:global:stale")
    async with rig(tmp_path) as r:  # a changed fingerprint: pushed again
        assert len(r.h.calls_to("PUT", PUT_GLOBAL)) == 1


async def test_a_dev_guild_gets_the_commands_at_once(tmp_path):
    async with rig(tmp_path, discord={"dev_guild_id": 900}) as r:
        (guild_put,) = r.h.calls_to("PUT", "/applications/{application_id}/guilds/{guild_id}/commands")
        assert guild_put.params["guild_id"] == "900"
        assert sorted(c["name"] for c in guild_put.json) == ["Ask about this", "Forget this", "Purge memories", "Remember this", "memories",
                                                            "purge-memories", "settings"]


async def test_a_failed_first_gateway_connection_is_tried_again_until_it_holds():
    """discord.py's own retry after a first connection that never opened reads ``ws.sequence`` of no
    connection (AttributeError, the process died with a traceback); ``connect`` tries again instead, and
    lets a failure after a connection once held, or a closed bot, end it as before."""
    import discord

    from bot.client import connect

    class FirstTimes:
        def __init__(self, failures: int) -> None:
            self.failures, self.calls, self.ws, self.closed = failures, 0, None, False

        def is_closed(self) -> bool:
            return self.closed

        async def connect(self) -> None:
            self.calls += 1
            if self.calls <= self.failures:
                try:
                    raise OSError(111, "Connect call failed")
                except OSError:
                    None.sequence  # noqa: B018 - what discord.py 2.7's retry does with no connection
            self.ws = object()

    bot = FirstTimes(failures=2)
    await connect(bot, first_delay=0.001)
    assert bot.calls == 3 and bot.ws is not None

    class Dropped(FirstTimes):
        async def connect(self) -> None:
            self.ws = object()  # it was connected once: discord.py's errors are its own to report
            raise discord.ConnectionClosed(None, shard_id=None, code=4000)

    class Refused(FirstTimes):
        async def connect(self) -> None:  # as discord.py does for 4004 (a reset token), 4011 (shard!): closes
            self.closed = True  # the client first, then raises; ending quietly was an exit 0 with no word
            raise discord.ConnectionClosed(None, shard_id=None, code=4011)

    import pytest

    with pytest.raises(discord.ConnectionClosed):
        await connect(Dropped(0), first_delay=0.001)
    with pytest.raises(discord.ConnectionClosed):
        await connect(Refused(0), first_delay=0.001)

    class Stopped(FirstTimes):  # stopped (SIGTERM) during the wait between attempts: it ends at once
        async def connect(self) -> None:
            self.calls += 1
            asyncio.get_running_loop().call_later(0.2, setattr, self, "closed", True)
            raise OSError(111, "Connect call failed")

    import asyncio

    stopped = Stopped(0)
    await asyncio.wait_for(connect(stopped, first_delay=3600.0), 60)  # not an hour's wait (a hang guard)
    assert stopped.calls == 1


async def test_a_fingerprint_file_that_cannot_be_read_or_written_does_not_stop_start_up(tmp_path, caplog):
    """It runs inside discord.py's login: an OSError from it ended start-up as "cannot reach Discord"."""
    (tmp_path / "data" / "commands.sha256").mkdir(parents=True)  # neither readable nor writable as a file
    async with rig(tmp_path) as r:
        assert len(r.h.calls_to("PUT", PUT_GLOBAL)) == 1  # synced, as if it never had
    said = [rec.getMessage() for rec in caplog.records if rec.levelname == "WARNING"]
    assert any("cannot read" in s for s in said) and any("synced again at the next start" in s for s in said)
