"""Image files built byte by byte (no image library), and a byte search for them in a data directory."""

from __future__ import annotations

import base64
import random
import struct
import zlib
from pathlib import Path


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png(seed: int, size: int = 32, *, animated: bool = False) -> bytes:
    """A real PNG of random pixels (incompressible, so its bytes are a needle nothing else contains)."""
    rnd = random.Random(seed)
    rows = b"".join(b"\x00" + rnd.randbytes(size * 3) for _ in range(size))
    ihdr = _chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0))
    actl = _chunk(b"acTL", struct.pack(">II", 2, 0)) if animated else b""
    return b"\x89PNG\r\n\x1a\n" + ihdr + actl + _chunk(b"IDAT", zlib.compress(rows)) + _chunk(b"IEND", b"")


def gif(frames: int, seed: int = 0) -> bytes:
    """A GIF with ``frames`` 1x1 frames (a comment block of random bytes makes each file unique)."""
    rnd = random.Random(seed)
    comment = rnd.randbytes(200)
    out = b"GIF89a" + struct.pack("<HHBBB", 1, 1, 0x80, 0, 0) + b"\x00\x00\x00\xff\xff\xff"
    out += b"\x21\xfe" + bytes([len(comment)]) + comment + b"\x00"
    for _ in range(frames):
        out += b"\x21\xf9\x04\x00\x0a\x00\x00\x00"  # graphic control: 0.1 s
        out += b"\x2c" + struct.pack("<HHHHB", 0, 0, 1, 1, 0) + b"\x02\x02\x44\x01\x00"
    return out + b"\x3b"


def webp(animated: bool) -> bytes:
    vp8x = b"VP8X" + struct.pack("<I", 10) + bytes([0x02 if animated else 0x00, 0, 0, 0]) + b"\x00" * 6
    body = b"WEBP" + vp8x + (b"ANIM" + struct.pack("<I", 6) + b"\x00" * 6 if animated else b"VP8L" + struct.pack("<I", 0))
    return b"RIFF" + struct.pack("<I", len(body)) + body


def needles(data: bytes) -> dict[str, bytes]:
    """The image's bytes and its base64, whole and a slice from the middle of each."""
    b64 = base64.b64encode(data)
    return {"raw": data, "raw slice": data[len(data) // 2: len(data) // 2 + 64], "base64": b64,
            "base64 slice": b64[len(b64) // 2: len(b64) // 2 + 64]}


def sqlite_holding(data_dir: Path, data: bytes) -> list[str]:
    found = []
    for path in data_dir.rglob("*"):
        if path.is_file():
            body = path.read_bytes()
            found += [f"{path.name}: {what}" for what, needle in needles(data).items() if needle in body]
    return found
