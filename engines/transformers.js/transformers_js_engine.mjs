// The cache on transformers.js: the state generate() keeps between steps
// (model_inputs: attention_mask and a DynamicCache, and all_input_ids), driven
// through the model's own step functions: prepare_inputs_for_generation,
// forward, and _update_model_kwargs_for_generation (presents renamed into the
// DynamicCache, the mask extended by a column, position_ids rebuilt from the
// mask by the next forward). Models are generated probe models (transformers_js_models.mjs)
// loaded from a local folder; nothing is downloaded.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { AutoModelForCausalLM, env, Tensor, cat } from "@huggingface/transformers";
import { attentionToken, recurrentToken, convWeights } from "kvspec-adapter-kit";
import { modelLayers, writeModel } from "./transformers_js_models.mjs";

import { NotApplicable } from "kvspec-adapter-kit";
export { Refused, NotApplicable } from "kvspec-adapter-kit";

const ROOT = fs.mkdtempSync(path.join(os.tmpdir(), "kvspec-transformers-js-"));
process.on("exit", () => fs.rmSync(ROOT, { recursive: true, force: true }));
env.allowRemoteModels = false;
env.allowLocalModels = true;
env.localModelPath = ROOT + path.sep;

// Token labels: 0 pad, 1 junk (a (position, token) the adapter never wrote),
// then one per distinct (pos, id). Tokens: 0 is the pad token, then one per id.
export const tags = ["pad", "junk"];
const labelOf = new Map();
const tokens = new Map();
export function label(pos, id) {
  const k = pos + ":" + id;
  let l = labelOf.get(k);
  if (l === undefined) { l = tags.length; tags.push([pos, id]); labelOf.set(k, l); }
  return l;
}
export function token(id) {
  let t = tokens.get(id);
  if (t === undefined) { t = tokens.size + 1; tokens.set(id, t); }
  return t;
}

// The probe width of the models: labels + 1 (one-hot index 0 stays unused).
let probeWidth = 64;
export function neededWidth() {
  while (probeWidth < tags.length + 1) probeWidth *= 2;
  return probeWidth;
}

const models = new Map();
export async function modelFor(specs, exportKind, dl) {
  const shape = specs.map((s) => [s.kind, s.heads, s.qheads, s.dim, s.window, s.kheads, s.dk, s.dv, s.conv].join(",")).join(";");
  const key = `${exportKind}-${dl}-${shape}`;
  let m = models.get(key);
  if (!m) {
    const name = writeModel(ROOT, `m${models.size}`, specs, exportKind, dl);
    m = AutoModelForCausalLM.from_pretrained(name, {
      dtype: "fp32", local_files_only: true,
      session_options: { intraOpNumThreads: 1, interOpNumThreads: 1, logSeverityLevel: 3 },
    });
    models.set(key, m);
  }
  return m;
}

// Per-layer token tables, grown as labels are added.
const tables = new Map();
function table(key, width, fill) {
  let t = tables.get(key);
  if (!t) { t = { n: 0, data: new Float32Array(64 * width) }; tables.set(key, t); }
  if (t.n < tags.length) {
    if (tags.length * width > t.data.length) {
      const d = new Float32Array(Math.max(tags.length, 2 * t.data.length / width) * width);
      d.set(t.data); t.data = d;
    }
    for (let l = t.n; l < tags.length; l++) if (Array.isArray(tags[l])) fill(t.data.subarray(l * width, (l + 1) * width), tags[l]);
    t.n = tags.length;
  }
  return new Tensor("float32", t.data.slice(0, tags.length * width), [tags.length, width]);
}

