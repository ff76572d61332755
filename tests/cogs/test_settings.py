"""/settings through real interactions: permission-checked on every use and click, confirmed, audited, applied."""

from __future__ import annotations

import asyncio
import logging

import discord

from tests.cogs.conftest import (
    ALICE,
    BOB,
    GENERAL,
    GUILD,
    GUILD_ID,
    LISTED,
    MOD,
    MOD_ROLE,
    MODLOG,
    OTHER_CHANNEL,
    OTHER_GUILD,
    OWNER,
    THREAD,
    rig,
)
from tests.cogs.test_memories import button, click_erasure
from tests.fakes import discord_harness as dh

MANAGE_SERVER = discord.Permissions(manage_guild=True, manage_messages=True).value
SECRET_THREAD, CLOSED_CHANNEL = 960, 961


def channel(id: int, guild_id: int = GUILD_ID, name: str = "c") -> dict:
    return dh.text_channel(id, guild_id, name)


async def settings(r, command: str, user: dict = OWNER, **options):
    return await r.h.invoke_slash(f"settings {command}", user=user, channel_id=GENERAL, options=options or None)


async def apply(r, command: str, user: dict = OWNER, clicker: dict | None = None, **options):
    """Run a change and press Apply; return (prompt, responses to the click)."""
    res = await settings(r, command, user, **options)
    prompt = res[-1]
    assert prompt.ephemeral
    done = await r.h.click(button(prompt, "Apply"), prompt.message, user=clicker or user)
    return prompt, done


def grant_manage_server(r, on: bool) -> None:
    """Edit the Mods role like an admin would: Discord sends GUILD_ROLE_UPDATE."""
    perms = MANAGE_SERVER if on else discord.Permissions(manage_messages=True).value
    r.h.feed("GUILD_ROLE_UPDATE", {"guild_id": str(GUILD_ID), "role": dh.role(MOD_ROLE, "Mods", perms, position=1)})


async def test_the_group_is_hidden_from_members_without_manage_server(r):
    payload = r.bot.tree.get_command("settings").to_dict(r.bot.tree)
    assert int(payload["default_member_permissions"]) == discord.Permissions(manage_guild=True).value
    assert payload["contexts"] == [0]  # guild only
    names = {c["name"] for c in payload["options"]}
    assert {"show", "answer-all", "mentions", "instructions", "learning", "memories", "budget",
            "member-budget", "mod-log", "reset"} <= names


async def test_a_member_without_the_permission_bypassing_the_client_is_refused(r):
    res = await settings(r, "learning", ALICE, on=False)
    assert len(res) == 1 and res[0].ephemeral and "Manage Server" in res[0].content
    assert (await r.engine.guild_policy(GUILD_ID)).learning is True
    res = await settings(r, "show", MOD)  # Manage Messages is not Manage Server
    assert res[0].ephemeral and "Manage Server" in res[0].content


async def test_not_in_dms(r):
    res = await r.h.invoke_slash("settings show", user=OWNER, channel_id=r.h.dm(OWNER)["id"])
    assert res[0].ephemeral and "only works in a server" in res[0].content


async def test_show_says_where_each_setting_comes_from(r):
    res = await settings(r, "show")
    (embed,) = res[-1].embeds
    assert res[-1].ephemeral
    fields = {f["name"]: f["value"] for f in embed["fields"]}
    assert fields["Answers every message in"] == f"<#{LISTED}> *(operator default)*"
    assert fields["Learns from conversations"] == "on *(operator default)*"
    assert fields["Mod-log channel"] == f"<#{MODLOG}> *(operator default)*"
    assert "2,000,000 tokens a day" in fields["Daily token budget"]
    await apply(r, "learning", on=False)
    fields = {f["name"]: f["value"] for f in (await settings(r, "show"))[-1].embeds[0]["fields"]}
    assert fields["Learns from conversations"] == "off *(set here)*"


