#!/usr/bin/env python3
"""A plain-Python reader of kvspec's conformance traces (docs/conformance.md).

    python3 docs/conformance_check.py corpus/traces/conformance/*.trace

It computes TRACE.md's "Values" directly (token contents, keys and values
rounded through the layer's storage type `kv=` (f32, bf16, q8_0, q4_0, in
emulated fp32 as ggml's reference quantizers), softmax attention with
grouped query heads, conv + L2 norm + gated delta rule) in Python floats
(double) and checks every `expect sees`, `expect out` (within
1e-4 * (1 + |ref|)) and `expect positions` line. It is a starting point for another engine's harness: replace
attention() and recurrent() by calls into the engine's caches and kernels,
driven by the same statements. Supports what the conformance files use:
window, decode, trim [bypass], arm, accept, fork, use, reload. No
dependencies; Python 3.6+.
"""
import copy
import math
import struct
import sys
from typing import Callable, Dict, List

M64 = (1 << 64) - 1


def mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def stream(seed):
    i = 0
    while True:
        i += 1
        u = mix((seed + i * 0x9E3779B97F4A7C15) & M64)
        yield ((u >> 40) * 2.0 ** -24) * 2 - 1


def token_stream(layer, id_, pos):
    return stream(mix(mix(mix(layer) ^ id_) ^ pos))


def take(s, n):
    return [next(s) for _ in range(n)]


def f32(x: float) -> float:
    """x rounded to the nearest fp32 (ties to even)."""
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


def bf16(x: float) -> float:
    """fp32 x rounded to the nearest bfloat16, ties to even."""
    bits = int(struct.unpack("<I", struct.pack("<f", x))[0])
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return float(struct.unpack("<f", struct.pack("<I", bits))[0])


def fp16(x: float) -> float:
    """fp32 x rounded to the nearest IEEE half, ties to even (subnormals included)."""
    if x == 0 or math.isnan(x) or math.isinf(x):
        return x
    exponent = max(math.frexp(abs(x))[1] - 1, -14)  # |x| = m * 2^exponent, m in [1, 2)
    quantum = 2.0 ** (exponent - 10)
    y = round(x / quantum) * quantum  # round(): ties to even; x / quantum is exact
    return math.copysign(y if abs(y) <= 65504 else math.inf, x)


def roundf(x: float) -> int:
    """C's roundf as an integer: the nearest, halves away from zero."""
    n = math.floor(abs(x) + 0.5)
    return -n if x < 0 else n


def q8_0(xs: List[float]) -> List[float]:
    """ggml's quantize_row_q8_0_ref then dequantize, per block of 32, in fp32."""
    out = []
    for b in range(0, len(xs), 32):
        block = xs[b:b + 32]
        d = f32(max(abs(x) for x in block) / 127)
        id_ = f32(1 / d) if d else 0.0
        out += [f32(roundf(f32(x * id_)) * fp16(d)) for x in block]
    return out


def q4_0(xs: List[float]) -> List[float]:
    """ggml's quantize_row_q4_0_ref then dequantize, per block of 32, in fp32."""
    out = []
    for b in range(0, len(xs), 32):
        block = xs[b:b + 32]
        m = block[0]
        for x in block:  # the first value of largest |x|
            if abs(x) > abs(m):
                m = x
        d = f32(m / -8)
        id_ = f32(1 / d) if d else 0.0
        out += [f32((min(15, math.trunc(f32(f32(x * id_) + 8.5))) - 8) * fp16(d)) for x in block]
    return out


STORAGE: Dict[str, Callable[[List[float]], List[float]]] = {
    "f32": lambda xs: xs,
    "bf16": lambda xs: [bf16(x) for x in xs],
    "q8_0": q8_0,
    "q4_0": q4_0,
}


def stored(layer: Dict[str, object], xs: List[float], H: int, D: int) -> List[float]:
    """Keys or values (H heads of D) as the layer's storage type holds them."""
    to = STORAGE[str(layer.get("kv", "f32"))]
    return [x for h in range(H) for x in to(xs[h * D:(h + 1) * D])]


