// Unit tests of the q8_0 and q4_0 formats and quantizers (kernels/kv_blocks.h,
// kernels/quantize.h), per Highway target:
// - known blocks whose bytes were derived from the format definitions
//   outside this code (Python, numpy's float16 for the scale's rounding):
//   round halves away from zero, a scale that underflows fp16, the sign of
//   q4_0's largest magnitude, zeros, non-finite values;
// - fp16 conversions: known values, and every fp16 read back exactly;
// - QuantizeQ8_0 and QuantizeQ4_0 equal to their scalar references, byte
//   for byte, over random rows of many scales;
// - StoreKvRow refusing dims that are not positive multiples of 32 for
//   q8_0 and q4_0, and LoadKvRow reading back what it stored.
// The comparison with ggml's own quantize_row_*_ref is in the bench preset
// (bench/ggml_peers.cc), where ggml's libraries are linked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "kvspec/kernels/kv_blocks.h"
#include "kvspec/kernels/kv_view.h"
#include "kvspec/kernels/quantize.h"
#include "kvspec/kernels/test_random.h"
#include "kvspec/testing/target_params.h"

namespace kvspec {
namespace {

using kernel_test::Rand;

struct KnownBlock {
  const char* name;
  std::vector<float> x;  // 32 values
  std::vector<uint8_t> q8_0;
  std::vector<uint8_t> q4_0;
};

std::vector<float> Ramp(float (*f)(int)) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = f(j);
  return x;
}

// A ramp with one value replaced by `bad`, and the bytes of a non-finite block.
std::vector<float> NonFinite(int at, float bad) {
  std::vector<float> x = Ramp([](int j) { return (j - 16) * 0.25f; });
  x[static_cast<size_t>(at)] = bad;
  return x;
}
std::vector<uint8_t> NonFiniteBytes(size_t n) {
  std::vector<uint8_t> bytes(n, 0);
  bytes[1] = 0x7E;  // little-endian 0x7E00
  return bytes;
}

// Bytes from the definitions in kernels/quantize.h, computed independently.
std::vector<KnownBlock> KnownBlocks() {
  std::vector<float> ties(32, 0.0f);
  const float head[] = {127, 2.5f, -2.5f, 0.5f, -0.5f, 1.5f, -1.5f, 126.5f};
  std::copy(head, head + 8, ties.begin());
  return {
      {"ramp", Ramp([](int j) { return (j - 16) * 0.25f; }),
       {0x08, 0x28, 0x81, 0x89, 0x91, 0x99, 0xA1, 0xA9, 0xB1, 0xB9, 0xC0, 0xC8,
        0xD0, 0xD8, 0xE0, 0xE8, 0xF0, 0xF8, 0x00, 0x08, 0x10, 0x18, 0x20, 0x28,
        0x30, 0x38, 0x40, 0x47, 0x4F, 0x57, 0x5F, 0x67, 0x6F, 0x77},
       {0x00, 0x38, 0x80, 0x91, 0x91, 0xA2, 0xA2, 0xB3, 0xB3, 0xC4, 0xC4, 0xD5,
        0xD5, 0xE6, 0xE6, 0xF7, 0xF7, 0xF8}},
      {"ties", ties,
       {0x00, 0x3C, 0x7F, 0x03, 0xFD, 0x01, 0xFF, 0x02, 0xFE, 0x7F, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},
       {0xF0, 0xCB, 0x80, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x80, 0x88, 0x88,
        0x88, 0x88, 0x88, 0x88, 0x88, 0x88}},
      {"zero", std::vector<float>(32, 0.0f), std::vector<uint8_t>(34, 0),
       {0x00, 0x80, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88,
        0x88, 0x88, 0x88, 0x88, 0x88, 0x88}},
      {"thirds", Ramp([](int j) { return static_cast<float>(1.0 / 3.0 * ((j * 7) % 11 - 5)); }),
       {0xB8, 0x22, 0x81, 0x33, 0xCD, 0x7F, 0x19, 0xB4, 0x66, 0x00, 0x9A, 0x4C,
        0xE7, 0x81, 0x33, 0xCD, 0x7F, 0x19, 0xB4, 0x66, 0x00, 0x9A, 0x4C, 0xE7,
        0x81, 0x33, 0xCD, 0x7F, 0x19, 0xB4, 0x66, 0x00, 0x9A, 0x4C},
       {0xAB, 0x32, 0x30, 0xEB, 0x85, 0x2F, 0xDA, 0x63, 0x0E, 0xB8, 0x52, 0xFD,
        0xA6, 0x30, 0xEB, 0x85, 0x2F, 0xDA}},
      {"negmax", Ramp([](int j) { return static_cast<float>(j - 20); }),
       {0x0A, 0x31, 0x81, 0x87, 0x8E, 0x94, 0x9A, 0xA1, 0xA7, 0xAD, 0xB4, 0xBA,
        0xC0, 0xC7, 0xCD, 0xD4, 0xDA, 0xE0, 0xE7, 0xED, 0xF3, 0xFA, 0x00, 0x06,
        0x0D, 0x13, 0x19, 0x20, 0x26, 0x2C, 0x33, 0x39, 0x40, 0x46},
       {0x00, 0x41, 0x60, 0x70, 0x71, 0x81, 0x82, 0x82, 0x92, 0x93, 0xA3, 0xA4,
        0xA4, 0xB4, 0xB5, 0xC5, 0xC6, 0xC6}},
      // The scale underflows fp16 to 0; the values are quantized with the
      // fp32 one all the same.
      {"tiny", Ramp([](int j) { return 1e-6f * static_cast<float>(j % 5 - 2); }),
       {0x00, 0x00, 0x81, 0xC1, 0x00, 0x3F, 0x7F, 0x81, 0xC1, 0x00, 0x3F, 0x7F,
        0x81, 0xC1, 0x00, 0x3F, 0x7F, 0x81, 0xC1, 0x00, 0x3F, 0x7F, 0x81, 0xC1,
        0x00, 0x3F, 0x7F, 0x81, 0xC1, 0x00, 0x3F, 0x7F, 0x81, 0xC1},
       {0x04, 0x00, 0x40, 0x84, 0xC8, 0xFC, 0x0F, 0x40, 0x84, 0xC8, 0xFC, 0x0F,
        0x40, 0x84, 0xC8, 0xFC, 0x0F, 0x40}},
      // Non-finite values (a pad column's NaN, an infinity) anywhere in a
      // block: the fp16 NaN scale 0x7E00 and zero quants.
      {"nan_last", NonFinite(31, std::numeric_limits<float>::quiet_NaN()), NonFiniteBytes(34),
       NonFiniteBytes(18)},
      {"inf_first", NonFinite(0, std::numeric_limits<float>::infinity()), NonFiniteBytes(34),
       NonFiniteBytes(18)},
      {"all_nan", std::vector<float>(32, std::numeric_limits<float>::quiet_NaN()),
       NonFiniteBytes(34), NonFiniteBytes(18)},
      {"minus_inf", NonFinite(17, -std::numeric_limits<float>::infinity()), NonFiniteBytes(34),
       NonFiniteBytes(18)},
  };
}

std::string Hex(const void* p, size_t n) {
  std::ostringstream s;
  const uint8_t* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) s << (i ? " " : "") << std::hex << static_cast<int>(b[i]);
  return s.str();
}

