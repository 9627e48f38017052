"""The llama.cpp adapter's reading of a recurrent probe state
(kvspec.adapters.llama_cpp.state_layout), on states built here in the
layout of llama.cpp v0.4.0's llama_state_seq_get_data."""
import struct
from typing import List, Optional

import numpy as np
import pytest

from kvspec.adapters.llama_cpp import state_layout

TOL = 1e-4


def q8_block(values: np.ndarray) -> bytes:
    """ggml's quantize_row_q8_0_ref on 32 values."""
    d = float(np.max(np.abs(values))) / 127
    q = np.round(values / d) if d else np.zeros(32)
    return np.float16(d).tobytes() + q.astype(np.int8).tobytes()


def state(k_rows: List[bytes], v_rows: List[bytes], v_type: int = 8, r: Optional[np.ndarray] = None,
          pos0: int = 0) -> bytes:
    """magic, seq 0; one stream of len(k_rows) cells (K q8_0 rows, V rows of
    ggml type v_type, not transposed); one recurrent cell with R (4 f32) and
    S (8 f32)."""
    u32, i32, u64 = (lambda x: struct.pack("<I", x)), (lambda x: struct.pack("<i", x)), \
        (lambda x: struct.pack("<Q", x))
    b = u32(0x67676d6c) + i32(0) + u32(1) + u32(len(k_rows))
    for c in range(len(k_rows)):
        b += i32(pos0 + c) + u32(1) + bytes(12) + i32(0)
    b += u32(0) + u32(1)
    b += i32(8) + u64(len(k_rows[0])) + b"".join(k_rows)
    b += i32(v_type) + u64(len(v_rows[0])) + b"".join(v_rows)
    rr = np.arange(4, dtype=np.float32) + 1 if r is None else r.astype(np.float32)
    b += u32(1) + i32(7) + u32(0) + u32(0) + u32(2)
    b += i32(0) + u64(16) + rr.tobytes() + i32(0) + u64(32) + np.ones(8, np.float32).tobytes()
    return b


VALS = np.linspace(-1.0, 1.0, 32)


def test_pieces_split_metadata_from_typed_rows() -> None:
    s = state([q8_block(VALS)] * 2, [q8_block(VALS)] * 2)
    kinds = [k for k, _ in state_layout.pieces(s)]
    assert kinds == ["meta", "q8_0", "meta", "q8_0", "meta", "f32", "meta", "f32"]
    assert sum(len(b) for _, b in state_layout.pieces(s)) == len(s)


def test_a_truncated_or_longer_state_is_refused() -> None:
    s = state([q8_block(VALS)], [q8_block(VALS)])
    with pytest.raises(ValueError, match="state layout"):
        state_layout.pieces(s[:-1])
    with pytest.raises(ValueError, match="bytes after the state"):
        state_layout.pieces(s + b"\0\0")


def test_q8_0_rows_one_step_apart_are_close_two_are_not() -> None:
    a = q8_block(VALS)
    one = bytearray(a)
    one[2 + 5] = (one[2 + 5] + 1) % 256          # value 5 one level up
    two = bytearray(a)
    two[2 + 5] = (two[2 + 5] + 2) % 256
    base = state([a], [a])
    assert state_layout.close(base, state([bytes(one)], [a]), TOL)
    assert not state_layout.close(base, state([bytes(two)], [a]), TOL)


def test_f32_within_the_tolerance_only() -> None:
    a = q8_block(VALS)
    r = np.arange(4, dtype=np.float64) + 1
    base = state([a], [a], r=r)
    assert state_layout.close(base, state([a], [a], r=r * (1 + 0.5 * TOL)), TOL)
    assert not state_layout.close(base, state([a], [a], r=r * (1 + 4 * TOL)), TOL)


def test_metadata_is_compared_bit_for_bit() -> None:
    a = q8_block(VALS)
    assert not state_layout.close(state([a], [a]), state([a], [a], pos0=1), TOL)


def test_an_odd_byte_count_is_read_as_well() -> None:
    # q8_0 K rows (34 bytes) next to f32 V values: the state's length is odd
    # for an odd number of cells, its f32 rows still compare as floats
    a = q8_block(VALS)
    v = np.ones(32, np.float32).tobytes()
    r = np.arange(4, dtype=np.float64) + 1
    base = state([a], [v], v_type=0, r=r)
    assert len(base) % 2 == 0 and len(base) % 4 != 0
    assert state_layout.close(base, state([a], [v], v_type=0, r=r * (1 + 0.5 * TOL)), TOL)
