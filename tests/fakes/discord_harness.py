"""Network-free harness that drives a *real* discord.py 2.7 ``Client``/``commands.Bot``.

Why: mocking Message/Interaction objects only tests our assumptions about discord.py. Here, payloads shaped
like Discord's API docs go into the client's real ``ConnectionState.parsers`` (exactly what
``DiscordWebSocket.received_message`` does), so discord.py's own parsing, permission resolution, view store
and app-command tree run unmodified. Only the two network edges are replaced and recorded as :class:`Call`:
``client.http.request`` (all REST) and ``AsyncWebhookAdapter.request`` (interaction callbacks, followups and
``@original`` edits use the webhook adapter with its own aiohttp session, *not* ``client.http``).
"""
from __future__ import annotations

import asyncio
import collections
import itertools
import json
import logging
import re
import time
import urllib.parse
import zlib
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable, Dict, List, Optional

import discord
from discord import app_commands
from discord.client import _loop as _UNSET_LOOP
from discord.http import Route
from discord.webhook.async_ import AsyncWebhookAdapter

log = logging.getLogger(__name__)

BOT_ID = APP_ID = 100_000_000_000_000_001  # portal-created bots: application id == bot user id
EPHEMERAL, LOADING = 1 << 6, 1 << 7  # message flags
THREAD_TYPES = (10, 11, 12)
DEFAULT_PERMISSIONS = discord.Permissions(  # what @everyone gets unless a test says otherwise
    view_channel=True, send_messages=True, send_messages_in_threads=True, read_message_history=True,
    add_reactions=True, embed_links=True, attach_files=True, use_application_commands=True,
).value
JOINED = '2024-01-01T00:00:00+00:00'
RecordedFile = collections.namedtuple('RecordedFile', 'filename data description spoiler')
_seq = itertools.count(1)


def snowflake() -> int:
    """Fresh time-based snowflake (discord.py derives ``created_at`` and delete sub-limits from it)."""
    return ((int(time.time() * 1000) - discord.utils.DISCORD_EPOCH) << 22) | (next(_seq) & 0x3FFFFF)


def command_id(name: str, guild_id: Optional[int] = None) -> int:
    """Stable fake id of a root app command; used by slash payloads *and* the sync responses."""
    return (1 << 59) | zlib.crc32(f'{guild_id or 0}:{name}'.encode())


def _jsonify(data: Any) -> Any:  # what the wire does; also isolates test-owned dicts from mutation
    return json.loads(json.dumps(data))


def _split(who: dict) -> tuple:  # user or member payload -> (user, partial member | None)
    return (who['user'], {k: v for k, v in who.items() if k != 'user'}) if 'user' in who else (who, None)


# ---------------------------------------------------------------- payload builders (Discord API docs shapes)
def user(id: int, name: str, bot: bool = False, global_name: Optional[str] = None) -> dict:
    return {'id': str(id), 'username': name, 'discriminator': '0', 'global_name': global_name, 'avatar': None,
            'bot': bot, 'system': False, 'public_flags': 0, 'flags': 0}


def role(id: int, name: str, permissions: int = 0, position: int = 0) -> dict:
    """``@everyone`` is ``role(guild_id, '@everyone', ...)``; ``guild()`` adds one if missing."""
    return {'id': str(id), 'name': name, 'permissions': str(permissions), 'position': position, 'color': 0,
            'colors': {'primary_color': 0, 'secondary_color': None, 'tertiary_color': None}, 'hoist': False,
            'managed': False, 'mentionable': False, 'icon': None, 'unicode_emoji': None, 'flags': 0}


def member(user: dict, roles=(), nick: Optional[str] = None) -> dict:
    return {'user': user, 'roles': [str(r) for r in roles], 'nick': nick, 'avatar': None, 'joined_at': JOINED,
            'premium_since': None, 'deaf': False, 'mute': False, 'flags': 0, 'pending': False}


def overwrite(id: int, *, member: bool = False, allow: int = 0, deny: int = 0) -> dict:
    """Channel permission overwrite for a role id (or a member id with ``member=True``)."""
    return {'id': str(id), 'type': 1 if member else 0, 'allow': str(allow), 'deny': str(deny)}


def text_channel(id: int, guild_id: int, name: str, permission_overwrites=(), parent_id=None) -> dict:
    return {'id': str(id), 'type': 0, 'guild_id': str(guild_id), 'name': name, 'position': 0, 'topic': None,
            'permission_overwrites': list(permission_overwrites), 'parent_id': parent_id and str(parent_id),
            'nsfw': False, 'last_message_id': None, 'rate_limit_per_user': 0, 'flags': 0}


def forum_channel(id: int, guild_id: int, name: str, permission_overwrites=(), media: bool = False) -> dict:
    """A forum (type 15) or media (16) channel: it holds posts (threads), never messages of its own."""
    return {'id': str(id), 'type': 16 if media else 15, 'guild_id': str(guild_id), 'name': name, 'position': 0,
            'topic': None, 'permission_overwrites': list(permission_overwrites), 'parent_id': None, 'nsfw': False,
            'last_message_id': None, 'rate_limit_per_user': 0, 'flags': 0, 'available_tags': [],
            'default_reaction_emoji': None, 'default_sort_order': None, 'default_forum_layout': 0,
            'default_thread_rate_limit_per_user': 0}


def thread(id: int, guild_id: int, parent_id: int, name: str, owner_id: int = BOT_ID, type: int = 11) -> dict:
    return {'id': str(id), 'type': type, 'guild_id': str(guild_id), 'parent_id': str(parent_id), 'name': name,
            'owner_id': str(owner_id), 'message_count': 0, 'member_count': 1, 'total_message_sent': 0,
            'rate_limit_per_user': 0, 'flags': 0, 'last_message_id': None,
            'thread_metadata': {'archived': False, 'auto_archive_duration': 1440, 'locked': False,
                                'archive_timestamp': JOINED, 'invitable': True}}


