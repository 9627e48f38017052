// Unit tests of the kit's protocol handling (node --test kit/test/).
import { test } from "node:test";
import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { Session, serve, Refused, NotApplicable, PROTOCOL, stream, tokenSeed, mix } from "../index.js";

class Counter {
  name = "counter";
  version = "0.1";
  unobserved = ["kind"];
  create(rows) { return { n: new Array(rows).fill(0) }; }
  positions(c) { return c.n; }
  forward(c, columns, ids) {
    ids.forEach((g, r) => { c.n[r] += g.length; });
    return { seen: [{ layer: 0, row: 0, pos: 0, items: [[0, 0], "pad"] }], out: null };
  }
  trim(c, n) {
    if (c.n.some((x) => x < n)) throw new Refused("too short");
    c.n = c.n.map((x) => x - n);
  }
  arm(c) { return { n: [...c.n], armed: true }; }
  async fork(c) { return { n: [...c.n] }; }
  save(c) { return Buffer.from(JSON.stringify(c)); }
  load(data) { return JSON.parse(Buffer.from(data).toString()); }
  difference(a, b) { return a.n.join() === b.n.join() ? null : "differ"; }
  bytes_per_token() { throw new NotApplicable("no bytes here"); }
  trimmable() { throw new TypeError("boom"); }
}

const ask = async (s, id, method, params) => JSON.parse(await s.handle(JSON.stringify({ id, method, params })));

test("hello announces the engine and refuses settings it does not take", async () => {
  const s = new Session(new Counter());
  const a = await ask(s, 0, "hello", { protocol: PROTOCOL, settings: {} });
  assert.deepEqual(a, { id: 0, result: { protocol: 1, engine: "counter", version: "0.1", settings: {}, unobserved: ["kind"] } });
  const b = await ask(s, 0, "hello", { protocol: PROTOCOL, settings: { x: "1" } });
  assert.equal(b.error.type, "failure");
  assert.match(b.error.message, /takes no settings/);
  const c = await ask(s, 0, "hello", { protocol: 2, settings: {} });
  assert.match(c.error.message, /protocol 2/);
});

test("configure receives the settings and returns those in effect", async () => {
  const adapter = { name: "s", configure(given) { return { mode: "full", ...given }; } };
  const a = await ask(new Session(adapter), 0, "hello", { protocol: 1, settings: { mode: "ring" } });
  assert.deepEqual(a.result.settings, { mode: "ring" });
});

test("handles: created, changed in place or replaced, released", async () => {
  const s = new Session(new Counter());
  const h = (await ask(s, 1, "create", { rows: 2, layers: [] })).result.handle;
  assert.equal(typeof h, "string");
  assert.deepEqual((await ask(s, 2, "forward", { cache: h, columns: 1, ids: [[0], [0]], positions: [[0], [0]], left: [0, 0], right: [0, 0], decode: true })).result,
    { seen: [{ layer: 0, row: 0, pos: 0, items: [[0, 0], "pad"] }], out: null });
  assert.deepEqual(await ask(s, 3, "trim", { cache: h, n: 1, bypass: false }), { id: 3, result: { handle: null } });
  const armed = (await ask(s, 4, "arm", { cache: h })).result.handle;
  assert.notEqual(armed, h);
  const f = (await ask(s, 5, "fork", { cache: h })).result.handle;
  assert.notEqual(f, h);
  assert.deepEqual((await ask(s, 6, "difference", { a: h, b: f })).result, { difference: null });
  assert.deepEqual((await ask(s, 7, "positions", { cache: f })).result, { positions: [0, 0] });
  assert.deepEqual((await ask(s, 8, "release", { handles: [f] })).result, {});
  assert.equal(s.handles.has(f), false);
  assert.equal((await ask(s, 9, "positions", { cache: f })).error.type, "failure");
});

