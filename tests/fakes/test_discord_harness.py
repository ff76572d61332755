"""Self-check for tests/fakes/discord_harness.py against a tiny real commands.Bot."""
from __future__ import annotations

from typing import Optional

import discord
import pytest
import pytest_asyncio
from discord import app_commands
from discord.ext import commands

from tests.fakes import discord_harness as dh

pytestmark = pytest.mark.asyncio

GUILD_ID, CHANNEL_ID, THREAD_ID, MOD_ROLE_ID = 900, 901, 902, 903
OWNER = dh.user(800, 'owner')
MOD = dh.user(801, 'mod', global_name='The Mod')
PLAIN = dh.user(802, 'plain')
DM_USER = dh.user(803, 'dmuser')

GUILD = dh.guild(
    GUILD_ID, 'Test Guild', owner_id=800,
    roles=[dh.role(MOD_ROLE_ID, 'Mods', discord.Permissions(manage_messages=True).value, position=1)],
    channels=[dh.text_channel(CHANNEL_ID, GUILD_ID, 'general'), dh.thread(THREAD_ID, GUILD_ID, CHANNEL_ID, 'a-thread')],
    members=[dh.member(OWNER), dh.member(MOD, roles=[MOD_ROLE_ID]), dh.member(PLAIN)],
)


class Echo(commands.Cog):
    @commands.Cog.listener()
    async def on_message(self, message: discord.Message) -> None:
        if message.author.bot:
            return
        async with message.channel.typing():
            await message.reply(f'echo: {message.content}', allowed_mentions=discord.AllowedMentions.none())


class ConfirmView(discord.ui.View):
    def __init__(self, owner_id: int):
        super().__init__(timeout=60)
        self.owner_id = owner_id

    async def interaction_check(self, interaction: discord.Interaction) -> bool:
        return interaction.user.id == self.owner_id

    @discord.ui.button(label='Confirm', style=discord.ButtonStyle.green, custom_id='demo:confirm')
    async def confirm(self, interaction: discord.Interaction, button: discord.ui.Button) -> None:
        await interaction.response.edit_message(content='Confirmed!', view=None)
        self.stop()


class Demo(commands.Cog):
    demo = app_commands.Group(name='demo', description='Demo commands')
    admin = app_commands.Group(name='admin', description='Admin commands', parent=demo)

    @demo.command(name='view', description='Show a confirm button')
    async def view(self, interaction: discord.Interaction) -> None:
        await interaction.response.send_message('Please confirm', view=ConfirmView(interaction.user.id), ephemeral=True)

    @demo.command(name='color', description='Pick a colour')
    async def color(self, interaction: discord.Interaction, name: str) -> None:
        await interaction.response.defer(thinking=True)
        await interaction.followup.send(f'colour {name}')

    @color.autocomplete('name')
    async def color_auto(self, interaction: discord.Interaction, current: str):
        return [app_commands.Choice(name=c, value=c) for c in ('red', 'green', 'blue') if c.startswith(current)]

    @admin.command(name='whois', description='Describe a member')
    async def whois(self, interaction: discord.Interaction, who: discord.Member) -> None:
        await interaction.response.send_message(f'{who.display_name} roles={[r.name for r in who.roles[1:]]}')

    @app_commands.command(name='purge', description='Delete messages')
    @app_commands.guilds(GUILD_ID)
    @app_commands.guild_only()
    @app_commands.default_permissions(manage_messages=True)
    @app_commands.checks.has_permissions(manage_messages=True)
    async def purge(self, interaction: discord.Interaction, count: int, target: Optional[discord.User] = None):
        await interaction.response.send_message(f'purged {count}', ephemeral=True)


class TinyBot(commands.Bot):
    def __init__(self) -> None:
        intents = discord.Intents.default()
        intents.message_content = True
        super().__init__(command_prefix='!', intents=intents)
        self.tree_errors: list = []

        @self.tree.error
        async def on_tree_error(interaction: discord.Interaction, error: app_commands.AppCommandError) -> None:
            self.tree_errors.append(error)
            await interaction.response.send_message('no permission', ephemeral=True)

    async def setup_hook(self) -> None:
        await self.add_cog(Echo())
        await self.add_cog(Demo())
        await self.tree.sync()
        await self.tree.sync(guild=discord.Object(GUILD_ID))


@pytest_asyncio.fixture
async def harness():
    bot = TinyBot()
    h = await dh.start(bot, guilds=[GUILD])
    yield h
    await h.close()
    assert not h.errors, [r.getMessage() for r in h.errors]


async def test_startup_ran_setup_hook_and_synced(harness):
    bot = harness.bot
    assert bot.is_ready() and bot.user.id == dh.BOT_ID and bot.application_id == dh.APP_ID
    assert bot.get_guild(GUILD_ID).me is not None
    assert isinstance(bot.get_channel(THREAD_ID), discord.Thread)
    (glob,) = harness.calls_to('PUT', '/applications/{application_id}/commands')
    assert [c['name'] for c in glob.json] == ['demo']
    (scoped,) = harness.calls_to('PUT', '/applications/{application_id}/guilds/{guild_id}/commands')
    assert scoped.json[0]['name'] == 'purge' and int(scoped.json[0]['default_member_permissions']) == 1 << 13


async def test_guild_message_gets_reply_with_typing(harness):
    original = dh.message(dh.snowflake(), CHANNEL_ID, dh.member(PLAIN), 'hello <@801>', guild_id=GUILD_ID)
    calls = await harness.send_message(original)
    assert [c.method + ' ' + c.template for c in calls] == [
        'POST /channels/{channel_id}/typing', 'POST /channels/{channel_id}/messages']
    (sent,) = harness.sent_messages(CHANNEL_ID)
    assert sent.content == 'echo: hello <@801>'
    assert str(sent.json['message_reference']['message_id']) == original['id']  # discord.py sends ints
    assert sent.message['message_reference']['message_id'] == original['id']
    assert sent.json['allowed_mentions']['parse'] == []
    assert sent.message['referenced_message']['id'] == original['id']


