"""The fault suite drives the same real bot as tests/cogs."""

from tests.cogs.conftest import r  # noqa: F401 - re-exported fixture
