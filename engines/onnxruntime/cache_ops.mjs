// kvspec's statements on the ONNX Runtime cache (engine.mjs): the refusal
// rules and column bookkeeping of TRACE.md (the op has no cache object of its
// own, so the adapter keeps them), and each change mapped onto the engine's
// buffers: a trim or accept shortens a row's sequence length (in ring mode the
// absolute length the op is told: its only lever), ssm rollback restores the
// states snapshotted at arm and replays the kept tokens through the ops.
import v8 from "node:v8";
import { Cache, cloneCache, cloneRow, forwardLayers, attentionForward, ssmForward, widenProbe, seenNext, isRing, Refused, NotApplicable } from "./engine.mjs";

const MAX_TOKENS_PER_ROW = 1000000;
const hasSsm = (c) => c.specs.some((s) => s.kind === "ssm");

export function create(rows, layers, settings) {
  return new Cache(rows, layers, settings);
}

export async function forward(c, { columns, ids, positions, left, right, decode }) {
  if (c.armed && c.verified) throw new Refused("a second forward while a round is armed");
  for (let r = 0; r < c.rows; r++) {
    if (left[r] && c.next[r]) throw new Refused(`row ${r}: left padding on a row that holds tokens`);
    if (c.next[r] + ids[r].length > MAX_TOKENS_PER_ROW) throw new Refused(`row ${r}: too many tokens`);
  }
  if (c.armed) c.round.ids = ids, c.round.positions = positions;
  // ring_rollback=replay: the rings as they were before this forward, for a
  // bypass trim or an accept to restore and replay (the op has no rollback).
  const replay = c.settings.ring_rollback === "replay";
  c.lastForward = replay && c.specs.some((s) => isRing(c.settings, s))
    ? { ids, positions, dl: c.layers.map((l) => l.dl),
        snap: c.layers.map((l, li) => (isRing(c.settings, c.specs[li]) ? l.rows.map(cloneRow) : null)) }
    : null;
  const { seen, outs } = await forwardLayers(c, ids, positions);
  for (let r = 0; r < c.rows; r++) c.next[r] += ids[r].length;
  if (c.armed) { c.verified = true; c.verifyReal = ids.map((g) => g.length); c.peakBeforeVerify = c.peak; }
  c.peakBeforeForward = c.peak;
  c.columns += columns;
  c.peak = Math.max(c.peak, c.columns);
  c.bypassBound = decode ? null : ids.map((g) => g.length);
  return { seen, outs };
}

// Drops each row's last drop[r] real tokens. `last`: they are the tips of the
// last forward (a bypass trim, an accept), which ring_rollback=replay replays.
async function dropTips(c, drop, peak, last = false) {
  const lf = last && c.lastForward;
  for (let li = 0; li < c.specs.length; li++) {
    const s = c.specs[li];
    if (!lf || !isRing(c.settings, s) || !drop.some((d) => d > 0)) continue;
    // the snapshot's probe buffers, widened to the labels added since
    const restored = { rows: lf.snap[li].map(cloneRow), dl: lf.dl[li] };
    widenProbe(restored, s.heads, c.layers[li].dl);
    c.layers[li].rows = restored.rows;
    const ids = lf.ids.map((g, r) => g.slice(0, g.length - drop[r]));
    const positions = lf.positions.map((g, r) => g.slice(0, g.length - drop[r]));
    await attentionForward(c, li, s, ids, positions, new Map(), new Map());
  }
  c.specs.forEach((s, li) => {
    if (s.kind === "ssm" || (lf && isRing(c.settings, s) && drop.some((d) => d > 0))) return;
    c.layers[li].rows.forEach((row, r) => {
      row.seen -= drop[r];
      if (!(isRing(c.settings, s))) row.len -= drop[r];
    });
  });
  const cut = Math.min(...drop);
  for (let r = 0; r < c.rows; r++) c.next[r] -= drop[r];
  c.columns -= cut;
  c.peak = Math.max(peak, c.columns);
}

export async function trim(c, n, bypass) {
  if (c.armed) throw new Refused("trim while a round is armed");
  if (hasSsm(c)) throw new Refused("an ssm layer is never trimmable");
  if (bypass) {
    if (!c.bypassBound || c.bypassBound.some((b) => n > b)) throw new Refused(`trim ${n} bypass: not right after a window of >= ${n} tokens`);
    await dropTips(c, new Array(c.rows).fill(n), c.peakBeforeForward, true);
  } else {
    c.specs.forEach((s, li) => { if (c.wrapped(li)) throw new Refused(`layer '${s.name}' is not trimmable (the ring has wrapped)`); });
    for (let r = 0; r < c.rows; r++) if (c.next[r] < n) throw new Refused(`trim ${n}: row ${r} holds only ${c.next[r]} tokens`);
    await dropTips(c, new Array(c.rows).fill(n), c.peak);
  }
  c.bypassBound = null;
}

export function arm(c) {
  if (c.armed) throw new Refused("arm: a round is already armed");
  c.armed = true; c.verified = false; c.bypassBound = null;
  c.round = { snap: c.layers.map((l, li) => (c.specs[li].kind === "ssm" ? l.rows.map((r) => ({ conv: r.conv.slice(), state: r.state.slice() })) : null)), ids: null, positions: null };
}

