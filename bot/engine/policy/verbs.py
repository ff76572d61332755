"""The front door's verbs for a server's settings and token budgets (``/settings``, the limits).

A mixin of :class:`bot.engine.ChatEngine` (see ``memories/verbs.py`` for why mixins): the verbs live in the
policy home, beside the settings service and the usage meter they call.
"""

from __future__ import annotations

from dataclasses import replace

from bot.engine.policy.server_settings import Edit, GuildPolicy, GuildSettingsService, OperatorDefaults, channel_persona
from bot.engine.policy.turn_policy import Policies
from bot.engine.policy.usage import UsageMeter
from bot.engine.state import Speaker
from bot.engine.stores import ServerSettings
from bot.metrics import Metrics


class SettingsVerbs:
    """Read, preview and change a server's settings; ask whether a budget is spent."""

    policies: Policies
    guild_settings: GuildSettingsService
    meter: UsageMeter
    metrics: Metrics

    async def guild_policy(self, guild_id: str | int | None) -> GuildPolicy:
        """A server's effective settings (``"dm"``/None: DMs), cached; see ``policy.server_settings``."""
        return await self.policies.server(guild_id)

    async def stored_settings(self, guild_id: str | int) -> ServerSettings | None:
        """What a server's admins chose (None: nothing yet)."""
        return await self.guild_settings.stored(str(guild_id))

    def operator_defaults(self) -> OperatorDefaults:
        """The operator's defaults and caps for every server."""
        return self.guild_settings.defaults

    async def preview_settings(self, guild_id: str | int, edit: Edit) -> None:
        """Check a change without storing it (raises ``SettingRefused``)."""
        await self.guild_settings.preview(guild_id, edit)

    async def change_settings(self, guild_id: str | int, edit: Edit, *, by: str) -> tuple[GuildPolicy, GuildPolicy]:
        """Apply and store a server settings change; returns the policy (before, after)."""
        result = await self.guild_settings.change(guild_id, edit, by=by)
        self.metrics.settings_changes.inc()
        return result

    async def channel_settings_gone(self, guild_id: str | int, channel_id: str | int) -> bool:
        """A channel or thread was deleted: its settings go with it, in one change (True if it had any).

        Its own instructions, and its place in the answer-every-message and mentions-off lists and as the
        mod-log channel. Kept, the lists counted the deleted channel against their cap, `/settings show`
        listed it as "#unknown", no picker could offer it to remove, and a deleted mod-log channel made every
        later audit line a warning in the process log only.
        """
        channel = str(channel_id)

        def gone(s: ServerSettings) -> ServerSettings:
            s = channel_persona(channel, None)(s)
            listed = s.respond_channels - {channel} if s.respond_channels is not None else None
            return replace(s, respond_channels=listed, mentions_off=s.mentions_off - {channel},
                           mod_log_channel=None if s.mod_log_channel == channel else s.mod_log_channel)

        stored = await self.guild_settings.stored(str(guild_id))
        if stored is None or gone(stored) == stored:
            return False
        await self.guild_settings.change(guild_id, gone, by="")
        return True

    async def budget_exhausted(self, speaker: Speaker, policy: GuildPolicy | None = None) -> str | None:
        """The budget bucket (a server, a member there, or a person's DMs) with no tokens left today, if any."""
        return await self.meter.exhausted(speaker, policy or await self.guild_policy(speaker.guild_id))

    async def tokens_today(self, guild_id: str, user_id: str | None = None) -> int:
        """Tokens used today (UTC) in a server (or by one person there, or in DMs)."""
        return await self.meter.tokens_today(guild_id, user_id)
