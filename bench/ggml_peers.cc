// ggml peers (bench/ggml_peers.h).
#include "kvspec/bench/ggml_peers.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include <dlfcn.h>
#include <link.h>

#include "kvspec/bench/records.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

// ggml-base's reference quantizers (declared in ggml's src/ggml-quants.h,
// which the bench build does not take out of the bundle).
extern "C" {
void quantize_row_q8_0_ref(const float* x, void* y, int64_t k);
void quantize_row_q4_0_ref(const float* x, void* y, int64_t k);
}

#ifndef KVSPEC_GGML_BINS
#error "KVSPEC_GGML_BINS (the folder of the prebuilt libggml*) must be defined"
#endif

namespace kvspec {
namespace bench {
namespace {

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "ggml peer: %s\n", what);
  std::abort();
}

// Only ggml's warnings and errors reach stderr.
void Log(enum ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_WARN || level == GGML_LOG_LEVEL_ERROR) {
    std::fputs(text, stderr);
  }
}

struct Cpu {
  ggml_backend_t backend = nullptr;
  std::string label;
};

Cpu& Backend() {
  static Cpu* cpu = [] {
    ggml_log_set(Log, nullptr);
    ggml_backend_load_all_from_path(KVSPEC_GGML_BINS);
    ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (dev == nullptr) Die("no CPU backend loaded from " KVSPEC_GGML_BINS);
    auto* c = new Cpu();
    c->backend = ggml_backend_dev_init(dev, nullptr);
    if (c->backend == nullptr) Die("ggml_backend_dev_init failed");
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
    auto set_threads = reinterpret_cast<ggml_backend_set_n_threads_t>(
        ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads"));
    if (set_threads == nullptr) Die("the CPU backend has no ggml_backend_set_n_threads");
    set_threads(c->backend, 1);
    c->label = "ggml CPU";
    auto features = reinterpret_cast<ggml_backend_get_features_t>(
        ggml_backend_reg_get_proc_address(reg, "ggml_backend_get_features"));
    if (features != nullptr) {
      for (const ggml_backend_feature* f = features(reg); f->name != nullptr; ++f) {
        const std::string name = f->name;
        if (name.rfind("AVX", 0) == 0 || name == "FMA" || name == "F16C") c->label += " " + name;
      }
    }
    return c;
  }();
  return *cpu;
}

void Write(ggml_tensor* t, const float* values) {
  const int64_t n = ggml_nelements(t);
  if (t->type == GGML_TYPE_F32) {
    std::memcpy(t->data, values, static_cast<size_t>(n) * sizeof(float));
  } else if (t->type == GGML_TYPE_F16) {
    ggml_fp32_to_fp16_row(values, static_cast<ggml_fp16_t*>(t->data), n);
  } else if (t->type == GGML_TYPE_Q8_0 || t->type == GGML_TYPE_Q4_0) {
    ggml_quantize_chunk(t->type, values, t->data, 0, n / t->ne[0], t->ne[0], nullptr);
  } else {
    Die("unexpected tensor type");
  }
}

// Input tensors in one context and backend buffer, one graph per case in
// another (its outputs allocated there too). One set alive at a time.
struct Set {
  std::string key;
  ggml_context* data = nullptr;
  ggml_backend_buffer_t data_buffer = nullptr;
  ggml_context* ops = nullptr;
  ggml_backend_buffer_t ops_buffer = nullptr;
  std::vector<ggml_tensor*> shared;                // inputs every case reads
  std::vector<std::vector<ggml_tensor*>> inputs;   // per case
  std::vector<ggml_tensor*> outs;                  // per case
  std::vector<ggml_cgraph*> graphs;                // per case

  Set() = default;
  Set(const Set&) = delete;
  Set& operator=(const Set&) = delete;
  ~Set() {
    if (ops_buffer) ggml_backend_buffer_free(ops_buffer);
    if (data_buffer) ggml_backend_buffer_free(data_buffer);
    if (ops) ggml_free(ops);
    if (data) ggml_free(data);
  }
};

ggml_context* NewContext(size_t tensors, size_t graphs) {
  ggml_init_params params;
  params.mem_size = tensors * ggml_tensor_overhead() +
                    graphs * ggml_graph_overhead_custom(16, false) + (size_t{1} << 16);
  params.mem_buffer = nullptr;
  params.no_alloc = true;
  ggml_context* ctx = ggml_init(params);
  if (ctx == nullptr) Die("ggml_init failed");
  return ctx;
}

// Builds a set of `count` cases: make_shared(ctx) creates the shared
// inputs, make_case(ctx) one case's inputs, make_op(ctx, shared, inputs)
// the case's output. Allocates both contexts in the CPU backend.
using Tensors = std::vector<ggml_tensor*>;
std::unique_ptr<Set> Build(size_t count, size_t shared_tensors, size_t case_tensors,
                           const std::function<Tensors(ggml_context*)>& make_shared,
                           const std::function<Tensors(ggml_context*)>& make_case,
                           const std::function<ggml_tensor*(ggml_context*, const Tensors&,
                                                            const Tensors&)>& make_op) {
  auto set = std::make_unique<Set>();
  set->data = NewContext(shared_tensors + count * case_tensors + 4, 0);
  set->shared = make_shared(set->data);
  for (size_t i = 0; i < count; ++i) set->inputs.push_back(make_case(set->data));
  set->data_buffer = ggml_backend_alloc_ctx_tensors(set->data, Backend().backend);
  if (set->data_buffer == nullptr) Die("could not allocate the inputs");
  set->ops = NewContext(count * 8 + 8, count);
  for (size_t i = 0; i < count; ++i) {
    ggml_tensor* out = make_op(set->ops, set->shared, set->inputs[i]);
    ggml_cgraph* graph = ggml_new_graph_custom(set->ops, 16, false);
    ggml_build_forward_expand(graph, out);
    set->outs.push_back(out);
    set->graphs.push_back(graph);
  }
  set->ops_buffer = ggml_backend_alloc_ctx_tensors(set->ops, Backend().backend);
  if (set->ops_buffer == nullptr) Die("could not allocate the outputs");
  return set;
}

std::unique_ptr<Set>& Resident() {
  static auto* set = new std::unique_ptr<Set>();
  return *set;
}

void Compute(const Set& set, size_t i) {
  if (ggml_backend_graph_compute(Backend().backend, set.graphs[i]) != GGML_STATUS_SUCCESS) {
    Die("ggml_backend_graph_compute failed");
  }
}

// Runs the set's graphs in turn (cold: all of them; hot: the first).
// Returns the CPU seconds of the loop.
double Run(benchmark::State& state, const Set& set, bool cold) {
  const size_t rotate = cold ? set.graphs.size() : 1;
  size_t next = 0;
  const double start = ProcessSeconds();
  for (auto _ : state) {
    Compute(set, next);
    next = next + 1 == rotate ? 0 : next + 1;
    benchmark::ClobberMemory();
  }
  state.counters["caches"] = static_cast<double>(rotate);
  state.SetLabel(Backend().label);
  return ProcessSeconds() - start;
}

size_t ColdCount(size_t bytes_per_case, size_t cold_bytes) {
  return std::min<size_t>(std::max<size_t>((cold_bytes + bytes_per_case - 1) / bytes_per_case, 2),
                          4096);
}

// ---------------------------------------------------------------------------
// FLASH_ATTN_EXT

ggml_type KvTensorType(const GgmlAttentionShape& s) {
  if (s.quant == KvType::kQ8_0) return GGML_TYPE_Q8_0;
  if (s.quant == KvType::kQ4_0) return GGML_TYPE_Q4_0;
  return s.f16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
}

std::unique_ptr<Set> AttentionSet(const GgmlAttentionShape& s, size_t count) {
  const ggml_type type = KvTensorType(s);
  return Build(
      count, 2, 2,
      [&](ggml_context* ctx) {
        Tensors t;
        // q as we store it, [columns][q_heads][dim]: ne = {dim, q_heads, columns}.
        t.push_back(ggml_new_tensor_3d(ctx, GGML_TYPE_F32, s.dim, s.q_heads, s.columns));
        t.push_back(s.columns > 1 ? ggml_new_tensor_2d(ctx, GGML_TYPE_F16, s.n_kv, s.columns)
                                  : nullptr);
        return t;
      },
      [&](ggml_context* ctx) {
        return Tensors{ggml_new_tensor_3d(ctx, type, s.dim, s.n_kv, s.kv_heads),
                       ggml_new_tensor_3d(ctx, type, s.dim, s.n_kv, s.kv_heads)};
      },
      [&](ggml_context* ctx, const Tensors& shared, const Tensors& in) {
        // [dim, columns, q_heads], as llama.cpp permutes its queries.
        ggml_tensor* q = ggml_permute(ctx, shared[0], 0, 2, 1, 3);
        ggml_tensor* out = ggml_flash_attn_ext(ctx, q, in[0], in[1], shared[1],
                                               1.0f / std::sqrt(static_cast<float>(s.dim)),
                                               0.0f, 0.0f);
        ggml_flash_attn_ext_set_prec(out, GGML_PREC_F32);
        return out;  // [dim, q_heads, columns]: our out layout
      });
}

void FillMask(const GgmlAttentionShape& s, ggml_tensor* mask) {
  if (mask == nullptr) return;
  std::vector<float> m(static_cast<size_t>(s.n_kv) * s.columns);
  for (int j = 0; j < s.columns; ++j) {
    for (int t = 0; t < s.n_kv; ++t) {
      m[static_cast<size_t>(j) * s.n_kv + t] = t <= s.n_kv - s.columns + j ? 0.0f : -INFINITY;
    }
  }
  Write(mask, m.data());
}

}  // namespace

