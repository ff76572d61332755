"""The guild policy: defaults and sources, rules, concurrent edits, and cache invalidation (real SQLite store)."""

from __future__ import annotations

import pytest

from bot.engine.policy.server_settings import (
    OPERATOR,
    SERVER,
    GuildSettingsService,
    OperatorDefaults,
    SettingRefused,
    channel_listed,
    reset,
    resolve,
    set_field,
)
from bot.engine.stores.guild_settings import ServerSettings
from bot.storage import open_storage

DEFAULTS = OperatorDefaults(respond_channels=frozenset({"10"}), mod_log_channel="20", daily_tokens=1000,
                            member_daily_tokens=0, max_persona_chars=50)


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


class Contended:
    """A store whose next ``get`` first lets another writer change the record (a second process)."""

    def __init__(self, store) -> None:
        self.store = store
        self.before_next_get = None
        self.listeners = []

    async def get(self, guild_id):
        hook, self.before_next_get = self.before_next_get, None
        if hook is not None:
            await hook()
        return await self.store.get(guild_id)

    async def put(self, settings, *, replaces):
        ok = await self.store.put(settings, replaces=replaces)
        if ok:
            for notify in self.listeners:  # what LISTEN/NOTIFY delivers to the other processes
                notify(settings.guild_id)
        return ok

    async def delete(self, guild_id):
        return await self.store.delete(guild_id)

    async def count(self):
        return await self.store.count()

    def subscribe(self, notify):
        self.listeners.append(notify)


class Deaf(Contended):
    """The store as seen by a process that missed every notification (a lost listener, say)."""

    def subscribe(self, notify):
        pass


@pytest.fixture
async def store(settings):
    """The real store of each backend (on PostgreSQL with its LISTEN connection running)."""
    async with open_storage(settings) as storage:
        yield storage.guild_settings


def test_defaults_and_sources():
    policy = resolve(None, DEFAULTS, "1")
    assert policy.respond_channels == {"10"} and policy.learning and policy.use_memories
    assert policy.daily_tokens == 1000 and policy.mod_log_channel == "20"
    assert set(policy.sources.values()) == {OPERATOR}
    mine = resolve(ServerSettings(guild_id="1", learning=False, daily_tokens=400), DEFAULTS, "1")
    assert not mine.learning and mine.daily_tokens == 400
    assert mine.sources["learning"] == SERVER and mine.sources["use_memories"] == OPERATOR


def test_a_budget_above_a_lowered_cap_is_clamped_when_read():
    stored = ServerSettings(guild_id="1", daily_tokens=900)
    lowered = OperatorDefaults(daily_tokens=500)
    assert resolve(stored, lowered, "1").daily_tokens == 500


def test_threads_follow_their_parent_channel():
    policy = resolve(ServerSettings(guild_id="1", respond_channels=frozenset({"5"}), mentions_off=frozenset({"6"})),
                     DEFAULTS, "1")
    assert policy.answers_everything(77, parent_id=5) and not policy.answers_everything(77, parent_id=4)
    assert not policy.answers_mentions(78, parent_id=6) and policy.answers_mentions(78, parent_id=5)


async def test_rules_refuse_and_write_nothing(store):
    service = GuildSettingsService(store, DEFAULTS)
    for edit, words in [
        (set_field("persona", "x" * 51), "at most 50"),
        (set_field("persona", "   "), "empty"),
        (set_field("daily_tokens", 1001), "over this bot's limit of 1,000"),
        (set_field("daily_tokens", 0), "at least 1 token"),
        (set_field("member_daily_tokens", 2000), "cannot be more than the server's"),
    ]:
        with pytest.raises(SettingRefused, match=words):
            await service.change("1", edit, by="7")
    assert await store.get("1") is None


async def test_an_unrelated_change_is_not_blocked_by_a_value_a_lowered_cap_now_forbids(store):
    await GuildSettingsService(store, OperatorDefaults(daily_tokens=5000)).change("1", set_field("daily_tokens", 4000), by="7")
    service = GuildSettingsService(store, OperatorDefaults(daily_tokens=1000))
    _, after = await service.change("1", set_field("learning", False), by="7")
    assert not after.learning and after.daily_tokens == 1000


