#include "kvspec/core/batch.h"

#include <algorithm>
#include <exception>
#include <limits>
#include <string>

#include "kvspec/core/invariants.h"
#include "kvspec/core/kv_cache.h"
#include "kvspec/core/ssm_cache.h"

namespace kvspec {
namespace {

// Classifies a cache by its kind string; anything unknown is refused.
Status KindOf(const Cache& cache, CacheKind* cache_kind) {
  const std::string kind = cache.kind();
  bool batched = false;
  if (!ParseKindString(kind, cache_kind, &batched)) {
    return Status::Error("unknown cache kind '" + kind + "': refused");
  }
  // The kind must match the object: a kind string is not a type.
  const bool is_store = cache.AsColumnStore() != nullptr;
  const bool is_ssm = cache.AsRecurrent() != nullptr;
  if ((*cache_kind == CacheKind::kSsm && !is_ssm) || (*cache_kind != CacheKind::kSsm && !is_store)) {
    return Status::Error("cache of kind '" + kind + "' is not what its kind says: refused");
  }
  return Status::Ok();
}

Status NotArmed(const Cache& cache) {
  const auto* ssm = cache.AsRecurrent();
  if (ssm && ssm->armed()) {
    return Status::Error("a speculative round is armed: commit or roll back first");
  }
  return Status::Ok();
}

// Rows (cache, row) gathered into one cache of the given cache_kind.
struct Source {
  const Cache* cache;
  int row;
};

// What Gather allocates: the new cache's storage (sized from what the rows
// hold) and a recurrent cache's scratch.
size_t GatherBytes(CacheKind cache_kind, const std::vector<Source>& rows, int64_t columns) {
  const int n = static_cast<int>(rows.size());
  if (cache_kind == CacheKind::kSsm) {
    return SsmCacheBase::BytesWhenBuilt(n,
                                        static_cast<const SsmCacheBase&>(*rows[0].cache).shape());
  }
  const auto& first = static_cast<const ColumnStore&>(*rows[0].cache);
  std::vector<ColumnStore::RowSource> src;
  for (const Source& s : rows) src.push_back({static_cast<const ColumnStore*>(s.cache), s.row});
  return ColumnStore::StorageBytes(n, first.kvHeads(), first.headDim(), first.kvType(),
                                   ColumnStore::GatheredSlots(src, columns));
}

Status Gather(CacheKind cache_kind, bool batched, const std::vector<Source>& rows, int64_t columns,
              std::unique_ptr<Cache>* out) {
  const int n = static_cast<int>(rows.size());
  if (cache_kind == CacheKind::kSsm) {
    const auto& first = static_cast<const SsmCacheBase&>(*rows[0].cache);
    std::unique_ptr<SsmCacheBase> c = NewSsmCache(batched, n, first.shape());
    std::vector<SsmCacheBase::RowSource> src;
    for (const Source& s : rows) {
      src.push_back({static_cast<const SsmCacheBase*>(s.cache), s.row});
    }
    c->GatherRows(src, columns);
    *out = std::move(c);
    return Status::Ok();
  }
  const auto& first = static_cast<const ColumnStore&>(*rows[0].cache);
  std::unique_ptr<ColumnStore> c =
      NewColumnStore(batched, n, first.kvHeads(), first.headDim(), first.window(),
                     first.ringCapacity(), first.kvType());
  std::vector<ColumnStore::RowSource> src;
  int64_t peak = 0;
  for (const Source& s : rows) {
    const auto* store = static_cast<const ColumnStore*>(s.cache);
    src.push_back({store, s.row});
    peak = std::max(peak, store->peak());
  }
  c->GatherRows(src, columns, peak);
  *out = std::move(c);
  return Status::Ok();
}

// The checks of FilterRows; *src: the rows to gather.
Status PlanFilter(const Cache& cache, const std::vector<int32_t>& rows, CacheKind* cache_kind,
                  std::vector<Source>* src) {
  KVSPEC_RETURN_IF_ERROR(KindOf(cache, cache_kind));
  KVSPEC_RETURN_IF_ERROR(NotArmed(cache));
  if (rows.empty()) return Status::Error("filter needs at least one row");
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= cache.rows()) {
      return Status::Error("filter: no row " + std::to_string(rows[i]) + " (the batch has " +
                           std::to_string(cache.rows()) + ")");
    }
    if (i > 0 && rows[i] <= rows[i - 1]) {
      return Status::Error("filter: rows must be strictly ascending");
    }
  }
  for (int32_t r : rows) src->push_back({&cache, r});
  return Status::Ok();
}