const std::string& GgmlLabel() { return Backend().label; }

void GgmlRoundToF16(float* values, size_t n) {
  std::vector<ggml_fp16_t> half(n);
  ggml_fp32_to_fp16_row(values, half.data(), static_cast<int64_t>(n));
  ggml_fp16_to_fp32_row(half.data(), values, static_cast<int64_t>(n));
}

void GgmlAttendOnce(const GgmlAttentionShape& shape, const float* q, const float* k,
                    const float* v, float* out) {
  std::unique_ptr<Set> set = AttentionSet(shape, 1);
  Write(set->shared[0], q);
  FillMask(shape, set->shared[1]);
  Write(set->inputs[0][0], k);
  Write(set->inputs[0][1], v);
  Compute(*set, 0);
  std::memcpy(out, set->outs[0]->data, ggml_nbytes(set->outs[0]));
}

void GgmlAttentionBenchmark(benchmark::State& state, const GgmlAttentionShape& shape, bool cold,
                            size_t cold_bytes) {
  const size_t kv_bytes = 2 * static_cast<size_t>(shape.kv_heads) * shape.n_kv *
                          ggml_row_size(KvTensorType(shape), shape.dim);
  const size_t count = cold ? ColdCount(kv_bytes, cold_bytes) : 1;
  const std::string key = "attention/" + std::to_string(shape.dim) + "/" +
                          std::to_string(shape.n_kv) + "/" + std::to_string(shape.columns) + "/" +
                          std::to_string(shape.f16) + "/" +
                          KvTypeName(shape.quant) + "/" + std::to_string(count);
  std::unique_ptr<Set>& set = Resident();
  if (!set || set->key != key) {
    set.reset();  // release the previous set first
    set = AttentionSet(shape, count);
    set->key = key;
    Values values(0x6767756Dull + static_cast<uint64_t>(shape.n_kv));
    std::vector<float> x(static_cast<size_t>(ggml_nelements(set->shared[0])));
    for (float& e : x) e = values.Next();
    Write(set->shared[0], x.data());
    FillMask(shape, set->shared[1]);
    x.resize(static_cast<size_t>(ggml_nelements(set->inputs[0][0])));
    for (float& e : x) e = values.Next();
    Write(set->inputs[0][0], x.data());
    for (float& e : x) e = values.Next();
    Write(set->inputs[0][1], x.data());
    // Every case its own memory, the same values.
    for (size_t i = 1; i < count; ++i) {
      for (int j = 0; j < 2; ++j) {
        std::memcpy(set->inputs[i][j]->data, set->inputs[0][j]->data,
                    ggml_nbytes(set->inputs[0][j]));
      }
    }
  }
  const double seconds = Run(state, *set, cold);
  const double iterations = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(static_cast<double>(kv_bytes) * iterations));
  if (shape.columns > 1 && seconds > 0) {
    double pairs = 0;
    for (int j = 0; j < shape.columns; ++j) pairs += shape.n_kv - shape.columns + j + 1;
    const double flops = pairs * iterations * shape.q_heads * 4.0 * shape.dim;
    state.counters["flops"] = benchmark::Counter(flops, benchmark::Counter::kIsRate);
  }
}

