// Probe models for transformers.js, written as ONNX protobuf from JavaScript
// (the encoder of engines/onnxruntime/models.mjs) into a model folder
// (config.json + onnx/model.onnx) that transformers.js loads like a Hub model.
// Token contents come from tables the adapter passes as extra model inputs
// (transformers.js forwards every input the session declares):
//   kvspec_index [P*V] int64: label of (position, token) at position*V + token,
//   kvspec_stride [1] int64: V,
//   kvspec_table.{i} [labels, width] float: a layer's per-label inputs.
// Each trace attention layer is two model layers: its values (the trace's
// q/k/v) and its probe (Q = K = 0, V one-hot per label: the output names the
// slots a query attended to). Attention in two export conventions:
//   plain: MatMul/Softmax with a mask from attention_mask (optimum's),
//   gqa: com.microsoft.GroupQueryAttention, seqlens_k = ReduceSum(mask) - 1,
//        total_sequence_length = mask width (onnxruntime-genai's model builder).
// Recurrent layers are Qwen3-Next's linear_attention (CausalConvWithState +
// LinearAttention, cache past_conv.{i} / past_recurrent.{i}).
import fs from "node:fs";
import path from "node:path";
import { field, bytesField, str, int, valueInfo } from "../onnxruntime/models.mjs";

const F = 1, I64 = 7, I32 = 6, BOOL = 9;

function attr(name, v) {
  if (Array.isArray(v)) return [...str(1, name), ...v.flatMap((x) => int(8, x)), ...int(20, 7)];
  if (v && v.float !== undefined) {
    const b = new Uint8Array(new Float32Array([v.float]).buffer);
    return [...str(1, name), ...field(2, 5, [...b]), ...int(20, 1)];
  }
  if (typeof v === "string") return [...str(1, name), ...str(4, v), ...int(20, 3)];
  return [...str(1, name), ...int(3, v), ...int(20, 2)];
}

class Graph {
  constructor() { this.nodes = []; this.inputs = []; this.outputs = []; this.n = 0; }
  input(name, elem, dims) { this.inputs.push(valueInfo(name, elem, dims)); return name; }
  output(name, elem, dims) { this.outputs.push(valueInfo(name, elem, dims)); return name; }
  // One node; returns its output names (`outs`: fixed names, else fresh ones).
  op(type, inputs, attrs = {}, outs = 1, domain = "") {
    const names = typeof outs === "number" ? Array.from({ length: outs }, () => `t${this.n++}`) : outs;
    this.nodes.push([
      ...inputs.flatMap((x) => str(1, x)), ...names.flatMap((x) => str(2, x)),
      ...str(3, `n${this.nodes.length}`), ...str(4, type),
      ...Object.entries(attrs).flatMap(([k, v]) => bytesField(5, attr(k, v))),
      ...(domain ? str(7, domain) : []),
    ]);
    return typeof outs === "number" && outs === 1 ? names[0] : names;
  }
  ints(v) { return this.op("Constant", [], { value_ints: v }); }
  float(v) { return this.op("Constant", [], { value_float: { float: v } }); }
  bytes() {
    const graph = [
      ...this.nodes.flatMap((n) => bytesField(1, n)), ...str(2, "kvspec_probe"),
      ...this.inputs.flatMap((i) => bytesField(11, i)), ...this.outputs.flatMap((o) => bytesField(12, o)),
    ];
    return Uint8Array.from([
      ...int(1, 8), ...str(2, "kvspec"),
      ...bytesField(8, [...str(1, ""), ...int(2, 17)]),
      ...bytesField(8, [...str(1, "com.microsoft"), ...int(2, 1)]),
      ...bytesField(7, graph),
    ]);
  }
}

export const pad8 = (n) => Math.max(8, Math.ceil(n / 8) * 8);

// The model layers of a trace's layer list: each attention layer becomes a
// values layer and a probe layer; a model without attention gets one
// attention layer more (transformers.js reads the cache length from them).
export function modelLayers(specs, dl) {
  const out = [];
  specs.forEach((s, li) => {
    if (s.kind === "ssm") {
      out.push({ type: "ssm", li, spec: s, C: 2 * s.kheads * s.dk + s.heads * s.dv });
    } else {
      const D = pad8(s.dim), H = s.heads, HQ = s.qheads || s.heads;
      out.push({ type: "values", li, spec: s, H, HQ, D, W: s.window || 0, width: (HQ + 2 * H) * D });
      out.push({ type: "probe", li, spec: s, H, HQ, D: dl, W: s.window || 0 });
    }
  });
  if (!out.some((l) => l.type !== "ssm")) out.push({ type: "probe", li: -1, spec: null, H: 1, HQ: 1, D: 8, W: 0 });
  return out;
}

