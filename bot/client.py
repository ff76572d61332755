"""The Discord side of the process: the ``commands.Bot`` subclass and ``run_discord``.

Storage and the engine are opened in ``run_discord`` and handed to the bot; extensions load in
``setup_hook``; slash commands are synced only when their fingerprint changes (or on ``python -m bot
sync``); SIGTERM and SIGINT close the bot, flush pending memory work and close the databases.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import signal
from pathlib import Path
from typing import Any, Callable

import aiohttp
import discord
import yarl
from discord.ext import commands

from bot.engine import ChatEngine, Storage, create_engine
from bot.metrics import Metrics
from bot.monitoring import Health, MonitoringServer
from bot.settings import Settings
from bot.sharding import ShardPlan
from bot.storage import open_storage

log = logging.getLogger(__name__)

EXTENSIONS = ("cogs.errors", "cogs.chat", "cogs.message_events", "cogs.memories", "cogs.memory_signal",
              "cogs.moderation", "cogs.settings", "cogs.context_menus")
FINGERPRINT_FILE = "commands.sha256"
READY_RETRY_FIRST, READY_RETRY_MOST = 5.0, 300.0  # seconds between tries of the READY check of servers


def bot_intents() -> discord.Intents:
    """Guilds, guild and DM messages, and the privileged Message Content intent (see README.md, set-up)."""
    intents = discord.Intents.none()
    intents.guilds = True
    intents.guild_messages = True
    intents.dm_messages = True
    intents.message_content = True
    return intents


def guard_gateway_parsers(state: object) -> None:
    """Make discord.py's gateway parsers survive a malformed or partial event instead of ending the process.

    ``DiscordWebSocket.received_message`` calls a parser without a ``try``, and ``Client.connect`` does not
    catch what escapes it, so one event discord.py cannot build an object from (a partial MESSAGE_UPDATE
    without ``content`` or ``author``, sent for a link preview or by an older gateway) would stop the bot.
    Each parser is wrapped: a failure is logged with the event's name only (never its text) and the event
    is dropped. MESSAGE_UPDATE is completed first where it can be (``complete_message_update``).
    """
    parsers: dict = getattr(state, "parsers")
    for event, parse in list(parsers.items()):
        if getattr(parse, "__guarded__", False):
            continue
        if event == "MESSAGE_UPDATE":
            parse = _completing_update(state, parse)

        def guarded(data: dict, *, _event: str = event, _parse: Callable[[dict], Any] = parse) -> Any:
            try:
                return _parse(data)
            except Exception as exc:  # noqa: BLE001 - one bad event must not end the process
                log.warning("ignored a %s event discord.py could not read (%s)", _event, type(exc).__name__)
                log.debug("the %s event's error", _event, exc_info=True)
                return None

        guarded.__guarded__ = True  # type: ignore[attr-defined]
        parsers[event] = guarded


def complete_message_update(data: dict, cached: discord.Message | None) -> dict | None:
    """A MESSAGE_UPDATE payload discord.py can build a message from, or None when it changes no text.

    Discord documents MESSAGE_UPDATE as carrying the whole message, but a link preview unfurling has come as
    ``{id, channel_id, guild_id, embeds}``: without ``content`` it is no edit, and is dropped here. One with
    ``content`` but no ``type`` or ``author`` gets them from discord.py's cached copy when there is one.
    """
    if "content" not in data:
        return None
    if "type" in data and "author" in data:
        return data
    out = dict(data)
    out.setdefault("type", cached.type.value if cached is not None else 0)
    if "author" not in out and cached is not None:
        a = cached.author
        out["author"] = {"id": str(a.id), "username": a.name, "discriminator": a.discriminator,
                         "global_name": a.global_name, "avatar": None, "bot": a.bot}
    return out


def _completing_update(state: object, parse: Callable[[dict], Any]) -> Callable[[dict], Any]:
    def parse_update(data: dict) -> Any:
        try:
            cached = state._get_message(int(data["id"]))  # type: ignore[attr-defined]
        except (KeyError, TypeError, ValueError):
            cached = None
        full = complete_message_update(data, cached)
        if full is None:
            log.debug("a MESSAGE_UPDATE without content (a link preview, a pin) was not read")
            return None
        return parse(full)

    return parse_update


class StartupError(Exception):
    """Discord could not be reached or refused the bot at start-up; the message names the cause (one line)."""


class MemoryBot(commands.Bot):
    """The bot: dependencies in, extensions loaded in ``setup_hook``. Works unchanged when sharded."""

    def __init__(
        self, *, settings: Settings, engine: ChatEngine, storage: Storage, force_sync: bool = False,
        syncs_commands: bool = True, **kwargs
    ) -> None:
        # A text-only bot: discord.py's warnings about missing voice libraries (PyNaCl, davey) would only
        # worry whoever reads the log.
        discord.VoiceClient.warn_nacl = False
        if hasattr(discord.VoiceClient, "warn_dave"):
            discord.VoiceClient.warn_dave = False
        super().__init__(
            command_prefix=commands.when_mentioned,
            intents=bot_intents(),
            allowed_mentions=discord.AllowedMentions.none(),
            help_command=None,
            chunk_guilds_at_startup=False,
            **kwargs,
        )
        self.settings = settings
        self.engine = engine
        self.storage = storage
        self.force_sync = force_sync
        self.syncs_commands = syncs_commands  # one process of several: only the one with shard 0
        self.sync_failure: str | None = None  # why Discord refused the last sync (``python -m bot sync`` exits 1)
        # Gateway connection per shard (None: the whole client), from discord.py's connect/disconnect events.
        self._links: dict[int | None, bool] = {}
        self._judging: asyncio.Task | None = None  # the READY check of the stored servers (``on_ready``)
        self.monitoring: MonitoringServer | None = None
        self._shutdown: asyncio.Future | None = None
        guard_gateway_parsers(self._connection)

    async def setup_hook(self) -> None:
        for ext in EXTENSIONS:
            await self.load_extension(ext)
        if not self.force_sync:  # `python -m bot sync` only pushes commands: no memory work, no model calls
            await self.engine.start()
        if self.stopping:  # SIGTERM during start-up: nothing more starts (the engine waited for its own start)
            return
        if self.syncs_commands or self.force_sync:
            await self.sync_commands()

    @property
    def stopping(self) -> bool:
        """A shutdown began (a signal, ``close()``)."""
        return self._shutdown is not None

    def command_fingerprint(self, guild: discord.abc.Snowflake | None = None) -> str:
        """A hash of the command tree as Discord would receive it."""
        payload = [c.to_dict(self.tree) for c in self.tree.get_commands(guild=guild)]
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()

    async def sync_commands(self) -> None:
        """Push slash commands when they changed since the last sync (or when forced)."""
        path = Path(self.settings.bot.data_dir) / FINGERPRINT_FILE
        try:
            known = path.read_text().split() if path.exists() else []
        except OSError as exc:  # unreadable: sync as if it had never synced
            log.warning("cannot read %s (%s); syncing the commands anyway", path, exc.strerror or exc)
            known = []
        targets: list[discord.Object | None] = [None]
        if self.settings.discord.dev_guild_id:
            dev = discord.Object(id=self.settings.discord.dev_guild_id)
            self.tree.copy_global_to(guild=dev)
            targets.append(dev)
        fingerprints = []
        for guild in targets:
            # Per application: a new token (another application) on the same data keeps the hash, and its
            # commands must still be pushed.
            fp = f"{self.application_id}:{guild.id if guild else 'global'}:{self.command_fingerprint(guild)}"
            fingerprints.append(fp)
            if self.force_sync or fp not in known:
                try:
                    synced = await self.tree.sync(guild=guild)
                except discord.HTTPException as exc:  # chatting works without it; retried next start
                    self.sync_failure = f"HTTP {exc.status}: {exc.text or exc}"
                    if not self.force_sync:  # ``python -m bot sync`` ends with this as its one line instead
                        log.error("syncing slash commands failed (%s); will retry on next start", exc)
                    fingerprints.pop()
                    continue
                log.info("synced %d slash commands %s", len(synced), f"to guild {guild.id}" if guild else "globally")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)  # on PostgreSQL nothing else creates the data dir
            path.write_text("\n".join(fingerprints))
        except OSError as exc:
            # Only a saving: the next start syncs again. Raised, it ended start-up (this runs inside
            # discord.py's login) as "cannot reach Discord", sending the operator to debug the network.
            log.warning("cannot write %s (%s); the commands will be synced again at the next start", path,
                        exc.strerror or exc)

    async def on_message(self, message: discord.Message) -> None:
        """No prefix commands: messages are handled by the chat cog's listener, commands are slash commands."""

    async def on_ready(self) -> None:
        self._links[None] = True
        log.info("logged in as %s (%s) in %d servers", self.user, getattr(self.user, "id", "?"), len(self.guilds))
        if self._judging is None or self._judging.done():
            self._judging = asyncio.create_task(self._judge_servers(), name="servers-at-ready")
        await asyncio.shield(self._judging)

    async def _judge_servers(self) -> None:
        """Servers that removed the bot while it was offline send no GUILD_DELETE: READY is the only sign.
        Tried until it succeeds (the database may be away as the bot connects): no removed server is swept
        before it has (``DiscordChanges.judged``), and discord.py resumes sessions without a new READY, so
        waiting for the next one could take weeks. Nothing is deleted by a failure."""
        delay = READY_RETRY_FIRST
        while True:
            try:
                await self.engine.servers_at_ready(lambda: [str(g.id) for g in self.guilds], mine=self.owns_guild)
                return
            except Exception as exc:  # noqa: BLE001 - tried again, with a growing pause
                if self.engine.outages(exc):
                    log.warning("comparing the servers at READY with the stored ones waits for the database (%s)",
                                type(exc).__name__)
                else:
                    log.exception("comparing the servers at READY with the stored ones failed; will retry")
            await asyncio.sleep(delay)
            delay = min(READY_RETRY_MOST, delay * 2)

    def owns_guild(self, guild_id: str) -> bool:
        """Whether this process's shards carry ``guild_id`` (Discord's rule: (id >> 22) % shard_count)."""
        count = self.shard_count or 1
        ids = getattr(self, "shard_ids", None)
        mine = set(ids) if ids else {self.shard_id or 0}
        return (int(guild_id) >> 22) % count in mine

    # The gateway's state, as discord.py reports it: READY/RESUMED and a (re)connect mean up, a dropped
    # socket means down until the next one. Sharded bots also get the per-shard events.
    async def on_connect(self) -> None:
        self._links[None] = True

    async def on_resumed(self) -> None:
        self._links[None] = True

    async def on_disconnect(self) -> None:
        self._links[None] = False

    async def on_shard_connect(self, shard_id: int) -> None:
        self._links[shard_id] = True

    async def on_shard_ready(self, shard_id: int) -> None:
        self._links[shard_id] = True

    async def on_shard_resumed(self, shard_id: int) -> None:
        self._links[shard_id] = True

    async def on_shard_disconnect(self, shard_id: int) -> None:
        self._links[shard_id] = False

    def gateway_connected(self) -> bool:
        """Ready (READY and the servers received) and no shard's connection is down right now."""
        return self.is_ready() and not self.is_closed() and bool(self._links) and all(self._links.values())

    def watch_metrics(self, metrics: Metrics) -> None:
        """Let the metrics read what only the client knows: gateway latency and the number of servers."""
        # NaN while disconnected (as the operating guide says): discord.py keeps the old websocket, and its
        # latency stayed at the last heartbeat's, so an alert on NaN never fired.
        metrics.watch(metrics.gateway_latency, lambda: self.latency if self.gateway_connected() else math.nan)
        metrics.watch(metrics.guilds, lambda: len(self.guilds))
        metrics.add_refresher(self.engine.sample_backlog)

    def monitoring_server(self, metrics: Metrics) -> MonitoringServer:
        """The metrics and health endpoint: ready when the gateway is up and storage answers."""

        async def gateway() -> bool:
            return self.gateway_connected()

        section = self.settings.monitoring
        checks = {"gateway": gateway, "storage": self.engine.storage_answers}
        return MonitoringServer(section, metrics, Health(checks, timeout=section.health_timeout_seconds))

    async def start_monitoring(self, metrics: Metrics) -> bool:
        """Serve ``/metrics`` and ``/health`` if configured (closed with the bot); False if the port is taken."""
        self.watch_metrics(metrics)
        server = self.monitoring_server(metrics)
        try:
            await server.start()
        except OSError as exc:
            section = self.settings.monitoring
            log.error("the monitoring endpoint cannot listen on %s:%s: %s", section.host, section.port, exc)
            return False
        self.monitoring = server
        return True

    async def close(self) -> None:
        """Stop taking messages, finish and flush memory work, then disconnect.

        In that order, while the gateway still delivers: the chat cog first stops answering (messages that
        arrive now are recorded without an answer, so none is lost) and lets the turns already waiting or
        being answered finish; then the engine finishes what it runs (erasures included) and flushes
        learning; only then does the connection close, and storage after it (``run_discord``). Until
        2026-12-07 the engine closed first, and turns that started or waited meanwhile were lost.
        """
        if self._shutdown is None:  # one shutdown: a second signal waits for it instead of cutting it short
            self._shutdown = asyncio.ensure_future(self._finish_work())
        await asyncio.shield(self._shutdown)
        monitoring, self.monitoring = self.monitoring, None  # taken before the await: close runs twice at once
        if monitoring is not None:
            await monitoring.close()
        await super().close()

    async def _finish_work(self) -> None:
        if self._judging is not None:
            self._judging.cancel()
        chat = self.get_cog("Chat")
        try:
            if chat is not None:
                await chat.drain(most=self.settings.model.timeout_seconds + 15.0)
            await self.engine.close()
        except Exception:  # noqa: BLE001 - shutting down must go on
            log.exception("flushing the engine failed")