async def test_answer_all_in_a_channel_applies_at_once_and_is_audited(r, caplog):
    caplog.set_level(logging.INFO, logger="bot.audit")
    assert await r.h.send_message(r.msg(ALICE, "anyone there?")) == []  # general: mentions only
    prompt, done = await apply(r, "answer-all", channel=channel(GENERAL, name="general"), on=True)
    assert f"<#{GENERAL}>" in prompt.content
    assert "Done: answer every message in" in done[-1].content
    assert done[-1].message["flags"] & dh.EPHEMERAL  # the confirmation prompt, edited: only the admin sees it
    sent = await r.h.send_message(r.msg(ALICE, "anyone there now?"))
    assert any("anyone there now?" in (c.content or "") for c in sent)  # no restart needed
    # The operator's listed channel stays listed: the server's list started from it.
    assert (await r.engine.guild_policy(GUILD_ID)).respond_channels == {str(GENERAL), str(LISTED)}
    audit = [rec.getMessage() for rec in caplog.records if rec.name == "bot.audit"]
    assert len(audit) == 1 and f"({OWNER['id']}) changed answer every message in <#{GENERAL}>: on" in audit[0]
    (logged,) = r.h.sent_messages(MODLOG)
    assert logged.content == audit[0] and logged.json["allowed_mentions"]["parse"] == []
    await apply(r, "answer-all", channel=channel(GENERAL, name="general"), on=False)
    assert await r.h.send_message(r.msg(ALICE, "and now?")) == []


async def test_mentions_off_in_a_channel(r):
    await apply(r, "mentions", channel=dh.thread(THREAD, GUILD_ID, GENERAL, "a-thread"), on=False)
    assert await r.h.send_message(r.mentioning(ALICE, "hello?", channel_id=THREAD)) == []
    assert await r.h.send_message(r.mentioning(ALICE, "hello?", channel_id=GENERAL)) != []
    await apply(r, "mentions", channel=dh.thread(THREAD, GUILD_ID, GENERAL, "a-thread"), on=True)
    assert await r.h.send_message(r.mentioning(ALICE, "hello again?", channel_id=THREAD)) != []


async def test_a_thread_cannot_be_excepted_from_what_its_parent_channel_does_and_is_told_so(r):
    """Found in review 2026-12-07: "answer-all #thread off" under a channel that answers every message was
    confirmed "Done" and changed nothing (a thread follows its parent); so was "mentions #thread on"."""
    thread = dh.thread(THREAD, GUILD_ID, GENERAL, "a-thread")
    await apply(r, "answer-all", channel=channel(GENERAL, name="general"), on=True)
    res = await settings(r, "answer-all", channel=thread, on=False)
    assert f"<#{GENERAL}> answers every message" in res[-1].content and "Nothing was changed" in res[-1].content
    assert not res[-1].components  # no Apply button
    await apply(r, "mentions", channel=channel(GENERAL, name="general"), on=False)
    res = await settings(r, "mentions", channel=thread, on=True)
    assert f"<#{GENERAL}> ignores mentions" in res[-1].content and not res[-1].components
    # A thread under a channel without the setting is changed as before.
    res = await settings(r, "mentions", channel=dh.thread(THREAD, GUILD_ID, LISTED, "listed-thread"), on=True)
    assert res[-1].components


async def test_instructions_are_shown_back_capped_and_reach_the_prompt(r):
    text = "Speak like a pirate. Our server is about sailing."
    res = await settings(r, "instructions", text=text)
    assert res[-1].embeds[0]["description"] == text  # shown back before confirming
    await r.h.click(button(res[-1], "Apply"), res[-1].message, user=OWNER)
    await r.h.send_message(r.mentioning(ALICE, "hi"))
    system = r.model.chat_calls[-1].system
    assert system.index("You are TestBot.") < system.index(text)
    await r.h.send_message(r.mentioning(ALICE, "hi", channel_id=OTHER_CHANNEL, guild_id=OTHER_GUILD))
    assert text not in r.model.chat_calls[-1].system  # another server does not get them
    shown = (await settings(r, "show"))[-1].embeds[0]
    assert shown["description"] == text

    too_long = "x" * 1001
    res = await settings(r, "instructions", text=too_long)
    assert len(res) == 2 and res[-1].ephemeral and "1,001 characters" in res[-1].content
    assert "at most 1,000" in res[-1].content and not res[-1].components
    assert (await r.engine.guild_policy(GUILD_ID)).persona_addition == text


async def test_learning_off_stops_learning_here_and_memories_off_keeps_them_out(r):
    await apply(r, "learning", on=False)
    await r.h.send_message(r.mentioning(ALICE, "my name is Alice and I like kites"))
    await r.engine.scheduler.flush()
    assert await r.engine.memories.list(str(ALICE["id"])) == []
    await r.h.send_message(r.mentioning(ALICE, "I like kites", channel_id=OTHER_CHANNEL, guild_id=OTHER_GUILD))
    await r.engine.scheduler.flush()
    assert [m.content for m in await r.engine.memories.list(str(ALICE["id"]))] == ["I like kites"]

    await apply(r, "memories", on=False)
    await r.h.send_message(r.mentioning(ALICE, "what do I like?"))
    system = r.model.chat_calls[-1].system
    assert "kites" not in system and "do not use remembered facts here" in system
    await r.h.send_message(r.mentioning(ALICE, "what do I like?", channel_id=OTHER_CHANNEL, guild_id=OTHER_GUILD))
    assert "kites" in r.model.chat_calls[-1].system


