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
