// The attention kernel against a variant of itself in one process: a
// patched checkout declares `extern bool g_kvspec_toggle;` and switches on
// it (bench/alternate/run applies the patch), and this program alternates
// the two settings round by round on the same caches, so that a noisy host
// slows both about alike. Each round times both; the figure is the median
// over the rounds of the on/off ratio of the round.
//
// Shape: 8 KV heads x 4 query heads, one decode query, positions 0..n-1.
// Cold: a 16384-token cache (ALT_TOKENS in the environment: another
// length, 256 to 1048576), copies rotated through at least 600 MiB, 10
// calls per setting and round. Hot: a 128-token cache (in L2 up to 1 MiB
// of keys and values), 400 calls, scaled x128 to 16384 tokens. Last, fp32
// window attention at dim 128 (the shape of BM_Window's L = 64): 64 causal
// queries after 1024 tokens, one cache (8.5 MiB), 3 calls per setting and
// round. The kernels run on the best Highway target of the CPU, or on the
// one ALT_TARGET names (e.g. AVX2).
//
// ALT_KERNEL=conv runs the causal conv1d step instead (kernels/conv1d.h),
// hot and in place as the cache calls it: 8192 and 1024 channels, K = 4
// and K = 1 (the SiLU alone), 2000 calls per setting and round (20000 at
// 1024 channels). ALT_KERNEL=gated runs the gated delta step
// (kernels/gated_delta.h) in place: 16 value heads and 8 key heads of dk =
// dv = 128 (a 1 MiB state), scalar gates, hot (one state, 2000 calls per
// setting and round) and cold (copies rotated through 512 MiB, 400 calls).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kvspec/kernels/aligned_vector.h"
#include "kvspec/kernels/attention.h"
#include "kvspec/kernels/conv1d.h"
#include "kvspec/kernels/gated_delta.h"
#include "kvspec/kernels/kv_view.h"
#include "kvspec/kernels/mask.h"
#include "kvspec/testing/target_scope.h"

bool g_kvspec_toggle = true;

namespace {

using kvspec::Attend;
using kvspec::KvView;
using kvspec::Mask;

// A linear congruential generator's floats, uniform in [lo, hi).
struct Uniform {
  uint32_t seed;
  float operator()(float lo, float hi) {
    seed = seed * 1664525u + 1013904223u;
    return lo + (hi - lo) * static_cast<float>(seed >> 8) * (1.0f / 16777216.0f);
  }
};

template <typename T>
struct Cache {
  int dim, slots, copies, kv_heads = 8, q_heads = 32;
  size_t per;
  kvspec::AlignedVector<T> k, v;
  std::vector<int32_t> pos;
  Mask mask;
  int next = 0;

  // A cache of s slots (positions 0..s-1) read by `queries` causal queries
  // at positions s - queries .. s - 1 (one: a decode that admits them all).
  Cache(int d, int s, int c, int queries = 1) : dim(d), slots(s), copies(c) {
    per = static_cast<size_t>(kv_heads) * slots * dim;
    k.resize(per * copies);
    v.resize(per * copies);
    Uniform uniform{7};
    for (size_t i = 0; i < k.size(); ++i) {
      const float a = uniform(-0.5f, 0.5f), b = uniform(-0.5f, 0.5f);
      if constexpr (sizeof(T) == 2) {
        k[i] = kvspec::FloatToBf16(a);
        v[i] = kvspec::FloatToBf16(b);
      } else {
        k[i] = a;
        v[i] = b;
      }
    }
    pos.resize(slots);
    for (int i = 0; i < slots; ++i) pos[i] = i;
    mask.window = kvspec::kNoWindow;
    mask.rows = 1;
    mask.queries = queries;
    mask.slot_pos = pos.data();
    mask.slot_stride = mask.slots = slots;
    mask.first_slot = 0;
    for (int i = 0; i < queries; ++i) {
      const int32_t at = slots - queries + i;
      mask.query_pos.push_back(at);
      mask.lo.push_back(0);
      mask.hi.push_back(at);
    }
  }

