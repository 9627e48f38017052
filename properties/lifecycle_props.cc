// Batch lifecycle and persistence properties over random hybrid layouts
// (kv, windowed kv, rings, recurrent layers) with random histories (windows
// with left and prepared padding, decodes, trims, speculative rounds):
//
// - join keeps every running row: after A.Join(B), the next forward shows
//   each row exactly what A or B alone would have shown it (visible sets
//   recovered from bytes, outputs bit for bit, recurrent state bytes);
// - extract then merge returns the original rows;
// - filter keeps the chosen rows exactly;
// - a persistence round trip is exact: the decoded layout hashes alike and
//   behaves alike afterwards; corrupting or truncating the bytes is refused
//   or decodes to a consistent layout, never a crash;
// - unknown or lying kinds are refused by every lifecycle operation and codec.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/batch.h"
#include "core/codec/codec.h"
#include "core/layout.h"
#include "trace/runner.h"
#include "trace/values.h"

namespace kvspec {
namespace {

using trace::ContentIndex;
using trace::Tag;

rc::Gen<std::vector<LayerConfig>> GenLayers() {
  return rc::gen::exec([] {
    std::vector<LayerConfig> layers;
    const int n = *rc::gen::inRange(1, 4);
    for (int i = 0; i < n; ++i) {
      LayerConfig c;
      c.name = "l" + std::to_string(i);
      const int kind = *rc::gen::inRange(0, 4);
      c.heads = *rc::gen::inRange(1, 3);
      c.dim = *rc::gen::inRange(1, 9);
      if (kind == 1) c.window = *rc::gen::inRange<int32_t>(1, 6);
      if (kind == 2) {
        c.kind = CacheKind::kRotating;
        c.window = *rc::gen::inRange<int32_t>(1, 6);
        c.capacity = c.window + *rc::gen::inRange<int32_t>(0, 3);
      }
      if (kind == 3) {
        c.kind = CacheKind::kSsm;
        c.kheads = 1;
        c.heads = *rc::gen::inRange(1, 3);
        c.dk = *rc::gen::inRange(1, 6);
        c.dv = *rc::gen::inRange(1, 5);
        c.conv = *rc::gen::inRange(1, 4);
      }
      layers.push_back(c);
    }
    return layers;
  });
}

std::string Describe(const std::vector<LayerConfig>& layers) {
  std::ostringstream os;
  for (const LayerConfig& c : layers) {
    os << "layer " << c.name << " type " << static_cast<int>(c.kind) << " heads " << c.heads
       << " dim " << c.dim << " window " << c.window << " capacity " << c.capacity << " dk "
       << c.dk << " dv " << c.dv << " conv " << c.conv << "\n";
  }
  return os.str();
}

// What one forward showed a row: per layer, its queries' tags and outputs
// (attention) or its tokens' outputs and the state hash (recurrent).
struct RowView {
  std::vector<std::vector<Tag>> tags;
  std::vector<std::vector<float>> outs;
  std::vector<uint64_t> states;
  bool operator==(const RowView& o) const {
    if (tags != o.tags || states != o.states || outs.size() != o.outs.size()) return false;
    for (size_t i = 0; i < outs.size(); ++i) {
      if (outs[i].size() != o.outs[i].size() ||
          std::memcmp(outs[i].data(), o.outs[i].data(), outs[i].size() * 4) != 0) {
        return false;
      }
    }
    return true;
  }
};

// Drives layouts with TRACE.md token contents (ids = positions) and reads
// back what every row saw.
class Driver {
 public:
  explicit Driver(std::vector<LayerConfig> layers) : layers_(std::move(layers)) {
    for (size_t l = 0; l < layers_.size(); ++l) {
      if (layers_[l].kind == CacheKind::kSsm) {
        weights_.push_back(ContentIndex::ConvWeights(static_cast<int>(l), Channels(layers_[l]),
                                                     static_cast<size_t>(layers_[l].conv)));
      } else {
        weights_.emplace_back();
      }
    }
  }

  static size_t Channels(const LayerConfig& c) {
    return 2 * static_cast<size_t>(c.kheads ? c.kheads : c.heads) * c.dk +
           static_cast<size_t>(c.heads) * c.dv;
  }

