#include "backend/cuda/device.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "alloy/errors.h"
#include "backend/cuda/tiered.h"
#include "core/hot.h"

namespace alloy::cuda {

std::string arch_name(int cc_major, int cc_minor) {
  return fmt::format("sm_{}{}", cc_major, cc_minor);
}

Context::Context(const Driver& drv, CUdevice dev, CUcontext ctx, CUstream stream, DeviceInfo info)
    : drv_(drv), dev_(dev), ctx_(ctx), stream_(stream), info_(std::move(info)) {
  allocator_ = std::make_unique<Allocator>(
      drv_, [this] { synchronize(); },
      [this] {
        make_current();  // the allocator records events (a free can happen on any thread)
        return streams();
      },
      [this] { return this->stream(); }, [this] { make_current(); },
      // One stream (most programs): no fence, so no driver call and no list.
      &several_streams_);
}

namespace {
// The driver and how many devices it shows, read once; the contexts, created on first use.
// Leaked on purpose (see driver.cpp): buffers may be freed during static destruction.
struct Devices {
  const Driver* drv = nullptr;
  int count = 0;
  std::string reason;  // why there is no device at all
  std::once_flag once[kMaxDevices];
  std::atomic<Context*> contexts[kMaxDevices] = {};
  std::string reasons[kMaxDevices];  // why creating that device's context failed
};

Devices& devices() {
  static Devices* d = [] {
    auto* d = new Devices();
    d->drv = cuda::driver();
    if (!d->drv) {
      d->reason = driver_error();
      return d;
    }
    int count = 0;
    CUresult r = d->drv->cuDeviceGetCount(&count);
    if (r != CUDA_SUCCESS) {
      d->reason = fmt::format("cuDeviceGetCount failed: {}", error_string(*d->drv, r));
    } else if (count == 0) {
      const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
      d->reason = fmt::format("no CUDA device found{}",
                              visible ? fmt::format(" (CUDA_VISIBLE_DEVICES={})", visible) : "");
    }
    d->count = std::min(count, kMaxDevices);
    return d;
  }();
  return *d;
}
}  // namespace

Context* Context::create(int ordinal, std::string* reason) {
  const Driver* drv = devices().drv;
  auto fail = [&](CUresult r, const char* call) -> Context* {
    *reason = fmt::format("GPU {}: {} failed: {}", ordinal, call, error_string(*drv, r));
    return nullptr;
  };
  CUresult r;
  CUdevice dev = 0;
  if ((r = drv->cuDeviceGet(&dev, ordinal)) != CUDA_SUCCESS) return fail(r, "cuDeviceGet");

  DeviceInfo info;
  info.ordinal = ordinal;
  char name[256] = {};
  if (drv->cuDeviceGetName(name, sizeof(name) - 1, dev) == CUDA_SUCCESS) info.name = name;
  auto attr = [&](int a) {
    int v = 0;
    drv->cuDeviceGetAttribute(&v, a, dev);
    return v;
  };
  info.cc_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  info.cc_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  info.arch = arch_name(info.cc_major, info.cc_minor);
  info.multiprocessors = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  info.max_threads_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  for (int i = 0; i < 3; ++i) {
    info.max_block_dim[i] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X + i);
    info.max_grid_dim[i] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X + i);
  }
  info.max_shared_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  info.max_shared_per_block_optin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  drv->cuDeviceTotalMem(&info.total_memory, dev);
  info.driver_version = drv->version;

  // The primary context is the one the CUDA runtime (PyTorch, CuPy...) uses too, so device
  // pointers can be shared with them. Creating it leaves it current on this thread; every entry
  // point makes its device's context current (make_current), so no other device is disturbed.
  CUcontext ctx = nullptr;
  if ((r = drv->cuDevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS) {
    return fail(r, "cuDevicePrimaryCtxRetain");
  }
  if ((r = drv->cuCtxSetCurrent(ctx)) != CUDA_SUCCESS) return fail(r, "cuCtxSetCurrent");
  CUstream stream = nullptr;
  if ((r = drv->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
    return fail(r, "cuStreamCreate");
  }
  return new Context(*drv, dev, ctx, stream, std::move(info));
}

int Context::count() {
  return devices().count;
}

int Context::ordinal_of_stream(CUstream stream) {
  Devices& d = devices();
  if (!d.drv || !stream) return -1;
  const Driver& drv = *d.drv;
  CUcontext owner = nullptr, previous = nullptr;
  if (drv.cuStreamGetCtx(stream, &owner) != CUDA_SUCCESS || !owner) return -1;
  // The context's device: asked with that context current, then the caller's restored.
  CUdevice dev = -1;
  drv.cuCtxGetCurrent(&previous);
  bool ok = drv.cuCtxSetCurrent(owner) == CUDA_SUCCESS && drv.cuCtxGetDevice(&dev) == CUDA_SUCCESS;
  drv.cuCtxSetCurrent(previous);
  if (!ok) return -1;
  for (int i = 0; i < d.count; ++i) {
    CUdevice di = -1;
    if (drv.cuDeviceGet(&di, i) == CUDA_SUCCESS && di == dev) return i;
  }
  return -1;
}

Context* Context::get(int ordinal) {
  Devices& d = devices();
  if (ordinal < 0 || ordinal >= d.count) return nullptr;
  if (Context* c = d.contexts[ordinal].load(std::memory_order_acquire)) return c;
  std::call_once(d.once[ordinal], [&] {
    Context* c = nullptr;
    try {
      c = create(ordinal, &d.reasons[ordinal]);
      d.contexts[ordinal].store(c, std::memory_order_release);
    } catch (const std::exception& e) {
      d.reasons[ordinal] = e.what();
    }
    // The process uses a GPU from now on: its NVRTC workers start and warm up in the background
    // (docs/nvrtc-workers.md, "Workers started ahead"; once per process, never throws).
    if (c) prestart_nvrtc_workers(c->info());
  });
  return d.contexts[ordinal].load(std::memory_order_acquire);
}

Context* Context::existing(int ordinal) {
  Devices& d = devices();
  if (ordinal < 0 || ordinal >= d.count) return nullptr;
  return d.contexts[ordinal].load(std::memory_order_acquire);
}

std::string Context::unavailable_reason(int ordinal) {
  Devices& d = devices();
  if (d.count == 0) return d.reason;
  if (ordinal < 0 || ordinal >= d.count) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return fmt::format("there is no GPU {}: CUDA shows {} GPU{}{}", ordinal, d.count,
                       d.count == 1 ? "" : "s",
                       visible ? fmt::format(" (CUDA_VISIBLE_DEVICES={})", visible) : "");
  }
  return get(ordinal) ? "" : d.reasons[ordinal];
}