async def test_learning_off_also_refuses_what_a_member_teaches_by_hand_there(r):
    """Found in review 2026-12-07 (fourteenth session): /memories remember and "Remember this" never read the
    server's settings, so a server with learning off still collected memories placed in it."""
    await apply(r, "learning", on=False)
    res = await r.h.invoke_slash("memories remember", user=ALICE, channel_id=GENERAL, options={"text": "I like kites"})
    assert res[-1].ephemeral and "turned off learning here" in res[-1].content
    mine = r.msg(ALICE, "I like kites")
    r.h.feed("MESSAGE_CREATE", mine)
    res = await r.h.invoke_context_menu("Remember this", mine, user=ALICE, channel_id=GENERAL)
    assert "turned off learning here" in [c for c in res if c.content is not None][-1].content
    assert await r.engine.memories.list(str(ALICE["id"])) == []
    res = await r.h.invoke_slash("memories remember", user=ALICE, channel_id=r.h.dm(ALICE)["id"],
                                 options={"text": "I like kites"})
    assert "I'll remember that" in res[-1].content  # their DMs are theirs


async def test_turns_waiting_when_learning_is_turned_off_are_dropped(r):
    await r.h.send_message(r.mentioning(ALICE, "my name is Alice and I like kites"))
    await apply(r, "learning", on=False)
    await r.engine.scheduler.flush()
    assert await r.engine.memories.list(str(ALICE["id"])) == []


async def test_budgets_within_the_operators_caps(r):
    res = await settings(r, "budget", tokens=3_000_000)
    assert "over this bot's limit of 2,000,000" in res[-1].content and not res[-1].components
    await apply(r, "budget", tokens=500)
    res = await settings(r, "member-budget", tokens=600)
    assert "cannot be more than the server's (500 a day)" in res[-1].content
    await apply(r, "member-budget", tokens=50)
    policy = await r.engine.guild_policy(GUILD_ID)
    assert (policy.daily_tokens, policy.member_daily_tokens) == (500, 50)
    await r.h.send_message(r.mentioning(ALICE, "a question " * 40))  # uses well over 50 tokens
    sent = await r.h.send_message(r.mentioning(ALICE, "another one"))
    assert len(sent) == 1 and "allowance" in sent[0].content  # Alice is out for today...
    sent = await r.h.send_message(r.mentioning(BOB, "and me?"))
    assert "allowance" not in sent[-1].content  # ...Bob is not


async def test_bad_channels_are_refused_and_change_nothing(tmp_path):
    bot_only_hidden = dh.overwrite(dh.BOT_ID, member=True, deny=discord.Permissions(view_channel=True).value)
    bot_mute = dh.overwrite(dh.BOT_ID, member=True, deny=discord.Permissions(send_messages=True).value)
    async with rig(tmp_path) as r:
        r.h.feed("CHANNEL_CREATE", dh.text_channel(CLOSED_CHANNEL, GUILD_ID, "closed", [bot_only_hidden]))
        r.h.feed("CHANNEL_CREATE", dh.text_channel(CLOSED_CHANNEL + 1, GUILD_ID, "read-only", [bot_mute]))
        cases = [
            (channel(OTHER_CHANNEL, OTHER_GUILD, "elsewhere"), "belongs to another server"),
            (dh.thread(SECRET_THREAD, GUILD_ID, GENERAL, "secret", owner_id=int(ALICE["id"]), type=12),
             "I can't see that thread"),
            (channel(CLOSED_CHANNEL, name="closed"), "I can't see that channel"),
            (channel(CLOSED_CHANNEL + 1, name="read-only"), "not allowed to send messages there"),
        ]
        for payload, reason in cases:
            res = await settings(r, "answer-all", channel=payload, on=True)
            assert len(res) == 1 and res[0].ephemeral and reason in res[0].content, (reason, res[0].content)
        res = await settings(r, "mod-log", channel=channel(OTHER_CHANNEL, OTHER_GUILD, "elsewhere"))
        assert "belongs to another server" in res[0].content
        assert (await r.engine.guild_policy(GUILD_ID)).sources["respond_channels"] == "operator"
        assert await r.engine.guild_settings.store.get(str(GUILD_ID)) is None


