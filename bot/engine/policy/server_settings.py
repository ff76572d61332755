"""A server's effective settings (its admins' choices over the operator's defaults), and changing them.

The chat cog resolves one :class:`GuildPolicy` per message (``await engine.guild_settings.policy(id)``)
and passes that object on: which channels get every message answered, where mentions are ignored, the
server's instructions (added to the persona), whether the bot learns and uses memories there, and the
token budgets. Each value carries where it came from (``"server"`` or ``"operator"``) so ``/settings show``
can say so.

Caching: a policy is read on every message and changes rarely, so each process keeps the stored record
per server. Every change made through this process drops its entry at once; a change made by another
process arrives through the store's ``subscribe`` hook (PostgreSQL's LISTEN/NOTIFY) and drops it there;
and ``cache_seconds`` bounds how long an entry lives regardless, in case a notification was missed.

Concurrency: a change is an *edit* (a function from the old record to the new one) applied to the
freshest stored record and written with the version it replaces; if another process wrote first, the
edit is re-applied to what it wrote. Two admins adding two channels at once both get their channel.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, TypeVar

from bot.engine.errors import SettingRefused
from bot.engine.stores.guild_settings import GuildSettingsStore, ServerSettings
from bot.settings import Settings

log = logging.getLogger(__name__)

SERVER, OPERATOR = "server", "operator"
MAX_CHANNELS = 100  # per list: a server listing more is almost certainly a mistake
WRITE_ATTEMPTS = 50  # compare-and-set retries under contention, with a growing random pause between them
Edit = Callable[[ServerSettings], ServerSettings]
T = TypeVar("T")



@dataclass(frozen=True)
class OperatorDefaults:
    """What ``config.toml`` says, for servers that chose nothing (and the caps they must stay within)."""

    respond_channels: frozenset[str] = frozenset()
    mod_log_channel: str | None = None
    daily_tokens: int = 0  # 0: no limit; also the cap for a server's own budget
    member_daily_tokens: int = 0  # 0: no per-member limit; also the cap for a server's own
    max_persona_chars: int = 1000

    @classmethod
    def from_settings(cls, settings: Settings) -> "OperatorDefaults":
        limits = settings.limits
        mod_log = settings.discord.mod_log_channel_id
        return cls(
            respond_channels=frozenset(str(c) for c in settings.discord.respond_channels),
            mod_log_channel=str(mod_log) if mod_log else None,
            daily_tokens=limits.guild_daily_tokens,
            # limits.member_daily_tokens arrives with the per-member budgets (issue 9); read it here only.
            member_daily_tokens=getattr(limits, "member_daily_tokens", 0),
            max_persona_chars=settings.server_settings.max_persona_chars,
        )


@dataclass(frozen=True)
class GuildPolicy:
    """The effective settings of one server (or of DMs: everything at the operator's default)."""

    guild_id: str
    respond_channels: frozenset[str]
    mentions_off: frozenset[str]
    persona_addition: str
    learning: bool
    use_memories: bool
    daily_tokens: int  # 0: no limit
    member_daily_tokens: int  # 0: no limit
    mod_log_channel: str | None
    sources: dict[str, str] = field(default_factory=dict)  # setting name -> SERVER or OPERATOR
    version: int = 0
    channel_personas: dict[str, str] = field(default_factory=dict)  # channel ID -> that channel's instructions
    # Off by default: the bot's replies are Discord messages people may have read and answered; a server's
    # admins may choose that a member deleting a message also takes the bot's reply to it off Discord.
    delete_replies: bool = False

    def persona_for(self, channel_id: Any = None, parent_id: Any = None) -> str:
        """The instructions for a message here: the server's, then its channel's (a thread or forum post
        follows its parent channel's, then its own if it has any), each in its own paragraph."""
        parts = [self.persona_addition]
        for cid in dict.fromkeys(str(c) for c in (parent_id, channel_id) if c not in (None, "")):
            parts.append(self.channel_personas.get(cid, ""))
        return "\n\n".join(p for p in parts if p)

    def answers_everything(self, channel_id: Any, parent_id: Any = None) -> bool:
        """Every message is answered here (a thread follows its parent channel)."""
        return str(channel_id) in self.respond_channels or (
            parent_id is not None and str(parent_id) in self.respond_channels
        )

    def answers_mentions(self, channel_id: Any, parent_id: Any = None) -> bool:
        """Mentions and replies to the bot are answered here (a thread follows its parent channel)."""
        return str(channel_id) not in self.mentions_off and (
            parent_id is None or str(parent_id) not in self.mentions_off
        )


def resolve(stored: ServerSettings | None, defaults: OperatorDefaults, guild_id: str) -> GuildPolicy:
    """Server value where the server chose one, else the operator's default; and say which."""
    s = stored or ServerSettings(guild_id=guild_id)
    sources: dict[str, str] = {}

    def pick(name: str, value: T | None, default: T) -> T:
        sources[name] = OPERATOR if value is None else SERVER
        return default if value is None else value

    return GuildPolicy(
        guild_id=guild_id,
        respond_channels=pick("respond_channels", s.respond_channels, defaults.respond_channels),
        mentions_off=pick("mentions_off", s.mentions_off or None, frozenset()),
        persona_addition=pick("persona", s.persona, ""),
        learning=pick("learning", s.learning, True),
        use_memories=pick("use_memories", s.use_memories, True),
        daily_tokens=_capped(pick("daily_tokens", s.daily_tokens, None), defaults.daily_tokens,
                             defaults.daily_tokens),
        member_daily_tokens=_capped(pick("member_daily_tokens", s.member_daily_tokens, None),
                                    defaults.member_daily_tokens, defaults.member_daily_tokens),
        mod_log_channel=pick("mod_log_channel", s.mod_log_channel, defaults.mod_log_channel),
        sources=sources,
        version=s.version,
        channel_personas=dict(s.channel_personas),
        delete_replies=pick("delete_replies", s.delete_replies, False),
    )


def dm_policy(defaults: OperatorDefaults) -> GuildPolicy:
    """DMs have no server settings: everything at the operator's default."""
    return resolve(None, defaults, "dm")


def _capped(value: int | None, default: int, cap: int) -> int:
    """A server's budget within the operator's cap (which may have been lowered since it was set)."""
    if value is None:
        return default
    return min(value, cap) if cap else value


def check(settings: ServerSettings, defaults: OperatorDefaults, before: ServerSettings | None = None) -> None:
    """Refuse a record that breaks a rule (raises :class:`SettingRefused` with the reason).

    Only what changed since ``before`` is checked: a value that was valid when set (an operator may have
    lowered a cap since) must not block an unrelated change; it is clamped when read instead.
    """
    before = before or ServerSettings(guild_id=settings.guild_id)

    def changed(name: str) -> bool:
        return getattr(settings, name) != getattr(before, name)

    if settings.persona is not None and changed("persona"):
        if not settings.persona.strip():
            raise SettingRefused("The instructions are empty: use `/settings reset` to remove them.")
        if len(settings.persona) > defaults.max_persona_chars:
            raise SettingRefused(
                f"Those instructions are {len(settings.persona):,} characters long; "
                f"this bot allows at most {defaults.max_persona_chars:,}. Nothing was changed."
            )
    if changed("channel_personas"):
        for cid, text in settings.channel_personas.items():
            if text == before.channel_personas.get(cid):
                continue
            if not text.strip():
                raise SettingRefused("The instructions are empty: use `/settings reset` with the channel to remove them.")
            if len(text) > defaults.max_persona_chars:
                raise SettingRefused(
                    f"Those instructions are {len(text):,} characters long; "
                    f"this bot allows at most {defaults.max_persona_chars:,}. Nothing was changed."
                )
        if len(settings.channel_personas) > MAX_CHANNELS:
            raise SettingRefused(f"At most {MAX_CHANNELS} channels can have instructions. Nothing was changed.")
    for name, cap in (("daily_tokens", defaults.daily_tokens), ("member_daily_tokens", defaults.member_daily_tokens)):
        value = getattr(settings, name)
        if value is None or not changed(name):
            continue
        if value < 1:
            raise SettingRefused("A budget must be at least 1 token: use `/settings reset` to go back to the default.")
        if cap and value > cap:
            raise SettingRefused(
                f"{value:,} tokens is over this bot's limit of {cap:,} a day. Nothing was changed."
            )
    server_budget = settings.daily_tokens if settings.daily_tokens is not None else defaults.daily_tokens
    if (changed("member_daily_tokens") or changed("daily_tokens")) and settings.member_daily_tokens is not None \
            and server_budget and settings.member_daily_tokens > server_budget:
        raise SettingRefused(
            f"A member's budget ({settings.member_daily_tokens:,}) cannot be more than the server's "
            f"({server_budget:,} a day). Nothing was changed."
        )
    for name in ("respond_channels", "mentions_off"):
        channels = getattr(settings, name) or frozenset()
        if changed(name) and len(channels) > MAX_CHANNELS:
            raise SettingRefused(f"At most {MAX_CHANNELS} channels can be listed. Nothing was changed.")


class GuildSettingsService:
    """Reads (cached) and changes server settings; the one place both happen.

    Args:
        store: the backend's :class:`GuildSettingsStore`.
        defaults: the operator's defaults and caps.
        cache_seconds: the longest an entry is trusted without a change notification.
        clock: monotonic seconds (injected for tests).
    """

    def __init__(
        self,
        store: GuildSettingsStore,
        defaults: OperatorDefaults,
        *,
        cache_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.defaults = defaults
        self.cache_seconds = cache_seconds
        self.clock = clock
        self._cache: dict[str, tuple[float, ServerSettings | None]] = {}
        # The record last read of each server, kept through a lost notification channel (which drops the
        # whole cache: on PostgreSQL that is how an outage starts) for use only while the database cannot
        # be read; a change this process hears of drops the server's entry here too.
        self._last_read: dict[str, tuple[float, ServerSettings | None]] = {}
        self._generation = 0  # bumped by every invalidation, so a read racing one is not cached
        store.subscribe(self.invalidate)

    def invalidate(self, guild_id: str | None = None) -> None:
        """Drop a server's cached settings (all of them with None). Safe to call from any callback."""
        self._generation += 1
        if guild_id is None:
            self._cache.clear()
        else:
            self._cache.pop(str(guild_id), None)
            self._last_read.pop(str(guild_id), None)

    async def stored(self, guild_id: str) -> ServerSettings | None:
        """The server's record, from the cache when fresh."""
        guild_id = str(guild_id)
        hit = self._cache.get(guild_id)
        now = self.clock()
        if hit is not None and now - hit[0] < self.cache_seconds:
            return hit[1]
        generation = self._generation
        try:
            record = await self.store.get(guild_id)
        except Exception as exc:
            last = self._last_read.get(guild_id)
            if last is None:
                raise
            # The database is down: the settings last read (never ones a change heard of since replaced)
            # keep the server running as its admins set it, instead of every message failing.
            # At debug: the outage itself is one warning from storage, not one per message.
            log.debug("could not read the settings of server %s (%s); using the ones read %.0f s ago",
                      guild_id, type(exc).__name__, now - last[0])
            return last[1]
        if generation == self._generation:  # no invalidation arrived while we read: safe to keep
            if len(self._cache) >= 100_000:
                self._cache.clear()
            if len(self._last_read) >= 100_000:
                self._last_read.clear()
            self._cache[guild_id] = (now, record)
            self._last_read[guild_id] = (now, record)
        return record

    async def policy(self, guild_id: str | int | None) -> GuildPolicy:
        """The effective settings for a message in this server (``None`` or ``"dm"``: a DM)."""
        if guild_id is None or str(guild_id) == "dm":
            return dm_policy(self.defaults)
        return resolve(await self.stored(str(guild_id)), self.defaults, str(guild_id))

    async def change(self, guild_id: str | int, edit: Edit, *, by: str) -> tuple[GuildPolicy, GuildPolicy]:
        """Apply ``edit`` to the freshest record and store it; return the policy (before, after).

        Raises:
            SettingRefused: the edited record breaks a rule (nothing is written).
        """
        guild_id = str(guild_id)
        for attempt in range(WRITE_ATTEMPTS):
            if attempt:  # someone else wrote first: step aside a little, at random, so one of us wins
                await asyncio.sleep(random.uniform(0, min(0.2, 0.005 * 2 ** min(attempt, 6))))
            current = await self.store.get(guild_id) or ServerSettings(guild_id=guild_id)
            edited = edit(current)
            check(edited, self.defaults, current)
            new = replace(edited, guild_id=guild_id, version=current.version + 1, updated_by=str(by),
                          updated_at=time.time())
            if await self.store.put(new, replaces=current.version):
                self.invalidate(guild_id)
                return resolve(current, self.defaults, guild_id), resolve(new, self.defaults, guild_id)
            log.debug("settings of server %s changed concurrently; applying the change again", guild_id)
        raise RuntimeError(f"settings of server {guild_id} kept changing; gave up after {WRITE_ATTEMPTS} attempts")

    async def preview(self, guild_id: str | int, edit: Edit) -> None:
        """Check ``edit`` against the freshest record without writing (to refuse before asking to confirm).

        Raises:
            SettingRefused: the edited record would break a rule.
        """
        current = await self.store.get(str(guild_id)) or ServerSettings(guild_id=str(guild_id))
        check(edit(current), self.defaults, current)

    async def forget(self, guild_id: str | int) -> bool:
        """Delete a server's settings (the bot was removed from it)."""
        gone = await self.store.delete(str(guild_id))
        self.invalidate(str(guild_id))
        return gone


# ---- edits: small pure functions the cog composes (each returns a new record)
def set_field(name: str, value: Any) -> Edit:
    """Set one server setting to ``value`` (None: back to the operator's default); a typo in ``name`` is a bug."""
    if name not in {f for f in ServerSettings.__dataclass_fields__ if f not in ("guild_id", "version")}:
        raise ValueError(f"not a server setting: {name}")
    return lambda s: replace(s, **{name: value})


def channel_persona(channel_id: str, text: str | None) -> Edit:
    """Set one channel's instructions (None: remove them; the channel then has only the server's)."""

    def edit(s: ServerSettings) -> ServerSettings:
        personas = {k: v for k, v in s.channel_personas.items() if k != str(channel_id)}
        if text is not None:
            personas[str(channel_id)] = text
        return replace(s, channel_personas=personas)

    return edit


def channel_listed(name: str, channel_id: str, on: bool, start: frozenset[str] = frozenset()) -> Edit:
    """Add a channel to (or remove it from) ``respond_channels`` or ``mentions_off``.

    ``start`` is the list to begin from when the server never chose one: for ``respond_channels`` the
    operator's channels *in this server* (the cog knows which those are), so "add one more" keeps them.
    """

    def edit(s: ServerSettings) -> ServerSettings:
        current = getattr(s, name)
        if current is None:
            current = start
        updated = (current | {channel_id}) if on else (current - {channel_id})
        return replace(s, **{name: frozenset(updated)})

    return edit


def reset(name: str) -> Edit:
    """Back to the operator's default."""
    empty = frozenset() if name == "mentions_off" else {} if name == "channel_personas" else None
    return set_field(name, empty)
