// Built against an installed Alloy (find_package(Alloy), Alloy::alloy): the README's myexp
// kernel on random float32 input, checked against std::exp. Exit status 0 when it matches.
#include <alloy/alloy.h>

#include <cmath>
#include <cstdio>

int main() {
  auto myexp = alloy::metal_kernel("myexp", {"inp"}, {"out"}, R"(
      uint elem = thread_position_in_grid.x;
      T tmp = inp[elem];
      out[elem] = metal::exp(tmp);
  )");
  alloy::Array a = alloy::random_uniform({4, 16}, alloy::float32);
  auto out = myexp({a}, {a.shape()}, {alloy::float32}, {64, 1, 1}, {256, 1, 1},
                   {{"T", alloy::float32}})[0];
  std::vector<double> x = a.to_doubles(), y = out.to_doubles();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i)
    worst = std::fmax(worst, std::fabs(y[i] - std::exp(x[i])) / std::exp(x[i]));
  std::printf("myexp on %s through the installed package: %zu values, max rel. error %.2e\n",
              out.device().type == alloy::Device::Type::gpu ? "gpu" : "cpu", y.size(), worst);
  return worst < 1e-6 ? 0 : 1;
}
