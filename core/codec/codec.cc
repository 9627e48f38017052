#include "core/codec/codec.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/conv1d.h"
#include "core/kv_cache.h"
#include "core/ssm_cache.h"

namespace kvspec {

namespace {

constexpr char kCacheMagic[4] = {'K', 'V', 'S', 'C'};
constexpr char kLayoutMagic[4] = {'K', 'V', 'S', 'L'};
// Sanity bounds on shapes read from input (sizes are further bounded by the
// bytes actually present).
constexpr int64_t kMaxRowsRead = 1 << 16;
constexpr int64_t kMaxHeadsRead = 1 << 12;
constexpr int64_t kMaxDimRead = 1 << 16;
constexpr int64_t kMaxWindowRead = int64_t{1} << 30;
constexpr uint32_t kMaxStringRead = 256;
constexpr uint32_t kMaxLayersRead = 1024;

class Writer {
 public:
  explicit Writer(std::string* out) : out_(out) {}
  void Raw(const void* p, size_t n) { out_->append(static_cast<const char*>(p), n); }
  template <class T>
  void Value(T v) {
    // The format is little-endian; so are the machines this builds for.
    static_assert(std::is_trivially_copyable<T>::value, "plain values only");
    Raw(&v, sizeof(v));
  }
  void String(const std::string& s) {
    Value<uint32_t>(static_cast<uint32_t>(s.size()));
    Raw(s.data(), s.size());
  }
  template <class T>
  void Vector(const std::vector<T>& v) {
    Value<uint64_t>(v.size());
    if (!v.empty()) Raw(v.data(), v.size() * sizeof(T));
  }

 private:
  std::string* out_;
};

class Reader {
 public:
  explicit Reader(std::string_view bytes) : b_(bytes) {}

  bool ok() const { return error_.empty(); }
  size_t left() const { return b_.size() - at_; }
  size_t offset() const { return at_; }
  Status status() const { return ok() ? Status::Ok() : Status::Error(error_); }

  bool Fail(const std::string& what) {
    if (ok()) error_ = "bad encoding at byte " + std::to_string(at_) + ": " + what;
    return false;
  }
  bool Raw(void* p, size_t n) {
    if (!ok()) return false;
    if (n > left()) return Fail("truncated (" + std::to_string(n) + " bytes needed, " +
                                std::to_string(left()) + " left)");
    std::memcpy(p, b_.data() + at_, n);
    at_ += n;
    return true;
  }
  template <class T>
  bool Value(T* v) {
    return Raw(v, sizeof(T));
  }
  // An integer that must lie in [lo, hi].
  template <class T>
  bool Int(T* v, int64_t lo, int64_t hi, const char* name) {
    if (!Value(v)) return false;
    if (static_cast<int64_t>(*v) < lo || static_cast<int64_t>(*v) > hi) {
      return Fail(std::string(name) + " " + std::to_string(static_cast<int64_t>(*v)) +
                  " outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    return true;
  }
  bool Skip(size_t n) {
    if (!ok()) return false;
    if (n > left()) return Fail("truncated");
    at_ += n;
    return true;
  }
  bool Bool(bool* v) {
    uint8_t b = 0;
    if (!Value(&b)) return false;
    if (b > 1) return Fail("a boolean byte holds " + std::to_string(b));
    *v = b == 1;
    return true;
  }
  bool String(std::string* s, uint32_t max) {
    uint32_t n = 0;
    if (!Value(&n)) return false;
    if (n > max) return Fail("string of " + std::to_string(n) + " bytes (at most " +
                             std::to_string(max) + ")");
    s->resize(n);
    return n == 0 || Raw(&(*s)[0], n);
  }
  // A vector whose element count must equal `expected` (when >= 0); the
  // count is checked against the bytes left before allocating.
  template <class T>
  bool Vector(std::vector<T>* v, int64_t expected, const char* name) {
    uint64_t n = 0;
    if (!Value(&n)) return false;
    if (expected >= 0 && n != static_cast<uint64_t>(expected)) {
      return Fail(std::string(name) + " holds " + std::to_string(n) + " values, " +
                  std::to_string(expected) + " expected");
    }
    if (n > left() / sizeof(T)) {
      return Fail(std::string(name) + " claims " + std::to_string(n) +
                  " values, more than the input holds");
    }
    v->resize(static_cast<size_t>(n));
    return n == 0 || Raw(v->data(), static_cast<size_t>(n) * sizeof(T));
  }

 private:
  std::string_view b_;
  size_t at_ = 0;
  std::string error_;
};

// a * b * ... without overflow, or -1.
int64_t Product(std::initializer_list<int64_t> factors) {
  int64_t p = 1;
  for (int64_t f : factors) {
    if (f < 0) return -1;
    if (f != 0 && p > std::numeric_limits<int64_t>::max() / f) return -1;
    p *= f;
  }
  return p;
}

}  // namespace

// Friend of the caches and the layout: reads and writes their state.
class CacheCodec {
 public:
  // ------------------------------------------------------------- columns
  static void EncodeColumns(const ColumnStore& c, Writer& w) {
    w.Value<int32_t>(c.rows_);
    w.Value<int32_t>(c.kv_heads_);
    w.Value<int32_t>(c.dim_);
    w.Value<int32_t>(c.window_);
    w.Value<int32_t>(c.ring_capacity_);
    w.Value<int64_t>(c.columns_);
    w.Value<int64_t>(c.peak_);
    w.Value<int64_t>(c.peak_before_write_);
    w.Value<uint64_t>(c.slots_);
    w.Value<uint64_t>(c.first_);
    w.Value<int64_t>(c.held_);
    w.Vector(c.k_);
    w.Vector(c.v_);
    w.Vector(c.slot_pos_);
    w.Vector(c.next_);
    w.Vector(c.last_write_real_);
    w.Value<uint8_t>(c.last_write_was_decode_ ? 1 : 0);
  }