async def follow_gateway(bot: commands.Bot) -> None:
    """With ``discord.api_base`` (a Discord-compatible server), connect to the gateway that server names.

    discord.py asks ``GET /gateway/bot`` only when it picks the shard count itself, and otherwise always
    opens ``wss://gateway.discord.gg``: moving the REST base alone left the events coming from the real
    Discord (nothing, on a test network). Like ``Route.BASE``, this is discord.py's one process-wide value.
    """
    _shards, url, _limits = await bot.http.get_bot_gateway()
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(url)
    log.info("Discord gateway: %s", url)


async def connect(bot: commands.Bot, *, first_delay: float = 2.0) -> None:
    """Run the gateway connection until the bot closes, also when the first attempt fails.

    discord.py reconnects after a connection it once had; when the very first one fails (the gateway
    unreachable at start-up) its retry reads the missing connection's sequence number and the process died
    with a traceback. Here the first connection is tried again with a growing delay (at most a minute),
    the health endpoint saying the gateway is down meanwhile, until it succeeds or the bot is stopped.
    """
    if isinstance(bot, discord.AutoShardedClient):  # each shard retries its own first connection
        await bot.connect()
        return
    failures = 0
    while not bot.is_closed():
        try:
            await bot.connect()
            return
        except (discord.LoginFailure, discord.PrivilegedIntentsRequired):
            raise
        except Exception as exc:  # noqa: BLE001 - sorted below: only a first connection is retried here
            if isinstance(exc, discord.ConnectionClosed) and exc.code not in (1000, None):
                raise  # refused (4004 a reset token, 4011 sharding required): discord.py closed the bot first
            if bot.is_closed():
                return
            if bot.ws is not None:
                raise
            cause = exc.__context__ if isinstance(exc, AttributeError) and exc.__context__ is not None else exc
            failures += 1
            delay = min(60.0, first_delay * 2 ** (failures - 1))
            log.warning("cannot reach the Discord gateway (%s: %s); trying again in %.0f s",
                        type(cause).__name__, cause, delay)
            waited = 0.0
            while waited < delay and not bot.is_closed():  # a stop during the wait is not kept waiting
                await asyncio.sleep(min(0.25, delay - waited))
                waited += 0.25