// ---------------------------------------------------------------------------
// Quantizers

void GgmlQuantizeRefOnce(KvType type, const float* x, size_t n, void* out) {
  if (type == KvType::kQ8_0) {
    quantize_row_q8_0_ref(x, out, static_cast<int64_t>(n));
  } else if (type == KvType::kQ4_0) {
    quantize_row_q4_0_ref(x, out, static_cast<int64_t>(n));
  } else {
    Die("GgmlQuantizeRefOnce: not a block type");
  }
}

namespace {

// The loaded CPU variant's ggml_get_type_traits_cpu: the library named
// libggml-cpu-* among those loaded, opened again (RTLD_NOLOAD) for dlsym.
using TypeTraitsCpu = const ggml_type_traits_cpu* (*)(ggml_type);
TypeTraitsCpu CpuTypeTraits() {
  static TypeTraitsCpu traits = [] {
    Backend();  // loads the variant
    std::string path;
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* data) {
          const std::string name = info->dlpi_name != nullptr ? info->dlpi_name : "";
          if (name.find("libggml-cpu") != std::string::npos) *static_cast<std::string*>(data) = name;
          return 0;
        },
        &path);
    if (path.empty()) Die("no libggml-cpu* loaded");
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (handle == nullptr) Die("could not reopen the CPU variant");
    auto f = reinterpret_cast<TypeTraitsCpu>(dlsym(handle, "ggml_get_type_traits_cpu"));
    if (f == nullptr) Die("the CPU variant has no ggml_get_type_traits_cpu");
    return f;
  }();
  return traits;
}

}  // namespace