def dm_channel(id: int, recipient: dict) -> dict:
    return {'id': str(id), 'type': 1, 'last_message_id': None, 'recipients': [_split(recipient)[0]], 'flags': 0}


def guild(id: int, name: str, owner_id: int, channels=(), roles=(), members=()) -> dict:
    """GUILD_CREATE payload; threads (types 10-12) in ``channels`` go to ``threads`` as Discord sends them."""
    roles = list(roles) if any(r['id'] == str(id) for r in roles) else [
        role(id, '@everyone', DEFAULT_PERMISSIONS), *roles]
    empty = ('features', 'emojis', 'stickers', 'voice_states', 'presences', 'stage_instances',
             'guild_scheduled_events', 'soundboard_sounds')
    return {'id': str(id), 'name': name, 'owner_id': str(owner_id), 'unavailable': False, 'large': False,
            'member_count': len(members), 'joined_at': JOINED, 'roles': roles, 'members': list(members),
            'channels': [c for c in channels if c['type'] not in THREAD_TYPES],
            'threads': [c for c in channels if c['type'] in THREAD_TYPES], **{k: [] for k in empty},
            'preferred_locale': 'en-US', 'verification_level': 0, 'default_message_notifications': 0,
            'explicit_content_filter': 0, 'mfa_level': 0, 'nsfw_level': 0, 'premium_tier': 0, 'icon': None}


def attachment(id: int, filename: str, size: int = 0, url: Optional[str] = None, content_type=None) -> dict:
    url = url or f'https://cdn.discordapp.com/attachments/0/{id}/{filename}'
    return {'id': str(id), 'filename': filename, 'size': size, 'url': url, 'proxy_url': url,
            'content_type': content_type}


def message(id: int, channel_id: int, author: dict, content: str, guild_id: Optional[int] = None, mentions=(),
            referenced_message: Optional[dict] = None, attachments=(), webhook_id=None, type: Optional[int] = None,
            *, embeds=(), components=(), flags: int = 0) -> dict:
    """MESSAGE_CREATE payload. In guilds the gateway attaches the author's partial ``member`` (roles!): pass a
    member payload as ``author`` to control it. ``type`` defaults to 19 (REPLY) with a reference, else 0."""
    author_user, author_member = _split(author)
    data = {'id': str(id), 'channel_id': str(channel_id), 'author': author_user, 'content': content,
            'timestamp': discord.utils.utcnow().isoformat(), 'edited_timestamp': None, 'tts': False,
            'mention_everyone': False, 'mention_roles': [], 'attachments': list(attachments), 'embeds': list(embeds),
            'components': list(components), 'pinned': False, 'flags': flags,
            'type': type if type is not None else (19 if referenced_message else 0),
            'mentions': [dict(u, member=m) if guild_id and m else u for u, m in map(_split, mentions)]}
    if guild_id is not None:
        data['guild_id'] = str(guild_id)
        if webhook_id is None:
            data['member'] = author_member or _split(member(author_user))[1]
    if webhook_id is not None:
        data['webhook_id'] = str(webhook_id)
    if referenced_message is not None:
        data['referenced_message'] = referenced_message
        data['message_reference'] = {'type': 0, 'message_id': referenced_message['id'],
                                     'channel_id': referenced_message['channel_id'],
                                     **({'guild_id': str(guild_id)} if guild_id else {})}
    return data


# ---------------------------------------------------------------- interaction payload builders
def interaction(type: int, *, user: dict, data: Optional[dict] = None, channel: Optional[dict] = None,
                guild_id: Optional[int] = None, permissions: int = 0, app_permissions: int = 0,
                message: Optional[dict] = None, locale: str = 'en-US', application_id: int = APP_ID,
                context: Optional[int] = None, integration_owners: Optional[dict] = None) -> dict:
    """INTERACTION_CREATE payload (2 command, 3 component, 4 autocomplete). In guilds ``member.permissions`` is
    the member's computed channel permissions; discord.py exposes it verbatim as ``interaction.permissions``
    (which ``app_commands.checks.has_permissions`` reads). In DMs ``user`` is sent instead of ``member``.

    ``context`` is the interaction context type (0 guild, 1 the bot's DM, 2 a private channel: a DM or group
    DM between people); ``integration_owners`` is ``authorizing_integration_owners`` ({'0': guild id} for a
    server install, {'1': user id} for a user install). Both default to a server install (or the bot's DM)."""
    iid, (u, m) = snowflake(), _split(user)
    owners = integration_owners if integration_owners is not None else {'0': str(guild_id or 0)}
    p = {'id': str(iid), 'application_id': str(application_id), 'type': type, 'token': f'itoken-{iid}',
         'version': 1, 'locale': locale, 'app_permissions': str(app_permissions), 'entitlements': [],
         'attachment_size_limit': 10 * 1024 * 1024, 'context': context if context is not None else 0 if guild_id else 1,
         'authorizing_integration_owners': {str(k): str(v) for k, v in owners.items()}}
    if data is not None:
        p['data'] = data
    if channel is not None:
        p['channel'], p['channel_id'] = dict(channel, permissions=str(permissions)), channel['id']
    if message is not None:
        p['message'] = message
    if guild_id is None:
        return dict(p, user=u)
    return dict(p, guild_id=str(guild_id), guild_locale='en-US',
                guild={'id': str(guild_id), 'locale': 'en-US', 'features': []},
                member=dict(m or _split(member(u))[1], user=u, permissions=str(permissions)))


