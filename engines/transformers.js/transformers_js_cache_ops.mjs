// kvspec's statements on the transformers.js cache (transformers_js_engine.mjs). transformers.js
// has no cache operations of its own beyond the step functions: the refusal
// rules and column bookkeeping of TRACE.md are the adapter's, and each change
// is done on its tensors the way a transformers.js user would: a trim or an
// accept slices the last columns off every cache tensor, the mask and the ids
// (no crop exists); a round with recurrent layers keeps a copy of the cache at
// arm, and a partial accept restores it and runs the kept tokens again;
// filter, join and extract slice and concatenate along the batch (join
// left-pads the shorter side, as transformers.js pads a batch).
import v8 from "node:v8";
import { Tensor, DynamicCache, cat } from "@huggingface/transformers";
import { modelLayers } from "./transformers_js_models.mjs";
import { Cache, run, observe, settle, widen, cloneEntries, Refused, NotApplicable } from "./transformers_js_engine.mjs";

const MAX_TOKENS_PER_ROW = 1000000;
const hasSsm = (c) => c.specs.some((s) => s.kind === "ssm");
const kvNames = (c) => (c.pkv ? Object.keys(c.pkv).filter((k) => k.startsWith("past_key_values.")) : []);

export const create = (rows, layers, settings) => new Cache(rows, layers, settings);

export async function forward(c, step) {
  const { ids, left, decode, columns } = step;
  if (c.armed && c.verified) throw new Refused("a second forward while a round is armed");
  for (let r = 0; r < c.rows; r++) {
    if (left[r] && c.next[r]) throw new Refused(`row ${r}: left padding on a row that holds tokens`);
    if (c.next[r] + ids[r].length > MAX_TOKENS_PER_ROW) throw new Refused(`row ${r}: too many tokens`);
  }
  if (c.armed) {
    await settle(c);
    c.round.verify = step;
    if (hasSsm(c)) c.round.snap = snapshot(c);
  }
  let outputs;
  try {
    outputs = await run(c, step);
  } catch (e) {
    const m = /Status Message: (.*)/.exec(e.message);
    if (m && /batch_size must be 1|sequence_length shall be 1|too small for sequence_length|is out of range/.test(m[1]))
      throw new NotApplicable(`GroupQueryAttention refuses the call: ${m[1].slice(0, 120)}`);
    throw e;
  }
  for (let r = 0; r < c.rows; r++) c.next[r] += ids[r].length;
  if (c.armed) { c.verified = true; c.verifyReal = ids.map((g) => g.length); c.peakBeforeVerify = c.peak; }
  c.peakBeforeForward = c.peak;
  c.peak = Math.max(c.peak, c.columns);
  c.bypassBound = decode ? null : ids.map((g) => g.length);
  return observe(c, outputs, step);
}

// The last n columns off every attention tensor, the mask and the ids; each
// row's last n columns must hold real tokens (a slice cannot skip pads).
async function sliceOff(c, n, peak) {
  await settle(c);
  if (!n) return;
  const mask = c.mask.data, W = c.columns;
  for (let r = 0; r < c.rows; r++) for (let t = W - n; t < W; t++) if (mask[r * W + t] !== 1n)
    throw new NotApplicable(`trim ${n}: row ${r}'s last ${n} columns hold padding; a cache slice removes columns, and transformers.js has no per-row rollback`);
  const upd = {};
  for (const k of kvNames(c)) upd[k] = c.pkv[k].slice(null, null, [0, c.pkv[k].dims[2] - n], null);
  c.pkv.update(upd);
  c.mask = c.mask.slice(null, [0, W - n]);
  c.ids.forEach((r) => r.splice(W - n));
  for (let r = 0; r < c.rows; r++) c.next[r] -= n;
  c.columns -= n;
  c.peak = Math.max(peak, c.columns);
}

