#include "kernel/robust_reports.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "core/env.h"

namespace alloy {
namespace {
std::mutex g_mu;
std::vector<OutOfRangeAccess> g_reports;
constexpr size_t kMaxKept = 4096;
}  // namespace

bool robust_by_default() {
  static const bool on = [] { return env::flag("ALLOY_ROBUST", false); }();
  return on;
}

std::vector<OutOfRangeAccess> take_out_of_range_reports() {
  std::lock_guard lock(g_mu);
  return std::exchange(g_reports, {});
}

namespace kernel {

void add_out_of_range(const std::string& kernel, uint64_t total,
                      std::vector<OutOfRangeAccess> kept) {
  if (total == 0) return;
  if (!kept.empty()) {
    const auto& f = kept.front();
    std::string kept_note =
        total > kept.size()
            ? fmt::format("; the first {} are kept for take_out_of_range_reports()", kept.size())
            : "";
    fmt::print(stderr,
               "alloy: robust mode: kernel '{}' made {} out-of-range access{} (suppressed); "
               "first: buffer '{}' index {} at thread ({}, {}, {}){}\n",
               kernel, total, total == 1 ? "" : "es", f.buffer, f.index, f.thread[0], f.thread[1],
               f.thread[2], kept_note);
  }
  std::lock_guard lock(g_mu);
  for (auto& r : kept)
    if (g_reports.size() < kMaxKept) g_reports.push_back(std::move(r));
}

std::string buffer_name(const KernelSpec& spec, const std::vector<msl::Binding>& bindings,
                        uint32_t buffer) {
  if (buffer >= bindings.size()) return fmt::format("buffer({})", buffer);
  const auto& b = bindings[buffer];
  switch (b.kind) {
    case msl::BindingKind::input:
      return spec.input_names[b.index];
    case msl::BindingKind::input_shape:
      return spec.input_names[b.index] + "_shape";
    case msl::BindingKind::input_strides:
      return spec.input_names[b.index] + "_strides";
    case msl::BindingKind::input_ndim:
      return spec.input_names[b.index] + "_ndim";
    case msl::BindingKind::output:
      return spec.output_names[b.index];
  }
  return fmt::format("buffer({})", buffer);
}

}  // namespace kernel
}  // namespace alloy
