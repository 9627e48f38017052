// The cache on ONNX Runtime: kv and rotating layers are stored in the K/V
// buffers com.microsoft.GroupQueryAttention reads and writes (present_key/
// present_value become the next call's past), ssm layers in the states of
// CausalConvWithState and LinearAttention. Each attention forward runs twice:
// a probe (Q = K = 0, V one-hot per token label: the output names what each
// query attended to) and the values (the trace's q/k/v, zero-padded to a head
// size that is a multiple of 8). The adapter keeps kvspec's bookkeeping
// (positions, columns, rounds) and maps each statement onto engine calls.
import ort from "onnxruntime-node";
import { attentionToken, recurrentToken, convWeights } from "kvspec-adapter-kit";
import { gqaModel, convModel, linearAttentionModel } from "./models.mjs";

export { Refused, NotApplicable } from "kvspec-adapter-kit";

// buffer=ring serves the trace's rings (`rotating`) with sliding_window_cache=1;
// a `kv window=` layer keeps every token in kvspec, so it stays a full buffer.
export const isRing = (settings, spec) => settings.buffer === "ring" && spec.kind === "rotating";
const pad8 = (n) => Math.max(8, Math.ceil(n / 8) * 8);
const sessions = new Map();
async function session(key, build) {
  let s = sessions.get(key);
  if (!s) {
    s = await ort.InferenceSession.create(build(), { intraOpNumThreads: 1, interOpNumThreads: 1, logSeverityLevel: 4 });
    sessions.set(key, s);
  }
  return s;
}
const T = (data, dims) => new ort.Tensor(data instanceof Int32Array ? "int32" : "float32", data, dims);

// Token labels of the probe: one per distinct (pos, id), shared by all layouts.
const labels = new Map(), tags = [];
function label(pos, id) {
  const k = pos + ":" + id;
  let l = labels.get(k);
  if (l === undefined) { l = tags.length; tags.push([pos, id]); labels.set(k, l); }
  return l;
}

// One row of one attention layer: `len` slots in the engine's [H, cap, D]
// layout for the values and [H, cap, DL] for the probe (`seen`: the
// sequence length the engine has been told, which in ring mode is absolute).
function emptyRow() { return { len: 0, seen: 0, k: null, v: null, pk: null, pv: null }; }

export class Cache {
  constructor(rows, specs, settings) {
    this.rows = rows; this.specs = specs; this.settings = settings;
    this.batched = rows > 1;
    this.layers = specs.map((s) => s.kind === "ssm" ? this.ssmLayer(s) : { rows: Array.from({ length: rows }, emptyRow), dl: 8 });
    this.next = new Array(rows).fill(0);
    this.columns = 0; this.peak = 0;
    this.armed = false; this.verified = false; this.verifyReal = null;
    this.peakBeforeVerify = 0; this.peakBeforeForward = 0; this.bypassBound = null;
    this.round = null;
  }
  ssmLayer(s) {
    const C = 2 * s.kheads * s.dk + s.heads * s.dv;
    return { rows: Array.from({ length: this.rows }, () => ({ conv: new Float32Array(C * (s.conv - 1)), state: new Float32Array(s.heads * s.dk * s.dv) })) };
  }
  wrapped(i) { const s = this.specs[i]; return s.kind === "rotating" && this.peak > (s.capacity || s.window); }
}

export function cloneRow(r) {
  return r.conv ? { conv: r.conv.slice(), state: r.state.slice() }
    : { len: r.len, seen: r.seen, k: r.k && r.k.slice(), v: r.v && r.v.slice(), pk: r.pk && r.pk.slice(), pv: r.pv && r.pv.slice() };
}
export function cloneCache(c) {
  const n = Object.assign(Object.create(Cache.prototype), c);
  n.layers = c.layers.map((l) => ({ ...l, rows: l.rows.map(cloneRow) }));
  n.next = c.next.slice();
  n.verifyReal = c.verifyReal && c.verifyReal.slice();
  n.bypassBound = c.bypassBound && c.bypassBound.slice();
  n.lastForward = c.lastForward && { ...c.lastForward, dl: c.lastForward.dl.slice(), snap: c.lastForward.snap.map((l) => l && l.map(cloneRow)) };
  n.round = c.round && { snap: c.round.snap.map((l) => l && l.map(cloneRow)), ids: c.round.ids, positions: c.round.positions };
  return n;
}

