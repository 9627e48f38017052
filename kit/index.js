// kvspec-adapter-kit: serves kvspec's adapter protocol (docs/adapter-protocol.md)
// over stdin/stdout for an engine written in JavaScript or TypeScript.
import { createInterface } from "node:readline";

export { mix, tokenSeed, weightSeed, stream, attentionToken, attend, recurrentToken, convWeights,
  stored, rowBytes } from "./values.js";

/** The protocol version this kit speaks. */
export const PROTOCOL = 1;

/** The cache refuses the operation; the layout must be unchanged. */
export class Refused extends Error {
  constructor(message) {
    super(message);
    this.name = "Refused";
  }
}

/** The engine cannot express this statement; the message is the reason. */
export class NotApplicable extends Error {
  constructor(reason) {
    super(reason);
    this.name = "NotApplicable";
  }
}

// Methods whose result is the layout they changed (null: changed in place).
const MUTATING = {
  trim: ["n", "bypass"],
  arm: [],
  accept: ["keep"],
  filter: ["rows"],
  join: ["other"],
};
// Methods whose result is a new layout.
const CREATING = { fork: [], extract: ["row"], reload: [] };
// Methods whose result is one named value.
const OBSERVING = {
  positions: [],
  trimmable: ["layer"],
  kind: ["layer"],
  bytes_per_token: ["layer"],
};

const toBase64 = (bytes) => {
  if (!(bytes instanceof Uint8Array)) {
    throw new TypeError("save must return a Uint8Array (or a Buffer)");
  }
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");
};

/**
 * The protocol's state for one adapter: the handle table and the dispatch of
 * requests. `serve` feeds it lines; tests may call `handle` directly.
 */
export class Session {
  constructor(adapter) {
    this.adapter = adapter;
    this.handles = new Map(); // handle string -> the author's layout object
    this.next = 1;
    this.done = false;
  }

  put(layout) {
    if (layout === undefined || layout === null) {
      throw new Error("a method that makes a layout returned nothing");
    }
    const h = "h" + this.next++;
    this.handles.set(h, layout);
    return h;
  }

  get(h) {
    if (!this.handles.has(h)) throw new Error("unknown handle " + JSON.stringify(h));
    return this.handles.get(h);
  }

  // A layer whose storage type (kv=) the adapter does not list in
  // `storageTypes` makes the trace not applicable, with `storageWhy`.
  checkStorage(layers) {
    const types = this.adapter.storageTypes;
    if (!types) return;
    const only = Array.from(types);
    const typed = layers.find((l) => l.kind !== "ssm" && !only.includes(l.kv ?? "f32"));
    if (typed) {
      const why = this.adapter.storageWhy ?? `it stores only ${only.join(", ")}`;
      throw new NotApplicable(`layer '${typed.name}' stores kv=${typed.kv}: ${why}`);
    }
  }

  call(method, ...args) {
    const fn = this.adapter[method];
    if (typeof fn !== "function") {
      throw new NotApplicable(`${this.adapter.name ?? "adapter"}: ${method} is not implemented`);
    }
    return fn.apply(this.adapter, args);
  }

  /** One request object in, its result object out (throws on errors). */
  async dispatch(method, params) {
    const p = params ?? {};
    if (method === "hello") return this.hello(p);
    if (method === "shutdown") {
      this.done = true;
      return {};
    }
    if (method === "release") {
      for (const h of p.handles ?? []) this.handles.delete(h);
      return {};
    }
    if (method === "create") {
      this.checkStorage(p.layers ?? []);
      return { handle: this.put(await this.call("create", p.rows, p.layers)) };
    }
    if (method === "forward") {
      const r = await this.call("forward", this.get(p.cache), p.columns, p.ids, p.positions,
        p.left, p.right, p.decode);
      return forwardResult(r);
    }
    if (method in MUTATING) {
      const cache = this.get(p.cache);
      const args = MUTATING[method].map((k) => (k === "other" ? this.get(p.other) : p[k]));
      const r = await this.call(method, cache, ...args);
      if (r === undefined || r === null || r === cache) return { handle: null };
      return { handle: this.put(r) };
    }
    if (method in CREATING) {
      const cache = this.get(p.cache);
      const args = CREATING[method].map((k) => p[k]);
      if (method === "reload" && typeof this.adapter.reload !== "function") {
        const data = await this.call("save", cache);
        return { handle: this.put(await this.call("load", data, cache)) };
      }
      return { handle: this.put(await this.call(method, cache, ...args)) };
    }
    if (method === "save") return { data: toBase64(await this.call("save", this.get(p.cache))) };
    if (method === "load") {
      const data = Buffer.from(String(p.data), "base64");
      return { handle: this.put(await this.call("load", data, this.get(p.like))) };
    }
    if (method in OBSERVING) {
      const args = OBSERVING[method].map((k) => p[k]);
      let v = await this.call(method, this.get(p.cache), ...args);
      if (method === "positions") v = Array.from(v, Number);
      if (method === "trimmable") v = Boolean(v);
      if (method === "bytes_per_token") v = Number(v);
      return { [method]: v };
    }
    if (method === "difference") {
      const d = await this.call("difference", this.get(p.a), this.get(p.b));
      return { difference: d === undefined || d === null || d === "" ? null : String(d) };
    }
    throw new Error("unknown method " + JSON.stringify(method));
  }

