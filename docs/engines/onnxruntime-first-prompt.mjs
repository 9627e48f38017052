// GroupQueryAttention (CPU, onnxruntime-node 1.30.0): with several rows, a call
// whose total_sequence_length equals the new sequence length is taken as a
// first prompt, and a row that already holds a past loses it silently.
//
// Row 0 is empty and gets 3 new tokens; row 1 holds 1 token (label 9) and gets
// 2 new ones (right padding in the third column). seqlens_k = [2, 2] (each row's
// total - 1), total_sequence_length = 3 = max total, as the op's docs define them.
// Probe: Q = K = 0 and a one-hot V per token label, so each query's output is the
// mean of the labels it attended to. Row 1's first new token must see {9, 11};
// it sees {11} alone, and present_key/value of row 1 no longer hold label 9.
// Run: node docs/engines/onnxruntime-first-prompt.mjs (from a folder where
// onnxruntime-node resolves, e.g. engines/onnxruntime) -- exits 1 when the bug shows.
import { createRequire } from "node:module";
import { gqaModel } from "../../engines/onnxruntime/models.mjs";

const ort = createRequire(process.cwd() + "/")("onnxruntime-node");

const D = 16, H = 1, B = 2, S = 3;
const session = await ort.InferenceSession.create(gqaModel({ qheads: 1, heads: 1 }));
const past = new Float32Array(B * H * 1 * D);
past[1 * H * 1 * D + 9] = 1; // row 1, slot 0: label 9 (past_value); past_key stays 0
const v = new Float32Array(B * S * D);
[[0, 0, 1], [0, 1, 2], [0, 2, 3], [1, 0, 11], [1, 1, 12]].forEach(([b, t, l]) => { v[(b * S + t) * D + l] = 1; });
const f32 = (d, dims) => new ort.Tensor("float32", d, dims);
const r = await session.run({
  query: f32(new Float32Array(B * S * D), [B, S, D]), key: f32(new Float32Array(B * S * D), [B, S, D]),
  value: f32(v, [B, S, D]),
  past_key: f32(new Float32Array(B * H * D), [B, H, 1, D]), past_value: f32(past, [B, H, 1, D]),
  seqlens_k: new ort.Tensor("int32", Int32Array.from([2, 2]), [B]),
  total_sequence_length: new ort.Tensor("int32", Int32Array.from([3]), [1]),
});
const labels = (o) => Array.from(o).map((w, l) => (w > 1e-6 ? `${l}:${w.toFixed(2)}` : null)).filter(Boolean).join(" ");
const row1first = r.output.data.subarray((1 * S + 0) * D, (1 * S + 1) * D);
console.log("row 1, first new token attended to:", labels(row1first), "(expected 9:0.50 11:0.50)");
const present = r.present_value.data, T = r.present_value.dims[2];
const slots = [];
for (let s = 0; s < T; s++) slots.push(labels(present.subarray((1 * H * T + s) * D, (1 * H * T + s + 1) * D)) || "-");
console.log("row 1 present_value slots:", slots.join(" | "), "(expected 9 | 11 | 12)");
const ok = row1first[9] > 0.4;
console.log(ok ? "ok: the past was kept" : "BUG: row 1's past was dropped without an error");
process.exit(ok ? 0 : 1);