// Copies `len` slots of a [H, cap, D] row buffer into a [H, cap2, D] one.
function reshape(buf, H, cap, D, len, cap2, D2 = D) {
  const out = new Float32Array(H * cap2 * D2);
  if (buf) for (let h = 0; h < H; h++) for (let s = 0; s < len; s++)
    out.set(buf.subarray((h * cap + s) * D, (h * cap + s) * D + Math.min(D, D2)), (h * cap2 + s) * D2);
  return out;
}

// --- attention ----------------------------------------------------------------
// The buffer length of a row in each mode: full grows with the row, shared is
// a preallocated capacity (doubling), ring is the layer's capacity.
function bufLen(mode, spec, need) {
  if (mode === "ring" && spec.kind === "rotating") return spec.capacity || spec.window;
  if (mode === "shared") { let m = 16; while (m < need) m *= 2; return m; }
  return need;
}

async function attentionCall(c, li, spec, rowIdx, inputs, probe) {
  // inputs[j]: {n, q, k, v} (flat [n, heads*D] arrays, D the engine head size)
  const mode = c.settings.buffer;
  const layer = c.layers[li];
  const H = spec.heads, HQ = spec.qheads || spec.heads;
  const D = probe ? layer.dl : pad8(spec.dim);
  const ring = isRing(c.settings, spec);
  const B = rowIdx.length, S = Math.max(...inputs.map((x) => x.n));
  const rows = rowIdx.map((r) => layer.rows[r]);
  const lens = rows.map((r) => (ring ? r.seen : r.len));
  const totals = rows.map((r, j) => lens[j] + inputs[j].n);
  const total = Math.max(...totals);
  const P = ring ? bufLen(mode, spec) : mode === "shared" ? bufLen(mode, spec, total) : Math.max(...rows.map((r) => r.len));
  const cap = (r) => (r.k ? (probe ? r.pk : r.k).length / (H * D) : 0);
  const pk = new Float32Array(B * H * P * D), pv = new Float32Array(B * H * P * D);
  rows.forEach((r, j) => {
    const kb = probe ? r.pk : r.k, vb = probe ? r.pv : r.v;
    if (!kb) return;
    const held = ring ? Math.min(cap(r), P) : r.len;
    pk.set(reshape(kb, H, cap(r), D, held, P), j * H * P * D);
    pv.set(reshape(vb, H, cap(r), D, held, P), j * H * P * D);
  });
  const q = new Float32Array(B * S * HQ * D), k = new Float32Array(B * S * H * D), v = new Float32Array(B * S * H * D);
  inputs.forEach((x, j) => {
    for (let t = 0; t < x.n; t++) {
      for (let h = 0; h < HQ; h++) q.set(x.q.subarray((t * HQ + h) * D, (t * HQ + h + 1) * D), ((j * S + t) * HQ + h) * D);
      for (let h = 0; h < H; h++) {
        k.set(x.k.subarray((t * H + h) * D, (t * H + h + 1) * D), ((j * S + t) * H + h) * D);
        v.set(x.v.subarray((t * H + h) * D, (t * H + h + 1) * D), ((j * S + t) * H + h) * D);
      }
    }
  });
  // The values use the trace's scale 1/sqrt(dim), not the padded head's.
  const scale = probe ? 0 : 1 / Math.sqrt(spec.dim);
  const s = await session(`gqa ${HQ} ${H} ${spec.window} ${ring} ${scale}`, () => gqaModel({ qheads: HQ, heads: H, window: spec.window, ring, scale }));
  const feeds = {
    query: T(q, [B, S, HQ * D]), key: T(k, [B, S, H * D]), value: T(v, [B, S, H * D]),
    past_key: T(pk, [B, H, P, D]), past_value: T(pv, [B, H, P, D]),
    seqlens_k: T(Int32Array.from(totals.map((t) => t - 1)), [B]), total_sequence_length: T(Int32Array.from([total]), [1]),
  };
  let res;
  if (mode === "shared") {
    // past and present share one preallocated buffer (the op's in-place mode).
    const out = T(new Float32Array(B * S * HQ * D), [B, S, HQ * D]);
    res = await s.run(feeds, { output: out, present_key: feeds.past_key, present_value: feeds.past_value });
  } else {
    res = await s.run(feeds);
  }
  const Tn = res.present_key.dims[2];
  rows.forEach((r, j) => {
    const keepLen = ring ? Tn : totals[j];
    const kk = res.present_key.data.slice(j * H * Tn * D, (j + 1) * H * Tn * D);
    const vv = res.present_value.data.slice(j * H * Tn * D, (j + 1) * H * Tn * D);
    const kb = reshape(kk, H, Tn, D, Math.min(keepLen, Tn), bufLen(mode, spec, keepLen) || keepLen);
    const vb = reshape(vv, H, Tn, D, Math.min(keepLen, Tn), bufLen(mode, spec, keepLen) || keepLen);
    if (probe) { r.pk = kb; r.pv = vb; } else { r.k = kb; r.v = vb; }
  });
  return { out: res.output.data, S, D, HQ };
}

