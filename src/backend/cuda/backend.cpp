// alloy::Backend over CUDA (memory, streams, NVRTC compile, launches), and the public
// alloy/cuda.h functions.
#include "core/backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "alloy/cuda.h"
#include "alloy/errors.h"
#include "backend/cuda/blas.h"
#include "backend/cuda/device.h"
#include "backend/cuda/graph.h"
#include "backend/cuda/jit.h"
#include "backend/cuda/launch.h"
#include "backend/cuda/nvrtc.h"
#include "backend/cuda/tiered.h"
#include "core/block_pool.h"
#include "core/env.h"
#include "core/hot.h"
#include "core/scheduler.h"
#include "core/trace.h"
#include "msl/translate.h"

namespace alloy {
namespace cuda {
// src/backend/cuda/copy.cpp
void copy_strided(Context& ctx, const void* src, const Shape& shape, const Strides& strides,
                  Dtype src_dtype, void* dst, Dtype dst_dtype);

namespace {
/// Whether a translation with coarsened entries compiles quickly first (ALLOY_QUICK_ENTRY: the
/// unrolled whole-group path left out, the body compiled once) and fully on a background thread.
/// ALLOY_CUDA_TIERED=0 compiles fully at once (benchmarks of a kernel's very first launches).
bool tiered_compile() {
  static const bool on = [] { return env::flag("ALLOY_CUDA_TIERED", true); }();
  return on;
}

/// Whether the quick compile leaves NVVM's optimisation out (-Xnvvm=-opt=0): off unless
/// ALLOY_CUDA_QUICK_NVVM_O0=1. Unoptimised NVVM forms no fused multiply-adds (its PTX has mul.f32
/// and add.f32 where the optimised one has fma.rn.f32, and ptxas -O0 leaves them apart), so the
/// quick code's results would differ in the last bit from the full code's wherever a multiply
/// feeds an add: a kernel's first and later calls must give the same numbers. On the H200 it gave
/// nothing measurable (docs/performance.md, session 9). The option is for measuring the compile.
bool quick_nvvm_unoptimised() {
  static const bool on = [] { return env::flag("ALLOY_CUDA_QUICK_NVVM_O0", false); }();
  return on;
}
}  // namespace

KernelSource kernel_source(const CompileRequest& r) {
  KernelSource k;
  k.name = r.label;
  k.source = r.code;
  for (size_t i = 0; i < r.entries.size(); ++i)
    k.entries.push_back(fmt::format("alloy_entry_{}", i));
  if (r.math_mode == "fast")
    k.options = {"-DALLOY_MATH_FAST", "-D__FAST_MATH__", "--use_fast_math"};
  else if (r.math_mode == "relaxed")
    k.options = {"-DALLOY_MATH_RELAXED"};
  else
    k.options = {"-DALLOY_MATH_SAFE"};
  // Translated kernels use none of what -minimal leaves out (nvrtc::compile drops it where NVRTC
  // is too old to know it; the key includes the NVRTC library, so that stays consistent).
  k.options.push_back("-minimal");
  return k;
}

std::optional<KernelSource> quick_kernel_source(const CompileRequest& r) {
  if (std::none_of(r.entries.begin(), r.entries.end(),
                   [](const CompileEntry& e) { return e.coarsen > 1; }))
    return std::nullopt;
  KernelSource k = kernel_source(r);
  k.options.push_back("-DALLOY_QUICK_ENTRY");
  // ptxas without optimisation: a third of the quick compile's time (the same PTX, so the same
  // results; slower code, which runs only until the full compile is loaded). Its register use is
  // capped at 64 so that every block size up to 1024 threads launches (unoptimised code needs
  // more registers than the full compile's).
  k.options.push_back("--ptxas-options=-O0");
  k.options.push_back("-maxrregcount=64");
  // NVVM without optimisation too (~10% of the quick compile of a small kernel; the code keeps
  // its locals in local memory, calls functions instead of inlining them). A hint: an NVRTC that
  // does not know the option compiles without it (nvrtc::compile_in_process).
  if (quick_nvvm_unoptimised()) k.options.push_back(std::string(nvrtc::kNvvmUnoptimised));
  k.one_group_per_block = true;
  return k;
}

namespace {
// A float metal_kernel's shape as MLX writes it (buffers, then the attribute as a uint3 read by
// component): its translation's prelude core (ALLOY_SELECT, ALLOY_ENTRY_GRID_IDS) is that of any
// kernel that names no optional part of the prelude (NvrtcWorkers.WarmUpHasAMetalKernelsPrefix).
constexpr const char* kWarmUpKernel = R"(#include <metal_stdlib>
using namespace metal;

[[kernel]] void alloy_warm_up(const device float* inp [[buffer(0)]],
                              device float* out [[buffer(1)]],
                              uint3 thread_position_in_grid [[thread_position_in_grid]]) {
  uint i = thread_position_in_grid.x;
  out[i] = inp[i] * 2.0f + 0.25f;
}
)";
}  // namespace

nvrtc::WarmUp first_compile_warm_up(const nvrtc::Target& target) {
  msl::TranslateOptions o;
  o.target = msl::Target::cuda;
  o.label = "alloy_warm_up";
  o.distinct_buffers = true;  // as metal_kernel translates (outputs are fresh allocations)
  msl::Translation tr = msl::translate(kWarmUpKernel, o);
  CompileRequest r;
  r.label = o.label;
  r.code = tr.code;
  r.filename = o.filename;
  r.math_mode = "safe";
  for (const auto& k : tr.kernels)
    r.entries.push_back({k.param_buffers, k.coarsen, k.fibers, k.cuda_block});
  // What CudaBackend::compile compiles first.
  std::optional<KernelSource> first;
  if (tiered_compile()) first = quick_kernel_source(r);
  KernelSource k = first ? std::move(*first) : kernel_source(r);
  k.name = r.label;
  return warm_up_compile(k, target);
}

void prestart_nvrtc_workers(const DeviceInfo& info) {
  static std::atomic<bool> started{false};
  if (!nvrtc::prestart_wanted() || started.exchange(true)) return;
  // Made on the prestart thread, which loads NVRTC: the architecture target_for gives for the
  // device (its own whenever this NVRTC knows it) and the warm-up's translation cost the caller
  // nothing (milliseconds).
  nvrtc::prestart_workers([major = info.cc_major, minor = info.cc_minor] {
    return first_compile_warm_up(nvrtc::target_for(major, minor));
  });
}

namespace {

constexpr int CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2;
constexpr unsigned CU_MEMORYTYPE_HOST = 1;

CUdeviceptr dptr(const void* p) {
  return reinterpret_cast<CUdeviceptr>(p);
}

/// A loaded entry and how to launch it (EntryLayout's arrays live here). `fn` moves from the
/// quick first compile's function to the full compile's when that is loaded (CompiledModule::
/// refine); both take the same parameters and launch layout.
struct LoadedModule;
struct LaunchFunction {
  std::atomic<const Function*> fn{nullptr};  // on the GPU that compiled the module
  int ordinal = 0;                           // that GPU
  size_t entry = 0;                          // index in the module
  LoadedModule* owner = nullptr;
  std::vector<int> param_buffers;
  uint32_t coarsen = 1;
  alloy_cuda_param_layout block{};  // the entry's parameter block (prelude/cuda/abi.h)
};

/// What a launch of `f` with `fn` passes besides the block: the entry's buffer parameters, and
/// the coarsening of the function launched (the quick first compile's entries run one group per
/// block, tiered.h; the full code, loaded meanwhile or not, its coarsened layout).
EntryLayout entry_layout(const LaunchFunction& f, const Function& fn) {
  EntryLayout l;
  l.param_buffers = f.param_buffers.data();
  l.num_param_buffers = static_cast<uint32_t>(f.param_buffers.size());
  l.coarsen = fn.one_group_per_block ? 1u : f.coarsen;
  return l;
}

/// A compiled translation: loaded on the GPU that compiled it, and on another GPU the first time
/// a launch runs there (a CUmodule belongs to one context; the cubin comes from the compile
/// cache, the full compile there). The kernel layer's handles stay valid on every GPU.
struct LoadedModule {
  KernelSource source;  // the full compile's
  std::shared_ptr<const Module> module;
  std::shared_ptr<const Module> refined;  // the full compile, once loaded (set before `fn`)
  std::deque<LaunchFunction> functions;   // (addresses handed out: never moves)
  std::mutex mu;
  std::shared_ptr<const Module> on_device[kMaxDevices];  // on other GPUs

