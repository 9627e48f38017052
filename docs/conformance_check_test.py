#!/usr/bin/env python3
"""Unit check of docs/conformance_check.py's storage-type rounding against
hand-computed values, at the ties and fp32 roundings that random conformance
traces rarely decide (ctest conformance.python_check_rounding). No
dependencies; Python 3.6+."""
import os
import sys
from typing import List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conformance_check as c  # noqa: E402

failures = 0


def same(what: str, got: List[float], want: List[float]) -> None:
    global failures
    if got != want:
        print(f"{what}: expected {want} got {got}")
        failures += 1


def pad(xs: List[float]) -> List[float]:
    return xs + [0.0] * (32 - len(xs))


# bf16 and fp16: ties go to the even neighbour; fp16 subnormals step by 2^-24.
same("bf16", [c.bf16(1 + 2 ** -8), c.bf16(1 + 3 * 2 ** -8), c.bf16(1 + 2 ** -8 + 2 ** -20)],
     [1.0, 1 + 2 ** -6, 1 + 2 ** -7])
same("fp16", [c.fp16(1 + 2 ** -11), c.fp16(1 + 3 * 2 ** -11), c.fp16(2 ** -25), c.fp16(3 * 2 ** -25)],
     [1.0, 1 + 2 ** -9, 0.0, 2 ** -23])
# fp16(fp32(1/127)) = 1032 * 2^-17: the scale of a q8_0 block whose largest |x| is 1.
same("fp16(d)", [c.fp16(c.f32(1 / 127))], [1032 * 2 ** -17])
# q8_0, largest |x| 127/128: d = 1/128, id = 128; 2.5 rounds away from zero to 3.
same("q8_0 halves", c.q8_0(pad([127 / 128, 2.5 / 128, -2.5 / 128]))[:3],
     [127 / 128, 3 / 128, -3 / 128])
# q8_0, largest |x| 1: id = 127; x * 127 = 64.4999995 exactly, 64.5 in fp32, so 65.
same("q8_0 fp32 product", c.q8_0(pad([1.0, 8520712 * 2 ** -24]))[:2],
     [127 * 1032 * 2 ** -17, 65 * 1032 * 2 ** -17])
# q4_0: the first x of largest |x| sets d = x / -8; 16.5 truncates to 16, capped at 15.
same("q4_0 first largest", c.q4_0(pad([-1.0, 0.5, 1.0, 0.3]))[:4], [-1.0, 0.5, 0.875, 0.25])
same("q4_0 first largest, other sign", c.q4_0(pad([1.0, -1.0]))[:2], [1.0, -0.875])
# q4_0, d = 0.125, id = 8: x * id = -(0.5 + 2^-24); + 8.5 is 8 in fp32 (not 7.99999994), so 0.
same("q4_0 fp32 sum", c.q4_0(pad([-1.0, -(2 ** -4 + 2 ** -27)]))[:2], [-1.0, 0.0])
# A block of zeros: d = 0, id = 0, every value 0.
same("zeros", c.q8_0(pad([])) + c.q4_0(pad([])), [0.0] * 64)
# Blocks of 32 on their own: the second block's scale ignores the first's.
same("blocks", c.q4_0(pad([1.0]) + pad([0.5]))[::32], [1.0, 0.5])

print(f"rounding: {failures} failed")
sys.exit(1 if failures else 0)