// Runs one engine call over these rows; when the engine refuses a batched call
// (several rows with a past and more than one new token), one call per row.
async function attentionRun(c, li, spec, rowIdx, inputs, probe) {
  try {
    return [{ rowIdx, inputs, ...(await attentionCall(c, li, spec, rowIdx, inputs, probe)) }];
  } catch (e) {
    if (rowIdx.length > 1 && /batch_size must be 1|sequence_length shall be 1|too small for sequence_length/.test(e.message)) {
      const parts = [];
      for (let j = 0; j < rowIdx.length; j++) parts.push(...(await attentionRun(c, li, spec, [rowIdx[j]], [inputs[j]], probe)));
      return parts;
    }
    throw e;
  }
}

// Widens a layer's probe buffers to DL label columns (zeros: no label).
export function widenProbe(layer, H, DL) {
  for (const row of layer.rows) if (row.pk) {
    const cap = row.pk.length / (H * layer.dl);
    row.pk = reshape(row.pk, H, cap, layer.dl, cap, cap, DL);
    row.pv = reshape(row.pv, H, cap, layer.dl, cap, cap, DL);
  }
  layer.dl = DL;
}

// What a next query of row r would see in layer li: a probe call with one
// unlabeled token (zero V) on a copy of the row; the engine's own answer to
// "which tokens are still visible", wherever it keeps them.
export async function seenNext(c, li, r) {
  const spec = c.specs[li], layer = c.layers[li];
  if (!layer.rows[r].pk) return [];
  const copy = cloneCache(c);
  const H = spec.heads, HQ = spec.qheads || spec.heads, DL = layer.dl;
  const x = { n: 1, q: new Float32Array(HQ * DL), k: new Float32Array(H * DL), v: new Float32Array(H * DL) };
  const res = await attentionCall(copy, li, spec, [r], [x], true);
  const items = decodeSeen(res.out.subarray(0, res.D));
  items.splice(items.indexOf("zero"), 1);
  return items.map((i) => (typeof i === "string" ? i : i.join(":"))).sort();
}

function decodeSeen(o) {
  // o: probe output of one query head, weights 1/n on each attended slot.
  let min = Infinity, sum = 0;
  for (const w of o) if (w > 1e-6) { min = Math.min(min, w); sum += w; }
  if (sum === 0) return ["zero"];
  const n = Math.round(1 / min);
  const items = [];
  let count = 0;
  o.forEach((w, l) => {
    if (w <= 1e-6) return;
    const m = Math.round(w * n);
    count += m;
    for (let i = 0; i < m; i++) items.push(l - 1 < tags.length && l >= 1 ? tags[l - 1] : "junk");
  });
  for (let i = count; i < n; i++) items.push("zero");
  return items;
}