// Q, K, V of a values layer from its table rows: [B,S,HQ*D], [B,S,H*D] twice.
function attentionInputs(g, m, i, label) {
  const table = g.input(`kvspec_table.${i}`, F, ["labels", m.width]);
  const row = g.op("Gather", [table, label]);
  const part = (a, b) => g.op("Slice", [row, g.ints([a]), g.ints([b]), g.ints([2])]);
  const q = m.HQ * m.D, k = m.H * m.D;
  return [part(0, q), part(q, q + k), part(q + k, q + 2 * k)];
}

// Q, K, V of a probe layer: V one-hot at 1 + label in every kv head, Q and K zero.
function probeInputs(g, label, D, H, HQ) {
  const values = g.op("Cast", [g.ints([0, 1])], { to: F });
  const hot = g.op("OneHot", [g.op("Add", [label, g.ints([1])]), g.ints([D]), values], { axis: -1 });
  const v = g.op("Tile", [hot, g.ints([1, 1, H])]);
  const zero = g.op("Mul", [v, g.float(0)]);
  return [g.op("Tile", [zero, g.ints([1, 1, HQ / H])]), zero, v];
}

// Plain attention (optimum's convention): past/present [B,H,T,D], the mask
// from attention_mask [B,T]: a query at column c admits the columns t <= c
// with mask 1 (and t > c - W with a window W, in columns).
function plainAttention(g, m, i, q, k, v, scale) {
  const { H, HQ, D } = m, G = HQ / H;
  const heads = (x, n) => g.op("Transpose", [g.op("Reshape", [x, g.ints([0, 0, n, D])])], { perm: [0, 2, 1, 3] });
  const pk = g.input(`past_key_values.${i}.key`, F, ["batch_size", H, "past_sequence_length", D]);
  const pv = g.input(`past_key_values.${i}.value`, F, ["batch_size", H, "past_sequence_length", D]);
  const K = g.op("Concat", [pk, heads(k, H)], { axis: 2 }, [`present.${i}.key`]);
  const V = g.op("Concat", [pv, heads(v, H)], { axis: 2 }, [`present.${i}.value`]);
  g.output(K[0], F, ["batch_size", H, "total_sequence_length", D]);
  g.output(V[0], F, ["batch_size", H, "total_sequence_length", D]);
  // q [B,HQ,S,D] -> [B,H,G,S,D]; K, V [B,H,1,T,D]
  const Q = g.op("Reshape", [heads(q, HQ), g.ints([0, H, G, -1, D])]);
  const K5 = g.op("Unsqueeze", [K[0], g.ints([2])]), V5 = g.op("Unsqueeze", [V[0], g.ints([2])]);
  let s = g.op("MatMul", [Q, g.op("Transpose", [K5], { perm: [0, 1, 2, 4, 3] })]);
  s = g.op("Mul", [s, g.float(scale)]);
  s = g.op("Where", [g.mask(m.W), s, g.float(-3.4028234663852886e38)]);
  const o = g.op("MatMul", [g.op("Softmax", [s], { axis: -1 }), V5]); // [B,H,G,S,D]
  const o4 = g.op("Transpose", [g.op("Reshape", [o, g.ints([0, HQ, -1, D])])], { perm: [0, 2, 1, 3] });
  return g.op("Reshape", [o4, g.ints([0, 0, -1])]);
}

// The admitted (query, key) columns [B,1,1,S,T] for a window W (0: none).
function maskOf(g, W) {
  const key = `mask${W}`;
  if (g[key]) return g[key];
  const T = g.op("Squeeze", [g.op("Gather", [g.op("Shape", [g.attentionMask]), g.ints([1])]), g.ints([0])]);
  const S = g.op("Squeeze", [g.op("Gather", [g.op("Shape", [g.inputIds]), g.ints([1])]), g.ints([0])]);
  const zero = g.op("Squeeze", [g.ints([0]), g.ints([0])]), one = g.op("Squeeze", [g.ints([1]), g.ints([0])]);
  const cols = g.op("Range", [zero, T, one]);                            // [T]
  const qcol = g.op("Unsqueeze", [g.op("Range", [g.op("Sub", [T, S]), T, one]), g.ints([1])]); // [S,1]
  let ok = g.op("LessOrEqual", [cols, qcol]);                              // [S,T]
  if (W) ok = g.op("And", [ok, g.op("Greater", [cols, g.op("Sub", [qcol, g.ints([W])])])]);
  const real = g.op("Unsqueeze", [g.op("Equal", [g.attentionMask, g.ints([1])]), g.ints([1, 2, 3])]); // [B,1,1,1,T]
  g[key] = g.op("And", [real, ok]);
  return g[key];
}