  // Milliseconds per call, over `calls` calls on the next copies.
  double Time(const float* q, float* out, int calls) {
    KvView kv = KvView::Dense(nullptr, nullptr, pos.data(), 1, kv_heads, dim, slots, 0);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) {
      if constexpr (sizeof(T) == 2) {
        kv.k_bf16 = k.data() + per * next;
        kv.v_bf16 = v.data() + per * next;
      } else {
        kv.k = k.data() + per * next;
        kv.v = v.data() + per * next;
      }
      next = (next + 1) % copies;
      Attend(q, q_heads, kv, mask, out);
    }
    const auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::milli>(t1 - t0).count() / calls;
  }
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// "median [min..max]" of v.
std::string Range(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  char text[64];
  std::snprintf(text, sizeof text, "%.3f [%.3f..%.3f]", v[v.size() / 2], v.front(), v.back());
  return text;
}

// `calls` calls of call() per setting and round, off then on in each
// round: microseconds per call of each setting per round, and the rounds'
// on/off ratios.
struct Rounds {
  std::vector<double> t[2], ratio;
};
template <typename F>
Rounds Alternate(int rounds, int calls, F&& call) {
  Rounds out;
  for (int i = 0; i < rounds; ++i) {
    for (int m = 0; m < 2; ++m) {
      g_kvspec_toggle = m == 1;
      const auto t0 = std::chrono::steady_clock::now();
      for (int c = 0; c < calls; ++c) call();
      const auto t1 = std::chrono::steady_clock::now();
      out.t[m].push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / calls);
    }
    out.ratio.push_back(out.t[1].back() / out.t[0].back());
  }
  return out;
}

template <typename T>
void Run(int dim, int rounds, int tokens) {
  const size_t cold_bytes = size_t{2} * 8 * static_cast<size_t>(tokens) * dim * sizeof(T);
  const size_t copies = std::max<size_t>(4, (size_t{600} << 20) / cold_bytes);
  Cache<T> cold(dim, tokens, static_cast<int>(copies));
  Cache<T> hot(dim, 128, 1);
  std::vector<float> q(32 * static_cast<size_t>(dim), 0.01f), out(q.size());
  std::vector<double> tc[2], th[2], rc, rh;
  for (int i = 0; i < rounds; ++i) {
    for (int m = 0; m < 2; ++m) {
      g_kvspec_toggle = m == 1;
      tc[m].push_back(cold.Time(q.data(), out.data(), 10));
      th[m].push_back(hot.Time(q.data(), out.data(), 400) * 128);
    }
    rc.push_back(tc[1].back() / tc[0].back());
    rh.push_back(th[1].back() / th[0].back());
  }
  std::printf(
      "%-4s dim %3d | cold %d: off %7.3f ms, on %7.3f ms, on/off %s | in L2 (x128): off %7.3f "
      "ms, on %7.3f ms, on/off %s\n",
      sizeof(T) == 2 ? "bf16" : "f32", dim, tokens, Median(tc[0]), Median(tc[1]), Range(rc).c_str(),
      Median(th[0]), Median(th[1]), Range(rh).c_str());
  std::fflush(stdout);
}

// fp32 window attention: 64 queries after 1024 tokens, dim 128, hot.
void RunWindow(int rounds) {
  const int dim = 128, queries = 64;
  Cache<float> cache(dim, 1024 + queries, 1, queries);
  std::vector<float> q(static_cast<size_t>(queries) * 32 * dim, 0.01f), out(q.size());
  const Rounds r = Alternate(rounds, 3, [&] { cache.Time(q.data(), out.data(), 1); });
  std::printf("f32  window 1024 + 64, dim 128 (hot): off %7.3f ms, on %7.3f ms, on/off %s\n",
              Median(r.t[0]) / 1000, Median(r.t[1]) / 1000, Range(r.ratio).c_str());
  std::fflush(stdout);
}

// The conv1d step, hot, in place: `channels` channels, kernel K.
void RunConv(int rounds, size_t channels, size_t kernel) {
  std::vector<float> w(kernel * channels), packed(w.size()), state((kernel - 1) * channels),
      x(channels), u(channels);
  Uniform uniform{11};
  for (float& f : w) f = uniform(-0.5f, 0.5f);
  for (float& f : state) f = uniform(-1.0f, 1.0f);
  for (float& f : x) f = uniform(-1.0f, 1.0f);
  kvspec::PackConvWeights(w.data(), packed.data(), channels, kernel);
  const Rounds r = Alternate(rounds, channels >= 8192 ? 2000 : 20000, [&] {
    kvspec::ConvStep(packed.data(), state.data(), state.data(), x.data(), u.data(), channels,
                     kernel);
  });
  std::printf("conv %5zu channels, K = %zu (hot): off %7.3f us, on %7.3f us, on/off %s\n",
              channels, kernel, Median(r.t[0]), Median(r.t[1]), Range(r.ratio).c_str());
  std::fflush(stdout);
}