class ShardedMemoryBot(MemoryBot, commands.AutoShardedBot):
    """The same bot running some of the shards (``--shards``); see ``bot.sharding``."""

    async def launch_shard(self, gateway: Any, shard_id: int, *, initial: bool = False) -> None:
        """discord.py retries a shard's first connection every 5 seconds without asking whether the bot
        was stopped meanwhile: with the gateway out of reach, SIGTERM never ended the process."""
        if self.is_closed():
            return
        await super().launch_shard(gateway, shard_id, initial=initial)


async def run_discord(
    settings: Settings, *, sync_only: bool = False, metrics: Metrics | None = None, shards: ShardPlan | None = None
) -> int:
    """Open storage, build the engine and the bot, run until stopped; return an exit code.

    With ``shards`` this process runs only those shards; only the one with shard 0 syncs commands.
    Raises :class:`StartupError` (one line naming the cause) when Discord is unreachable or refuses the bot.
    """
    if settings.discord.api_base:
        discord.http.Route.BASE = settings.discord.api_base.rstrip("/")  # a local Discord-compatible server
    token = settings.secrets.discord_token.get_secret_value() if settings.secrets.discord_token else ""
    metrics = metrics or Metrics(active_channel_seconds=settings.monitoring.active_channel_seconds)
    # `sync` only pushes commands (no memory work): it may run beside the bot, so it does not take the
    # data directory's writer lock.
    async with open_storage(settings, writer=not sync_only) as storage:
        engine = create_engine(settings, storage, on_memory_change=None, metrics=metrics)
        if shards is None:
            bot = MemoryBot(settings=settings, engine=engine, storage=storage, force_sync=sync_only)
        else:
            bot = ShardedMemoryBot(settings=settings, engine=engine, storage=storage, force_sync=sync_only,
                                   shard_ids=list(shards.ids), shard_count=shards.count,
                                   syncs_commands=shards.syncs_commands)
            log.info("running shards %s of %d%s", ",".join(map(str, shards.ids)), shards.count,
                     " (with shard 0: direct messages and command sync)" if shards.syncs_commands else "")
        if not sync_only and not await bot.start_monitoring(metrics):  # `sync` must not take the port
            return 1
        async with bot:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    loop.add_signal_handler(sig, lambda: asyncio.ensure_future(bot.close()))
                except (NotImplementedError, RuntimeError):  # pragma: no cover - non-Unix
                    pass
            try:
                await bot.login(token)  # runs setup_hook (which syncs when asked)
                if sync_only:
                    if bot.sync_failure:
                        raise StartupError(f"Discord refused the slash commands ({bot.sync_failure})")
                    return 0
                if bot.stopping:  # a signal during start-up: no gateway for a closing engine
                    return 0
                if settings.discord.api_base:
                    await follow_gateway(bot)
                await connect(bot)
            except discord.LoginFailure:
                raise StartupError("Discord rejected the token in DISCORD_TOKEN") from None
            except discord.PrivilegedIntentsRequired:
                raise StartupError(
                    "enable the Message Content intent for this bot in the Developer Portal"
                    " (see README.md, 'Setting up the Discord application')"
                ) from None
            except discord.HTTPException as exc:
                raise StartupError(f"Discord answered HTTP {exc.status} at start-up: {exc.text or exc}") from None
            except discord.GatewayNotFound:
                raise StartupError(f"{discord.http.Route.BASE}/gateway/bot named no gateway") from None
            except discord.ConnectionClosed as exc:
                raise StartupError(f"Discord closed the gateway connection (code {exc.code}"
                                   f"{': ' + exc.reason if exc.reason else ''})") from None
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
                where = discord.http.Route.BASE
                raise StartupError(f"cannot reach Discord at {where}: {exc or type(exc).__name__}") from None
    return 0
