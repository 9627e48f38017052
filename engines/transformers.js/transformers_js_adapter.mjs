#!/usr/bin/env node
// kvspec adapter for transformers.js (@huggingface/transformers on
// onnxruntime-node, CPU), served by the kit (kvspec-adapter-kit,
// docs/adapter-protocol.md). Setting export= picks the attention convention
// of the generated probe models:
//   export=plain (default) MatMul/Softmax with a mask built from attention_mask
//                (optimum's exports);
//   export=gqa   com.microsoft.GroupQueryAttention with seqlens_k =
//                ReduceSum(attention_mask) - 1 (onnxruntime-genai's model builder).
// A trace with ssm layers gets a Qwen3-Next model (linear_attention layers) in
// either convention. docs/engines/transformers.js.md.
import { serve } from "kvspec-adapter-kit";
import * as ops from "./transformers_js_cache_ops.mjs";

const EXPORTS = ["plain", "gqa"];
let settings = { export: "plain" };

serve({
  name: "transformers.js",
  version: "4.3.1",
  unobserved: ["kind", "trimmable", "bytes_per_token"],
  storageTypes: ["f32"],  // the cache is fp32 tensors: a kv= type has nothing to map to
  storageWhy: "transformers.js keeps past_key_values as fp32 tensors",
  configure(given) {
    const s = { export: "plain", ...given };
    for (const k of Object.keys(s)) if (k !== "export") throw new Error(`unknown setting '${k}' (known: export=${EXPORTS.join("|")})`);
    if (!EXPORTS.includes(s.export)) throw new Error(`export=${s.export}: expected one of ${EXPORTS.join(", ")}`);
    settings = s;
    return s;
  },
  create: (rows, layers) => ops.create(rows, layers, settings),
  forward: (cache, columns, ids, positions, left, right, decode) => ops.forward(cache, { columns, ids, positions, left, right, decode }),
  trim: (cache, n, bypass) => ops.trim(cache, n, bypass),
  arm: (cache) => ops.arm(cache),
  accept: (cache, keep) => ops.accept(cache, keep),
  fork: (cache) => ops.fork(cache),
  filter: (cache, rows) => ops.filter(cache, rows),
  join: (cache, other) => ops.join(cache, other),
  extract: (cache, row) => ops.extract(cache, row),
  save: (cache) => ops.save(cache),
  load: (data) => ops.load(data),
  positions: (cache) => ops.positions(cache),
  difference: (a, b) => ops.difference(a, b),
});