async def test_dm_message(harness):
    dm = harness.dm(DM_USER)
    await harness.send_message(dh.message(dh.snowflake(), dm['id'], DM_USER, 'hi in dm'))
    (sent,) = harness.sent_messages(dm['id'])
    assert sent.content == 'echo: hi in dm'
    assert harness.calls_to('POST', '/channels/{channel_id}/typing')[0].params['channel_id'] == dm['id']


async def test_thread_message(harness):
    await harness.send_message(dh.message(dh.snowflake(), THREAD_ID, dh.member(MOD), 'in thread', guild_id=GUILD_ID))
    (sent,) = harness.sent_messages(THREAD_ID)
    assert sent.content == 'echo: in thread'


async def test_bot_ignores_own_messages(harness):
    await harness.send_message(dh.message(dh.snowflake(), CHANNEL_ID, harness.bot_user, 'me', guild_id=GUILD_ID))
    assert harness.sent_messages() == []


async def test_ephemeral_view_and_button_click(harness):
    res = await harness.invoke_slash('demo view', user=PLAIN, channel_id=CHANNEL_ID)
    (cb,) = res
    assert cb.callback_type == 4 and cb.flags == 64 and cb.ephemeral and cb.content == 'Please confirm'
    assert cb.components[0]['components'][0]['custom_id'] == 'demo:confirm'
    clicked = await harness.click('demo:confirm', cb.message, user=PLAIN)
    (upd,) = clicked
    assert upd.callback_type == 7 and upd.content == 'Confirmed!' and upd.components == []
    assert harness.messages[int(cb.message['id'])]['content'] == 'Confirmed!'


async def test_button_click_by_other_user_is_rejected_by_interaction_check(harness):
    (cb,) = await harness.invoke_slash('demo view', user=PLAIN, channel_id=CHANNEL_ID)
    assert list(await harness.click('demo:confirm', cb.message, user=MOD)) == []


async def test_missing_permissions_goes_to_tree_on_error(harness):
    res = await harness.invoke_slash('purge', user=PLAIN, channel_id=CHANNEL_ID, options={'count': 5})
    assert res.interaction['data']['guild_id'] == str(GUILD_ID)
    assert res.interaction['member']['permissions'] == str(dh.DEFAULT_PERMISSIONS)
    (err,) = harness.bot.tree_errors
    assert isinstance(err, app_commands.MissingPermissions) and err.missing_permissions == ['manage_messages']
    assert res[0].content == 'no permission' and res[0].ephemeral


async def test_role_grants_permission(harness):
    res = await harness.invoke_slash('purge', user=MOD, channel_id=CHANNEL_ID, options={'count': 3, 'target': PLAIN})
    assert harness.bot.tree_errors == []
    assert res[0].content == 'purged 3'
    assert res.interaction['data']['resolved']['users'][str(PLAIN['id'])]['username'] == 'plain'


async def test_subcommand_group_with_resolved_member(harness):
    res = await harness.invoke_slash('demo admin whois', user=OWNER, channel_id=CHANNEL_ID, options={'who': MOD})
    assert res[0].content == 'The Mod roles=[\'Mods\']'
    assert res.interaction['data']['options'][0]['type'] == 2  # SUB_COMMAND_GROUP


async def test_defer_and_followup(harness):
    res = await harness.invoke_slash('demo color', user=PLAIN, channel_id=CHANNEL_ID, options={'name': 'red'})
    assert [r.callback_type for r in res] == [5, None]
    assert res[1].via == 'webhook' and res[1].content == 'colour red'


async def test_autocomplete(harness):
    choices = await harness.autocomplete('demo color', 'name', user=PLAIN, channel_id=CHANNEL_ID, options={'name': 'r'})
    assert choices == [{'name': 'red', 'value': 'red'}]


async def test_slash_in_dm(harness):
    res = await harness.invoke_slash('demo view', user=DM_USER, channel_id=harness.dm(DM_USER)['id'])
    assert 'user' in res.interaction and 'member' not in res.interaction
    assert res[0].ephemeral


async def test_rest_api_edges(harness, caplog):
    """Direct discord.py API calls also land in the recorder: uploads, edits, reactions, errors."""
    import io

    channel = harness.bot.get_channel(CHANNEL_ID)
    sent = await channel.send('file!', file=discord.File(io.BytesIO(b'abc'), 'a.txt'))
    assert sent.attachments[0].filename == 'a.txt' and sent.attachments[0].size == 3
    (call,) = harness.sent_messages(CHANNEL_ID)
    assert call.files[0].data == b'abc' and call.content == 'file!'
    await sent.add_reaction('\N{THUMBS UP SIGN}')
    edited = await sent.edit(content='edited')
    assert edited.content == 'edited' and edited.edited_at is not None
    assert (await channel.fetch_message(sent.id)).content == 'edited'
    assert (await harness.bot.fetch_user(MOD['id'])).name == 'mod'

    def deny(call):
        raise dh.http_error(403, 50013, 'Missing Permissions')

    harness.on('POST', '/channels/{channel_id}/messages', deny)
    with pytest.raises(discord.Forbidden):
        await channel.send('nope')
    await harness.bot.http.request(discord.http.Route('GET', '/gateway'))
    assert 'unhandled GET /gateway' in caplog.text
