// AttentionRequestsOn: where Attend requests the rows it is about to read,
// chosen per CPU family (plain C++, the same on every Highway target).
#include "kvspec/kernels/attention.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>  // __get_cpuid: the CPU family
#endif

#include "hwy/base.h"  // HWY_ARCH_X86

namespace kvspec {

// Each choice below was the faster one for cold decodes on that CPU; see
// docs/benchmarks.md.
// - Intel: the next block into L1 along a block's computation, and no
//   request at a block's start (it stalled on L1's miss buffers while the
//   lines came from L2).
// - AMD Zen 4 and other CPUs: into L2 (requests into L1 stalled a Zen 4
//   core on its miss buffers), and fp32 blocks requested again into L1 as
//   their computation starts.
// - AMD Zen 5 and later: bf16 into L1, with no request at a block's start
//   (its widening already makes a block's computation long); fp32
//   non-temporally, with the request at a block's start. A lone query's
//   keys in segments non-temporally too (presumably keeping a head's keys
//   and values out of L2, where the scores are); 4 KiB ahead for short bf16
//   rows;
//   rows of 1 KiB or more (fp32 dim 256) block by block, not in segments.
AttentionRequests AttentionRequestsOn(bool bf16) {
  // 0: elsewhere, 1: Intel, 2: AMD family 0x1A (Zen 5) or later.
#if HWY_ARCH_X86 && (defined(__GNUC__) || defined(__clang__))
  static const int cpu = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_is("intel")) return 1;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__builtin_cpu_is("amd") || !__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
    const unsigned base = (eax >> 8) & 0xF;
    const unsigned family = base == 0xF ? base + ((eax >> 20) & 0xFF) : base;
    return family >= 0x1A ? 2 : 0;
  }();
#else
  const int cpu = 0;
#endif
  AttentionRequests r;
  if (cpu == 1 || (cpu == 2 && bf16)) {
    r.along = RowRequest::kL1;
  } else {
    r.along = cpu == 2 ? RowRequest::kNonTemporal : RowRequest::kL2;
    r.block_start_l1 = !bf16;
  }
  r.segments = cpu == 2 ? RowRequest::kNonTemporal : RowRequest::kL1;
  if (cpu == 2) {
    if (bf16) r.segments_ahead_short = 4096;  // SegmentsAheadBytes
    r.segments_below = 1024;
  }
  return r;
}

}  // namespace kvspec
