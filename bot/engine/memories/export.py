"""The JSON document a person gets from an export, and the strict check before one is imported back.

An import is validated completely before anything is written, and then written in one batch: a bad file
is refused with a reason and changes nothing.
"""

from __future__ import annotations

import gzip
import json
import zlib
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any, Sequence

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from bot.engine.errors import ImportRefused
from bot.engine.memories.records import MAX_CONTENT, HistoryEntry, StoredMemory, as_utc, clipped, is_snowflake

FORMAT = "remembering-bot.memories"
EXPORT_VERSION = 2
# What an import reads (after decompression): larger than any export the caps produce in practice (1,000
# memories of 2,000 characters with a few changes each is about 6 MB as indented JSON), small enough to
# validate in a second or two off the event loop.
MAX_IMPORT_BYTES = 25_000_000
UPLOAD_LIMIT = 10_000_000  # what Discord takes from a bot without a boosted server (10 MiB), with room
MAX_MEMORIES = 5000
MAX_SOURCES = 200  # per memory kept by an import: the newest (a fact patched for years holds more)
MAX_HISTORY = MAX_MEMORIES * 20  # change-log entries an import keeps (the newest), and a person may hold after it
# What ``json.loads`` may build, counted on the bytes before it runs: a large real export (thousands of
# memories, their sources and changes) holds about 240,000 objects and lists (a memory, its origin, its
# sources; two a change-log entry) and 1.4 million commas; the count also bounds the message-index rows
# one import writes in its one batch (a source is an object). A 25 KB gzip of "[[],[],..." unpacks to 25 MB
# of empty lists, which Python builds into about half a gigabyte; counting first refuses it with a reason,
# in milliseconds (brackets and commas inside texts count too, which only errs on the side of refusing a
# file no export looks like).
MAX_CONTAINERS = 400_000
MAX_COMMAS = 2_000_000



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
                # "imported" is the bot's own note on a source an import brought (``_imported_source``): it is
                # made again by the next import, so an export round-trips exactly.
                "sources": [{k: v for k, v in src.items() if k != "imported"} for src in m.sources],
                "created_at": m.created_at.isoformat(),
                "updated_at": m.updated_at.isoformat(),
            }
            for m in memories
        ],
        "history": [_exported_entry(h) for h in history],
    }


def _exported_entry(entry: HistoryEntry) -> dict:
    """A change-log line as exported: a moderator's ID is not handed to the member they acted on (lines
    written before it stopped being stored still carry it; the mod log keeps it for the server's staff)."""
    out = entry.to_json()
    if out.get("actor") == "moderator":
        out["actor_id"] = None
    return out


def _aware_text(value: str) -> str:
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError("not an ISO 8601 time") from None
    return _plausible(when).isoformat()


#: The earliest time a file may name. A year-1 or year-9999 "never" placeholder imported, and every reply to
#: its owner failed (recall's date arithmetic overflowed) until they found the memory; before Discord there
#: was no message to learn a fact from, and a time past the present is a typing error.
EARLIEST = datetime(2015, 1, 1, tzinfo=timezone.utc)


def _plausible(value: datetime) -> datetime:
    value = as_utc(value)
    if not EARLIEST <= value <= datetime.now(timezone.utc) + timedelta(days=1):
        raise ValueError("a time before 2015 or in the future")
    return value


#: The IDs a file may use for memories and change-log lines: what the bot writes (UUIDs) and plainer
#: hand-written ones. A NUL in one stopped PostgreSQL's replay of the import for good, and spaces around
#: one made the memory unreachable by ``/memories edit`` and ``delete`` (which strip what they are given).
Key = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
Time = Annotated[datetime, AfterValidator(_plausible)]
TimeText = Annotated[str, Field(max_length=64), AfterValidator(_aware_text)]
# Provenance holds plain values only (IDs, a source kind, a time, a flag, a count): a file nesting objects
# in it is refused before anything is read deeper, and nothing a file says is stored as structure.
Scalar = Annotated[str, Field(max_length=100)] | int | bool | None
def _server_id(provenance: dict[str, Any]) -> dict[str, Any]:
    """A server a file names is a Discord server ID (a snowflake), ``dm``, or none.

    The bot turns server IDs into numbers to ask Discord about (whether it is still in a server, which
    shard owns it): one ``"guild_id": "x"`` stopped the start-up sweep of servers that removed the bot for
    every server. Channel and message IDs stay as written: the console's own are ``console:...`` and
    ``console-N``, and every place that reads one as a number checks it first (``cogs._memory_format``).
    """
    value = provenance.get("guild_id")
    if value not in (None, "", "dm") and not is_snowflake(value):
        raise ValueError("guild_id is not a Discord server ID")
    return provenance


Provenance = Annotated[dict[Annotated[str, Field(max_length=32)], Scalar], Field(max_length=16),
                       AfterValidator(_server_id)]


def _newest(most: int) -> BeforeValidator:
    """Keep the last ``most`` items of a list (files list oldest first): what the bot itself writes has no
    such cap (sources a fact gathered over years, its change log), and its own export must import back."""
    def keep(value: object) -> object:
        return value[-most:] if isinstance(value, list) else value
    return BeforeValidator(keep)


