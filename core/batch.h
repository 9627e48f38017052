// Batch lifecycle: filter, join, extract and merge, for every cache kind.
//
// Every row keeps exactly the visible sets, positions and outputs a
// single-row cache fed only its tokens would have. Rows of different
// lengths are right-justified behind left padding; rings at different
// phases are laid out again in logical order. Kinds are checked with the
// capability predicates and fail closed: an unknown kind, a mix of kinds or
// shapes, or an armed recurrent round is refused and nothing changes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kvspec/core/cache.h"
#include "kvspec/base/status.h"

namespace kvspec {

// Keeps `rows` (non-empty, strictly ascending, existing), renumbered from 0.
// The result has the input's kind.
Status FilterRows(const Cache& cache, const std::vector<int32_t>& rows,
                  std::unique_ptr<Cache>* out);

// Appends b's rows after a's. The result is of the batched kind, with the
// larger side's columns and the larger peak.
Status JoinRows(const Cache& a, const Cache& b, std::unique_ptr<Cache>* out);

// Row `row` as its own single-row cache (kv, rotating or ssm), as if fed
// only that row's tokens.
Status ExtractRow(const Cache& cache, int32_t row, std::unique_ptr<Cache>* out);

// Single-row caches (or any caches) joined in order into one batch.
Status MergeRows(const std::vector<const Cache*>& caches, std::unique_ptr<Cache>* out);

// The bytes FilterRows, MergeRows (and JoinRows: MergeRows({&a, &b})) and
// ExtractRow allocate for their result, computed without allocating, so
// that a caller can hold them to a memory budget first: the result's
// storage (its allocatedBytes(): sized from the columns the rows hold,
// never from a ring's capacity alone) plus a recurrent cache's one-token
// scratch. Besides it the calls allocate only lists of one entry per row.
// 0 for arguments the call refuses; the largest size_t when even those
// lists could not be allocated.
size_t FilterRowsBytes(const Cache& cache, const std::vector<int32_t>& rows);
size_t MergeRowsBytes(const std::vector<const Cache*>& caches);
size_t ExtractRowBytes(const Cache& cache, int32_t row);

}  // namespace kvspec
