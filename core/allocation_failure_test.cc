// Allocation failure, injected: every public Layout, batch and codec
// operation is run with its N-th allocation failing (std::bad_alloc from a
// replacement operator new), for N = 1, 2, .. until the operation no longer
// reaches an N-th allocation. Each run must
// - let no exception escape (they all return a Status),
// - either be refused, leaving the layout bit-identical (Layout::StateHash
//   and its encoding) with its invariants holding, and no output written,
// - or succeed with exactly the result of a run without injection.
// Trim, Accept and Arm are documented as fatal on running out of memory
// (core/layout.h): they run here only to build the states the others start
// from.
//
// The same counting operator new measures what Filter, Join and Extract
// allocate against Layout::BytesAfterFilter / BytesAfterJoin /
// BytesOfExtract, the figures the trace runner's budget checks first.
//
// This binary replaces the global operator new and delete: it is its own
// test executable so that no other test runs under them.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "kvspec/core/batch.h"
#include "kvspec/core/codec/codec.h"
#include "kvspec/core/layout.h"
#include "kvspec/core/ssm_cache.h"
#include "kvspec/testing/fill.h"

// ---------------------------------------------------------------------------
// The replacement allocator: a header before each block keeps its size.
namespace {

constexpr size_t kHeader = 16;  // keeps blocks 16-byte aligned, as malloc does

long g_countdown = 0;      // > 0: the allocation that brings it to 0 fails
bool g_injected = false;   // an allocation was failed since the last arm
size_t g_live = 0;         // bytes live through operator new
size_t g_peak = 0;         // the most live since PeakGrowth began

// align: 0 for operator new's 16 bytes, else the align_val_t of the aligned
// forms (the caches' storage, kernels/aligned_vector.h): the header then
// takes a whole alignment unit, so the block stays aligned.
size_t HeaderFor(size_t align) { return align > kHeader ? align : kHeader; }

void* ReplacedAllocate(size_t n, size_t align) {
  if (g_countdown > 0 && --g_countdown == 0) {
    g_injected = true;
    throw std::bad_alloc();
  }
  const size_t header = HeaderFor(align);
  void* block = nullptr;
  if (align == 0) {
    block = std::malloc(n + header);
  } else if (posix_memalign(&block, align < sizeof(void*) ? sizeof(void*) : align, n + header) !=
             0) {
    block = nullptr;
  }
  if (!block) throw std::bad_alloc();
  std::memcpy(block, &n, sizeof(n));
  g_live += n;
  if (g_live > g_peak) g_peak = g_live;
  return static_cast<char*>(block) + header;
}

void ReplacedRelease(void* p, size_t align) noexcept {
  if (!p) return;
  void* block = static_cast<char*>(p) - HeaderFor(align);
  size_t n;
  std::memcpy(&n, block, sizeof(n));
  g_live -= n;
  std::free(block);
}

}  // namespace

#include "kvspec/testing/replace_new.h"  // every form, through the two above

