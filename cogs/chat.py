"""Conversations: which messages the bot answers, what the model is given, and how replies go out.

It answers in DMs; in servers when @mentioned, when someone replies to one of its messages, and in every
message of the channels (or threads of the channels) listed in ``discord.respond_channels`` (or chosen by the
server's admins with ``/settings``, who can also turn mentions off in a channel). Never to
itself, other bots, webhooks or system messages. ``thread_id`` is the channel's ID (a thread's own ID, a
DM channel's ID); ``user_id`` is the author's ID.

No addressed message is dropped: each one joins a turn (see ``cogs._gathering``), and quick follow-ups
from the same person are answered together. Over a limit (the per-person token bucket, the bound on
waiting turns, a daily budget) a message is still recorded in the conversation, heard but not answered,
and the person gets one short notice per burst.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

import discord
from discord.ext import commands

from bot.client import MemoryBot
from bot.engine import BoundedDict, EmptyAnswer, GuildPolicy, Incoming, Quote, Reply, Speaker, safe_name
from cogs._context import StarterCache, carried_quotes, channel_context, marked_own, reply_chain, speaker_name
from cogs._failures import log_failure
from cogs._gate import access_allows, blocked, unknown_server
from cogs._input import input_builder
from cogs._gathering import ChannelTurns, Turn
from cogs._replying import ReplyWriter, may_speak, reply_to, typing_indicator

log = logging.getLogger(__name__)

DRAIN_RECORDING_SECONDS = 10.0  # at shutdown, past the drain: how long the turns left get to be recorded
APOLOGY = "Sorry, I couldn't come up with an answer just now. Please try again in a moment."
SLOW_DOWN = "You're going a bit fast for me. I've noted what you said and will take it in with your next message."
BUSY = "Lots of people are talking to me here right now. I've noted what you said; ask me again in a moment."
OUT_OF_BUDGET = {  # whose daily allowance ran out (TurnResult.spent): a member over their share is told so
    "server": "This server's allowance for today is used up, so I'm taking a break here until midnight UTC.",
    "member": "You've used up your share of today's allowance here; I can answer you again after midnight UTC.",
    "dm": "I've used up today's allowance for our DMs, so I'm taking a break until midnight UTC.",
}
MAX_CHANNELS = 10_000  # channel queues kept in memory; idle ones are dropped past this
JOIN_OVER_LIMIT = 10  # a message over the rate limit joins its author's waiting turn up to this many messages
DELETED_REMEMBERED = 10_000  # deleted message IDs kept, so a create handled after its delete is ignored
HEARD_REMEMBERED = 10_000  # message IDs; a replay comes within seconds of the original
ROLES_REMEMBERED = 50_000  # members whose roles a gateway message showed (a few hundred bytes each)

__all__ = ["Chat", "speaker_name"]


class Pending:
    """One addressed message waiting in a turn; ``content`` follows edits until it is answered."""

    def __init__(self, message: discord.Message, policy: GuildPolicy) -> None:
        self.message = message
        self.content = message.content
        self.attachments = [a.id for a in message.attachments]  # an edit may remove one (a file sent by mistake)
        self.policy = policy  # the server's settings when it arrived


class Chat(commands.Cog):
    """Answers messages with the engine."""

    def __init__(self, bot: MemoryBot) -> None:
        self.bot = bot
        self.engine = bot.engine
        self.config = bot.settings.discord
        self.inputs = input_builder(bot)
        self.streaming = bot.settings.model.streaming
        self.deadline = bot.settings.model.timeout_seconds  # the most anyone waits for an answer or an apology
        self.access = bot.settings.access
        self.max_waiting = bot.settings.limits.max_waiting_turns
        self.channels: dict[int, ChannelTurns[Pending]] = {}
        self.starters = StarterCache()
        # messages being recorded without an answer -> their latest text and attachment IDs
        self._hearing: dict[int, tuple[str, list[int]]] = {}
        self._deleted: dict[int, None] = {}  # recently deleted message IDs (bounded), for out-of-order events
        self._edited: dict[int, None] = {}  # recently edited message IDs (bounded): a reply's copy of one is stale
        self.draining = False  # shutting down (``drain``): messages are recorded, not answered
        self.drained = False  # and past the drain's deadline: waiting turns are recorded, not started
        self._heard: dict[int, None] = {}  # recently answered message IDs (bounded): a replayed create is not
        # answered twice (a gateway RESUME can deliver a MESSAGE_CREATE this process already handled)
        # (server, member) -> their role IDs, as the gateway's messages carried them: see ``context_blocked``
        self._roles: BoundedDict[tuple[int, int], frozenset[int]] = BoundedDict(ROLES_REMEMBERED)

    def context_blocked(self, message: discord.Message) -> bool:
        """Whether a message of the channel's recent history stays out of the context (see ``_gate.blocked``).

        Messages read from Discord's history carry no member data (this bot caches no members), so their
        authors have no roles and ``access.block_roles`` never matched them: muted members' posts reached
        the prompt whenever the context reached past discord.py's cache. Their roles are taken from the
        last message of theirs the gateway delivered; with roles blocked and none seen since start, a
        member's history post is left out (the block is the operator's word; context is only context).
        """
        author = message.author
        if not self.access.block_roles or isinstance(author, discord.Member) or message.guild is None or author.bot:
            return blocked(self.access, author)
        roles = self._roles.get((message.guild.id, author.id))
        return roles is None or blocked(self.access, author, roles)

    # ---- who is answered
    def from_a_person(self, message: discord.Message) -> bool:
        """A message a member wrote (not a bot's, a webhook's, the bot's own or a notice Discord wrote)."""
        me = self.bot.user
        return not (me is None or message.author.bot or message.webhook_id is not None or message.author.id == me.id
                    or message.type not in (discord.MessageType.default, discord.MessageType.reply))

    def should_answer(self, message: discord.Message, policy: GuildPolicy) -> bool:
        """Whether this message is addressed to the bot (see module docstring), under the server's settings."""
        if not self.from_a_person(message):
            return False
        me = self.bot.user
        if message.guild is None:
            return True
        channel = message.channel
        parent_id = getattr(channel, "parent_id", None)
        if policy.answers_everything(channel.id, parent_id):
            return True
        if not policy.answers_mentions(channel.id, parent_id):  # /settings mentions off in this channel
            return False
        if me in message.mentions or mentions_own_role(message):
            return True
        ref = message.reference
        resolved = ref.resolved if ref is not None else None
        if resolved is None and ref is not None and ref.type == discord.MessageReferenceType.default:
            resolved = ref.cached_message  # a reply whose payload lacks ``referenced_message`` (not a forward)
        return isinstance(resolved, discord.Message) and resolved.author.id == me.id

    @staticmethod
    async def _known_channel(message: discord.Message) -> None:
        """Give a message from a channel discord.py has not cached its real channel (asked of Discord).

        A new thread's first message can arrive before its THREAD_CREATE: discord.py then gives it a
        ``PartialMessageable``, which has no parent, and the parent channel's rules (``block_channels``,
        ``/settings mentions off``, its instructions) did not apply in the thread. Asked only for a
        message that would be answered, or, in a server answering every message of some channels, for a
        member's message (the new thread may be one of theirs), so bots' chatter costs no request.
        """
        try:
            message.channel = await message.guild.fetch_channel(message.channel.id)
        except (discord.HTTPException, discord.ClientException) as exc:  # judged as before, by the channel alone
            log.info("could not look up channel %s (%s)", message.channel.id, exc)

    # ---- what the model is given
    async def build_input(self, message: discord.Message, content: str | None = None) -> str:
        """The message text for the model (see ``cogs._input``)."""
        return await self.inputs.build(self.bot.user, message, content)

    def speaker(self, message: discord.Message) -> Speaker:
        channel = message.channel
        if message.guild is None:
            place = "a direct message with them"
        else:
            channel_name = speaker_name_text(getattr(channel, "name", "channel"))
            place = f"#{channel_name} on the server {speaker_name_text(message.guild.name)}"
        return Speaker(
            user_id=str(message.author.id),
            name=speaker_name(message.author),
            guild_id=str(message.guild.id) if message.guild else "dm",
            channel_id=str(channel.id),
            message_id=str(message.id),
            sent_at=message.created_at.isoformat(),  # from the snowflake: when it was sent, not when answered
            parent_id=str(getattr(channel, "parent_id", None) or ""),
            place=place,
        )

    async def incoming(self, items: list[Pending], *, answer: bool = True, again: bool = False) -> list[Incoming]:
        """The turn's messages as the engine takes them; those with nothing to answer are left out.
        ``again``: a restarted turn, whose first attempt may have stored them already. Their images are
        not here: :meth:`images` fetches them once the engine knows the turn will be answered."""
        out = []
        for item in items:
            text = await self.build_input(item.message, item.content)
            if not text:
                if self.bot.user not in item.message.mentions and not mentions_own_role(item.message):
                    continue  # nothing to answer (a sticker, an embed, whitespace); a bare mention gets a hello
                stickers = [safe_name(s.name, 30) for s in item.message.stickers]
                text = (f"(they sent the sticker {', '.join(stickers)} and mentioned you)" if stickers
                        else "(the message was empty: they only mentioned you)")
            out.append(Incoming(self.speaker(item.message), text, answer=answer, again=again))
        return out

    async def images(self, items: list[Pending], incoming: list[Incoming]) -> list[tuple]:
        """The images of each of ``incoming``, downloaded only for a turn that will be answered (a member
        over their budget posting albums cost the bot the downloads all the same). A turn shows the images
        of its last messages, as many as one message may have: follow-ups (and messages heard over a limit
        joining it) each with four images made requests of dozens of them."""
        room, most = self.inputs.max_images, {}
        for item in reversed(items):
            most[item.message.id] = min(room, len(self.inputs.shown_attachments(item.message)))
            room -= most[item.message.id]
        by_id = {str(item.message.id): item.message for item in items}
        return [await self.inputs.images(by_id[m.speaker.message_id], most[int(m.speaker.message_id)])
                for m in incoming]

    async def quotes(self, items: list[Pending]) -> tuple[Quote, ...]:
        """Context for this answer: thread starter, reply chains, and the channel since the bot last spoke."""
        first = items[0].message
        quotes: list[Quote] = []
        if isinstance(first.channel, discord.Thread):
            starter = await self.starters.get(self.bot, first.channel)
            if starter is not None:
                quotes.append(starter)
        for item in items:
            quotes += carried_quotes(item.message)  # forwarded messages and polls in what is answered
            if item.message.reference is not None and self.config.reply_chain_depth:
                quotes += await reply_chain(self.bot, item.message, self.config.reply_chain_depth,
                                            images=lambda m: self.inputs.quoted_images(self.bot, m),
                                            deleted=self._deleted, edited=self._edited)
        quotes += await channel_context(self.bot, first, count=self.config.channel_context_messages,
                                        tokens=self.config.channel_context_tokens,
                                        skip=self.context_blocked)
        own = {str(i.message.id) for i in items}
        unique: dict[str, Quote] = {}
        for q in quotes:
            if q.message_id not in own:
                key = q.message_id or str(len(unique))
                kept = unique.setdefault(key, q)
                if kept.kind == "starter" and q.kind == "reply":
                    # a reply to the thread's (or forum post's) first message: the reply's quote carries
                    # its images and says it is the message replied to; the starter's had neither
                    unique[key] = q
        return marked_own(unique.values(), self.bot.user)

    # ---- arrival
    @commands.Cog.listener()
    async def on_message(self, message: discord.Message) -> None:
        if unknown_server(message):
            log.warning("a message in channel %s of server %s, which this process does not know; not handled",
                        message.channel.id, getattr(message.channel, "guild_id", None))
            return
        if self.access.block_roles and isinstance(message.author, discord.Member):
            self._roles[(message.author.guild.id, message.author.id)] = frozenset(r.id for r in message.author.roles)
        try:
            policy = await self.engine.guild_policy(message.guild.id if message.guild else None)  # once per message
        except Exception as exc:  # noqa: BLE001 - the database is down and no earlier read of the settings is kept
            log_failure(log, self.engine.outages, exc, "could not read the settings for a message in channel %s",
                        message.channel.id)
            me = self.bot.user
            asked = message.guild is None or (me is not None and me in message.mentions) or mentions_own_role(message)
            if asked and not message.author.bot and me is not None and message.author.id != me.id \
                    and access_allows(message, self.access) and self.engine.notice_due(message.author.id):
                await self.notify(message, APOLOGY)  # someone spoke to the bot: they are told, not ignored
            return
        if message.guild is not None and isinstance(message.channel, discord.PartialMessageable) \
                and (self.should_answer(message, policy) or (policy.respond_channels and self.from_a_person(message))):
            # (a server answering every message of some channels: the uncached channel may be a new thread
            # or post of one, whose first message, no mention in it, is answered too)
            await self._known_channel(message)
        if not self.should_answer(message, policy) or not access_allows(message, self.access):
            return
        if message.id in self._deleted:  # deleted before its create was handled: nothing to answer or keep
            return
        if not may_speak(message):  # an answer would be refused: no model call, nothing kept
            log.info("addressed in channel %s, where the bot may not send messages; not answered",
                     message.channel.id)
            return
        if message.id in self._heard:
            log.debug("message %s was delivered again; it is answered once", message.id)
            return
        self._heard[message.id] = None
        while len(self._heard) > HEARD_REMEMBERED:
            del self._heard[next(iter(self._heard))]
        if self.draining:  # shutting down: kept (and learned from), not answered; a follow-up to a turn still
            # waiting goes with it (stored in order)
            turns = self.channels.get(message.channel.id)
            if not self.drained and turns is not None and turns.join_waiting(message.author.id, Pending(message, policy)):
                return
            await self.hear(message, policy, None)
            return
        allowed = self.engine.admit(message.author.id)
        if allowed and self.turns_for(message.channel.id).offer(message.author.id, Pending(message, policy)):
            return
        # Over the rate limit with a turn of theirs still waiting to start: it joins that turn (no model call
        # more), so it is stored after the messages it follows; recorded at once, it came before them.
        turns = self.channels.get(message.channel.id)
        if not allowed and turns is not None and turns.join_waiting(message.author.id, Pending(message, policy),
                                                                     most=JOIN_OVER_LIMIT):
            return
        notice = (SLOW_DOWN if not allowed else BUSY) if self.engine.notice_due(message.author.id) else None
        await self.hear(message, policy, notice)

    def turns_for(self, channel_id: int) -> ChannelTurns[Pending]:
        turns = self.channels.get(channel_id)
        if turns is None:
            if len(self.channels) >= MAX_CHANNELS:
                for key in [k for k, t in self.channels.items() if t.idle]:
                    del self.channels[key]
            turns = self.channels[channel_id] = ChannelTurns(
                self.answer_turn, gather_seconds=self.config.gather_seconds, max_waiting=self.max_waiting
            )
        return turns

    async def hear(self, message: discord.Message, policy: GuildPolicy, notice: str | None) -> None:
        """Record a message over a limit in the conversation, without a model call; notice if asked."""
        files = [a.id for a in message.attachments]
        self._hearing[message.id] = (message.content, files)  # an edit may come meanwhile (``edited``)
        try:
            item = Pending(message, policy)
            heard = await self.incoming([item], answer=False)
            if message.id not in self._deleted:  # deleted while its attachments were read: nothing to keep
                await self.engine.hear(str(message.channel.id), heard)
            latest, kept = self._hearing.get(message.id, (item.content, files))
            if message.id in self._deleted:  # deleted while it was being stored: the deletion may have run
                await self.engine.messages_deleted(str(message.channel.id), {str(message.id)})  # before it
            elif latest != item.content or kept != files:
                # edited while it was being read or stored (its text, or a file removed): the edit found
                # nothing stored yet, so it is applied now, without the removed files
                message.attachments = [a for a in message.attachments if a.id in set(kept)]
                text = await self.build_input(message, latest)
                await self.engine.message_edited(str(message.channel.id), str(message.id), text,
                                                 names={str(message.author.id): speaker_name(message.author)})
        except Exception:  # noqa: BLE001 - logged; the notice still goes out
            log.exception("could not record message %s in channel %s", message.id, message.channel.id)
        finally:
            self._hearing.pop(message.id, None)
        if notice:
            await self.notify(message, notice)

    def idle(self) -> bool:
        """Nothing being answered, waiting, or recorded right now (for shutdown checks and tests)."""
        return not self._hearing and all(t.current is None and not t.waiting for t in self.channels.values())

    async def drain(self, *, most: float) -> None:
        """Shutting down: take no new turn (a message is recorded, not answered), and wait at most ``most``
        seconds for the turns waiting or being answered to finish; what is left then is cancelled by the
        shutdown (a turn cancelled mid-answer keeps its messages in the thread)."""
        self.draining = True
        deadline = asyncio.get_running_loop().time() + most
        while not self.idle() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        if not self.idle():
            # No turn starts any more (``answer_turn`` records the waiting ones instead): one started now
            # would run against an engine that is closing.
            self.drained = True
            log.warning("shutting down with turns still waiting or being answered after %.0f s; the waiting "
                        "ones are recorded without an answer", most)
            # The answers still running are cancelled now, and the workers given a moment to record the
            # waiting turns: left running, an answer went on to post and attach its reply while the engine
            # and storage closed under it (the reply on Discord, never tied to its stored answer), and the
            # recordings nobody awaited were lost.
            until = asyncio.get_running_loop().time() + DRAIN_RECORDING_SECONDS
            for turns in self.channels.values():  # (one already sending its reply finishes: it is quick)
                current = turns.current
                if current is not None and not current.delivered and current.attempt is not None:
                    current.attempt.cancel()
            workers = [t.worker for t in self.channels.values() if t.worker is not None and not t.worker.done()]
            if workers:
                await asyncio.wait(workers, timeout=DRAIN_RECORDING_SECONDS)
            while self._hearing and asyncio.get_running_loop().time() < until:
                await asyncio.sleep(0.05)

    async def notify(self, message: discord.Message, text: str) -> None:
        try:
            await reply_to(message, text)
        except discord.HTTPException:
            log.warning("could not send a notice in channel %s", message.channel.id)

    # ---- edits and deletions of messages still waiting (what is stored is the events cog's)
    @commands.Cog.listener()
    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        content = payload.data.get("content")
        if content is not None and payload.data.get("edited_timestamp"):
            self._edited.pop(payload.message_id, None)
            self._edited[payload.message_id] = None
            while len(self._edited) > DELETED_REMEMBERED:
                del self._edited[next(iter(self._edited))]
        if content is not None:
            files = payload.data.get("attachments")  # absent from a partial update: unchanged
            self.edited(payload.channel_id, payload.message_id, content,
                        None if files is None else [int(a["id"]) for a in files])

    @commands.Cog.listener()
    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        self.deleted(payload.channel_id, {payload.message_id})

    @commands.Cog.listener()
    async def on_raw_bulk_message_delete(self, payload: discord.RawBulkMessageDeleteEvent) -> None:
        self.deleted(payload.channel_id, set(payload.message_ids))

    @commands.Cog.listener()
    async def on_guild_channel_delete(self, channel: discord.abc.GuildChannel) -> None:
        # Its threads go with it, and Discord sends no THREAD_DELETE for them: their turns go too.
        self.channel_gone(channel.id)
        for key in self._queues_where(lambda m: getattr(m.channel, "parent_id", None) == channel.id):
            self.channel_gone(key)

    @commands.Cog.listener()
    async def on_guild_remove(self, guild: discord.Guild) -> None:
        """Removed from a server (for good: an outage is ``on_guild_unavailable``): no turn waiting there is
        answered; the model is not called and nothing more is stored for a server whose data is going."""
        for key in self._queues_where(lambda m: m.guild is not None and m.guild.id == guild.id):
            self.channel_gone(key)

    def _queues_where(self, match: Callable[[discord.Message], bool]) -> list[int]:
        """The channels whose unanswered turns hold a message that matches."""
        return [key for key, turns in self.channels.items() if any(match(item.message) for item in turns.items())]

    @commands.Cog.listener()
    async def on_raw_thread_delete(self, payload: discord.RawThreadDeleteEvent) -> None:
        self.channel_gone(payload.thread_id)

    def edited(self, channel_id: int, message_id: int, content: str, attachments: list[int] | None = None) -> None:
        """A waiting message was edited: its turn answers the new text (and a thread it started shows it).

        A turn already being answered read the old text when it began (and gathers its context, downloads
        images, calls the model with it): it starts again with the new one, as for a follow-up, so the old
        text is neither answered nor stored nor learned. The events cog cannot do this: until the turn has
        stored the message there is nothing of it to edit. A message being recorded without an answer
        (``hear``) is checked again once stored. The same text again (a link preview, a pin) changes nothing;
        the same text with a file removed (``attachments``: the IDs now, None when the update does not say)
        starts the turn again too, without the file (taken out of the turn's message here: discord.py updates
        only a message it still holds in its cache).
        """
        self.starters.forget_message(message_id)
        if message_id in self._hearing:
            _, files = self._hearing[message_id]
            self._hearing[message_id] = (content, files if attachments is None else list(attachments))
        turns = self.channels.get(channel_id)
        changed = False
        for item in turns.items() if turns is not None else []:
            if item.message.id == message_id and (item.content != content or (
                    attachments is not None and attachments != item.attachments)):
                item.content = content
                if attachments is not None:
                    item.attachments = attachments
                    # The turn reads ``item.message``: discord.py updates it only while it is still cached
                    # (1,000 messages for the whole process), so the removed file goes from it here too.
                    # An edit can only remove files, never add one, so filtering the old list is enough.
                    kept = set(attachments)
                    item.message.attachments = [a for a in item.message.attachments if a.id in kept]
                changed = True
        if changed and turns is not None and not self.drained:  # a restart: a new model call, within limits
            turns.restart(lambda item: item.message.id == message_id, self.engine.restart_delay)

    def forget_waiting(self, channel_id: int, message_id: int) -> bool:
        """"Forget this" on a message this cog still holds (its turn waits for a quiet moment, or behind
        another, or to start again): it is answered and kept, never learned from (``never_learn``: the
        engine checks as it queues the turn, however far the turn has gone). True if it was held. The
        engine finds it in the learning queue otherwise (``waiting_to_learn``). A message over a limit that
        is still being recorded (``hear``: waiting for the channel, reading its attachments) is held too:
        missed, it was queued a moment after "nothing to forget", and learned."""
        turns = self.channels.get(channel_id)
        hearing = message_id in self._hearing
        if not hearing and (turns is None or not any(i.message.id == message_id for i in turns.items())):
            return False
        self.engine.never_learn(str(message_id))
        return True

    def deleted(self, channel_id: int, message_ids: set[int]) -> None:
        """Deleted messages leave the turns that were waiting to answer them (or are never let in)."""
        for message_id in message_ids:
            self._deleted[message_id] = None
            self.starters.forget_message(message_id)  # a deleted starter is never shown from memory
        while len(self._deleted) > DELETED_REMEMBERED:
            del self._deleted[next(iter(self._deleted))]
        turns = self.channels.get(channel_id)
        if turns is not None:
            turns.remove(lambda item: item.message.id in message_ids)

    def channel_gone(self, channel_id: int) -> None:
        turns = self.channels.pop(channel_id, None)
        if turns is not None:
            turns.remove(lambda item: True)
        self.starters.forget(channel_id)

    async def _record_unanswered(self, turn: Turn[Pending]) -> None:
        """Past the drain's deadline: the turn's messages are kept without an answer (as heard: a copy a
        cancelled attempt stored is replaced, and the next person's answer does not answer them), and a
        preview an earlier attempt left goes."""
        turn.delivered = True
        previous: ReplyWriter | None = turn.state.get("writer")
        if previous is not None:
            await previous.discard()
        for item in list(turn.items):
            await self.hear(item.message, item.policy, None)

    # ---- answering one turn
    async def answer_turn(self, turn: Turn[Pending]) -> None:
        """Answer a turn's messages with one reply; whatever fails on the way, one short apology."""
        items = list(turn.items)
        last = items[-1].message
        if self.drained:  # shutting down, out of time: kept, not answered (a restart makes no model call)
            await self._record_unanswered(turn)
            return
        previous: ReplyWriter | None = turn.state.get("writer")
        writer = ReplyWriter(last, streaming=self.streaming, adopt=previous)
        turn.state["writer"] = writer
        try:  # a writer left by an earlier attempt: this one is a restart, which may find its messages stored
            reply = await self._think(items, writer, again=previous is not None)
        except asyncio.CancelledError:
            if self.drained:  # the shutdown's drain ran out of time: its messages are recorded unanswered
                await asyncio.shield(self._record_unanswered(turn))
                raise
            if not turn.items:  # every message of it was deleted: no answer, and no half-written preview left
                await asyncio.shield(writer.discard())
            raise  # a follow-up arrived: the turn starts again with it (the preview is kept)
        except asyncio.TimeoutError:
            log.warning("answering message %s in channel %s took longer than %.0f s", last.id, last.channel.id,
                        self.deadline)
            turn.delivered = True
            await writer.fail(APOLOGY)
            return
        except Exception as exc:  # noqa: BLE001 - the user gets an apology, the log the details
            if isinstance(exc, EmptyAnswer):  # the model's doing, not a bug: a warning, no traceback
                log.warning("answering message %s in channel %s: %s", last.id, last.channel.id, exc)
            else:
                log_failure(log, self.engine.outages, exc, "answering message %s in channel %s failed",
                            last.id, last.channel.id)
            turn.delivered = True
            await writer.fail(APOLOGY)
            return
        turn.delivered = True
        if reply is None:
            await writer.discard()
            return
        try:
            sent = await writer.finish(reply.text)
        except discord.HTTPException as exc:
            log.warning("sending the reply to message %s in channel %s failed: %s %s", last.id, last.channel.id,
                        exc.status, exc.code)
            if writer.first is None:  # nobody saw it: not kept as said, nor learned from
                try:
                    await self.engine.answer_not_sent(str(last.channel.id), reply)
                except Exception:  # noqa: BLE001 - the answer stays stored, as before
                    log.exception("taking back the unsent answer to message %s failed", last.id)
                if exc.status not in (403, 404):  # AutoMod blocking a word of the answer (400, 200000):
                    await writer.fail(APOLOGY)  # the short apology gets through; not silence after typing
            return
        # Someone deleted the half-written answer (``writer.deleted``), or a part of it before it was attached
        # here: those deletions found no answer carrying the ID, so it is attached and deleted now, as a
        # deleted reply is.
        shown = [writer.deleted] if writer.deleted is not None else sent
        channel = str(last.channel.id)
        await self.engine.attach_sent(channel, reply, [str(m.id) for m in shown])
        gone = {str(m.id) for m in shown if m is writer.deleted or m.id in self._deleted}
        if gone:
            log.info("the answer to message %s was deleted as it was sent; it is not kept", last.id)
            try:
                await self.engine.messages_deleted(channel, gone)
            except Exception:  # noqa: BLE001 - the answer stays stored, as if its deletion had been missed
                log.exception("taking back the deleted answer to message %s failed", last.id)
        if sent and any(i.message.id in self._deleted for i in items):
            await self._take_back(last, sent)

    async def _take_back(self, last: discord.Message, sent: list[discord.Message]) -> None:
        """A message of the turn was deleted while its answer was being sent: the deletion found no reply
        to remove yet (the stored answer went with it), so the reply goes now if the server asked for that
        (``/settings delete-replies``), as it would have a moment later."""
        if last.guild is None:
            return
        try:
            if not (await self.engine.guild_policy(last.guild.id)).delete_replies:
                return
        except Exception:  # noqa: BLE001 - the settings could not be read: the reply stays, logged
            log.exception("could not read the settings to remove a reply in channel %s", last.channel.id)
            return
        for message in sent:
            try:
                await message.delete()
            except discord.HTTPException as exc:
                log.debug("could not delete reply %s in channel %s: %s", message.id, last.channel.id, exc.status)

    async def _think(self, items: list[Pending], writer: ReplyWriter, *, again: bool = False) -> Reply | None:
        """The answer, or None when the turn gets no answer (out of budget, nothing to answer)."""
        last = items[-1].message
        incoming = await self.incoming(items, again=again)
        if not incoming:
            return None
        result = await self.engine.turn(str(last.channel.id), incoming, context=lambda: self.quotes(items),
                                        images=lambda: self.images(items, incoming),
                                        while_answering=lambda: typing_indicator(last.channel),
                                        policy=items[-1].policy, on_delta=writer.on_delta, timeout=self.deadline)
        if result.notice == "out_of_budget":
            await self.notify(last, OUT_OF_BUDGET[result.spent or "server"])
        return result.reply


def mentions_own_role(message: discord.Message) -> bool:
    """Whether the message mentions the bot's managed role (the role Discord gives a bot, of its name):
    members pick it from the @ list as often as the bot itself, and mean the bot."""
    own = message.guild.self_role if message.guild is not None else None
    return own is not None and own in message.role_mentions


def speaker_name_text(text: str) -> str:
    """A channel or server name for the system prompt, on one line and without header characters."""
    return safe_name(text, 100) or "?"


async def setup(bot: MemoryBot) -> None:
    await bot.add_cog(Chat(bot))
