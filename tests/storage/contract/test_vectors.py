"""The memory-embedding cache (``bot.engine.stores.vectors``): per person, replaced by memory key, and
the vector bytes come back exactly. A vector is of a memory: the memories the tests index exist first
(PostgreSQL refuses a vector of a memory that is gone, see ``tests/storage/test_postgres.py``)."""

from __future__ import annotations

import struct

import pytest

from tests.storage.contract.conftest import memories_exist


@pytest.fixture(autouse=True)
async def _memories(storage):
    for user in ("42", "7", "10", "11", "12", "13"):
        await memories_exist(storage, user, "k", "k1", "k2", "k3", "old", "older")


async def test_vectors_are_replaced_by_key(storage):
    await storage.vectors.put("42", [("k1", "d1", b"\x00\x01"), ("k2", "d2", b"\x02")])
    await storage.vectors.put("42", [("k1", "d3", b"\x03")])
    assert await storage.vectors.get("42") == {"k1": ("d3", b"\x03"), "k2": ("d2", b"\x02")}
    assert await storage.vectors.get("7") == {}


async def test_vectors_are_deleted_by_key_for_one_person_only(storage):
    await storage.vectors.put("42", [("k1", "d1", b"\x01"), ("k2", "d2", b"\x02"), ("k3", "d3", b"\x03")])
    await storage.vectors.put("7", [("k1", "d1", b"\x01")])
    assert await storage.vectors.delete("42", ["k1", "k3", "absent"]) == 2
    assert await storage.vectors.delete("42", []) == 0
    assert await storage.vectors.get("42") == {"k2": ("d2", b"\x02")}
    assert await storage.vectors.get("7") == {"k1": ("d1", b"\x01")}
    assert await storage.vectors.delete("42", ["k1"]) == 0  # again: nothing, no error


async def test_a_vector_comes_back_byte_for_byte(storage):
    vector = struct.pack("<384f", *[(i % 7 - 3) / 3 for i in range(384)])  # float32, NUL bytes included
    await storage.vectors.put("42", [("k", "sha-1", vector)])
    digest, back = (await storage.vectors.get("42"))["k"]
    assert (digest, back) == ("sha-1", vector) and isinstance(back, bytes)


async def test_people_keep_their_own_vectors_and_an_empty_put_changes_nothing(storage, raw):
    await storage.vectors.put("42", [("k", "d42", b"\x01")])
    await storage.vectors.put("7", [("k", "d7", b"\x02")])  # the same memory key for another person
    await storage.vectors.put("42", [])
    assert await storage.vectors.get("42") == {"k": ("d42", b"\x01")}
    assert await storage.vectors.get("7") == {"k": ("d7", b"\x02")}
    assert await raw.count("embeddings") == 2


@pytest.mark.second_process_reads_only
async def test_another_process_reads_the_cached_vectors(storage, second_process):
    await storage.vectors.put("42", [("k", "d", b"\x05")])
    assert await second_process.vectors.get("42") == {"k": ("d", b"\x05")}


async def test_each_row_records_its_embedder_and_a_reader_can_ask_for_one_embedders_rows(storage):
    await storage.vectors.put("42", [("k1", "d1", b"\x01"), ("k2", "d2", b"\x02")], embedder="A")
    await storage.vectors.put("42", [("k2", "d3", b"\x03")], embedder="B")  # one row a memory: B replaces A's
    assert await storage.vectors.get("42", "A") == {"k1": ("d1", b"\x01")}
    assert await storage.vectors.get("42", "B") == {"k2": ("d3", b"\x03")}
    assert await storage.vectors.get("42") == {"k1": ("d1", b"\x01"), "k2": ("d3", b"\x03")}
    assert await storage.vectors.get("42", "C") == {}


async def test_the_rows_of_other_embedders_are_found_page_by_page_and_deleted_per_person(storage):
    for user in ("10", "11", "12", "13"):
        await storage.vectors.put(user, [("k", "d", b"\x01")], embedder="B")
    for user in ("11", "13"):
        await storage.vectors.put(user, [("old", "d", b"\x02")], embedder="A")
    await storage.vectors.put("12", [("older", "d", b"\x03")])  # no embedder recorded: another one too
    assert await storage.vectors.people_with_others("B") == ["11", "12", "13"]
    assert await storage.vectors.people_with_others("B", limit=2) == ["11", "12"]
    assert await storage.vectors.people_with_others("B", after="12", limit=2) == ["13"]
    assert await storage.vectors.delete_others("11", "B") == 1
    assert await storage.vectors.get("11") == {"k": ("d", b"\x01")}
    assert await storage.vectors.delete_others("11", "B") == 0
    assert await storage.vectors.people_with_others("B") == ["12", "13"]
    assert await storage.vectors.get("13") == {"k": ("d", b"\x01"), "old": ("d", b"\x02")}  # others untouched