  const Function& function_on(Context& ctx, const LaunchFunction& f) {
    std::lock_guard lock(mu);
    auto& m = on_device[ctx.ordinal()];
    if (!m) m = load(ctx, source);
    return m->function(f.entry);
  }
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(Context& ctx) : ctx_(ctx), drv_(ctx.driver()) {}

  Device::Type type() const override { return Device::Type::gpu; }
  std::string device_name() const override { return ctx_.info().name; }

  // A Buffer's release: the block back to the allocator (`owner`), its size in `block`.
  ALLOY_HOT static void free_block(void* owner, void* ptr, size_t block) {
    static_cast<Allocator*>(owner)->free(ptr, block);
  }

  ALLOY_HOT std::shared_ptr<Buffer> allocate(size_t nbytes) override {
    ctx_.check_usable();  // the allocator makes the context current when it calls the driver
    Allocator* a = &ctx_.allocator();
    size_t block = 0;
    void* p = a->allocate(nbytes, &block);
    // The Buffer from the thread's block pool (core/block_pool.h): no malloc per output.
    auto b = std::allocate_shared<Buffer>(block_pool::Allocator<Buffer>{}, p, nbytes,
                                          Device::gpu(ctx_.ordinal()), &free_block, a, block);
    if (graph_recording::active()) record_allocation(b);
    return b;
  }

