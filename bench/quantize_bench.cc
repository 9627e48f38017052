// The quantizers of q8_0 and q4_0 KV storage (kernels/quantize.h), in the
// attention_bench binary:
// - BM_Quantize/<target>/<q8_0|q4_0>/<head dim>: one token written, its
//   keys and values of 8 KV heads (16 rows of `head dim` values), hot;
// - BM_QuantizeGgml/<q8_0|q4_0>/<head dim> (bench preset): ggml's CPU
//   quantizer on the same rows (bench/ggml_peers.h). Before the first, our
//   quantizers (the reference and every target's) are checked against
//   ggml's quantize_row_*_ref byte for byte over rows of many scales and
//   exact ties; a mismatch fails every BM_QuantizeGgml run.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#ifdef KVSPEC_GGML_PEERS
#include "kvspec/bench/ggml_peers.h"
#endif
#include "kvspec/bench/dispatch_check.h"
#include "kvspec/bench/records.h"
#include "kvspec/kernels/kv_blocks.h"
#include "kvspec/kernels/quantize.h"
#include "kvspec/testing/target_scope.h"
#include "hwy/targets.h"

namespace kvspec {
namespace bench {
namespace {

constexpr size_t kTokenRows = 2 * 8;  // keys and values of 8 KV heads
constexpr int kQuantDims[] = {64, 128, 256};

void Quantize(KvType type, const float* x, size_t n, void* out) {
  if (type == KvType::kQ8_0) {
    QuantizeQ8_0(x, n, static_cast<BlockQ8_0*>(out));
  } else {
    QuantizeQ4_0(x, n, static_cast<BlockQ4_0*>(out));
  }
}

void BM_Quantize(benchmark::State& state, int64_t target, KvType type, size_t dim) {
  DispatchCheck scope(target, QuantizeTargetName, "QuantizeQ8_0");
  if (!scope.Check(state)) return;
  std::vector<float> x(kTokenRows * dim);
  Values values(0x7175616E74ull + dim);
  for (float& e : x) e = values.Next();
  const size_t row_bytes = KvRowBytes(type, static_cast<int>(dim));
  std::vector<uint8_t> out(kTokenRows * row_bytes);
  for (auto _ : state) {
    for (size_t r = 0; r < kTokenRows; ++r) {
      Quantize(type, x.data() + r * dim, dim, out.data() + r * row_bytes);
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(static_cast<double>(state.iterations()) *
                                               static_cast<double>(x.size() * sizeof(float))));
}

#ifdef KVSPEC_GGML_PEERS
// Rows of 1..8 blocks: uniform at scales 1e-30..1e4, integers and halves
// (exact ties of q8_0's rounding at scale 1), a lone largest magnitude.
bool QuantizersMatchGgml(benchmark::State& state) {
  static int verdict = -1;  // -1: not yet checked
  if (verdict < 0) {
    verdict = 1;
    Values values(0x676D6C71ull);
    std::string failure;
    for (int trial = 0; trial < 2000 && failure.empty(); ++trial) {
      const size_t n = 32 * (1 + static_cast<size_t>(trial % 8));
      const float scale = std::pow(10.0f, static_cast<float>(trial % 35) - 30.0f);
      std::vector<float> x(n);
      for (size_t i = 0; i < n; ++i) {
        const float u = values.Next();  // in [-1, 1)
        x[i] = trial % 3 == 0 ? std::round(u * 254.0f) * 0.5f : u * scale;
      }
      if (trial % 5 == 0) x[static_cast<size_t>(trial) % n] = -2 * scale;
      for (KvType type : {KvType::kQ8_0, KvType::kQ4_0}) {
        const size_t bytes = KvRowBytes(type, static_cast<int>(n));
        std::vector<uint8_t> want(bytes), ref(bytes), got(bytes);
        GgmlQuantizeRefOnce(type, x.data(), n, want.data());
        if (type == KvType::kQ8_0) {
          QuantizeQ8_0Reference(x.data(), n, reinterpret_cast<BlockQ8_0*>(ref.data()));
        } else {
          QuantizeQ4_0Reference(x.data(), n, reinterpret_cast<BlockQ4_0*>(ref.data()));
        }
        if (ref != want) failure = std::string(KvTypeName(type)) + " reference";
        for (const int64_t target : testing::AllTargets()) {
          testing::TargetScope scope(target);
          Quantize(type, x.data(), n, got.data());
          if (got != want) failure = std::string(KvTypeName(type)) + " on " + hwy::TargetName(target);
        }
        if (!failure.empty()) {
          failure += " differs from ggml's quantize_row_" + std::string(KvTypeName(type)) +
                     "_ref on trial " + std::to_string(trial);
          break;
        }
      }
    }
    if (!failure.empty()) {
      std::fprintf(stderr, "%s\n", failure.c_str());
      verdict = 0;
    }
  }
  if (verdict == 0) state.SkipWithError("our quantizers differ from ggml's *_ref (see stderr)");
  return verdict == 1;
}
#endif

}  // namespace

void RegisterQuantizeBenchmarks() {
  for (const KvType type : {KvType::kQ8_0, KvType::kQ4_0}) {
    for (const int dim : kQuantDims) {
      for (const int64_t target : testing::AllTargets()) {
        const std::string name = std::string("BM_Quantize/") + hwy::TargetName(target) + "/" +
                                 KvTypeName(type);
        benchmark::RegisterBenchmark(name.c_str(), [target, type, dim](benchmark::State& state) {
          BM_Quantize(state, target, type, static_cast<size_t>(dim));
        })->Arg(dim)->Unit(benchmark::kNanosecond);
      }
#ifdef KVSPEC_GGML_PEERS
      benchmark::RegisterBenchmark((std::string("BM_QuantizeGgml/") + KvTypeName(type)).c_str(),
                                   [type, dim](benchmark::State& state) {
                                     if (!QuantizersMatchGgml(state)) return;
                                     GgmlQuantizeBenchmark(state, type, kTokenRows,
                                                           static_cast<size_t>(dim));
                                   })
          ->Arg(dim)
          ->Unit(benchmark::kNanosecond);
#endif
    }
  }
}

}  // namespace bench
}  // namespace kvspec
