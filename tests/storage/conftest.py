"""An opened storage backend for the store contract tests (``storage``), on every configured backend."""

from __future__ import annotations

import pytest

from bot.storage import open_storage


@pytest.fixture
async def storage(settings):
    async with open_storage(settings) as opened:
        yield opened