def attention(layer, index, ids, p):
    """(visible (pos, id) list, o of all query heads) of the query at position p."""
    H, Hq, D, W = layer["heads"], layer["qheads"], layer["dim"], layer.get("window", 0)
    lo = max(0, p - W + 1) if W else 0
    q = take(token_stream(index, ids[p], p), Hq * D)
    keys, values = [], []
    for j in range(lo, p + 1):
        s = token_stream(index, ids[j], j)
        take(s, Hq * D)  # its q
        keys.append(stored(layer, take(s, H * D), H, D))
        values.append(stored(layer, take(s, H * D), H, D))
    o = []
    for hq in range(Hq):
        h = hq // (Hq // H)  # query head hq reads KV head h (contiguous groups)
        scores = [sum(q[hq * D + e] * k[h * D + e] for e in range(D)) / math.sqrt(D)
                  for k in keys]
        top = max(scores)
        w = [math.exp(x - top) for x in scores]
        total = sum(w)
        o += [sum(w[j] / total * values[j][h * D + e] for j in range(len(values)))
              for e in range(D)]
    return [(j, ids[j]) for j in range(lo, p + 1)], o


def recurrent(layer, index, ids):
    """y of all value heads after each of the row's real tokens."""
    Hv, Hk, dk, dv, K = layer["heads"], layer["kheads"], layer["dk"], layer["dv"], layer["conv"]
    C = 2 * Hk * dk + Hv * dv
    ws = stream(mix(mix(index) ^ M64))
    w = [[next(ws) * 0.5 for _ in range(K)] for _ in range(C)]  # w[c][j]
    S = [[[0.0] * dk for _ in range(dv)] for _ in range(Hv)]
    xs, ys = [], []

    def l2(v):
        n = math.sqrt(sum(x * x for x in v) + 1e-6)
        return [x / n for x in v]

    for t, id_ in enumerate(ids):
        s = token_stream(index, id_, t)
        xs.append(take(s, C))
        a, b = take(s, Hv), take(s, Hv)
        u = []
        for c in range(C):
            z = sum(w[c][j] * (xs[t - K + 1 + j][c] if t - K + 1 + j >= 0 else 0.0)
                    for j in range(K))
            u.append(z / (1 + math.exp(-z)))
        qs = [[x / math.sqrt(dk) for x in l2(u[kh * dk:(kh + 1) * dk])] for kh in range(Hk)]
        ks = [l2(u[Hk * dk + kh * dk:Hk * dk + (kh + 1) * dk]) for kh in range(Hk)]
        y = []
        for h in range(Hv):
            kh = h // (Hv // Hk)
            g = 1 / (1 + math.exp(-(2 + a[h])))
            beta = 1 / (1 + math.exp(-b[h]))
            v = u[2 * Hk * dk + h * dv:2 * Hk * dk + (h + 1) * dv]
            k, q, Sh = ks[kh], qs[kh], S[h]
            for i in range(dv):
                Sh[i] = [g * x for x in Sh[i]]
                m = sum(Sh[i][j] * k[j] for j in range(dk))
                Sh[i] = [Sh[i][j] + beta * (v[i] - m) * k[j] for j in range(dk)]
                y.append(sum(Sh[i][j] * q[j] for j in range(dk)))
        ys.append(y)
    return ys


def ints(text):
    return [int(x) for x in text.split(",")]


