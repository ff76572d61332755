"""User installs: /memories and the message menus as a user-installed app, in a server without the bot
(interaction context 0, a guild_id but no bot member, authorizing_integration_owners {"1": user}), in the
bot's DM (context 1) and in a DM between people (context 2); server tools refused there."""

from __future__ import annotations

import json

from tests.cogs.conftest import ALICE, BOB, GENERAL, GUILD_ID, MOD
from tests.cogs.test_context_menus import final
from tests.cogs.test_memories import seed
from tests.fakes import discord_harness as dh
from cogs._memory_format import jump_url

ELSEWHERE, ELSEWHERE_CHANNEL = 7700, 7701  # a server the bot is not in
PEOPLE_DM = 7702  # a DM between Alice and Bob


def elsewhere(author: dict, content: str) -> dict:
    """A message in the server without the bot, as Discord puts it into ``data.resolved.messages``."""
    return dh.message(dh.snowflake(), ELSEWHERE_CHANNEL, dh.member(author), content, guild_id=ELSEWHERE)


def user_install(who: dict) -> dict:
    return {"1": who["id"]}


def foreign(**kw) -> dict:
    """Arguments for an interaction in the server without the bot (Discord's partial channel object)."""
    return dict(channel=dh.text_channel(ELSEWHERE_CHANNEL, ELSEWHERE, "their-general"), context=0, **kw)


def people_dm(**kw) -> dict:
    return dict(channel=dh.dm_channel(PEOPLE_DM, BOB), context=2, **kw)


async def test_memories_and_the_message_menus_are_user_installable_and_server_tools_are_not(r):
    tree = r.bot.tree
    memories = tree.get_command("memories").to_dict(tree)
    assert sorted(memories["integration_types"]) == [0, 1] and sorted(memories["contexts"]) == [0, 1, 2]
    for name in ("purge-memories", "settings"):
        assert tree.get_command(name).to_dict(tree)["integration_types"] == [0], name


async def test_remember_in_a_server_without_the_bot_is_kept_like_a_dm_and_says_chatting_needs_the_bot(r):
    res = await r.h.invoke_slash("memories remember", user=ALICE, channel_id=ELSEWHERE_CHANNEL,
                                 options={"text": "I keep bees"}, **foreign(integration_owners=user_install(ALICE)))
    assert res.interaction["guild_id"] == str(ELSEWHERE) and "0" not in res.interaction["authorizing_integration_owners"]
    answer = final(res)
    assert answer.ephemeral and "I'll remember that" in answer.content
    assert "not a member of this server" in answer.content and "can't chat here" in answer.content
    (memory,) = await r.engine.list_memories(ALICE["id"])
    assert memory.origin["guild_id"] == "dm" and memory.origin["channel_id"] == str(ELSEWHERE_CHANNEL)
    # Used where DM memories are: the bot's DMs, not a server (share-dm is off by default).
    await r.h.send_message(r.mentioning(ALICE, "hi"))
    assert "I keep bees" not in r.model.chat_calls[-1].system
    await r.h.send_message(r.msg(ALICE, "hi", channel_id=r.h.dm(ALICE)["id"], guild_id=None))
    assert "I keep bees" in r.model.chat_calls[-1].system


async def test_view_and_export_work_in_a_server_without_the_bot(r):
    await seed(r, ALICE, ["Alice rides a bike"])
    res = await r.h.invoke_slash("memories view", user=ALICE, channel_id=ELSEWHERE_CHANNEL,
                                 **foreign(integration_owners=user_install(ALICE)))
    (page,) = [c for c in res if c.embeds]
    assert page.ephemeral and "Alice rides a bike" in json.dumps(page.embeds)
    res = await r.h.invoke_slash("memories export", user=ALICE, channel_id=ELSEWHERE_CHANNEL,
                                 **foreign(integration_owners=user_install(ALICE)))
    (upload,) = [c for c in res if c.files]
    assert upload.ephemeral and b"Alice rides a bike" in upload.files[0].data


async def test_remember_this_on_ones_own_message_in_a_server_without_the_bot(r):
    mine = elsewhere(ALICE, "I speak Welsh")
    res = await r.h.invoke_context_menu("Remember this", mine, user=ALICE, channel_id=ELSEWHERE_CHANNEL,
                                        **foreign(integration_owners=user_install(ALICE)))
    assert res[0].callback_type == 5 and "I'll remember that" in final(res).content
    (memory,) = await r.engine.list_memories(ALICE["id"])
    assert memory.origin == {"guild_id": "dm", "channel_id": str(ELSEWHERE_CHANNEL), "message_id": mine["id"],
                             "source": "user", "link_guild_id": str(ELSEWHERE)}
    # kept as a DM memory, but linked where the message is (an @me link to a server channel opens nothing)
    assert jump_url(memory.origin) == f"https://discord.com/channels/{ELSEWHERE}/{ELSEWHERE_CHANNEL}/{mine['id']}"
    theirs = elsewhere(BOB, "Alice speaks Welsh badly")
    res = await r.h.invoke_context_menu("Remember this", theirs, user=ALICE, channel_id=ELSEWHERE_CHANNEL,
                                        **foreign(integration_owners=user_install(ALICE)))
    assert "only works on your own messages" in res[0].content
    assert len(await r.engine.list_memories(ALICE["id"])) == 1


