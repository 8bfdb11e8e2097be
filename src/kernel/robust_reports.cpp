#include "kernel/robust_reports.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "core/gpu_backend.h"

namespace alloy {
namespace {
std::mutex g_mu;
std::vector<OutOfRangeAccess> g_reports;
constexpr size_t kMaxKept = 4096;
}  // namespace

bool robust_by_default() {
  static const bool on = [] {
    const char* v = std::getenv("ALLOY_ROBUST");
    return v && *v && std::string(v) != "0";
  }();
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

void collect_cpu_reports(const std::string& kernel, const cpu::OobLog& log,
                         const BufferNamer& name) {
  if (log.count() == 0) return;
  std::vector<OutOfRangeAccess> kept;
  for (auto& r : log.reports())
    kept.push_back({kernel,
                    name(r.buffer),
                    r.index,
                    {r.thread_position_in_grid[0], r.thread_position_in_grid[1],
                     r.thread_position_in_grid[2]}});
  add_out_of_range(kernel, log.count(), std::move(kept));
}

void GpuOobLog::attach(alloy_cuda_launch& L) {
  size_t bytes = 16 + kCapacity * sizeof(alloy_cuda_oob_record);
  buffer_ = gpu_backend()->allocate(bytes);
  gpu_backend()->fill(buffer_->ptr, 16, 0, 4);
  L.oob_count = static_cast<unsigned*>(buffer_->ptr);
  L.oob_records = reinterpret_cast<alloy_cuda_oob_record*>(static_cast<char*>(buffer_->ptr) + 16);
  L.oob_capacity = kCapacity;
}

void GpuOobLog::collect(const std::string& kernel, const alloy_cuda_launch& L,
                        const BufferNamer& name) {
  unsigned count = 0;
  gpu_backend()->copy_to_host(&count, buffer_->ptr, 4);
  if (count == 0) return;
  std::vector<alloy_cuda_oob_record> recs(std::min(count, kCapacity));
  gpu_backend()->copy_to_host(recs.data(), L.oob_records, recs.size() * sizeof(recs[0]));
  std::vector<OutOfRangeAccess> kept;
  for (auto& r : recs)
    kept.push_back({kernel, name(r.buffer), r.index, {r.thread[0], r.thread[1], r.thread[2]}});
  add_out_of_range(kernel, count, std::move(kept));
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