  static Status DecodeColumns(Reader& r, bool batched, bool ring,
                              std::unique_ptr<Cache>* out) {
    int32_t rows = 0, heads = 0, dim = 0, window = 0, capacity = 0;
    r.Int(&rows, 1, batched ? kMaxRowsRead : 1, "rows");
    r.Int(&heads, 1, kMaxHeadsRead, "kv heads");
    r.Int(&dim, 1, kMaxDimRead, "head dim");
    r.Int(&window, ring ? 1 : 0, kMaxWindowRead, "window");
    r.Int(&capacity, ring ? window : 0, ring ? kMaxWindowRead : 0, "ring capacity");
    if (!r.ok()) return r.status();
    std::unique_ptr<ColumnStore> c = NewColumnStore(batched, rows, heads, dim, window, capacity);
    uint64_t slots = 0, first = 0;
    r.Int(&c->columns_, 0, std::numeric_limits<int32_t>::max(), "columns");
    r.Int(&c->peak_, 0, std::numeric_limits<int32_t>::max(), "peak");
    r.Int(&c->peak_before_write_, 0, c->peak_, "peak before the last write");
    r.Value(&slots);
    r.Value(&first);
    r.Int(&c->held_, 0, c->columns_, "held columns");
    if (!r.ok()) return r.status();
    if (c->columns_ > c->peak_) return r.Fail("more columns than the peak"), r.status();
    if (slots > static_cast<uint64_t>(kMaxWindowRead) ||
        (slots == 0 ? first != 0 : first >= slots) ||
        static_cast<int64_t>(slots) < c->held_ ||
        (ring && slots != 0 && slots < static_cast<uint64_t>(capacity))) {
      return r.Fail("inconsistent ring geometry (slots " + std::to_string(slots) + ", first " +
                    std::to_string(first) + ", held " + std::to_string(c->held_) + ")"),
             r.status();
    }
    c->slots_ = static_cast<size_t>(slots);
    c->first_ = static_cast<size_t>(first);
    const int64_t elements = Product({rows, heads, static_cast<int64_t>(slots), dim});
    if (elements < 0) return r.Fail("storage size overflows"), r.status();
    r.Vector(&c->k_, elements, "keys");
    r.Vector(&c->v_, elements, "values");
    r.Vector(&c->slot_pos_, Product({rows, static_cast<int64_t>(slots)}), "slot positions");
    r.Vector(&c->next_, rows, "next positions");
    std::vector<int32_t> last;
    uint64_t last_count = 0;
    {
      // Empty or one per row.
      std::vector<int32_t> tmp;
      r.Vector(&tmp, -1, "last write");
      last_count = tmp.size();
      last = std::move(tmp);
    }
    bool decode = false;
    r.Bool(&decode);
    if (!r.ok()) return r.status();
    if (last_count != 0 && last_count != static_cast<uint64_t>(rows)) {
      return r.Fail("last write lists " + std::to_string(last_count) + " rows"), r.status();
    }
    c->last_write_real_ = std::move(last);
    c->last_write_was_decode_ = decode;
    const bool plain = capacity == 0;
    if (plain && (c->held_ != c->columns_ || c->first_ != 0)) {
      return r.Fail("a plain cache holds every column from slot 0"), r.status();
    }
    if (!c->wrapped() && c->held_ != c->columns_) {
      return r.Fail("a cache that has not wrapped holds every column"), r.status();
    }
    // Slot positions: within the held columns, increasing per row and below
    // the row's next position; -1 everywhere else.
    for (int row = 0; row < rows; ++row) {
      const int32_t next = c->next_[row];
      if (next < 0) return r.Fail("negative next position"), r.status();
      int32_t prev = -1, real = 0;
      std::vector<char> held(c->slots_, 0);
      for (int64_t col = 0; col < c->held_; ++col) {
        const size_t s = c->Slot(col);
        held[s] = 1;
        const int32_t p = c->slot_pos_[row * c->slots_ + s];
        if (p < -1 || p >= next || (p >= 0 && p <= prev)) {
          return r.Fail("row " + std::to_string(row) + ": slot position " + std::to_string(p) +
                        " out of order or range"),
                 r.status();
        }
        if (p >= 0) {
          prev = p;
          ++real;
        }
      }
      for (size_t s = 0; s < c->slots_; ++s) {
        if (!held[s] && c->slot_pos_[row * c->slots_ + s] != -1) {
          return r.Fail("row " + std::to_string(row) + ": a slot outside the held columns "
                        "holds a position"),
                 r.status();
        }
      }
      // Every token a later query or trim may need is physically there.
      const int32_t needed =
          c->wrapped() && next > capacity ? std::min(next, window - 1) : next;
      if (real < needed || (real > 0 && prev != next - 1)) {
        return r.Fail("row " + std::to_string(row) + " holds " + std::to_string(real) +
                      " of the tokens it needs"),
               r.status();
      }
      if (!c->last_write_real_.empty() &&
          (c->last_write_real_[row] < 0 || c->last_write_real_[row] > real)) {
        return r.Fail("row " + std::to_string(row) + ": last write larger than what is held"),
               r.status();
      }
    }
    c->held_pads_.assign(static_cast<size_t>(rows), 0);
    c->CountHeldPads();
    *out = std::move(c);
    return Status::Ok();
  }

