// The deterministic random engine the kernel tests share (fixed seeds, so a
// failure reruns as it was).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace kvspec::kernel_test {

class Rand {
 public:
  explicit Rand(uint32_t seed) : gen_(seed) {}
  float Uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen_); }
  size_t Int(size_t lo, size_t hi) { return std::uniform_int_distribution<size_t>(lo, hi)(gen_); }
  void Fill(std::vector<float>* v, float lo, float hi) {
    for (float& x : *v) x = Uniform(lo, hi);
  }

 private:
  std::mt19937 gen_;
};

}  // namespace kvspec::kernel_test