void GgmlQuantizeBenchmark(benchmark::State& state, KvType type, size_t rows, size_t dim) {
  const ggml_type t = type == KvType::kQ8_0 ? GGML_TYPE_Q8_0 : GGML_TYPE_Q4_0;
  const ggml_from_float_t quantize = CpuTypeTraits()(t)->from_float;
  if (quantize == nullptr) Die("no CPU quantizer");
  std::vector<float> x(rows * dim);
  Values values(0x7175616E74ull + dim);
  for (float& e : x) e = values.Next();
  const size_t row_bytes = ggml_row_size(t, static_cast<int64_t>(dim));
  std::vector<uint8_t> out(rows * row_bytes);
  for (auto _ : state) {
    for (size_t r = 0; r < rows; ++r) {
      quantize(x.data() + r * dim, out.data() + r * row_bytes, static_cast<int64_t>(dim));
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(static_cast<double>(state.iterations()) *
                                               static_cast<double>(x.size() * sizeof(float))));
  state.SetLabel(Backend().label);
}

// ---------------------------------------------------------------------------
// GATED_DELTA_NET

namespace {

std::unique_ptr<Set> DeltaSet(const GgmlDeltaShape& s, size_t count) {
  return Build(
      count, 5, 1,
      [&](ggml_context* ctx) {
        return Tensors{ggml_new_tensor_4d(ctx, GGML_TYPE_F32, s.dim, s.key_heads, 1, 1),
                       ggml_new_tensor_4d(ctx, GGML_TYPE_F32, s.dim, s.key_heads, 1, 1),
                       ggml_new_tensor_4d(ctx, GGML_TYPE_F32, s.dim, s.value_heads, 1, 1),
                       ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 1, s.value_heads, 1, 1),
                       ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 1, s.value_heads, 1, 1)};
      },
      [&](ggml_context* ctx) {
        return Tensors{ggml_new_tensor_4d(ctx, GGML_TYPE_F32, s.dim, s.dim, s.value_heads, 1)};
      },
      [&](ggml_context* ctx, const Tensors& shared, const Tensors& in) {
        return ggml_gated_delta_net(ctx, shared[0], shared[1], shared[2], shared[3], shared[4],
                                    in[0], 1);
      });
}

void FillDeltaInputs(const GgmlDeltaShape& s, Set* set, uint64_t seed) {
  Values values(seed);
  for (int i = 0; i < 5; ++i) {
    std::vector<float> x(static_cast<size_t>(ggml_nelements(set->shared[i])));
    for (float& e : x) {
      const float r = values.Next();
      // q, k, v in [-1, 1) (k scaled down so the state stays bounded); the
      // log gate of g in (0.90, 0.99); beta in (0.2, 0.8).
      e = i == 3 ? std::log(0.945f + 0.045f * r) : i == 4 ? 0.5f + 0.3f * r : i == 1 ? 0.1f * r : r;
    }
    Write(set->shared[i], x.data());
  }
  (void)s;
}

}  // namespace

