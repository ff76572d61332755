"""Helpers for the PostgreSQL server-settings tests: the real PostgreSQL backend, opened like a bot process
opens it. Run as a module it is one of the "processes" of the two-process test.
"""

from __future__ import annotations

import asyncio
import sys
from contextlib import asynccontextmanager
from pathlib import Path

from bot.engine.policy.server_settings import GuildSettingsService, OperatorDefaults, channel_listed
from bot.storage import open_storage
from tests.conftest import Backend, make_settings


@asynccontextmanager
async def opened(database_url: str, data_dir: Path):
    """The settings store of an opened PostgreSQL backend (migrated, its LISTEN connection started)."""
    settings = make_settings(data_dir, Backend("postgres", database_url))
    async with open_storage(settings) as storage:
        yield storage.guild_settings


async def _worker(database_url: str, name: str, count: int, data_dir: Path) -> None:
    """Add ``count`` channels to server 900, as admin ``name``, as fast as possible."""
    async with opened(database_url, data_dir) as store:
        service = GuildSettingsService(store, OperatorDefaults())
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        await asyncio.to_thread(sys.stdin.readline)  # start together
        for n in range(count):
            await service.change("900", channel_listed("respond_channels", f"{name}{n}", True), by=name)
    sys.stdout.write("done\n")


if __name__ == "__main__":
    asyncio.run(_worker(sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])))
