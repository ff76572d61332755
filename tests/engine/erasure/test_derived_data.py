"""Derived data goes with what it was derived from: after a wipe, a message deletion and an edit, neither a
memory's words nor the bytes of its embedding are anywhere in the SQLite data directory (WAL files
included), and on PostgreSQL its vector rows are gone. ``/memories delete`` and ``edit`` drop the vector
of the old text too."""

from __future__ import annotations

import asyncio
import hashlib
from contextlib import asynccontextmanager

import numpy as np
from langchain_core.embeddings import Embeddings

from bot.engine.memories.records import Actor
from bot.engine.state import Speaker
from tests.conftest import Call, ScriptedChatModel, default_script, make_settings, record_figure, running_engine

ALICE, BOB = "802", "803"


def no_echo(call: Call):
    """Answers that do not repeat what was said, so a byte search finds only what the bot kept of it."""
    return default_script(call) if call.is_extraction else "Noted!"


class HashEmbeddings(Embeddings):
    """Each text gets its own 24 numbers (from its hash): a vector whose bytes can be searched for on disk."""

    def _vec(self, text: str) -> list[float]:
        raw = hashlib.sha256(text.encode()).digest()
        return [1.0 + b for b in raw[:24]]

    def embed_documents(self, texts):
        return [self._vec(t) for t in texts]

    def embed_query(self, text):
        return self._vec(text)


def files_with(settings, needle: bytes) -> list[str]:
    """The files of the SQLite data directory holding ``needle`` (PostgreSQL keeps no files there)."""
    if settings.storage.backend != "sqlite":
        return []
    return [str(p) for p in settings.bot.data_dir.rglob("*") if p.is_file() and needle in p.read_bytes()]


async def vector_rows(engine, user: str, key: str) -> int:
    """How many rows of the backend's vector table hold this memory (read with the backend's own SQL)."""
    storage = engine.storage
    if engine.settings.storage.backend == "sqlite":
        cur = await storage.vectors._db.conn.execute(
            "SELECT COUNT(*) FROM embeddings WHERE user_id=? AND memory_key=?", (user, key))
        return (await cur.fetchone())[0]
    async with storage.vectors._db.connection() as conn:
        cur = await conn.execute("SELECT COUNT(*) AS n FROM bot_embeddings WHERE user_id = %s AND memory_key = %s",
                                 (user, key))
        return int((await cur.fetchone())["n"])


async def learned(engine, speaker: Speaker, text: str) -> tuple[str, bytes]:
    """Say ``text``, learn it, index it; return the memory's key and its vector's bytes as stored."""
    await engine.reply(speaker.channel_id, speaker, text)
    await engine.scheduler.flush()
    await engine.semantic.drain()
    (memory,) = [m for m in await engine.memories.list(speaker.user_id) if m.content == text]
    cached = await engine.storage.vectors.get(speaker.user_id)
    assert memory.key in cached, "the memory should have been indexed"
    vector = cached[memory.key][1]
    expected = (np.asarray(HashEmbeddings()._vec(text), dtype=np.float32))
    assert np.allclose(np.frombuffer(vector, dtype=np.float32), expected / np.linalg.norm(expected))
    return memory.key, vector


async def test_no_word_and_no_vector_byte_is_left_after_a_wipe_a_deletion_and_an_edit(settings):
    async with running_engine(settings, ScriptedChatModel(no_echo), embeddings=HashEmbeddings()) as engine:
        engine.eraser.owed.quiet = 0.05  # (the batch's quiet period, short for the test)

        def alice(message_id: str) -> Speaker:
            return Speaker(user_id=ALICE, name="Alice", guild_id="9", channel_id="c", message_id=message_id)

        bob = Speaker(user_id=BOB, name="Bob", guild_id="9", channel_id="b", message_id="700")
        wiped = await learned(engine, bob, "I like wipecanary_quokka")
        deleted = await learned(engine, alice("701"), "I like deletecanary_okapi")
        edited = await learned(engine, alice("702"), "I like editcanary_axolotl")
        kept = await learned(engine, alice("703"), "I like rowing")
        await engine.close()  # (a checkpoint: the canaries are in the files now)
        engine.scheduler._closed = False
        for word in ("wipecanary_quokka", "deletecanary_okapi", "editcanary_axolotl"):
            assert settings.storage.backend != "sqlite" or files_with(settings, word.encode())
        for _key, vector in (wiped, deleted, edited):
            assert settings.storage.backend != "sqlite" or files_with(settings, vector)

        await engine.erase_person(BOB)
        await engine.messages_deleted("c", {"701"})
        assert await engine.message_edited("c", "702", "I like editcanary_newt")
        await engine.scheduler.flush()
        await engine.semantic.drain()
        await engine.eraser.owed.settle()  # the deletion's and the edit's one (batched) compaction

        contents = sorted(m.content for m in await engine.memories.list(ALICE))
        assert contents == ["I like editcanary_newt", "I like rowing"]
        assert await engine.memories.list(BOB) == []
        for word in ("wipecanary_quokka", "deletecanary_okapi", "editcanary_axolotl"):
            assert files_with(settings, word.encode()) == [], word
        for (key, vector), user in ((wiped, BOB), (deleted, ALICE), (edited, ALICE)):
            assert files_with(settings, vector) == []
            assert await vector_rows(engine, user, key) == 0
        assert await vector_rows(engine, ALICE, kept[0]) == 1  # the rest of her index stays
        assert await engine.storage.erasures.unfinished() == []
        record_figure("removals checked for words and vector bytes", 3,
                      "a wipe, a deletion and an edit: 0 words and 0 vector bytes left, 0 vector rows")