namespace kvspec {
namespace {

// Fails the n-th allocation from now on (n >= 1); Disarm() stops it.
void FailAllocation(long n) {
  g_injected = false;
  g_countdown = n;
}
bool Disarm() {
  g_countdown = 0;
  return g_injected;
}

// The most bytes live through operator new while `op` ran, beyond those
// live when it began.
size_t PeakGrowth(const std::function<void()>& op) {
  const size_t start = g_live;
  g_peak = g_live;
  op();
  return g_peak - start;
}

// ---------------------------------------------------------------------------
// States to start from.

std::vector<LayerConfig> Layers() {
  std::vector<LayerConfig> layers(4);
  layers[0].name = "kv";
  layers[0].kind = CacheKind::kKv;
  layers[0].heads = 2;
  layers[0].q_heads = 4;
  layers[0].dim = 3;
  layers[1].name = "ring";
  layers[1].kind = CacheKind::kRotating;
  layers[1].heads = 1;
  layers[1].dim = 2;
  layers[1].window = 3;
  layers[1].capacity = 4;
  layers[2].name = "ring2";  // shares ring's mask
  layers[2] = layers[1];
  layers[2].name = "ring2";
  layers[3].name = "ssm";
  layers[3].kind = CacheKind::kSsm;
  layers[3].heads = 2;
  layers[3].kheads = 1;
  layers[3].dk = 3;
  layers[3].dv = 2;
  layers[3].conv = 3;
  return layers;
}

// One forward's inputs and outputs for every layer of `layout`.
struct Inputs {
  std::vector<std::vector<float>> q, k, v, out, w, x, gate, beta, y;
  std::vector<AttentionIO> io;
};

Inputs MakeInputs(const Layout& layout, int32_t columns, uint32_t seed) {
  Inputs in;
  const size_t n = layout.size();
  for (auto* v : {&in.q, &in.k, &in.v, &in.out, &in.w, &in.x, &in.gate, &in.beta, &in.y}) {
    v->resize(n);
  }
  const size_t cells = static_cast<size_t>(layout.rows()) * static_cast<size_t>(columns);
  auto fill = [&seed](std::vector<float>* v, size_t count, float lo, float hi) {
    testing::FillUniform(v, count, lo, hi, &seed);
  };
  for (size_t l = 0; l < n; ++l) {
    const LayerConfig& c = layout.config(l);
    if (c.kind == CacheKind::kSsm) {
      const size_t channels = c.SsmChannels();
      fill(&in.w[l], channels * static_cast<size_t>(c.conv), -0.5f, 0.5f);
      fill(&in.x[l], cells * channels, -1.0f, 1.0f);
      fill(&in.gate[l], cells * static_cast<size_t>(c.heads), 0.1f, 0.9f);
      fill(&in.beta[l], cells * static_cast<size_t>(c.heads), 0.1f, 0.9f);
      fill(&in.y[l], cells * static_cast<size_t>(c.heads) * c.dv, 0.0f, 0.0f);
      in.io.emplace_back(
          SsmIO{in.w[l].data(), in.x[l].data(), in.gate[l].data(), in.beta[l].data(),
                in.y[l].data()});
      continue;
    }
    const size_t kv = cells * static_cast<size_t>(c.heads) * c.dim;
    const size_t q = cells * static_cast<size_t>(c.QueryHeads()) * c.dim;
    fill(&in.q[l], q, -1.0f, 1.0f);
    fill(&in.k[l], kv, -1.0f, 1.0f);
    fill(&in.v[l], kv, -1.0f, 1.0f);
    fill(&in.out[l], q, 0.0f, 0.0f);
    in.io.emplace_back(in.q[l].data(), in.k[l].data(), in.v[l].data(), in.out[l].data());
  }
  return in;
}

ForwardColumns Columns(int rows, int32_t columns, std::vector<int32_t> left,
                       std::vector<int32_t> right) {
  ForwardColumns cols = ForwardColumns::Dense(rows, columns);
  if (!left.empty()) cols.left = left;
  if (!right.empty()) cols.right = right;
  return cols;
}

void Feed(Layout* layout, const ForwardColumns& cols, uint32_t seed) {
  Inputs in = MakeInputs(*layout, cols.columns, seed);
  ASSERT_TRUE(layout->Forward(cols, in.io).ok());
}

struct State {
  std::string name;
  std::function<std::unique_ptr<Layout>()> build;
};

// Fresh, padded, wrapped, just after a window (bypass bound), armed, and
// armed and verified: the states every operation starts from.
std::vector<State> States() {
  auto create = [](int rows) {
    std::unique_ptr<Layout> layout;
    EXPECT_TRUE(Layout::Create(rows, Layers(), &layout).ok());
    return layout;
  };
  std::vector<State> states;
  states.push_back({"fresh", [=] { return create(3); }});
  states.push_back({"padded window", [=] {
                      auto l = create(3);
                      Feed(l.get(), Columns(3, 4, {2, 0, 1}, {0, 1, 0}), 1);
                      return l;
                    }});
  states.push_back({"wrapped rings", [=] {
                      auto l = create(2);
                      Feed(l.get(), Columns(2, 5, {1, 0}, {}), 2);
                      for (int i = 0; i < 3; ++i) {
                        Feed(l.get(), ForwardColumns::Dense(2, 1, true), 3 + i);
                      }
                      return l;
                    }});
  states.push_back({"armed", [=] {
                      auto l = create(2);
                      Feed(l.get(), Columns(2, 3, {}, {}), 7);
                      EXPECT_TRUE(l->Arm().ok());
                      return l;
                    }});
  states.push_back({"verified", [=] {
                      auto l = create(2);
                      Feed(l.get(), Columns(2, 3, {}, {}), 8);
                      EXPECT_TRUE(l->Arm().ok());
                      Feed(l.get(), Columns(2, 3, {}, {0, 1}), 9);
                      return l;
                    }});
  states.push_back({"one row", [=] {
                      auto l = create(1);
                      Feed(l.get(), Columns(1, 6, {}, {}), 10);
                      return l;
                    }});
  return states;
}

// Everything a refusal must leave alone: the state hash and the encoding.
struct Fingerprint {
  uint64_t hash = 0;
  std::string bytes;
  bool operator==(const Fingerprint& o) const { return hash == o.hash && bytes == o.bytes; }
};

Fingerprint Of(const Layout& layout) {
  Fingerprint f;
  f.hash = layout.StateHash();
  EXPECT_TRUE(EncodeLayout(layout, &f.bytes).ok());
  return f;
}

// An operation, prepared without injection (its arguments and inputs are
// the caller's allocations, not the operation's): `run` is what runs with
// an allocation failing, `result` then fingerprints what it made, if any.
struct Prepared {
  std::function<Status()> run;
  std::function<void(Fingerprint*)> result = [](Fingerprint*) {};
};
// `other`: a second layout of the same shape and state, for Join.
using Operation = std::function<Prepared(Layout* layout, const Layout& other)>;

struct Case {
  std::string name;
  Operation prepare;
};

// A Prepared whose run makes a layout: a refused run must make none.
Prepared Making(std::function<Status(std::unique_ptr<Layout>*)> make) {
  auto made = std::make_shared<std::unique_ptr<Layout>>();
  Prepared p;
  p.run = [make, made] {
    Status s = make(made.get());  // returned by move: a copy would allocate
    if (!s.ok() && *made) return Status::Error("a refused operation made a layout");
    return s;
  };
  p.result = [made](Fingerprint* f) {
    if (*made) *f = Of(**made);
  };
  return p;
}

Prepared Forwarding(Layout* layout, const ForwardColumns& cols) {
  auto in = std::make_shared<Inputs>(MakeInputs(*layout, cols.columns, 77));
  Prepared p;
  p.run = [layout, cols, in] { return layout->Forward(cols, in->io); };
  return p;
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  cases.push_back({"Create", [](Layout* layout, const Layout&) {
                     auto layers = std::make_shared<std::vector<LayerConfig>>(Layers());
                     const int rows = layout->rows();
                     return Making([layers, rows](std::unique_ptr<Layout>* out) {
                       return Layout::Create(rows, std::move(*layers), out);
                     });
                   }});
  cases.push_back({"CopyTo", [](Layout* layout, const Layout&) {
                     return Making([layout](std::unique_ptr<Layout>* out) {
                       return layout->CopyTo(out);
                     });
                   }});
  cases.push_back({"Forward window", [](Layout* layout, const Layout&) {
                     ForwardColumns cols = ForwardColumns::Dense(layout->rows(), 3);
                     cols.right[0] = 1;
                     return Forwarding(layout, cols);
                   }});
  cases.push_back({"Forward decode", [](Layout* layout, const Layout&) {
                     return Forwarding(layout, ForwardColumns::Dense(layout->rows(), 1, true));
                   }});
  cases.push_back({"Forward refused (bad padding)", [](Layout* layout, const Layout&) {
                     ForwardColumns cols = ForwardColumns::Dense(layout->rows(), 2);
                     cols.left[0] = 3;
                     return Forwarding(layout, cols);
                   }});
  cases.push_back({"Filter", [](Layout* layout, const Layout&) {
                     std::vector<int32_t> rows = {0};
                     if (layout->rows() > 2) rows.push_back(2);
                     Prepared p;
                     p.run = [layout, rows] { return layout->Filter(rows); };
                     return p;
                   }});
  cases.push_back({"Filter refused", [](Layout* layout, const Layout&) {
                     Prepared p;
                     const std::vector<int32_t> rows = {1, 0};
                     p.run = [layout, rows] { return layout->Filter(rows); };
                     return p;
                   }});
  cases.push_back({"Join", [](Layout* layout, const Layout& other) {
                     Prepared p;
                     p.run = [layout, &other] { return layout->Join(other); };
                     return p;
                   }});
  cases.push_back({"Extract", [](Layout* layout, const Layout&) {
                     return Making([layout](std::unique_ptr<Layout>* out) {
                       return layout->Extract(layout->rows() - 1, out);
                     });
                   }});
  cases.push_back({"EncodeLayout + DecodeLayout", [](Layout* layout, const Layout&) {
                     return Making([layout](std::unique_ptr<Layout>* out) {
                       std::string bytes;
                       KVSPEC_RETURN_IF_ERROR(EncodeLayout(*layout, &bytes));
                       return DecodeLayout(bytes, out);
                     });
                   }});
  cases.push_back({"EncodeCache + DecodeCache of every layer", [](Layout* layout, const Layout&) {
                     auto hash = std::make_shared<uint64_t>(0);
                     Prepared p;
                     p.run = [layout, hash] {
                       Hasher h;
                       for (size_t l = 0; l < layout->size(); ++l) {
                         std::string bytes;
                         KVSPEC_RETURN_IF_ERROR(EncodeCache(layout->cache(l), &bytes));
                         std::unique_ptr<Cache> made;
                         KVSPEC_RETURN_IF_ERROR(DecodeCache(bytes, &made));
                         made->HashState(&h);
                       }
                       *hash = h.value();
                       return Status::Ok();
                     };
                     p.result = [hash](Fingerprint* f) { f->hash = *hash; };
                     return p;
                   }});
  cases.push_back({"FilterRows, ExtractRow, JoinRows, MergeRows of every layer",
                   [](Layout* layout, const Layout& other) {
                     auto hash = std::make_shared<uint64_t>(0);
                     const std::vector<int32_t> zero = {0};
                     std::vector<std::vector<const Cache*>> pairs;
                     for (size_t l = 0; l < layout->size(); ++l) {
                       pairs.push_back({&layout->cache(l), &other.cache(l)});
                     }
                     Prepared p;
                     p.run = [layout, &other, hash, zero, pairs] {
                       Hasher h;
                       for (size_t l = 0; l < layout->size(); ++l) {
                         std::unique_ptr<Cache> made;
                         KVSPEC_RETURN_IF_ERROR(FilterRows(layout->cache(l), zero, &made));
                         made->HashState(&h);
                         KVSPEC_RETURN_IF_ERROR(ExtractRow(layout->cache(l), 0, &made));
                         made->HashState(&h);
                         KVSPEC_RETURN_IF_ERROR(JoinRows(layout->cache(l), other.cache(l), &made));
                         made->HashState(&h);
                         KVSPEC_RETURN_IF_ERROR(MergeRows(pairs[l], &made));
                         made->HashState(&h);
                       }
                       *hash = h.value();
                       return Status::Ok();
                     };
                     p.result = [hash](Fingerprint* f) { f->hash = *hash; };
                     return p;
                   }});
  return cases;
}

// Runs `c` on a fresh copy of `state` with allocation n failing (0: none).
// Returns whether the injected failure happened.
bool RunOnce(const State& state, const Case& c, long n, Status* status, Fingerprint* before,
             Fingerprint* after, Fingerprint* result, std::string* escaped) {
  std::unique_ptr<Layout> layout = state.build();
  std::unique_ptr<Layout> other = state.build();
  *before = Of(*layout);
  Prepared op = c.prepare(layout.get(), *other);
  *status = Status::Error("not run");  // its message allocated before the run
  if (n > 0) FailAllocation(n);
  try {
    *status = op.run();
  } catch (const std::exception& e) {
    Disarm();
    *escaped = e.what();
  } catch (...) {
    Disarm();
    *escaped = "an exception that is not a std::exception";
  }
  const bool injected = Disarm();
  const Status invariants = layout->CheckInvariants();
  EXPECT_TRUE(invariants.ok()) << state.name << " / " << c.name << " / allocation " << n
                               << ": " << invariants.message();
  *after = Of(*layout);
  op.result(result);
  return injected;
}

TEST(AllocationFailure, EveryOperationRefusesAndChangesNothingOrSucceedsExactly) {
  size_t runs = 0, refusals = 0;
  for (const State& state : States()) {
    for (const Case& c : Cases()) {
      // The run without injection: what a success must produce.
      Status want;
      Fingerprint before, want_after, want_result;
      std::string escaped;
      RunOnce(state, c, 0, &want, &before, &want_after, &want_result, &escaped);
      ASSERT_TRUE(escaped.empty()) << state.name << " / " << c.name << ": " << escaped;
      for (long n = 1;; ++n) {
        ASSERT_LT(n, 100000) << state.name << " / " << c.name << ": no end of allocations";
        Status s;
        Fingerprint after, result;
        escaped.clear();
        const bool injected = RunOnce(state, c, n, &s, &before, &after, &result, &escaped);
        const std::string where = state.name + " / " + c.name + " / allocation " +
                                  std::to_string(n) + " failing";
        ++runs;
        ASSERT_TRUE(escaped.empty()) << where << ": an exception escaped: " << escaped;
        if (!injected) {
          // The operation made fewer than n allocations: the plain run again.
          EXPECT_EQ(s.ok(), want.ok()) << where;
          break;
        }
        if (s.ok()) {
          EXPECT_TRUE(want.ok()) << where << ": succeeded where the plain run is refused";
          EXPECT_TRUE(after == want_after) << where << ": succeeded with another state";
          EXPECT_TRUE(result == want_result) << where << ": succeeded with another result";
        } else {
          ++refusals;
          EXPECT_FALSE(s.message().empty()) << where;
          EXPECT_TRUE(after == before) << where << ": refused (" << s.message()
                                       << ") but the layout changed";
        }
      }
    }
  }
  // Every case allocates: some runs must have been refusals.
  EXPECT_GT(refusals, 100u);
  std::cout << runs << " runs with an allocation failing, " << refusals << " refusals\n";
}

// What Filter, Join and Extract allocate is what the budget figures say:
// the new layers' storage (nothing of a ring's capacity beyond what its
// rows hold) plus lists of one entry per row and layer.
TEST(AllocationFailure, BatchOperationsAllocateWhatTheirByteCountsSay) {
  constexpr size_t kBookkeeping = 8192;  // lists, names, the Layout object
  for (const State& state : States()) {
    if (state.name == "armed" || state.name == "verified") continue;  // refused
    std::unique_ptr<Layout> layout = state.build();
    std::unique_ptr<Layout> other = state.build();
    auto measure = [&](const char* what, size_t predicted, const std::function<void()>& op) {
      const size_t grew = PeakGrowth(op);
      EXPECT_GE(grew, predicted) << state.name << " / " << what;
      EXPECT_LE(grew, predicted + kBookkeeping) << state.name << " / " << what;
    };
    std::unique_ptr<Layout> extracted;
    measure("Extract", layout->BytesOfExtract(0),
            [&] { ASSERT_TRUE(layout->Extract(0, &extracted).ok()); });
    measure("Join", layout->BytesAfterJoin(*other),
            [&] { ASSERT_TRUE(layout->Join(*other).ok()); });
    measure("Filter", layout->BytesAfterFilter({0, 1}),
            [&] { ASSERT_TRUE(layout->Filter({0, 1}).ok()); });
  }
}

// A ring of a large capacity that holds nothing: filtering, extracting and
// joining it allocates no storage at all; its first forward grows it.
TEST(AllocationFailure, GatheredRingsAreSizedFromWhatTheyHold) {
  std::vector<LayerConfig> layers(1);
  layers[0].kind = CacheKind::kRotating;
  layers[0].heads = 1;
  layers[0].dim = 8;
  layers[0].window = 60000;
  std::unique_ptr<Layout> layout, other, extracted;
  ASSERT_TRUE(Layout::Create(4, layers, &layout).ok());
  ASSERT_TRUE(Layout::Create(4, layers, &other).ok());
  EXPECT_EQ(layout->BytesAfterFilter({0, 3}), 0u);
  EXPECT_EQ(layout->BytesAfterJoin(*other), 0u);
  EXPECT_EQ(layout->BytesOfExtract(2), 0u);
  ASSERT_TRUE(layout->Filter({0, 3}).ok());
  ASSERT_TRUE(layout->Extract(1, &extracted).ok());
  ASSERT_TRUE(layout->Join(*other).ok());
  EXPECT_EQ(layout->allocatedBytes(), 0u);
  EXPECT_EQ(extracted->allocatedBytes(), 0u);
  // Two real tokens in row 0: an extract holds two slots, a filter keeps
  // the held columns; the next forward grows the ring to its capacity.
  Feed(layout.get(), Columns(6, 2, {}, {0, 1, 2, 2, 2, 2}), 5);
  const size_t slot = 8 * 2 * sizeof(float) + sizeof(int32_t);
  EXPECT_EQ(layout->allocatedBytes(), 6 * 60000 * slot);
  EXPECT_EQ(layout->BytesOfExtract(0), 2 * slot);
  EXPECT_EQ(layout->BytesAfterFilter({0, 1}), 2 * 2 * slot);
  ASSERT_TRUE(layout->Filter({0, 1}).ok());
  EXPECT_EQ(layout->allocatedBytes(), 2 * 2 * slot);
  Feed(layout.get(), ForwardColumns::Dense(2, 1, true), 6);
  EXPECT_EQ(layout->allocatedBytes(), 2 * 60000 * slot);
  EXPECT_EQ(layout->positions(), (std::vector<int32_t>{3, 2}));
}

// Saving and loading a recurrent cache converts its states between kernel
// and trace order one buffer (a row's conv and recurrent state) at a time:
// neither holds a second copy of every state beside the cache and the bytes.
TEST(AllocationFailure, PersistingRecurrentStatesHoldsOneBufferBesideThem) {
  SsmShape shape;
  shape.value_heads = 4;
  shape.key_heads = 2;
  shape.dk = 64;
  shape.dv = 64;
  shape.conv = 4;
  constexpr int kRows = 8;
  // A row's conv and recurrent state (70 KiB here), and both buffers of
  // every row (1.1 MB): the second copy the codec no longer makes.
  const size_t buffer_bytes = (shape.ConvFloats() + shape.RecurrentFloats()) * sizeof(float);
  const size_t states_bytes = kRows * 2 * buffer_bytes;
  constexpr size_t kSmall = size_t{64} << 10;  // scratch, packed weights, lists
  BatchedSsmCache cache(kRows, shape);
  std::string bytes;
  const size_t encoding = PeakGrowth([&] { ASSERT_TRUE(EncodeCache(cache, &bytes).ok()); });
  ASSERT_GT(bytes.size(), states_bytes);
  EXPECT_LE(encoding, bytes.capacity() + 1 + buffer_bytes + kSmall);
  std::unique_ptr<Cache> decoded;
  const size_t decoding = PeakGrowth([&] { ASSERT_TRUE(DecodeCache(bytes, &decoded).ok()); });
  ASSERT_NE(decoded, nullptr);
  EXPECT_LE(decoding, states_bytes + buffer_bytes + kSmall);
  std::string again;
  ASSERT_TRUE(EncodeCache(*decoded, &again).ok());
  EXPECT_EQ(again, bytes);
}

}  // namespace
}  // namespace kvspec