  // One forward on `layout`; returns each row's view (empty when refused).
  std::vector<RowView> Forward(Layout& layout, const ForwardColumns& cols, uint64_t id_salt) {
    const int rows = layout.rows();
    const size_t L = static_cast<size_t>(cols.columns);
    const std::vector<int32_t> next = layout.positions();
    const size_t nl = layers_.size();
    std::vector<std::vector<float>> a(nl), b(nl), c(nl), o(nl);
    std::vector<AttentionIO> io(nl);
    auto id_of = [&](int32_t pos) { return static_cast<int32_t>((pos + id_salt) % 100000); };
    for (size_t l = 0; l < nl; ++l) {
      const LayerConfig& cfg = layers_[l];
      if (cfg.kind == CacheKind::kSsm) {
        const size_t C = Channels(cfg), hv = static_cast<size_t>(cfg.heads);
        a[l].assign(rows * L * C, ContentIndex::PadValue());
        b[l].assign(rows * L * hv, ContentIndex::PadValue());
        c[l].assign(rows * L * hv, ContentIndex::PadValue());
        o[l].assign(rows * L * hv * cfg.dv, 0.0f);
        for (int r = 0; r < rows; ++r) {
          for (int32_t j = 0; j < cols.Real(r); ++j) {
            const size_t at = r * L + static_cast<size_t>(cols.left[r] + j);
            ContentIndex::RecurrentToken(static_cast<int>(l), id_of(next[r] + j), next[r] + j, C,
                                         hv, &a[l][at * C], &b[l][at * hv], &c[l][at * hv]);
          }
        }
        io[l] = AttentionIO(
            SsmIO{weights_[l].data(), a[l].data(), b[l].data(), c[l].data(), o[l].data()});
        continue;
      }
      // q and out follow the layout's query heads (GQA), k and v its KV heads.
      const size_t hd = static_cast<size_t>(cfg.heads) * cfg.dim;
      const size_t qd = static_cast<size_t>(cfg.QueryHeads()) * cfg.dim;
      a[l].assign(rows * L * qd, ContentIndex::PadValue());
      b[l].assign(rows * L * hd, ContentIndex::PadValue());
      c[l] = b[l];
      o[l].assign(a[l].size(), 0.0f);
      for (int r = 0; r < rows; ++r) {
        for (int32_t j = 0; j < cols.Real(r); ++j) {
          const size_t col = r * L + static_cast<size_t>(cols.left[r] + j);
          const int32_t pos = next[r] + j;
          ContentIndex::AttentionToken(static_cast<int>(l), id_of(pos), pos, cfg.QueryHeads(),
                                       cfg.heads, cfg.dim, &a[l][col * qd], &b[l][col * hd],
                                       &c[l][col * hd]);
          index_.Remember(static_cast<int>(l), id_of(pos), pos, &b[l][col * hd], &c[l][col * hd],
                          hd);
        }
      }
      io[l] = AttentionIO(a[l].data(), b[l].data(), c[l].data(), o[l].data());
    }
    if (!layout.Forward(cols, io).ok()) return {};
    std::vector<RowView> views(static_cast<size_t>(rows));
    for (size_t l = 0; l < nl; ++l) {
      const LayerConfig& cfg = layers_[l];
      const AttentionCache* cache = layout.attention(l);
      const Mask* mask = cache ? layout.LastMask(l) : nullptr;
      const KvView view = cache ? cache->View() : KvView();
      const size_t per = cache ? static_cast<size_t>(cfg.QueryHeads()) * cfg.dim
                               : static_cast<size_t>(cfg.heads) * cfg.dv;
      for (int r = 0; r < rows; ++r) {
        for (int32_t j = 0; j < cols.Real(r); ++j) {
          const int32_t col = cols.left[r] + j;
          if (cache) {
            std::vector<Tag> seen;
            for (int32_t s = 0; s < mask->slots; ++s) {
              if (mask->Admits(r, col, s)) {
                seen.push_back(index_.Recover(static_cast<int>(l), view, r, s));
              }
            }
            std::sort(seen.begin(), seen.end());
            views[r].tags.push_back(seen);
          }
          const float* ov = &o[l][(r * L + static_cast<size_t>(col)) * per];
          views[r].outs.emplace_back(ov, ov + per);
        }
        if (!cache) views[r].states.push_back(layout.recurrent(l)->RowStateHash(r));
      }
    }
    return views;
  }