def slash_data(tree: app_commands.CommandTree, command: str, options: Optional[dict] = None, *,
               guild_id: Optional[int] = None, focused: Optional[str] = None,
               perms: Callable[[Optional[dict], Optional[int]], int] = lambda who, channel_id: 0) -> dict:
    """``data`` of an APPLICATION_COMMAND interaction for ``command`` ("group [group] sub" paths).

    The root is looked up like CommandTree._get_app_command_options does: guild-scoped first (the payload then
    carries ``data.guild_id``, without which the tree cannot find them), then global. ``options`` maps parameter
    (or display) names to values; user/member/role/channel/attachment payloads become ids + ``resolved``
    entries. ``perms(who, channel_id)`` fills resolved ``permissions`` (None means invoker / this channel)."""
    path = command.split()
    root = tree.get_command(path[0], guild=discord.Object(guild_id)) if guild_id else None
    scope, cmd = (guild_id if root else None), root or tree.get_command(path[0])
    for part in path[1:]:
        cmd = cmd.get_command(part) if isinstance(cmd, app_commands.Group) else None
    if cmd is None or isinstance(cmd, app_commands.Group):
        raise LookupError(f'no slash command /{command} in tree (guild_id={guild_id})')
    params = {**{p.name: p for p in cmd.parameters}, **{p.display_name: p for p in cmd.parameters}}
    resolved, opts = {}, []
    for name, value in (options or {}).items():
        param = params[name]
        if isinstance(value, dict):
            u, m = _split(value)
            if 'username' in u:
                resolved.setdefault('users', {})[u['id']] = u
                if m is not None and guild_id:
                    resolved.setdefault('members', {})[u['id']] = dict(m, permissions=str(perms(value, None)))
            else:
                kind = 'attachments' if 'filename' in u else 'channels' if 'type' in u else 'roles'
                entry = dict(u, permissions=str(perms(None, int(u['id'])))) if kind == 'channels' else u
                resolved.setdefault(kind, {})[u['id']] = entry
            value = u['id']
        opts.append({'name': param.display_name, 'type': param.type.value, 'value': value,
                     **({'focused': True} if focused in (name, param.display_name) else {})})
    for depth in range(len(path) - 1, 0, -1):  # wrap in SUB_COMMAND (1) / SUB_COMMAND_GROUP (2)
        opts = [{'name': path[depth], 'type': 1 if depth == len(path) - 1 else 2, 'options': opts}]
    data = {'id': str(command_id(path[0], scope)), 'name': path[0], 'type': 1, 'options': opts}
    return dict(data, **({'guild_id': str(scope)} if scope else {}), **({'resolved': resolved} if resolved else {}))


def context_menu_data(tree: app_commands.CommandTree, name: str, target: dict, *, guild_id: Optional[int] = None,
                      member_permissions: int = 0) -> dict:
    """``data`` of a context-menu interaction (APPLICATION_COMMAND with ``data.type`` 2 user / 3 message).

    ``target`` is a message payload (a message menu) or a user / member payload (a user menu); it becomes
    ``data.target_id`` and the ``data.resolved`` entry Discord sends (``messages``; ``users`` + ``members``)."""
    menu = next((c for t in (discord.AppCommandType.message, discord.AppCommandType.user)
                 if (c := tree.get_command(name, type=t)) is not None), None)
    if menu is None:
        raise LookupError(f'no context menu {name!r} in tree')
    if menu.type == discord.AppCommandType.message:
        resolved = {'messages': {target['id']: target}}
        target_id = target['id']
    else:
        u, m = _split(target)
        target_id, resolved = u['id'], {'users': {u['id']: u}}
        if m is not None and guild_id:
            resolved['members'] = {u['id']: dict(m, permissions=str(member_permissions))}
    return {'id': str(command_id(name)), 'name': name, 'type': menu.type.value, 'target_id': target_id,
            'resolved': resolved}


# ---------------------------------------------------------------- recording
@dataclass
class Call:
    """One intercepted request. ``path`` is filled in; ``template`` is discord.py's ``Route.path``;
    ``params`` are the route params parsed back out ({'channel_id': '123'}); ``json`` is the JSON body (the
    ``payload_json`` part of multipart uploads); ``via`` is 'http' (client.http) or 'webhook' (the adapter)."""
    method: str
    path: str
    template: str
    params: Dict[str, str]
    json: Any = None
    files: List[RecordedFile] = field(default_factory=list)
    query: Optional[dict] = None
    reason: Optional[str] = None
    via: str = 'http'
    response: Any = None

    @property
    def callback_type(self) -> Optional[int]:
        """InteractionResponseType: 4 message, 5 defer, 6 deferred update, 7 update, 8 autocomplete, 9 modal."""
        return self.json.get('type') if self.template.endswith('/callback') else None

    @property
    def body(self) -> dict:
        """Message-ish body: the callback's ``data`` for interaction callbacks, else the JSON body."""
        if self.callback_type is not None:
            return self.json.get('data') or {}
        return self.json if isinstance(self.json, dict) else {}

    content = property(lambda self: self.body.get('content'))
    flags = property(lambda self: self.body.get('flags') or 0)
    ephemeral = property(lambda self: bool(self.flags & EPHEMERAL))
    embeds = property(lambda self: self.body.get('embeds') or [])
    components = property(lambda self: self.body.get('components') or [])
    attachments = property(lambda self: self.body.get('attachments') or [])

    @property
    def message(self) -> Optional[dict]:
        """The message object the fake created/edited for this call (e.g. to ``click`` on it)."""
        if self.callback_type is not None:
            return ((self.response or {}).get('resource') or {}).get('message')
        r = self.response
        return r if isinstance(r, dict) and 'author' in r and 'channel_id' in r else None


class Responses(list):
    """The Calls answering one interaction; ``.interaction`` is the INTERACTION_CREATE payload sent."""
    interaction: dict


def http_error(status: int, code: int, message: str) -> discord.HTTPException:
    """A discord.py HTTPException (Forbidden/NotFound by status) to raise from an ``on()`` handler."""
    cls = {403: discord.Forbidden, 404: discord.NotFound}.get(status, discord.HTTPException)
    return cls(SimpleNamespace(status=status, reason=message), {'code': code, 'message': message})


