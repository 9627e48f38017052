// Uses an installed kvspec: builds a two-layer layout (a plain KV cache and
// a sliding-window ring), runs a prefill window and a decode through it,
// checks what the last query saw and the positions, and runs a small trace
// through the library's runner. Exits 0 when everything is as expected.
#include <cstdio>
#include <memory>
#include <sstream>
#include <vector>

#include <kvspec/core/layout.h>
#include <kvspec/runner/runner.h>

namespace {

int Fail(const char* what) {
  std::fprintf(stderr, "consumer: %s\n", what);
  return 1;
}

}  // namespace

int main() {
  kvspec::LayerConfig full;
  full.name = "full";
  full.kind = kvspec::CacheKind::kKv;
  kvspec::LayerConfig ring;
  ring.name = "ring";
  ring.kind = kvspec::CacheKind::kRotating;
  ring.window = 2;
  std::unique_ptr<kvspec::Layout> layout;
  if (!kvspec::Layout::Create(1, {full, ring}, &layout).ok()) return Fail("create");

  // Three tokens, then one more; contents: each token's q, k, v all = pos.
  const int dim = full.dim;
  for (int32_t columns : {3, 1}) {
    const int32_t first = layout->positions()[0];
    std::vector<float> qkv(static_cast<size_t>(columns) * dim);
    for (int32_t c = 0; c < columns; ++c) {
      for (int d = 0; d < dim; ++d) qkv[c * dim + d] = static_cast<float>(first + c);
    }
    std::vector<float> out(qkv.size());
    std::vector<kvspec::LayerIO> io = {
        kvspec::LayerIO(qkv.data(), qkv.data(), qkv.data(), out.data()),
        kvspec::LayerIO(qkv.data(), qkv.data(), qkv.data(), out.data())};
    const auto cols = kvspec::ForwardColumns::Dense(1, columns, columns == 1);
    if (!layout->Forward(cols, io).ok()) return Fail("forward");
  }
  if (layout->positions() != std::vector<int32_t>{4}) return Fail("positions");
  if (layout->cache(1).kind() != "rotating") return Fail("kind");
  // The ring's mask admits exactly the window: positions 2 and 3.
  const kvspec::Mask* mask = layout->LastMask(1);
  if (mask == nullptr || mask->lo[0] != 2 || mask->hi[0] != 3) return Fail("ring mask");

  std::ostringstream out, err;
  const char* text =
      "trace 1\nrows 1\nlayer s rotating window=2\nwindow 3\ndecode\n"
      "expect sees s r0 p3: 2 3\nexpect positions 4\n";
  if (kvspec::trace::RunTraceText(text, "consumer.trace", {}, out, err) != 0) {
    std::fprintf(stderr, "%s", err.str().c_str());
    return Fail("trace");
  }
  std::printf("consumer: ok (%s)", out.str().c_str());
  return 0;
}
