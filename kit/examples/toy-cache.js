// A small cache engine in plain JavaScript, the way an engine author would
// write one from kvspec's DESIGN.md and TRACE.md (the logic of
// python/kvspec/adapters/numpy_cache.py): plain KV layers, sliding-window
// rings with capacity >= window, batches with left and right padding,
// speculative rounds, fork/filter/join/extract and persistence, and
// recurrent (ssm) layers: a causal conv and a gated-DeltaNet state per row,
// snapshot at `arm`, restored and replayed on a partial accept.
//
// Storage, per attention layer and row: columns in logical order, pads
// included -- the token's position (-1: pad or dropped), its id, k and v.
// Before each forward a ring drops its oldest columns beyond its capacity,
// but never one that a later query can still see. Attention reads only what
// is stored: the query at position p admits the stored tokens of its row at
// positions p - window + 1 .. p.
import { Refused, attentionToken, attend, recurrentToken, convWeights, stored, rowBytes }
  from "../index.js";

const MAX_TOKENS_PER_ROW = 1000000;

// A recurrent layer: per row the conv state (the last conv - 1 inputs) and
// the recurrent state S (per value head, dv x dk).
function newSsmLayer(index, spec, rows) {
  const channels = 2 * spec.kheads * spec.dk + spec.heads * spec.dv;
  const layer = { index, name: spec.name, ssm: true, ring: false, heads: spec.heads,
    kheads: spec.kheads, dk: spec.dk, dv: spec.dv, conv: spec.conv, channels,
    w: Array.from(convWeights(index, channels, spec.conv)), st: [] };
  layer.st = Array.from({ length: rows }, () => freshState(layer));
  return layer;
}

function freshState(l) {
  return { hist: Array.from({ length: l.conv - 1 }, () => new Array(l.channels).fill(0)),
    S: new Array(l.heads * l.dv * l.dk).fill(0) };
}

const sigmoid = (z) => 1 / (1 + Math.exp(-z));

// One token through a row's state (TRACE.md "Values", recurrent layers);
// returns its y (all value heads).
function ssmStep(l, state, id, pos) {
  const { x, a, b } = recurrentToken(l.index, id, pos, l.heads, l.kheads, l.dk, l.dv);
  const xs = state.hist.concat([Array.from(x)]);
  const u = new Array(l.channels);
  for (let c = 0; c < l.channels; c++) {
    let z = 0;
    for (let j = 0; j < l.conv; j++) z += l.w[c * l.conv + j] * xs[j][c];
    u[c] = z / (1 + Math.exp(-z));
  }
  state.hist = xs.slice(1);
  const l2 = (v) => {
    const n = Math.sqrt(v.reduce((s, t) => s + t * t, 0) + 1e-6);
    return v.map((t) => t / n);
  };
  const kd = l.kheads * l.dk;
  const y = [];
  for (let h = 0; h < l.heads; h++) {
    const kh = Math.floor(h / (l.heads / l.kheads));
    const q = l2(u.slice(kh * l.dk, (kh + 1) * l.dk)).map((t) => t / Math.sqrt(l.dk));
    const k = l2(u.slice(kd + kh * l.dk, kd + (kh + 1) * l.dk));
    const v = u.slice(2 * kd + h * l.dv, 2 * kd + (h + 1) * l.dv);
    const g = sigmoid(2 + a[h]);
    const beta = sigmoid(b[h]);
    const S = state.S;
    const o = h * l.dv * l.dk;
    for (let i = 0; i < l.dv * l.dk; i++) S[o + i] *= g;
    for (let i = 0; i < l.dv; i++) {
      let m = 0;
      for (let j = 0; j < l.dk; j++) m += S[o + i * l.dk + j] * k[j];
      for (let j = 0; j < l.dk; j++) S[o + i * l.dk + j] += beta * (v[i] - m) * k[j];
    }
    for (let i = 0; i < l.dv; i++) {
      let s = 0;
      for (let j = 0; j < l.dk; j++) s += S[o + i * l.dk + j] * q[j];
      y.push(s);
    }
  }
  return y;
}