  // --------------------------------------------------------------- ssm
  static void EncodeSsm(const SsmCacheBase& c, Writer& w) {
    w.Value<int32_t>(c.rows_);
    w.Value<int32_t>(c.shape_.value_heads);
    w.Value<int32_t>(c.shape_.key_heads);
    w.Value<int32_t>(c.shape_.dk);
    w.Value<int32_t>(c.shape_.dv);
    w.Value<int32_t>(c.shape_.conv);
    w.Value<uint8_t>(c.shape_.gate_per_lane ? 1 : 0);
    w.Value<int64_t>(c.columns_);
    w.Vector(c.state_);
    w.Vector(c.active_);
    w.Vector(c.next_);
    w.Value<uint8_t>(c.armed_ ? 1 : 0);
    w.Value<uint8_t>(c.verified_ ? 1 : 0);
    w.Vector(c.snapshot_);
    w.Vector(c.round_real_);
    for (const auto& rec : c.record_) w.Vector(rec);
  }

  static Status DecodeSsm(Reader& r, bool batched, std::unique_ptr<Cache>* out) {
    int32_t rows = 0;
    SsmShape s;
    r.Int(&rows, 1, batched ? kMaxRowsRead : 1, "rows");
    r.Int(&s.value_heads, 1, kMaxHeadsRead, "value heads");
    r.Int(&s.key_heads, 1, kMaxHeadsRead, "key heads");
    r.Int(&s.dk, 1, kMaxDimRead, "dk");
    r.Int(&s.dv, 1, kMaxDimRead, "dv");
    r.Int(&s.conv, 1, static_cast<int64_t>(kMaxConvKernel), "conv kernel");
    r.Bool(&s.gate_per_lane);
    if (!r.ok()) return r.status();
    if (s.value_heads % s.key_heads != 0) {
      return r.Fail("key heads do not divide value heads"), r.status();
    }
    const int64_t row_floats =
        Product({s.conv - 1, 2 * s.key_heads, s.dk}) + Product({s.conv - 1, s.value_heads, s.dv}) +
        Product({s.value_heads, s.dv, s.dk});
    const int64_t state_floats = Product({rows, 2, row_floats});
    // The states follow as floats: their count is bounded by the input.
    if (row_floats < 0 || state_floats < 0 ||
        state_floats > static_cast<int64_t>(r.left() / sizeof(float))) {
      return r.Fail("recurrent state larger than the input"), r.status();
    }
    std::unique_ptr<SsmCacheBase> c = NewSsmCache(batched, rows, s);
    r.Int(&c->columns_, 0, std::numeric_limits<int32_t>::max(), "columns");
    r.Vector(&c->state_, state_floats, "states");
    r.Vector(&c->active_, rows, "active buffers");
    r.Vector(&c->next_, rows, "next positions");
    r.Bool(&c->armed_);
    r.Bool(&c->verified_);
    r.Vector(&c->snapshot_, c->armed_ ? rows : 0, "snapshots");
    r.Vector(&c->round_real_, c->armed_ ? rows : 0, "round sizes");
    if (!r.ok()) return r.status();
    if (c->verified_ && !c->armed_) return r.Fail("verified without a round"), r.status();
    const int64_t per_token = static_cast<int64_t>(c->RecordFloats());
    c->record_.assign(c->armed_ ? static_cast<size_t>(rows) : 0, {});
    for (int row = 0; row < rows; ++row) {
      if (c->active_[row] > 1 || c->next_[row] < 0 || c->next_[row] > c->columns_) {
        return r.Fail("row " + std::to_string(row) + ": bad buffer index or position"),
               r.status();
      }
      if (!c->armed_) continue;
      const int32_t real = c->round_real_[row];
      if (c->snapshot_[row] > 1 || real < 0 || real > c->next_[row] ||
          (!c->verified_ && real != 0)) {
        return r.Fail("row " + std::to_string(row) + ": bad round state"), r.status();
      }
      const uint8_t expect_active =
          c->verified_ && real > 0 ? static_cast<uint8_t>(1 - c->snapshot_[row])
                                   : c->snapshot_[row];
      if (c->active_[row] != expect_active) {
        return r.Fail("row " + std::to_string(row) + ": round buffers disagree"), r.status();
      }
      r.Vector(&c->record_[row], Product({real, per_token}), "round record");
      if (!r.ok()) return r.status();
    }
    *out = std::move(c);
    return Status::Ok();
  }

