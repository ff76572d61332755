"""Which Discord shards this process runs (``python -m bot run --shards 0-3 --shard-count 8``).

Discord splits a bot's servers over shards by ``(guild_id >> 22) % shard_count``; each process runs a
range of them (discord.py's ``AutoShardedBot``) and all share one PostgreSQL database. Direct messages
always arrive on shard 0, so the process that runs shard 0 answers every DM; it is also the one that
syncs slash commands (exactly one process does). SQLite is one process: it runs every shard or none.
"""

from __future__ import annotations

from dataclasses import dataclass


class ShardError(ValueError):
    """A bad ``--shards``/``--shard-count``, described in one line."""


@dataclass(frozen=True)
class ShardPlan:
    """The shards this process runs (``ids``) out of all the bot has (``count``)."""

    ids: tuple[int, ...]
    count: int

    @property
    def syncs_commands(self) -> bool:
        """Only the process with shard 0 pushes slash commands (and it gets the DMs)."""
        return 0 in self.ids

    @property
    def complete(self) -> bool:
        return set(self.ids) == set(range(self.count))


def parse_shards(spec: str | None, count: int | None, *, backend: str) -> ShardPlan | None:
    """``"0-3"`` or ``"0,2,5-7"`` with a shard count, checked; None when sharding was not asked for."""
    if spec is None and count is None:
        return None
    if spec is None or count is None:
        raise ShardError("--shards and --shard-count go together")
    if count < 1:
        raise ShardError("--shard-count must be at least 1")
    ids: set[int] = set()
    try:
        for part in spec.split(","):
            first, _, last = part.strip().partition("-")
            lo, hi = int(first), int(last or first)
            if lo > hi:
                raise ShardError(f"--shards range {part.strip()!r} runs backwards")
            ids.update(range(lo, hi + 1))
    except ValueError as exc:
        if isinstance(exc, ShardError):
            raise
        raise ShardError(f"--shards {spec!r} is not a list of shard numbers like 0-3 or 0,2,5-7") from None
    if not ids or min(ids) < 0 or max(ids) >= count:
        raise ShardError(f"--shards {spec!r} must name shards 0 to {count - 1}")
    plan = ShardPlan(tuple(sorted(ids)), count)
    if backend != "postgres" and not plan.complete:
        raise ShardError("running only some shards needs storage.backend = \"postgres\": SQLite is one process")
    return plan