// GroupQueryAttention (the model builder's convention).
function gqaAttention(g, m, i, q, k, v, scale) {
  const { H, HQ, D } = m;
  if (!g.seqlens) {
    const sum = g.op("ReduceSum", [g.attentionMask, g.ints([1])], { keepdims: 0 });
    g.seqlens = g.op("Cast", [g.op("Sub", [sum, g.ints([1])])], { to: I32 });
    g.total = g.op("Cast", [g.op("Squeeze", [g.op("Gather", [g.op("Shape", [g.attentionMask]), g.ints([1])]), g.ints([0])])], { to: I32 });
  }
  const pk = g.input(`past_key_values.${i}.key`, F, ["batch_size", H, "past_sequence_length", D]);
  const pv = g.input(`past_key_values.${i}.value`, F, ["batch_size", H, "past_sequence_length", D]);
  const attrs = { num_heads: HQ, kv_num_heads: H, scale: { float: scale } };
  if (m.W) attrs.local_window_size = m.W;
  const [o, K, V] = g.op("GroupQueryAttention", [q, k, v, pk, pv, g.seqlens, g.total], attrs,
    [`gqa_out.${i}`, `present.${i}.key`, `present.${i}.value`], "com.microsoft");
  g.output(K, F, ["batch_size", H, "total_sequence_length", D]);
  g.output(V, F, ["batch_size", H, "total_sequence_length", D]);
  return o;
}

// Qwen3-Next's linear_attention layer: pads masked to zero at the input (as
// transformers' apply_mask_to_padding_states), their log gate and beta zeroed
// (the recurrent state skips them); the conv runs over the columns.
function ssmLayer(g, m, i, label) {
  const s = m.spec, Hk = s.kheads, Hv = s.heads, dk = s.dk, dv = s.dv, C = m.C;
  const table = g.input(`kvspec_table.${i}`, F, ["labels", C + 2 * Hv]);
  const weight = g.input(`kvspec_conv.${i}`, F, [C, 1, s.conv]);
  const row = g.op("Gather", [table, label]); // [B,S,C+2Hv]
  const part = (a, b) => g.op("Slice", [row, g.ints([a]), g.ints([b]), g.ints([2])]);
  const S = g.op("Gather", [g.op("Shape", [g.inputIds]), g.ints([1])]);
  const newMask = g.op("Cast", [g.op("Slice", [g.attentionMask, g.op("Neg", [S]), g.ints([2147483647]), g.ints([1])])], { to: F });
  const m3 = g.op("Unsqueeze", [newMask, g.ints([2])]); // [B,S,1]
  const x = g.op("Transpose", [g.op("Mul", [part(0, C), m3])], { perm: [0, 2, 1] });
  const pc = g.input(`past_conv.${i}`, F, ["batch_size", C, s.conv - 1]);
  const u = g.op("CausalConvWithState", [x, weight, "", pc], { activation: "silu" }, [`conv_out.${i}`, `present_conv.${i}`], "com.microsoft");
  g.output(u[1], F, ["batch_size", C, s.conv - 1]);
  const U = g.op("Transpose", [u[0]], { perm: [0, 2, 1] }); // [B,S,C]
  const l2 = (a) => {
    const h = g.op("Reshape", [g.op("Slice", [U, g.ints([a]), g.ints([a + Hk * dk]), g.ints([2])]), g.ints([0, 0, Hk, dk])]);
    // the sum of squares term by term: ReduceSum's order depends on the shape,
    // and a window must give the states of its decodes bit for bit
    const sq = g.op("Mul", [h, h]);
    let sum = g.op("Slice", [sq, g.ints([0]), g.ints([1]), g.ints([3])]);
    for (let j = 1; j < dk; j++) sum = g.op("Add", [sum, g.op("Slice", [sq, g.ints([j]), g.ints([j + 1]), g.ints([3])])]);
    const n = g.op("Sqrt", [g.op("Add", [sum, g.float(1e-6)])]);
    return g.op("Reshape", [g.op("Div", [h, n]), g.ints([0, 0, Hk * dk])]);
  };
  const q = l2(0), k = l2(Hk * dk), v = g.op("Slice", [U, g.ints([2 * Hk * dk]), g.ints([C]), g.ints([2])]);
  // the table holds log(g) and beta per token (ORT's vectorised Sigmoid and
  // Softplus round differently for different lengths: a window and its
  // decodes would not give bit-identical states)
  const decay = g.op("Mul", [part(C, C + Hv), m3]);
  const beta = g.op("Mul", [part(C + Hv, C + 2 * Hv), m3]);
  const pr = g.input(`past_recurrent.${i}`, F, ["batch_size", Hv, dk, dv]);
  const [y, st] = g.op("LinearAttention", [q, k, v, pr, decay, beta], { q_num_heads: Hk, kv_num_heads: Hv, update_rule: "gated_delta" },
    [`la_out.${i}`, `present_recurrent.${i}`], "com.microsoft");
  g.output(st, F, ["batch_size", Hv, dk, dv]);
  return y;
}

