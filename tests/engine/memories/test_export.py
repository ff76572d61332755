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