  // A random history: forwards with padding, decodes, trims, rounds.
  void History(Layout& layout, int steps) {
    for (int i = 0; i < steps; ++i) {
      const int op = *rc::gen::inRange(0, 6);
      const int rows = layout.rows();
      const std::vector<int32_t> next = layout.positions();
      if (op <= 2) {
        ForwardColumns cols = ForwardColumns::Dense(rows, *rc::gen::inRange<int32_t>(1, 6));
        for (int r = 0; r < rows; ++r) {
          cols.left[r] = next[r] == 0 ? *rc::gen::inRange<int32_t>(0, cols.columns + 1) : 0;
          cols.right[r] = *rc::gen::inRange<int32_t>(0, cols.columns - cols.left[r] + 1);
        }
        Forward(layout, cols, 0);
      } else if (op == 3) {
        Forward(layout, ForwardColumns::Dense(rows, 1, true), 0);
      } else if (op == 4) {
        (void)layout.Trim(*rc::gen::inRange<int32_t>(0, 3), false);
      } else {
        RC_ASSERT(layout.Arm().ok());
        Forward(layout, ForwardColumns::Dense(rows, *rc::gen::inRange<int32_t>(1, 5)), 777);
        std::vector<int32_t> keep;
        for (int r = 0; r < rows; ++r) keep.push_back(*rc::gen::inRange<int32_t>(0, 5));
        if (!layout.Accept(keep).ok()) RC_ASSERT(layout.Accept({0}).ok());
      }
    }
  }

  const std::vector<LayerConfig>& layers() const { return layers_; }

