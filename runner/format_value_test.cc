// The runner prints `out` values with std::to_chars (general, precision 9)
// instead of snprintf("%.9g") (runner/runner_emit.cc): the C++ standard
// specifies the same text, and the runner's standard output must stay
// byte-identical. Checked here against snprintf itself: special values,
// every subnormal near the bottom and top of that range, the neighbours of
// every power of two, and about a million bit patterns spread over all
// 2^32 (a prime stride), both signs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "kvspec/runner/runner_internal.h"

namespace kvspec::trace::runner_internal {
namespace {

std::string Printf(float v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Counts the bit patterns (and their negatives) whose texts differ; prints
// the first few.
int Mismatches(uint32_t bits, int* reported) {
  int bad = 0;
  for (uint32_t b : {bits, bits ^ 0x80000000u}) {
    const float v = FromBits(b);
    const std::string got = FormatValue(v), want = Printf(v);
    std::string appended = "x";
    AppendValue(&appended, v);
    if (got != want || appended != "x" + want) {
      ++bad;
      if ((*reported)++ < 5) {
        ADD_FAILURE() << std::hex << b << ": FormatValue " << got << ", AppendValue "
                      << appended.substr(1) << ", %.9g " << want;
      }
    }
  }
  return bad;
}

TEST(FormatValue, SpecialValuesPrintAsPrintfDoes) {
  int reported = 0;
  const float specials[] = {0.0f,
                            1.0f,
                            0.1f,
                            1e-5f,
                            123456789.0f,
                            1e9f,
                            3.40282347e38f,
                            std::numeric_limits<float>::min(),
                            std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()};
  int bad = 0;
  for (float v : specials) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    bad += Mismatches(bits, &reported);
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(FormatValue(-0.0f), "-0");
  EXPECT_EQ(FormatValue(std::numeric_limits<float>::infinity()), "inf");
  EXPECT_EQ(FormatValue(0.1f), "0.100000001");
}

TEST(FormatValue, BitPatternsPrintAsPrintfDoes) {
  int reported = 0, bad = 0;
  long checked = 0;
  for (uint32_t b = 0; b < 65536; ++b) {  // the smallest subnormals
    bad += Mismatches(b, &reported);
    ++checked;
  }
  for (uint32_t b = 0x007f0000u; b < 0x00810000u; ++b) {  // largest subnormals, smallest normals
    bad += Mismatches(b, &reported);
    ++checked;
  }
  for (uint32_t e = 0; e < 256; ++e) {  // around every power of two, and nan payloads
    for (uint32_t m = 0; m < 64; ++m) {
      bad += Mismatches((e << 23) | m, &reported);
      bad += Mismatches(((e << 23) | 0x7fffffu) - m, &reported);
      checked += 2;
    }
  }
  for (uint64_t b = 0; b <= 0xffffffffu; b += 4099) {
    bad += Mismatches(static_cast<uint32_t>(b), &reported);
    ++checked;
  }
  EXPECT_EQ(bad, 0) << "of " << checked << " bit patterns (each with both signs)";
}

}  // namespace
}  // namespace kvspec::trace::runner_internal
