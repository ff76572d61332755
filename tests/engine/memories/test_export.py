"""Export files: whatever the bot hands out within Discord's upload limit, ``parse_import`` takes back."""

from __future__ import annotations

import gzip
import secrets
from datetime import datetime, timezone

import pytest

from bot.engine.errors import ImportRefused
from bot.engine.memories.export import MAX_IMPORT_BYTES, export_file, export_memories, parse_import
from bot.engine.memories.records import StoredMemory

WHEN = datetime(2026, 5, 1, tzinfo=timezone.utc)


def person(n: int, chars: int) -> dict:
    memories = [StoredMemory(key=f"k{i:05d}", content=f"fact {i} " + "x" * chars, created_at=WHEN, updated_at=WHEN,
                             origin={"guild_id": "1", "channel_id": "2", "message_id": "3"}) for i in range(n)]
    return export_memories("7", memories)


@pytest.mark.parametrize("limit, ending, readable", [(10**9, ".json", True), ("compact", ".json", False),
                                                       ("packed", ".json.gz", False)])
def test_an_export_is_made_to_fit_and_every_form_imports_back(limit, ending, readable):
    doc = person(200, 500)
    pretty, _ = export_file(doc, 10**9)
    compact_size = len(export_file(doc, len(pretty) - 1)[0])
    limit = {"compact": len(pretty) - 1, "packed": compact_size - 1}.get(limit, limit)
    data, got = export_file(doc, limit)
    assert got == ending and len(data) <= limit
    assert (b'\n  "' in data) == readable  # indented only when it fits as is
    memories, _ = parse_import(data, "7")
    assert [m["content"] for m in memories] == [m["content"] for m in doc["memories"]]


def test_an_export_that_cannot_fit_is_reported_not_cut():
    doc = person(50, 1000)
    for m in doc["memories"]:
        m["content"] = secrets.token_hex(500)  # text that does not compress below the limit
    assert export_file(doc, 20_000) is None


def test_a_gzip_bomb_is_refused_without_unpacking_it_all():
    bomb = gzip.compress(b"{" + b" " * (MAX_IMPORT_BYTES + 10) + b"}")
    assert len(bomb) < 100_000
    with pytest.raises(ImportRefused, match="unpacks to more than"):
        parse_import(bomb, "7")
    with pytest.raises(ImportRefused, match="not a valid gzip"):
        parse_import(b"\x1f\x8b" + b"broken", "7")


def _doc(**memory) -> bytes:
    import json

    base = {"id": "a1", "content": "bait", "origin": {"guild_id": "dm", "source": "extraction"},
            "sources": [{"message_id": "555", "guild_id": "dm", "at": "2025-01-01T00:00:00+00:00"}],
            "created_at": "2025-01-01T00:00:00+00:00", "updated_at": "2025-01-01T00:00:00+00:00"}
    return json.dumps({"format": "remembering-bot.memories", "version": 2, "user_id": "7", "exported_at": "x",
                       "memories": [{**base, **memory}], "history": []}).encode()


def test_a_time_without_a_zone_is_read_as_utc_so_a_list_of_memories_still_sorts():
    """A hand-edited file with "2025-01-01T00:00:00": stored naive, it made every later listing of the
    person raise (naive and aware times do not compare), which stopped deletions that had to read it."""
    memories, _ = parse_import(_doc(created_at="2025-01-01T00:00:00", updated_at="2025-01-02T10:00:00"), "7")
    assert memories[0]["created_at"] == "2025-01-01T00:00:00+00:00"
    assert memories[0]["updated_at"] == "2025-01-02T10:00:00+00:00"


def test_a_source_naming_a_message_is_kept_but_marked_as_the_files_word():
    memories, _ = parse_import(_doc(), "7")
    assert memories[0]["sources"] == [{"message_id": "555", "guild_id": "dm", "at": "2025-01-01T00:00:00+00:00",
                                       "imported": True}]



def test_a_memory_without_sources_marks_its_origin_as_the_files_word():
    """``"sources": []`` with an origin naming someone's message: the origin stands in as the source, and is
    marked too (unmarked, an edit of that message was learned as the importer's)."""
    memories, _ = parse_import(_doc(sources=[], origin={"guild_id": "dm", "message_id": "444",
                                                         "source": "extraction"}), "7")
    assert memories[0]["sources"] == [{"guild_id": "dm", "message_id": "444", "source": "extraction",
                                       "imported": True}]
    now = datetime.now(timezone.utc)
    assert StoredMemory("a1", "bait", memories[0]["origin"], now, now, tuple(memories[0]["sources"])).imported_from("444")

@pytest.mark.parametrize("bad, says", [
    ({"origin": {"guild_id": {"deep": [1, 2, 3]}}}, "origin.guild_id"),
    ({"sources": [{"message_id": "1", "x": [[[]]]}]}, "sources.0.x"),
    ({"created_at": "yesterday"}, "created_at"),
    # IDs the bot turns into numbers: one "x" stopped the start-up sweep of servers for every server
    ({"origin": {"guild_id": "x"}}, "origin"),
    ({"sources": [{"message_id": "1", "guild_id": "\u00b2"}]}, "sources.0"),  # "²".isdigit() is True
    ({"origin": {"guild_id": -5}}, "origin"),
])
def test_provenance_holds_plain_values_only(bad, says):
    with pytest.raises(ImportRefused, match=says):
        parse_import(_doc(**bad), "7")


