// alloy::Backend over the host: memory from the host allocator, the host compiler's JIT
// (jit.cpp), and the thread-loop / fiber executor (executor.cpp). CPU streams are the scheduler's
// worker threads, so the stream and event calls have nothing to do here.
#include "backend/cpu/backend.h"

#include <fmt/format.h>

#include <cstring>
#include <deque>
#include <stdexcept>

#include "alloy/errors.h"
#include "backend/cpu/blas.h"
#include "backend/cpu/executor.h"
#include "backend/cpu/jit.h"
#include "core/backend.h"
#include "core/host_allocator.h"
#include "core/primitives.h"

namespace alloy {
namespace cpu {
namespace {

struct Module {
  std::shared_ptr<Library> library;  // keeps the shared object loaded
  std::deque<Function> functions;    // (addresses handed out: never moves)
};

std::vector<std::string> math_flags(const std::string& math_mode) {
  if (math_mode == "fast") return {"-DALLOY_MATH_FAST", "-D__FAST_MATH__"};
  if (math_mode == "relaxed") return {"-DALLOY_MATH_RELAXED"};
  return {"-DALLOY_MATH_SAFE"};
}

class CpuBackend final : public Backend {
 public:
  // The compiler is made with the backend: whoever makes the backend before registering exit
  // handlers (the compile pool) sees it destroyed only after them.
  CpuBackend() { Jit::global(); }
  Device::Type type() const override { return Device::Type::cpu; }
  std::string device_name() const override { return "cpu"; }

  std::shared_ptr<Buffer> allocate(size_t nbytes) override {
    return std::make_shared<Buffer>(host_alloc(nbytes), nbytes, Device::cpu(), &host_free);
  }
  void copy_to_device(void* dst, const void* src, size_t nbytes) override {
    if (nbytes) std::memcpy(dst, src, nbytes);
  }
  void copy_to_host(void* dst, const void* src, size_t nbytes) override {
    if (nbytes) std::memcpy(dst, src, nbytes);
  }
  void copy_device(void* dst, const void* src, size_t nbytes) override {
    if (nbytes) std::memmove(dst, src, nbytes);
  }
  void copy_strided(const void* src, const Shape& shape, const Strides& strides, Dtype src_dtype,
                    void* dst, Dtype dst_dtype) override {
    copy_convert_host(src, shape, strides, src_dtype, dst, dst_dtype);
  }
  void fill(void* dst, size_t nbytes, uint32_t pattern, int pattern_bytes) override {
    if (nbytes == 0) return;
    if ((pattern_bytes != 1 && pattern_bytes != 2 && pattern_bytes != 4) ||
        nbytes % pattern_bytes != 0)
      throw std::invalid_argument(
          fmt::format("fill: {} bytes with a {}-byte pattern (must be 1, 2 or 4 bytes, dividing "
                      "the size)",
                      nbytes, pattern_bytes));
    if (pattern_bytes == 1) {
      std::memset(dst, static_cast<int>(pattern & 0xff), nbytes);
      return;
    }
    auto* p = static_cast<unsigned char*>(dst);
    for (size_t i = 0; i < nbytes; i += pattern_bytes) std::memcpy(p + i, &pattern, pattern_bytes);
  }
  void synchronize() override {}

  void* create_stream() override { return nullptr; }
  void register_stream(void*) override {
    throw std::invalid_argument("the CPU has no external streams to register");
  }
  void set_current_stream(void*) override {}
  void synchronize_stream(void*) override {}
  std::shared_ptr<void> record_event(void*) override { return nullptr; }
  void stream_wait(void*, const std::shared_ptr<void>&) override {}
  void event_synchronize(const std::shared_ptr<void>&) override {}

  CompiledModule compile(const CompileRequest& r) override {
    auto m = std::make_shared<Module>();
    try {
      m->library = cpu::compile(r.code, {math_flags(r.math_mode)});
    } catch (const CompileFailure& f) {
      throw CompileError(r.label, f.log(), f.log());
    }
    CompiledModule out;
    for (size_t i = 0; i < r.entries.size(); ++i) {
      Function f;
      f.group = reinterpret_cast<alloy_cpu_group_fn>(
          m->library->symbol(fmt::format("alloy_group_{}", i).c_str()));
      f.thread = reinterpret_cast<alloy_cpu_thread_fn>(
          m->library->symbol(fmt::format("alloy_thread_{}", i).c_str()));
      // Loop-mode kernels only; a library without it runs one group per call.
      f.groups = reinterpret_cast<alloy_cpu_groups_fn>(
          m->library->symbol(fmt::format("alloy_groups_{}", i).c_str()));
      if (!f.group || !f.thread)
        throw Error(r.label, "[metal_kernel] compiled library lacks entry " + std::to_string(i));
      f.fibers = r.entries[i].fibers;
      out.functions.push_back(&m->functions.emplace_back(f));
    }
    out.module = std::move(m);
    return out;
  }

  void launch(const LaunchDesc& d) override {
    const auto& fn = *static_cast<const Function*>(d.function);
    if (d.grid[0] == 0 || d.grid[1] == 0 || d.grid[2] == 0) return;
    if (d.num_args > ALLOY_CPU_MAX_BUFFERS)
      throw std::invalid_argument(
          fmt::format("kernel '{}' has {} buffers; at most {} are supported", d.label, d.num_args,
                      ALLOY_CPU_MAX_BUFFERS));
    void* buffers[ALLOY_CPU_MAX_BUFFERS];
    uint64_t sizes[ALLOY_CPU_MAX_BUFFERS];
    for (uint32_t i = 0; i < d.num_args; ++i) {
      // Host memory either way: bytes arguments are read where they are.
      buffers[i] = const_cast<void*>(d.args[i].data);
      sizes[i] = d.args[i].nbytes;
    }
    alloy_cpu_launch L{};
    L.buffers = buffers;
    L.buffer_bytes = sizes;
    L.num_buffers = d.num_args;
    for (int k = 0; k < 3; ++k) {
      L.grid[k] = d.grid[k];
      L.threadgroup[k] = d.threadgroup[k];
    }
    std::memcpy(L.tg_param_bytes, d.tg_param_bytes, sizeof L.tg_param_bytes);
    set_groups(L);
    ExecOptions opts;
    opts.kernel = d.label;
    opts.buffer_names = d.buffer_names;
    OobLog log;
    if (d.oob) opts.oob = &log;
    run(L, fn.group, fn.thread, fn.fibers, opts, fn.groups);
    if (d.oob) {
      for (const auto& r : log.reports())
        d.oob->push_back({r.buffer,
                          r.index,
                          {r.thread_position_in_grid[0], r.thread_position_in_grid[1],
                           r.thread_position_in_grid[2]}});
      if (d.oob_total) *d.oob_total = log.count();
    }
  }

  size_t by_value_capacity() const override { return SIZE_MAX; }

  void gemm(const blas::Gemm& g) override { cpu::gemm(g); }
  bool blas_available(std::string* why) override { return cpu::blas_available(why); }
  std::string blas_library() override { return cpu::blas_library(); }
};

}  // namespace
}  // namespace cpu

Backend& cpu_backend() {
  // Leaked on purpose: buffers may be released during static destruction.
  static Backend* backend = new cpu::CpuBackend();
  return *backend;
}

}  // namespace alloy