  // -------------------------------------------------------------- layout
  static void EncodeLayoutState(const Layout& l, Writer& w) {
    w.Vector(l.bypass_bound_);
    w.Value<uint8_t>(l.armed_ ? 1 : 0);
    w.Value<uint8_t>(l.verified_ ? 1 : 0);
    w.Vector(l.verify_real_);
  }
  static const std::vector<LayerConfig>& Configs(const Layout& l) { return l.configs_; }

  // Caches must agree with the configs and with each other.
  static Status CheckCaches(int rows, const std::vector<LayerConfig>& configs,
                            const std::vector<std::unique_ptr<Cache>>& caches) {
    for (size_t i = 0; i < caches.size(); ++i) {
      const LayerConfig& cfg = configs[i];
      const Cache& c = *caches[i];
      const std::string kind = c.kind();
      if (c.rows() != rows || (rows > 1 && !IsBatchedCache(kind))) {
        return Status::Error("layer " + std::to_string(i) + ": cache of kind " + kind +
                             " with " + std::to_string(c.rows()) + " rows in a layout of " +
                             std::to_string(rows));
      }
      const auto* store = dynamic_cast<const ColumnStore*>(&c);
      const auto* ssm = dynamic_cast<const SsmCacheBase*>(&c);
      bool match = false;
      if (cfg.kind == CacheKind::kSsm && ssm) {
        const SsmShape& s = ssm->shape();
        match = s.value_heads == cfg.heads && s.key_heads == (cfg.kheads ? cfg.kheads : cfg.heads) &&
                s.dk == cfg.dk && s.dv == cfg.dv && s.conv == cfg.conv;
      } else if (cfg.kind != CacheKind::kSsm && store) {
        const int32_t capacity =
            cfg.kind == CacheKind::kRotating ? (cfg.capacity ? cfg.capacity : cfg.window) : 0;
        match = store->kvHeads() == cfg.heads && store->headDim() == cfg.dim &&
                store->window() == cfg.window && store->ringCapacity() == capacity;
      }
      if (!match) {
        return Status::Error("layer " + std::to_string(i) + ": cache of kind " + kind +
                             " does not match the layer's configuration");
      }
      if (c.positions() != caches[0]->positions() || c.columns() != caches[0]->columns()) {
        return Status::Error("layer " + std::to_string(i) + " is out of step with layer 0");
      }
      // Layers that share a mask must hold the same slots.
      for (size_t j = 0; store && j < i; ++j) {
        const auto* other = dynamic_cast<const ColumnStore*>(caches[j].get());
        if (!other || other->window() != store->window() ||
            other->ringCapacity() != store->ringCapacity()) {
          continue;
        }
        if (other->slots_ != store->slots_ || other->first_ != store->first_ ||
            other->held_ != store->held_ || other->slot_pos_ != store->slot_pos_ ||
            other->peak_ != store->peak_ || other->last_write_real_ != store->last_write_real_) {
          return Status::Error("layer " + std::to_string(i) + " is out of lockstep with layer " +
                               std::to_string(j));
        }
      }
    }
    return Status::Ok();
  }

