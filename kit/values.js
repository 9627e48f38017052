// Token contents of TRACE.md "Values": the exact fp32 inputs every
// implementation writes for token (layer, id, pos), and the attention output.
const MASK = (1n << 64n) - 1n;
const GOLDEN = 0x9e3779b97f4a7c15n;

/** The splitmix64 finaliser TRACE.md calls mix(), on BigInt. */
export function mix(z) {
  z &= MASK;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK;
  return z ^ (z >> 31n);
}

/** The seed of token (layer, id, pos)'s stream. */
export function tokenSeed(layer, id, pos) {
  return mix(mix(mix(BigInt(layer)) ^ BigInt(id)) ^ BigInt(pos));
}

/** The seed of layer's weight stream. */
export function weightSeed(layer) {
  return mix(mix(BigInt(layer)) ^ MASK);
}

/** Draws start+1 .. start+count of the stream `seed`, as floats in [-1, 1). */
export function stream(seed, count, start = 0) {
  const out = new Float32Array(count);
  for (let i = 0; i < count; i++) {
    const u = mix((seed + BigInt(start + i + 1) * GOLDEN) & MASK);
    out[i] = Number(u >> 40n) * (1 / 16777216) * 2 - 1;
  }
  return out;
}

/** {q: [qheads*dim], k: [heads*dim], v: [heads*dim]} of an attention token. */
export function attentionToken(layer, id, pos, heads, qheads, dim) {
  const nq = qheads * dim;
  const n = heads * dim;
  const d = stream(tokenSeed(layer, id, pos), nq + 2 * n);
  return { q: d.subarray(0, nq), k: d.subarray(nq, nq + n), v: d.subarray(nq + n) };
}

/**
 * softmax((q . k) / sqrt(dim)) v per query head (float64), over the visible
 * tokens' keys and values; zeros when nothing is seen.
 */
export function attend(q, keys, values, heads, qheads, dim) {
  const out = new Float64Array(qheads * dim);
  if (keys.length === 0) return out;
  const group = qheads / heads;
  for (let hq = 0; hq < qheads; hq++) {
    const h = Math.floor(hq / group);
    const s = keys.map((k) => {
      let dot = 0;
      for (let i = 0; i < dim; i++) dot += q[hq * dim + i] * k[h * dim + i];
      return dot / Math.sqrt(dim);
    });
    const top = Math.max(...s);
    const w = s.map((x) => Math.exp(x - top));
    const sum = w.reduce((a, b) => a + b, 0);
    for (let j = 0; j < keys.length; j++) {
      for (let i = 0; i < dim; i++) out[hq * dim + i] += (w[j] / sum) * values[j][h * dim + i];
    }
  }
  return out;
}

/**
 * {x: [C], a: [heads], b: [heads]} of a recurrent token, C = 2*kheads*dk +
 * heads*dv: x holds the pre-conv q, k and v parts, each head-major.
 */
export function recurrentToken(layer, id, pos, heads, kheads, dk, dv) {
  const c = 2 * kheads * dk + heads * dv;
  const d = stream(tokenSeed(layer, id, pos), c + 2 * heads);
  return { x: d.subarray(0, c), a: d.subarray(c, c + heads), b: d.subarray(c + heads) };
}

/** A recurrent layer's conv weights w[c][j] (channel-major, [channels * conv]), each halved. */
export function convWeights(layer, channels, conv) {
  const w = stream(weightSeed(layer), channels * conv);
  for (let i = 0; i < w.length; i++) w[i] *= 0.5;
  return w;
}

/** Bytes of one head row of `dim` values stored as `kv` (TRACE.md "Header"). */
export function rowBytes(kv, dim) {
  if (kv === "q8_0") return (dim / 32) * 34;
  if (kv === "q4_0") return (dim / 32) * 18;
  return dim * (kv === "bf16" ? 2 : 4);
}

// x rounded to nearest even on the grid of `bits` significant bits (exponent
// at least minExp: subnormals below it).
function roundToGrid(x, bits, minExp) {
  if (x === 0 || !Number.isFinite(x)) return x;
  let e = Math.floor(Math.log2(Math.abs(x)));
  if (2 ** e > Math.abs(x)) e -= 1;
  if (2 ** (e + 1) <= Math.abs(x)) e += 1;
  const ulp = 2 ** (Math.max(e, minExp) - (bits - 1));
  const y = x / ulp;
  const f = Math.floor(y);
  const up = y - f > 0.5 || (y - f === 0.5 && f % 2 !== 0);
  return (up ? f + 1 : f) * ulp;
}
const fp16 = (x) => (Math.abs(x) >= 65520 ? Math.sign(x) * Infinity : roundToGrid(x, 11, -14));

/**
 * What keys or values `x` (head rows of `dim` values) read back as once
 * stored as `kv` (TRACE.md "Values"): bf16 rounded to nearest even; q8_0 and
 * q4_0 quantized per block of 32 in fp32 arithmetic as ggml's reference
 * quantizers (a block holding a non-finite value reads back as NaN).
 */
export function stored(kv, x, dim) {
  const out = Float32Array.from(x);
  if (kv === "f32") return out;
  if (kv === "bf16") {
    for (let i = 0; i < out.length; i++) {
      out[i] = Number.isNaN(out[i]) ? out[i] : roundToGrid(out[i], 8, -126);
    }
    return out;
  }
  if ((kv !== "q8_0" && kv !== "q4_0") || dim % 32 !== 0) {
    throw new Error(`storage type ${kv} of rows of ${dim} values`);
  }
  const f = Math.fround;
  for (let b = 0; b < out.length; b += 32) {
    const x32 = out.slice(b, b + 32);
    if (!x32.every(Number.isFinite)) {
      out.fill(NaN, b, b + 32);
      continue;
    }
    let amax = 0;
    let max = 0;
    for (const v of x32) {
      if (amax < Math.abs(v)) {
        amax = Math.abs(v);
        max = v;
      }
    }
    const d = kv === "q8_0" ? f(amax / 127) : f(max / -8);
    const id = d !== 0 ? f(1 / d) : 0;
    const scale = fp16(d);
    for (let j = 0; j < 32; j++) {
      const scaled = f(x32[j] * id);
      const q = kv === "q8_0"
        ? Math.sign(scaled) * Math.floor(Math.abs(scaled) + 0.5)
        : Math.min(15, Math.trunc(f(scaled + 8.5))) - 8;
      out[b + j] = f(q * scale);
    }
  }
  return out;
}
