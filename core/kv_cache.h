// Plain KV caches: KvCache (kind "kv", one row) and BatchedKvCache (kind
// "batched_kv"). Every column ever written stays (until trimmed); storage
// grows geometrically.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "core/cache.h"
#include "core/mask.h"

namespace kvspec {

// Read access to one attention layer's stored keys and values, in physical
// slot order, for the kernels and for inspection.
struct KvView {
  const float* k = nullptr;  // [rows][kv_heads][capacity][dim]
  const float* v = nullptr;  // [rows][kv_heads][capacity][dim]
  size_t head_stride = 0;    // capacity * dim
  size_t row_stride = 0;     // kv_heads * capacity * dim
  int rows = 0;
  int kv_heads = 0;
  int dim = 0;
  const int32_t* slot_pos = nullptr;  // [rows][slot_stride]; -1: no token
  size_t slot_stride = 0;
  int32_t slots = 0;  // slots in use per row

  const float* Key(int row, int head, int32_t slot) const {
    return k + row * row_stride + head * head_stride + static_cast<size_t>(slot) * dim;
  }
  const float* Value(int row, int head, int32_t slot) const {
    return v + row * row_stride + head * head_stride + static_cast<size_t>(slot) * dim;
  }
};

// What every attention cache (plain or ring) offers a layout.
class AttentionCache : public Cache {
 public:
  virtual int kvHeads() const = 0;
  virtual int headDim() const = 0;
  // The layer's sliding window (kNoWindow: none); decides its mask.
  virtual int32_t window() const = 0;

  // Appends one forward's columns. k and v: [rows][L][kv_heads][dim],
  // pad columns included (their contents are stored but never visible).
  virtual Status CheckAppend(const ForwardColumns& cols) const = 0;
  virtual Status Append(const ForwardColumns& cols, const float* k,
                        const float* v) = 0;
  // Drops row r's last drop[r] real tokens (the rejected tips of a verify
  // window); rows may drop different counts. Valid only right after a
  // window write holding at least drop[r] real tokens in row r.
  virtual Status CheckDropTips(const std::vector<int32_t>& drop) const = 0;
  virtual Status DropTips(const std::vector<int32_t>& drop) = 0;
  // Storage bytes after appending `columns` more columns.
  virtual size_t BytesAfterAppend(int32_t columns) const = 0;

  virtual KvView View() const = 0;
  // Real tokens of a row in logical order, as slot indices.
  virtual std::vector<int32_t> LogicalSlots(int row) const = 0;
};

// Shared implementation of KvCache and BatchedKvCache.
class KvCacheBase : public AttentionCache {
 public:
  KvCacheBase(int rows, int kv_heads, int dim, int32_t window = kNoWindow);

  int rows() const override { return rows_; }
  int64_t columns() const override { return columns_; }
  std::vector<int32_t> positions() const override { return next_; }
  size_t bytesPerToken() const override;
  size_t allocatedBytes() const override;
  bool isTrimmable() const override { return true; }
  Status CheckTrim(int32_t n, bool bypass) const override;
  Status trim(int32_t n, bool bypass = false) override;
  void HashState(Hasher* hasher) const override;

  int kvHeads() const override { return kv_heads_; }
  int headDim() const override { return dim_; }
  int32_t window() const override { return window_; }
  Status CheckAppend(const ForwardColumns& cols) const override;
  Status Append(const ForwardColumns& cols, const float* k,
                const float* v) override;
  Status CheckDropTips(const std::vector<int32_t>& drop) const override;
  Status DropTips(const std::vector<int32_t>& drop) override;
  size_t BytesAfterAppend(int32_t columns) const override;
  KvView View() const override;
  std::vector<int32_t> LogicalSlots(int row) const override;

 protected:
  // Removes row r's last drop[r] real tokens (pads after them shift left).
  void Drop(const std::vector<int32_t>& drop);
  void Reserve(int64_t columns);
  size_t Capacity() const { return capacity_; }

  int rows_;
  int kv_heads_;
  int dim_;
  int32_t window_;
  int64_t columns_ = 0;
  size_t capacity_ = 0;            // columns allocated per row
  std::vector<float> k_, v_;       // [rows][kv_heads][capacity][dim]
  std::vector<int32_t> slot_pos_;  // [rows][capacity]; -1: pad
  std::vector<int32_t> next_;      // [rows] next position
  // Real tokens per row of the last write (empty after any other change):
  // the bound of DropTips, and of a bypass trim when it was not a decode.
  std::vector<int32_t> last_write_real_;
  bool last_write_was_decode_ = false;
};

class KvCache final : public WithKind<KvCache, KvCacheBase> {
 public:
  static constexpr std::string_view kKind = kKindKv;
  explicit KvCache(int kv_heads, int dim, int32_t window = kNoWindow)
      : WithKind(1, kv_heads, dim, window) {}
  std::unique_ptr<Cache> Copy() const override {
    return std::make_unique<KvCache>(*this);
  }
};

class BatchedKvCache final : public WithKind<BatchedKvCache, KvCacheBase> {
 public:
  static constexpr std::string_view kKind = kKindBatchedKv;
  BatchedKvCache(int rows, int kv_heads, int dim, int32_t window = kNoWindow)
      : WithKind(rows, kv_heads, dim, window) {}
  std::unique_ptr<Cache> Copy() const override {
    return std::make_unique<BatchedKvCache>(*this);
  }
};

// Checks `cols` against a batch of rows with next positions `next`:
// row count, left + right <= L, left padding only on an empty row.
Status CheckForwardColumns(const ForwardColumns& cols,
                           const std::vector<int32_t>& next);

}  // namespace kvspec
