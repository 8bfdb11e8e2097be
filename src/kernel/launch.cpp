#include "kernel/launch.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>

#include "alloy/errors.h"
#include "core/array_node.h"
#include "core/hot.h"
#include "kernel/robust_reports.h"

namespace alloy::kernel {

LaunchBuilder::LaunchBuilder(const char* kind, const std::string& label)
    : kind_(kind), label_(label) {
  desc_.label = label_.c_str();
}

LaunchArg& LaunchBuilder::arg(uint32_t n) {
  if (n >= kMaxArgs)
    throw std::invalid_argument(
        fmt::format("[{}] kernel '{}' binds buffer({}); at most {} buffers "
                    "are supported",
                    kind_, label_, n, kMaxArgs));
  auto* args = reinterpret_cast<LaunchArg*>(args_);
  for (; desc_.num_args <= n; ++desc_.num_args) new (args + desc_.num_args) LaunchArg{};
  desc_.args = std::launder(args);
  return std::launder(args)[n];
}

void LaunchBuilder::memory(uint32_t n, const Array& a) {
  LaunchArg& x = arg(n);
  const ArrayNode& node = *node_of(a);
  x.data = node.data();
  // The whole buffer from the view's start: robust mode bounds accesses by it.
  x.nbytes = node.buffer->nbytes - node.offset * size_of(node.dtype);
  x.kind = LaunchArg::Kind::memory;
}

void LaunchBuilder::bytes(uint32_t n, const void* data, size_t nbytes, bool block) {
  LaunchArg& x = arg(n);
  unsigned char* dst;
  size_t off = (local_used_ + 15) / 16 * 16;
  if (off + nbytes <= sizeof local_) {
    dst = local_ + off;
    local_used_ = off + nbytes;
  } else {
    dst = heap_.emplace_back(new unsigned char[std::max<size_t>(nbytes, 1)]).get();
  }
  if (nbytes) std::memcpy(dst, data, nbytes);
  x.data = dst;
  x.nbytes = nbytes;
  x.kind = block ? LaunchArg::Kind::block : LaunchArg::Kind::bytes;
}

void LaunchBuilder::threadgroup_memory(uint32_t n, uint64_t nbytes) {
  if (n >= 8)
    throw std::invalid_argument(fmt::format(
        "[{}] kernel '{}' binds threadgroup({}); at most 8 are supported", kind_, label_, n));
  desc_.tg_param_bytes[n] = nbytes;
}

void LaunchBuilder::dims(const Dims& grid, const Dims& threadgroup) {
  for (int d = 0; d < 3; ++d) {
    desc_.grid[d] = static_cast<uint32_t>(grid[d]);
    desc_.threadgroup[d] = static_cast<uint32_t>(threadgroup[d]);
  }
}

namespace {
// Runs `enqueue`, rethrowing std::invalid_argument and alloy errors as they are and other
// failures as alloy::Error naming the kernel.
template <class F>
auto launch_reported(const char* kind, const std::string& label, F&& enqueue) {
  try {
    return enqueue();
  } catch (const std::invalid_argument&) {
    throw;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(label, fmt::format("[{}] kernel '{}' failed: {}", kind, label, e.what()));
  }
}
}  // namespace

void LaunchBuilder::launch(const CompiledKernel& k, Device device, bool robust,
                           const BufferNamer& namer) {
  desc_.function = k.function;
  desc_.buffer_names = &namer;
  std::vector<OobRecord> oob;
  uint64_t oob_total = 0;
  if (robust) {
    desc_.oob = &oob;
    desc_.oob_total = &oob_total;
  }
  launch_reported(kind_, label_, [&] { backend(device).launch(desc_); });
  if (robust && oob_total > 0) {
    std::vector<OutOfRangeAccess> kept;
    for (auto& r : oob)
      kept.push_back({label_, namer(r.buffer), r.index, {r.thread[0], r.thread[1], r.thread[2]}});
    add_out_of_range(label_, oob_total, std::move(kept));
  }
}

std::unique_ptr<PreparedLaunch> LaunchBuilder::prepare(const CompiledKernel& k, Device device) {
  desc_.function = k.function;
  desc_.buffer_names = nullptr;
  desc_.oob = nullptr;
  desc_.oob_total = nullptr;
  try {
    return backend(device).prepare(desc_);
  } catch (const std::exception&) {
    return nullptr;  // launched with launch() as before
  }
}

ALLOY_HOT bool launch_prepared(Backend& be, const PreparedLaunch& prepared, const void* const* data,
                               const char* kind, const std::string& label) {
  return launch_reported(kind, label, [&] { return be.launch_prepared(prepared, data); });
}

Dims effective_threadgroup(const Dims& grid, const Dims& tg) {
  Dims t;
  for (int d = 0; d < 3; ++d) t[d] = std::max(1, std::min(tg[d], grid[d]));
  return t;
}

}  // namespace alloy::kernel