test("errors map to refused, not_applicable and failure", async () => {
  const s = new Session(new Counter());
  const h = (await ask(s, 1, "create", { rows: 1, layers: [] })).result.handle;
  assert.deepEqual((await ask(s, 2, "trim", { cache: h, n: 5, bypass: false })).error, { type: "refused", message: "too short" });
  assert.deepEqual((await ask(s, 3, "bytes_per_token", { cache: h, layer: 0 })).error, { type: "not_applicable", message: "no bytes here" });
  const orig = process.stderr.write;
  process.stderr.write = () => true;  // the kit logs the stack there
  try {
    assert.deepEqual((await ask(s, 4, "trimmable", { cache: h, layer: 0 })).error, { type: "failure", message: "TypeError: boom" });
    assert.equal((await ask(s, 5, "frobnicate", {})).error.type, "failure");
    const bad = JSON.parse(await s.handle("{not json"));
    assert.equal(bad.id, null);
    assert.equal(bad.error.type, "failure");
  } finally {
    process.stderr.write = orig;
  }
  assert.deepEqual((await ask(s, 6, "extract", { cache: h, row: 0 })).error,
    { type: "not_applicable", message: "counter: extract is not implemented" });
});

test("save and load travel as base64; reload defaults to save then load", async () => {
  const s = new Session(new Counter());
  const h = (await ask(s, 1, "create", { rows: 1, layers: [] })).result.handle;
  const data = (await ask(s, 2, "save", { cache: h })).result.data;
  assert.deepEqual(JSON.parse(Buffer.from(data, "base64").toString()), { n: [0] });
  const l = (await ask(s, 3, "load", { data, like: h })).result.handle;
  const r = (await ask(s, 4, "reload", { cache: h })).result.handle;
  assert.deepEqual(new Set([h, l, r]).size, 3);
  assert.deepEqual((await ask(s, 5, "positions", { cache: r })).result, { positions: [0] });
});

test("serve answers line by line and stops at shutdown", async () => {
  const input = new PassThrough();
  const output = new PassThrough();
  let text = "";
  output.on("data", (d) => { text += d; });
  const done = serve(new Counter(), { input, output });
  input.write('{"id":0,"method":"hello","params":{"protocol":1,"settings":{}}}\n');
  input.write('{"id":1,"method":"create","params":{"rows":1,"layers":[]}}\n\n');
  input.write('{"id":2,"method":"shutdown","params":{}}\n');
  await done;
  const answers = text.trim().split("\n").map((l) => JSON.parse(l));
  assert.deepEqual(answers.map((a) => a.id), [0, 1, 2]);
  assert.deepEqual(answers[2], { id: 2, result: {} });
});

test("values: TRACE.md's generator", () => {
  // mix(0) of splitmix64 is 0; the first draws stay in [-1, 1)
  assert.equal(mix(0n), 0n);
  const d = stream(tokenSeed(0, 1, 2), 64);
  assert.ok(d.every((x) => x >= -1 && x < 1));
  assert.equal(d.length, 64);
});

test("storageTypes: a layer of another storage type is not applicable, with storageWhy", async () => {
  let created = 0;
  const adapter = { name: "f", storageTypes: ["f32"], storageWhy: "fp32 tensors only",
                    create() { created += 1; return {}; } };
  const s = new Session(adapter);
  const layer = (name, kind, kv) => ({ name, kind, kv, dim: 32, heads: 1 });
  const a = await ask(s, 1, "create", { rows: 1, layers: [layer("a", "kv", "f32"), layer("b", "rotating", "q8_0")] });
  assert.deepEqual(a.error, { type: "not_applicable", message: "layer 'b' stores kv=q8_0: fp32 tensors only" });
  const b = await ask(s, 2, "create", { rows: 1, layers: [layer("a", "kv", "f32"), layer("s", "ssm", "f32")] });
  assert.equal(typeof b.result.handle, "string");
  assert.equal(created, 1);
  // Without storageTypes every type reaches create.
  const c = await ask(new Session({ name: "any", create() { return {}; } }), 3, "create",
                      { rows: 1, layers: [layer("b", "kv", "q4_0")] });
  assert.equal(typeof c.result.handle, "string");
});
