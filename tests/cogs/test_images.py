"""Images (issue 21) through the real discord.py client: image attachments reach a vision model as image
parts, and nothing of their bytes is stored anywhere (every byte of the SQLite files, -wal included; every
row of every PostgreSQL table, LangGraph's checkpoint writes included)."""

from __future__ import annotations

import base64
import json
import logging

import pytest
from langchain_core.messages import HumanMessage

from cogs import _images, _input
from cogs.chat import OUT_OF_BUDGET
from tests.cogs.conftest import ALICE, BOB, GENERAL, rig
from tests.cogs.test_memory_controls import files_containing
from tests.conftest import Backend, Call, ScriptedChatModel, default_script
from tests.fakes import discord_harness as dh
from tests.fakes.images import gif, needles, png, sqlite_holding, webp


def image_attachment(r, filename: str, data: bytes, content_type: str, *, size: int | None = None) -> dict:
    """An attachment as MESSAGE_CREATE carries it (with the image's dimensions), served by the harness CDN."""
    att = dh.attachment(dh.snowflake(), filename, len(data) if size is None else size, content_type=content_type)
    att.update(width=32, height=32)
    r.h.cdn[att["url"]] = data
    return att


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def parts_of(call: Call) -> list[dict]:
    """Every content part the model was sent (string contents count as one text part)."""
    out = []
    for m in call.messages:
        out += m.content if isinstance(m.content, list) else [{"type": "text", "text": m.content}]
    return out


def image_urls(call: Call) -> list[str]:
    return [p["image_url"]["url"] for p in parts_of(call) if p.get("type") == "image_url"]


async def postgres_holding(url: str, data: bytes) -> tuple[list[str], dict[str, int]]:
    """Tables whose rows contain the image (as bytes or base64), and the row count of every table searched."""
    import psycopg

    found, counts = [], {}
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        tables = await (await conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
            "AND table_schema NOT IN ('pg_catalog', 'information_schema')")).fetchall()
        for schema, table in tables:
            rows = await (await conn.execute(f'SELECT * FROM "{schema}"."{table}"')).fetchall()
            counts[table] = len(rows)
            for row in rows:
                for value in row:
                    if isinstance(value, (bytes, memoryview)):
                        body = bytes(value)
                    elif isinstance(value, str):
                        body = value.encode()
                    else:
                        body = json.dumps(value, default=str).encode()
                    found += [f"{table}: {what}" for what, needle in needles(data).items() if needle in body]
    return found, counts


def quiet(call: Call):
    """Replies that repeat nothing, so what is found on disk is what the bot kept of the message."""
    return default_script(call) if call.is_extraction else "A cat, sitting on a keyboard."


# ---------------------------------------------------------------- the image reaches the model, and no storage
async def test_an_image_reaches_a_vision_model_and_no_byte_of_it_is_stored(tmp_path, backend: Backend):
    cat = png(seed=21)
    model = ScriptedChatModel(quiet)
    async with rig(tmp_path, model, backend, model={"vision": "on"}) as r:
        att = image_attachment(r, "cat.png", cat, "image/png")
        await r.h.send_message(r.mentioning(ALICE, "what is in this picture? I like cats", attachments=[att]))
        (sent,) = r.h.sent_messages(GENERAL)
        assert sent.content == "A cat, sitting on a keyboard."
        # The model got the image inline (Discord's CDN links expire), in the message's own content list.
        (call,) = r.model.chat_calls
        (human,) = [m for m in call.messages if isinstance(m.content, list)]
        text, note, image = human.content
        assert text["type"] == "text" and "what is in this picture?" in text["text"]
        assert image == {"type": "image_url", "image_url": {"url": data_url(cat)}}
        assert "cat.png" in note["text"]
        # What is stored is the placeholder.
        state = await r.engine.thread_state(str(GENERAL))
        stored = [m.content for m in state["messages"] if isinstance(m, HumanMessage)]
        assert stored == [f"what is in this picture? I like cats\n[image: cat.png, {_images.human_size(len(cat))}]"]
        if backend.name == "postgres":  # the learning queue holds the turn now
            found, counts = await postgres_holding(backend.database_url, cat)
            assert counts.get("bot_inbox") and counts.get("checkpoint_writes"), counts
            assert not found, found
        else:
            assert not sqlite_holding(r.data_dir, cat)
        await r.engine.scheduler.flush()  # the learning queue is read and learned from
        (extraction,) = r.model.extraction_calls
        assert "[image: cat.png" in extraction.prompt_text and base64.b64encode(cat)[:40].decode() not in extraction.prompt_text
        assert [m.content for m in await r.engine.memories.list(str(ALICE["id"]))] == ["I like cats"]
        if backend.name == "postgres":
            found, counts = await postgres_holding(backend.database_url, cat)
            assert counts.get("checkpoint_writes") and counts.get("checkpoints"), counts  # searched where it would be
            assert counts.get("store"), counts  # the memories
            assert not found, found
        else:  # while running: the write-ahead logs hold the latest writes
            assert any(p.name.endswith("-wal") and p.stat().st_size for p in r.data_dir.rglob("*"))
            assert files_containing(r.data_dir, "[image: cat.png"), "the placeholder is on disk: the search looks there"
            assert not sqlite_holding(r.data_dir, cat)
    if backend.name == "sqlite":  # and once closed (the logs checkpointed into the files)
        assert files_containing(r.data_dir, "[image: cat.png")
        assert not sqlite_holding(r.data_dir, cat)