async def test_an_admin_cannot_change_a_channel_hidden_from_them(tmp_path):
    """Manage Server is not access to every channel: an admin who cannot see #staff (a channel ID can be sent
    from a modified client without the picker) changes nothing there; one who can, can."""
    hidden_from_mods = dh.overwrite(MOD_ROLE, deny=discord.Permissions(view_channel=True).value)
    async with rig(tmp_path) as r:
        grant_manage_server(r, True)
        r.h.feed("CHANNEL_CREATE", dh.text_channel(CLOSED_CHANNEL, GUILD_ID, "staff", [hidden_from_mods]))
        res = await settings(r, "answer-all", MOD, channel=channel(CLOSED_CHANNEL, name="staff"), on=True)
        assert len(res) == 1 and res[0].ephemeral and "can't see that channel yourself" in res[0].content
        assert await r.engine.guild_settings.store.get(str(GUILD_ID)) is None
        _prompt, done = await apply(r, "answer-all", MOD, channel=channel(GENERAL, name="general"), on=True)
        assert str(GENERAL) in (await r.engine.guild_policy(GUILD_ID)).respond_channels
        # Instructions the owner set for #staff: not shown to the admin who can't see it, nor removable by them.
        await apply(r, "instructions", text="Staff rule: staff_only_canary.", channel=channel(CLOSED_CHANNEL, name="staff"))
        await apply(r, "instructions", text="General rule.", channel=channel(GENERAL, name="general"))
        shown = (await settings(r, "show", MOD))[-1].embeds[0]
        field = next(f for f in shown["fields"] if f["name"].startswith("Channel instructions"))
        assert "General rule." in field["value"] and "staff_only_canary" not in field["value"]
        assert "1 more in channels you can't see" in field["value"]
        owners = (await settings(r, "show"))[-1].embeds[0]
        assert any("staff_only_canary" in f["value"] for f in owners["fields"])
        res = await settings(r, "reset", MOD, setting="persona", channel=channel(CLOSED_CHANNEL, name="staff"))
        assert len(res) == 1 and "can't see that channel yourself" in res[0].content
        # Every channel's at once: the settings are read (a database read past the cache) only after the
        # command was answered with "thinking", or a slow read would pass Discord's 3 seconds.
        answered_when_read: list[int] = []
        policy_of = r.engine.guild_policy

        async def reading(guild_id, *a, **kw):
            answered_when_read.append(sum(c.path.endswith("/callback") for c in r.h.calls))
            return await policy_of(guild_id, *a, **kw)

        r.engine.guild_policy = reading
        before = sum(c.path.endswith("/callback") for c in r.h.calls)
        res = await settings(r, "reset", MOD, setting="channel_personas")
        del r.engine.guild_policy
        assert answered_when_read and answered_when_read[0] == before + 1
        assert res[-1].ephemeral and "ones you can't see" in res[-1].content
        assert str(CLOSED_CHANNEL) in (await r.engine.guild_policy(GUILD_ID)).channel_personas
        # The same for the lists and the mod-log channel (found in review 2026-12-07: a reset of those
        # changed #staff for an admin who cannot see it).
        await apply(r, "answer-all", channel=channel(CLOSED_CHANNEL, name="staff"), on=True)
        await apply(r, "mod-log", channel=channel(CLOSED_CHANNEL, name="staff"))
        for name in ("respond_channels", "mod_log_channel"):
            res = await settings(r, "reset", MOD, setting=name)
            assert res[-1].ephemeral and "ones you can't see" in res[-1].content and not res[-1].components, name
        policy = await r.engine.guild_policy(GUILD_ID)
        assert str(CLOSED_CHANNEL) in policy.respond_channels and policy.mod_log_channel == str(CLOSED_CHANNEL)
        res = await settings(r, "reset", MOD, setting="mentions_off")  # names no channel hidden from them
        assert res[-1].components


async def test_permission_granted_then_revoked_between_display_and_use(r):
    grant_manage_server(r, True)
    await r.h.settle()
    res = await settings(r, "learning", MOD, on=False)
    prompt = res[-1]
    assert "Stop learning" in prompt.content
    grant_manage_server(r, False)  # the role loses Manage Server while the prompt is on screen
    await r.h.settle()
    done = await r.h.click(button(prompt, "Apply"), prompt.message, user=MOD)
    assert "no longer have the Manage Server permission" in done[-1].content
    assert (await r.engine.guild_policy(GUILD_ID)).learning is True
    res = await settings(r, "learning", MOD, on=False)  # the client may still show the command
    assert len(res) == 1 and "Manage Server" in res[0].content


