"""A real MemoryBot (real cogs, real engine, real storage: SQLite unless a test asks for another) driven through
the Discord harness."""

from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator

import discord
import pytest_asyncio

from bot.client import MemoryBot
from bot.engine.engine import create_engine
from bot.storage import open_storage
from tests.conftest import (
    SQLITE,
    Backend,
    ScriptedChatModel,
    default_script,
    make_settings,
)
from tests.fakes import discord_harness as dh

GUILD_ID, GENERAL, THREAD, LISTED, MODLOG = 900, 901, 902, 904, 905
OTHER_GUILD, OTHER_CHANNEL = 950, 951
MOD_ROLE = 903
OWNER = dh.user(800, "owner")
MOD = dh.user(801, "mod", global_name="The Mod")
ALICE = dh.user(802, "alice", global_name="Alice")
BOB = dh.user(803, "bob", global_name="Bob")
OTHER_BOT = dh.user(870, "otherbot", bot=True)

GUILD = dh.guild(
    GUILD_ID, "Test Server", owner_id=800,
    roles=[dh.role(MOD_ROLE, "Mods", discord.Permissions(manage_messages=True).value, position=1)],
    channels=[
        dh.text_channel(GENERAL, GUILD_ID, "general"),
        dh.thread(THREAD, GUILD_ID, GENERAL, "a-thread"),
        dh.text_channel(LISTED, GUILD_ID, "bot-chat"),
        dh.text_channel(MODLOG, GUILD_ID, "mod-log"),
    ],
    members=[dh.member(OWNER), dh.member(MOD, roles=[MOD_ROLE]), dh.member(ALICE), dh.member(BOB)],
)
GUILD2 = dh.guild(
    OTHER_GUILD, "Other Server", owner_id=800,
    channels=[dh.text_channel(OTHER_CHANNEL, OTHER_GUILD, "elsewhere")],
    members=[dh.member(OWNER), dh.member(ALICE), dh.member(MOD)],
)


@dataclass
class Rig:
    """Everything a Discord-level test touches."""

    h: Any
    bot: MemoryBot
    model: ScriptedChatModel
    data_dir: Path

    @property
    def engine(self):
        return self.bot.engine

    def mention(self) -> str:
        return f"<@{dh.BOT_ID}>"

    def msg(self, author: dict, content: str, channel_id: int = GENERAL, guild_id: int | None = GUILD_ID, **kw) -> dict:
        who = dh.member(author) if guild_id else author
        return dh.message(dh.snowflake(), channel_id, who, content, guild_id=guild_id, **kw)

    def mentioning(self, author: dict, content: str, channel_id: int = GENERAL, guild_id: int | None = GUILD_ID, **kw) -> dict:
        return self.msg(author, f"{self.mention()} {content}", channel_id, guild_id,
                        mentions=[self.h.bot_user], **kw)


@asynccontextmanager
async def rig(
    tmp_path: Path, chat_model: ScriptedChatModel | None = None, backend: Backend = SQLITE, *,
    guilds: tuple = (GUILD, GUILD2), **sections: dict
) -> AsyncIterator[Rig]:
    sections.setdefault("model", {}).setdefault("streaming", False)
    sections.setdefault("limits", {}).setdefault("burst", 0)  # tests send messages back to back
    sections.setdefault("discord", {}).setdefault("gather_seconds", 0)  # and expect each answered at once
    discord_cfg = sections.setdefault("discord", {})
    discord_cfg.setdefault("respond_channels", [LISTED])
    discord_cfg.setdefault("mod_log_channel_id", MODLOG)
    settings = make_settings(tmp_path / "data", backend, **sections)
    model = chat_model or ScriptedChatModel(default_script)
    async with open_storage(settings) as storage:
        engine = create_engine(settings, storage, chat_model=model)
        bot = MemoryBot(settings=settings, engine=engine, storage=storage)
        h = await dh.start(bot, guilds=list(guilds))
        chat = bot.get_cog("Chat")
        # A turn whose model call runs in a worker thread looks parked to settle(): ask the cog instead.
        h.idle_check = lambda: chat.idle() and engine.idle()
        try:
            yield Rig(h=h, bot=bot, model=model, data_dir=settings.bot.data_dir)
        finally:
            await engine.close()
            await h.close()
    assert not h.errors, [r.getMessage() for r in h.errors]


@pytest_asyncio.fixture
async def r(tmp_path) -> AsyncIterator[Rig]:
    async with rig(tmp_path) as value:
        yield value
