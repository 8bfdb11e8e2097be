// alloy::Backend over the host: memory from the host allocator, the host compiler's JIT
// (jit.cpp), and the thread-loop / fiber executor (executor.cpp). CPU streams are the scheduler's
// worker threads, so the stream and event calls have nothing to do here.
#include "backend/cpu/backend.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <stdexcept>

#include "alloy/errors.h"
#include "backend/cpu/blas.h"
#include "backend/cpu/executor.h"
#include "backend/cpu/jit.h"
#include "core/backend.h"
#include "core/env.h"
#include "core/host_allocator.h"
#include "core/primitives.h"
#include "core/trace.h"

namespace alloy {
namespace cpu {
namespace {

struct Module;

std::atomic<uint64_t> g_switches{0};

// A tiered compile's second half (docs/cpu-backend.md, "Tiered compile"): the full tier, compiled
// once by whichever comes first, the compile pool (CompiledModule::refine) or a launch too large
// for the quick code; then every function of the module switches to it.
struct Tiers {
  std::string code;
  JitOptions full;
  std::string label;
  std::mutex mu;                    // held while the full tier compiles
  std::atomic<bool> done{false};    // compiled (or failed: the quick code stays)
  std::atomic<pid_t> compiling{0};  // the process compiling it (a forked child must not wait)
  void finish(Module& m);
};

struct Module {
  std::shared_ptr<Library> library;  // keeps the shared object loaded (the quick tier if tiered)
  std::shared_ptr<Library> full;     // the full tier, once loaded (tiered)
  std::deque<Function> functions;    // (addresses handed out: never moves)
  std::unique_ptr<Tiers> tiers;
};

// The entries of `lib`; false when one is missing.
bool resolve(const Library& lib, size_t i, alloy_cpu_group_fn* group, alloy_cpu_thread_fn* thread,
             alloy_cpu_groups_fn* groups) {
  *group =
      reinterpret_cast<alloy_cpu_group_fn>(lib.symbol(fmt::format("alloy_group_{}", i).c_str()));
  *thread =
      reinterpret_cast<alloy_cpu_thread_fn>(lib.symbol(fmt::format("alloy_thread_{}", i).c_str()));
  // Loop-mode kernels only; a library without it runs one group per call.
  *groups =
      reinterpret_cast<alloy_cpu_groups_fn>(lib.symbol(fmt::format("alloy_groups_{}", i).c_str()));
  return *group && *thread;
}

void Tiers::finish(Module& m) {
  if (done.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(mu);
  if (done.load(std::memory_order_relaxed)) return;
  compiling.store(::getpid());
  auto t0 = std::chrono::steady_clock::now();
  try {
    auto lib = cpu::compile(code, full);
    struct Entry {
      alloy_cpu_group_fn group;
      alloy_cpu_thread_fn thread;
      alloy_cpu_groups_fn groups;
    };
    std::vector<Entry> e(m.functions.size());
    for (size_t i = 0; i < e.size(); ++i)
      if (!resolve(*lib, i, &e[i].group, &e[i].thread, &e[i].groups))
        throw std::runtime_error("the full compile lacks entry " + std::to_string(i));
    m.full = std::move(lib);  // before any launch can reach its code
    for (size_t i = 0; i < e.size(); ++i) {
      m.functions[i].groups.store(e[i].groups, std::memory_order_release);
      m.functions[i].group.store(e[i].group, std::memory_order_release);
      m.functions[i].thread.store(e[i].thread, std::memory_order_release);
    }
    g_switches.fetch_add(1);
    if (trace::build())
      std::fprintf(stderr, "alloy: %s: cpu full compile ready, %.3f ms\n", label.c_str(),
                   trace::ms_since(t0));
  } catch (const std::exception& e) {  // the quick code stays
    if (trace::build())
      std::fprintf(stderr, "alloy: %s: cpu full compile failed, the quick one stays: %s\n",
                   label.c_str(), e.what());
  }
  compiling.store(0);
  done.store(true, std::memory_order_release);
}

// A launch of at least this many threads waits for the full tier (compiling it on the calling
// thread unless the pool is at it): the quick code is 2-40x slower per thread (its compile
// saves ~0.03 s of CPU, which 2^20 threads of the examples' exp lose again at ~10 ns each)
// (docs/cpu-backend.md, "Tiered compile").
constexpr uint64_t kFullTierThreads = uint64_t{1} << 20;

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
    JitOptions full{math_flags(r.math_mode)};
    // Tiered: unless the full tier is at hand (loaded, or on disk), the first call gets the quick
    // tier and the full one compiles on the compile pool.
    bool quick = tiered_compile() && !Jit::global().cached(r.code, full);
    try {
      JitOptions first = full;
      first.quick = quick;
      m->library = cpu::compile(r.code, first);
    } catch (const CompileFailure& f) {
      throw CompileError(r.label, f.log(), f.log());
    }
    CompiledModule out;
    for (size_t i = 0; i < r.entries.size(); ++i) {
      Function& f = m->functions.emplace_back();
      alloy_cpu_group_fn g;
      alloy_cpu_thread_fn t;
      alloy_cpu_groups_fn gs;
      if (!resolve(*m->library, i, &g, &t, &gs))
        throw Error(r.label, "[metal_kernel] compiled library lacks entry " + std::to_string(i));
      f.group.store(g, std::memory_order_relaxed);
      f.thread.store(t, std::memory_order_relaxed);
      f.groups.store(gs, std::memory_order_relaxed);
      f.fibers = r.entries[i].fibers;
      out.functions.push_back(&f);
    }
    if (quick) {
      m->tiers = std::make_unique<Tiers>();
      m->tiers->code = r.code;
      m->tiers->full = std::move(full);
      m->tiers->full.background = true;
      m->tiers->label = r.label;
      for (Function& f : m->functions) f.tiers = m.get();
      out.refine = [m] { m->tiers->finish(*m); };
    }
    out.module = std::move(m);
    return out;
  }