  async hello(p) {
    if (p.protocol !== PROTOCOL) {
      throw new Error(`protocol ${p.protocol} is not spoken by kvspec-adapter-kit (it speaks ${PROTOCOL})`);
    }
    const given = p.settings ?? {};
    let settings = {};
    if (typeof this.adapter.configure === "function") {
      settings = (await this.adapter.configure({ ...given })) ?? { ...given };
    } else if (Object.keys(given).length) {
      throw new Error(`${this.adapter.name ?? "adapter"} takes no settings (got ${Object.keys(given).join(", ")})`);
    }
    const result = {
      protocol: PROTOCOL,
      engine: String(this.adapter.name ?? "adapter"),
      version: String(this.adapter.version ?? ""),
      settings,
    };
    if (this.adapter.unobserved) result.unobserved = Array.from(this.adapter.unobserved);
    return result;
  }

  /** One request line in, one answer line out (without the newline). */
  async handle(line) {
    let id = null;
    try {
      const req = JSON.parse(line);
      id = req.id ?? null;
      const result = await this.dispatch(req.method, req.params);
      return JSON.stringify({ id, result });
    } catch (e) {
      return JSON.stringify({ id, error: errorOf(e) });
    }
  }
}

function errorOf(e) {
  if (e instanceof Refused) return { type: "refused", message: e.message || "refused" };
  if (e instanceof NotApplicable) return { type: "not_applicable", message: e.message };
  // keep the stack for the author, on stderr; the runner quotes its last lines
  process.stderr.write(`kvspec-adapter-kit: ${e && e.stack ? e.stack : e}\n`);
  const name = e && e.name && e.name !== "Error" ? e.name + ": " : "";
  return { type: "failure", message: name + (e && e.message !== undefined ? e.message : String(e)) };
}

function forwardResult(r) {
  if (!r || !Array.isArray(r.seen)) throw new Error("forward must return {seen: [...], out}");
  const seen = r.seen.map((s) => ({
    layer: s.layer, row: s.row, pos: s.pos,
    items: Array.from(s.items, (i) => (typeof i === "string" ? i : [Number(i[0]), Number(i[1])])),
  }));
  const out = r.out === undefined || r.out === null ? null : r.out.map((o) => ({
    layer: o.layer, row: o.row, pos: o.pos, values: Array.from(o.values, Number),
  }));
  return { seen, out };
}

/**
 * Serves the protocol for `adapter` until `shutdown` or the end of input.
 * Defaults to this process's stdin and stdout; then console.log and its kin
 * are sent to stderr (stdout carries answers only) and the process exits 0
 * after `shutdown`.
 */
export async function serve(adapter, options = {}) {
  const input = options.input ?? process.stdin;
  const output = options.output ?? process.stdout;
  const own = output === process.stdout;
  if (own) {
    for (const k of ["log", "info", "debug", "dir", "table"]) {
      console[k] = (...a) => console.error(...a);
    }
  }
  const session = new Session(adapter);
  const lines = createInterface({ input, crlfDelay: Infinity, terminal: false });
  for await (const line of lines) {
    if (!line.trim()) continue;
    const answer = await session.handle(line);
    await new Promise((resolve) => output.write(answer + "\n", resolve));
    if (session.done) break;
  }
  lines.close();
  if (own && (options.exit ?? true)) process.exit(0);
  return session;
}
