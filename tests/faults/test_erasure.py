"""Erasure that reaches quotes: after a wipe or a purge, a phrase the person wrote is in no byte of the data
directory, even where the bot repeated it to other people (its answers, summaries, other people's messages,
pending turns and memories), while what other people said in their own words stays."""

from __future__ import annotations

from pathlib import Path

from langchain_core.messages import HumanMessage

from tests.cogs.conftest import (
    ALICE,
    BOB,
    GENERAL,
    LISTED,
    MOD,
    OTHER_CHANNEL,
    OTHER_GUILD,
    rig,
)
from tests.cogs.test_memories import button, click_erasure, seed
from tests.conftest import Call, ScriptedChatModel, default_script, record_figure

# Each canary: what Alice writes, and the part of it the bot (or Bob) repeats elsewhere.
CANARIES = [
    ("I like the purple walrus lantern festival", "purple walrus lantern festival"),
    ("my locker code is quasar-nebula-88421-x", "quasar-nebula-88421-x"),
    ("tell nobody that I adopted three grey ferrets", "adopted three grey ferrets"),
    ("the wifi password is marmalade-tortoise-1998", "marmalade-tortoise-1998"),
    ("I secretly wrote the anonymous opera review", "wrote the anonymous opera review"),
]
ASK = "what did alice say about"


def files_containing(data_dir: Path, needle: str) -> list[str]:
    raw = needle.encode("utf-8")
    return [str(p) for p in data_dir.rglob("*") if p.is_file() and raw in p.read_bytes()]


def quoting_script(call: Call):
    """The bot repeats Alice's words to Bob: it 'answers' Bob's question with the quoted part."""
    if not call.is_extraction:
        last = next((m.text for m in reversed(call.messages) if isinstance(m, HumanMessage)), "")
        for said, quoted in CANARIES:
            if ASK in last and quoted.split()[0] in last:
                return f"Alice told me: {quoted}!"
    return default_script(call)


async def chat(r, author: dict, text: str, channel_id: int = GENERAL, guild_id=None) -> None:
    from tests.cogs.conftest import GUILD_ID

    await r.h.send_message(r.mentioning(author, text, channel_id=channel_id, guild_id=guild_id or GUILD_ID))


async def quote_everywhere(r) -> None:
    """Alice speaks in #general; in #bot-chat the bot quotes her to Bob, Bob quotes her himself (and his
    turns wait for extraction), his memories quote her, and the channel gets summarized."""
    for said, _ in CANARIES:
        await chat(r, ALICE, said)
    await r.engine.scheduler.flush()
    for said, quoted in CANARIES:
        await chat(r, BOB, f"{ASK} {quoted.split()[0]}?", channel_id=LISTED)
        await chat(r, BOB, f"funny, she wrote {quoted} to me too", channel_id=LISTED)
    await chat(r, BOB, "I like my own bob-only-phrase here", channel_id=LISTED)
    await seed(r, BOB, [f"Bob heard Alice say {quoted}" for _, quoted in CANARIES] + ["Bob likes sailing"])
    await r.engine.close()  # the summaries (built with the quotes in them) are written
    r.engine.scheduler._closed = False


async def test_a_wipe_removes_every_quote_of_the_person_from_every_file(tmp_path):
    async with rig(tmp_path, ScriptedChatModel(quoting_script),
                   conversation={"summarize_after_messages": 6, "keep_messages": 4}) as r:
        await quote_everywhere(r)
        before = {q: files_containing(r.data_dir, q) for _, q in CANARIES}
        assert all(before.values()), "every canary must be on disk before the wipe"
        assert any("ledger" in f for fs in before.values() for f in fs), "Bob's pending turns quote Alice"
        res = await r.h.invoke_slash("memories wipe", user=ALICE, channel_id=GENERAL)
        await click_erasure(r, button(res[-1], "Wipe"), res[-1].message, user=ALICE)
        assert "Done: deleted" in (r.h.calls[-1].content or ""), "the wipe finished"
        left = {q: files_containing(r.data_dir, q) for _, q in CANARIES}
        assert left == {q: [] for _, q in CANARIES}
        assert files_containing(r.data_dir, "bob-only-phrase"), "Bob's own words stay"
        bob = sorted(m.content for m in await r.engine.memories.list(str(BOB["id"])))
        assert "Bob likes sailing" in bob and "Bob heard Alice say [erased]" in bob
        await chat(r, BOB, "still there?", channel_id=LISTED)  # the channel still works
        assert "still there?" in r.h.sent_messages(LISTED)[-1].content
    record_figure("quote canaries after a wipe", len(CANARIES),
                  "quoted to Bob, by Bob, in his memories, summary and pending turns: 0 bytes left on disk")


async def test_a_purge_removes_quotes_of_that_server_and_keeps_the_rest(tmp_path):
    async with rig(tmp_path, ScriptedChatModel(quoting_script)) as r:
        await quote_everywhere(r)
        await chat(r, ALICE, "I like the elsewhere-kept-phrase-4410", channel_id=OTHER_CHANNEL, guild_id=OTHER_GUILD)
        await r.engine.scheduler.flush()
        res = await r.h.invoke_slash("purge-memories", user=MOD, channel_id=GENERAL, options={"member": ALICE})
        await click_erasure(r, button(res[-1], "Purge"), res[-1].message, user=MOD)
        for _, quoted in CANARIES:
            assert files_containing(r.data_dir, quoted) == [], quoted
        assert files_containing(r.data_dir, "elsewhere-kept-phrase-4410"), "another server's words stay"
    record_figure("quote canaries after a purge", len(CANARIES), "0 bytes left on disk; other servers kept")