@pytest.mark.parametrize("bad, says", [
    # A NUL stopped PostgreSQL's replay of the import for good; padded, /memories edit could never find it.
    ({"id": "a\x00b"}, "id"),
    ({"id": " a1 "}, "id"),
    ({"id": "   "}, "id"),
    ({"content": "   "}, "content"),
    # "never" placeholders: year 1 and 9999 overflowed recall's date arithmetic on every reply
    ({"created_at": "0001-01-01T00:00:00Z"}, "created_at"),
    ({"updated_at": "9999-12-31T23:59:59Z"}, "updated_at"),
    ({"sources": [{"message_id": "1", "at": "2999-01-01T00:00:00+00:00"}], "created_at": "3000-01-01T00:00:00Z"},
     "created_at"),
])
def test_ids_blank_texts_and_impossible_times_are_refused(bad, says):
    with pytest.raises(ImportRefused, match=says):
        parse_import(_doc(**bad), "7")


def test_a_history_line_with_an_impossible_time_or_id_is_refused():
    import json

    doc = json.loads(_doc())
    line = {"key": "h1", "memory_key": "a1", "action": "created", "actor": "user", "at": "2025-01-01T00:00:00+00:00",
            "after": "bait", "origin": {}}
    for bad, says in (({"at": "0001-01-01T00:00:00+00:00"}, "at"), ({"key": "h 1"}, "key"),
                      ({"memory_key": "a1\x00"}, "memory_key")):
        with pytest.raises(ImportRefused, match=says):
            parse_import(json.dumps({**doc, "history": [{**line, **bad}]}).encode(), "7")
    assert len(parse_import(json.dumps({**doc, "history": [line]}).encode(), "7")[1]) == 1


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-le", "utf-32"])
def test_a_file_resaved_with_a_byte_order_mark_or_as_utf16_imports(encoding):
    """Notepad saves "UTF-8 with BOM", Windows PowerShell's ``>`` writes UTF-16: both were refused."""
    text = _doc(content="café ☕").decode("utf-8")
    memories, _ = parse_import(text.encode(encoding), "7")
    assert memories[0]["content"] == "café ☕"


def test_a_file_that_is_not_json_says_where_it_breaks():
    with pytest.raises(ImportRefused, match=r"not valid JSON \(line 1, column"):
        parse_import(b'{"format": ', "7")


def test_ids_as_exports_write_them_are_accepted_the_consoles_included():
    memories, _ = parse_import(_doc(origin={"guild_id": 900, "channel_id": "901", "message_id": ""},
                                    sources=[{"message_id": "555", "guild_id": "dm", "channel_id": None},
                                             {"message_id": "console-3", "guild_id": "dm",
                                              "channel_id": "console:main"}]), "7")
    assert memories[0]["origin"]["guild_id"] == 900
    assert memories[0]["sources"][1]["message_id"] == "console-3"


def test_a_file_of_millions_of_tiny_entries_is_refused_before_it_is_parsed():
    """A 25 KB gzip of "[[],[],..." unpacks to 25 MB of empty lists, which ``json.loads`` builds into about
    half a gigabyte: counted on the bytes first, it is refused without being built."""
    bomb = gzip.compress(b"[" + b"[]," * 8_000_000 + b"[]]")
    assert len(bomb) < 100_000
    with pytest.raises(ImportRefused, match="far more entries than an export"):
        parse_import(bomb, "7")
    with pytest.raises(ImportRefused, match="far more entries than an export"):
        parse_import(gzip.compress(b"[" + b"1," * 3_000_000 + b"1]"), "7")


def test_a_file_nesting_thousands_deep_is_refused_with_a_reason():
    with pytest.raises(ImportRefused, match="nests too deeply"):
        parse_import(b"[" * 200_000 + b"]" * 200_000, "7")


def test_a_moderators_id_is_not_handed_to_the_member_they_purged():
    from bot.engine.memories.records import HistoryEntry

    lines = [HistoryEntry("h1", "*", "deleted", "moderator", "424242", "2026-05-01T00:00:00+00:00", None, None,
                          {"guild_id": "9", "erased": 3}),
             HistoryEntry("h2", "k1", "created", "user", "7", "2026-05-01T00:00:00+00:00", None, "x", {})]
    exported = export_memories("7", [], lines)["history"]
    assert exported[0]["actor"] == "moderator" and exported[0]["actor_id"] is None
    assert exported[1]["actor_id"] == "7"  # their own actions keep their own ID