export async function trim(c, n, bypass) {
  if (c.armed) throw new Refused("trim while a round is armed");
  if (hasSsm(c)) throw new Refused("an ssm layer is never trimmable");
  if (bypass) {
    if (!c.bypassBound || c.bypassBound.some((b) => n > b)) throw new Refused(`trim ${n} bypass: not right after a window of >= ${n} tokens`);
    await sliceOff(c, n, c.peakBeforeForward);
  } else {
    c.specs.forEach((s, li) => { if (c.wrapped(li)) throw new Refused(`layer '${s.name}' is not trimmable (the ring has wrapped)`); });
    for (let r = 0; r < c.rows; r++) if (c.next[r] < n) throw new Refused(`trim ${n}: row ${r} holds only ${c.next[r]} tokens`);
    await sliceOff(c, n, c.peak);
  }
  c.bypassBound = null;
}

function snapshot(c) {
  return { mask: c.mask && c.mask.slice(), pkv: cloneEntries(c.pkv), ids: c.ids.map((r) => r.slice()), columns: c.columns, dl: c.dl };
}

export function arm(c) {
  if (c.armed) throw new Refused("arm: a round is already armed");
  c.armed = true; c.verified = false; c.bypassBound = null;
  c.round = { verify: null, snap: null };
}

export async function accept(c, keep) {
  if (!c.armed) throw new Refused("accept without arm");
  if (!c.verified) throw new Refused("accept before the verify forward");
  keep.forEach((k, r) => { if (k > c.verifyReal[r]) throw new Refused(`accept ${k}: row ${r} has only ${c.verifyReal[r]} tokens in the round`); });
  const drop = c.verifyReal.map((n, r) => n - keep[r]);
  if (drop.some((d) => d !== drop[0]))
    throw new NotApplicable(`accept ${keep}: a ragged accept; a cache slice removes the same columns from every row, and transformers.js has no per-row rollback`);
  const n = drop[0];
  if (n && hasSsm(c)) {
    // the recurrent states cannot be sliced: back to the copy taken at the
    // verify, and the kept tokens through the model again
    const v = c.round.verify, s = c.round.snap;
    const W = c.columns, mask = (await settle(c), c.mask.data);
    for (let r = 0; r < c.rows; r++) for (let t = W - n; t < W; t++) if (mask[r * W + t] !== 1n)
      throw new NotApplicable(`accept ${keep}: row ${r}'s rejected columns hold padding; transformers.js has no per-row rollback`);
    c.mask = s.mask; c.pkv = s.columns ? new DynamicCache(cloneEntries(s.pkv)) : null;
    c.ids = s.ids.map((r) => r.slice()); c.columns = s.columns; c.pending = null;
    c.dl = s.dl; c.layers = modelLayers(c.specs, s.dl); // widened again by the next run
    if (v.columns > n) {
      const step = { columns: v.columns - n, ids: v.ids.map((g) => g.slice(0, g.length - n)),
        positions: v.positions.map((g) => g.slice(0, g.length - n)), left: v.left, right: v.right.map(() => 0), decode: false };
      await run(c, step);
    }
    for (let r = 0; r < c.rows; r++) c.next[r] -= n;
    c.peak = Math.max(c.peakBeforeVerify, c.columns);
  } else {
    await sliceOff(c, n, c.peakBeforeVerify);
  }
  c.armed = c.verified = false; c.bypassBound = null; c.round = null;
}

function copy(c) {
  const n = Object.assign(Object.create(Cache.prototype), c);
  n.pkv = c.pkv && new DynamicCache(cloneEntries(c.pkv));
  n.mask = c.mask && c.mask.slice();
  n.ids = c.ids.map((r) => r.slice());
  n.next = c.next.slice();
  n.verifyReal = c.verifyReal && c.verifyReal.slice();
  n.bypassBound = c.bypassBound && c.bypassBound.slice();
  n.round = c.round && { verify: c.round.verify, snap: c.round.snap && { ...c.round.snap, pkv: cloneEntries(c.round.snap.pkv) } };
  return n;
}
export async function fork(c) { await settle(c); return copy(c); }

const rowsOf = (t, rows) => cat(rows.map((r) => t.slice([r, r + 1])), 0);