function newLayer(index, spec, rows) {
  if (spec.kind === "ssm") return newSsmLayer(index, spec, rows);
  const ring = spec.kind === "rotating";
  return {
    index, name: spec.name, ring, window: spec.window,
    capacity: ring ? spec.capacity || spec.window : 0,
    heads: spec.heads, qheads: spec.qheads || spec.heads, dim: spec.dim,
    kv: spec.kv || "f32",  // keys and values are kept as they read back once stored
    // per row: columns of {pos, id, k, v}
    pos: Array.from({ length: rows }, () => []),
    ids: Array.from({ length: rows }, () => []),
    k: Array.from({ length: rows }, () => []),
    v: Array.from({ length: rows }, () => []),
  };
}

const width = (layer) => (layer.pos.length ? layer.pos[0].length : 0);
const realSlots = (layer, row) => layer.pos[row].flatMap((p, s) => (p >= 0 ? [s] : []));

function keepColumns(layer, from, to) {
  for (const a of [layer.pos, layer.ids, layer.k, layer.v]) {
    for (let r = 0; r < a.length; r++) a[r] = a[r].slice(from, to);
  }
}

function padFront(layer, n) {
  if (n <= 0) return;
  const hd = layer.heads * layer.dim;
  for (let r = 0; r < layer.pos.length; r++) {
    layer.pos[r].unshift(...new Array(n).fill(-1));
    layer.ids[r].unshift(...new Array(n).fill(-1));
    layer.k[r].unshift(...Array.from({ length: n }, () => new Array(hd).fill(0)));
    layer.v[r].unshift(...Array.from({ length: n }, () => new Array(hd).fill(0)));
  }
}

function dropLastReal(layer, row, n) {
  if (n <= 0) return;
  const real = realSlots(layer, row);
  for (const s of real.slice(real.length - n)) layer.pos[row][s] = -1;
}

// A ring drops its oldest columns beyond its capacity, but keeps all of a
// row's real tokens while it holds at most the capacity, else its last
// window - 1. Called before a forward, so that a bypass trim may still
// bring back what the last forward pushed out.
export function evict(layer) {
  if (!layer.ring) return;
  let drop = width(layer) - layer.capacity;
  for (let r = 0; r < layer.pos.length; r++) {
    const real = realSlots(layer, r);
    if (real.length === 0) continue;
    if (real.length <= layer.capacity) drop = Math.min(drop, real[0]);
    else if (layer.window > 1) drop = Math.min(drop, real[real.length - (layer.window - 1)]);
  }
  if (drop > 0) keepColumns(layer, drop, width(layer));
}

function newCache(rows, specs) {
  return {
    rows, specs, batched: rows > 1,
    layers: specs.map((s, i) => newLayer(i, s, rows)),
    next: new Array(rows).fill(0),
    columns: 0, peak: 0, armed: false, verified: false, verifyReal: null,
    peakBeforeVerify: 0, peakBeforeForward: 0,
    bypassBound: null, // real counts of the last change, when it was a window
  };
}

const wrapped = (c, layer) => layer.ring && c.peak > layer.capacity;
const shape = (s) => [s.kind, s.kv, s.heads, s.qheads, s.dim, s.window, s.capacity, s.kheads,
  s.dk, s.dv, s.conv].join();
const attention = (c) => c.layers.filter((l) => !l.ssm);
const hasSsm = (c) => c.layers.some((l) => l.ssm);

export class ToyAdapter {
  name = "toy";
  version = "1.0.0";

  create(rows, layers) {
    return newCache(rows, layers);
  }

