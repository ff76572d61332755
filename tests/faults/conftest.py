"""The fault suite drives the same real bot as tests/cogs, on every storage backend."""

from __future__ import annotations

from typing import AsyncIterator

import pytest_asyncio

from tests.cogs.conftest import Rig, rig


@pytest_asyncio.fixture
async def r(tmp_path, backend) -> AsyncIterator[Rig]:
    async with rig(tmp_path, backend=backend) as value:
        yield value
