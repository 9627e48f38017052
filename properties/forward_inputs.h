// Deterministic inputs of one forward on a layout, for the properties that
// drive layouts directly: every value drawn from a seed (contents decide
// neither refusals nor sizes; gates and betas lie in (0, 1)).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvspec/core/layout.h"
#include "kvspec/testing/fill.h"

namespace kvspec {

struct ForwardInputs {
  std::vector<std::vector<float>> a, b, c, d, w;
  std::vector<AttentionIO> io;
  ForwardInputs(const Layout& layout, int32_t columns, uint32_t seed) {
    const size_t n = layout.size();
    a.resize(n), b.resize(n), c.resize(n), d.resize(n), w.resize(n);
    const size_t cells = static_cast<size_t>(layout.rows()) * static_cast<size_t>(columns);
    auto fill = [&seed](std::vector<float>* v, size_t count, float lo, float hi) {
      testing::FillUniform(v, count, lo, hi, &seed);
    };
    for (size_t l = 0; l < n; ++l) {
      const LayerConfig& cfg = layout.config(l);
      if (cfg.kind == CacheKind::kSsm) {
        const size_t hv = static_cast<size_t>(cfg.heads);
        fill(&w[l], cfg.SsmChannels() * static_cast<size_t>(cfg.conv), -0.5f, 0.5f);
        fill(&a[l], cells * cfg.SsmChannels(), -1.0f, 1.0f);
        fill(&b[l], cells * hv, 0.1f, 0.9f);
        fill(&c[l], cells * hv, 0.1f, 0.9f);
        fill(&d[l], cells * hv * static_cast<size_t>(cfg.dv), 0.0f, 0.0f);
        io.emplace_back(SsmIO{w[l].data(), a[l].data(), b[l].data(), c[l].data(), d[l].data()});
        continue;
      }
      const size_t kv = cells * static_cast<size_t>(cfg.heads) * static_cast<size_t>(cfg.dim);
      const size_t q = cells * static_cast<size_t>(cfg.QueryHeads()) * static_cast<size_t>(cfg.dim);
      fill(&a[l], q, -1.0f, 1.0f);
      fill(&b[l], kv, -1.0f, 1.0f);
      fill(&c[l], kv, -1.0f, 1.0f);
      fill(&d[l], q, 0.0f, 0.0f);
      io.emplace_back(a[l].data(), b[l].data(), c[l].data(), d[l].data());
    }
  }
};

}  // namespace kvspec