async def test_two_writers_at_once_lose_neither_change(store):
    shared = Contended(store)
    first, second = GuildSettingsService(shared, DEFAULTS), GuildSettingsService(store, DEFAULTS)

    async def the_other_process_adds_a_channel():
        await second.change("1", channel_listed("respond_channels", "31", True), by="8")

    await first.change("1", set_field("learning", False), by="7")
    shared.before_next_get = the_other_process_adds_a_channel
    await first.change("1", channel_listed("respond_channels", "32", True), by="7")
    record = await store.get("1")
    assert record.respond_channels == {"31", "32"} and record.learning is False
    assert record.version == 3 and record.updated_by == "7"


async def test_a_change_elsewhere_reaches_the_cache_through_the_notification(store):
    clock = Clock()
    shared = Contended(store)
    reader = GuildSettingsService(shared, DEFAULTS, cache_seconds=60, clock=clock)
    writer = GuildSettingsService(shared, DEFAULTS, cache_seconds=60, clock=clock)
    assert (await reader.policy("1")).learning is True  # cached now
    await writer.change("1", set_field("learning", False), by="7")
    assert (await reader.policy("1")).learning is False  # dropped by the notification, read again


async def test_without_a_notification_the_cache_expires(store):
    clock = Clock()
    reader = GuildSettingsService(Deaf(store), DEFAULTS, cache_seconds=60, clock=clock)
    writer = GuildSettingsService(store, DEFAULTS, cache_seconds=60, clock=clock)
    assert (await reader.policy("1")).learning is True
    await writer.change("1", set_field("learning", False), by="7")
    assert (await reader.policy("1")).learning is True  # still trusted: nobody told this process
    clock.now += 61
    assert (await reader.policy("1")).learning is False
    reader.invalidate(None)  # a lost-and-restored listener drops everything
    assert reader._cache == {}


async def test_a_database_outage_keeps_the_settings_last_read_not_the_operators(store):
    """Once the cache has expired, a failed read uses the record last read (the server keeps running as its
    admins set it); with nothing read before, or after a change dropped the entry, the failure is raised."""
    clock = Clock()
    failing = Contended(store)
    service = GuildSettingsService(failing, DEFAULTS, cache_seconds=60, clock=clock)
    await service.change("1", set_field("learning", False), by="7")
    assert (await service.policy("1")).learning is False

    async def outage():
        raise ConnectionError("database unreachable")

    clock.now += 61
    failing.before_next_get = outage
    assert (await service.policy("1")).learning is False  # the stale record, not the operator's default
    service.invalidate(None)  # the notification channel dropped with the database (PostgreSQL)
    failing.before_next_get = outage
    assert (await service.policy("1")).learning is False
    failing.before_next_get = outage
    with pytest.raises(ConnectionError):
        await service.policy("2")  # never read: nothing to fall back on
    service.invalidate("1")
    failing.before_next_get = outage
    with pytest.raises(ConnectionError):
        await service.policy("1")


async def test_reset_and_forget(store):
    service = GuildSettingsService(store, DEFAULTS)
    await service.change("1", channel_listed("mentions_off", "5", True), by="7")
    await service.change("1", set_field("persona", "Be brief."), by="7")
    _, after = await service.change("1", reset("mentions_off"), by="7")
    assert after.mentions_off == frozenset() and after.sources["mentions_off"] == OPERATOR
    assert after.persona_addition == "Be brief."
    assert await store.count() == 1
    assert await service.forget("1") is True
    assert await store.get("1") is None and (await service.policy("1")).persona_addition == ""
    assert await service.forget("1") is False


def test_round_trip_through_json():
    s = ServerSettings(guild_id="1", respond_channels=frozenset({"3", "20"}), mentions_off=frozenset({"4"}),
                       persona="Hi", learning=False, daily_tokens=5, version=4, updated_by="9", updated_at=1.5)
    assert ServerSettings.from_json("1", 4, s.to_json()) == s
    assert ServerSettings.from_json("1", 1, '{"learning": true, "added_later": 1}').learning is True