  void copy_to_device(void* dst, const void* src, size_t nbytes) override {
    if (nbytes == 0) return;
    graph_recording::reject("a host-to-device copy");
    enter();
    ctx_.check(drv_.cuMemcpyHtoDAsync(dptr(dst), src, nbytes, ctx_.stream()), "cuMemcpyHtoDAsync");
    // From pageable memory the driver stages the bytes before returning; from page-locked memory
    // the copy is truly asynchronous, so wait for it: the caller may reuse `src` at return.
    if (is_page_locked(src)) ctx_.synchronize();
  }

  void copy_to_host(void* dst, const void* src, size_t nbytes) override {
    if (nbytes == 0) return;
    graph_recording::reject("a device-to-host copy (the host waits)");
    enter();
    // The data may come from work on any stream: with several, wait for all of them first.
    if (ctx_.has_several_streams()) ctx_.synchronize();
    ctx_.check(drv_.cuMemcpyDtoHAsync(dst, dptr(src), nbytes, ctx_.stream()), "cuMemcpyDtoHAsync");
    ctx_.synchronize_stream(ctx_.stream());
  }

  void copy_device(void* dst, const void* src, size_t nbytes) override {
    if (nbytes == 0) return;
    graph_recording::reject("a device-to-device copy");
    enter();
    ctx_.check(drv_.cuMemcpyDtoDAsync(dptr(dst), dptr(src), nbytes, ctx_.stream()),
               "cuMemcpyDtoDAsync");
  }

  void copy_strided(const void* src, const Shape& shape, const Strides& strides, Dtype src_dtype,
                    void* dst, Dtype dst_dtype) override {
    graph_recording::reject("a strided copy");
    enter();
    cuda::copy_strided(ctx_, src, shape, strides, src_dtype, dst, dst_dtype);
  }

  void fill(void* dst, size_t nbytes, uint32_t pattern, int pattern_bytes) override {
    if (nbytes == 0) return;
    if ((pattern_bytes != 1 && pattern_bytes != 2 && pattern_bytes != 4) ||
        nbytes % pattern_bytes != 0 || dptr(dst) % pattern_bytes != 0) {
      throw std::invalid_argument(fmt::format(
          "fill: {} bytes at {} with a {}-byte pattern (must be 1, 2 or 4 bytes, dividing the "
          "size and the address)",
          nbytes, dst, pattern_bytes));
    }
    graph_recording::reject("a fill");
    enter();
    CUstream s = ctx_.stream();
    switch (pattern_bytes) {
      case 1:
        ctx_.check(drv_.cuMemsetD8Async(dptr(dst), static_cast<unsigned char>(pattern), nbytes, s),
                   "cuMemsetD8Async");
        break;
      case 2:
        ctx_.check(
            drv_.cuMemsetD16Async(dptr(dst), static_cast<unsigned short>(pattern), nbytes / 2, s),
            "cuMemsetD16Async");
        break;
      default:
        ctx_.check(drv_.cuMemsetD32Async(dptr(dst), pattern, nbytes / 4, s), "cuMemsetD32Async");
    }
  }

