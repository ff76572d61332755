"""/purge-memories: permission-checked, confirmed, scoped to the server, audited."""

from __future__ import annotations

import logging

from tests.cogs.conftest import (
    ALICE,
    BOB,
    GENERAL,
    GUILD_ID,
    MOD,
    MOD_ROLE,
    MODLOG,
    OTHER_CHANNEL,
    OTHER_GUILD,
)
from tests.cogs.test_memories import button, click_erasure, seed
from tests.fakes import discord_harness as dh


async def test_member_without_manage_messages_is_refused(r):
    await seed(r, BOB, ["Bob likes tea"])
    res = await r.h.invoke_slash("purge-memories", user=ALICE, channel_id=GENERAL, options={"member": BOB})
    assert len(res) == 1 and res[0].ephemeral
    assert "Manage Messages" in res[0].content
    assert len(await r.engine.memories.list(str(BOB["id"]))) == 1


async def test_moderator_purge_removes_this_servers_memories_and_audits(r, caplog):
    await seed(r, BOB, ["Bob likes tea", "Bob plays chess"])
    await seed(r, BOB, ["Bob told me this in a DM"], guild="dm")
    await seed(r, BOB, ["Bob said this elsewhere"], guild=str(OTHER_GUILD))
    caplog.set_level(logging.INFO, logger="bot.audit")
    res = await r.h.invoke_slash("purge-memories", user=MOD, channel_id=GENERAL, options={"member": BOB})
    prompt = res[-1]
    assert prompt.ephemeral and "Remove the 2 memories" in prompt.content
    done = await click_erasure(r, button(prompt, "Purge"), prompt.message, user=MOD)
    assert any("Done: removed 2 memories" in (c.content or "") for c in done)
    left = sorted(m.content for m in await r.engine.memories.list(str(BOB["id"])))
    assert left == ["Bob said this elsewhere", "Bob told me this in a DM"]
    audit = [rec.getMessage() for rec in caplog.records if rec.name == "bot.audit"]
    assert len(audit) == 1
    assert f"({MOD['id']}) purged 2 memories and 0 messages of member" in audit[0] and f"({BOB['id']})" in audit[0]
    assert f"({GUILD_ID})" in audit[0]
    (logged,) = r.h.sent_messages(MODLOG)
    assert logged.content == audit[0]
    assert logged.json["allowed_mentions"]["parse"] == []


async def test_moderator_cannot_purge_where_they_lack_the_permission(r):
    await seed(r, BOB, ["Bob said this elsewhere"], guild=str(OTHER_GUILD))
    res = await r.h.invoke_slash("purge-memories", user=MOD, channel_id=OTHER_CHANNEL, options={"member": BOB})
    assert "Manage Messages" in res[0].content
    assert len(await r.engine.memories.list(str(BOB["id"]))) == 1


async def test_purge_is_not_offered_in_dms(r):
    res = await r.h.invoke_slash("purge-memories", user=MOD, channel_id=r.h.dm(MOD)["id"], options={"member": BOB})
    assert res[0].ephemeral and "only works in a server" in res[0].content


async def test_manage_messages_in_one_channel_only_is_not_enough(r):
    from tests.cogs.conftest import ALICE as MEMBER
    from tests.fakes import discord_harness as dh

    channel = dh.text_channel(4242, GUILD_ID, "helpdesk", permission_overwrites=[
        dh.overwrite(MEMBER["id"], member=True, allow=1 << 13)])  # Manage Messages here only
    r.h.feed("CHANNEL_CREATE", channel)
    await seed(r, BOB, ["bob-server-fact"])
    res = await r.h.invoke_slash("purge-memories", user=MEMBER, channel_id=4242, options={"member": BOB})
    assert res.interaction["member"]["permissions"] != "0"
    assert int(res.interaction["member"]["permissions"]) & (1 << 13)  # Discord would send it for this channel
    assert "Manage Messages" in res[0].content
    assert len(await r.engine.memories.list(str(BOB["id"]))) == 1


async def test_a_moderator_demoted_while_the_prompt_is_shown_purges_nothing(r):
    await seed(r, BOB, ["Bob likes tea"])
    res = await r.h.invoke_slash("purge-memories", user=MOD, channel_id=GENERAL, options={"member": BOB})
    prompt = res[-1]
    assert "Remove the 1 memories" in prompt.content
    # The Mods role loses Manage Messages while the prompt is on screen: Discord sends GUILD_ROLE_UPDATE.
    r.h.feed("GUILD_ROLE_UPDATE", {"guild_id": str(GUILD_ID), "role": dh.role(MOD_ROLE, "Mods", 0, position=1)})
    await r.h.settle()
    done = await click_erasure(r, button(prompt, "Purge"), prompt.message, user=MOD)
    assert any("no longer have the Manage Messages permission" in (c.content or "") for c in done)
    assert [m.content for m in await r.engine.memories.list(str(BOB["id"]))] == ["Bob likes tea"]


async def test_a_moderator_purges_only_members_below_them(r):
    """As for Discord's own member actions: not the owner, not someone of equal or higher rank; themselves,
    and members below them, yes."""
    from tests.cogs.conftest import OWNER

    peer = dh.user(811, "peer", global_name="Peer Mod")
    r.h.feed("GUILD_MEMBER_ADD", {**dh.member(peer, roles=[MOD_ROLE]), "guild_id": str(GUILD_ID)})
    for target in (OWNER, peer):
        await seed(r, target, ["something learned"])
        res = await r.h.invoke_slash("purge-memories", user=MOD, channel_id=GENERAL,
                                     options={"member": dh.member(target, roles=[MOD_ROLE] if target is peer else [])})
        assert res[-1].ephemeral and "not below yours" in res[-1].content, res[-1].content
        assert not res[-1].components  # no Purge button to press
        assert len(await r.engine.memories.list(str(target["id"]))) == 1
    res = await r.h.invoke_slash("purge-memories", user=OWNER, channel_id=GENERAL, options={"member": peer})
    assert "Remove the 1 memories" in res[-1].content  # the owner is above everyone
    await seed(r, MOD, ["the mod's own"])
    res = await r.h.invoke_slash("purge-memories", user=MOD, channel_id=GENERAL, options={"member": MOD})
    assert "Remove the 1 memories" in res[-1].content


async def test_a_member_raised_above_the_moderator_while_the_prompt_is_shown_is_not_purged(r):
    await seed(r, ALICE, ["Alice likes tea"])
    res = await r.h.invoke_slash("purge-memories", user=MOD, channel_id=GENERAL, options={"member": ALICE})
    assert "Remove the 1 memories" in res[-1].content
    admins = 907
    r.h.feed("GUILD_ROLE_CREATE", {"guild_id": str(GUILD_ID), "role": dh.role(admins, "Admins", 0, position=2)})
    alice = next(m for m in r.h.guilds[GUILD_ID]["members"] if m["user"]["id"] == ALICE["id"])
    alice["roles"] = [str(admins)]  # Discord's state now (the bot caches no members; it asks on the click)
    done = await click_erasure(r, button(res[-1], "Purge"), res[-1].message, user=MOD)
    assert any("no longer below yours" in (c.content or "") for c in done), [c.content for c in done]
    assert len(await r.engine.memories.list(str(ALICE["id"]))) == 1