async def test_a_turn_shows_the_images_of_its_last_messages_as_many_as_one_message_may_have(tmp_path):
    """A follow-up joins the turn being answered: each message's images were all sent, so a few follow-ups
    made a request of dozens of images (downloaded again on every restart)."""
    import asyncio
    import threading

    gate = threading.Event()

    def slow(call: Call):
        if not call.is_extraction and len(image_urls(call)) < 3:
            gate.wait(5)  # the first attempt is still thinking when the follow-up arrives
        return quiet(call)

    pictures = [png(seed=40 + i) for i in range(4)]
    async with rig(tmp_path, ScriptedChatModel(slow), model={"vision": "on", "max_images_per_message": 2},
                   discord={"gather_seconds": 0.1}) as r:
        first = [image_attachment(r, f"a{i}.png", pictures[i], "image/png") for i in range(2)]
        later = [image_attachment(r, f"b{i}.png", pictures[2 + i], "image/png") for i in range(2)]
        r.h.feed("MESSAGE_CREATE", r.mentioning(ALICE, "look at these", attachments=first))
        while not r.model.chat_calls:
            await asyncio.sleep(0.02)
        r.h.feed("MESSAGE_CREATE", r.mentioning(ALICE, "and these", attachments=later))
        while len(r.model.chat_calls) < 2:
            await asyncio.sleep(0.02)
        gate.set()
        await r.h.settle(quiet=0.3)
        last = r.model.chat_calls[-1]
    assert image_urls(last) == [data_url(p) for p in pictures[2:]]
    notes = [p["text"] for p in parts_of(last) if "a0.png" in p.get("text", "") or "a1.png" in p.get("text", "")]
    assert any("only the turn's last 2 images are shown" in n for n in notes)

async def test_a_long_message_is_cut_before_its_image_lines_not_through_them(tmp_path):
    """The length cut took the "[image: ...]" lines with it: the image was shown that once, but the stored
    text no longer said an image was there, so later turns (and learning) lost it."""
    cat = png(seed=22)
    async with rig(tmp_path, ScriptedChatModel(quiet), model={"vision": "on"},
                   conversation={"max_input_chars": 500}) as r:
        att = image_attachment(r, "cat.png", cat, "image/png")
        await r.h.send_message(r.mentioning(ALICE, "x" * 3000, attachments=[att]))
        state = await r.engine.thread_state(str(GENERAL))
        (stored,) = [m.content for m in state["messages"] if isinstance(m, HumanMessage)]
    assert stored.endswith(f"[image: cat.png, {_images.human_size(len(cat))}]") and "the message was cut here" in stored
    assert len(stored) <= 500 + 100  # within the cap, plus the note


async def test_a_forwarded_photo_reaches_a_vision_model(tmp_path):
    """"What is this?" with a forwarded photo (common in DMs): the forward's files are in its snapshot."""
    photo = png(seed=33)
    async with rig(tmp_path, ScriptedChatModel(quiet), model={"vision": "on"}) as r:
        att = image_attachment(r, "IMG_0042.png", photo, "image/png")
        dm = r.h.dm(ALICE)
        fwd = r.msg(ALICE, "", channel_id=dm["id"], guild_id=None)
        fwd["message_reference"] = {"type": 1, "message_id": str(dh.snowflake()), "channel_id": str(GENERAL)}
        fwd["message_snapshots"] = [{"message": {"content": "", "type": 0, "timestamp": fwd["timestamp"],
                                                 "edited_timestamp": None, "flags": 0, "attachments": [att],
                                                 "embeds": [], "mentions": [], "mention_roles": [], "components": []}}]
        fwd["flags"] = 1 << 14  # HAS_SNAPSHOT
        await r.h.send_message(fwd)
        (call,) = r.model.chat_calls
        assert image_urls(call) == [data_url(photo)]
        assert any("IMG_0042.png" in p.get("text", "") for p in parts_of(call))