  forward(c, columns, ids, positions, left, right, decode) {
    if (c.armed && c.verified) throw new Refused("a second forward while a round is armed");
    for (let r = 0; r < c.rows; r++) {
      if (left[r] && c.next[r]) throw new Refused(`row ${r}: left padding on a row that holds tokens`);
      if (c.next[r] + ids[r].length > MAX_TOKENS_PER_ROW) throw new Refused(`row ${r}: too many tokens`);
    }
    const seen = [];
    const out = [];
    for (const layer of c.layers) {
      if (layer.ssm) {
        for (let r = 0; r < c.rows; r++) {
          positions[r].forEach((p, j) => {
            out.push({ layer: layer.index, row: r, pos: p, values: ssmStep(layer, layer.st[r], ids[r][j], p) });
          });
        }
        continue;
      }
      evict(layer);
      const hd = layer.heads * layer.dim;
      const queries = [];
      const base = width(layer);
      for (let r = 0; r < c.rows; r++) {
        for (let j = 0; j < columns; j++) {
          layer.pos[r].push(-1);
          layer.ids[r].push(-1);
          layer.k[r].push(new Array(hd).fill(0));
          layer.v[r].push(new Array(hd).fill(0));
        }
        positions[r].forEach((p, j) => {
          const col = base + left[r] + j;
          const t = attentionToken(layer.index, ids[r][j], p, layer.heads, layer.qheads, layer.dim);
          layer.pos[r][col] = p;
          layer.ids[r][col] = ids[r][j];
          layer.k[r][col] = Array.from(stored(layer.kv, t.k, layer.dim));
          layer.v[r][col] = Array.from(stored(layer.kv, t.v, layer.dim));
          queries.push([r, p, t.q]);
        });
      }
      for (const [r, p, q] of queries) {
        const lo = layer.window ? Math.max(0, p - layer.window + 1) : 0;
        const admitted = layer.pos[r].flatMap((x, s) => (x >= lo && x <= p ? [s] : []));
        seen.push({ layer: layer.index, row: r, pos: p,
          items: admitted.map((s) => [layer.pos[r][s], layer.ids[r][s]]) });
        out.push({ layer: layer.index, row: r, pos: p,
          values: attend(q, admitted.map((s) => layer.k[r][s]), admitted.map((s) => layer.v[r][s]),
            layer.heads, layer.qheads, layer.dim) });
      }
    }
    for (let r = 0; r < c.rows; r++) c.next[r] += ids[r].length;
    if (c.armed) {
      c.verifyTokens = ids.map((g, r) => g.map((id, j) => [id, positions[r][j]]));
      c.verified = true;
      c.verifyReal = ids.map((g) => g.length);
      c.peakBeforeVerify = c.peak;
    }
    c.peakBeforeForward = c.peak;
    c.columns += columns;
    c.peak = Math.max(c.peak, c.columns);
    // Only a window bounds a bypass trim (a decode does not).
    c.bypassBound = decode ? null : ids.map((g) => g.length);
    return { seen, out };
  }

  trim(c, n, bypass) {
    if (c.armed) throw new Refused("trim while a round is armed");
    if (hasSsm(c)) throw new Refused("trim: recurrent (ssm) layers are not trimmable");
    if (bypass) {
      if (c.bypassBound === null || c.bypassBound.some((b) => n > b)) {
        throw new Refused(`trim ${n} bypass: not right after a window of >= ${n} tokens`);
      }
      this.dropTips(c, new Array(c.rows).fill(n), c.peakBeforeForward);
    } else {
      for (const layer of c.layers) {
        if (wrapped(c, layer)) throw new Refused(`layer '${layer.name}' is not trimmable (the ring has wrapped)`);
      }
      for (let r = 0; r < c.rows; r++) {
        if (c.next[r] < n) throw new Refused(`trim ${n}: row ${r} holds only ${c.next[r]} tokens`);
      }
      this.dropTips(c, new Array(c.rows).fill(n), c.peak);
    }
    c.bypassBound = null;
  }

  // Drops each row's last drop[r] real tokens; the columns shrink by the
  // smallest drop (the other rows' dropped tokens become holes).
  dropTips(c, drop, peak) {
    const cut = Math.min(...drop);
    for (const layer of attention(c)) {
      for (let r = 0; r < c.rows; r++) dropLastReal(layer, r, drop[r]);
      if (cut) keepColumns(layer, 0, width(layer) - cut);
    }
    for (let r = 0; r < c.rows; r++) c.next[r] -= drop[r];
    c.columns -= cut;
    c.peak = Math.max(peak, c.columns);
  }

  arm(c) {
    if (c.armed) throw new Refused("arm: a round is already armed");
    c.armed = true;
    c.verified = false;
    c.bypassBound = null;
    c.snapshot = c.layers.map((l) => (l.ssm ? structuredClone(l.st) : null));
  }

  accept(c, keep) {
    if (!c.armed) throw new Refused("accept without arm");
    if (!c.verified) throw new Refused("accept before the verify forward");
    keep.forEach((k, r) => {
      if (k > c.verifyReal[r]) throw new Refused(`accept ${k}: row ${r} has only ${c.verifyReal[r]} tokens in the round`);
    });
    this.dropTips(c, c.verifyReal.map((n, r) => n - keep[r]), c.peakBeforeVerify);
    // recurrent layers: back to the snapshot, then the kept tokens again
    for (const l of c.layers.filter((x) => x.ssm)) {
      l.st = structuredClone(c.snapshot[l.index]);
      for (let r = 0; r < c.rows; r++) {
        for (const [id, p] of c.verifyTokens[r].slice(0, keep[r])) ssmStep(l, l.st[r], id, p);
      }
    }
    c.armed = c.verified = false;
    c.bypassBound = null;
    c.snapshot = c.verifyTokens = null;
  }