// The model of a layer list in one export convention, probe width dl.
export function buildModel(specs, exportKind, dl) {
  const g = new Graph();
  g.mask = (W) => maskOf(g, W);
  g.inputIds = g.input("input_ids", I64, ["batch_size", "sequence_length"]);
  g.attentionMask = g.input("attention_mask", I64, ["batch_size", "total_sequence_length"]);
  const pos = g.input("position_ids", I64, ["batch_size", "sequence_length"]);
  const index = g.input("kvspec_index", I64, ["index_size"]);
  const stride = g.input("kvspec_stride", I64, [1]);
  const label = g.op("Gather", [index, g.op("Add", [g.op("Mul", [pos, stride]), g.inputIds])]); // [B,S]
  const layers = modelLayers(specs, dl);
  let logits = null;
  layers.forEach((m, i) => {
    let out;
    if (m.type === "ssm") out = ssmLayer(g, m, i, label);
    else {
      const [q, k, v] = m.type === "values" ? attentionInputs(g, m, i, label) : probeInputs(g, label, m.D, m.H, m.HQ);
      const scale = m.type === "values" ? 1 / Math.sqrt(m.spec.dim) : 1;
      out = (exportKind === "gqa" ? gqaAttention : plainAttention)(g, m, i, q, k, v, scale);
      if (m.type === "probe" && !logits) logits = g.op("Slice", [out, g.ints([0]), g.ints([m.D]), g.ints([2])], {}, ["logits"]);
    }
    g.op("Identity", [out], {}, [`kvspec_out.${i}`]);
    g.output(`kvspec_out.${i}`, F, ["batch_size", "sequence_length", `width_${i}`]);
  });
  g.output("logits", F, ["batch_size", "sequence_length", dl]);
  return g.bytes();
}

// config.json of the model: llama (attention only) or qwen3_next (with
// linear_attention layers), with transformers.js's cache names.
export function configOf(specs, dl) {
  const layers = modelLayers(specs, dl);
  const hybrid = layers.some((l) => l.type === "ssm");
  const first = layers.find((l) => l.type !== "ssm");
  const base = {
    vocab_size: dl, hidden_size: first.HQ * first.D, num_hidden_layers: layers.length,
    num_attention_heads: first.HQ, num_key_value_heads: first.H, head_dim: first.D,
    max_position_embeddings: 1 << 20, bos_token_id: 1, eos_token_id: 2, pad_token_id: 0,
  };
  if (!hybrid) return { ...base, model_type: "llama", architectures: ["LlamaForCausalLM"] };
  return {
    ...base, model_type: "qwen3_next", architectures: ["Qwen3NextForCausalLM"],
    layer_types: layers.map((l) => (l.type === "ssm" ? "linear_attention" : "full_attention")),
  };
}

// Writes the model folder NAME under root (once) and returns NAME.
export function writeModel(root, name, specs, exportKind, dl) {
  const dir = path.join(root, name);
  if (!fs.existsSync(path.join(dir, "onnx", "model.onnx"))) {
    fs.mkdirSync(path.join(dir, "onnx"), { recursive: true });
    fs.writeFileSync(path.join(dir, "config.json"), JSON.stringify(configOf(specs, dl)));
    fs.writeFileSync(path.join(dir, "generation_config.json"), JSON.stringify({ bos_token_id: 1, eos_token_id: 2, pad_token_id: 0 }));
    fs.writeFileSync(path.join(dir, "onnx", "model.onnx.tmp"), buildModel(specs, exportKind, dl));
    fs.renameSync(path.join(dir, "onnx", "model.onnx.tmp"), path.join(dir, "onnx", "model.onnx"));
  }
  return name;
}