export async function accept(c, keep) {
  if (!c.armed) throw new Refused("accept without arm");
  if (!c.verified) throw new Refused("accept before the verify forward");
  keep.forEach((k, r) => { if (k > c.verifyReal[r]) throw new Refused(`accept ${k}: row ${r} has only ${c.verifyReal[r]} tokens in the round`); });
  // Recurrent layers: restore the snapshot and replay the kept tokens.
  const partial = keep.some((k, r) => k < c.verifyReal[r]);
  if (partial) {
    const ids = c.round.ids.map((g, r) => (keep[r] < c.verifyReal[r] ? g.slice(0, keep[r]) : []));
    const positions = c.round.positions.map((g, r) => (keep[r] < c.verifyReal[r] ? g.slice(0, keep[r]) : []));
    for (let li = 0; li < c.specs.length; li++) {
      if (c.specs[li].kind !== "ssm") continue;
      for (let r = 0; r < c.rows; r++) if (keep[r] < c.verifyReal[r]) {
        const s = c.round.snap[li][r];
        c.layers[li].rows[r] = { conv: s.conv.slice(), state: s.state.slice() };
      }
      await ssmForward(c, li, c.specs[li], ids, positions, null);
    }
  }
  await dropTips(c, c.verifyReal.map((n, r) => n - keep[r]), c.peakBeforeVerify, true);
  c.armed = c.verified = false; c.bypassBound = null; c.round = null;
}

export const fork = (c) => cloneCache(c);

export function filter(c, rows) {
  if (c.armed) throw new Refused("filter while a round is armed");
  for (const l of c.layers) l.rows = rows.map((r) => l.rows[r]);
  c.next = rows.map((r) => c.next[r]);
  c.rows = rows.length;
  c.bypassBound = null;
}

const shape = (s) => JSON.stringify([s.kind, s.heads, s.qheads, s.dim, s.window, s.capacity, s.kheads, s.dk, s.dv, s.conv]);
export function join(c, other) {
  if (c.armed || other.armed) throw new Refused("join while a round is armed");
  if (c.specs.map(shape).join() !== other.specs.map(shape).join()) throw new Refused("join: the layer lists differ");
  const o = cloneCache(other);
  c.layers.forEach((l, li) => {
    const ol = o.layers[li];
    if (l.dl !== undefined && l.dl !== ol.dl) {
      const dl = Math.max(l.dl, ol.dl);
      widenProbe(l, c.specs[li].heads, dl);
      widenProbe(ol, c.specs[li].heads, dl);
    }
    l.rows = l.rows.concat(ol.rows);
  });
  c.next = c.next.concat(o.next);
  c.rows += o.rows;
  c.columns = Math.max(c.columns, o.columns);
  c.peak = Math.max(c.peak, o.peak);
  c.batched = true;
  c.bypassBound = null;
}

export function extract(c, row) {
  if (c.armed) throw new Refused("extract while a round is armed");
  const e = cloneCache(c);
  filter(e, [row]);
  e.batched = false;
  e.columns = c.next[row];
  e.peak = Math.max(e.columns, Math.min(c.peak, c.next[row]));
  return e;
}

export const save = (c) => v8.serialize({ ...c });
export function load(bytes) {
  const c = Object.assign(Object.create(Cache.prototype), v8.deserialize(bytes));
  c.bypassBound = null;
  return c;
}

export const positions = (c) => c.next.slice();

function same(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (!Object.is(a[i], b[i])) return false;
  return true;
}
// The last `keep` stored slots of a row (values and probe), per kv head.
function slots(row, H, keep, D, probe) {
  const buf = [probe ? row.pk : row.k, probe ? row.pv : row.v];
  if (!buf[0]) return [];
  const Dx = buf[0].length / (H * (buf[0].length / (H * D)));
  const cap = buf[0].length / (H * Dx);
  const out = [];
  for (const b of buf) for (let h = 0; h < H; h++) out.push(...b.subarray((h * cap + row.len - keep) * Dx, (h * cap + row.len) * Dx));
  return out;
}
export async function difference(a, b) {
  if (a.rows !== b.rows) return `rows ${a.rows} vs ${b.rows}`;
  if (a.next.join() !== b.next.join()) return `positions ${a.next} vs ${b.next}`;
  for (let li = 0; li < a.specs.length; li++) {
    const s = a.specs[li];
    for (let r = 0; r < a.rows; r++) {
      const x = a.layers[li].rows[r], y = b.layers[li].rows[r];
      if (s.kind === "ssm") {
        if (!same(x.conv, y.conv) || !same(x.state, y.state)) return `layer ${s.name} row ${r}: states differ`;
        continue;
      }
      let keep = a.next[r];
      if (s.kind === "rotating") keep = Math.min(keep, s.window - 1);
      if (isRing(a.settings, s)) {
        // The op keeps its resident tokens where its own rule puts them: compare
        // what a next query would see (a probe on copies), tag for tag.
        const ta = (await seenNext(a, li, r)).join(" "), tb = (await seenNext(b, li, r)).join(" ");
        if (ta !== tb) return `layer ${s.name} row ${r}: a next query sees ${ta || "nothing"} vs ${tb || "nothing"}`;
        continue;
      }
      const Dp = Math.max(8, Math.ceil(s.dim / 8) * 8);
      if (!same(slots(x, s.heads, keep, Dp, false), slots(y, s.heads, keep, Dp, false))) return `layer ${s.name} row ${r}: stored tokens differ`;
    }
  }
  return null;
}
