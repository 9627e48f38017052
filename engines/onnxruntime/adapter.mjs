#!/usr/bin/env node
// kvspec adapter for ONNX Runtime (onnxruntime-node, CPU), served by the kit
// (kvspec-adapter-kit, docs/adapter-protocol.md). Settings:
//   buffer=full   (default) a full-length K/V buffer per row, windows through
//                 GroupQueryAttention's local_window_size;
//   buffer=shared past and present share one preallocated buffer (the op's
//                 in-place mode, through preallocated outputs);
//   buffer=ring   sliding_window_cache=1: a ring layer's buffer holds its
//                 capacity, the op keeps it;
//   ring_rollback=length (default) a ring's rollback tells the op a shorter
//                 length (its only lever; breaks its contract), or =replay:
//                 restore the ring from before the last forward and replay
//                 the kept tokens through the op.
import { serve } from "kvspec-adapter-kit";
import * as ops from "./cache_ops.mjs";

const BUFFERS = ["full", "shared", "ring"];
let settings = { buffer: "full" };

serve({
  name: "onnxruntime",
  version: "1.30.0",
  unobserved: ["kind", "trimmable", "bytes_per_token"],
  storageTypes: ["f32"],  // the cache is fp32 tensors: a kv= type has nothing to map to
  storageWhy: "ONNX Runtime's CPU attention ops keep K/V in fp32 tensors",
  configure(given) {
    const s = { buffer: "full", ring_rollback: "length", ...given };
    for (const k of Object.keys(s)) if (!["buffer", "ring_rollback"].includes(k))
      throw new Error(`unknown setting '${k}' (known: buffer=${BUFFERS.join("|")}, ring_rollback=length|replay)`);
    if (!BUFFERS.includes(s.buffer)) throw new Error(`buffer=${s.buffer}: expected one of ${BUFFERS.join(", ")}`);
    if (!["length", "replay"].includes(s.ring_rollback)) throw new Error(`ring_rollback=${s.ring_rollback}: expected length or replay`);
    settings = s;
    return s;
  },
  create: (rows, layers) => ops.create(rows, layers, settings),
  forward: async (cache, columns, ids, positions, left, right, decode) => {
    const { seen, outs } = await ops.forward(cache, { columns, ids, positions, left, right, decode });
    const key = (k) => { const [layer, row, pos] = k.split(",").map(Number); return { layer, row, pos }; };
    return {
      seen: [...seen].map(([k, items]) => ({ ...key(k), items })),
      out: [...outs].map(([k, values]) => ({ ...key(k), values })),
    };
  },
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