def _newest_sources(most: int) -> BeforeValidator:
    """Keep a memory's last ``most`` sources, and one place-only source (no message) for each server (or
    DMs) that only the dropped ones named.

    A memory's places are its sources': the strictest of them decides where it may be used. Trimmed bare,
    a DM fact patched 200 times in a server came back as that server's alone, and was used in its public
    channels again (the DM-sharing switch off). A file naming more than a hundred places beyond those kept
    is refused: no memory gathers that many.
    """
    def keep(value: object) -> object:
        if not isinstance(value, list) or len(value) <= most:
            return value
        kept = value[-most:]
        have = {s.get("guild_id") for s in kept if isinstance(s, dict)}
        places = []
        for source in value[:-most]:
            place = source.get("guild_id") if isinstance(source, dict) else None
            if place is not None and not isinstance(place, (dict, list)) and place not in have:
                have.add(place)
                places.append({"guild_id": place, "message_id": "", "source": "import"})
        if len(places) > 100:
            raise ValueError("the sources name more places than a memory can have")
        return places + kept
    return BeforeValidator(keep)


#: A text longer than a memory may be (one the bot stored before extraction kept them within it) is cut
#: as extraction cuts them (``records.clipped``), not refused: the bot's own export imports back.
_clip = BeforeValidator(lambda v: clipped(v) if isinstance(v, str) else v)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Memory(_Strict):
    id: Key
    content: Annotated[str, _clip] = Field(min_length=1, max_length=MAX_CONTENT, pattern=r"\S")
    origin: Provenance
    sources: Annotated[list[Provenance], _newest_sources(MAX_SOURCES)] = Field(default_factory=list)
    created_at: Time
    updated_at: Time


class _Entry(_Strict):
    key: Key
    memory_key: Key
    action: str = Field(pattern="^(created|updated|deleted)$")
    actor: str = Field(pattern="^(extraction|user|moderator|import)$")
    actor_id: str | None = Field(default=None, max_length=32)
    at: TimeText
    before: Annotated[str | None, _clip] = Field(default=None, max_length=MAX_CONTENT)
    after: Annotated[str | None, _clip] = Field(default=None, max_length=MAX_CONTENT)
    origin: Provenance


class _Document(_Strict):
    format: str
    version: int
    user_id: str
    exported_at: str
    memories: list[_Memory] = Field(max_length=MAX_MEMORIES)
    history: Annotated[list[_Entry], _newest(MAX_HISTORY)] = Field(default_factory=list)


def export_file(document: dict, limit: int = UPLOAD_LIMIT) -> tuple[bytes, str] | None:
    """The export as file bytes and a file name ending, within ``limit`` bytes, or None if it cannot fit.

    Indented JSON when it fits (a person can read it), compact JSON next, then gzip of that; ``parse_import``
    takes all three back, so whatever the bot hands out it can import again.

    A document whose texts alone pass what an import takes is refused before any of it is serialised: a
    change log of hundreds of megabytes (imports can add to it) was turned into JSON twice and gzipped.
    """
    if _text_chars(document) > MAX_IMPORT_BYTES:  # its JSON holds at least as many bytes
        return None
    pretty = json.dumps(document, indent=2, ensure_ascii=False).encode("utf-8")
    if len(pretty) <= limit:
        return pretty, ".json"
    compact = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if len(compact) <= limit:
        return compact, ".json"
    packed = gzip.compress(compact, compresslevel=9, mtime=0)
    return (packed, ".json.gz") if len(packed) <= limit and len(compact) <= MAX_IMPORT_BYTES else None


def _text_chars(document: dict) -> int:
    """The characters of the memories' and the change log's texts (a lower bound on the JSON's bytes)."""
    memories = sum(len(m.get("content") or "") for m in document.get("memories", ()))
    return memories + sum(len(e.get("before") or "") + len(e.get("after") or "") for e in document.get("history", ()))


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
    if data.count(b"{") + data.count(b"[") > MAX_CONTAINERS or data.count(b",") > MAX_COMMAS:
        raise ImportRefused("the file holds far more entries than an export can")
    try:
        # From bytes, json detects UTF-8 (with or without a byte-order mark, as Notepad saves it) and UTF-16
        # or UTF-32 (Windows PowerShell's ``>``): a file a person re-saved while fixing a memory imports.
        raw = json.loads(data)
    except UnicodeDecodeError:
        raise ImportRefused("the file is not saved as UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ImportRefused(f"the file is not valid JSON (line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:  # "[[[[..." thousands deep: no export looks like that
        raise ImportRefused("the file nests too deeply to be an export") from None
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
        # A file without sources falls back on its origin, marked as the file's word too: unmarked, an
        # origin naming someone else's message would make its edits learned as the importer's.
        {**m.model_dump(), "sources": [_imported_source(x) for x in (m.sources or [m.origin])],
         "created_at": m.created_at.isoformat(), "updated_at": m.updated_at.isoformat()}
        for m in doc.memories
    ]
    return memories, [e.model_dump() for e in doc.history]


def _imported_source(source: dict[str, Any]) -> dict[str, Any]:
    """A source as a file states it, marked as the file's word (``"imported": true``).

    A named message stays linked, so deleting it still takes the memory along, as it would have before the
    export. But the bot never saw that message teach this person anything, and a file can name any message
    (someone else's, in a channel they cannot read): an edit of it must not be learned as theirs
    (``StoredMemory.imported_from``). And a file can name any server, one this bot was never in (an export
    from another bot): the check at READY does not take an imported place for a server the bot was in and
    left, which swept the imported memories a week later (``erasure/departures.servers_with_data``).
    """
    return {**source, "imported": True}
