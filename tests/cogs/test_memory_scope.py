"""Server scope through real interactions: what Alice said in one server stays out of the others until
she chooses otherwise, and a memory with any DM source stays out of servers."""

from __future__ import annotations

from tests.cogs.conftest import ALICE, GENERAL, GUILD_ID, OTHER_CHANNEL, OTHER_GUILD
from tests.cogs.test_memories import seed


async def test_server_memories_stay_in_their_server_until_the_person_chooses_every_server(r):
    await seed(r, ALICE, ["alice-first-server-fact"])
    await seed(r, ALICE, ["alice-other-server-fact"], guild=str(OTHER_GUILD))
    await r.h.send_message(r.mentioning(ALICE, "hi", channel_id=OTHER_CHANNEL, guild_id=OTHER_GUILD))
    system = r.model.chat_calls[-1].system
    assert "alice-other-server-fact" in system and "alice-first-server-fact" not in system
    view = await r.h.invoke_slash("memories view", user=ALICE, channel_id=GENERAL)
    assert "**Server memories:** each server its own" in view[-1].embeds[0]["description"]
    res = await r.h.invoke_slash("memories scope", user=ALICE, channel_id=GENERAL, options={"where": "global"})
    assert res[-1].ephemeral and "every server" in res[-1].content
    await r.h.send_message(r.mentioning(ALICE, "hi again", channel_id=OTHER_CHANNEL, guild_id=OTHER_GUILD))
    assert "alice-first-server-fact" in r.model.chat_calls[-1].system


async def test_a_memory_with_any_dm_source_stays_out_of_servers(r):
    key = (await seed(r, ALICE, ["alice-mixed-fact"]))[0]
    dm = {"guild_id": "dm", "channel_id": "1", "message_id": "555", "source": "extraction"}
    await r.engine.memories.apply(str(ALICE["id"]), updates=[(key, "alice-mixed-fact, told in a DM too", dm)])
    await r.h.send_message(r.mentioning(ALICE, "hello"))
    assert "alice-mixed-fact" not in r.model.chat_calls[-1].system
    await r.h.send_message(r.msg(ALICE, "hello", channel_id=r.h.dm(ALICE)["id"], guild_id=None))
    assert "alice-mixed-fact" in r.model.chat_calls[-1].system
    assert str(GUILD_ID) in {s["guild_id"] for s in (await r.engine.memories.get(str(ALICE["id"]), key)).sources}