// The gated delta step in place, hot (one state) or cold (512 states in
// turn).
void RunGated(int rounds, bool cold) {
  kvspec::GatedDeltaShape shape;
  shape.value_heads = 16;
  shape.key_heads = 8;
  shape.dk = shape.dv = 128;
  const size_t floats = shape.value_heads * shape.dk * shape.dv;
  const size_t copies = cold ? 512 : 1;
  kvspec::AlignedVector<float> state(floats * copies);
  Uniform uniform{5};
  for (float& f : state) f = uniform(-0.1f, 0.1f);
  std::vector<float> q(shape.key_heads * shape.dk), k(q.size()), v(shape.value_heads * shape.dv),
      g(shape.value_heads), beta(shape.value_heads), y(v.size());
  for (float& f : q) f = uniform(-0.1f, 0.1f);
  for (float& f : k) f = uniform(-0.1f, 0.1f);
  for (float& f : v) f = uniform(-1.0f, 1.0f);
  // Gates near 1 and small betas keep the state bounded over many calls.
  for (float& f : g) f = uniform(0.98f, 1.0f);
  for (float& f : beta) f = uniform(0.0f, 0.05f);
  size_t next = 0;
  const Rounds r = Alternate(rounds, cold ? 400 : 2000, [&] {
    float* s = state.data() + floats * next;
    next = (next + 1) % copies;
    kvspec::GatedDeltaStep(s, s, q.data(), k.data(), v.data(), g.data(), beta.data(), y.data(),
                           shape);
  });
  std::printf("gated delta 16 x 128^2 (%s): off %7.3f us, on %7.3f us, on/off %s\n",
              cold ? "cold" : "hot", Median(r.t[0]), Median(r.t[1]), Range(r.ratio).c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 15;
  if (rounds < 1 || rounds > 1000) {
    std::fprintf(stderr, "usage: alternate [ROUNDS (1..1000, default 15)]\n");
    return 2;
  }
  // ALT_TARGET=NAME: the kernels on that Highway target (as hwy::TargetName
  // spells it, e.g. AVX2) instead of the best this CPU runs.
  if (const char* name = std::getenv("ALT_TARGET")) {
    int64_t chosen = 0;
    std::string names;
    for (int64_t t : kvspec::testing::AllTargets()) {
      if (std::string(hwy::TargetName(t)) == name) chosen = t;
      names += std::string(" ") + hwy::TargetName(t);
    }
    if (chosen == 0) {
      std::fprintf(stderr, "alternate: ALT_TARGET=%s is not a target this CPU runs (it runs:%s)\n",
                   name, names.c_str());
      return 2;
    }
    hwy::SetSupportedTargetsForTest(chosen);
  }
  const char* env = std::getenv("ALT_TOKENS");
  const long tokens = env != nullptr ? std::strtol(env, nullptr, 10) : 16384;
  if (tokens < 256 || tokens > 1048576) {
    std::fprintf(stderr, "alternate: ALT_TOKENS must be 256..1048576, not %s\n", env);
    return 2;
  }
  const char* kernel = std::getenv("ALT_KERNEL");
  const std::string which = kernel != nullptr ? kernel : "attention";
  if (which != "attention" && which != "conv" && which != "gated") {
    std::fprintf(stderr, "alternate: ALT_KERNEL must be attention, conv or gated, not %s\n",
                 kernel);
    return 2;
  }
  std::printf(
      "%d rounds; medians over the rounds, on/off: median [min..max] of the rounds' ratios\n",
      rounds);
  // Every kernel dispatches as attention does.
  std::printf("target %s\n", kvspec::AttentionTargetName());
  if (which == "conv") {
    for (size_t channels : {size_t{8192}, size_t{1024}}) {
      for (size_t k : {size_t{4}, size_t{1}}) RunConv(rounds, channels, k);
    }
    return 0;
  }
  if (which == "gated") {
    RunGated(rounds, false);
    RunGated(rounds, true);
    return 0;
  }
  for (int dim : {64, 128, 256}) {
    Run<float>(dim, rounds, static_cast<int>(tokens));
    Run<uint16_t>(dim, rounds, static_cast<int>(tokens));
  }
  RunWindow(rounds);
}