export async function filter(c, rows) {
  if (c.armed) throw new Refused("filter while a round is armed");
  await settle(c);
  if (c.pkv) {
    const upd = {};
    for (const k of Object.keys(c.pkv)) upd[k] = rowsOf(c.pkv[k], rows);
    c.pkv.update(upd);
  }
  if (c.mask) c.mask = rowsOf(c.mask, rows);
  c.ids = rows.map((r) => c.ids[r]);
  c.next = rows.map((r) => c.next[r]);
  c.rows = rows.length;
  c.bypassBound = null;
}

const shape = (s) => JSON.stringify([s.kind, s.heads, s.qheads, s.dim, s.window, s.capacity, s.kheads, s.dk, s.dv, s.conv]);
// n zero columns in front of a [B,H,T,D] tensor, a mask or the ids.
function leftPad(t, n) {
  if (!n) return t;
  if (t.dims.length === 2) return cat([new Tensor("int64", new BigInt64Array(t.dims[0] * n), [t.dims[0], n]), t], 1);
  const [B, H, , D] = t.dims;
  return cat([new Tensor("float32", new Float32Array(B * H * n * D), [B, H, n, D]), t], 2);
}
export async function join(c, other) {
  if (c.armed || other.armed) throw new Refused("join while a round is armed");
  if (c.specs.map(shape).join() !== other.specs.map(shape).join()) throw new Refused("join: the layer lists differ");
  await settle(c); await settle(other);
  const o = copy(other);
  await widen(c); await widen(o); // the probe layers of both at the same width
  const W = Math.max(c.columns, o.columns);
  const a = c.pkv ? cloneEntries(c.pkv) : null, b = o.pkv ? cloneEntries(o.pkv) : null;
  if (a || b) {
    const zeroLike = (src, x) => { // a cache that has never run: zero states of its rows
      const out = {};
      for (const k of Object.keys(src)) {
        const d = src[k].dims.slice(); d[0] = x.rows;
        if (k.startsWith("past_key_values.")) d[2] = 0;
        out[k] = new Tensor("float32", new Float32Array(d.reduce((p, q) => p * q, 1)), d);
      }
      return out;
    };
    const A = a || zeroLike(b, c), Bb = b || zeroLike(a, o);
    const upd = {};
    for (const k of Object.keys(A)) {
      const kv = k.startsWith("past_key_values.");
      upd[k] = cat([kv ? leftPad(A[k], W - c.columns) : A[k], kv ? leftPad(Bb[k], W - o.columns) : Bb[k]], 0);
    }
    c.pkv = new DynamicCache(upd);
  }
  const ma = c.mask ? leftPad(c.mask, W - c.columns) : new Tensor("int64", new BigInt64Array(c.rows * W), [c.rows, W]);
  const mb = o.mask ? leftPad(o.mask, W - o.columns) : new Tensor("int64", new BigInt64Array(o.rows * W), [o.rows, W]);
  c.mask = W ? cat([ma, mb], 0) : null;
  c.ids = [...c.ids.map((r) => [...new Array(W - c.columns).fill(0), ...r]), ...o.ids.map((r) => [...new Array(W - o.columns).fill(0), ...r])];
  c.next = c.next.concat(o.next);
  c.rows += o.rows;
  c.columns = W;
  c.peak = Math.max(c.peak, o.peak);
  c.bypassBound = null;
}

export async function extract(c, row) {
  if (c.armed) throw new Refused("extract while a round is armed");
  await settle(c);
  const e = copy(c);
  await filter(e, [row]);
  // a single-row cache of the row's real columns (its pads taken out)
  if (e.mask) {
    const cols = [];
    for (let t = 0; t < e.columns; t++) if (e.mask.data[t] === 1n) cols.push(t);
    if (cols.length) {
      const upd = {};
      for (const k of kvNames(e)) upd[k] = cat(cols.map((t) => e.pkv[k].slice(null, null, [t, t + 1], null)), 2);
      e.pkv.update(upd);
    } else e.pkv = null; // no token yet: the states are still zero
    e.mask = cols.length ? new Tensor("int64", cols.map(() => 1n), [1, cols.length]) : null;
    e.ids = [cols.map((t) => e.ids[0][t])];
    e.columns = cols.length;
  }
  e.peak = Math.max(e.columns, Math.min(c.peak, c.next[row]));
  return e;
}