  void synchronize() override {
    graph_recording::reject("a synchronization");
    ctx_.synchronize();
  }

  void* create_stream() override { return ctx_.create_stream(); }
  void register_stream(void* stream) override { ctx_.register_stream(cu(stream)); }
  ALLOY_HOT void set_current_stream(void* stream) override { ctx_.set_current_stream(cu(stream)); }
  void synchronize_stream(void* stream) override {
    graph_recording::reject("a stream synchronization");
    ctx_.synchronize_stream(cu(stream));
  }

  std::shared_ptr<void> record_event(void* stream) override {
    graph_recording::reject("an event (work on several streams)");
    enter();
    CUevent e = nullptr;
    constexpr unsigned kDisableTiming = 0x2;
    ctx_.check(drv_.cuEventCreate(&e, kDisableTiming), "cuEventCreate");
    std::shared_ptr<void> event(
        e, [d = &drv_](void* p) { d->cuEventDestroy(static_cast<CUevent>(p)); });
    ctx_.check(drv_.cuEventRecord(e, cu(stream)), "cuEventRecord");
    return event;
  }

  void stream_wait(void* stream, const std::shared_ptr<void>& event) override {
    graph_recording::reject("a wait for another stream");
    enter();
    ctx_.check(drv_.cuStreamWaitEvent(cu(stream), static_cast<CUevent>(event.get()), 0),
               "cuStreamWaitEvent");
  }

  void event_synchronize(const std::shared_ptr<void>& event) override {
    graph_recording::reject("a host wait for an event");
    enter();
    CUresult r = drv_.cuEventSynchronize(static_cast<CUevent>(event.get()));
    // An error of the work before the event: report it as a stream synchronize would.
    if (r != CUDA_SUCCESS) {
      ctx_.synchronize();
      ctx_.check(r, "cuEventSynchronize");
    }
  }

  CompiledModule compile(const CompileRequest& r) override {
    auto m = std::make_shared<LoadedModule>();
    KernelSource full = kernel_source(r);
    // Coarsened entries cost NVVM and ptxas the body coarsen + 1 times (a third of a small
    // kernel's compile): unless the full compile is at hand, the first call gets the quick one.
    std::optional<KernelSource> first;
    if (tiered_compile()) first = quick_kernel_source(r);
    if (first && is_loaded_or_cached(ctx_, full)) first.reset();
    bool quick = first.has_value();
    m->source = full;
    m->module = load(ctx_, quick ? *first : full);
    CompiledModule out;
    for (size_t i = 0; i < r.entries.size(); ++i) {
      LaunchFunction& f = m->functions.emplace_back();
      f.fn.store(&m->module->function(i), std::memory_order_release);
      f.ordinal = ctx_.ordinal();
      f.entry = i;
      f.owner = m.get();
      f.param_buffers = r.entries[i].param_buffers;
      f.coarsen = static_cast<uint32_t>(std::max(1, r.entries[i].coarsen));
      f.block = r.entries[i].cuda_block;
      out.functions.push_back(&f);
    }
    if (quick) {
      out.refine = [m, full = std::move(full), ctx = &ctx_] {
        auto t0 = std::chrono::steady_clock::now();
        try {
          // No caller waits for it: with workers it leaves the in-process NVRTC slot to the
          // next first call (nvrtc::BackgroundScope).
          std::shared_ptr<const Module> better;
          {
            nvrtc::BackgroundScope background;
            better = load(*ctx, full);
          }
          m->refined = better;
          for (size_t i = 0; i < m->functions.size(); ++i)
            m->functions[i].fn.store(&better->function(i), std::memory_order_release);
          if (trace::build())
            std::fprintf(stderr, "alloy: %s: full compile (coarsened entries) ready, %.3f ms\n",
                         full.name.c_str(), trace::ms_since(t0));
        } catch (const std::exception& e) {  // the quick code stays
          if (trace::build())
            std::fprintf(stderr, "alloy: %s: full compile failed, the quick one stays: %s\n",
                         full.name.c_str(), e.what());
        }
      };
    }
    out.module = std::move(m);
    return out;
  }

