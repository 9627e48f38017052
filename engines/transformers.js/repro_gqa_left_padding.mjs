// transformers.js 4.3.1 (onnxruntime-node 1.30.0, CPU): a left-padded row of
// a batch, on a model whose attention is com.microsoft.GroupQueryAttention
// with seqlens_k = ReduceSum(attention_mask) - 1 (onnxruntime-genai's model
// builder convention), attends to its pad instead of its own last prompt
// token, at prefill and at every decode after it. The same model written with
// plain MatMul/Softmax attention (optimum's convention) is right.
//
// One attention layer, 1 head: Q = K = 0 and V one-hot per token, so the
// output of a query is the mean of the tokens it attended to (the model's
// logits are that output). Row 0: prompt [3 4 5]; row 1: prompt [6 7],
// left-padded to [pad 6 7] with the mask [0 1 1], as the text-generation
// pipeline pads. Driven by generate()'s own step functions and by generate().
// Run: node engines/transformers.js/repro_gqa_left_padding.mjs -- exits 1 when the bug shows.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { AutoModelForCausalLM, env, Tensor, LogitsProcessor } from "@huggingface/transformers";
import { writeModel } from "./transformers_js_models.mjs";

const root = fs.mkdtempSync(path.join(os.tmpdir(), "tjs-repro-"));
env.allowRemoteModels = false;
env.localModelPath = root + path.sep;
const V = 16; // tokens 0..15, token 0 is the pad; the probe width (vocab) is 16
const specs = [{ name: "a", kind: "kv", heads: 1, qheads: 1, dim: 4, window: 0 }];
// the model's token table: label = token, whatever the position
const index = new BigInt64Array(64 * V);
for (let p = 0; p < 64; p++) for (let t = 0; t < V; t++) index[p * V + t] = BigInt(t);
const extra = {
  kvspec_index: new Tensor("int64", index, [64 * V]),
  kvspec_stride: new Tensor("int64", [BigInt(V)], [1]),
  "kvspec_table.0": new Tensor("float32", new Float32Array(V * 24), [V, 24]),
};
const seen = (o) => Array.from(o).map((w, l) => (w > 1e-6 ? (l === 1 ? "pad" : String(l - 1)) : null)).filter(Boolean).join(" ");
const input_ids = new Tensor("int64", [3n, 4n, 5n, 0n, 6n, 7n], [2, 3]);
const attention_mask = new Tensor("int64", [1n, 1n, 1n, 0n, 1n, 1n], [2, 3]);

let bug = false;
for (const exp of ["plain", "gqa"]) {
  const name = writeModel(root, exp, specs, exp, V);
  const model = await AutoModelForCausalLM.from_pretrained(name, { dtype: "fp32", local_files_only: true });
  // generate()'s steps: prepare_inputs_for_generation, forward, _update_model_kwargs_for_generation
  let inputs = { input_ids, attention_mask, ...extra };
  const all = input_ids.tolist();
  const lines = [];
  for (const next of [[8n], [9n]].map((g) => [g, [g[0] + 2n]])) {
    inputs = model.prepare_inputs_for_generation(all, inputs, model.generation_config);
    const out = await model.forward(inputs);
    const S = out.logits.dims[1];
    lines.push(`row 1 last query sees: ${seen(out.logits.data.subarray((1 * S + S - 1) * V, (1 * S + S) * V))}`);
    next.forEach((g, r) => all[r].push(g[0]));
    inputs = model._update_model_kwargs_for_generation({ generated_input_ids: next, outputs: out, model_inputs: inputs, is_encoder_decoder: false });
  }
  // generate() itself (it passes on the inputs named in forward_params): a
  // logits processor records what row 1's last query saw at each step
  model.forward_params.push(...Object.keys(extra));
  const steps = [];
  class Record extends LogitsProcessor { _call(ids, logits) { steps.push(seen(logits[1].data)); return logits; } }
  await model.generate({ input_ids, attention_mask, ...extra, max_new_tokens: 2, do_sample: false, logits_processor: [new Record()] });
  console.log(`export=${exp}: prefill, then decode (step functions): ${lines.map((l) => l.split(": ")[1]).join(" | ")}; generate(): ${steps.join(" | ")}`);
  if (exp === "gqa" && !/^6 7$/.test(lines[0].split(": ")[1])) bug = true;
}
console.log("expected: prefill 6 7 | decode 6 7 10 (the pad never seen)");
console.log(bug ? "BUG: with GroupQueryAttention the left-padded row attends to its pad" : "ok");
fs.rmSync(root, { recursive: true, force: true });
process.exit(bug ? 1 : 0);
