#!/usr/bin/env node
// kvspec adapter for ONNX Runtime (onnxruntime-node, CPU), served by the kit
// (kvspec-adapter-kit, docs/adapter-protocol.md). Settings:
//   buffer=full   (default) a full-length K/V buffer per row, windows through
//                 GroupQueryAttention's local_window_size;
//   buffer=shared past and present share one preallocated buffer (the op's
//                 in-place mode, through preallocated outputs);
//   buffer=ring   sliding_window_cache=1: a ring layer's buffer holds its
//                 capacity, the op keeps it.
import { serve, Refused, NotApplicable } from "kvspec-adapter-kit";
import * as ops from "./cache_ops.mjs";
import { Refused as EngineRefused, NotApplicable as EngineNotApplicable } from "./engine.mjs";

const BUFFERS = ["full", "shared", "ring"];

// The engine modules throw their own classes; the kit knows its own.
function wrap(fn) {
  return async (...args) => {
    try {
      return await fn(...args);
    } catch (e) {
      if (e instanceof EngineRefused) throw new Refused(e.message);
      if (e instanceof EngineNotApplicable) throw new NotApplicable(e.message);
      throw e;
    }
  };
}

let settings = { buffer: "full" };

serve({
  name: "onnxruntime",
  version: "1.30.0",
  unobserved: ["kind", "trimmable", "bytes_per_token"],
  configure(given) {
    const s = { buffer: "full", ...given };
    for (const k of Object.keys(s)) if (k !== "buffer") throw new Error(`unknown setting '${k}' (known: buffer=${BUFFERS.join("|")})`);
    if (!BUFFERS.includes(s.buffer)) throw new Error(`buffer=${s.buffer}: expected one of ${BUFFERS.join(", ")}`);
    settings = s;
    return s;
  },
  create: wrap((rows, layers) => ops.create(rows, layers, settings)),
  forward: wrap(async (cache, columns, ids, positions, left, right, decode) => {
    const { seen, outs } = await ops.forward(cache, { columns, ids, positions, left, right, decode });
    const key = (k) => { const [layer, row, pos] = k.split(",").map(Number); return { layer, row, pos }; };
    return {
      seen: [...seen].map(([k, items]) => ({ ...key(k), items })),
      out: [...outs].map(([k, values]) => ({ ...key(k), values })),
    };
  }),
  trim: wrap((cache, n, bypass) => ops.trim(cache, n, bypass)),
  arm: wrap((cache) => ops.arm(cache)),
  accept: wrap((cache, keep) => ops.accept(cache, keep)),
  fork: wrap((cache) => ops.fork(cache)),
  filter: wrap((cache, rows) => ops.filter(cache, rows)),
  join: wrap((cache, other) => ops.join(cache, other)),
  extract: wrap((cache, row) => ops.extract(cache, row)),
  save: wrap((cache) => ops.save(cache)),
  load: wrap((data) => ops.load(data)),
  positions: (cache) => ops.positions(cache),
  difference: (a, b) => ops.difference(a, b),
});