  void launch(const LaunchDesc& d) override {
    const auto& fn = *static_cast<const Function*>(d.function);
    if (d.grid[0] == 0 || d.grid[1] == 0 || d.grid[2] == 0) return;
    if (fn.tiers) wait_for_full_tier(*static_cast<Module*>(fn.tiers), d);
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
    run(L, fn.group.load(std::memory_order_acquire), fn.thread.load(std::memory_order_acquire),
        fn.fibers, opts, fn.groups.load(std::memory_order_acquire));
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

  // A large launch of quick code: the full tier first (kFullTierThreads).
  static void wait_for_full_tier(Module& m, const LaunchDesc& d) {
    Tiers& t = *m.tiers;
    if (t.done.load(std::memory_order_acquire)) return;
    uint64_t threads = uint64_t{d.grid[0]} * d.grid[1] * d.grid[2];
    if (threads < kFullTierThreads) return;
    // A forked child whose parent was compiling it: that compile never finishes here.
    pid_t c = t.compiling.load();
    if (c != 0 && c != ::getpid()) return;
    t.finish(m);
  }

  void gemm(const blas::Gemm& g) override { cpu::gemm(g); }
  bool blas_available(std::string* why) override { return cpu::blas_available(why); }
  std::string blas_library() override { return cpu::blas_library(); }
};

}  // namespace

uint64_t full_tier_switches() {
  return g_switches.load();
}

bool tiered_compile() {
  // Read at every compile (a compile costs far more): tests and benchmarks switch it.
  return env::flag("ALLOY_CPU_TIERED", true);
}

}  // namespace cpu

Backend& cpu_backend() {
  // Leaked on purpose: buffers may be released during static destruction.
  static Backend* backend = new cpu::CpuBackend();
  return *backend;
}

}  // namespace alloy