 private:
  std::vector<LayerConfig> layers_;
  std::vector<std::vector<float>> weights_;
  ContentIndex index_;
};

std::unique_ptr<Layout> Build(const std::vector<LayerConfig>& layers, int rows) {
  std::unique_ptr<Layout> layout;
  RC_ASSERT(Layout::Create(rows, layers, &layout).ok());
  return layout;
}

ForwardColumns NextForward(int rows) {
  return ForwardColumns::Dense(rows, *rc::gen::inRange<int32_t>(1, 4));
}

// The same next forward on `want` and `got` shows the same rows.
void SameNextForward(Driver& driver, Layout& want, Layout& got, uint64_t id_salt) {
  const ForwardColumns f = NextForward(want.rows());
  const auto a = driver.Forward(want, f, id_salt);
  const auto b = driver.Forward(got, f, id_salt);
  RC_ASSERT(a.size() == b.size());
  for (size_t r = 0; r < a.size(); ++r) RC_ASSERT(a[r] == b[r]);
}

RC_GTEST_PROP(LifecycleProps, JoinKeepsEveryRunningRow, ()) {
  const auto layers = *GenLayers();
  RC_LOG() << Describe(layers);
  Driver driver(layers);
  auto a = Build(layers, *rc::gen::inRange(1, 4));
  auto b = Build(layers, *rc::gen::inRange(1, 4));
  driver.History(*a, *rc::gen::inRange(0, 6));
  driver.History(*b, *rc::gen::inRange(0, 6));
  auto a0 = a->Copy();
  auto b0 = b->Copy();
  RC_ASSERT(a->Join(*b).ok());
  RC_ASSERT(a->rows() == a0->rows() + b0->rows());
  // The larger peak: a joined ring is wrapped when either side was.
  for (size_t l = 0; l < layers.size(); ++l) {
    RC_ASSERT(a->cache(l).isTrimmable() ==
              (a0->cache(l).isTrimmable() && b0->cache(l).isTrimmable()));
  }
  RC_CLASSIFY(a0->columns() != b0->columns(), "sides of different lengths");
  const ForwardColumns f = NextForward(a->rows());
  const auto joined = driver.Forward(*a, f, 5);
  const auto left = driver.Forward(*a0, ForwardColumns::Dense(a0->rows(), f.columns), 5);
  const auto right = driver.Forward(*b0, ForwardColumns::Dense(b0->rows(), f.columns), 5);
  RC_ASSERT(joined.size() == left.size() + right.size());
  for (size_t r = 0; r < left.size(); ++r) RC_ASSERT(joined[r] == left[r]);
  for (size_t r = 0; r < right.size(); ++r) RC_ASSERT(joined[left.size() + r] == right[r]);
}

RC_GTEST_PROP(LifecycleProps, ExtractThenMergeReturnsTheRows, ()) {
  const auto layers = *GenLayers();
  RC_LOG() << Describe(layers);
  Driver driver(layers);
  auto batch = Build(layers, *rc::gen::inRange(1, 4));
  driver.History(*batch, *rc::gen::inRange(0, 7));
  std::unique_ptr<Layout> merged;
  for (int r = 0; r < batch->rows(); ++r) {
    std::unique_ptr<Layout> one;
    RC_ASSERT(batch->Extract(r, &one).ok());
    RC_ASSERT(one->rows() == 1);
    RC_ASSERT(one->positions()[0] == batch->positions()[r]);
    // As a single-row cache fed only that row's tokens: a ring is trimmable
    // while it holds at most its capacity.
    for (size_t l = 0; l < layers.size(); ++l) {
      const LayerConfig& c = layers[l];
      const bool trimmable = c.kind == CacheKind::kKv ||
                             (c.kind == CacheKind::kRotating &&
                              one->positions()[0] <= (c.capacity ? c.capacity : c.window));
      RC_ASSERT(one->cache(l).isTrimmable() == trimmable);
    }
    if (!merged) {
      merged = std::move(one);
    } else {
      RC_ASSERT(merged->Join(*one).ok());
    }
  }
  SameNextForward(driver, *batch, *merged, 9);
}

RC_GTEST_PROP(LifecycleProps, FilterKeepsTheChosenRows, ()) {
  const auto layers = *GenLayers();
  RC_LOG() << Describe(layers);
  Driver driver(layers);
  auto batch = Build(layers, *rc::gen::inRange(1, 5));
  driver.History(*batch, *rc::gen::inRange(0, 7));
  std::vector<int32_t> keep;
  for (int r = 0; r < batch->rows(); ++r) {
    if (*rc::gen::arbitrary<bool>()) keep.push_back(r);
  }
  if (keep.empty()) keep.push_back(0);
  auto filtered = batch->Copy();
  RC_ASSERT(filtered->Filter(keep).ok());
  const ForwardColumns f = NextForward(batch->rows());
  const auto all = driver.Forward(*batch, f, 3);
  const auto some = driver.Forward(*filtered, ForwardColumns::Dense(filtered->rows(), f.columns), 3);
  RC_ASSERT(some.size() == keep.size());
  for (size_t i = 0; i < keep.size(); ++i) RC_ASSERT(some[i] == all[keep[i]]);
}

RC_GTEST_PROP(LifecycleProps, PersistenceRoundTripIsExact, ()) {
  const auto layers = *GenLayers();
  RC_LOG() << Describe(layers);
  Driver driver(layers);
  auto layout = Build(layers, *rc::gen::inRange(1, 4));
  driver.History(*layout, *rc::gen::inRange(0, 8));
  // Sometimes persist in the middle of a round.
  const bool mid_round = *rc::gen::arbitrary<bool>();
  if (mid_round) {
    RC_ASSERT(layout->Arm().ok());
    driver.Forward(*layout, ForwardColumns::Dense(layout->rows(), 3), 55);
  }
  std::string bytes;
  RC_ASSERT(EncodeLayout(*layout, &bytes).ok());
  std::unique_ptr<Layout> loaded;
  const Status s = DecodeLayout(bytes, &loaded);
  RC_ASSERT(s.ok());
  RC_ASSERT(loaded->StateHash() == layout->StateHash());
  if (mid_round) {
    std::vector<int32_t> keep{*rc::gen::inRange<int32_t>(0, 4)};
    RC_ASSERT(layout->Accept(keep).ok() == loaded->Accept(keep).ok());
    RC_ASSERT(loaded->StateHash() == layout->StateHash());
  }
  SameNextForward(driver, *layout, *loaded, 21);
}

RC_GTEST_PROP(LifecycleProps, DamagedBytesAreRefusedCleanly, ()) {
  const auto layers = *GenLayers();
  Driver driver(layers);
  auto layout = Build(layers, *rc::gen::inRange(1, 3));
  driver.History(*layout, *rc::gen::inRange(0, 5));
  std::string bytes;
  RC_ASSERT(EncodeLayout(*layout, &bytes).ok());
  std::string damaged = bytes;
  const int how = *rc::gen::inRange(0, 3);
  if (how == 0) {
    damaged.resize(*rc::gen::inRange<size_t>(0, bytes.size()));
  } else {
    const int flips = *rc::gen::inRange(1, 4);
    for (int i = 0; i < flips; ++i) {
      const size_t at = *rc::gen::inRange<size_t>(0, bytes.size());
      damaged[at] = static_cast<char>(damaged[at] ^ (1 << *rc::gen::inRange(0, 8)));
    }
  }
  std::unique_ptr<Layout> loaded;
  const Status s = DecodeLayout(damaged, &loaded);
  RC_CLASSIFY(s.ok(), "damage still decodes (e.g. a flipped float)");
  if (!s.ok()) {
    RC_ASSERT(!s.message().empty());
    return;
  }
  // Whatever decodes must be usable: a forward either runs or is refused.
  // Contents are sized by the decoded layout's own configuration (a flipped
  // byte may have changed a shape consistently).
  std::vector<LayerConfig> decoded;
  for (size_t l = 0; l < loaded->size(); ++l) decoded.push_back(loaded->config(l));
  Driver(decoded).Forward(*loaded, ForwardColumns::Dense(loaded->rows(), 1, true), 1);
}

// A cache whose kind string is not one we know, and one that lies.
class MysteryCache final : public Cache {
 public:
  explicit MysteryCache(std::string kind) : kind_(std::move(kind)) {}
  std::string kind() const override { return kind_; }
  int rows() const override { return 1; }
  int64_t columns() const override { return 0; }
  std::vector<int32_t> positions() const override { return {0}; }
  size_t bytesPerToken() const override { return 0; }
  size_t allocatedBytes() const override { return 0; }
  bool isTrimmable() const override { return true; }
  Status CheckTrim(int32_t, bool) const override { return Status::Ok(); }
  Status trim(int32_t, bool) override { return Status::Ok(); }
  void HashState(Hasher*) const override {}
  std::unique_ptr<Cache> Copy() const override { return std::make_unique<MysteryCache>(*this); }

