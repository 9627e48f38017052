// TRACE.md "Values": the exact fp32 token contents (splitmix64 streams).
const M64 = (1n << 64n) - 1n;
const GOLDEN = 0x9E3779B97F4A7C15n;

export function mix(z) {
  z &= M64;
  z = ((z ^ (z >> 30n)) * 0xBF58476D1CE4E5B9n) & M64;
  z = ((z ^ (z >> 27n)) * 0x94D049BB133111EBn) & M64;
  return z ^ (z >> 31n);
}
export const tokenSeed = (l, id, pos) => mix(mix(mix(BigInt(l)) ^ BigInt(id)) ^ BigInt(pos));
export const weightSeed = (l) => mix(mix(BigInt(l)) ^ M64);

// Draws 1..count of the stream with this seed, as fp32 in [-1, 1).
export function stream(seed, count) {
  const out = new Float32Array(count);
  for (let i = 1; i <= count; i++) {
    const u = mix((seed + BigInt(i) * GOLDEN) & M64) >> 40n;
    out[i - 1] = Math.fround(Math.fround(Number(u) / 16777216) * 2 - 1);
  }
  return out;
}

const cache = new Map();
// (q [qheads*dim], k [heads*dim], v [heads*dim]) of an attention token.
export function attentionToken(l, id, pos, heads, qheads, dim) {
  const key = `a${l},${id},${pos},${heads},${qheads},${dim}`;
  let r = cache.get(key);
  if (!r) {
    const nq = qheads * dim, n = heads * dim;
    const d = stream(tokenSeed(l, id, pos), nq + 2 * n);
    r = [d.subarray(0, nq), d.subarray(nq, nq + n), d.subarray(nq + n)];
    if (cache.size > 200000) cache.clear();
    cache.set(key, r);
  }
  return r;
}
// (x [C], a [Hv], b [Hv]) of a recurrent token.
export function ssmToken(l, id, pos, channels, heads) {
  const d = stream(tokenSeed(l, id, pos), channels + 2 * heads);
  return [d.subarray(0, channels), d.subarray(channels, channels + heads), d.subarray(channels + heads)];
}