export async function attentionForward(c, li, spec, ids, positions, seen, outs) {
  const layer = c.layers[li];
  const H = spec.heads, HQ = spec.qheads || spec.heads, Dp = pad8(spec.dim);
  const rowIdx = [], probeIn = [], valueIn = [];
  // Probe labels are 1 + label (0 stays unused so that a zero V is "zero").
  for (let r = 0; r < c.rows; r++) ids[r].forEach((id, t) => label(positions[r][t], id));
  const needDl = pad8(tags.length + 1);
  if (needDl > layer.dl) widenProbe(layer, H, Math.max(needDl, layer.dl * 2));
  const DL = layer.dl;
  for (let r = 0; r < c.rows; r++) {
    const n = ids[r].length;
    if (!n) continue; // the engine refuses an empty row: it is left out of the call
    rowIdx.push(r);
    const pq = new Float32Array(n * HQ * DL), pkk = new Float32Array(n * H * DL), pvv = new Float32Array(n * H * DL);
    const vq = new Float32Array(n * HQ * Dp), vk = new Float32Array(n * H * Dp), vv = new Float32Array(n * H * Dp);
    for (let t = 0; t < n; t++) {
      const l = 1 + label(positions[r][t], ids[r][t]);
      for (let h = 0; h < H; h++) pvv[(t * H + h) * DL + l] = 1;
      const { q, k, v } = attentionToken(li, ids[r][t], positions[r][t], H, HQ, spec.dim);
      for (let h = 0; h < HQ; h++) vq.set(q.subarray(h * spec.dim, (h + 1) * spec.dim), (t * HQ + h) * Dp);
      for (let h = 0; h < H; h++) {
        vk.set(k.subarray(h * spec.dim, (h + 1) * spec.dim), (t * H + h) * Dp);
        vv.set(v.subarray(h * spec.dim, (h + 1) * spec.dim), (t * H + h) * Dp);
      }
    }
    probeIn.push({ n, q: pq, k: pkk, v: pvv });
    valueIn.push({ n, q: vq, k: vk, v: vv });
  }
  if (!rowIdx.length) return;
  const probeParts = await attentionRun(c, li, spec, rowIdx, probeIn, true);
  const valueParts = await attentionRun(c, li, spec, rowIdx, valueIn, false);
  for (const p of probeParts) p.rowIdx.forEach((r, j) => {
    for (let t = 0; t < p.inputs[j].n; t++) {
      const base = (j * p.S + t) * p.HQ * p.D;
      seen.set(`${li},${r},${positions[r][t]}`, decodeSeen(p.out.subarray(base, base + p.D)));
    }
  });
  for (const p of valueParts) p.rowIdx.forEach((r, j) => {
    for (let t = 0; t < p.inputs[j].n; t++) {
      const o = [];
      for (let h = 0; h < HQ; h++) {
        const base = ((j * p.S + t) * HQ + h) * p.D;
        for (let d = 0; d < spec.dim; d++) o.push(p.out[base + d]);
      }
      outs.set(`${li},${r},${positions[r][t]}`, o);
    }
  });
  const ring = isRing(c.settings, spec);
  rowIdx.forEach((r, j) => {
    const row = layer.rows[r], n = valueIn[j].n;
    row.seen += n;
    row.len = ring ? Math.min(row.seen, row.k.length / (H * Dp)) : row.len + n;
  });
}