async def test_apply_after_the_bot_was_removed_from_the_server_is_answered_and_changes_nothing(r):
    """The bot is removed while the prompt is open: the click is answered with why (until 2026-12-06 the check's
    error escaped, the click went unanswered and Discord showed "This interaction failed")."""
    res = await settings(r, "learning", OWNER, on=False)
    prompt = res[-1]
    assert "Stop learning" in prompt.content
    r.h.feed("GUILD_DELETE", {"id": str(GUILD_ID)})  # removed for good
    await r.h.settle()
    done = await r.h.click(button(prompt, "Apply"), prompt.message, user=OWNER)
    assert len(done) == 1 and "not a member of this server" in done[0].content
    assert "user-installed" not in done[0].content  # it was added to the server; it has been removed
    assert await r.engine.guild_settings.store.get(str(GUILD_ID)) is None


async def test_only_the_admin_who_asked_can_press_apply(r):
    grant_manage_server(r, True)
    await r.h.settle()
    res = await settings(r, "memories", OWNER, on=False)
    other = await r.h.click(button(res[-1], "Apply"), res[-1].message, user=MOD)
    assert "aren't for you" in other[-1].content
    assert (await r.engine.guild_policy(GUILD_ID)).use_memories is True


async def test_reset_goes_back_to_the_default_and_cancel_changes_nothing(r):
    await apply(r, "budget", tokens=1000)
    res = await settings(r, "reset", setting="daily_tokens")
    cancelled = await r.h.click(button(res[-1], "Cancel"), res[-1].message, user=OWNER)
    assert "nothing was changed" in cancelled[-1].content
    assert (await r.engine.guild_policy(GUILD_ID)).daily_tokens == 1000
    await apply(r, "reset", setting="daily_tokens")
    policy = await r.engine.guild_policy(GUILD_ID)
    assert policy.daily_tokens == 2_000_000 and policy.sources["daily_tokens"] == "operator"


async def test_mod_log_channel_of_the_server_gets_purges_and_changes(r):
    other_log = 906
    r.h.feed("CHANNEL_CREATE", channel(other_log, name="bot-log"))
    await apply(r, "mod-log", channel=channel(other_log, name="bot-log"))
    assert len(r.h.sent_messages(other_log)) == 1  # the change itself goes to the new channel
    # and to the old one, whose readers would otherwise never learn where the lines went
    assert len(r.h.sent_messages(MODLOG)) == 1 and "mod-log" in r.h.sent_messages(MODLOG)[0].content
    await apply(r, "learning", on=False)
    assert len(r.h.sent_messages(other_log)) == 2 and len(r.h.sent_messages(MODLOG)) == 1  # not there any more
    res = await r.h.invoke_slash("purge-memories", user=MOD, channel_id=GENERAL, options={"member": BOB})
    await click_erasure(r, button(res[-1], "Purge"), res[-1].message, user=MOD)
    assert "memory purge" in r.h.sent_messages(other_log)[-1].content


async def test_the_operators_mod_log_in_another_server_keeps_a_change_here_in_the_log_without_an_error(r):
    """Found in review 2026-12-07: the operator's mod-log channel is in another server, so discord.py's
    fetch raised InvalidData ("Guild ID resolved to a different guild"), not an HTTP error: after "Done" the
    admin got "something went wrong" and might apply the change again."""
    res = await r.h.invoke_slash("settings learning", user=OWNER, channel_id=OTHER_CHANNEL, options={"on": False})
    done = await r.h.click(button(res[-1], "Apply"), res[-1].message, user=OWNER)
    said = [c.content or "" for c in [*done, *r.h.interaction_responses(int(res.interaction["id"]))]]
    assert any("Done" in t for t in said) and not any("went wrong" in t for t in said), said
    assert r.h.sent_messages(MODLOG) == [] and r.h.sent_messages(OTHER_CHANNEL) == []
    assert not (await r.engine.guild_policy(OTHER_GUILD)).learning


async def test_a_locked_thread_is_refused_as_the_mod_log_when_i_cannot_post_there(r):
    """discord.py's permissions ignore a thread's lock; Discord refuses a message there without Manage
    Threads, so every audit line failed with a 403 in the log only."""
    locked = dh.thread(THREAD + 100, GUILD_ID, GENERAL, "audit")
    locked["thread_metadata"]["locked"] = True
    r.h.feed("THREAD_CREATE", dict(locked, newly_created=True))
    res = await settings(r, "mod-log", channel=locked)
    assert "locked" in res[-1].content and "Nothing was changed" in res[-1].content
    assert (await r.engine.guild_policy(GUILD_ID)).mod_log_channel != str(THREAD + 100)


