// Random test inputs that are exact in every float dtype the tests use: uniform in
// [-bound, bound), rounded to multiples of 1/denominator.
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace alloy::testing {

inline std::vector<double> random_values(size_t n, uint64_t seed, double bound = 4,
                                         double denominator = 8) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(-bound, bound);
  std::vector<double> v(n);
  for (auto& x : v) x = std::round(d(rng) * denominator) / denominator;
  return v;
}

}  // namespace alloy::testing