void Context::bind_current() {
  CUresult r = drv_.cuCtxSetCurrent(ctx_);
  if (r != CUDA_SUCCESS) throw_error(drv_, r, "cuCtxSetCurrent");
}

Context::LaunchName Context::launch_name(const char* kernel) {
  static_assert(kNameBytes % 8 == 0);
  LaunchName name;
  size_t n = strnlen(kernel, kNameBytes - 1);
  std::memcpy(name.words, kernel, n);  // the rest stays zero: the NUL and the padding
  name.count = static_cast<uint32_t>(n / 8 + 1);
  return name;
}

ALLOY_HOT void Context::note_launch(const LaunchName& name) {
  uint64_t i = launches_since_sync_.fetch_add(1, std::memory_order_relaxed);
  auto& slot = history_[i % kHistory];
  for (uint32_t w = 0; w < name.count; ++w) slot[w].store(name.words[w], std::memory_order_relaxed);
}

ALLOY_HOT void Context::note_launch(const char* kernel) {
  note_launch(launch_name(kernel));
}

std::string Context::history_name(uint64_t i) const {
  char buf[kNameBytes];
  const auto& slot = history_[i % kHistory];
  for (int w = 0; w < kNameBytes / 8; ++w) {
    uint64_t v = slot[w].load(std::memory_order_relaxed);
    std::memcpy(buf + 8 * w, &v, 8);
  }
  return std::string(buf, strnlen(buf, kNameBytes));
}

