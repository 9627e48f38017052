// conformance_gen: writes the conformance traces (corpus/traces/conformance/)
// from the double-precision oracle (testing/values_oracle.h), never from
// kvspec's kernels: every `expect out` value, `expect sees` set and
// `expect positions` list in those files comes from TRACE.md's formulas
// evaluated in double.
//
//   conformance_gen DIR          (re)writes DIR/NAME.trace for every trace below
//   conformance_gen --check DIR  exit 1 unless DIR holds exactly these files,
//                                byte for byte (ctest: conformance.fresh)
//
// Each trace below is the program without expectations; the generator
// inserts, after every forward, `expect sees` (attention layers) and
// `expect out` (every layer) for each real query or token, and after every
// statement that moves positions, `expect positions`.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <dirent.h>

#include "kvspec/testing/values_oracle.h"

namespace {

struct Spec {
  const char* name;
  const char* about;  // lines, without '#'
  const char* body;   // the trace without expectations
};

// clang-format off
const Spec kSpecs[] = {
{"attn_decode",
 "Full attention with two heads: a prefill window, then decodes (one with\n"
 "an id other than its position). Every decode query sees every earlier\n"
 "token of its row.",
 "trace 1\n"
 "rows 1\n"
 "layer a kv heads=2 dim=4\n"
 "window 3\n"
 "decode\n"
 "decode\n"
 "decode ids=40\n"
 "decode\n"},

{"attn_gqa_decode",
 "Grouped-query attention: 8 query heads on 2 KV heads (query heads 0-3\n"
 "read KV head 0, 4-7 read KV head 1), a prefill window and decodes, on\n"
 "two rows; and a layer of 6 query heads on 3 KV heads with a window of 3.\n"
 "Each query head's output follows from its own q and its group's keys and\n"
 "values.",
 "trace 1\n"
 "rows 2\n"
 "layer g kv heads=2 qheads=8 dim=3\n"
 "layer w kv heads=3 qheads=6 dim=2 window=3\n"
 "window 4 left=0,1\n"
 "decode\n"
 "decode ids=50/60\n"
 "window 2 right=0,1\n"},

{"attn_gqa_wide_dims",
 "Grouped-query attention at head sizes that take every SIMD path of the\n"
 "kernels (whole double vectors, single vectors and scalar tails on\n"
 "SSE4, AVX2 and AVX-512) and groups of 4 query heads and more (the\n"
 "kernels' 4-head blocks and their remainder): 8 query heads on 2 KV heads\n"
 "at dim 40, 5 on 1 at dim 24, with a window of 2 on the second.",
 "trace 1\n"
 "rows 1\n"
 "layer a kv heads=2 qheads=8 dim=40\n"
 "layer b kv heads=1 qheads=5 dim=24 window=2\n"
 "window 3\n"
 "decode\n"
 "decode ids=9\n"},

{"ring_gqa_round",
 "Grouped-query attention on a ring: 4 query heads on 1 KV head (all\n"
 "share it) and 6 on 2, window 3, through a wrap and a speculative round\n"
 "with a ragged accept.",
 "trace 1\n"
 "rows 2\n"
 "layer r rotating window=3 heads=1 qheads=4 dim=4\n"
 "layer s rotating window=3 capacity=5 heads=2 qheads=6 dim=2\n"
 "window 4\n"
 "decode\n"
 "arm\n"
 "window 3 ids=70,71,72/80,81,82\n"
 "accept 2,1\n"
 "decode\n"},

{"attn_chunked_prefill",
 "A prefill in chunks (windows of 3, 1 and 4) on two rows and two layers:\n"
 "causal inside each window, every earlier token visible. The last chunk\n"
 "gives its tokens ids other than their positions.",
 "trace 1\n"
 "rows 2\n"
 "layer a kv heads=1 dim=8\n"
 "layer b kv heads=3 dim=2\n"
 "window 3\n"
 "window 1\n"
 "window 4 ids=100,101,102,103/200,201,202,203\n"
 "decode ids=7/8\n"},

{"attn_left_padding",
 "Left padding: rows of different lengths start with pad columns that are\n"
 "never visible; row 1 of the first window is all padding (no token), and\n"
 "may therefore be left-padded again. Outputs depend only on each row's\n"
 "real tokens: row 2 holds the same tokens as row 0 and gets the same\n"
 "numbers.",
 "trace 1\n"
 "rows 3\n"
 "layer a kv heads=2 dim=3\n"
 "layer w kv heads=1 dim=5 window=2\n"
 "window 4 left=0,4,1 ids=0,1,2,3//0,1,2\n"
 "window 2 left=0,1,0\n"
 "decode\n"
 "decode ids=9/9/9\n"},

{"attn_prepared_padding",
 "Prepared prefill padding: a chunk's trailing pad columns (right=) are\n"
 "never visible, and the next chunk continues each row at its own next\n"
 "position; a row may get no real token in a chunk.",
 "trace 1\n"
 "rows 3\n"
 "layer a kv heads=2 dim=4\n"
 "layer w kv heads=1 dim=4 window=3\n"
 "window 4 right=1,0,2\n"
 "window 3 right=0,3,1\n"
 "decode\n"
 "window 2 left=0,0,0 right=1,0,0\n"},

{"attn_sliding_window",
 "Sliding windows on kv layers (window W counts the query itself: a query\n"
 "at p sees max(0, p-W+1) .. p), next to a full layer, through a long\n"
 "prefill window and decodes.",
 "trace 1\n"
 "rows 1\n"
 "layer full kv heads=1 dim=4\n"
 "layer w3 kv heads=2 dim=3 window=3\n"
 "layer w1 kv heads=1 dim=2 window=1\n"
 "window 6\n"
 "decode\n"
 "decode\n"
 "window 2\n"},

{"attn_round_partial_accept",
 "Speculative rounds on attention layers: a verify window of 4 drafts per\n"
 "row, then a ragged accept (1, 3 and 0 tokens kept); the next forward\n"
 "rewrites the rejected positions with new ids. A second round keeps\n"
 "everything, a third nothing.",
 "trace 1\n"
 "rows 3\n"
 "layer a kv heads=2 dim=4\n"
 "layer w kv heads=1 dim=3 window=2\n"
 "window 3\n"
 "arm\n"
 "window 4 ids=50,51,52,53/60,61,62,63/70,71,72,73\n"
 "accept 1,3,0\n"
 "decode ids=80/81/82\n"
 "arm\n"
 "window 2 ids=90,91/92,93/94,95\n"
 "accept 2\n"
 "arm\n"
 "window 3\n"
 "accept 0\n"
 "decode\n"},

{"attn_decode_round",
 "A decode as a one-token round: rejected (accept 0), then the position is\n"
 "written again with another id; then an accepted one-token round.",
 "trace 1\n"
 "rows 2\n"
 "layer a kv heads=1 dim=6\n"
 "window 2\n"
 "arm\n"
 "decode ids=500/600\n"
 "accept 0\n"
 "decode ids=501/601\n"
 "arm\n"
 "decode\n"
 "accept 1\n"
 "decode\n"},

{"attn_trim_rewrite",
 "Trims: a plain trim drops the last tokens of every row, and the\n"
 "positions are written again with new ids (new contents, new outputs); a\n"
 "bypass trim right after a window drops its rejected tips.",
 "trace 1\n"
 "rows 2\n"
 "layer a kv heads=2 dim=2\n"
 "layer w kv heads=1 dim=4 window=3\n"
 "window 5\n"
 "trim 2\n"
 "window 2 ids=30,31/40,41\n"
 "window 3 ids=32,33,34/42,43,44\n"
 "trim 2 bypass\n"
 "decode ids=35/45\n"},

{"ring_wrapped",
 "A rotating layer (window 4, capacity 4) written far past its capacity:\n"
 "decodes and windows on a wrapped ring, including a window longer than\n"
 "the capacity; queries see exactly the last 4 positions (fewer early on).",
 "trace 1\n"
 "rows 2\n"
 "layer r rotating window=4 heads=2 dim=3\n"
 "window 3\n"
 "decode\n"
 "decode\n"
 "decode\n"
 "window 6 ids=10,11,12,13,14,15/20,21,22,23,24,25\n"
 "decode\n"
 "window 2\n"},

{"ring_capacity_gt_window",
 "A ring with capacity 7 > window 3, and a second ring of window 2 at the\n"
 "default capacity: windows of 4 (longer than the window), decodes,\n"
 "left-padded rows.",
 "trace 1\n"
 "rows 2\n"
 "layer r rotating window=3 capacity=7 heads=1 dim=4\n"
 "layer s rotating window=2 heads=2 dim=2\n"
 "window 4 left=0,2\n"
 "window 4\n"
 "decode\n"
 "window 3 right=0,1\n"
 "decode\n"},

{"ring_round_partial_accept",
 "Speculative rounds on a wrapped ring (window 4): a verify window of 5\n"
 "that crosses the window boundary, partial accept (2), then decodes see\n"
 "the accepted tokens; a full accept; a one-token round rejected.",
 "trace 1\n"
 "rows 1\n"
 "layer r rotating window=4 heads=1 dim=4\n"
 "layer f kv heads=1 dim=4\n"
 "window 6\n"
 "arm\n"
 "window 5 ids=100,101,102,103,104\n"
 "accept 2\n"
 "decode\n"
 "arm\n"
 "window 3 ids=200,201,202\n"
 "accept 3\n"
 "arm\n"
 "decode ids=300\n"
 "accept 0\n"
 "decode\n"},

{"ring_verify_longer_than_window",
 "A verify window of 7 drafts on rings of window 3 (capacity 3 and 5) with\n"
 "a ragged accept (4 and 6 kept): every accepted column that a later query\n"
 "needs is there; later decodes see the accepted tokens only.",
 "trace 1\n"
 "rows 2\n"
 "layer r rotating window=3 heads=1 dim=3\n"
 "layer c rotating window=3 capacity=5 heads=2 dim=2\n"
 "window 2\n"
 "arm\n"
 "window 7 ids=10,11,12,13,14,15,16/20,21,22,23,24,25,26\n"
 "accept 4,6\n"
 "decode\n"
 "decode\n"},

{"ssm_decode",
 "A recurrent layer at the defaults (heads 1, dk 4, dv 4, conv 4): a\n"
 "prefill window then decodes; y of each token follows from the row's\n"
 "tokens so far.",
 "trace 1\n"
 "rows 1\n"
 "layer s ssm\n"
 "window 3\n"
 "decode\n"
 "decode ids=77\n"
 "window 2\n"},

{"ssm_conv1_gqa",
 "Recurrent layer with conv kernel 1 (no conv state: u = silu(w x)) and\n"
 "GQA, 4 value heads on 2 key heads; windows, decodes and a round with a\n"
 "ragged accept.",
 "trace 1\n"
 "rows 2\n"
 "layer s ssm heads=4 kheads=2 dk=3 dv=2 conv=1\n"
 "window 3\n"
 "decode\n"
 "arm\n"
 "window 3 ids=40,41,42/50,51,52\n"
 "accept 2,1\n"
 "decode\n"},

{"ssm_conv2_gqa",
 "Recurrent layer with conv kernel 2 and GQA, 2 value heads on 1 key head;\n"
 "windows, decodes and a round with a partial accept.",
 "trace 1\n"
 "rows 1\n"
 "layer s ssm heads=2 kheads=1 dk=4 dv=3 conv=2\n"
 "window 4\n"
 "arm\n"
 "window 3 ids=60,61,62\n"
 "accept 1\n"
 "decode\n"
 "decode\n"},

{"ssm_conv3_gqa",
 "Recurrent layer with conv kernel 3 and GQA, 6 value heads on 3 key heads\n"
 "(two value heads per key head); left-padded rows.",
 "trace 1\n"
 "rows 2\n"
 "layer s ssm heads=6 kheads=3 dk=2 dv=2 conv=3\n"
 "window 4 left=0,3\n"
 "decode\n"
 "window 2\n"
 "arm\n"
 "decode ids=90/91\n"
 "accept 1,0\n"
 "decode\n"},

{"ssm_conv4_gqa",
 "Recurrent layer with conv kernel 4 and GQA, 4 value heads on 1 key head;\n"
 "a long prefill, decodes and a round with a ragged accept.",
 "trace 1\n"
 "rows 2\n"
 "layer s ssm heads=4 kheads=1 dk=3 dv=3 conv=4\n"
 "window 6\n"
 "decode\n"
 "arm\n"
 "window 4 ids=30,31,32,33/40,41,42,43\n"
 "accept 3,0\n"
 "decode\n"
 "decode\n"},

{"ssm_round_partial_accept",
 "Speculative rounds on recurrent layers: the verify window's outputs\n"
 "follow from the pre-round state through the drafts; after a ragged\n"
 "accept (row 0 keeps 2 of 4, row 1 all, row 2 none) the next tokens\n"
 "follow from the accepted tokens only, as if the rejected drafts had never\n"
 "been seen. Then a round accepted in full and one rejected.",
 "trace 1\n"
 "rows 3\n"
 "layer s ssm heads=2 kheads=2 dk=3 dv=3 conv=3\n"
 "layer t ssm heads=1 dk=2 dv=4 conv=1\n"
 "window 2\n"
 "arm\n"
 "window 4 ids=10,11,12,13/20,21,22,23/30,31,32,33\n"
 "accept 2,4,0\n"
 "decode ids=14/24/34\n"
 "arm\n"
 "window 2\n"
 "accept 2\n"
 "arm\n"
 "window 3 ids=1,2,3/4,5,6/7,8,9\n"
 "accept 0\n"
 "decode\n"},

{"ssm_padding",
 "Padding on recurrent layers is skipped: left pads before a row's first\n"
 "token and trailing (prepared) pads inside a chunk change nothing; row 2\n"
 "holds the same tokens as row 0 and gets the same outputs.",
 "trace 1\n"
 "rows 3\n"
 "layer s ssm heads=2 kheads=1 dk=2 dv=2 conv=4\n"
 "window 5 left=0,2,3\n"
 "window 3 right=1,0,3\n"
 "decode ids=5/5/2\n"
 "window 2 right=0,1,0\n"},

{"ssm_gqa_wide",
 "Three recurrent layers with different head groupings: 6 value heads on\n"
 "3 key heads, 6 on 1, and 2 on 2 (no sharing), with different dk and dv.",
 "trace 1\n"
 "rows 1\n"
 "layer g3 ssm heads=6 kheads=3 dk=2 dv=1 conv=2\n"
 "layer g1 ssm heads=6 kheads=1 dk=5 dv=2 conv=3\n"
 "layer g0 ssm heads=2 kheads=2 dk=1 dv=3 conv=4\n"
 "window 3\n"
 "decode\n"
 "window 2 ids=8,9\n"},

{"hybrid_layout",
 "A hybrid model: full attention, a sliding ring, a recurrent layer and a\n"
 "kv layer with a window, on two rows with left and prepared padding, a\n"
 "round with a ragged accept and decodes.",
 "trace 1\n"
 "rows 2\n"
 "layer a kv heads=2 dim=2\n"
 "layer r rotating window=3 heads=1 dim=4\n"
 "layer s ssm heads=2 kheads=1 dk=2 dv=2 conv=4\n"
 "layer w kv heads=1 dim=3 window=2\n"
 "window 4 left=0,2\n"
 "window 3 right=1,0\n"
 "arm\n"
 "window 3 ids=70,71,72/80,81,82\n"
 "accept 1,2\n"
 "decode\n"
 "decode ids=5/6\n"},

{"hybrid_fork",
 "Forked rounds on a hybrid layout: a verify window is forked and accepted\n"
 "differently in each copy (1 and 3 tokens); each copy's decodes follow\n"
 "from its own accepted tokens; reload keeps every number.",
 "trace 1\n"
 "rows 1\n"
 "layer r rotating window=2 capacity=3 heads=1 dim=3\n"
 "layer s ssm heads=3 kheads=1 dk=3 dv=2 conv=2\n"
 "window 4\n"
 "arm\n"
 "window 3 ids=40,41,42\n"
 "fork other\n"
 "accept 1\n"
 "decode\n"
 "use other\n"
 "accept 3\n"
 "reload\n"
 "decode\n"
 "use main\n"
 "decode\n"},

{"hybrid_long_decode",
 "A long decode on a hybrid layout: a ring of window 5 wraps many times\n"
 "while a recurrent state with conv 3 accumulates 20 tokens.",
 "trace 1\n"
 "rows 1\n"
 "layer r rotating window=5 heads=1 dim=2\n"
 "layer s ssm heads=1 dk=2 dv=2 conv=3\n"
 "window 2\n"
 "decode\ndecode\ndecode\ndecode\ndecode\ndecode\ndecode\ndecode\ndecode\n"
 "decode\ndecode\ndecode\ndecode\ndecode\ndecode\ndecode\ndecode\ndecode\n"},

{"storage_kv",
 "Storage types on full attention: the same statements on four kv layers that\n"
 "store keys and values as f32, bf16, q8_0 and q4_0 (TRACE.md \"Values\":\n"
 "rounded through the type, then attention in double), with a window, a\n"
 "trim and rewritten positions, decodes and a round with a partial\n"
 "accept. Visibility is the same in every layer.",
 "trace 1\n"
 "rows 1\n"
 "layer f32 kv heads=1 qheads=2 dim=32 kv=f32\n"
 "layer bf16 kv heads=1 qheads=2 dim=32 kv=bf16\n"
 "layer q8 kv heads=1 qheads=2 dim=32 kv=q8_0\n"
 "layer q4 kv heads=1 qheads=2 dim=32 kv=q4_0\n"
 "window 4\n"
 "decode\n"
 "trim 2\n"
 "decode ids=40\n"
 "arm\n"
 "window 3 ids=50,51,52\n"
 "accept 1\n"
 "decode\n"},

{"storage_batched_kv",
 "Storage types on batched full attention: rows with left padding (pad\n"
 "contents are stored and never seen), sliding windows, a ragged accept;\n"
 "q8_0 and q4_0 at dims 32 and 64, bf16 beside them.",
 "trace 1\n"
 "rows 3\n"
 "layer bf16 kv heads=2 dim=32 window=3 kv=bf16\n"
 "layer q8 kv heads=2 dim=64 kv=q8_0\n"
 "layer q4 kv heads=1 qheads=2 dim=32 window=3 kv=q4_0\n"
 "window 4 left=0,3,1 ids=0,1,2,3/0/0,1,2\n"
 "decode\n"
 "arm\n"
 "window 3\n"
 "accept 1,3,0\n"
 "decode ids=70/71/72\n"},

{"storage_rotating",
 "Storage types on a sliding-window ring (window 4, capacity 5): written\n"
 "past its capacity, then a round whose verify window crosses the window\n"
 "boundary and is partly rejected; the kept tokens' stored blocks are\n"
 "what later decodes read.",
 "trace 1\n"
 "rows 1\n"
 "layer f32 rotating window=4 capacity=5 heads=1 dim=32 kv=f32\n"
 "layer bf16 rotating window=4 capacity=5 heads=1 dim=32 kv=bf16\n"
 "layer q8 rotating window=4 capacity=5 heads=1 dim=32 kv=q8_0\n"
 "layer q4 rotating window=4 capacity=5 heads=1 dim=32 kv=q4_0\n"
 "window 6\n"
 "decode\n"
 "arm\n"
 "window 5 ids=100,101,102,103,104\n"
 "accept 2\n"
 "decode\n"
 "decode\n"},

{"storage_batched_rotating",
 "Storage types on batched rings (window 3): left padding, a wrap, a\n"
 "ragged accept; q8_0 and q4_0 beside bf16, two KV heads with grouped\n"
 "queries.",
 "trace 1\n"
 "rows 2\n"
 "layer bf16 rotating window=3 heads=2 qheads=4 dim=32 kv=bf16\n"
 "layer q8 rotating window=3 capacity=4 heads=2 qheads=4 dim=32 kv=q8_0\n"
 "layer q4 rotating window=3 heads=2 qheads=4 dim=32 kv=q4_0\n"
 "window 3 left=0,2\n"
 "decode\n"
 "decode\n"
 "arm\n"
 "window 3 ids=60,61,62/63,64,65\n"
 "accept 2,1\n"
 "decode\n"},
};
// clang-format on

std::string Prefixed(const std::string& text) {
  std::string out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out += line.empty() ? "#\n" : "# " + line + "\n";
  return out;
}

std::string Render(const Spec& spec, std::string* error) {
  const kvspec::oracle::Result r = kvspec::oracle::Evaluate(spec.body);
  if (!r.ok) {
    *error = std::string(spec.name) + ": the oracle refused line " + r.error;
    return "";
  }
  std::map<int, const kvspec::oracle::Step*> steps;
  for (const kvspec::oracle::Step& step : r.steps) steps[step.line] = &step;

  std::string out = "# conformance/" + std::string(spec.name) + ".trace\n";
  out += Prefixed(spec.about);
  out += Prefixed(
      "\n"
      "Generated by tools/conformance_gen.cc: every expectation comes from the\n"
      "double-precision oracle (testing/values_oracle.cc, TRACE.md \"Values\"),\n"
      "not from kvspec. Do not edit; regenerate with\n"
      "  cmake --build build/dev --target conformance_gen\n"
      "  build/dev/conformance_gen corpus/traces/conformance\n"
      "Run: kvspec trace FILE (exit 0). Using these files from another engine:\n"
      "docs/conformance.md.");
  std::istringstream in(spec.body);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    out += line + "\n";
    auto it = steps.find(number);
    if (it == steps.end()) continue;
    const kvspec::oracle::Step& step = *it->second;
    for (const kvspec::oracle::Query& q : step.queries) {
      const std::string where = r.layer_names[q.layer] + " r" + std::to_string(q.row) + " p" +
                                std::to_string(q.pos) + ":";
      if (q.attention) {
        const std::string items = kvspec::oracle::FormatSees(q.sees);
        out += "expect sees " + where + (items.empty() ? "" : " " + items) + "\n";
      }
      out += "expect out " + where;
      for (double v : q.values) out += " " + kvspec::oracle::FormatValue(v);
      out += "\n";
    }
    if (step.changes_positions) {
      out += "expect positions ";
      for (size_t i = 0; i < step.positions.size(); ++i) {
        out += (i ? "," : "") + std::to_string(step.positions[i]);
      }
      out += "\n";
    }
  }
  return out;
}