def check(path):
    """Returns (failures, values compared, largest |mine - ref| / (1 + |ref|))."""
    layers, rows, layouts, current = [], 1, {}, "main"
    failures, count, worst = 0, 0, 0.0
    for number, raw in enumerate(open(path), 1):
        text = raw.split("#")[0]
        w = text.split()
        if not w or w[0] == "trace":
            continue
        if w[0] == "rows":
            rows = int(w[1])
            continue
        if w[0] == "layer":
            layer = {"name": w[1], "kind": w[2], "heads": 1, "dim": 4, "dk": 4, "dv": 4, "conv": 4}
            for item in w[3:]:
                key, value = item.split("=")
                if key == "kv" and value not in STORAGE:
                    raise SystemExit(f"{path}:{number}: unknown storage type kv={value}")
                layer[key] = value if key == "kv" else int(value)
            layer.setdefault("kheads", layer["heads"])
            layer.setdefault("qheads", layer["heads"])
            layers.append(layer)
            continue
        if not layouts:
            layouts["main"] = {"ids": [[] for _ in range(rows)], "round": None, "last": ({}, {})}
        state = layouts[current]
        options = dict(x.split("=", 1) for x in w[1:] if "=" in x)
        op = w[0]
        if op in ("window", "decode"):
            L = 1 if op == "decode" else int(w[1])
            left = ints(options["left"]) if "left" in options else [0] * rows
            right = ints(options["right"]) if "right" in options else [0] * rows
            groups = None
            if "ids" in options:
                groups = [ints(g) if g else [] for g in options["ids"].split("/")]
            start = [len(r) for r in state["ids"]]
            real = [L - left[r] - right[r] for r in range(rows)]
            for r in range(rows):
                state["ids"][r] += groups[r] if groups else list(range(start[r], start[r] + real[r]))
            if state["round"] == "armed":
                state["round"] = (start, real)
            outs, sees = {}, {}
            for index, layer in enumerate(layers):
                for r in range(rows):
                    ys = recurrent(layer, index, state["ids"][r]) if layer["kind"] == "ssm" else None
                    for p in range(start[r], start[r] + real[r]):
                        key = (layer["name"], r, p)
                        if ys is not None:
                            outs[key] = ys[p]
                        else:
                            sees[key], outs[key] = attention(layer, index, state["ids"][r], p)
            state["last"] = (outs, sees)
        elif op == "trim":
            for ids in state["ids"]:
                del ids[len(ids) - int(w[1]):]
        elif op == "arm":
            state["round"] = "armed"
        elif op == "accept":
            keep = ints(w[1])
            keep = keep * rows if len(keep) == 1 else keep
            start, _ = state["round"]
            for r in range(rows):
                del state["ids"][r][start[r] + keep[r]:]
            state["round"] = None
        elif op == "fork":
            layouts[w[1]] = copy.deepcopy(state)
        elif op == "use":
            current = w[1]
        elif op == "reload":
            pass
        elif op == "expect" and w[1] == "positions":
            got = [len(ids) for ids in state["ids"]]
            if got != ints(w[2]):
                print(f"{path}:{number}: expected positions {w[2]} got {got}")
                failures += 1
        elif op == "expect" and w[1] in ("sees", "out"):
            head, rest = text.split(":", 1)
            _, _, name, row, pos = head.split()
            key = (name, int(row[1:]), int(pos[1:]))
            outs, sees = state["last"]
            if w[1] == "sees":
                want = sorted((int(x.split(":")[0]), int(x.split(":")[-1])) for x in rest.split())
                if sees.get(key) != want:
                    print(f"{path}:{number}: expected {want} got {sees.get(key)}")
                    failures += 1
                continue
            want = [float(x) for x in rest.split()]
            got = outs.get(key, [])
            bad = len(got) != len(want)
            for mine, ref in zip(got, want):
                diff = abs(mine - ref) / (1 + abs(ref))
                worst, count = max(worst, diff), count + 1
                bad = bad or not diff <= 1e-4
            if bad:
                print(f"{path}:{number}: expected {want} got {got}")
                failures += 1
        else:
            raise SystemExit(f"{path}:{number}: '{op}' is not supported by this reader")
    return failures, count, worst


def main():
    total_failures, total, worst = 0, 0, 0.0
    for path in sys.argv[1:]:
        failures, count, largest = check(path)
        total_failures += failures
        total += count
        worst = max(worst, largest)
    print(f"{len(sys.argv) - 1} files, {total} values, {total_failures} failed expectations, "
          f"largest |mine - ref| / (1 + |ref|) = {worst:.3g}")
    return 1 if total_failures else 0


if __name__ == "__main__":
    sys.exit(main())