  fork(c) {
    return structuredClone(c);
  }

  filter(c, rows) {
    if (c.armed) throw new Refused("filter while a round is armed");
    for (const layer of c.layers) {
      for (const key of layer.ssm ? ["st"] : ["pos", "ids", "k", "v"]) layer[key] = rows.map((r) => layer[key][r]);
    }
    c.next = rows.map((r) => c.next[r]);
    c.rows = rows.length;
    c.bypassBound = null;
  }

  join(c, other) {
    if (c.armed || other.armed) throw new Refused("join while a round is armed");
    if (c.specs.map(shape).join("|") !== other.specs.map(shape).join("|")) {
      throw new Refused("join: the layer lists differ");
    }
    const o = structuredClone(other);
    c.layers.forEach((a, i) => {
      const b = o.layers[i];
      if (a.ssm) {
        a.st = a.st.concat(b.st);
        return;
      }
      const n = Math.max(width(a), width(b));
      padFront(a, n - width(a));
      padFront(b, n - width(b));
      for (const key of ["pos", "ids", "k", "v"]) a[key] = a[key].concat(b[key]);
    });
    c.next = c.next.concat(o.next);
    c.rows += o.rows;
    c.columns = Math.max(c.columns, o.columns);
    c.peak = Math.max(c.peak, o.peak);
    c.batched = true;
    c.bypassBound = null;
  }

  extract(c, row) {
    if (c.armed) throw new Refused("extract while a round is armed");
    const e = newCache(1, c.specs);
    e.layers.forEach((a, i) => {
      const b = c.layers[i];
      if (a.ssm) {
        a.st = [structuredClone(b.st[row])];
        return;
      }
      const held = realSlots(b, row);
      for (const key of ["pos", "ids", "k", "v"]) a[key] = [held.map((s) => structuredClone(b[key][row][s]))];
    });
    e.next = [c.next[row]];
    e.columns = c.next[row];
    // A row fed only its own tokens has wrapped when the batch's ring did
    // and it holds more than the capacity.
    e.peak = Math.max(e.columns, Math.min(c.peak, c.next[row]));
    return e;
  }

  save(c) {
    return Buffer.from(JSON.stringify(c));
  }

  load(data) {
    const c = JSON.parse(Buffer.from(data).toString("utf8"));
    c.bypassBound = null;
    return c;
  }

  positions(c) {
    return c.next;
  }

  trimmable(c, layer) {
    return !c.layers[layer].ssm && !wrapped(c, c.layers[layer]);
  }

  kind(c, layer) {
    const l = c.layers[layer];
    const base = l.ssm ? "ssm" : l.ring ? "rotating" : "kv";
    return c.batched ? "batched_" + base : base;
  }

  bytes_per_token(c, layer) {
    const l = c.layers[layer];
    return l.ssm ? 0 : l.heads * 2 * rowBytes(l.kv, l.dim);
  }

  difference(a, b) {
    if (a.rows !== b.rows) return `rows ${a.rows} vs ${b.rows}`;
    if (a.next.join() !== b.next.join()) return `positions ${a.next} vs ${b.next}`;
    for (let i = 0; i < a.layers.length; i++) {
      const la = a.layers[i];
      const lb = b.layers[i];
      if (la.ssm) {
        for (let r = 0; r < a.rows; r++) {
          if (JSON.stringify(la.st[r]) !== JSON.stringify(lb.st[r])) return `layer ${la.name} row ${r}: states differ`;
        }
        continue;
      }
      for (let r = 0; r < a.rows; r++) {
        let keep = a.next[r];
        if (la.ring) keep = Math.min(keep, la.window - 1);
        if (committed(la, r, keep) !== committed(lb, r, keep)) return `layer ${la.name} row ${r} differs`;
      }
    }
    return null;
  }
}

// The last `keep` real tokens of a row, as text: (pos, id, k, v).
function committed(layer, row, keep) {
  const real = realSlots(layer, row);
  const last = keep ? real.slice(real.length - keep) : [];
  return JSON.stringify(last.map((s) => [layer.pos[row][s], layer.ids[row][s], layer.k[row][s], layer.v[row][s]]));
}