async def test_the_persons_delete_and_edit_drop_the_old_texts_vector(settings):
    async with running_engine(settings, ScriptedChatModel(no_echo), embeddings=HashEmbeddings()) as engine:
        ann = Speaker(user_id=ALICE, name="Alice", guild_id="9", channel_id="c", message_id="801")
        gone, _ = await learned(engine, ann, "I like delete_by_hand_canary")
        fixed, _ = await learned(engine, Speaker(**{**ann.__dict__, "message_id": "802"}), "I like edit_by_hand_canary")
        by = Actor("user", ALICE)
        changes = await engine.delete_memories(ALICE, [gone], by=by)
        assert changes.deleted == [gone]
        assert await engine.edit_memory(ALICE, fixed, "Alice likes fixed_by_hand", {"guild_id": "9"}, by=by)
        assert await vector_rows(engine, ALICE, gone) == 0
        assert await vector_rows(engine, ALICE, fixed) == 0  # the old text's; the new one is made on demand
        assert await engine.storage.erasures.unfinished() == []
        entries = await engine.memory_history(ALICE, gone)
        assert [e.action for e in entries] == ["created", "deleted"]  # the change log keeps its entry


async def test_a_vector_row_left_by_a_crash_is_dropped_at_the_next_indexing(settings):
    """Extraction's own deletions (and the cap's drops) are one batch; their vectors go right after. A
    crash in between leaves a row naming a key that no longer exists: the person's next indexing drops it."""
    async with running_engine(settings, ScriptedChatModel(no_echo), embeddings=HashEmbeddings()) as engine:
        key, _ = await learned(engine, Speaker(user_id=ALICE, name="Alice", guild_id="9", channel_id="c",
                                               message_id="901"), "I like leftover_vector_canary")
        await engine.memories.delete(ALICE, key)  # as if the process died before the vector went
        assert await vector_rows(engine, ALICE, key) == 1
        await learned(engine, Speaker(user_id=ALICE, name="Alice", guild_id="9", channel_id="c", message_id="902"),
                      "I like rowing")
        assert await vector_rows(engine, ALICE, key) == 0


async def test_the_caps_drop_takes_the_dropped_memorys_vector(tmp_path, backend):
    settings = make_settings(tmp_path / "data", backend, memory={"max_per_person": 1})
    async with running_engine(settings, ScriptedChatModel(no_echo), embeddings=HashEmbeddings()) as engine:
        engine.eraser.owed.quiet = 0.05  # (the batch's quiet period, short for the test)

        def alice(message_id: str) -> Speaker:
            return Speaker(user_id=ALICE, name="Alice", guild_id="9", channel_id="c", message_id=message_id)

        first, _ = await learned(engine, alice("911"), "I like capdrop_canary")
        await learned(engine, alice("912"), "I like rowing")
        assert [m.content for m in await engine.memories.list(ALICE)] == ["I like rowing"]
        assert await vector_rows(engine, ALICE, first) == 0
        # (No byte check here: the change log keeps the dropped memory's text by design, "deleted by
        # extraction", so the drop is not an erasure and runs no compaction.)


async def test_a_removed_servers_settings_text_is_not_left_on_disk_after_its_sweep(tmp_path, backend):
    """Admins' persona and instructions are text too: they go before the server's job, so its one
    compaction (SQLite WAL truncation, PostgreSQL VACUUM) takes their old pages with the rest."""
    from bot.engine.policy.server_settings import channel_persona

    settings = make_settings(tmp_path / "data", backend, retention={"removed_server_days": 0})
    canary = b"settingscanary_zz"
    async with running_engine(settings, ScriptedChatModel(no_echo)) as engine:
        await engine.reply("c", Speaker(user_id="1", name="A", guild_id="5", channel_id="c", message_id="5"), "hello")
        await engine.guild_settings.change("5", channel_persona("c", "persona text " + canary.decode()), by="admin")
        await engine.storage.maintenance.compact()
        if backend.name == "sqlite":
            assert files_with(settings, canary)  # the check can see it
        await engine.server_removed("5")
        assert await engine.guild_settings.stored("5") is None
        assert files_with(settings, canary) == []
        if backend.name == "postgres":
            from bot.storage.postgres.maintenance import ERASURE_TABLES
            from tests.storage.test_postgres import page_bytes

            assert "bot_guild_settings" in ERASURE_TABLES
            assert canary not in await page_bytes(backend.database_url, ("bot_guild_settings",))