std::set<std::string> TraceFiles(const std::string& dir) {
  std::set<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > 6 && name.compare(name.size() - 6, 6, ".trace") == 0) names.insert(name);
    }
    closedir(d);
  }
  return names;
}

}  // namespace

int main(int argc, char** argv) {
  const bool check = argc == 3 && std::string(argv[1]) == "--check";
  if (!(argc == 2 || check) || std::string(argv[1]) == "--help") {
    std::fprintf(stderr,
                 "usage: conformance_gen DIR | conformance_gen --check DIR\n"
                 "writes (or checks) the conformance traces in DIR\n");
    return 2;
  }
  const std::string dir = argv[argc - 1];
  int status = 0;
  std::set<std::string> expected_files;
  for (const Spec& spec : kSpecs) {
    std::string error;
    const std::string text = Render(spec, &error);
    if (!error.empty()) {
      std::fprintf(stderr, "conformance_gen: %s\n", error.c_str());
      return 1;
    }
    const std::string file = std::string(spec.name) + ".trace";
    expected_files.insert(file);
    const std::string path = dir + "/" + file;
    if (check) {
      std::ifstream in(path, std::ios::binary);
      std::stringstream have;
      have << in.rdbuf();
      if (!in || have.str() != text) {
        std::fprintf(stderr, "conformance_gen: %s is missing or stale\n", path.c_str());
        status = 1;
      }
    } else {
      std::ofstream o(path, std::ios::binary);
      o << text;
      if (!o) {
        std::fprintf(stderr, "conformance_gen: cannot write %s\n", path.c_str());
        return 1;
      }
    }
  }
  for (const std::string& name : TraceFiles(dir)) {
    if (!expected_files.count(name)) {
      std::fprintf(stderr, "conformance_gen: %s/%s is not generated (remove it or add it)\n",
                   dir.c_str(), name.c_str());
      status = 1;
    }
  }
  if (status == 0) {
    std::printf("conformance_gen: %zu traces %s %s\n", expected_files.size(),
                check ? "up to date in" : "written to", dir.c_str());
  }
  return status;
}
