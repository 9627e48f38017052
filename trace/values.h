// Token contents of docs/TRACE.md ("Values"): a seeded generator per
// layer, id and position, so that any implementation reproduces the exact
// fp32 inputs a trace writes into its caches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvspec {

// The splitmix64 finaliser TRACE.md calls mix().
inline uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Draw i (1-based) of the stream with seed s, as a float in [-1, 1).
class ValueStream {
 public:
  explicit ValueStream(uint64_t seed) : seed_(seed) {}
  float Next() {
    ++index_;
    const uint64_t u = Mix(seed_ + index_ * 0x9E3779B97F4A7C15ull);
    // (u >> 40) has 24 bits: exact in fp32, as is the scaling below.
    return static_cast<float>(static_cast<double>(u >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
  }
  // Fills out[0, count) with the next count draws.
  void Fill(float* out, size_t count) {
    for (size_t i = 0; i < count; ++i) out[i] = Next();
  }

 private:
  uint64_t seed_;
  uint64_t index_ = 0;
};

// Seed of the stream of token (layer, id, pos); layer counts from 0 in
// header order.
inline uint64_t TokenSeed(uint64_t layer, uint64_t id, uint64_t pos) {
  return Mix(Mix(Mix(layer) ^ id) ^ pos);
}

// Seed of layer l's weight stream.
inline uint64_t WeightSeed(uint64_t layer) {
  return Mix(Mix(layer) ^ 0xFFFFFFFFFFFFFFFFull);
}

namespace trace {

// The token contents a trace writes, drawn from the streams above (defined
// in values.cc). Layers count from 0 in header order.

// q [q_heads * dim], k and v [heads * dim] of attention token (layer, id,
// pos), drawn in that order.
void AttentionToken(int layer, int32_t id, int32_t pos, int q_heads, int heads, int dim,
                    float* q, float* k, float* v);
// Pre-conv inputs x[C], gate g[Hv] = sigmoid(2 + a) and beta[Hv] =
// sigmoid(b) of recurrent token (layer, id, pos).
void RecurrentToken(int layer, int32_t id, int32_t pos, size_t channels, size_t value_heads,
                    float* x, float* gate, float* beta);
// Layer l's conv weights, time-major [K][C].
std::vector<float> ConvWeights(int layer, size_t channels, size_t kernel);
// The bit pattern stored in pad columns (a quiet NaN), so that a padding
// slot a mask admits is recognised by its bytes.
float PadValue();

}  // namespace trace
}  // namespace kvspec
