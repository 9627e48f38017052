#!/usr/bin/env node
// kvspec adapter for ONNX Runtime (onnxruntime-node, CPU), speaking the
// adapter protocol (docs/adapter-protocol.md) on stdin/stdout: JSON lines,
// one request per Adapter method, one answer each.
// Settings: buffer=full (default; a full-length K/V buffer, windows through
// local_window_size), buffer=shared (past and present share one preallocated
// buffer), buffer=ring (sliding_window_cache=1, a buffer of the ring's capacity).
import readline from "node:readline";
import * as ops from "./cache_ops.mjs";
import { Refused, NotApplicable } from "./engine.mjs";

const VERSION = "1.30.0";
const BUFFERS = ["full", "shared", "ring"];
let settings = { buffer: "full" };
const caches = new Map();
let nextHandle = 0;
const put = (c) => { const h = "c" + nextHandle++; caches.set(h, c); return h; };
const get = (h) => {
  const c = caches.get(h);
  if (!c) throw new Error(`unknown cache handle ${JSON.stringify(h)}`);
  return c;
};

const methods = {
  hello(p) {
    if (p.protocol !== 1) throw new Error(`protocol ${p.protocol} is not supported (this adapter speaks 1)`);
    const s = { buffer: "full", ...(p.settings || {}) };
    for (const k of Object.keys(s)) if (k !== "buffer") throw new Error(`unknown setting '${k}' (known: buffer)`);
    if (!BUFFERS.includes(s.buffer)) throw new Error(`buffer=${s.buffer}: expected one of ${BUFFERS.join(", ")}`);
    settings = s;
    return { protocol: 1, engine: "onnxruntime", version: VERSION, settings: s, unobserved: ["kind", "trimmable", "bytes_per_token"] };
  },
  create: (p) => ({ cache: put(ops.create(p.rows, p.layers, settings)) }),
  async forward(p) {
    const { seen, outs } = await ops.forward(get(p.cache), p);
    const key = (k) => k.split(",").map(Number);
    return {
      seen: [...seen].map(([k, items]) => [...key(k), items]),
      out: [...outs].map(([k, v]) => [...key(k), v]),
    };
  },
  trim: (p) => (ops.trim(get(p.cache), p.n, p.bypass), {}),
  arm: (p) => (ops.arm(get(p.cache)), {}),
  accept: async (p) => (await ops.accept(get(p.cache), p.keep), {}),
  fork: (p) => ({ cache: put(ops.fork(get(p.cache))) }),
  filter: (p) => (ops.filter(get(p.cache), p.rows), {}),
  join: (p) => (ops.join(get(p.cache), get(p.other)), {}),
  extract: (p) => ({ cache: put(ops.extract(get(p.cache), p.row)) }),
  save: (p) => ({ data: Buffer.from(ops.save(get(p.cache))).toString("base64") }),
  load: (p) => ({ cache: put(ops.load(Buffer.from(p.data, "base64"))) }),
  reload: (p) => ({ cache: put(ops.load(ops.save(get(p.cache)))) }),
  positions: (p) => ({ positions: ops.positions(get(p.cache)) }),
  trimmable() { throw new NotApplicable("ONNX Runtime has no trimmability query"); },
  kind() { throw new NotApplicable("ONNX Runtime has no cache kinds in kvspec's sense"); },
  bytes_per_token() { throw new NotApplicable("ONNX Runtime has no per-token cache size query"); },
  difference: (p) => ({ difference: ops.difference(get(p.a), get(p.b)) }),
  release: (p) => (caches.delete(p.cache), {}),
};

function errorOf(e) {
  if (e instanceof Refused) return { type: "refused", message: e.message };
  if (e instanceof NotApplicable) return { type: "not_applicable", message: e.message };
  return { type: "failure", message: e && e.stack ? e.stack : String(e) };
}

const rl = readline.createInterface({ input: process.stdin, terminal: false });
let chain = Promise.resolve();
rl.on("line", (line) => {
  chain = chain.then(async () => {
    if (!line.trim()) return;
    let req;
    try { req = JSON.parse(line); } catch (e) {
      process.stdout.write(JSON.stringify({ id: null, error: { type: "failure", message: "malformed request: " + e.message } }) + "\n");
      return;
    }
    if (req.method === "shutdown") {
      process.stdout.write(JSON.stringify({ id: req.id, result: {} }) + "\n");
      process.exit(0);
    }
    const m = methods[req.method];
    let answer;
    try {
      if (!m) throw new Error(`unknown method ${req.method}`);
      answer = { id: req.id, result: await m(req.params || {}) };
    } catch (e) {
      answer = { id: req.id, error: errorOf(e) };
    }
    process.stdout.write(JSON.stringify(answer) + "\n");
  });
});
rl.on("close", () => chain.then(() => process.exit(0)));
