// The kit serving a real process: the toy engine (examples/toy.mjs) and an
// adapter that logs with console.log, driven over stdin/stdout.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { writeFileSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));
const layer = { name: "s", kind: "rotating", line: 3, heads: 1, qheads: 1, dim: 4, window: 2,
  capacity: 2, kheads: 1, dk: 4, dv: 4, conv: 4 };

function session(script, requests) {
  const input = requests.map((r, i) => JSON.stringify({ id: i, ...r }) + "\n").join("");
  const p = spawnSync(process.execPath, [script], { input, encoding: "utf8", timeout: 30000 });
  return { status: p.status, answers: p.stdout.trim().split("\n").map((l) => JSON.parse(l)), stderr: p.stderr };
}

const decode = (cache, pos) => ({ method: "forward", params: { cache, columns: 1, ids: [[pos]],
  positions: [[pos]], left: [0], right: [0], decode: true } });

test("the toy engine: a ring forgets what falls out of its window, exits 0 after shutdown", () => {
  const { status, answers } = session(path.join(here, "..", "examples", "toy.mjs"), [
    { method: "hello", params: { protocol: 1, settings: {} } },
    { method: "create", params: { rows: 1, layers: [layer] } },
    decode("h1", 0), decode("h1", 1), decode("h1", 2),
    { method: "trim", params: { cache: "h1", n: 1, bypass: false } },
    { method: "positions", params: { cache: "h1" } },
    { method: "shutdown", params: {} },
  ]);
  assert.equal(status, 0);
  assert.deepEqual(answers.map((a) => a.id), [0, 1, 2, 3, 4, 5, 6, 7]);
  assert.equal(answers[0].result.engine, "toy");
  assert.deepEqual(answers[4].result.seen[0].items, [[1, 1], [2, 2]]);
  assert.equal(answers[4].result.out[0].values.length, 4);
  assert.equal(answers[5].error.type, "refused");  // the ring has wrapped
  assert.deepEqual(answers[6].result, { positions: [3] });
  assert.deepEqual(answers[7].result, {});
});

test("console.log goes to stderr while serving; end of input ends the process", () => {
  const dir = mkdtempSync(path.join(tmpdir(), "kvspec-kit-"));
  const script = path.join(dir, "chatty.mjs");
  const kit = path.join(here, "..", "index.js");
  writeFileSync(script, `import { serve } from ${JSON.stringify(kit)};
serve({ name: "chatty", create(rows) { console.log("creating", rows); return { rows }; } });
`);
  const { status, answers, stderr } = session(script, [
    { method: "hello", params: { protocol: 1, settings: {} } },
    { method: "create", params: { rows: 2, layers: [] } },
  ]);
  assert.equal(status, 0);
  assert.deepEqual(answers[1], { id: 1, result: { handle: "h1" } });
  assert.match(stderr, /creating 2/);
});
