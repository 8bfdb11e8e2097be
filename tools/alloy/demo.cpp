#include "demo.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <functional>

#include "alloy/alloy.h"
#include "example_kernels.h"
#include "example_references.h"

namespace alloy::tools {
namespace {

double seconds(const std::function<void()>& f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Max |got - want| / (atol + rtol |want|); <= 1 passes.
double score(const std::vector<double>& got, const std::vector<double>& want, double rtol,
             double atol) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double s = std::fabs(got[i] - want[i]) / (atol + rtol * std::fabs(want[i]));
    if (std::isnan(got[i])) s = INFINITY;
    worst = std::max(worst, s);
  }
  return worst;
}

bool report(const char* what, double cold, double warm, double s) {
  bool ok = s <= 1.0;
  fmt::print("  {:<28} {:>6}   first call {:8.1f} ms (compile incl.)   warm {:8.3f} ms\n", what,
             ok ? "OK" : "WRONG", cold * 1e3, warm * 1e3);
  return ok;
}

}  // namespace

int run_demo(const std::string& which) {
  Device dev = which == "cpu" ? Device::cpu() : which == "gpu" ? Device::gpu() : default_device();
  if (dev.type == Device::Type::gpu && !gpu_available())
    throw std::invalid_argument("no GPU is available (no CUDA driver or device)");
  fmt::print("Alloy demo on {}{}\n", dev.str(),
             gpu_available() ? "" : " (no CUDA GPU found: running on the CPU)");
  bool ok = true;

  {  // exp, contiguous and strided
    const int n = 1 << 20;
    std::vector<double> xs(n);
    for (int i = 0; i < n; ++i) xs[i] = std::sin(i * 0.37) * 4;
    Array x = Array::from_doubles(xs, {n}, float32, dev);
    auto k = metal_kernel("myexp", {"inp"}, {"out"}, examples::kExpSource);
    auto run = [&] {
      auto out = k({x}, {{n}}, {float32}, {n, 1, 1}, {256, 1, 1}, {{"T", float32}}, std::nullopt,
                   false, dev)[0];
      out.eval();
      synchronize(dev);
      return out;
    };
    double cold = seconds([&] { run(); }), warm = seconds([&] { run(); });
    std::vector<double> want(n);
    for (int i = 0; i < n; ++i) want[i] = std::exp(static_cast<double>(static_cast<float>(xs[i])));
    ok &= report("exp (2^20 float32)", cold, warm, score(run().to_doubles(), want, 1e-5, 1e-6));

    Array big = Array::from_doubles(xs, {n / 1024, 1024}, float32, dev);
    Array view = big.slice({{std::nullopt, std::nullopt, 2}, {std::nullopt, std::nullopt, 3}});
    auto ks = metal_kernel("myexp_strided", {"inp"}, {"out"}, examples::kExpStridedSource, "",
                           /*ensure_row_contiguous=*/false);
    int m = static_cast<int>(view.size());
    auto runs = [&] {
      auto out = ks({view}, {view.shape()}, {float32}, {m, 1, 1}, {256, 1, 1}, {{"T", float32}},
                    std::nullopt, false, dev)[0];
      out.eval();
      synchronize(dev);
      return out;
    };
    cold = seconds([&] { runs(); });
    warm = seconds([&] { runs(); });
    auto vin = view.to_doubles();
    std::vector<double> wants(vin.size());
    for (size_t i = 0; i < vin.size(); ++i) wants[i] = std::exp(vin[i]);
    ok &= report("exp strided ([::2, ::3] view)", cold, warm,
                 score(runs().to_doubles(), wants, 1e-5, 1e-6));
  }

  {  // grid_sample forward and backward
    examples::GridSampleDims d{2, 64, 64, 32, 48, 48};
    std::vector<double> xs(d.B * d.H * d.W * d.C), gs(d.B * d.gH * d.gW * 2),
        cs(d.B * d.gH * d.gW * d.C);
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::cos(i * 0.013);
    for (size_t i = 0; i < gs.size(); ++i) gs[i] = 1.1 * std::sin(i * 0.71);  // some taps outside
    for (size_t i = 0; i < cs.size(); ++i) cs[i] = std::sin(i * 0.29);
    Array x = Array::from_doubles(xs, {d.B, d.H, d.W, d.C}, float32, dev);
    Array grid = Array::from_doubles(gs, {d.B, d.gH, d.gW, 2}, float32, dev);
    Array cot = Array::from_doubles(cs, {d.B, d.gH, d.gW, d.C}, float32, dev);
    // Reference on the float32-rounded inputs.
    xs = x.to_doubles();
    gs = grid.to_doubles();
    cs = cot.to_doubles();
    int n = static_cast<int>(d.B * d.gH * d.gW * d.C);

    auto fwd = metal_kernel("grid_sample", {"x", "grid"}, {"out"}, examples::kGridSampleSource);
    auto run = [&] {
      auto out = fwd({x, grid}, {{d.B, d.gH, d.gW, d.C}}, {float32}, {n, 1, 1}, {256, 1, 1},
                     {{"T", float32}}, std::nullopt, false, dev)[0];
      out.eval();
      synchronize(dev);
      return out;
    };
    double cold = seconds([&] { run(); }), warm = seconds([&] { run(); });
    ok &= report("grid_sample forward", cold, warm,
                 score(run().to_doubles(), examples::grid_sample_ref(xs, gs, d), 1e-4, 1e-5));

    auto bwd = metal_kernel("grid_sample_grad", {"x", "grid", "cotangent"}, {"x_grad", "grid_grad"},
                            examples::kGridSampleGradSource, "", true, /*atomic_outputs=*/true);
    std::vector<Array> grads;
    auto runb = [&] {
      grads = bwd({x, grid, cot}, {x.shape(), grid.shape()}, {float32, float32}, {n, 1, 1},
                  {256, 1, 1}, {}, /*init_value=*/0.0, false, dev);
      eval(grads);
      synchronize(dev);
    };
    cold = seconds(runb);
    warm = seconds(runb);
    std::vector<double> wx, wg;
    examples::grid_sample_grad_ref(xs, gs, cs, d, wx, wg);
    double s = std::max(score(grads[0].to_doubles(), wx, 1e-4, 1e-4),
                        score(grads[1].to_doubles(), wg, 1e-3, 1e-3));
    ok &= report("grid_sample backward (atomics)", cold, warm, s);
  }
  fmt::print("{}\n",
             ok ? "All example kernels match their float64 references." : "SOME RESULTS ARE WRONG");
  return ok ? 0 : 1;
}

}  // namespace alloy::tools