  void launch(const LaunchDesc& d) override {
    const auto& f = *static_cast<const LaunchFunction*>(d.function);
    // The parameter block as the entry declares it; pack() is the one binder (launch.h).
    ParamBlock P(f.block);
    const Packed packed = pack(d, P);
    // The spill buffer may be released once the launch is enqueued: the allocator frees
    // stream-ordered, so its memory is reused only by work enqueued later.
    std::shared_ptr<Buffer> spill;
    if (packed.spilled) {
      graph_recording::reject("a launch whose arguments spill to device memory");
      std::vector<unsigned char> bytes(packed.spill_bytes);
      spill = allocate(bytes.size());
      spill_into(d, packed, P, bytes.data(), static_cast<char*>(spill->ptr));
      copy_to_device(spill->ptr, bytes.data(), bytes.size());
    }
    // Robust mode: the kernel appends out-of-range records to a small device log (an entry
    // compiled without robust mode has no room for it in its block, and reports nothing).
    constexpr unsigned kOobCapacity = 64;
    std::shared_ptr<Buffer> log;
    alloy_cuda_oob_log oob{};
    if (d.oob) graph_recording::reject("a robust-mode launch");
    if (d.oob && f.block.robust) {
      log = allocate(16 + kOobCapacity * sizeof(alloy_cuda_oob_record));
      fill(log->ptr, 16, 0, 4);
      oob.count = static_cast<unsigned*>(log->ptr);
      oob.records = reinterpret_cast<alloy_cuda_oob_record*>(static_cast<char*>(log->ptr) + 16);
      oob.capacity = kOobCapacity;
    }
    if (f.block.robust) P.set_oob(oob);
    enter();
    const Function& fn = f.ordinal == ctx_.ordinal() ? *f.fn.load(std::memory_order_acquire)
                                                     : f.owner->function_on(ctx_, f);
    cuda::launch(ctx_, fn, P, packed.shared_bytes, d.label, entry_layout(f, fn));
    if (d.oob && d.oob_total) *d.oob_total = 0;
    if (log) {
      unsigned count = 0;
      copy_to_host(&count, log->ptr, 4);
      if (d.oob_total) *d.oob_total = count;
      std::vector<alloy_cuda_oob_record> recs(std::min(count, kOobCapacity));
      if (!recs.empty()) copy_to_host(recs.data(), oob.records, recs.size() * sizeof(recs[0]));
      for (auto& r : recs)
        d.oob->push_back({r.buffer, r.index, {r.thread[0], r.thread[1], r.thread[2]}});
    }
  }

  std::unique_ptr<PreparedLaunch> prepare(const LaunchDesc& d) override {
    const auto& f = *static_cast<const LaunchFunction*>(d.function);
    // Robust launches read their buffers' sizes and log back; launches on another GPU than the
    // module's load it there first; spilled arguments need device memory per launch.
    if (d.oob || f.block.robust || f.ordinal != ctx_.ordinal()) return nullptr;
    auto p = std::make_unique<Prepared>();
    ParamBlock P(f.block);
    const Packed packed = pack(d, P);
    if (packed.spilled) return nullptr;
    p->function = &f;
    p->shared_bytes = packed.shared_bytes;
    p->label = d.label;
    p->name = Context::launch_name(p->label.c_str());
    p->head = P.head;
    for (uint32_t i = 0; i < P.head.num_buffers; ++i)
      if (d.args[i].kind == LaunchArg::Kind::memory)
        p->memory[p->num_memory++] = static_cast<uint8_t>(i);
    std::memcpy(p->block, P.bytes(), f.block.size);
    return p;
  }