void GgmlDeltaOnce(const GgmlDeltaShape& shape, const float* q, const float* k, const float* v,
                   const float* log_g, const float* beta, const float* state_in, float* y,
                   float* state_out) {
  std::unique_ptr<Set> set = DeltaSet(shape, 1);
  Write(set->shared[0], q);
  Write(set->shared[1], k);
  Write(set->shared[2], v);
  Write(set->shared[3], log_g);
  Write(set->shared[4], beta);
  Write(set->inputs[0][0], state_in);
  Compute(*set, 0);
  const size_t y_floats = static_cast<size_t>(shape.value_heads) * shape.dim;
  const float* out = static_cast<const float*>(set->outs[0]->data);
  std::memcpy(y, out, y_floats * sizeof(float));
  std::memcpy(state_out, out + y_floats, y_floats * shape.dim * sizeof(float));
}

void GgmlDeltaBenchmark(benchmark::State& state, const GgmlDeltaShape& shape, bool cold,
                        size_t cold_bytes) {
  const size_t state_bytes = static_cast<size_t>(shape.value_heads) * shape.dim * shape.dim *
                             sizeof(float);
  const size_t count = cold ? ColdCount(state_bytes, cold_bytes) : 1;
  const std::string key = "delta/" + std::to_string(shape.value_heads) + "/" +
                          std::to_string(shape.key_heads) + "/" + std::to_string(shape.dim) +
                          "/" + std::to_string(count);
  std::unique_ptr<Set>& set = Resident();
  if (!set || set->key != key) {
    set.reset();
    set = DeltaSet(shape, count);
    set->key = key;
    FillDeltaInputs(shape, set.get(), 0x6764656C7461ull);
    std::vector<float> s(state_bytes / sizeof(float));
    Values values(0x7374617465ull);
    for (float& e : s) e = 0.1f * values.Next();
    for (size_t i = 0; i < count; ++i) Write(set->inputs[i][0], s.data());
    // Outputs written once, so no page faults while timing.
    for (size_t i = 0; i < count; ++i) std::memset(set->outs[i]->data, 0, ggml_nbytes(set->outs[i]));
  }
  const double seconds = Run(state, *set, cold);
  const double iterations = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(2.0 * static_cast<double>(state_bytes) * iterations));
  const double flops = 7.0 * static_cast<double>(state_bytes / sizeof(float)) * iterations;
  state.counters["flops"] = benchmark::Counter(flops, benchmark::Counter::kIsRate);
  if (iterations > 0) state.counters["us_per_step"] = 1e6 * seconds / iterations;
}

// ---------------------------------------------------------------------------
// SSM_CONV + SILU

namespace {

std::unique_ptr<Set> ConvSet(size_t channels, size_t kernel) {
  const int64_t c = static_cast<int64_t>(channels), k = static_cast<int64_t>(kernel);
  return Build(
      1, 2, 0,
      [&](ggml_context* ctx) {
        return Tensors{ggml_new_tensor_3d(ctx, GGML_TYPE_F32, k, c, 1),
                       ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, c)};
      },
      [&](ggml_context*) { return Tensors{}; },
      [&](ggml_context* ctx, const Tensors& shared, const Tensors&) {
        return ggml_silu(ctx, ggml_ssm_conv(ctx, shared[0], shared[1]));
      });
}

}  // namespace

void GgmlConvOnce(size_t channels, size_t kernel, const float* window, const float* weights,
                  float* u) {
  std::unique_ptr<Set> set = ConvSet(channels, kernel);
  Write(set->shared[0], window);
  Write(set->shared[1], weights);
  Compute(*set, 0);
  std::memcpy(u, set->outs[0]->data, channels * sizeof(float));
}

void GgmlConvBenchmark(benchmark::State& state, size_t channels, size_t kernel) {
  const std::string key = "conv/" + std::to_string(channels) + "/" + std::to_string(kernel);
  std::unique_ptr<Set>& set = Resident();
  if (!set || set->key != key) {
    set.reset();
    set = ConvSet(channels, kernel);
    set->key = key;
    Values values(0x636F6E76ull);
    std::vector<float> x(channels * kernel);
    for (float& e : x) e = values.Next();
    Write(set->shared[0], x.data());
    for (float& e : x) e = 0.5f * values.Next();
    Write(set->shared[1], x.data());
  }
  const double seconds = Run(state, *set, /*cold=*/false);
  const double iterations = static_cast<double>(state.iterations());
  // window + weights read, u written
  state.SetBytesProcessed(static_cast<int64_t>(
      static_cast<double>((2 * kernel + 1) * channels * sizeof(float)) * iterations));
  state.SetItemsProcessed(static_cast<int64_t>(iterations * static_cast<double>(channels)));
  if (iterations > 0) state.counters["us_per_step"] = 1e6 * seconds / iterations;
}

}  // namespace bench
}  // namespace kvspec