async def test_a_mod_log_thread_that_auto_archived_still_gets_the_audit_lines(r):
    """discord.py drops a thread from its cache when it archives (and a restart learns only active threads):
    the mod-log is looked up on Discord then, and the line goes out (posting unarchives the thread)."""
    await apply(r, "mod-log", channel=dh.thread(THREAD, GUILD_ID, GENERAL, "a-thread"))
    assert len(r.h.sent_messages(THREAD)) == 1
    guild = r.h.bot.get_guild(GUILD_ID)
    guild._remove_thread(guild.get_thread(THREAD))  # what THREAD_UPDATE with archived=true does
    assert guild.get_channel_or_thread(THREAD) is None
    await apply(r, "learning", on=False)
    assert len(r.h.sent_messages(THREAD)) == 2 and "learning" in r.h.sent_messages(THREAD)[-1].content
    fields = {f["name"]: f["value"] for f in (await settings(r, "show"))[-1].embeds[0]["fields"]}
    assert fields["Mod-log channel"] == f"<#{THREAD}> *(set here)*"  # still shown as what it is


async def test_settings_are_deleted_with_the_servers_data_not_on_an_outage(tmp_path):
    async with rig(tmp_path, retention={"removed_server_days": 0}) as r:
        await settings_deleted_with_the_server(r)


async def settings_deleted_with_the_server(r):
    await apply(r, "learning", on=False)
    r.h.feed("GUILD_DELETE", {"id": str(GUILD_ID), "unavailable": True})  # an outage
    await r.h.settle()
    assert await r.engine.guild_settings.store.get(str(GUILD_ID)) is not None
    r.h.feed("GUILD_CREATE", GUILD)
    await r.h.settle()
    r.h.feed("GUILD_DELETE", {"id": str(GUILD_ID)})  # removed (kicked, or the server was deleted)
    await r.h.settle()
    assert await r.engine.guild_settings.store.get(str(GUILD_ID)) is None


async def test_a_failing_database_gets_an_apology_and_changes_nothing(r, caplog):
    store = r.engine.guild_settings.store
    real_put = store.put

    async def broken(*args, **kwargs):
        raise OSError("disk I/O error")

    store.put = broken
    try:
        prompt, done = await apply(r, "learning", on=False)
    finally:
        store.put = real_put
    assert "couldn't save that just now: nothing was changed" in done[-1].content
    assert any("changing the settings of server" in rec.getMessage() for rec in caplog.records)
    assert (await r.engine.guild_policy(GUILD_ID)).learning is True
    assert r.h.sent_messages(MODLOG) == []  # nothing changed, nothing audited


async def test_settings_outlive_a_removal_until_the_retention_sweep(r):
    import time

    await apply(r, "learning", on=False)
    r.h.feed("GUILD_DELETE", {"id": str(GUILD_ID)})  # removed; retention.removed_server_days is 7
    await r.h.settle()
    assert await r.engine.guild_settings.store.get(str(GUILD_ID)) is not None  # a re-invite would keep them
    await r.engine.changes.sweep_removed_servers(now=time.time() + 8 * 86400)
    assert await r.engine.guild_settings.store.get(str(GUILD_ID)) is None
    assert (await r.engine.guild_policy(GUILD_ID)).learning is True  # and no process serves a stale copy