  ALLOY_HOT bool launch_prepared(const PreparedLaunch& prepared, const void* const* data) override {
    if (graph_recording::active()) return false;  // launch() records it
    const auto& p = static_cast<const Prepared&>(prepared);
    const LaunchFunction& f = *p.function;
    // The prepared block with this launch's addresses (cuLaunchKernel copies it).
    alignas(16) unsigned char block[ParamBlock::kMaxBytes];
    std::memcpy(block, p.block, f.block.size);
    for (uint32_t k = 0; k < p.num_memory; ++k)
      std::memcpy(block + f.block.buffers + 8 * p.memory[k], &data[p.memory[k]], 8);
    enter();
    // The function as launch() takes it: the full compile's once loaded (tiered.h), and what
    // check_launch said for it.
    const Function& fn = *f.fn.load(std::memory_order_acquire);
    const Prepared::Checked* c = p.checked.load(std::memory_order_acquire);
    if (!c || c->fn != &fn) c = check_prepared(p, fn);
    enqueue_block(ctx_, fn, p.head, c->what, block, f.block.buffers, c->layout, p.label.c_str(),
                  p.name);
    return true;
  }

  size_t by_value_capacity() const override { return ALLOY_CUDA_INLINE_BYTES; }

  bool begin_recording() override { return begin_graph_recording(ctx_); }
  std::unique_ptr<LaunchGraph> end_recording(const std::vector<ExternalRange>& external,
                                             std::string* why) override {
    return end_graph_recording(ctx_, external, why);
  }

  void gemm(const blas::Gemm& g) override {
    enter();
    cuda::gemm(ctx_, g);
  }
  bool blas_available(std::string* why) override { return cuda::blas_available(why); }
  std::string blas_library() override { return cuda::blas_library(); }

 private:
  CUstream cu(void* stream) const {
    return stream ? static_cast<CUstream>(stream) : ctx_.default_stream();
  }
  void enter() {
    ctx_.check_usable();
    ctx_.make_current();
  }

  bool is_page_locked(const void* p) const {
    unsigned type = 0;
    return drv_.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dptr(p)) ==
               CUDA_SUCCESS &&
           type == CU_MEMORYTYPE_HOST;
  }

  // A launch packed once (prepare): the block with its memory entries to fill per launch.
  struct Prepared final : PreparedLaunch {
    const LaunchFunction* function = nullptr;
    uint32_t shared_bytes = 0;
    uint32_t num_memory = 0;
    uint8_t memory[ALLOY_CUDA_MAX_BUFFERS] = {};  // buffer-table entries bound to memory
    std::string label;
    Context::LaunchName name;  // label, as the context's launch history stores it
    alloy_cuda_head head;      // the block's head (every launch's: only addresses change)
    alignas(16) unsigned char block[ParamBlock::kMaxBytes];
    // What check_launch said for a function this launch ran (the quick compile's, then the full
    // one's once loaded: tiered.h). Published whole, so that concurrent launches read one
    // consistent record; each kept while the prepared launch lives.
    struct Checked {
      const Function* fn = nullptr;
      EntryLayout layout;
      Enqueued what;
    };
    mutable std::atomic<const Checked*> checked{nullptr};
    mutable std::mutex checked_mu;
    mutable std::vector<std::unique_ptr<const Checked>> all_checked;
  };

  // The checks of a prepared launch on `fn`, made once per function (they throw as launch()
  // does, and then nothing is kept).
  [[gnu::noinline]] const Prepared::Checked* check_prepared(const Prepared& p, const Function& fn) {
    auto c = std::make_unique<Prepared::Checked>();
    c->fn = &fn;
    c->layout = entry_layout(*p.function, fn);
    c->what = check_launch(ctx_, fn, p.head, p.shared_bytes, p.label.c_str(), c->layout);
    const Prepared::Checked* raw = c.get();
    std::lock_guard lock(p.checked_mu);
    p.all_checked.push_back(std::move(c));
    p.checked.store(raw, std::memory_order_release);
    return raw;
  }

  Context& ctx_;
  const Driver& drv_;
};

}  // namespace

LaunchTarget launch_target(const void* function) {
  const auto& f = *static_cast<const LaunchFunction*>(function);
  LaunchTarget t;
  t.function = f.fn.load(std::memory_order_acquire);
  t.block = f.block;
  t.layout = entry_layout(f, *t.function);
  return t;
}

