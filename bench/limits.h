// Physical limits the benchmarks are reported against (bench/limits.cc).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvspec {
namespace bench {

// Runs `iterations` rounds of 12 independent vector multiply-adds on the
// Highway target chosen now and returns a value that depends on all of
// them (pass it to benchmark::DoNotOptimize).
double FmaLoop(size_t iterations, float seed);
// Floating-point operations (2 per lane per multiply-add) of FmaLoop.
double FmaLoopFlops(size_t iterations);
// Reads `bytes` of `data` as `streams` equal contiguous parts walked side by
// side (256 bytes of each per round, the lines 2 KiB ahead prefetched into
// L1, or non-temporally (prefetchnta) when non_temporal, as Attend
// requests some of its rows on some CPUs), every byte loaded into vector
// registers of the Highway target chosen now; returns a sum of them (pass
// it to benchmark::DoNotOptimize). The parts are rounded down to 256 bytes:
// ReadStreamsBytes is what it reads.
uint64_t ReadStreams(const void* data, size_t bytes, size_t streams, bool non_temporal = false);
size_t ReadStreamsBytes(size_t bytes, size_t streams);
// data[i] *= scale for i < n in place, whole vectors of the Highway target
// chosen now (four per round), then the scalar tail: the access pattern of
// an in-place state update.
void ScaleInPlace(float* data, size_t n, float scale);
// The memory traffic of ConvStep (kernels/conv1d.h) with its multiply-adds
// and without its SiLU, on the target chosen now: the packed weights and the
// kernel-order state of `channels` (whole kConvBlock blocks only; a last
// narrower block is skipped) read, the state shifted in place with x as its
// newest row, u = the multiply-add sums. What the step's loads and stores
// cost with this layout.
void ConvTraffic(const float* w, float* state, const float* x, float* u, size_t channels,
                 size_t kernel);
// The decode's loads and multiply-adds alone, for one head's keys or
// values and four query heads (q: [4][dim], dim a multiple of the vector
// length; slots a multiple of 4): the rows of head (fp32, or bf16 when
// bf16) in blocks of 8 KiB in slot order, the next block's rows requested
// one per row as Attend requests them on this CPU
// (AttentionRequestsOn(bf16): along, and block_start_l1), each vector of
// each row multiplied into four accumulators, no lane sums, softmax or
// bookkeeping. Returns a sum of the accumulators (pass it to DoNotOptimize).
float DecodeTraffic(const void* head, bool bf16, size_t slots, size_t dim, const float* q);
// The same loads and multiply-adds in another order (slots a multiple of
// 4): the rows cut into four segments read side by side, four sequential
// streams instead of one (each group of four rows takes one row from each
// segment; each segment requests its rows the way Attend requests its
// keys in segments, as far ahead (SegmentsAheadBytes) and with the same
// hint (AttentionRequestsOn(bf16).segments)). Not an order Attend can
// take for the values without changing its arithmetic: each output lane
// sums the values in slot order.
float DecodeTrafficInSegments(const void* head, bool bf16, size_t slots, size_t dim,
                              const float* q);
// The target FmaLoop and ReadStreams dispatch to now.
const char* LimitsTargetName();

}  // namespace bench
}  // namespace kvspec
