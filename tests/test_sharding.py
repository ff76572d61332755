"""``--shards``/``--shard-count``: parsed and checked, one line when wrong, and only shard 0 syncs commands."""

from __future__ import annotations

import pytest

from bot.sharding import ShardError, parse_shards


def test_ranges_and_lists_are_parsed():
    plan = parse_shards("0-3", 8, backend="postgres")
    assert plan.ids == (0, 1, 2, 3) and plan.count == 8 and plan.syncs_commands
    other = parse_shards("4-5,7", 8, backend="postgres")
    assert other.ids == (4, 5, 7) and not other.syncs_commands  # DMs and command sync stay on shard 0
    assert parse_shards(None, None, backend="sqlite") is None


@pytest.mark.parametrize("spec, count, backend, says", [
    ("0-3", None, "postgres", "go together"),
    ("0-8", 8, "postgres", "must name shards 0 to 7"),
    ("3-1", 8, "postgres", "runs backwards"),
    ("a-b", 8, "postgres", "not a list of shard numbers"),
    ("0-3", 8, "sqlite", "needs storage.backend"),
])
def test_wrong_shard_options_are_refused_in_one_line(spec, count, backend, says):
    with pytest.raises(ShardError, match=says):
        parse_shards(spec, count, backend=backend)


def test_all_shards_in_one_sqlite_process_are_fine():
    assert parse_shards("0-1", 2, backend="sqlite").complete


async def test_a_sharded_bot_runs_its_shards_and_only_shard_zero_syncs(settings):
    from bot.client import ShardedMemoryBot
    from bot.engine.engine import create_engine
    from bot.storage import open_storage
    from tests.conftest import ScriptedChatModel, default_script

    async with open_storage(settings) as storage:
        engine = create_engine(settings, storage, chat_model=ScriptedChatModel(default_script))
        for ids, syncs in (([0, 1], True), ([2, 3], False)):
            bot = ShardedMemoryBot(settings=settings, engine=engine, storage=storage, shard_ids=ids, shard_count=4,
                                   syncs_commands=syncs)
            synced: list[bool] = []

            async def record_sync() -> None:
                synced.append(True)

            bot.sync_commands = record_sync  # type: ignore[method-assign]
            engine.start = _noop  # type: ignore[method-assign]
            await bot.setup_hook()
            assert bot.shard_ids == ids and bot.shard_count == 4
            assert synced == ([True] if syncs else [])


async def _noop() -> None:
    return None