// The checks of MergeRows; *src: the rows to gather, *columns: the result's.
Status PlanMerge(const std::vector<const Cache*>& caches, CacheKind* cache_kind,
                 std::vector<Source>* src, int64_t* columns) {
  if (caches.empty()) return Status::Error("merge needs at least one cache");
  KVSPEC_RETURN_IF_ERROR(KindOf(*caches[0], cache_kind));
  *columns = 0;
  for (const Cache* c : caches) {
    CacheKind other;
    KVSPEC_RETURN_IF_ERROR(KindOf(*c, &other));
    KVSPEC_RETURN_IF_ERROR(NotArmed(*c));
    if (other != *cache_kind) {
      return Status::Error("cannot join a " + c->kind() + " cache with a " +
                           caches[0]->kind() + " cache");
    }
    const bool same =
        *cache_kind == CacheKind::kSsm
            ? static_cast<const SsmCacheBase*>(c)->SameShape(
                  *static_cast<const SsmCacheBase*>(caches[0]))
            : static_cast<const ColumnStore*>(c)->SameShape(
                  *static_cast<const ColumnStore*>(caches[0]));
    if (!same) return Status::Error("cannot join caches of different shapes");
    for (int r = 0; r < c->rows(); ++r) src->push_back({c, r});
    *columns = std::max(*columns, c->columns());
  }
  return Status::Ok();
}

// The checks of ExtractRow.
Status PlanExtract(const Cache& cache, int32_t row, CacheKind* cache_kind) {
  KVSPEC_RETURN_IF_ERROR(KindOf(cache, cache_kind));
  KVSPEC_RETURN_IF_ERROR(NotArmed(cache));
  if (row < 0 || row >= cache.rows()) {
    return Status::Error("extract: no row " + std::to_string(row) + " (the batch has " +
                         std::to_string(cache.rows()) + ")");
  }
  return Status::Ok();
}

}  // namespace

Status FilterRows(const Cache& cache, const std::vector<int32_t>& rows,
                  std::unique_ptr<Cache>* out) {
  return RefuseOnAllocationFailure("FilterRows", [&]() -> Status {
    CacheKind cache_kind;
    std::vector<Source> src;
    KVSPEC_RETURN_IF_ERROR(PlanFilter(cache, rows, &cache_kind, &src));
    return Gather(cache_kind, IsBatchedCache(cache.kind()), src, cache.columns(), out);
  });
}

Status JoinRows(const Cache& a, const Cache& b, std::unique_ptr<Cache>* out) {
  return RefuseOnAllocationFailure("JoinRows", [&]() -> Status {
    return MergeRows({&a, &b}, out);
  });
}

Status ExtractRow(const Cache& cache, int32_t row, std::unique_ptr<Cache>* out) {
  return RefuseOnAllocationFailure("ExtractRow", [&]() -> Status {
    CacheKind cache_kind;
    KVSPEC_RETURN_IF_ERROR(PlanExtract(cache, row, &cache_kind));
    if (cache_kind == CacheKind::kSsm) {
      const int64_t count = cache.positions()[row];
      return Gather(cache_kind, false, {{&cache, row}}, count, out);
    }
    const auto& store = static_cast<const ColumnStore&>(cache);
    std::unique_ptr<ColumnStore> c =
        NewColumnStore(false, 1, store.kvHeads(), store.headDim(), store.window(),
                       store.ringCapacity(), store.kvType());
    c->GatherRealTokens(store, row);
    *out = std::move(c);
    return Status::Ok();
  });
}

Status MergeRows(const std::vector<const Cache*>& caches, std::unique_ptr<Cache>* out) {
  return RefuseOnAllocationFailure("MergeRows", [&]() -> Status {
    CacheKind cache_kind;
    std::vector<Source> src;
    int64_t columns = 0;
    KVSPEC_RETURN_IF_ERROR(PlanMerge(caches, &cache_kind, &src, &columns));
    return Gather(cache_kind, true, src, columns, out);
  });
}

// The byte counts: the same checks, then what Gather would allocate. When
// even their own small lists cannot be allocated, the count is unknown: the
// largest size_t (a budget refuses it).
size_t FilterRowsBytes(const Cache& cache, const std::vector<int32_t>& rows) {
  try {
    CacheKind cache_kind;
    std::vector<Source> src;
    if (!PlanFilter(cache, rows, &cache_kind, &src).ok()) return 0;
    return GatherBytes(cache_kind, src, cache.columns());
  } catch (const std::exception&) {
    return std::numeric_limits<size_t>::max();
  }
}

size_t MergeRowsBytes(const std::vector<const Cache*>& caches) {
  try {
    CacheKind cache_kind;
    std::vector<Source> src;
    int64_t columns = 0;
    if (!PlanMerge(caches, &cache_kind, &src, &columns).ok()) return 0;
    return GatherBytes(cache_kind, src, columns);
  } catch (const std::exception&) {
    return std::numeric_limits<size_t>::max();
  }
}

size_t ExtractRowBytes(const Cache& cache, int32_t row) {
  try {
    CacheKind cache_kind;
    if (!PlanExtract(cache, row, &cache_kind).ok()) return 0;
    if (cache_kind == CacheKind::kSsm) {
      return GatherBytes(cache_kind, {{&cache, row}}, cache.positions()[row]);
    }
    const auto& store = static_cast<const ColumnStore&>(cache);
    return ColumnStore::StorageBytes(1, store.kvHeads(), store.headDim(), store.kvType(),
                                     store.HeldTokens(row));
  } catch (const std::exception&) {
    return std::numeric_limits<size_t>::max();
  }
}

}  // namespace kvspec
