// Token contents of docs/TRACE.md ("Values").
#include "kvspec/trace/values.h"

#include <cmath>
#include <cstring>

namespace kvspec::trace {

void AttentionToken(int layer, int32_t id, int32_t pos, int q_heads, int heads, int dim,
                    float* q, float* k, float* v) {
  ValueStream stream(TokenSeed(static_cast<uint64_t>(layer), static_cast<uint64_t>(id),
                               static_cast<uint64_t>(pos)));
  const size_t n = static_cast<size_t>(heads) * dim;
  stream.Fill(q, static_cast<size_t>(q_heads) * dim);
  stream.Fill(k, n);
  stream.Fill(v, n);
}

void RecurrentToken(int layer, int32_t id, int32_t pos, size_t channels, size_t value_heads,
                    float* x, float* gate, float* beta) {
  ValueStream stream(TokenSeed(static_cast<uint64_t>(layer), static_cast<uint64_t>(id),
                               static_cast<uint64_t>(pos)));
  stream.Fill(x, channels);
  for (size_t h = 0; h < value_heads; ++h) {
    const float a = stream.Next();
    gate[h] = 1.0f / (1.0f + std::exp(-(2.0f + a)));
  }
  for (size_t h = 0; h < value_heads; ++h) {
    const float b = stream.Next();
    beta[h] = 1.0f / (1.0f + std::exp(-b));
  }
}

std::vector<float> ConvWeights(int layer, size_t channels, size_t kernel) {
  // Drawn channel-major (w[c][j] is draw c*K + j + 1), times 0.5; returned
  // time-major [K][C] as the kernel takes it.
  ValueStream stream(WeightSeed(static_cast<uint64_t>(layer)));
  std::vector<float> w(channels * kernel);
  for (size_t c = 0; c < channels; ++c) {
    for (size_t j = 0; j < kernel; ++j) w[j * channels + c] = stream.Next() * 0.5f;
  }
  return w;
}

float PadValue() {
  const uint32_t bits = 0x7FC0DEADu;  // a quiet NaN with a recognisable payload
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

}  // namespace kvspec::trace