class SlowEmbeddings(HashEmbeddings):
    """A slow embedding endpoint: a second a batch, so another process acts while a vector is being made."""

    async def aembed_documents(self, texts):
        await asyncio.sleep(1.0)
        return self.embed_documents(texts)


@asynccontextmanager
async def slow_indexing_beside(tmp_path, pg_backend):
    """Two processes on one PostgreSQL database: A (quick embedder) and B (slow); yields (a, b)."""
    a_settings, b_settings = make_settings(tmp_path / "a", pg_backend), make_settings(tmp_path / "b", pg_backend)
    async with running_engine(a_settings, ScriptedChatModel(no_echo), embeddings=HashEmbeddings()) as a, \
            running_engine(b_settings, ScriptedChatModel(no_echo), embeddings=SlowEmbeddings()) as b:
        yield a, b


async def test_another_processs_indexing_writes_no_vector_back_after_a_wipe(tmp_path, pg_backend):
    """The semantic index's pause is one process's. Process B learned a memory and started indexing it
    (a slow embedding endpoint); process A wiped the person meanwhile. B's write comes after "Done": the
    database refuses it, since the memory is gone (and, during the wipe, its claim is held)."""
    bob = Speaker(user_id=BOB, name="Bob", guild_id="9", channel_id="b", message_id="700")
    async with slow_indexing_beside(tmp_path, pg_backend) as (a, b):
        await b.reply("b", bob, "I like vectorcanary_quokka")
        await b.scheduler.flush()  # extraction in B starts its background indexing
        assert [m.content for m in await b.memories.list(BOB)] == ["I like vectorcanary_quokka"]
        await a.erase_person(BOB)
        await b.semantic.drain()
        assert await b.storage.vectors.get(BOB) == {}
        key = "gone-memory"
        await b.storage.vectors.put(BOB, [(key, "v", b"\x01")])  # the storage rule itself
        assert await vector_rows(b, BOB, key) == 0


async def test_another_processs_indexing_writes_no_vector_of_a_text_edited_meanwhile(tmp_path, pg_backend):
    """Process B started embedding a memory (a slow endpoint); process A corrected it by hand meanwhile
    (``/memories edit``: the old text's vector goes). B's vector of the old text comes after: the database
    writes it only while the memory still says what was embedded, so no vector of the old text is left."""
    bob = Speaker(user_id=BOB, name="Bob", guild_id="9", channel_id="b", message_id="710")
    async with slow_indexing_beside(tmp_path, pg_backend) as (a, b):
        await b.reply("b", bob, "I like oldtext_canary")
        await b.scheduler.flush()  # extraction in B starts its background indexing of the old text
        (memory,) = await b.memories.list(BOB)
        assert await a.edit_memory(BOB, memory.key, "Bob likes newtext", {"guild_id": "9"}, by=Actor("user", BOB))
        await b.semantic.drain()
        old = np.asarray(HashEmbeddings()._vec("I like oldtext_canary"), dtype=np.float32)
        old_bytes = (old / np.linalg.norm(old)).tobytes()
        assert all(vector != old_bytes for _, vector in (await b.storage.vectors.get(BOB)).values())


async def test_an_import_replacing_a_text_is_journaled_and_a_crash_still_drops_the_old_vector(settings):
    """``/memories import`` over a memory whose text it replaces is a removal of that text: it goes through
    the Eraser like ``/memories edit`` (under the person's hold, journaled), so a crash after the new text
    landed and before the old text's vector went leaves a row that the next start finishes."""
    async with running_engine(settings, ScriptedChatModel(no_echo), embeddings=HashEmbeddings()) as engine:
        key, vector = await learned(engine, Speaker(user_id=ALICE, name="Alice", guild_id="9", channel_id="c",
                                                    message_id="951"), "I like imported_over_canary")
        (memory,) = await engine.memories.list(ALICE)
        when = memory.created_at.isoformat()
        replacement = [{"id": key, "content": "Alice likes the file's text", "origin": {"guild_id": "9"},
                        "sources": [], "created_at": when, "updated_at": when}]
        steps = engine.eraser.steps
        real = steps.drop_vectors

        async def crash(*args, **kwargs):
            raise OSError("the process died here")

        steps.drop_vectors = crash
        try:
            await engine.restore_memories(ALICE, replacement, [], by=Actor("user", ALICE))
        except OSError:
            pass
        steps.drop_vectors = real
        assert [m.content for m in await engine.memories.list(ALICE)] == ["Alice likes the file's text"]
        assert [job.kind for job in await engine.storage.erasures.unfinished()] == ["memories"]
        await engine.eraser.resume()
        assert await engine.storage.erasures.unfinished() == []
        assert await vector_rows(engine, ALICE, key) == 0
        await engine.eraser.compact_owed()  # the job's one compaction: the old vector's bytes leave the files
        assert files_with(settings, vector) == []