// The extra model inputs of a forward: the (position, token) -> label index
// for positions below P, and each layer's table.
const MAX_INDEX = 1 << 24;
function extraInputs(c, P) {
  const V = tokens.size + 1;
  if (P * V > MAX_INDEX) throw new NotApplicable(`the probe model's token index (${P} positions x ${V} tokens) exceeds ${MAX_INDEX} entries`);
  const index = new BigInt64Array(P * V).fill(1n);
  for (let p = 0; p < P; p++) index[p * V] = 0n;
  for (let l = 2; l < tags.length; l++) {
    const [pos, id] = tags[l];
    if (pos < P) index[pos * V + tokens.get(id)] = BigInt(l);
  }
  const x = { kvspec_index: new Tensor("int64", index, [P * V]), kvspec_stride: new Tensor("int64", [BigInt(V)], [1]) };
  c.layers.forEach((m, i) => {
    const s = m.spec;
    if (m.type === "values") {
      x[`kvspec_table.${i}`] = table(`a${m.li},${m.H},${m.HQ},${s.dim}`, m.width, (dst, [pos, id]) => {
        const { q, k, v } = attentionToken(m.li, id, pos, m.H, m.HQ, s.dim);
        for (let h = 0; h < m.HQ; h++) dst.set(q.subarray(h * s.dim, (h + 1) * s.dim), h * m.D);
        for (let h = 0; h < m.H; h++) {
          dst.set(k.subarray(h * s.dim, (h + 1) * s.dim), (m.HQ + h) * m.D);
          dst.set(v.subarray(h * s.dim, (h + 1) * s.dim), (m.HQ + m.H + h) * m.D);
        }
      });
    } else if (m.type === "ssm") {
      const Hv = s.heads, Hk = s.kheads;
      x[`kvspec_table.${i}`] = table(`s${m.li},${Hv},${Hk},${s.dk},${s.dv}`, m.C + 2 * Hv, (dst, [pos, id]) => {
        const { x: xx, a, b } = recurrentToken(m.li, id, pos, Hv, Hk, s.dk, s.dv);
        dst.set(xx, 0);
        for (let h = 0; h < Hv; h++) {
          dst[m.C + h] = -Math.log1p(Math.exp(-(2 + a[h]))); // log(sigmoid(2 + a))
          dst[m.C + Hv + h] = 1 / (1 + Math.exp(-b[h]));
        }
      });
      x[`kvspec_conv.${i}`] = new Tensor("float32", convWeights(m.li, m.C, s.conv), [m.C, 1, s.conv]);
    }
  });
  return x;
}

export const cloneTensor = (t) => new Tensor(t.type, t.data.slice(), t.dims.slice());
export function cloneEntries(cache) {
  const out = {};
  if (cache) for (const k of Object.keys(cache)) out[k] = cloneTensor(cache[k]);
  return out;
}

export class Cache {
  constructor(rows, specs, settings) {
    this.rows = rows; this.specs = specs; this.settings = settings;
    this.dl = neededWidth();
    this.layers = modelLayers(specs, this.dl);
    this.mask = null;            // attention_mask [rows, columns] (int64)
    this.pkv = null;             // the DynamicCache
    this.ids = Array.from({ length: rows }, () => []); // all_input_ids (tokens)
    this.pending = null;         // the last forward's outputs, not yet moved into the cache
    this.next = new Array(rows).fill(0);
    this.columns = 0; this.peak = 0;
    this.armed = false; this.verified = false; this.verifyReal = null;
    this.peakBeforeVerify = 0; this.peakBeforeForward = 0; this.bypassBound = null;
    this.round = null; this.last = null;
  }
  wrapped(i) { const s = this.specs[i]; return s.kind === "rotating" && this.peak > (s.capacity || s.window); }
  model() { return modelFor(this.specs, this.settings.export, this.dl); }
}

// generate()'s update after a forward, outside a decode: the presents go into
// the DynamicCache (_update_model_kwargs_for_generation), and the column it
// adds for a next sampled token is taken off again.
export async function settle(c) {
  if (!c.pending) return;
  const model = await c.model();
  const mi = model._update_model_kwargs_for_generation({
    generated_input_ids: c.ids.map(() => [0n]), outputs: c.pending,
    model_inputs: { attention_mask: c.mask, past_key_values: c.pkv }, is_encoder_decoder: false,
  });
  c.pkv = mi.past_key_values;
  c.mask = mi.attention_mask.slice(null, [0, c.columns]);
  c.pending = null;
}

// Widens the probe layers' K/V to the current probe width (zeros: no label).
export async function widen(c) {
  const dl = neededWidth();
  if (c.dl === dl) return;
  await settle(c);
  if (c.pkv) c.layers.forEach((m, i) => {
    if (m.type !== "probe" || m.li < 0) return;
    for (const kv of ["key", "value"]) {
      const name = `past_key_values.${i}.${kv}`, t = c.pkv[name];
      const [B, H, T, D] = t.dims, out = new Float32Array(B * H * T * dl);
      for (let j = 0; j < B * H * T; j++) out.set(t.data.subarray(j * D, (j + 1) * D), j * dl);
      c.pkv.update({ [name]: new Tensor("float32", out, [B, H, T, dl]) });
    }
  });
  c.dl = dl;
  c.layers = modelLayers(c.specs, dl);
}

