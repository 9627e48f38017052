// ggml peers of the benchmark suites: ggml's CPU backend (the prebuilt
// libggml* of the npm package node-llama-cpp that engines/llama.cpp pins,
// its best CPU variant for this machine loaded with
// ggml_backend_load_all_from_path, one thread) on the shapes of our
// benchmarks. Built only with KVSPEC_GGML_PEERS (the bench preset); the
// library never links ggml.
//
// Each peer has a "Once" form that computes one result into caller arrays,
// which the suites compare with our kernels on a small shape before the
// first timed run (so the peer is known to compute the same thing), and a
// benchmark form: cold (rotating through at least `cold_bytes` of distinct
// inputs, one graph per input set, as our cold runs do) or hot (one input
// set reused).
#pragma once

#include <benchmark/benchmark.h>

#include <cstddef>
#include <string>

#include "kvspec/kernels/kv_blocks.h"

namespace kvspec {
namespace bench {

// "ggml CPU <features>" of the loaded CPU variant (loads it on first use).
const std::string& GgmlLabel();

// Rounds each value to the nearest f16 (ggml's conversion), in place.
void GgmlRoundToF16(float* values, size_t n);

// FLASH_ATTN_EXT: `columns` queries of `q_heads` heads over `n_kv` slots of
// `kv_heads` heads (query head h reads KV head h / (q_heads / kv_heads)),
// scale 1/sqrt(dim), precision F32 as llama.cpp sets it; K/V stored as f32
// or f16, or in ggml's q8_0 or q4_0 blocks (quant; quantized by ggml's
// quantize_row_*_ref). columns > 1: causal, query j sees slots 0 .. n_kv -
// columns + j.
struct GgmlAttentionShape {
  int dim = 128;
  int kv_heads = 8;
  int q_heads = 32;
  int n_kv = 0;
  int columns = 1;
  bool f16 = false;
  KvType quant = KvType::kF32;  // kQ8_0 or kQ4_0: K/V in those blocks (f16 ignored)
};
// q, out: [columns][q_heads][dim]; k, v: [kv_heads][n_kv][dim] (fp32;
// rounded to f16 when shape.f16).
void GgmlAttendOnce(const GgmlAttentionShape& shape, const float* q, const float* k,
                    const float* v, float* out);
// bytes_per_second: K and V bytes per call; flops (columns > 1): 4 * dim per
// query head and admitted (query, slot) pair.
void GgmlAttentionBenchmark(benchmark::State& state, const GgmlAttentionShape& shape, bool cold,
                            size_t cold_bytes);

// ggml's quantize_row_q8_0_ref or quantize_row_q4_0_ref (ggml-base): x [n]
// (n a multiple of 32) into n / 32 blocks at out.
void GgmlQuantizeRefOnce(KvType type, const float* x, size_t n, void* out);
// ggml's CPU quantizer of q8_0 or q4_0 (the loaded CPU variant's
// from_float: quantize_row_q8_0, quantize_row_q4_0), as llama.cpp writes
// its KV cache: `rows` rows of `dim` values per iteration (one token's keys
// and values), hot.
void GgmlQuantizeBenchmark(benchmark::State& state, KvType type, size_t rows, size_t dim);

// GATED_DELTA_NET, one token, one sequence, scalar gate per head, K = 1.
// ggml's conventions: value head h reads key head h % key_heads; the state
// of a head is [dv][dk] (our trace order); the gate enters as log g (ggml
// applies exp); q is scaled by 1/sqrt(dk) inside the op.
struct GgmlDeltaShape {
  int value_heads = 16;
  int key_heads = 8;
  int dim = 128;  // dk = dv
};
// q, k: [key_heads][dim]; v, y: [value_heads][dim]; log_g, beta:
// [value_heads]; state_in, state_out: [value_heads][dim][dim].
void GgmlDeltaOnce(const GgmlDeltaShape& shape, const float* q, const float* k, const float* v,
                   const float* log_g, const float* beta, const float* state_in, float* y,
                   float* state_out);
// bytes_per_second: state bytes read + written; flops: 7 per state element.
void GgmlDeltaBenchmark(benchmark::State& state, const GgmlDeltaShape& shape, bool cold,
                        size_t cold_bytes);

// SSM_CONV then SILU, one token: window [channels][kernel] (oldest first,
// the current token last), weights [channels][kernel], u [channels]. Hot.
void GgmlConvOnce(size_t channels, size_t kernel, const float* window, const float* weights,
                  float* u);
void GgmlConvBenchmark(benchmark::State& state, size_t channels, size_t kernel);

}  // namespace bench
}  // namespace kvspec