async def test_a_model_without_vision_gets_name_type_and_size_and_the_log_says_so_once(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(_input, "_NO_VISION_TOLD", set())
    caplog.set_level(logging.INFO, logger="cogs._input")
    async with rig(tmp_path) as r:  # the default model, deepseek-chat: vision "auto" is off
        assert not r.bot.settings.model.takes_images
        first, second = png(seed=1), png(seed=2)
        for name, data in (("one.png", first), ("two.png", second)):
            att = image_attachment(r, name, data, "image/png")
            await r.h.send_message(r.mentioning(ALICE, "look", attachments=[att]))
        calls = r.model.chat_calls
        assert not any(image_urls(c) for c in calls)
        assert f"[attached two.png (image/png, {len(second)} bytes): not a text file, not shown]" in calls[-1].prompt_text
        assert not [c for c in r.h.calls if c.via == "cdn"], "nothing is downloaded for a model without vision"
    told = [rec for rec in caplog.records if "images are not sent to the model" in rec.getMessage()]
    assert len(told) == 1 and "deepseek-chat" in told[0].getMessage()


async def test_an_oversized_image_is_left_out_with_a_placeholder_saying_so(tmp_path):
    big, small = png(seed=3, size=64), png(seed=4, size=8)
    async with rig(tmp_path, model={"vision": "on", "max_image_bytes": 2000}) as r:
        assert len(big) > 2000 > len(small)
        atts = [image_attachment(r, "big.png", big, "image/png"), image_attachment(r, "small.png", small, "image/png")]
        await r.h.send_message(r.mentioning(ALICE, "two pictures", attachments=atts))
        (call,) = r.model.chat_calls
        assert image_urls(call) == [data_url(small)]
        assert f"[image: big.png, {_images.human_size(len(big))}: too large to show (over 2 KB)]" in call.prompt_text
        downloaded = [c.path for c in r.h.calls if c.via == "cdn"]
        assert downloaded == [atts[1]["url"]], "the oversized image is never downloaded"
        state = await r.engine.thread_state(str(GENERAL))
        assert "too large to show" in state["messages"][0].content


async def test_animated_images_are_left_out_and_the_model_is_told(tmp_path):
    moving, still = gif(frames=3, seed=5), gif(frames=1, seed=6)
    async with rig(tmp_path, model={"name": "gpt-4o-mini", "provider": "openai_compatible",
                                    "base_url": "http://127.0.0.1:9/v1"}) as r:  # vision "auto": on for gpt-4o*
        assert r.bot.settings.model.takes_images
        atts = [image_attachment(r, "dance.gif", moving, "image/gif"), image_attachment(r, "still.gif", still, "image/gif"),
                image_attachment(r, "apng.png", png(seed=7, animated=True), "image/png"),
                image_attachment(r, "fake.png", b"this is not an image at all", "image/png")]
        await r.h.send_message(r.mentioning(ALICE, "animations", attachments=atts))
        (call,) = r.model.chat_calls
        assert image_urls(call) == [data_url(still, "image/gif")]
        notes = [p["text"] for p in parts_of(call) if p.get("type") == "text" and "not shown to you" in p["text"]]
        assert notes == ["\n(image \"dance.gif\" is not shown to you: animated images are not shown)",
                         "\n(image \"apng.png\" is not shown to you: animated images are not shown)",
                         "\n(image \"fake.png\" is not shown to you: it is not a PNG, JPEG, WebP or GIF image)"]
    assert not sqlite_holding(r.data_dir, moving) and not sqlite_holding(r.data_dir, still)


async def test_only_the_first_images_of_a_message_are_shown(tmp_path):
    async with rig(tmp_path, model={"vision": "on", "max_images_per_message": 2}) as r:
        pictures = [png(seed=10 + i, size=8) for i in range(3)]
        atts = [image_attachment(r, f"p{i}.png", p, "image/png") for i, p in enumerate(pictures)]
        await r.h.send_message(r.mentioning(ALICE, "three", attachments=atts))
        (call,) = r.model.chat_calls
        assert image_urls(call) == [data_url(p) for p in pictures[:2]]
        assert "p2.png" in call.prompt_text and "only 2 images of a message are" in call.prompt_text


async def test_images_of_the_message_replied_to_are_shown_with_its_quote(tmp_path):
    """Bob posts a link Discord unfurled into an image embed, and a screenshot; Alice replies to it asking the
    bot. Embed images come through Discord's media proxy only."""
    shot, unfurled = png(seed=30), png(seed=31)
    async with rig(tmp_path, model={"vision": "on"}) as r:
        proxy = "https://images-ext-1.discordapp.net/external/abc/https/example.com/sunset.png"
        r.h.cdn[proxy] = unfurled
        r.h.cdn["https://example.com/elsewhere.png"] = png(seed=32)
        embeds = [{"type": "image", "url": "https://example.com/sunset.png",
                   "thumbnail": {"url": "https://example.com/sunset.png", "proxy_url": proxy, "width": 32, "height": 32}},
                  {"type": "rich", "title": "a bot's embed", "image": {"url": "https://example.com/elsewhere.png"}}]
        bob = r.msg(BOB, "https://example.com/sunset.png and my screenshot", embeds=embeds,
                    attachments=[image_attachment(r, "screen.png", shot, "image/png")])
        await r.h.send_message(bob)
        await r.h.send_message(r.mentioning(ALICE, "what do you make of these?", referenced_message=bob))
        (call,) = r.model.chat_calls
        assert image_urls(call) == [data_url(shot), data_url(unfurled)]
        context = next(m for m in call.messages if isinstance(m.content, list))
        assert "[the message being replied to" in context.content[0]["text"]
        assert "from the message of [Bob | user 803]" in context.content[1]["text"]
        assert "https://example.com/elsewhere.png" not in [c.path for c in r.h.calls if c.via == "cdn"]
    assert not sqlite_holding(r.data_dir, shot) and not sqlite_holding(r.data_dir, unfurled)


async def test_a_reply_to_a_forum_posts_opening_photo_shows_the_photo(tmp_path):
    """Found in review 2026-12-07 (fourteenth session): the opening message came first as the post's starter
    (no images) and the reply's quote of the same message, with its images, was dropped as a repeat."""
    from tests.cogs.test_context import forum_post

    plant = png(seed=40)
    async with rig(tmp_path, model={"vision": "on"}) as r:
        opening = forum_post(r, BOB, "What plant?", "found this in the garden")
        opening["attachments"] = [image_attachment(r, "plant.png", plant, "image/png")]
        r.h.feed("MESSAGE_UPDATE", dict(opening, edited_timestamp=None))
        await r.h.send_message(r.mentioning(ALICE, "what plant is this?", channel_id=int(opening["id"]),
                                            referenced_message=opening))
        call = r.model.chat_calls[-1]
        assert image_urls(call) == [data_url(plant)]
        assert "[the message being replied to" in call.prompt_text


async def test_a_link_posted_behind_a_spoiler_has_its_preview_image_marked_hidden(tmp_path):
    """Discord hides the preview of ||https://...||: described openly, the answer gave away what was hidden."""
    unfurled = png(seed=33)
    async with rig(tmp_path, model={"vision": "on"}) as r:
        proxy = "https://images-ext-1.discordapp.net/external/abc/https/example.com/boss.png"
        r.h.cdn[proxy] = unfurled
        embeds = [{"type": "image", "url": "https://example.com/boss.png",
                   "thumbnail": {"url": "https://example.com/boss.png", "proxy_url": proxy, "width": 32, "height": 32}}]
        bob = r.msg(BOB, "the final boss: ||https://example.com/boss.png||", embeds=embeds)
        await r.h.send_message(bob)
        await r.h.send_message(r.mentioning(ALICE, "what is this?", referenced_message=bob))
        (call,) = r.model.chat_calls
        assert image_urls(call) == [data_url(unfurled)]
        notes = [p["text"] for p in parts_of(call) if p.get("type") == "text" and "boss.png" in p["text"]]
        assert any("hid behind a spoiler" in n for n in notes), notes


# ---------------------------------------------------------------- header sniffing
@pytest.mark.parametrize("data, media_type, animated", [
    (png(seed=40), "image/png", False),
    (png(seed=40, animated=True), "image/png", True),
    (gif(frames=1), "image/gif", False),
    (gif(frames=2), "image/gif", True),
    (webp(animated=False), "image/webp", False),
    (webp(animated=True), "image/webp", True),
    (b"\xff\xd8\xff\xe0" + b"\x00" * 20, "image/jpeg", False),
])
def test_types_come_from_header_bytes_and_animation_is_recognised(data, media_type, animated):
    assert _images.sniff(data) == media_type
    assert _images.is_animated(data, media_type) is animated


def test_a_truncated_gif_is_left_out_rather_than_sent():
    assert _images.is_animated(gif(frames=1)[:-6], "image/gif")
    assert _images.sniff(b"<svg></svg>") is None


def test_embed_images_come_only_from_discords_media_hosts():
    assert _images.media_host("https://media.discordapp.net/attachments/1/2/a.png")
    assert _images.media_host("https://cdn.discordapp.com/attachments/1/2/a.png")
    assert not _images.media_host("http://media.discordapp.net/a.png")
    assert not _images.media_host("https://discordapp.net.evil.example/a.png")
    assert not _images.media_host("https://169.254.169.254/latest/meta-data")


async def test_an_edit_keeps_the_placeholder_and_downloads_nothing(tmp_path):
    cat = png(seed=50)
    async with rig(tmp_path, model={"vision": "on"}) as r:
        att = image_attachment(r, "cat.png", cat, "image/png")
        original = r.mentioning(ALICE, "my cat", attachments=[att])
        await r.h.send_message(original)
        downloads = len([c for c in r.h.calls if c.via == "cdn"])
        edited = dict(original, content=original["content"].replace("my cat", "my cat Tom"),
                      edited_timestamp=dh.discord.utils.utcnow().isoformat())
        r.h.feed("MESSAGE_UPDATE", edited)
        await r.h.settle(timeout=10, quiet=0.3)
        state = await r.engine.thread_state(str(GENERAL))
        assert state["messages"][0].content == f"my cat Tom\n[image: cat.png, {_images.human_size(len(cat))}]"
        assert len([c for c in r.h.calls if c.via == "cdn"]) == downloads == 1


async def test_a_member_over_the_budget_gets_the_notice_and_no_image_is_downloaded(tmp_path):
    """The turn is only heard (its placeholder stored): its pictures are fetched for an answer only."""
    cat = png(seed=51)
    async with rig(tmp_path, model={"vision": "on"}, limits={"member_daily_tokens": 30}) as r:
        await r.h.send_message(r.mentioning(ALICE, "a first question that uses the budget up"))
        att = image_attachment(r, "cat.png", cat, "image/png")
        await r.h.send_message(r.mentioning(ALICE, "my cat", attachments=[att]))
        assert r.h.sent_messages(GENERAL)[-1].content == OUT_OF_BUDGET["member"]
        assert [c for c in r.h.calls if c.via == "cdn"] == []
        state = await r.engine.thread_state(str(GENERAL))
        assert state["messages"][-1].content == f"my cat\n[image: cat.png, {_images.human_size(len(cat))}]"
        att = image_attachment(r, "dog.png", png(seed=52), "image/png")
        await r.h.send_message(r.mentioning(BOB, "my dog", attachments=[att]))  # answered: downloaded
        assert [c.via for c in r.h.calls].count("cdn") == 1


async def test_a_reply_to_yesterdays_photo_uses_the_links_the_reply_brought(tmp_path):
    """Discord's CDN refuses a file link about a day after signing it. The photo is still in discord.py's
    cache, with links signed when it was posted; the reply's payload carries the same file freshly signed.
    The image is read through the fresh link (until 2026-12-07 the model was told it could not be read)."""
    photo = png(seed=33)
    async with rig(tmp_path, model={"vision": "on"}) as r:
        att = image_attachment(r, "sunset.png", photo, "image/png")
        stale = dict(att, url=att["url"] + "?ex=old", proxy_url=att["url"] + "?ex=old")
        bob = r.msg(BOB, "my sunset", attachments=[stale])
        r.h.feed("MESSAGE_CREATE", bob)  # cached, with the link that has expired since
        fresh = dict(bob, attachments=[att])  # as the reply's referenced_message carries it
        await r.h.send_message(r.mentioning(ALICE, "what is in this photo?", referenced_message=fresh))
        (call,) = r.model.chat_calls
        assert image_urls(call) == [data_url(photo)]


async def test_a_spoilered_image_is_shown_with_word_to_keep_it_hidden(tmp_path):
    """A file named SPOILER_... is hidden behind a spoiler on Discord: the model sees it, told that the
    sender hid it, so the public answer does not give it away in plain view."""
    photo = png(seed=34)
    async with rig(tmp_path, model={"vision": "on"}) as r:
        att = image_attachment(r, "SPOILER_ending.png", photo, "image/png")
        await r.h.send_message(r.mentioning(ALICE, "is this real?", attachments=[att]))
        (call,) = r.model.chat_calls
        assert image_urls(call) == [data_url(photo)]
        notes = [p["text"] for p in parts_of(call) if p.get("type") == "text" and "SPOILER_ending.png" in p["text"]]
        assert any("hid behind a spoiler" in n and "||" in n for n in notes), notes