def _route_params(route: Route) -> Dict[str, str]:
    m = re.fullmatch(re.sub(r'\\\{(\w+)\\\}', r'(?P<\1>[^/]+)', re.escape(route.path)), route.url[len(Route.BASE):])
    return {k: urllib.parse.unquote(v) for k, v in m.groupdict().items()} if m else {}


def _payload_json(form) -> Any:
    return next((json.loads(p['value']) for p in form or () if p.get('name') == 'payload_json'), None)


def _read(f: discord.File) -> RecordedFile:
    f.reset()
    data = f.fp.read()
    f.reset()
    return RecordedFile(f.filename, data, f.description, f.spoiler)


_ACTIVE: List['DiscordHarness'] = []
_ORIGINAL_WEBHOOK_REQUEST = AsyncWebhookAdapter.request


async def _patched_webhook_request(adapter, route, session=None, **kwargs):
    return await _ACTIVE[-1]._webhook_request(route, **kwargs)


# ---------------------------------------------------------------- the harness
def _working(task: asyncio.Task) -> bool:
    """Whether ``task`` is inside ``asyncio.to_thread`` or an SQLite query: work under way, not parked.

    Without this, ``settle`` took a task that had awaited one thing or another for ``quiet`` seconds with
    no HTTP call for idle: an export packed in a thread, or an import writing a thousand memories query
    after query, on a slow machine, and the test read no answer. Waits that may be parked on purpose
    (locks, timers, PostgreSQL's sockets, where psycopg's LISTEN loop wakes every 0.1 s) are not counted.
    """
    coro = task.get_coro()
    while coro is not None and hasattr(coro, 'cr_code'):
        code = coro.cr_code
        if code.co_name == 'to_thread' or (code.co_name == '_execute' and 'aiosqlite' in code.co_filename):
            return True
        coro = coro.cr_await
    return False