std::string Context::recent_kernels(std::string* last) const {
  uint64_t n = launches_since_sync_.load(std::memory_order_relaxed);
  if (n == 0) return "";
  uint64_t shown = n < kHistory ? n : kHistory;
  std::string list;
  for (uint64_t i = n - shown; i < n; ++i) {
    if (!list.empty()) list += ", ";
    list += history_name(i);
  }
  if (last) *last = history_name(n - 1);
  if (n > shown) {
    return fmt::format(
        "{} kernels were launched since the last synchronization; the last {} "
        "(oldest first): {}",
        n, shown, list);
  }
  return fmt::format("kernels launched since the last synchronization (oldest first): {}", list);
}

void Context::fail(CUresult result, const char* call, const char* kernel) {
  if (sticky_.load() != CUDA_SUCCESS) throw_sticky();
  std::string err = error_string(drv_, result);
  if (!is_sticky_error(result)) {
    // A failure of this call itself (bad launch configuration, out of resources...).
    std::string name = kernel ? kernel : "";
    throw Error(name, kernel
                          ? fmt::format("CUDA error launching kernel {} ({}): {}", name, call, err)
                          : fmt::format("CUDA error in {}: {}", call, err));
  }
  // A kernel faulted; the fault surfaces at whatever call comes next. Name the kernels that ran.
  std::string last;
  std::string recent = recent_kernels(&last);
  std::string what = fmt::format(
      "CUDA error in asynchronous work (reported by {}): {}; {}. The CUDA context is unusable "
      "after this error: restart the process to use the GPU again.",
      call, err, recent.empty() ? "no kernel was launched since the last synchronization" : recent);
  {
    std::lock_guard lock(history_mu_);
    if (sticky_.load() == CUDA_SUCCESS) {
      sticky_message_ = what;
      sticky_kernel_ = last;
      sticky_.store(result);
    }
  }
  throw Error(last, what);
}

void Context::throw_sticky() const {
  std::lock_guard lock(history_mu_);
  throw Error(sticky_kernel_,
              "the CUDA context is unusable after an earlier error: " + sticky_message_);
}

constinit thread_local CUstream Context::current_stream_[kMaxDevices] = {};

CUstream Context::create_stream() {
  check_usable();
  make_current();
  CUstream s = nullptr;
  check(drv_.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  register_stream(s);
  return s;
}

void Context::register_stream(CUstream s) {
  std::lock_guard lock(streams_mu_);
  if (s != stream_ && std::find(streams_.begin(), streams_.end(), s) == streams_.end()) {
    streams_.push_back(s);
    several_streams_.store(true, std::memory_order_release);
  }
}

std::vector<CUstream> Context::streams() const {
  std::lock_guard lock(streams_mu_);
  std::vector<CUstream> all{stream_};
  all.insert(all.end(), streams_.begin(), streams_.end());
  return all;
}

void Context::synchronize() {
  for (CUstream s : streams()) synchronize_stream(s);
}

void Context::synchronize_stream(CUstream s) {
  check_usable();
  make_current();
  CUresult r = drv_.cuStreamSynchronize(s);
  if (r != CUDA_SUCCESS) {
    if (is_sticky_error(r)) fail(r, "cuStreamSynchronize", nullptr);
    // A non-sticky error from asynchronous work: name the kernels, then start afresh.
    std::string last;
    std::string recent = recent_kernels(&last);
    launches_since_sync_.store(0, std::memory_order_relaxed);
    throw Error(last, fmt::format("CUDA error in asynchronous work: {}; {}", error_string(drv_, r),
                                  recent));
  }
  launches_since_sync_.store(0, std::memory_order_relaxed);
}

}  // namespace alloy::cuda