async def test_channel_instructions_come_after_the_servers_apply_to_threads_and_posts_and_go_with_the_channel(r):
    from tests.cogs.test_context import forum_post

    pirates, forum = 4300, 4301
    r.h.feed("CHANNEL_CREATE", dh.text_channel(pirates, GUILD_ID, "pirates"))
    r.h.feed("CHANNEL_CREATE", dh.forum_channel(forum, GUILD_ID, "ideas"))
    r.h.feed("THREAD_CREATE", dict(dh.thread(4302, GUILD_ID, pirates, "a-voyage"), newly_created=True))
    await apply(r, "instructions", text="Server rule: be kind.")
    prompt, done = await apply(r, "instructions", text="Channel rule: speak like a pirate.",
                               channel=channel(pirates, name="pirates"))
    assert f"<#{pirates}>" in prompt.content and prompt.embeds[0]["description"] == "Channel rule: speak like a pirate."
    assert f"Done: the instructions of <#{pirates}>: set" in done[-1].content
    await apply(r, "instructions", text="Forum rule: one idea per post.", channel=dh.forum_channel(forum, GUILD_ID, "ideas"))
    for where in (pirates, 4302):  # the channel and its thread
        await r.h.send_message(r.mentioning(ALICE, "ahoy", channel_id=where))
        system = r.model.chat_calls[-1].system
        assert system.index("Server rule: be kind.") < system.index("Channel rule: speak like a pirate."), where
        assert "Forum rule" not in system
    await r.h.send_message(r.mentioning(ALICE, "hi", channel_id=GENERAL))
    system = r.model.chat_calls[-1].system
    assert "Server rule: be kind." in system and "Channel rule" not in system
    opening = forum_post(r, BOB, "An idea", "what about a boat race?", forum=forum)
    await r.h.send_message(r.mentioning(ALICE, "nice idea", channel_id=int(opening["id"])))
    system = r.model.chat_calls[-1].system
    assert "Forum rule: one idea per post." in system and "Channel rule" not in system
    shown = (await settings(r, "show"))[-1].embeds[0]
    field = next(f for f in shown["fields"] if f["name"].startswith("Channel instructions"))
    assert f"<#{pirates}>: Channel rule: speak like a pirate." in field["value"] and f"<#{forum}>" in field["value"]
    # Deleting the channel deletes its instructions; the forum's stay.
    r.h.feed("CHANNEL_DELETE", dh.text_channel(pirates, GUILD_ID, "pirates"))
    await r.h.settle(timeout=20, quiet=0.3)
    assert (await r.engine.guild_policy(GUILD_ID)).channel_personas == {str(forum): "Forum rule: one idea per post."}


async def test_a_deleted_channel_leaves_the_lists_and_the_mod_log_too(r):
    """Found in review 2026-12-07: only its instructions went. It stayed in answer-all and mentions-off
    (counted against their cap, shown as "#unknown", not removable by any picker) and as the mod-log channel
    (every later audit line then a warning in the process log only)."""
    gone = 4400
    r.h.feed("CHANNEL_CREATE", channel(gone, name="old-log"))
    await apply(r, "answer-all", channel=channel(gone, name="old-log"), on=True)
    await apply(r, "mentions", channel=channel(gone, name="old-log"), on=False)
    await apply(r, "mod-log", channel=channel(gone, name="old-log"))
    await apply(r, "answer-all", channel=channel(GENERAL, name="general"), on=True)
    r.h.feed("CHANNEL_DELETE", dh.text_channel(gone, GUILD_ID, "old-log"))
    await r.h.settle(timeout=20, quiet=0.3)
    policy = await r.engine.guild_policy(GUILD_ID)
    assert str(gone) not in policy.respond_channels and str(GENERAL) in policy.respond_channels
    assert str(gone) not in policy.mentions_off
    assert policy.mod_log_channel == str(MODLOG)  # the operator's again


async def test_a_deleted_channel_takes_the_settings_of_its_open_threads_along(r):
    """Discord sends no deletion for the threads of a deleted channel; discord.py sends one for each open
    thread it has, so a thread's instructions (an admin's text) and its mod-log role go with its channel."""
    from bot.engine.policy.server_settings import channel_persona, set_field

    parent, thread = 4401, 4402
    r.h.feed("CHANNEL_CREATE", channel(parent, name="projects"))
    r.h.feed("THREAD_CREATE", dict(dh.thread(thread, GUILD_ID, parent, "launch"), newly_created=True))
    await r.h.settle(quiet=0.2)
    await r.engine.change_settings(GUILD_ID, channel_persona(str(thread), "Thread rule canary."), by=str(OWNER["id"]))
    await r.engine.change_settings(GUILD_ID, set_field("mod_log_channel", str(thread)), by=str(OWNER["id"]))
    await apply(r, "answer-all", channel=channel(GENERAL, name="general"), on=True)
    r.h.feed("CHANNEL_DELETE", dh.text_channel(parent, GUILD_ID, "projects"))
    await r.h.settle(timeout=20, quiet=0.3)
    policy = await r.engine.guild_policy(GUILD_ID)
    assert str(thread) not in policy.channel_personas and policy.mod_log_channel == str(MODLOG)
    assert str(GENERAL) in policy.respond_channels  # the rest stays