// transformers.js has no persistence: the cache's tensors and the adapter's
// bookkeeping, serialized with v8.
const plain = (t) => t && { type: t.type, data: t.data, dims: t.dims };
const tensor = (p) => p && new Tensor(p.type, p.data, p.dims);
export async function save(c) {
  await settle(c);
  const entries = {};
  if (c.pkv) for (const k of Object.keys(c.pkv)) entries[k] = plain(c.pkv[k]);
  const snap = c.round && c.round.snap && { ...c.round.snap, mask: plain(c.round.snap.mask),
    pkv: Object.fromEntries(Object.entries(c.round.snap.pkv).map(([k, t]) => [k, plain(t)])) };
  return v8.serialize({ ...c, pkv: c.pkv && entries, mask: plain(c.mask), pending: null, layers: undefined,
    round: c.round && { verify: c.round.verify, snap } });
}
export function load(bytes) {
  const d = v8.deserialize(bytes);
  const c = Object.assign(Object.create(Cache.prototype), d);
  c.layers = modelLayers(d.specs, d.dl);
  c.pkv = d.pkv && new DynamicCache(Object.fromEntries(Object.entries(d.pkv).map(([k, p]) => [k, tensor(p)])));
  c.mask = tensor(d.mask);
  if (d.round && d.round.snap) c.round.snap = { ...d.round.snap, mask: tensor(d.round.snap.mask),
    pkv: Object.fromEntries(Object.entries(d.round.snap.pkv).map(([k, p]) => [k, tensor(p)])) };
  c.bypassBound = null;
  return c;
}

// Each row's next position as transformers.js counts it: the mask's sum.
export function positions(c) {
  if (!c.mask) return new Array(c.rows).fill(0);
  const W = c.mask.dims[1];
  return Array.from({ length: c.rows }, (_, r) => {
    let n = 0;
    for (let t = 0; t < W; t++) n += Number(c.mask.data[r * W + t]);
    return n;
  });
}

function same(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (!Object.is(a[i], b[i])) return false;
  return true;
}
// The K/V bytes of a row's last `keep` real columns (a values layer).
function realSlots(c, i, r, keep) {
  const W = c.columns, cols = [];
  for (let t = 0; t < W; t++) if (c.mask.data[r * W + t] === 1n) cols.push(t);
  const out = [];
  for (const kv of ["key", "value"]) {
    const t = c.pkv[`past_key_values.${i}.${kv}`], [, H, T, D] = t.dims;
    for (let h = 0; h < H; h++) for (const col of cols.slice(cols.length - keep))
      out.push(...t.data.subarray(((r * H + h) * T + col) * D, ((r * H + h) * T + col + 1) * D));
  }
  return out;
}
const rowBytes = (t, r) => { const n = t.data.length / t.dims[0]; return t.data.subarray(r * n, (r + 1) * n); };
export async function difference(a, b) {
  await settle(a); await settle(b);
  if (a.rows !== b.rows) return `rows ${a.rows} vs ${b.rows}`;
  const pa = positions(a), pb = positions(b);
  if (pa.join() !== pb.join()) return `positions ${pa} vs ${pb}`;
  if (!pa.some((p) => p > 0)) return null;
  for (let i = 0; i < a.layers.length; i++) {
    const m = a.layers[i];
    for (let r = 0; r < a.rows; r++) {
      if (m.type === "ssm") {
        for (const k of [`past_conv.${i}`, `past_recurrent.${i}`])
          if (!same(rowBytes(a.pkv[k], r), rowBytes(b.pkv[k], r))) return `layer ${m.spec.name} row ${r}: states differ`;
      } else if (m.type === "values") {
        let keep = pa[r];
        if (m.spec.kind === "rotating") keep = Math.min(keep, m.spec.window - 1);
        if (!same(realSlots(a, i, r, keep), realSlots(b, i, r, keep))) return `layer ${m.spec.name} row ${r}: stored tokens differ`;
      }
    }
  }
  return null;
}
