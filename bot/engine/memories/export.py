"""The JSON document a person gets from an export, and the strict check before one is imported back.

An import is validated completely before anything is written, and then written in one batch: a bad file
is refused with a reason and changes nothing.
"""

from __future__ import annotations

import gzip
import json
import zlib
from datetime import datetime, timezone
from typing import Any, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bot.engine.errors import ImportRefused
from bot.engine.memories.records import HistoryEntry, StoredMemory

FORMAT = "remembering-bot.memories"
EXPORT_VERSION = 2
# What an import reads (after decompression): larger than any export the caps produce in practice (1,000
# memories of 2,000 characters with a few changes each is about 6 MB as indented JSON), small enough to
# validate in a second or two off the event loop.
MAX_IMPORT_BYTES = 25_000_000
UPLOAD_LIMIT = 10_000_000  # what Discord takes from a bot without a boosted server (10 MiB), with room
MAX_MEMORIES = 5000
MAX_CONTENT = 2000



def export_memories(user_id: str, memories: Sequence[StoredMemory], history: Sequence[HistoryEntry] = ()) -> dict:
    """A self-describing, versioned export of one person's memories and their change log."""
    return {
        "format": FORMAT,
        "version": EXPORT_VERSION,
        "user_id": str(user_id),
        "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "memories": [
            {
                "id": m.key,
                "content": m.content,
                "origin": m.origin,
                "sources": list(m.sources),
                "created_at": m.created_at.isoformat(),
                "updated_at": m.updated_at.isoformat(),
            }
            for m in memories
        ],
        "history": [h.to_json() for h in history],
    }


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Memory(_Strict):
    id: str = Field(min_length=1, max_length=64)
    content: str = Field(min_length=1, max_length=MAX_CONTENT)
    origin: dict[str, Any]
    sources: list[dict[str, Any]] = Field(default_factory=list, max_length=1000)
    created_at: datetime
    updated_at: datetime


class _Entry(_Strict):
    key: str = Field(min_length=1, max_length=64)
    memory_key: str = Field(min_length=1, max_length=64)
    action: str = Field(pattern="^(created|updated|deleted)$")
    actor: str = Field(pattern="^(extraction|user|moderator|import)$")
    actor_id: str | None = None
    at: str
    before: str | None = Field(default=None, max_length=MAX_CONTENT)
    after: str | None = Field(default=None, max_length=MAX_CONTENT)
    origin: dict[str, Any]


class _Document(_Strict):
    format: str
    version: int
    user_id: str
    exported_at: str
    memories: list[_Memory] = Field(max_length=MAX_MEMORIES)
    history: list[_Entry] = Field(default_factory=list, max_length=MAX_MEMORIES * 20)


def export_file(document: dict, limit: int = UPLOAD_LIMIT) -> tuple[bytes, str] | None:
    """The export as file bytes and a file name ending, within ``limit`` bytes, or None if it cannot fit.

    Indented JSON when it fits (a person can read it), compact JSON next, then gzip of that; ``parse_import``
    takes all three back, so whatever the bot hands out it can import again.
    """
    pretty = json.dumps(document, indent=2, ensure_ascii=False).encode("utf-8")
    if len(pretty) <= limit:
        return pretty, ".json"
    compact = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if len(compact) <= limit:
        return compact, ".json"
    packed = gzip.compress(compact, compresslevel=9, mtime=0)
    return (packed, ".json.gz") if len(packed) <= limit and len(compact) <= MAX_IMPORT_BYTES else None


def _unpacked(data: bytes) -> bytes:
    """The JSON bytes of an export file, gunzipped if it is gzip (read at most ``MAX_IMPORT_BYTES``)."""
    if data[:2] != b"\x1f\x8b":
        return data
    try:
        inflater = zlib.decompressobj(wbits=31)  # gzip framing
        out = inflater.decompress(data, MAX_IMPORT_BYTES + 1)
    except zlib.error:
        raise ImportRefused("the file is not a valid gzip file") from None
    if len(out) > MAX_IMPORT_BYTES:
        raise ImportRefused(f"the file unpacks to more than {MAX_IMPORT_BYTES // 1_000_000} MB")
    return out


def parse_import(data: bytes, user_id: str) -> tuple[list[dict], list[dict]]:
    """Check an export file for ``user_id``; return (memories, history) ready for ``restore``.

    Takes what ``export_file`` makes (JSON, or gzip of it). CPU-bound for a large file: callers on the
    event loop run it in a thread.
    """
    if len(data) > MAX_IMPORT_BYTES:
        raise ImportRefused(f"the file is larger than {MAX_IMPORT_BYTES // 1_000_000} MB")
    data = _unpacked(data)
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ImportRefused(f"the file is not valid JSON ({exc.__class__.__name__})") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise ImportRefused("this is not a memories export from this bot")
    if raw.get("version") != EXPORT_VERSION:
        raise ImportRefused(f"export version {raw.get('version')!r} is not supported (expected {EXPORT_VERSION})")
    try:
        doc = _Document.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ImportRefused(f"the file is not valid at {where}: {first['msg']}") from None
    if doc.user_id != str(user_id):
        raise ImportRefused("this export belongs to another account")
    ids = [m.id for m in doc.memories]
    if len(set(ids)) != len(ids):
        raise ImportRefused("the file lists the same memory twice")
    memories = [
        {**m.model_dump(), "created_at": m.created_at.isoformat(), "updated_at": m.updated_at.isoformat()}
        for m in doc.memories
    ]
    return memories, [e.model_dump() for e in doc.history]