  static Status DecodeLayoutInto(Reader& r, int rows, std::vector<std::unique_ptr<Cache>> caches,
                                 Layout* l) {
    std::vector<int32_t> bypass, verify;
    bool armed = false, verified = false;
    r.Vector(&bypass, -1, "bypass bound");
    r.Bool(&armed);
    r.Bool(&verified);
    r.Vector(&verify, -1, "verify sizes");
    if (!r.ok()) return r.status();
    if (r.left() != 0) return r.Fail("trailing bytes after the layout"), r.status();
    if ((!bypass.empty() && bypass.size() != static_cast<size_t>(rows)) ||
        (verified && !armed) || verify.size() != (verified ? static_cast<size_t>(rows) : 0)) {
      return Status::Error("bad layout round state");
    }
    const std::vector<int32_t> next = caches[0]->positions();
    for (int row = 0; row < rows; ++row) {
      if ((!bypass.empty() && (bypass[row] < 0 || bypass[row] > next[row])) ||
          (verified && (verify[row] < 0 || verify[row] > next[row]))) {
        return Status::Error("bad layout round state for row " + std::to_string(row));
      }
    }
    for (size_t i = 0; i < caches.size(); ++i) {
      const auto* ssm = dynamic_cast<const SsmCacheBase*>(caches[i].get());
      const auto* store = dynamic_cast<const ColumnStore*>(caches[i].get());
      if (ssm && (ssm->armed() != armed || ssm->verified() != verified ||
                  (verified && ssm->round_real_ != verify))) {
        return Status::Error("layer " + std::to_string(i) + ": round state disagrees");
      }
      // The bound of a bypass trim or an accept must be held by every layer.
      const std::vector<int32_t>& bound = verified ? verify : bypass;
      if (store && !bound.empty()) {
        if (store->last_write_real_.empty()) {
          return Status::Error("layer " + std::to_string(i) + ": no last write for the bound");
        }
        for (int row = 0; row < rows; ++row) {
          if (bound[row] > store->last_write_real_[row]) {
            return Status::Error("layer " + std::to_string(i) + ": bound exceeds the last write");
          }
        }
      }
    }
    l->layers_ = std::move(caches);
    l->bypass_bound_ = std::move(bypass);
    l->armed_ = armed;
    l->verified_ = verified;
    l->verify_real_ = std::move(verify);
    return Status::Ok();
  }
};

bool HasCodec(std::string_view kind) {
  return IsPlainKvCache(kind) || IsRotatingCache(kind) || IsRecurrentCache(kind);
}

Status EncodeCache(const Cache& cache, std::string* out) {
  const std::string kind = cache.kind();
  if (!HasCodec(kind)) return Status::Error("no codec for cache kind '" + kind + "'");
  const auto* store = dynamic_cast<const ColumnStore*>(&cache);
  const auto* ssm = dynamic_cast<const SsmCacheBase*>(&cache);
  if (IsRecurrentCache(kind) ? !ssm : !store) {
    return Status::Error("cache of kind '" + kind + "' is not what its kind says");
  }
  std::string bytes;
  Writer w(&bytes);
  w.Raw(kCacheMagic, 4);
  w.Value<uint32_t>(kCodecVersion);
  w.String(kind);
  if (ssm) {
    CacheCodec::EncodeSsm(*ssm, w);
  } else {
    CacheCodec::EncodeColumns(*store, w);
  }
  out->swap(bytes);
  return Status::Ok();
}

namespace {

Status DecodeCacheFrom(Reader& r, std::unique_ptr<Cache>* out) {
  char magic[4];
  uint32_t version = 0;
  std::string kind;
  r.Raw(magic, 4);
  if (r.ok() && std::memcmp(magic, kCacheMagic, 4) != 0) r.Fail("not a kvspec cache");
  r.Value(&version);
  if (r.ok() && version != kCodecVersion) {
    r.Fail("unsupported version " + std::to_string(version));
  }
  r.String(&kind, kMaxStringRead);
  if (!r.ok()) return r.status();
  if (!HasCodec(kind)) return Status::Error("no codec for cache kind '" + kind + "'");
  const bool batched = IsBatchedCache(kind);
  if (IsRecurrentCache(kind)) return CacheCodec::DecodeSsm(r, batched, out);
  return CacheCodec::DecodeColumns(r, batched, IsRotatingCache(kind), out);
}

}  // namespace

Status DecodeCache(std::string_view bytes, std::unique_ptr<Cache>* out) {
  Reader r(bytes);
  std::unique_ptr<Cache> cache;
  KVSPEC_RETURN_IF_ERROR(DecodeCacheFrom(r, &cache));
  if (r.left() != 0) return r.Fail("trailing bytes after the cache"), r.status();
  *out = std::move(cache);
  return Status::Ok();
}

Status EncodeLayout(const Layout& layout, std::string* out) {
  std::string bytes;
  Writer w(&bytes);
  w.Raw(kLayoutMagic, 4);
  w.Value<uint32_t>(kCodecVersion);
  w.Value<int32_t>(layout.rows());
  w.Value<uint32_t>(static_cast<uint32_t>(layout.size()));
  for (size_t i = 0; i < layout.size(); ++i) {
    const LayerConfig& c = CacheCodec::Configs(layout)[i];
    w.String(c.name);
    w.Value<int32_t>(static_cast<int32_t>(c.kind));
    w.Value<int32_t>(c.heads);
    w.Value<int32_t>(c.q_heads);
    w.Value<int32_t>(c.dim);
    w.Value<int32_t>(c.window);
    w.Value<int32_t>(c.capacity);
    w.Value<int32_t>(c.kheads);
    w.Value<int32_t>(c.dk);
    w.Value<int32_t>(c.dv);
    w.Value<int32_t>(c.conv);
    std::string cache;
    KVSPEC_RETURN_IF_ERROR(EncodeCache(layout.cache(i), &cache));
    w.Value<uint64_t>(cache.size());
    w.Raw(cache.data(), cache.size());
  }
  CacheCodec::EncodeLayoutState(layout, w);
  out->swap(bytes);
  return Status::Ok();
}

Status DecodeLayout(std::string_view bytes, std::unique_ptr<Layout>* out) {
  Reader r(bytes);
  char magic[4];
  uint32_t version = 0, layers = 0;
  int32_t rows = 0;
  r.Raw(magic, 4);
  if (r.ok() && std::memcmp(magic, kLayoutMagic, 4) != 0) r.Fail("not a kvspec layout");
  r.Value(&version);
  if (r.ok() && version != kCodecVersion) r.Fail("unsupported version " + std::to_string(version));
  r.Int(&rows, 1, kMaxRowsRead, "rows");
  r.Int(&layers, 1, kMaxLayersRead, "layers");
  if (!r.ok()) return r.status();
  std::vector<LayerConfig> configs;
  std::vector<std::unique_ptr<Cache>> caches;
  for (uint32_t i = 0; i < layers; ++i) {
    LayerConfig c;
    int32_t type = 0;
    r.String(&c.name, kMaxStringRead);
    r.Int(&type, 0, 2, "layer type");
    r.Int(&c.heads, 1, kMaxHeadsRead, "heads");
    r.Int(&c.q_heads, 0, kMaxHeadsRead, "query heads");
    r.Int(&c.dim, 1, kMaxDimRead, "dim");
    r.Int(&c.window, 0, kMaxWindowRead, "window");
    r.Int(&c.capacity, 0, kMaxWindowRead, "capacity");
    r.Int(&c.kheads, 0, kMaxHeadsRead, "key heads");
    r.Int(&c.dk, 1, kMaxDimRead, "dk");
    r.Int(&c.dv, 1, kMaxDimRead, "dv");
    r.Int(&c.conv, 1, static_cast<int64_t>(kMaxConvKernel), "conv");
    uint64_t length = 0;
    r.Value(&length);
    if (!r.ok()) return r.status();
    c.kind = static_cast<CacheKind>(type);
    if (length > r.left()) return r.Fail("layer cache longer than the input"), r.status();
    Reader sub(bytes.substr(r.offset(), static_cast<size_t>(length)));
    std::unique_ptr<Cache> cache;
    Status s = DecodeCacheFrom(sub, &cache);
    if (s.ok() && sub.left() != 0) s = Status::Error("trailing bytes in a layer's cache");
    if (!s.ok()) {
      return Status::Error("layer " + std::to_string(i) + " (at byte " +
                           std::to_string(r.offset()) + "): " + s.message());
    }
    r.Skip(static_cast<size_t>(length));
    configs.push_back(c);
    caches.push_back(std::move(cache));
  }
  // The configs must describe the decoded caches (whose sizes the input
  // bounded) and be a valid layout.
  KVSPEC_RETURN_IF_ERROR(CacheCodec::CheckCaches(rows, configs, caches));
  std::unique_ptr<Layout> layout;
  KVSPEC_RETURN_IF_ERROR(Layout::Create(rows, configs, &layout));
  KVSPEC_RETURN_IF_ERROR(CacheCodec::DecodeLayoutInto(r, rows, std::move(caches), layout.get()));
  *out = std::move(layout);
  return Status::Ok();
}

}  // namespace kvspec
