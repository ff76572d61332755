"""Where memories may be used: the strictest rule over every source, one policy per person."""

from __future__ import annotations

from datetime import datetime, timezone

from bot.engine.learning.extraction import TurnText, WriteRequest
from bot.engine.memories.records import StoredMemory
from bot.engine.policy.visibility import Visibility, allowed_here, resolve_visibility
from bot.engine.state import Speaker
from bot.engine.stores import Prefs
from bot.settings import MemorySection
from tests.conftest import ScriptedChatModel, default_script, running_engine

A = {"guild_id": "1", "channel_id": "10", "message_id": "100"}
B = {"guild_id": "2", "channel_id": "20", "message_id": "200"}
DM = {"guild_id": "dm", "channel_id": "30", "message_id": "300"}
NOW = datetime.now(timezone.utc)


def memory(content: str, *sources: dict) -> StoredMemory:
    return StoredMemory(key=content, content=content, origin=dict(sources[-1]) if sources else {},
                        created_at=NOW, updated_at=NOW, sources=tuple(sources))


MEMORIES = [memory("a", A), memory("b", B), memory("dm", DM), memory("a+dm", A, DM), memory("a+b", A, B),
            memory("legacy")]


def shown(policy: Visibility) -> list[str]:
    return [m.content for m in allowed_here(MEMORIES, policy)]


def test_a_dm_source_anywhere_keeps_a_memory_out_of_servers():
    assert shown(Visibility(place="1", scope="global")) == ["a", "b", "a+b", "legacy"]
    assert shown(Visibility(place="1", scope="global", dm_in_servers=True)) == ["a", "b", "dm", "a+dm", "a+b", "legacy"]


def test_server_scope_keeps_each_server_to_its_own_and_a_mix_to_dms():
    assert shown(Visibility(place="1")) == ["a", "legacy"]
    assert shown(Visibility(place="2")) == ["b", "legacy"]
    assert shown(Visibility(place="dm")) == [m.content for m in MEMORIES]


def test_private_mode_shows_nothing():
    assert shown(Visibility(place="dm", use_memories=False)) == []


def test_the_persons_choice_wins_over_the_default():
    defaults = MemorySection(dm_memories_in_servers=False, scope="server")
    assert resolve_visibility(Prefs(), defaults, "1") == Visibility(place="1", scope="server")
    chosen = resolve_visibility(Prefs(dm_in_servers=True, private=True), defaults, "1")
    assert chosen.dm_in_servers and not chosen.use_memories
    assert resolve_visibility(Prefs(private=True), defaults, "1", for_reply=False).use_memories


async def test_reply_prompts_and_extraction_apply_the_same_rule(settings):
    model = ScriptedChatModel(default_script)
    async with running_engine(settings, model) as engine:
        await engine.memories.apply("7", inserts=[("Plays chess in A", A), ("Told in a DM, then in A", DM, [DM, A]),
                                                  ("Said in server B", B)])
        await engine.reply("t1", Speaker(user_id="7", name="Ann", guild_id="1", channel_id="10"), "hi")
        system = model.chat_calls[-1].system
        assert "Plays chess in A" in system
        assert "Told in a DM" not in system and "Said in server B" not in system
        await engine.reply("t2", Speaker(user_id="7", name="Ann"), "hi in DM")
        assert all(s in model.chat_calls[-1].system for s in ("Plays chess", "Told in a DM", "Said in server B"))
        # Extraction for a turn in server A is shown only what may be used in A.
        request = WriteRequest(user_id="7", speaker_name="Ann", new=[TurnText("7", "Ann", "I like go", "ok", origin=A)],
                               origin=A)
        await engine.learn(request)
        existing = str(model.extraction_calls[-1].kwargs) + model.extraction_calls[-1].prompt_text
        assert "Plays chess in A" in existing  # the extractor is shown what is allowed there
        assert "Told in a DM" not in existing and "Said in server B" not in existing