bool is_available() {
  return Context::get() != nullptr;
}

std::string unavailable_reason() {
  return Context::get() ? "" : Context::unavailable_reason();
}

int device_count() {
  return Context::count();
}

std::string device_name(int device) {
  Context* c = Context::get(device);
  return c ? c->info().name : "";
}

std::string device_arch(int device) {
  Context* c = Context::get(device);
  return c ? c->info().arch : "";
}

MemoryStats memory_stats(int device) {
  Context* c = Context::existing(device);
  return c ? c->allocator().stats() : MemoryStats{};
}

void empty_cache() {
  for (int i = 0; i < Context::count(); ++i)
    if (Context* c = Context::existing(i)) c->allocator().empty_cache();
}

void synchronize() {
  for (int i = 0; i < Context::count(); ++i)
    if (Context* c = Context::existing(i)) c->synchronize();
}

Stream stream_from_handle(void* cu_stream, int device) {
  // The stream's own device (a stream belongs to one device's context); GPU 0 for nullptr, the
  // legacy/per-thread handles, or a handle the driver does not know.
  int index = device >= 0 ? device : Context::ordinal_of_stream(static_cast<CUstream>(cu_stream));
  return scheduler::wrap_gpu_stream(cu_stream, index < 0 ? 0 : index);
}

bool is_idle(int device) {
  for (int i = 0; i < Context::count(); ++i) {
    if (device >= 0 && i != device) continue;
    Context* c = Context::existing(i);
    if (!c) continue;
    c->make_current();
    for (CUstream s : c->streams())
      if (c->driver().cuStreamQuery(s) != CUDA_SUCCESS) return false;
  }
  return true;
}

void* stream_handle(Stream s) {
  if (s.device.type != Device::Type::gpu)
    throw std::invalid_argument("cuda::stream_handle: " + s.str() + " is not a GPU stream");
  void* h = scheduler::gpu_handle(s);
  if (h) return h;
  Context* c = Context::get(s.device.index);
  return c ? c->default_stream() : nullptr;
}

}  // namespace cuda

static_assert(cuda::kMaxDevices == kMaxGpus);

namespace {
// Each GPU's backend, made at its first use. Constant-initialized (no guard to check per call on
// the launch path); the backends are leaked on purpose: buffers may be released during static
// destruction.
constinit std::atomic<Backend*> g_backends[cuda::kMaxDevices] = {};
}  // namespace

ALLOY_HOT Backend* gpu_backend(int index) {
  if (index < 0 || index >= cuda::kMaxDevices) return nullptr;
  if (Backend* b = g_backends[index].load(std::memory_order_acquire)) return b;
  static std::once_flag* once = new std::once_flag[cuda::kMaxDevices];
  std::call_once(once[index], [&] {
    if (cuda::Context* ctx = cuda::Context::get(index))
      g_backends[index].store(new cuda::CudaBackend(*ctx), std::memory_order_release);
  });
  return g_backends[index].load(std::memory_order_acquire);
}

int gpu_count() {
  return cuda::Context::count();
}

std::string gpu_unavailable_reason(int index) {
  return cuda::Context::unavailable_reason(index);
}

std::vector<char> gpu_compile_offline(const CompileRequest& request, const std::string& arch,
                                      bool ptx) {
  if (ptx) {
    auto image = cuda::compile(cuda::kernel_source(request), {arch, false});
    auto n = strnlen(image.bytes.data(), image.bytes.size());
    std::vector<char> text(image.bytes.begin(), image.bytes.begin() + n);
    text.push_back('\0');
    return text;
  }
  int cc = std::stoi(arch.substr(arch.find('_') + 1));
  return cuda::compile(cuda::kernel_source(request), cuda::nvrtc::target_for(cc / 10, cc % 10))
      .bytes;
}

bool gpu_compiler_available(std::string* why) {
  bool ok = cuda::nvrtc::available();
  if (!ok && why) *why = "NVRTC not found: " + cuda::nvrtc::load_error();
  return ok;
}

}  // namespace alloy
