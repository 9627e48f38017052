// Helpers of the core tests (core/*_test.cc, core/codec/*_test.cc):
// contents made up from a start value, appends and forwards through every
// layer with them, a layer config, the inputs of one layer, and errors
// expected to name their reason.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "kvspec/base/layer_config.h"
#include "kvspec/base/status.h"
#include "kvspec/core/kv_cache.h"
#include "kvspec/core/layout.h"
#include "kvspec/core/ssm_cache.h"

namespace kvspec::layout_test {

// n floats from `start` in steps of 0.01, repeating every 97.
inline std::vector<float> Filled(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + 0.01f * static_cast<float>(i % 97);
  return v;
}

// Appends `cols` to a store with made-up contents (the keys serve as the
// values).
inline Status AppendTo(AttentionCache& c, const ForwardColumns& cols) {
  const size_t n = static_cast<size_t>(c.rows()) * static_cast<size_t>(cols.columns) *
                   static_cast<size_t>(c.kvHeads()) * static_cast<size_t>(c.headDim());
  const std::vector<float> k = Filled(n, 0.5f);
  return c.Append(cols, k.data(), k.data());
}

// One forward of `cols` through every layer, with made-up contents.
inline Status RunForward(Layout& layout, const ForwardColumns& cols) {
  const size_t rows = static_cast<size_t>(layout.rows());
  const size_t L = static_cast<size_t>(cols.columns);
  std::vector<std::vector<float>> buffers;
  buffers.reserve(8 * layout.size());
  std::vector<AttentionIO> io(layout.size());
  for (size_t l = 0; l < layout.size(); ++l) {
    const LayerConfig& c = layout.config(l);
    if (c.kind == CacheKind::kSsm) {
      const size_t C = c.SsmChannels(), hv = static_cast<size_t>(c.heads);
      SsmIO ssm;
      ssm.conv_weights = buffers.emplace_back(Filled(C * c.conv, 0.1f)).data();
      ssm.x = buffers.emplace_back(Filled(rows * L * C, 0.2f)).data();
      ssm.gate = buffers.emplace_back(Filled(rows * L * hv, 0.5f)).data();
      ssm.beta = buffers.emplace_back(Filled(rows * L * hv, 0.3f)).data();
      io[l] = AttentionIO(ssm);
      continue;
    }
    const size_t q = rows * L * c.QueryHeads() * c.dim, kv = rows * L * c.heads * c.dim;
    const float* query = buffers.emplace_back(Filled(q, 0.4f)).data();
    const float* key = buffers.emplace_back(Filled(kv, 0.6f)).data();
    float* out = buffers.emplace_back(q, 0.0f).data();
    io[l] = AttentionIO(query, key, key, out);
  }
  return layout.Forward(cols, io);
}

// A layer of `kind`, with the config's default shape.
inline LayerConfig Layer(const std::string& name, CacheKind kind, int32_t window = 0,
                  int32_t capacity = 0) {
  LayerConfig c;
  c.name = name;
  c.kind = kind;
  c.window = window;
  c.capacity = capacity;
  return c;
}

// Inputs of a recurrent forward of L columns on `rows` rows (made-up
// values), for a cache called directly.
struct SsmInputs {
  std::vector<float> w, x, gate, beta;
  SsmIO io;
  SsmInputs(const SsmShape& s, int rows, int32_t L) {
    const size_t C = s.Channels(), n = static_cast<size_t>(rows) * static_cast<size_t>(L);
    w = Filled(C * static_cast<size_t>(s.conv), 0.1f);
    x = Filled(n * C, 0.2f);
    gate = Filled(n * s.GateFloats(), 0.5f);
    beta = Filled(n * static_cast<size_t>(s.value_heads), 0.3f);
    io.conv_weights = w.data();
    io.x = x.data();
    io.gate = gate.data();
    io.beta = beta.data();
  }
};

// q, k, v and out of one attention layer for a forward of `columns` columns
// (the keys serve as the values).
struct AttentionBuffers {
  AttentionBuffers(const LayerConfig& c, int rows, int32_t columns)
      : q(Filled(static_cast<size_t>(rows) * columns * c.QueryHeads() * c.dim, 0.4f)),
        k(Filled(static_cast<size_t>(rows) * columns * c.heads * c.dim, 0.6f)),
        out(q.size(), 0.0f) {}
  AttentionIO io() { return AttentionIO(q.data(), k.data(), k.data(), out.data()); }
  std::vector<float> q, k, out;
};

// `s` is an error whose message holds every one of `parts`.
inline void ExpectError(const Status& s, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(s.ok()) << "expected an error naming " << *parts.begin();
  for (const std::string& p : parts) {
    EXPECT_NE(s.message().find(p), std::string::npos) << "'" << p << "' not in: " << s.message();
  }
}

// `s` is an error whose message names `invariant`.
inline void ExpectBroken(const Status& s, const std::string& invariant) {
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(invariant), std::string::npos) << s.message();
}

}  // namespace kvspec::layout_test