// --- recurrent ----------------------------------------------------------------
async function ssmRows(c, li, spec, rowIdx, ids, positions, outs) {
  const Hk = spec.kheads || spec.heads, Hv = spec.heads, dk = spec.dk, dv = spec.dv, K = spec.conv;
  const C = 2 * Hk * dk + Hv * dv, B = rowIdx.length, L = ids[rowIdx[0]].length;
  const layer = c.layers[li];
  const w = convWeights(li, C, K);
  const x = new Float32Array(B * C * L), a = [], b = [];
  rowIdx.forEach((r, j) => {
    for (let t = 0; t < L; t++) {
      const { x: xx, a: aa, b: bb } = recurrentToken(li, ids[r][t], positions[r][t], Hv, Hk, dk, dv);
      for (let ch = 0; ch < C; ch++) x[(j * C + ch) * L + t] = xx[ch];
      a.push(aa); b.push(bb);
    }
  });
  const past = new Float32Array(B * C * (K - 1));
  rowIdx.forEach((r, j) => past.set(layer.rows[r].conv, j * C * (K - 1)));
  const cs = await session("conv", convModel);
  const cr = await cs.run({ input: T(x, [B, C, L]), weight: T(w, [C, 1, K]), past_state: T(past, [B, C, K - 1]) });
  const u = cr.output.data;
  const q = new Float32Array(B * L * Hk * dk), k = new Float32Array(B * L * Hk * dk), v = new Float32Array(B * L * Hv * dv);
  const decay = new Float32Array(B * L * Hv), beta = new Float32Array(B * L * Hv);
  for (let j = 0; j < B; j++) for (let t = 0; t < L; t++) {
    const U = (ch) => u[(j * C + ch) * L + t];
    for (let kh = 0; kh < Hk; kh++) for (const [dst, off] of [[q, 0], [k, Hk * dk]]) {
      let ss = 0;
      for (let i = 0; i < dk; i++) ss += U(off + kh * dk + i) ** 2;
      const inv = 1 / Math.sqrt(ss + 1e-6);
      for (let i = 0; i < dk; i++) dst[((j * L + t) * Hk + kh) * dk + i] = U(off + kh * dk + i) * inv;
    }
    for (let i = 0; i < Hv * dv; i++) v[(j * L + t) * Hv * dv + i] = U(2 * Hk * dk + i);
    for (let h = 0; h < Hv; h++) {
      const z = 2 + a[j * L + t][h];
      decay[(j * L + t) * Hv + h] = -Math.log1p(Math.exp(-z)); // log(sigmoid(z))
      beta[(j * L + t) * Hv + h] = 1 / (1 + Math.exp(-b[j * L + t][h]));
    }
  }
  const st = new Float32Array(B * Hv * dk * dv);
  rowIdx.forEach((r, j) => st.set(layer.rows[r].state, j * Hv * dk * dv));
  const ls = await session(`la ${Hk} ${Hv}`, () => linearAttentionModel({ kheads: Hk, heads: Hv }));
  const lr = await ls.run({ query: T(q, [B, L, Hk * dk]), key: T(k, [B, L, Hk * dk]), value: T(v, [B, L, Hv * dv]),
    past_state: T(st, [B, Hv, dk, dv]), decay: T(decay, [B, L, Hv]), beta: T(beta, [B, L, Hv]) });
  rowIdx.forEach((r, j) => {
    layer.rows[r].conv = cr.present_state.data.slice(j * C * (K - 1), (j + 1) * C * (K - 1));
    layer.rows[r].state = lr.present_state.data.slice(j * Hv * dk * dv, (j + 1) * Hv * dk * dv);
    if (outs) for (let t = 0; t < L; t++)
      outs.set(`${li},${r},${positions[r][t]}`, Array.from(lr.output.data.subarray((j * L + t) * Hv * dv, (j * L + t + 1) * Hv * dv)));
  });
}

// Rows with the same token count go in one call; the ops have no per-row lengths.
export async function ssmForward(c, li, spec, ids, positions, outs) {
  const groups = new Map();
  for (let r = 0; r < c.rows; r++) if (ids[r].length) {
    const g = groups.get(ids[r].length) || [];
    g.push(r); groups.set(ids[r].length, g);
  }
  for (const rows of groups.values()) await ssmRows(c, li, spec, rows, ids, positions, outs);
}

export async function forwardLayers(c, ids, positions) {
  const seen = new Map(), outs = new Map();
  for (let li = 0; li < c.specs.length; li++) {
    const spec = c.specs[li];
    if (spec.kind === "ssm") await ssmForward(c, li, spec, ids, positions, outs);
    else await attentionForward(c, li, spec, ids, positions, seen, outs);
  }
  return { seen, outs };
}