 private:
  std::string kind_;
};

TEST(LifecycleProps, UnknownAndLyingKindsAreRefused) {
  KvCache real(1, 4);
  for (const char* kind : {"mystery", "", "persisted(kv)", "kv", "batched_rotating", "ssm"}) {
    MysteryCache fake(kind);
    std::unique_ptr<Cache> out;
    std::string bytes;
    EXPECT_FALSE(FilterRows(fake, {0}, &out).ok()) << kind;
    EXPECT_FALSE(ExtractRow(fake, 0, &out).ok()) << kind;
    EXPECT_FALSE(JoinRows(real, fake, &out).ok()) << kind;
    EXPECT_FALSE(JoinRows(fake, real, &out).ok()) << kind;
    EXPECT_FALSE(MergeRows({&fake}, &out).ok()) << kind;
    EXPECT_FALSE(EncodeCache(fake, &bytes).ok()) << kind;
    EXPECT_EQ(out, nullptr);
  }
  EXPECT_FALSE(HasCodec("mystery"));
  EXPECT_FALSE(HasCodec(""));
  EXPECT_TRUE(HasCodec("batched_ssm"));
  // A decoded kind string that no codec knows.
  std::string bytes;
  ASSERT_TRUE(EncodeCache(real, &bytes).ok());
  std::string renamed = bytes;
  const size_t at = renamed.find("kv");
  ASSERT_NE(at, std::string::npos);
  renamed[at] = 'q';
  std::unique_ptr<Cache> out;
  const Status s = DecodeCache(renamed, &out);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("qv"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace kvspec