TEST(Fp16, KnownValues) {
  struct Known {
    float f;
    uint16_t h;
  };
  const Known known[] = {
      {1.0f, 0x3C00},          {1.0f / 127, 0x2008},        {65504.0f, 0x7BFF},
      {65520.0f, 0x7C00},      {1e-7f, 0x0002},             {0x1p-25f, 0x0000},
      {0x1.000002p-25f, 0x0001}, {0x1.8p-24f, 0x0002},      {-3.3333333f, 0xC2AB},
      {1e-5f, 0x00A8},         {-0.0f, 0x8000},             {INFINITY, 0x7C00},
      {-1e30f, 0xFC00},        {0x1p-15f, 0x0200},          {0x1.ffep-15f, 0x0400},
  };
  for (const Known& k : known) {
    EXPECT_EQ(FloatToF16(k.f), k.h) << k.f;
  }
  EXPECT_EQ(FloatToF16(NAN), 0x7E00);
}

TEST(Fp16, EveryValueReadsBackExactly) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = F16ToFloat(static_cast<uint16_t>(h));
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0) {
      EXPECT_TRUE(std::isnan(f)) << h;
      continue;
    }
    ASSERT_EQ(FloatToF16(f), h) << std::hex << h;
  }
  EXPECT_EQ(F16ToFloat(0x0001), 0x1p-24f);
  EXPECT_EQ(F16ToFloat(0x3C00), 1.0f);
  EXPECT_EQ(F16ToFloat(0xFC00), -INFINITY);
}

class QuantizeTargets : public ::testing::TestWithParam<int64_t> {
 protected:
  testing::TargetScope scope_{GetParam()};
};

TEST_P(QuantizeTargets, KnownBlocks) {
  for (const KnownBlock& k : KnownBlocks()) {
    BlockQ8_0 q8, r8;
    BlockQ4_0 q4, r4;
    QuantizeQ8_0(k.x.data(), 32, &q8);
    QuantizeQ8_0Reference(k.x.data(), 32, &r8);
    QuantizeQ4_0(k.x.data(), 32, &q4);
    QuantizeQ4_0Reference(k.x.data(), 32, &r4);
    EXPECT_EQ(Hex(&q8, 34), Hex(k.q8_0.data(), 34)) << k.name << " q8_0 on " << hwy::TargetName(GetParam());
    EXPECT_EQ(Hex(&r8, 34), Hex(k.q8_0.data(), 34)) << k.name << " q8_0 reference";
    EXPECT_EQ(Hex(&q4, 18), Hex(k.q4_0.data(), 18)) << k.name << " q4_0 on " << hwy::TargetName(GetParam());
    EXPECT_EQ(Hex(&r4, 18), Hex(k.q4_0.data(), 18)) << k.name << " q4_0 reference";
  }
}