async def test_a_channel_deleted_in_a_database_outage_loses_its_settings_once_it_is_back(r, monkeypatch):
    """Discord sends CHANNEL_DELETE once: the settings' clean-up waits the outage out like the conversation's."""
    from cogs import message_events

    monkeypatch.setattr(message_events, "RETRY_FIRST_DELAY", 0.05)
    gone = 4403
    r.h.feed("CHANNEL_CREATE", channel(gone, name="old"))
    await apply(r, "instructions", text="Old rule.", channel=channel(gone, name="old"))
    real, failures = r.engine.channel_settings_gone, [ConnectionError("the database is down")]

    async def flaky(*args):
        if failures:
            raise failures.pop()
        return await real(*args)

    r.engine.channel_settings_gone = flaky
    r.h.feed("CHANNEL_DELETE", dh.text_channel(gone, GUILD_ID, "old"))
    for _ in range(100):
        if str(gone) not in (await r.engine.guild_policy(GUILD_ID)).channel_personas:
            break
        await asyncio.sleep(0.05)
    assert str(gone) not in (await r.engine.guild_policy(GUILD_ID)).channel_personas and not failures


async def test_channel_instructions_are_capped_and_one_channel_can_be_reset(r):
    res = await settings(r, "instructions", text="x" * 1001, channel=channel(GENERAL, name="general"))
    assert res[-1].ephemeral and "1,001 characters" in res[-1].content and not res[-1].components
    await apply(r, "instructions", text="General rule.", channel=channel(GENERAL, name="general"))
    await apply(r, "instructions", text="Listed rule.", channel=channel(LISTED, name="bot-chat"))
    prompt, done = await apply(r, "reset", setting="persona", channel=channel(GENERAL, name="general"))
    assert f"Remove the instructions of <#{GENERAL}>?" in prompt.content and "removed" in done[-1].content
    assert (await r.engine.guild_policy(GUILD_ID)).channel_personas == {str(LISTED): "Listed rule."}
    await apply(r, "reset", setting="channel_personas")
    assert (await r.engine.guild_policy(GUILD_ID)).channel_personas == {}
    res = await settings(r, "instructions", text="Elsewhere.", channel=channel(OTHER_CHANNEL, OTHER_GUILD, "elsewhere"))
    assert "belongs to another server" in res[-1].content


async def test_a_forum_is_refused_as_the_mod_log_and_one_set_before_never_fails_a_change(tmp_path, caplog):
    """A forum takes posts, not messages: refused with the reason. A forum stored by an earlier release
    (or a channel turned into one) keeps the audit line in the process log, and the change still reads Done."""
    forum = 7700
    async with rig(tmp_path) as r:
        r.h.feed("CHANNEL_CREATE", dh.forum_channel(forum, GUILD_ID, "reports"))
        res = await settings(r, "mod-log", channel=dh.forum_channel(forum, GUILD_ID, "reports"))
        assert res[-1].ephemeral and "takes posts, not messages" in res[-1].content
        assert (await r.engine.guild_policy(GUILD_ID)).mod_log_channel != str(forum)
        from bot.engine import set_field

        await r.engine.change_settings(GUILD_ID, set_field("mod_log_channel", str(forum)), by="800")
        with caplog.at_level(logging.WARNING):
            _, done = await apply(r, "learning", on=False)
        assert "Done" in done[-1].content and not [c for c in done if "went wrong" in (c.content or "")]
        assert "takes no messages" in caplog.text
        assert not (await r.engine.guild_policy(GUILD_ID)).learning


async def test_show_lists_many_channels_within_discords_embed_limits(tmp_path):
    ids = [1_234_567_890_123_456_000 + i for i in range(100)]  # the most a list may hold
    guild = dh.guild(GUILD_ID, "Test Server", owner_id=OWNER["id"],
                     channels=[*GUILD["channels"], *GUILD.get("threads", []),
                               *[dh.text_channel(i, GUILD_ID, f"c{n}") for n, i in enumerate(ids)]],
                     roles=[x for x in GUILD["roles"] if x["name"] != "@everyone"], members=GUILD["members"])
    async with rig(tmp_path, guilds=(guild,)) as r:
        from bot.engine import channel_listed, set_field

        for i in ids:
            await r.engine.change_settings(GUILD_ID, channel_listed("respond_channels", str(i), True, frozenset()),
                                           by="800")
            await r.engine.change_settings(GUILD_ID, channel_listed("mentions_off", str(i), True, frozenset()),
                                           by="800")
        limit = r.bot.settings.server_settings.max_persona_chars
        await r.engine.change_settings(GUILD_ID, set_field("persona", "Be kind. " * (limit // 9)), by="800")
        (embed,) = (await settings(r, "show"))[-1].embeds
        assert all(len(f["value"]) <= 1024 for f in embed["fields"])
        total = len(embed.get("title", "")) + len(embed.get("description", "")) + sum(
            len(f["name"]) + len(f["value"]) for f in embed["fields"])
        assert total <= 6000
        listed = next(f["value"] for f in embed["fields"] if f["name"] == "Answers every message in")
        assert "…and" in listed and "more" in listed