const allIds = (c) => new Tensor("int64", c.ids.flatMap((r) => r.map(BigInt)), [c.rows, c.ids[0].length]);

// One forward of `columns` new columns: row r holds left[r] pads, its ids, right[r]
// pads. A decode (one real token per row) right after a forward is generate()'s
// step; anything else continues from the cache as a user does with a
// DynamicCache: the full input_ids and an attention_mask over every column.
export async function run(c, { columns, ids, positions, left, right, decode }) {
  for (let r = 0; r < c.rows; r++) for (const id of ids[r]) token(id);
  const before = c.columns;
  // labels of the tokens at the positions transformers.js should give them
  for (let r = 0; r < c.rows; r++) ids[r].forEach((id, t) => label(positions[r][t], id));
  await widen(c);
  const model = await c.model();
  const cols = ids.map((g, r) => [...new Array(left[r]).fill(0), ...g.map(token), ...new Array(right[r]).fill(0)]);
  let mi;
  if (decode && c.pending) {
    mi = model._update_model_kwargs_for_generation({
      generated_input_ids: cols.map((g) => [BigInt(g[0])]), outputs: c.pending,
      model_inputs: { attention_mask: c.mask, past_key_values: c.pkv }, is_encoder_decoder: false,
    });
    c.pending = null;
    cols.forEach((g, r) => c.ids[r].push(...g));
  } else {
    await settle(c);
    const m = new Tensor("int64", cols.flatMap((g, r) => g.map((_, t) => BigInt(t >= left[r] && t < columns - right[r]))), [c.rows, columns]);
    cols.forEach((g, r) => c.ids[r].push(...g));
    mi = { attention_mask: c.mask ? cat([c.mask, m], 1) : m, past_key_values: c.pkv, input_ids: allIds(c) };
  }
  Object.assign(mi, extraInputs(c, before + columns + 1));
  mi = model.prepare_inputs_for_generation(c.ids.map((r) => r.map(BigInt)), mi, model.generation_config ?? {});
  let outputs;
  try {
    outputs = await model.forward(mi);
  } catch (e) {
    c.ids.forEach((r) => r.splice(before));
    throw e;
  }
  c.mask = mi.attention_mask;
  c.pkv = mi.past_key_values ?? null;
  c.pending = outputs;
  c.columns = before + columns;
  return outputs;
}

// What each real query saw (probe layers) and computed (values, ssm layers).
export function observe(c, outputs, { ids, positions, left, columns }) {
  const seen = [], out = [];
  c.layers.forEach((m, i) => {
    if (m.li < 0) return;
    const o = outputs[`kvspec_out.${i}`], width = o.dims[2];
    for (let r = 0; r < c.rows; r++) ids[r].forEach((_, t) => {
      const base = (r * columns + left[r] + t) * width;
      const pos = positions[r][t];
      if (m.type === "probe") seen.push({ layer: m.li, row: r, pos, items: decodeSeen(o.data.subarray(base, base + m.D)) });
      else if (m.type === "ssm") out.push({ layer: m.li, row: r, pos, values: Array.from(o.data.subarray(base, base + width)) });
      else {
        const v = [];
        for (let h = 0; h < m.HQ; h++) for (let d = 0; d < m.spec.dim; d++) v.push(o.data[base + h * m.D + d]);
        out.push({ layer: m.li, row: r, pos, values: v });
      }
    });
  });
  return { seen, out };
}

// A probe output: weight 1/n on each attended slot's one-hot label.
export function decodeSeen(o) {
  let min = Infinity, sum = 0;
  for (const w of o) if (w > 1e-6) { min = Math.min(min, w); sum += w; }
  if (sum === 0) return ["zero"];
  const n = Math.round(1 / min), items = [];
  let count = 0;
  o.forEach((w, l) => {
    if (w <= 1e-6) return;
    const k = Math.round(w * n);
    count += k;
    const tag = l >= 1 && l - 1 < tags.length ? tags[l - 1] : "junk";
    for (let i = 0; i < k; i++) items.push(tag);
  });
  for (let i = count; i < n; i++) items.push("zero");
  return items;
}