// Rows of 1 to 8 blocks at scales from 1e-30 to 1e4, with exact ties
// (integers times a power of two over 127 or 8) among them.
TEST_P(QuantizeTargets, EqualsReference) {
  Rand r(41);
  for (int trial = 0; trial < 400; ++trial) {
    const size_t n = 32 * r.Int(1, 8);
    const float scale = std::pow(10.0f, r.Uniform(-30, 4));
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) {
      x[i] = trial % 3 == 0 ? static_cast<float>(static_cast<int>(r.Int(0, 254)) - 127) * 0.5f
                            : r.Uniform(-1, 1) * scale;
    }
    if (trial % 7 == 0) x[r.Int(0, n - 1)] = -2 * scale;  // a lone largest magnitude
    std::vector<BlockQ8_0> q8(n / 32), r8(n / 32);
    std::vector<BlockQ4_0> q4(n / 32), r4(n / 32);
    QuantizeQ8_0(x.data(), n, q8.data());
    QuantizeQ8_0Reference(x.data(), n, r8.data());
    QuantizeQ4_0(x.data(), n, q4.data());
    QuantizeQ4_0Reference(x.data(), n, r4.data());
    ASSERT_EQ(Hex(q8.data(), n / 32 * 34), Hex(r8.data(), n / 32 * 34))
        << "q8_0 trial " << trial << " on " << hwy::TargetName(GetParam());
    ASSERT_EQ(Hex(q4.data(), n / 32 * 18), Hex(r4.data(), n / 32 * 18))
        << "q4_0 trial " << trial << " on " << hwy::TargetName(GetParam());
  }
}

KVSPEC_FOR_EACH_TARGET(QuantizeTargets);

TEST(StoreKvRow, RefusesDimsThatAreNotMultiplesOf32) {
  std::vector<float> x(96, 1.0f);
  std::vector<uint8_t> out(4 * 96, 0xAB);
  for (KvType type : {KvType::kQ8_0, KvType::kQ4_0}) {
    std::fill(out.begin(), out.end(), 0xAB);
    for (int dim : {0, -32, 1, 16, 31, 33, 48, 95}) {
      const Status s = StoreKvRow(type, x.data(), dim, out.data());
      ASSERT_FALSE(s.ok()) << KvTypeName(type) << " dim " << dim;
      EXPECT_NE(s.message().find(KvTypeName(type)), std::string::npos) << s.message();
      EXPECT_NE(s.message().find("multiple of 32"), std::string::npos) << s.message();
      EXPECT_EQ(out[0], 0xAB);  // nothing written
    }
    EXPECT_TRUE(StoreKvRow(type, x.data(), 96, out.data()).ok());
    EXPECT_FALSE(CheckKvType(type, 40).ok());
  }
  for (KvType type : {KvType::kF32, KvType::kBf16}) {
    EXPECT_TRUE(StoreKvRow(type, x.data(), 17, out.data()).ok()) << KvTypeName(type);
  }
}

TEST(StoreKvRow, ReadsBackAndCountsBytes) {
  Rand r(43);
  std::vector<float> x(64);
  r.Fill(&x, -3, 3);
  EXPECT_EQ(KvRowBytes(KvType::kF32, 64), 256u);
  EXPECT_EQ(KvRowBytes(KvType::kBf16, 64), 128u);
  EXPECT_EQ(KvRowBytes(KvType::kQ8_0, 64), 68u);
  EXPECT_EQ(KvRowBytes(KvType::kQ4_0, 64), 36u);
  for (KvType type : {KvType::kF32, KvType::kBf16, KvType::kQ8_0, KvType::kQ4_0}) {
    std::vector<uint8_t> row(KvRowBytes(type, 64));
    ASSERT_TRUE(StoreKvRow(type, x.data(), 64, row.data()).ok());
    std::vector<float> back(64);
    LoadKvRow(type, row.data(), 64, back.data());
    // Within half a quantization step of the block's scale (d = amax / 127
    // or amax / 8), or bf16's relative 2^-9.
    for (int i = 0; i < 64; ++i) {
      float amax = 0;
      for (int j = i / 32 * 32; j < i / 32 * 32 + 32; ++j) amax = std::max(amax, std::fabs(x[j]));
      const float bound = type == KvType::kF32    ? 0.0f
                          : type == KvType::kBf16 ? std::fabs(x[i]) * 0x1p-8f
                          : type == KvType::kQ8_0 ? amax / 127 * 0.51f
                                                  : amax / 8 * 1.01f;
      ASSERT_LE(std::fabs(back[i] - x[i]), bound) << KvTypeName(type) << " lane " << i;
    }
  }
  BlockQ8_0 b8;
  QuantizeQ8_0Reference(x.data(), 32, &b8);
  std::vector<float> back(32);
  LoadKvRow(KvType::kQ8_0, &b8, 32, back.data());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(back[i], b8.qs[i] * F16ToFloat(b8.d));
}

}  // namespace
}  // namespace kvspec