async def test_server_tools_are_refused_as_a_user_install_with_a_clear_answer(r):
    await seed(r, BOB, ["Bob likes tea"])
    for command, options in (("purge-memories", {"member": BOB}), ("settings show", None)):
        res = await r.h.invoke_slash(command, user=MOD, channel_id=ELSEWHERE_CHANNEL, options=options,
                                     permissions=(1 << 13) | (1 << 5),
                                     **foreign(integration_owners=user_install(MOD)))
        assert len(res) == 1 and res[0].ephemeral, command
        assert "doesn't work as a user-installed app" in res[0].content and "can't chat here" in res[0].content
    res = await r.h.invoke_context_menu("Purge memories", BOB, user=MOD, channel_id=ELSEWHERE_CHANNEL,
                                        permissions=1 << 13, **foreign(integration_owners=user_install(MOD)))
    assert "doesn't work as a user-installed app" in res[0].content
    # In a server the bot is in, reached through the moderator's user install only: refused as well.
    res = await r.h.invoke_slash("purge-memories", user=MOD, channel_id=GENERAL, options={"member": BOB},
                                 integration_owners=user_install(MOD))
    assert "doesn't work as a user-installed app" in res[0].content
    assert len(await r.engine.list_memories(BOB["id"])) == 1


async def test_in_the_bots_dm_and_in_a_dm_between_people_memories_are_dm_memories(r):
    res = await r.h.invoke_slash("memories remember", user=ALICE, channel_id=r.h.dm(ALICE)["id"],
                                 options={"text": "I like figs"}, context=1, integration_owners=user_install(ALICE))
    assert res.interaction["context"] == 1 and "not a member" not in final(res).content
    mine = dh.message(dh.snowflake(), PEOPLE_DM, ALICE, "I like dates")
    res = await r.h.invoke_context_menu("Remember this", mine, user=ALICE, channel_id=PEOPLE_DM,
                                        **people_dm(integration_owners=user_install(ALICE)))
    assert res.interaction["context"] == 2 and "guild_id" not in res.interaction
    assert "I'll remember that" in final(res).content
    places = {m.content: (m.origin["guild_id"], m.origin["message_id"]) for m in await r.engine.list_memories(ALICE["id"])}
    assert places == {"I like figs": ("dm", ""), "I like dates": ("dm", mine["id"])}
    res = await r.h.invoke_slash("purge-memories", user=ALICE, channel_id=PEOPLE_DM, options={"member": BOB},
                                 **people_dm(integration_owners=user_install(ALICE)))
    assert "only works in a server" in res[0].content


async def test_remember_in_a_server_with_the_bot_stays_that_servers(r):
    res = await r.h.invoke_slash("memories remember", user=ALICE, channel_id=GENERAL, options={"text": "I like plums"},
                                 integration_owners={"0": str(GUILD_ID), "1": ALICE["id"]})
    assert "not a member" not in final(res).content
    (memory,) = await r.engine.list_memories(ALICE["id"])
    assert memory.origin["guild_id"] == str(GUILD_ID)


async def test_ask_about_this_in_a_server_without_the_bot_counts_as_a_dm_for_the_operators_switch(tmp_path):
    """From a person's own install in a server the bot is not in, no server's settings apply and nothing of
    that server reaches the bot: "Ask about this" there is a DM's, so ``dms_enabled = false`` refuses it,
    and with DMs on it is answered."""
    from tests.cogs.conftest import rig

    theirs = elsewhere(BOB, "the meeting moved to Thursday")
    for enabled in (False, True):
        async with rig(tmp_path / str(enabled), access={"dms_enabled": enabled}) as r:
            res = await r.h.invoke_context_menu("Ask about this", theirs, user=ALICE, channel_id=ELSEWHERE_CHANNEL,
                                                **foreign(integration_owners=user_install(ALICE)))
            answer = final(res)
            assert answer.ephemeral
            assert (len(r.model.chat_calls) == 1) is enabled, answer.content


async def test_remember_this_outside_the_bots_servers_does_not_call_channels_deleted(r):
    """In a server the bot is not in, discord.py resolves no channel or role and names each
    "#deleted-channel" / "@deleted-role"; what is remembered names them neutrally instead."""
    mine = elsewhere(ALICE, "I moderate <#555000000000000555> and main <@&777000000000000778>")
    res = await r.h.invoke_context_menu("Remember this", mine, user=ALICE, channel_id=ELSEWHERE_CHANNEL,
                                        **foreign(integration_owners=user_install(ALICE)))
    assert "I'll remember that" in final(res).content
    (memory,) = await r.engine.list_memories(ALICE["id"])
    assert memory.content == "I moderate #(a channel) and main @(a role)"