class DiscordHarness:
    """The fake network of one bot: ``h = await DiscordHarness().start(bot, guilds=[...])``, later ``close()``."""

    def __init__(self, bot_user: Optional[dict] = None, application_id: int = APP_ID):
        self.bot: Any = None
        self.bot_user = bot_user or user(BOT_ID, 'HarnessBot', bot=True)
        self.application_id = application_id
        self.calls: List[Call] = []
        self.errors: List[logging.LogRecord] = []  # ERROR logs of 'discord.*': crashed handlers, default on_error
        self.guilds: Dict[int, dict] = {}
        self.channels: Dict[int, dict] = {}
        self.messages: Dict[int, dict] = {}  # fed MESSAGE_CREATEs + everything the bot sent/edited
        self.interactions: Dict[int, dict] = {}
        self.cdn: Dict[str, bytes] = {}  # url -> bytes for Attachment.read()/Asset.read() (get_from_cdn)
        self._originals: Dict[str, int] = {}  # interaction token -> @original message id
        self._overrides: List[tuple] = []
        self._baseline: set = set()
        self.idle_check: Callable[[], bool] = lambda: True  # the bot's own "nothing in flight" (set by tests)
        self._log_handler = logging.Handler(logging.ERROR)
        self._log_handler.emit = self.errors.append

    async def start(self, bot: discord.Client, *, guilds=()) -> 'DiscordHarness':
        """What ``login()`` + the gateway would do: set user and application id, run ``setup_hook`` (cogs load,
        ``tree.sync`` is recorded), feed READY + GUILD_CREATE (bot member added) and wait for ``on_ready``."""
        self.bot, state = bot, bot._connection
        if bot.loop is _UNSET_LOOP:
            await bot._async_setup_hook()
        bot.http.request = self._http_request  # instance attributes shadow HTTPClient's methods
        bot.http.get_from_cdn = self._get_from_cdn
        if not _ACTIVE:
            AsyncWebhookAdapter.request = _patched_webhook_request
        _ACTIVE.append(self)
        logging.getLogger('discord').addHandler(self._log_handler)
        try:
            return await self._boot(bot, state, guilds)
        except BaseException:  # never leave the webhook adapter patched behind a failed start
            await self.close()
            raise

    async def _boot(self, bot: discord.Client, state: Any, guilds) -> 'DiscordHarness':
        state.application_id = self.application_id = state.application_id or self.application_id
        if not state.application_flags:
            state.application_flags = discord.ApplicationFlags._from_value(0)
        state._chunk_guilds = False  # chunking needs a websocket; members come with GUILD_CREATE instead
        state.user = discord.ClientUser(state=state, data=self.bot_user)  # login() sets it before setup_hook
        await bot.setup_hook()
        me = member(self.bot_user)
        guilds = [g if any(m['user']['id'] == self.bot_user['id'] for m in g['members'])
                  else dict(g, members=[*g['members'], me], member_count=g['member_count'] + 1) for g in guilds]
        self.feed('READY', {'v': 10, 'user': self.bot_user, 'session_id': 'harness', 'shard': [0, 1],
                            'resume_gateway_url': 'wss://gateway.invalid', 'private_channels': [],
                            'guilds': [{'id': g['id'], 'unavailable': True} for g in guilds],
                            'application': {'id': str(self.application_id), 'flags': 0}})
        old_timeout, state.guild_ready_timeout = state.guild_ready_timeout, 0.01
        try:  # _delay_ready dispatches 'ready' guild_ready_timeout (default 2s) after the last GUILD_CREATE
            for g in guilds:
                self.feed('GUILD_CREATE', g)
            await asyncio.wait_for(bot.wait_until_ready(), 5)
        finally:
            state.guild_ready_timeout = old_timeout
        await self.settle()
        self._baseline = set(asyncio.all_tasks())  # long-lived tasks, e.g. loops started in on_ready
        return self

    async def close(self) -> None:
        """Close the bot (unloads cogs) and restore the patched network edges."""
        if self.bot is None:
            return
        try:
            await self.bot.close()
        finally:
            vars(self.bot.http).pop('request', None)
            vars(self.bot.http).pop('get_from_cdn', None)
            logging.getLogger('discord').removeHandler(self._log_handler)
            if self in _ACTIVE:
                _ACTIVE.remove(self)
            if not _ACTIVE:
                AsyncWebhookAdapter.request = _ORIGINAL_WEBHOOK_REQUEST
            self.bot = None

    # ---- gateway side
    def feed(self, event: str, data: dict) -> None:
        """Deliver one DISPATCH event exactly like ``DiscordWebSocket.received_message`` does (no settling)."""
        data = _jsonify(data)
        if event == 'GUILD_CREATE':
            self.guilds[int(data['id'])] = data
            self.channels.update({int(c['id']): dict(c, guild_id=data['id'])
                                  for c in data.get('channels', []) + data.get('threads', [])})
        elif event in ('CHANNEL_CREATE', 'THREAD_CREATE') and data.get('guild_id'):
            self.channels[int(data['id'])] = data
        elif event == 'MESSAGE_CREATE':
            self.messages[int(data['id'])] = data
        elif event == 'MESSAGE_UPDATE' and int(data['id']) in self.messages:
            self.messages[int(data['id'])].update(data)
        elif event == 'MESSAGE_DELETE':
            self.messages.pop(int(data['id']), None)
        elif event == 'MESSAGE_DELETE_BULK':
            for i in data['ids']:
                self.messages.pop(int(i), None)
        elif event == 'INTERACTION_CREATE':
            self.interactions[int(data['id'])] = data
        self.bot.dispatch('socket_event_type', event)
        self.bot._connection.parsers[event](data)

    async def settle(self, timeout: float = 5.0, quiet: float = 0.2) -> None:
        """Wait until the bot is idle: no task beyond the start-up baseline left and no new HTTP calls. Tasks
        parked on timers/futures (view timeouts, typing loops) count as idle once nothing changed for ``quiet``
        seconds. Raises TimeoutError if still busy after ``timeout`` (e.g. a loop spamming HTTP).

        ``quiet`` is 0.2 s, not less: a task waiting for a database thread (an fsync, a WAL checkpoint)
        looks parked too, and on a loaded machine one such wait can pass 50 ms. A task inside
        ``asyncio.to_thread`` or an SQLite query is working however long it takes (see ``_working``)."""
        loop, me = asyncio.get_running_loop(), asyncio.current_task()
        deadline, last, since = loop.time() + timeout, None, loop.time()
        while True:
            await asyncio.sleep(0.001)
            busy = {t for t in asyncio.all_tasks() if t is not me and not t.done() and t not in self._baseline}
            sig, now = (len(self.calls), frozenset(busy)), loop.time()
            if sig != last:
                last, since = sig, now
            elif (not busy or (now - since >= quiet and not any(map(_working, busy)))) and self.idle_check():
                return
            if now > deadline:
                raise asyncio.TimeoutError(f'bot did not settle; busy tasks: {busy}')

    async def send_message(self, payload: dict) -> List[Call]:
        """MESSAGE_CREATE, then ``settle()``; returns the calls made meanwhile."""
        start = len(self.calls)
        self.feed('MESSAGE_CREATE', payload)
        await self.settle()
        return self.calls[start:]

    def dm(self, recipient: dict) -> dict:
        """The DM channel payload between the bot and ``recipient`` (registered on first use)."""
        uid = _split(recipient)[0]['id']
        for ch in self.channels.values():
            if ch['type'] == 1 and ch['recipients'][0]['id'] == uid:
                return ch
        ch = dm_channel(snowflake(), recipient)
        self.channels[int(ch['id'])] = ch
        return ch

    def permissions_for(self, who: dict, channel_id: int) -> int:
        """discord.py's own permission resolution (owner, roles, overwrites) for ``who`` in ``channel_id``."""
        ch = self.bot.get_channel(int(channel_id))
        if getattr(ch, 'guild', None) is None:
            return 0
        mem = discord.Member(data=self._member_payload(ch.guild.id, who), guild=ch.guild, state=self.bot._connection)
        return ch.permissions_for(mem).value

    def _member_payload(self, guild_id: int, who: dict, *, known_only: bool = False) -> Optional[dict]:
        """``who`` as a member payload: as given, else as listed in the guild, else a role-less member."""
        u, m = _split(who)
        if m is not None:
            return dict(m, user=u)
        listed = [x for x in self.guilds.get(guild_id, {}).get('members', []) if x['user']['id'] == u.get('id')]
        return listed[0] if listed else None if known_only else member(u)

    def _guild_of(self, channel_id: int) -> Optional[int]:
        gid = self.channels.get(int(channel_id), {}).get('guild_id')
        return int(gid) if gid else None

    async def _interact(self, type: int, user: dict, channel_id: int, data: dict, message=None, permissions=None,
                        app_permissions=None, locale='en-US', context=None, integration_owners=None,
                        channel=None) -> Responses:
        """Build the payload (permissions computed unless given), feed INTERACTION_CREATE, settle.

        ``channel`` is the partial channel payload Discord sends for a channel the bot cannot know (a server
        it is not in, a DM between people); its ``guild_id`` then makes the interaction a server one."""
        ch = channel or self.channels.get(int(channel_id)) or dm_channel(channel_id, user)
        gid = self._guild_of(channel_id) if channel is None else (int(channel['guild_id']) if channel.get('guild_id') else None)
        if gid is not None and gid in self.guilds:
            user = self._member_payload(gid, user)
            permissions = self.permissions_for(user, channel_id) if permissions is None else permissions
            if app_permissions is None:
                app_permissions = self.permissions_for(self.bot_user, channel_id)
        payload = interaction(type, user=user, data=data, channel=ch, guild_id=gid, permissions=permissions or 0,
                              app_permissions=app_permissions or 0, message=message, locale=locale,
                              application_id=self.application_id, context=context,
                              integration_owners=integration_owners)
        self.feed('INTERACTION_CREATE', payload)
        await self.settle()
        deadline = asyncio.get_running_loop().time() + 30
        while self._thinking(int(payload['id'])) and asyncio.get_running_loop().time() < deadline:
            await self.settle(timeout=30, quiet=0.5)  # deferred: the bot is still at work on it
        out = Responses(self.interaction_responses(int(payload['id'])))
        out.interaction = payload
        return out

    def _slash_data(self, command, user, channel_id, options, focused=None) -> dict:
        gid = self._guild_of(channel_id)
        if gid:  # Discord resolves users who are guild members to user + member
            options = {k: (isinstance(v, dict) and self._member_payload(gid, v, known_only=True)) or v
                       for k, v in (options or {}).items()}
        return slash_data(self.bot.tree, command, options, guild_id=gid, focused=focused,
                          perms=lambda who, cid: self.permissions_for(who or user, cid or channel_id))

    async def invoke_slash(self, command: str, *, user: dict, channel_id: int, options: Optional[dict] = None,
                           permissions: Optional[int] = None, app_permissions: Optional[int] = None,
                           locale: str = 'en-US', context: Optional[int] = None,
                           integration_owners: Optional[dict] = None, channel: Optional[dict] = None) -> Responses:
        """Run ``/command`` ("group sub" paths ok) as ``user`` in ``channel_id`` (the guild comes from the
        channel; DM channel ids from ``dm()``). ``permissions=None`` -> computed from roles/overwrites.
        ``context``/``integration_owners``/``channel`` describe user-install cases (see ``interaction``)."""
        return await self._interact(2, user, channel_id, self._slash_data(command, user, channel_id, options),
                                    permissions=permissions, app_permissions=app_permissions, locale=locale,
                                    context=context, integration_owners=integration_owners, channel=channel)

    async def invoke_context_menu(self, name: str, target: dict, *, user: dict, channel_id: int,
                                  permissions: Optional[int] = None, context: Optional[int] = None,
                                  integration_owners: Optional[dict] = None, channel: Optional[dict] = None) -> Responses:
        """Right-click ``name`` on ``target`` (a message payload, or a user / member payload) as ``user`` in
        ``channel_id``. ``context``/``integration_owners``/``channel`` describe user-install cases (see ``interaction``)."""
        gid = self._guild_of(channel_id) if channel is None else (int(channel['guild_id']) if channel.get('guild_id') else None)
        perms = 0
        if gid is not None and gid in self.guilds and 'username' in target:  # Discord resolves guild members
            target = self._member_payload(gid, target, known_only=True) or target
            perms = self.permissions_for(target, channel_id) if 'user' in target else 0
        data = context_menu_data(self.bot.tree, name, target, guild_id=gid, member_permissions=perms)
        return await self._interact(2, user, channel_id, data, permissions=permissions, context=context,
                                    integration_owners=integration_owners, channel=channel)

    async def autocomplete(self, command: str, focused: str, *, user: dict, channel_id: int,
                           options: Optional[dict] = None) -> List[dict]:
        """Type-4 interaction with ``focused`` option (its partial value in ``options``); returns the choices."""
        res = await self._interact(4, user, channel_id, self._slash_data(command, user, channel_id, options, focused))
        return [c for r in res if r.callback_type == 8 for c in r.body.get('choices', [])]

    async def click(self, custom_id: str, message_payload: dict, *, user: dict, component_type: int = 2,
                    values=None, permissions: Optional[int] = None) -> Responses:
        """Component interaction (2 button; selects take ``values``) on a message, e.g. ``responses[0].message``.
        discord.py routes it by (component_type, custom_id, message id) through its real view store."""
        msg = self.messages.get(int(message_payload['id']), message_payload)
        data = {'custom_id': custom_id, 'component_type': component_type,
                **({'values': list(values)} if values is not None else {})}
        return await self._interact(3, user, int(msg['channel_id']), data, message=msg, permissions=permissions)

    # ---- queries and overrides
    def calls_to(self, method: str, template: str) -> List[Call]:
        return [c for c in self.calls if c.method == method and c.template == template]

    def sent_messages(self, channel_id: Optional[int] = None) -> List[Call]:
        """``POST /channels/{id}/messages`` calls (all channels when ``channel_id`` is None)."""
        return [c for c in self.calls_to('POST', '/channels/{channel_id}/messages')
                if channel_id is None or c.params['channel_id'] == str(channel_id)]

    def _thinking(self, interaction_id: int) -> bool:
        """Deferred with "thinking" (callback 5) and not yet answered: the bot owes a followup or an edit of
        ``@original`` (Discord shows "did not respond" otherwise), so the work is under way. ``settle`` can
        take such work for idle when it waits inside an async context manager's entry (a database query
        there is not seen as work), so ``_interact`` waits on until the answer comes."""
        calls = self.interaction_responses(interaction_id)
        return any(c.callback_type == 5 for c in calls) and not any(
            c.callback_type is None and c.method in ('POST', 'PATCH') for c in calls)

    def interaction_responses(self, interaction_id: int) -> List[Call]:
        """Callback, followup and ``@original`` calls of one interaction (matched by its token), in order."""
        token = self.interactions[int(interaction_id)]['token']
        return [c for c in self.calls if c.params.get('webhook_token') == token]

    def on(self, method: str, template: str, response: Any) -> None:
        """Override a route (``Route.path`` template). ``response`` is a value or ``fn(call)``; raise from
        ``fn`` (e.g. ``raise http_error(403, 50013, 'Missing Permissions')``) to simulate failures."""
        self._overrides.insert(0, (method, template, response))

    # ---- HTTP side
    async def _http_request(self, route: Route, *, files=None, form=None, **kwargs) -> Any:
        body = kwargs['json'] if 'json' in kwargs else _payload_json(form)
        return await self._handle(route, 'http', body, files, kwargs.get('params'), kwargs.get('reason'))

    async def _webhook_request(self, route: Route, *, payload=None, multipart=None, files=None, params=None,
                               reason=None, **_proxy_and_auth) -> Any:
        body = payload if payload is not None else _payload_json(multipart)
        return await self._handle(route, 'webhook', body, files, params, reason)

    async def _get_from_cdn(self, url: str) -> bytes:
        self.calls.append(Call('GET', url, 'cdn', {}, via='cdn'))
        return self.cdn.get(url, b'')

    async def _handle(self, route, via, body, files, query, reason) -> Any:
        call = Call(route.method, route.url[len(Route.BASE):], route.path, _route_params(route), _jsonify(body),
                    [_read(f) for f in files or ()], query, reason, via)
        self.calls.append(call)
        await asyncio.sleep(0)  # a real request always yields to the loop
        for method, template, response in self._overrides + self._defaults():
            if method == call.method and template == call.template:
                call.response = response(call) if callable(response) else response
                return _jsonify(call.response)
        log.warning('discord harness: unhandled %s %s -> None', call.method, call.path)
        return None

    def _defaults(self) -> List[tuple]:
        ch, msg = '/channels/{channel_id}', '/channels/{channel_id}/messages/{message_id}'
        wh, apps = '/webhooks/{webhook_id}/{webhook_token}', '/applications/{application_id}'
        routes = [
            ('POST', ch + '/messages', lambda c: self._new_message(int(c.params['channel_id']), c)),
            ('POST', ch + '/typing', None),
            ('GET', ch + '/messages', self._history),
            ('PUT', msg + '/reactions/{emoji}/@me', None),
            ('DELETE', msg + '/reactions/{emoji}/@me', None),
            ('GET', ch, lambda c: self._find(self.channels.values(), c.params['channel_id'], 10003, 'Channel')),
            ('GET', '/users/{user_id}', lambda c: self._find(self._users(), c.params['user_id'], 10013, 'User')),
            ('GET', '/guilds/{guild_id}/members/{member_id}', lambda c: self._find(
                self.guilds.get(int(c.params['guild_id']), {}).get('members', []), c.params['member_id'], 10007,
                'Member')),
            ('POST', '/users/@me/channels', lambda c: self.dm(self._find(self._users(), c.json['recipient_id']))),
            ('POST', '/interactions/{webhook_id}/{webhook_token}/callback', self._callback),
            ('POST', wh, self._followup),
        ]
        for path in (apps + '/commands', apps + '/guilds/{guild_id}/commands'):
            routes += [('PUT', path, lambda c: self._commands(c.json, c.params.get('guild_id'))),
                       ('GET', path, lambda c: self._commands(None, c.params.get('guild_id')))]
        by_id = lambda c: int(c.params['message_id'])  # noqa: E731
        by_token = lambda c: self._originals.get(c.params['webhook_token'])  # noqa: E731
        for path, get in ((msg, self._in_channel), (wh + '/messages/{message_id}', by_id), (wh + '/messages/@original', by_token)):
            routes += [('GET', path, lambda c, get=get: self._stored(get(c))),
                       ('PATCH', path, lambda c, get=get: self._edit(get(c), c)),
                       ('DELETE', path, lambda c, get=get: self._stored(get(c)) and self.messages.pop(get(c)) and None)]
        return routes

    # ---- default responders
    def _users(self) -> List[dict]:
        return [self.bot_user, *(m['user'] for g in self.guilds.values() for m in g['members']),
                *(r for c in self.channels.values() for r in c.get('recipients', []))]

    @staticmethod
    def _find(items, id, code: int = 10013, what: str = 'User') -> dict:
        """First item whose id (or user id, for members) matches, else a NotFound like Discord's."""
        for item in items:
            if _split(item)[0]['id'] == str(id):
                return item
        raise http_error(404, code, f'Unknown {what}')

    def _history(self, c: Call) -> List[dict]:
        """GET /channels/{id}/messages as Discord answers it: newest first, ``before``/``after``/``limit``."""
        self._find(self.channels.values(), c.params['channel_id'], 10003, 'Channel')
        q = c.query or {}
        found = [m for m in self.messages.values() if m['channel_id'] == c.params['channel_id']]
        if q.get('before'):
            found = [m for m in found if int(m['id']) < int(q['before'])]
        if q.get('after'):
            found = [m for m in found if int(m['id']) > int(q['after'])]
        found.sort(key=lambda m: int(m['id']), reverse=True)
        return found[:int(q.get('limit', 50))]

    def _in_channel(self, c: Call) -> Optional[int]:
        """A message route's message id, None (-> 404 Unknown Message) when it is not in that channel."""
        mid = int(c.params['message_id'])
        stored = self.messages.get(mid)
        return mid if stored is None or stored['channel_id'] == c.params['channel_id'] else None

    def _stored(self, message_id: Optional[int]) -> dict:
        if message_id not in self.messages:
            raise http_error(404, 10008, 'Unknown Message')
        return self.messages[message_id]

    def _commands(self, payload, guild_id) -> List[dict]:
        """Bulk-overwrite echo / listing, with the ids ``slash_data`` puts into interactions."""
        if payload is None:
            guild = discord.Object(int(guild_id)) if guild_id else None
            payload = [cmd.to_dict(self.bot.tree) for cmd in self.bot.tree.get_commands(guild=guild)]
        return [dict({'description': ''}, **cmd, id=str(command_id(cmd['name'], guild_id and int(guild_id))), version='1',
                     application_id=str(self.application_id), **({'guild_id': guild_id} if guild_id else {}))
                for cmd in payload]

    def _attachments(self, body: dict, files: List[RecordedFile], old: Optional[dict] = None) -> List[dict]:
        """Request ``attachments`` ({id: upload index | kept attachment id}) -> full attachment objects."""
        kept, out = {a['id']: a for a in (old or {}).get('attachments', [])}, []
        for a in body.get('attachments') or [{'id': n} for n in range(len(files))]:
            if str(a['id']) in kept:
                out.append(kept[str(a['id'])])
            elif int(a['id']) < len(files):
                f = files[int(a['id'])]
                out.append(dict(attachment(snowflake(), a.get('filename', f.filename), len(f.data)),
                                description=a.get('description')))
        return out

    def _new_message(self, channel_id: int, c: Call, ctx: Optional[dict] = None, body: Optional[dict] = None) -> dict:
        """Bot-authored message as the REST API returns it (REST responses carry no guild_id/member)."""
        body = c.body if body is None else body
        ref = body.get('message_reference')
        if ctx is None:
            self._may_post(channel_id, reply=bool(ref))
        if ref and ctx is None and int(ref['message_id']) not in self.messages:
            # Discord's rule: a reply to a message that is gone is refused unless the reference says
            # fail_if_not_exists=false (its default is true), and then it is posted without the reference.
            if ref.get('fail_if_not_exists', True):
                raise http_error(400, 50035, 'Invalid Form Body (message_reference: Unknown message)')
            ref = None
        msg = message(snowflake(), channel_id, self.bot_user, body.get('content') or '',
                      referenced_message=ref and self.messages.get(int(ref['message_id'])),
                      embeds=body.get('embeds') or [], components=body.get('components') or [],
                      flags=body.get('flags') or 0, type=19 if ref else 0)
        msg.update(attachments=self._attachments(body, c.files), tts=bool(body.get('tts')))
        if ref:  # discord.py sends int ids; the API answers with strings
            ref = dict(ref, channel_id=ref.get('channel_id', channel_id))
            msg['message_reference'] = {k: str(v) if k.endswith('_id') else v for k, v in ref.items()}
        if ctx is not None:  # interaction responses/followups are sent through the application's webhook
            msg.update(webhook_id=str(self.application_id), application_id=str(self.application_id),
                       interaction_metadata={'id': ctx['id'], 'type': ctx['type'],
                                             'user': ctx.get('member', {}).get('user') or ctx.get('user'),
                                             'authorizing_integration_owners': ctx['authorizing_integration_owners']})
        self.messages[int(msg['id'])] = msg
        return msg

    def _may_post(self, channel_id: int, *, reply: bool) -> None:
        """Discord's rules for the bot's own POST in a server channel: Send Messages (in Threads, and a
        locked thread needs Manage Threads) or 403 50013; a reply also needs Read Message History or 403
        160002. Interaction responses and followups go through the webhook and are not checked."""
        ch = self.bot.get_channel(int(channel_id))
        if getattr(ch, 'guild', None) is None:
            return
        perms = discord.Permissions(self.permissions_for(self.bot_user, channel_id))
        if isinstance(ch, discord.Thread):
            allowed = perms.send_messages_in_threads and (not ch.locked or perms.manage_threads)
        else:
            allowed = perms.send_messages
        if not (perms.view_channel and allowed):
            raise http_error(403, 50013, 'Missing Permissions')
        if reply and not perms.read_message_history:
            raise http_error(403, 160002, 'Cannot reply without permission to read message history')

    def _edit(self, message_id: Optional[int], c: Call) -> dict:
        msg, body = self._stored(message_id), c.body
        for key, empty in (('content', ''), ('embeds', []), ('components', [])):
            if key in body:
                msg[key] = body[key] if body[key] is not None else empty
        if 'attachments' in body or c.files:
            msg['attachments'] = self._attachments(body, c.files, msg)
        flags = body.get('flags', msg['flags']) or 0  # ephemeral sticks; an edit ends the "thinking" state
        msg.update(flags=(flags | msg['flags'] & EPHEMERAL) & ~LOADING,
                   edited_timestamp=discord.utils.utcnow().isoformat())
        return msg

    def _followup(self, c: Call) -> Optional[dict]:
        """POST /webhooks/{app_id}/{token}: followups (discord.py passes ``wait=1`` for them)."""
        ctx = next((i for i in self.interactions.values() if i['token'] == c.params['webhook_token']), None)
        msg = self._new_message(int(ctx['channel_id']) if ctx else 0, c, ctx)
        return msg if (c.query or {}).get('wait') else None

    def _callback(self, c: Call) -> dict:
        """POST /interactions/{id}/{token}/callback?with_response=1 -> InteractionCallbackResponse. discord.py
        2.7 always asks ``with_response`` and keys a sent View by the returned ``response_message_id``."""
        ctx = self.interactions[int(c.params['webhook_id'])]
        rtype, data, msg = c.json['type'], c.body, None
        if rtype in (4, 5):  # CHANNEL_MESSAGE_WITH_SOURCE / DEFERRED_CHANNEL_MESSAGE (a "thinking" placeholder)
            body = data if rtype == 4 else {'content': '', 'flags': (data.get('flags') or 0) | LOADING}
            msg = self._new_message(int(ctx['channel_id']), c, ctx, body)
        elif rtype in (6, 7) and 'message' in ctx:  # (DEFERRED_)UPDATE_MESSAGE of the component's message
            mid = int(ctx['message']['id'])
            self.messages.setdefault(mid, _jsonify(ctx['message']))
            msg = self._edit(mid, c) if rtype == 7 else self.messages[mid]
        info = {'id': ctx['id'], 'type': ctx['type'], 'response_message_loading': rtype == 5,
                'response_message_ephemeral': bool(msg and msg['flags'] & EPHEMERAL)}
        out = {'interaction': info}
        if msg is not None:
            self._originals[ctx['token']] = int(msg['id'])
            info['response_message_id'] = msg['id']
            if rtype != 6:
                out['resource'] = {'type': rtype, 'message': msg}
        return out


async def start(bot: discord.Client, **kwargs: Any) -> DiscordHarness:
    """Shorthand for ``await DiscordHarness().start(bot, guilds=[...])``; call ``close()`` when done."""
    return await DiscordHarness().start(bot, **kwargs)