@pytest.mark.parametrize("document", [
    lambda: _doc().replace(b'"version": 2', b'"version": "' + b"v" * 5000 + b'"'),
    lambda: _doc(origin={"guild_id": "dm", "k" * 5000: 1}),
    lambda: _doc(content=None, **{"x" * 3000: "y"}),
])
def test_a_refusal_stays_one_short_sentence_whatever_the_file_holds(document):
    """The reason goes into an ephemeral answer (2,000 characters at most, with the sentence around it): a
    version or a key the file makes thousands of characters long is cut, not sent back whole."""
    with pytest.raises(ImportRefused) as refused:
        parse_import(document(), "7")
    assert 0 < len(str(refused.value)) <= 300


def test_what_the_bot_writes_over_years_imports_back_keeping_the_newest_sources():
    """A fact patched from hundreds of messages over the years holds more sources than an import took
    (200), and the whole file was refused: the member's own export, after a wipe, could not come back.
    The newest 200 are kept (the oldest say least about where the fact stands now)."""
    memory = StoredMemory(key="k1", content="likes tea", created_at=WHEN, updated_at=WHEN,
                          origin={"guild_id": "1", "channel_id": "2", "message_id": "3"},
                          sources=[{"guild_id": "1", "channel_id": "2", "message_id": str(1000 + i)} for i in range(250)])
    data, _ = export_file(export_memories("7", [memory]), 10**9)
    (restored,), _ = parse_import(data, "7")
    assert [s["message_id"] for s in restored["sources"]] == [str(1000 + i) for i in range(50, 250)]


def test_trimming_a_memorys_sources_keeps_every_place_it_was_learned_in():
    """A DM fact patched 200 times in a server came back from an import as that server's alone: the
    strictest-place rule then let it into the server's public channels."""
    memory = StoredMemory(key="k1", content="is job hunting", created_at=WHEN, updated_at=WHEN,
                          origin={"guild_id": "dm", "channel_id": "5", "message_id": "4"},
                          sources=[{"guild_id": "dm", "channel_id": "5", "message_id": "4"},
                                   {"guild_id": "22", "channel_id": "6", "message_id": "8"}]
                          + [{"guild_id": "111", "channel_id": "2", "message_id": str(1000 + i)} for i in range(200)])
    data, _ = export_file(export_memories("7", [memory]), 10**9)
    (restored,), _ = parse_import(data, "7")
    now = datetime.now(timezone.utc)
    back = StoredMemory("k1", "is job hunting", restored["origin"], now, now, tuple(restored["sources"]))
    assert back.places() == {"dm", "22", "111"}
    assert len(restored["sources"]) == 202 and back.message_ids() == {str(1000 + i) for i in range(200)}


async def test_extraction_keeps_a_memory_within_what_an_import_takes(tmp_path):
    """A model that writes a 3,000-character "fact": stored cut to the import's limit, so the export of it
    (and of its change-log entry) imports back."""
    from langchain_core.messages import AIMessage

    from bot.engine.memories.export import MAX_CONTENT
    from bot.engine.state import Speaker
    from tests.conftest import ScriptedChatModel, make_settings, running_engine, tool_call

    def script(call):
        if call.is_extraction:
            return AIMessage(content="", tool_calls=[tool_call("Memory", {"content": "likes " + "tea " * 750,
                                                                          "source_messages": [1]})])
        return "Noted!"

    ann = Speaker(user_id="7", name="Ann", guild_id="9", channel_id="c", message_id="m1")
    async with running_engine(make_settings(tmp_path), ScriptedChatModel(script)) as engine:
        await engine.reply("c", ann, "I like tea")
        await engine.scheduler.flush()
        (memory,) = await engine.memories.list("7")
        assert memory.content.startswith("likes tea") and len(memory.content) <= MAX_CONTENT
        history = await engine.memories.history("7")
        data, _ = export_file(export_memories("7", await engine.memories.list("7"), history), 10**9)
        restored, entries = parse_import(data, "7")
        assert [m["content"] for m in restored] == [memory.content] and entries


def test_a_memory_stored_longer_than_an_import_takes_is_cut_not_refused():
    """Memories stored before extraction kept them within 2,000 characters (and their change-log texts)
    still import back, cut as extraction cuts them."""
    long = "likes " + "tea " * 750
    memory = StoredMemory(key="k1", content=long, created_at=WHEN, updated_at=WHEN,
                          origin={"guild_id": "1", "channel_id": "2", "message_id": "3"})
    data, _ = export_file(export_memories("7", [memory]), 10**9)
    (restored,), _ = parse_import(data, "7")
    assert restored["content"].startswith("likes tea") and len(restored["content"]) <= 2000


def test_a_change_log_past_what_an_import_takes_is_refused_before_it_is_serialised(monkeypatch):
    """Hundreds of megabytes of change log (imports add to it) were serialised twice and gzipped per export."""
    import bot.engine.memories.export as export

    def never(*_a, **_k):
        raise AssertionError("serialised")

    text = "x" * 2000
    history = [{"key": str(i), "before": text, "after": text} for i in range(MAX_IMPORT_BYTES // 4000 + 1)]
    monkeypatch.setattr(export.json, "dumps", never)
    assert export_file({"memories": [], "history": history}) is None
