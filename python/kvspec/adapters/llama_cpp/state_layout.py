"""The bytes of a recurrent probe sequence's llama_state_seq_get_data (v0.4.0:
llama_context::state_seq_get_data, llama_memory_hybrid::state_write, then
llama_kv_cache's and llama_memory_recurrent's state_write), split into
metadata and typed rows, so that two states are compared field by field:
metadata bit for bit, f32 / f16 values within a tolerance, q8_0 / q4_0
blocks dequantized within one quantization step. llama.cpp's results depend
on how a batch is split (a chunked gated DeltaNet step is not bit for bit
the recurrent one), so two schedules of the same history differ in the last
bits."""

import struct
from typing import List, Tuple

import numpy as np

# ggml_type -> (name, bytes per block, values per block)
GGML_TYPES = {0: ("f32", 4, 1), 1: ("f16", 2, 1), 2: ("q4_0", 18, 32), 8: ("q8_0", 34, 32)}
CELL_EXT = 12            # llama_kv_cell_ext (x, y, tok): qwen35's M-RoPE cells carry it
RECURRENT_LAYERS = 1     # gated DeltaNet layers of the qwen35 probe (layer 0)
MAX_FIELD = 1 << 30      # no field of a probe's state is larger

Piece = Tuple[str, bytes]  # ("meta" or a GGML_TYPES name, bytes)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0
        self.pieces: List[Piece] = []

    def take(self, n: int, kind: str = "meta") -> bytes:
        if n < 0 or n > MAX_FIELD or self.at + n > len(self.data):
            raise ValueError("state layout: a field of %d bytes at offset %d of %d" % (
                n, self.at, len(self.data)))
        b = self.data[self.at:self.at + n]
        self.at += n
        if kind == "meta" and self.pieces and self.pieces[-1][0] == "meta":
            self.pieces[-1] = ("meta", self.pieces[-1][1] + b)
        else:
            self.pieces.append((kind, b))
        return b

    def u32(self) -> int:
        return int(struct.unpack("<I", self.take(4))[0])

    def u64(self) -> int:
        return int(struct.unpack("<Q", self.take(8))[0])

    def typed(self, type_i: int, n_bytes: int) -> None:
        if type_i not in GGML_TYPES:
            raise ValueError("state layout: ggml type %d" % type_i)
        self.take(n_bytes, GGML_TYPES[type_i][0])


def pieces(data: bytes) -> List[Piece]:
    """The recurrent probe's state split into pieces; ValueError when the
    bytes do not follow the layout."""
    r = _Reader(data)
    r.take(8)                                  # magic, seq_id
    # the attention layer's llama_kv_cache
    for _ in range(r.u32()):                   # n_stream
        cells = r.u32()
        if cells == 0:
            continue
        for _ in range(cells):                 # pos, n_seq_id, ext, seq ids
            r.take(4)
            ids = r.u32()
            r.take(CELL_EXT + 4 * ids)
        v_trans, layers = r.u32(), r.u32()
        for _ in range(layers):                # K rows: type, row size, rows
            t = r.u32()
            r.typed(t, r.u64() * cells)
        for _ in range(layers):
            t = r.u32()
            if v_trans:                        # element size, n_embd_v_gqa, then by element
                el = r.u32()
                r.typed(t, el * r.u32() * cells)
            else:
                r.typed(t, r.u64() * cells)
    # llama_memory_recurrent
    cells = r.u32()
    for _ in range(cells):                     # pos, n_seq_id (0), seq ids
        r.take(4)
        r.take(4 * r.u32())
    if r.u32() != 0:
        raise ValueError("state layout: transposed recurrent state")
    r.u32()                                    # n_layer
    for _ in range(2 * RECURRENT_LAYERS):      # R rows, then S rows
        t = r.u32()
        r.typed(t, r.u64() * cells)
    if r.at != len(data):
        raise ValueError("state layout: %d bytes after the state" % (len(data) - r.at))
    return r.pieces


def _values(kind: str, b: bytes) -> Tuple[np.ndarray, np.ndarray]:
    """The values of a typed piece (float64) and each value's quantization
    step (0 for f32 / f16)."""
    if kind in ("f32", "f16"):
        x = np.frombuffer(b, np.float32 if kind == "f32" else np.float16).astype(np.float64)
        return x, np.zeros_like(x)
    size = GGML_TYPES[[t for t, v in GGML_TYPES.items() if v[0] == kind][0]][1]
    blocks = np.frombuffer(b, np.uint8).reshape(-1, size)
    d = blocks[:, :2].copy().view(np.float16).astype(np.float64)            # (n, 1)
    if kind == "q8_0":
        q = blocks[:, 2:].copy().view(np.int8).astype(np.float64)
    else:                                                                   # q4_0: low nibbles first
        lo, hi = blocks[:, 2:] & 15, blocks[:, 2:] >> 4
        q = np.concatenate([lo, hi], axis=1).astype(np.float64) - 8
    return (q * d).ravel(), np.repeat(np.abs(d), 32, axis=1).ravel()


def close(a: bytes, b: bytes, tolerance: float) -> bool:
    """Two states equal but for float rounding: the same layout, metadata bit
    for bit, every value within ``tolerance`` relative (f16: also one f16
    ulp, 2^-10 relative); q8_0 / q4_0 values also within one quantization
    step of their block plus the fp16 scale's rounding (2^-10 relative):
    inputs that differ in the last bits can round to neighbouring levels or
    scales."""
    pa, pb = pieces(a), pieces(b)
    if [(k, len(x)) for k, x in pa] != [(k, len(x)) for k, x in pb]:
        return False
    for (kind, x), (_, y) in zip(pa, pb):
        if x == y:
            continue
        if kind == "meta":
            return False
        xv, xs = _values(kind, x)
        yv, ys = _values(kind, y)
        if not (np.all(np.isfinite(xv)) and np.all(np.isfinite(yv))):
            return False
        slack = tolerance * (1 + np.abs(xv))
        if kind != "f32":
            slack += 2.0 ** -10 * np.abs(xv) + np.maximum(xs, ys)
        if not np.all(np.abs(xv - yv) <= slack):
            return False
    return True
