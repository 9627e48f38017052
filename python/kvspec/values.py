"""Token contents of TRACE.md "Values" in pure Python (numpy): the exact fp32
inputs every implementation writes for token (layer, id, pos), so that an
engine's outputs can be compared with kvspec's (1e-4 * (1 + |ref|))."""

from typing import Tuple

import numpy as np
import numpy.typing as npt

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def mix(z: int) -> int:
    """The splitmix64 finaliser TRACE.md calls mix() (Python ints)."""
    z &= _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def token_seed(layer: int, ident: int, pos: int) -> int:
    return mix(mix(mix(layer) ^ ident) ^ pos)


def weight_seed(layer: int) -> int:
    return mix(mix(layer) ^ _MASK)


def stream(seed: int, count: int, start: int = 0) -> npt.NDArray[np.float32]:
    """Draws start+1 .. start+count of the stream with this seed, as float32
    in [-1, 1)."""
    with np.errstate(over="ignore"):
        i = np.arange(start + 1, start + count + 1, dtype=np.uint64)
        z = np.uint64(seed) + i * np.uint64(_GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    u = (z >> np.uint64(40)).astype(np.float64) * (1.0 / 16777216.0)
    return (u.astype(np.float32) * np.float32(2.0) - np.float32(1.0)).astype(np.float32)


def attention_token(layer: int, ident: int, pos: int, heads: int, qheads: int,
                    dim: int) -> Tuple[npt.NDArray[np.float32], npt.NDArray[np.float32],
                                       npt.NDArray[np.float32]]:
    """(q [qheads*dim], k [heads*dim], v [heads*dim]) of an attention token."""
    nq, n = qheads * dim, heads * dim
    draws = stream(token_seed(layer, ident, pos), nq + 2 * n)
    return draws[:nq], draws[nq:nq + n], draws[nq + n:]


def row_bytes(kv: str, dim: int) -> int:
    """Bytes of one head row of ``dim`` values stored as ``kv``: 4 or 2 per
    value (f32, bf16), 34 or 18 per block of 32 (q8_0, q4_0)."""
    per_block = {"q8_0": 34, "q4_0": 18}
    if kv in per_block:
        return dim // 32 * per_block[kv]
    return dim * {"f32": 4, "bf16": 2}[kv]


def stored(kv: str, x: npt.NDArray[np.float32], dim: int) -> npt.NDArray[np.float32]:
    """What keys or values ``x`` (head rows of ``dim`` values, one after
    another) read back as once stored as ``kv`` ("f32", "bf16", "q8_0",
    "q4_0"; TRACE.md "Values"): bf16 rounded to nearest even; q8_0 and q4_0
    quantized per block of 32 as ggml's reference quantizers do (fp32
    arithmetic), then dequantized (exact)."""
    x = np.asarray(x, np.float32)
    if kv == "f32":
        return x.copy()
    if kv == "bf16":
        bits = x.view(np.uint32).astype(np.uint64)
        rounded = (bits + np.uint64(0x7FFF) + ((bits >> np.uint64(16)) & np.uint64(1))) \
            & np.uint64(0xFFFF0000)
        out: npt.NDArray[np.float32] = rounded.astype(np.uint32).view(np.float32)
        return out
    if kv not in ("q8_0", "q4_0") or dim % 32 or x.size % dim:
        raise ValueError("storage type %r of rows of %d values" % (kv, dim))
    blocks = x.reshape(-1, 32)
    if kv == "q8_0":
        amax = np.abs(blocks).max(axis=1)
        d = (amax / np.float32(127)).astype(np.float32)
    else:
        first = np.abs(blocks).argmax(axis=1)  # the first of largest magnitude
        d = (blocks[np.arange(len(blocks)), first] / np.float32(-8)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    scaled = (blocks * inv[:, None]).astype(np.float32)
    if kv == "q8_0":  # roundf: halves away from zero (exact in double)
        wide = scaled.astype(np.float64)
        q = np.sign(wide) * np.floor(np.abs(wide) + 0.5)
    else:
        shifted = (scaled + np.float32(8.5)).astype(np.float32)
        q = np.minimum(15, np.trunc(shifted)) - 8
    scale = d.astype(np.float16).astype(np.float32)
    result: npt.NDArray[np.float32] = (q.astype(np.float32) * scale[:, None]).astype(
        np.float32).reshape(x.shape)
    return result
