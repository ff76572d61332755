"""The real ``python -m bot`` process against a Discord-compatible server on loopback: REST *and* gateway.

``discord.api_base`` must move the websocket too (discord.py opens ``wss://gateway.discord.gg`` unless told
otherwise): the fake gateway below says HELLO, takes the IDENTIFY, sends READY and one direct message, and
the answer must come back through the fake REST API, written by the real ChatDeepSeek client's call to a
fake OpenAI-compatible model. SIGTERM then stops the process cleanly.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
from aiohttp import web

from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.test_process_monitoring import BOT, TOKEN, as_discord, started, stopped

ALICE = {"id": "200000000000000002", "username": "alice", "discriminator": "0", "global_name": "Alice",
         "avatar": None, "bot": False, "system": False, "flags": 0, "public_flags": 0}
DM_CHANNEL = "300000000000000003"
MESSAGE = "400000000000000004"


class FakeDiscord:
    """REST routes the bot needs to log in, sync, and answer one DM; a gateway that delivers that DM."""

    def __init__(self) -> None:
        self.sent: list[dict] = []  # POST /channels/{id}/messages bodies
        self.identified = asyncio.Event()
        self.answered = asyncio.Event()
        self.port = 0
        self.runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/api/v10/users/@me", self.me)
        app.router.add_get("/api/v10/oauth2/applications/@me", self.application)
        app.router.add_put("/api/v10/applications/{app}/commands", self.commands)
        app.router.add_get("/api/v10/gateway/bot", self.gateway_url)
        app.router.add_get("/api/v10/gateway", self.gateway_url)
        app.router.add_post("/api/v10/channels/{channel}/typing", self.typing)
        app.router.add_post("/api/v10/channels/{channel}/messages", self.message)
        app.router.add_get("/gateway", self.gateway)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = self.runner.addresses[0][1]

    async def me(self, request: web.Request) -> web.Response:
        return as_discord(BOT)

    async def application(self, request: web.Request) -> web.Response:
        return as_discord({"id": BOT["id"], "name": "Mnemo", "description": "", "icon": None, "bot_public": True,
                           "bot_require_code_grant": False, "owner": BOT, "verify_key": "00", "flags": 0})

    async def typing(self, request: web.Request) -> web.Response:
        return web.Response(status=204)

    async def commands(self, request: web.Request) -> web.Response:
        sent = await request.json()
        return as_discord([{"description": "", **c, "id": str(1000 + n), "application_id": BOT["id"], "version": "1"}
                           for n, c in enumerate(sent)])

    async def gateway_url(self, request: web.Request) -> web.Response:
        return as_discord({"url": f"ws://127.0.0.1:{self.port}/gateway", "shards": 1,
                           "session_start_limit": {"total": 1000, "remaining": 1000, "reset_after": 0,
                                                   "max_concurrency": 1}})

    async def message(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.sent.append(body)
        self.answered.set()
        return as_discord({"id": str(500000000000000000 + len(self.sent)), "channel_id": request.match_info["channel"],
                           "author": BOT, "content": body.get("content", ""), "timestamp": "2026-12-07T10:00:01+00:00",
                           "edited_timestamp": None, "tts": False, "mention_everyone": False, "mentions": [],
                           "mention_roles": [], "attachments": [], "embeds": [], "pinned": False, "type": 19,
                           "flags": 0, "components": []})

    async def gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": 41250}, "s": None, "t": None}))
        seq = 0

        async def dispatch(event: str, data: dict) -> None:
            nonlocal seq
            seq += 1
            await ws.send_str(json.dumps({"op": 0, "t": event, "s": seq, "d": data}))

        async for frame in ws:
            if frame.type != aiohttp.WSMsgType.TEXT:
                continue
            payload = json.loads(frame.data)
            if payload["op"] == 1:
                await ws.send_str(json.dumps({"op": 11, "d": None, "s": None, "t": None}))
            elif payload["op"] == 2:
                assert payload["d"]["token"] == TOKEN
                self.identified.set()
                await dispatch("READY", {"v": 10, "user": BOT, "guilds": [], "session_id": "s1",
                                         "resume_gateway_url": f"ws://127.0.0.1:{self.port}/gateway",
                                         "application": {"id": BOT["id"], "flags": 0}, "private_channels": []})
                await asyncio.sleep(0.2)
                await dispatch("MESSAGE_CREATE", {
                    "id": MESSAGE, "channel_id": DM_CHANNEL, "author": ALICE, "content": "I like kayaking, hello!",
                    "timestamp": "2026-12-07T10:00:00+00:00", "edited_timestamp": None, "tts": False,
                    "mention_everyone": False, "mentions": [], "mention_roles": [], "attachments": [], "embeds": [],
                    "pinned": False, "type": 0, "flags": 0, "components": []})
        return ws

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


async def test_a_real_process_takes_events_from_the_gateway_its_api_base_names(tmp_path):
    discord_server = FakeDiscord()
    await discord_server.start()
    async with FakeOpenAIServer(handler=lambda request: Reply(text="Hello Alice, kayaks are great.")) as model:
        proc = await started(tmp_path, f'[bot]\ndata_dir = "data"\n'
                             f'[discord]\napi_base = "http://127.0.0.1:{discord_server.port}/api/v10"\n'
                             f'[model]\nbase_url = "{model.base_url}"\nstreaming = false\n', "sk-gateway-test")
        try:
            try:
                await asyncio.wait_for(discord_server.answered.wait(), 120)
            except asyncio.TimeoutError:
                proc.kill()
                out, err = await proc.communicate()
                raise AssertionError("no answer came: " + (out + err).decode()[-4000:]) from None
            (answer,) = discord_server.sent
            assert answer["content"] == "Hello Alice, kayaks are great."
            assert str(answer["message_reference"]["message_id"]) == MESSAGE
            assert answer["allowed_mentions"]["parse"] == []
            (request,) = [r["json"] for r in model.requests if not r["json"].get("tools")]
            assert "I like kayaking, hello!" in json.dumps(request["messages"])
        finally:
            text = await stopped(proc)
            await discord_server.close()
    assert proc.returncode == 0, text[-4000:]
    assert "Traceback" not in text and TOKEN not in text and "sk-gateway-test" not in text
