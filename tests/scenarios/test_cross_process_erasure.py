"""Two processes erasing two people who quote each other, at once: both finish (issue 19).

Process A wipes Alice, which needs Bob held too (his messages quote her and get her words cut out);
process B deletes Bob's message, which needs Alice held (her messages quote his). Held in two orders in two
processes, that deadlocked forever; with one erasure at a time over the database (the global erasure
lock, taken before any person) both finish, in either order, and each does all of its work.
"""

from __future__ import annotations

import asyncio

from bot.engine.state import Speaker
from tests.conftest import ScriptedChatModel, default_script, record_figure
from tests.scenarios.test_two_processes import two

ALICE = Speaker(user_id="501", name="Alice", guild_id="900", channel_id="7")
BOB = Speaker(user_id="502", name="Bob", guild_id="900", channel_id="7")
HANG_GUARD_SECONDS = 120  # not a timing assertion: a deadlock would otherwise hang the suite


def said(who: Speaker, message_id: str) -> Speaker:
    return Speaker(user_id=who.user_id, name=who.name, guild_id=who.guild_id, channel_id=who.channel_id,
                   message_id=message_id)


async def test_two_processes_erasing_people_who_quote_each_other_both_finish(tmp_path, pg_backend):
    stack, a, b = await two(tmp_path, pg_backend, ScriptedChatModel(default_script), ScriptedChatModel(default_script))
    async with stack:
        deadlocks = 0
        for rounds in range(3):  # a few rounds: the two orders interleave differently each time
            channel = f"7-{rounds}"
            await a.reply(channel, said(ALICE, f"a{rounds}"), "I like the blue lighthouse on the cliff")
            await a.reply(channel, said(BOB, f"b{rounds}"),
                          "she said I like the blue lighthouse on the cliff, and I like green harbours")
            await a.reply(channel, said(ALICE, f"c{rounds}"), "he said I like green harbours, funny")
            await a.flush_learning()
            wipe = a.erase_person(ALICE.user_id)
            delete = b.messages_deleted(channel, {f"b{rounds}"})
            try:
                await asyncio.wait_for(asyncio.gather(wipe, delete), HANG_GUARD_SECONDS)
            except asyncio.TimeoutError:
                deadlocks += 1
                raise
            assert await a.count_memories(ALICE.user_id) == 0
            texts = " ".join(m.text for m in (await b.thread_state(channel)).get("messages", []))
            assert "lighthouse" not in texts  # Alice's words, everywhere they were quoted
            assert "green harbours" not in texts  # Bob's deleted message's words, in what is left
            assert not any("green harbours" in m.content for m in await b.list_memories(BOB.user_id))
        record_figure("cross-process erasures of people quoting each other", 3, f"{deadlocks} deadlocks; both finished")
