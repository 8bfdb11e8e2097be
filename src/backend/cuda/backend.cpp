// alloy::GpuBackend over CUDA, and the public alloy/cuda.h functions.
#include <fmt/format.h>

#include <stdexcept>

#include "alloy/cuda.h"
#include "alloy/errors.h"
#include "backend/cuda/device.h"
#include "core/gpu_backend.h"
#include "core/scheduler.h"

namespace alloy {
namespace cuda {
// src/backend/cuda/copy.cpp
void copy_strided(Context& ctx, const void* src, const Shape& shape, const Strides& strides,
                  Dtype src_dtype, void* dst, Dtype dst_dtype);
namespace {

constexpr int CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2;
constexpr unsigned CU_MEMORYTYPE_HOST = 1;

CUdeviceptr dptr(const void* p) {
  return reinterpret_cast<CUdeviceptr>(p);
}

class CudaBackend final : public GpuBackend {
 public:
  explicit CudaBackend(Context& ctx) : ctx_(ctx), drv_(ctx.driver()) {}

  std::string device_name() const override { return ctx_.info().name; }

  std::shared_ptr<Buffer> allocate(size_t nbytes) override {
    ctx_.check_usable();
    ctx_.make_current();
    Allocator* a = &ctx_.allocator();
    void* p = a->allocate(nbytes);
    return std::make_shared<Buffer>(p, nbytes, Device::gpu(0),
                                    [a](void* ptr, size_t) { a->free(ptr); });
  }

  void copy_to_device(void* dst, const void* src, size_t nbytes) override {
    if (nbytes == 0) return;
    enter();
    ctx_.check(drv_.cuMemcpyHtoDAsync(dptr(dst), src, nbytes, ctx_.stream()), "cuMemcpyHtoDAsync");
    // From pageable memory the driver stages the bytes before returning; from page-locked memory
    // the copy is truly asynchronous, so wait for it: the caller may reuse `src` at return.
    if (is_page_locked(src)) ctx_.synchronize();
  }

  void copy_to_host(void* dst, const void* src, size_t nbytes) override {
    if (nbytes == 0) return;
    enter();
    // The data may come from work on any stream: with several, wait for all of them first.
    if (ctx_.has_several_streams()) ctx_.synchronize();
    ctx_.check(drv_.cuMemcpyDtoHAsync(dst, dptr(src), nbytes, ctx_.stream()), "cuMemcpyDtoHAsync");
    ctx_.synchronize_stream(ctx_.stream());
  }

  void copy_device(void* dst, const void* src, size_t nbytes) override {
    if (nbytes == 0) return;
    enter();
    ctx_.check(drv_.cuMemcpyDtoDAsync(dptr(dst), dptr(src), nbytes, ctx_.stream()),
               "cuMemcpyDtoDAsync");
  }

  void copy_strided(const void* src, const Shape& shape, const Strides& strides, Dtype src_dtype,
                    void* dst, Dtype dst_dtype) override {
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

  void synchronize() override { ctx_.synchronize(); }

  void* create_stream() override { return ctx_.create_stream(); }
  void register_stream(void* stream) override { ctx_.register_stream(cu(stream)); }
  void set_current_stream(void* stream) override { Context::set_current_stream(cu(stream)); }
  void synchronize_stream(void* stream) override { ctx_.synchronize_stream(cu(stream)); }

  std::shared_ptr<void> record_event(void* stream) override {
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
    enter();
    ctx_.check(drv_.cuStreamWaitEvent(cu(stream), static_cast<CUevent>(event.get()), 0),
               "cuStreamWaitEvent");
  }

  void event_synchronize(const std::shared_ptr<void>& event) override {
    enter();
    CUresult r = drv_.cuEventSynchronize(static_cast<CUevent>(event.get()));
    // An error of the work before the event: report it as a stream synchronize would.
    if (r != CUDA_SUCCESS) {
      ctx_.synchronize();
      ctx_.check(r, "cuEventSynchronize");
    }
  }

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

  Context& ctx_;
  const Driver& drv_;
};

}  // namespace

bool is_available() {
  return Context::get() != nullptr;
}

std::string unavailable_reason() {
  return Context::get() ? "" : Context::unavailable_reason();
}

std::string device_name() {
  Context* c = Context::get();
  return c ? c->info().name : "";
}

std::string device_arch() {
  Context* c = Context::get();
  return c ? c->info().arch : "";
}

MemoryStats memory_stats() {
  Context* c = Context::get();
  return c ? c->allocator().stats() : MemoryStats{};
}

void empty_cache() {
  if (Context* c = Context::get()) c->allocator().empty_cache();
}

void synchronize() {
  if (Context* c = Context::get()) c->synchronize();
}

Stream stream_from_handle(void* cu_stream) {
  return scheduler::wrap_gpu_stream(cu_stream);
}

bool is_idle() {
  Context* c = Context::get();
  if (!c) return true;
  c->make_current();
  for (CUstream s : c->streams())
    if (c->driver().cuStreamQuery(s) != CUDA_SUCCESS) return false;
  return true;
}

void* stream_handle(Stream s) {
  if (s.device.type != Device::Type::gpu)
    throw std::invalid_argument("cuda::stream_handle: " + s.str() + " is not a GPU stream");
  void* h = scheduler::gpu_handle(s);
  if (h) return h;
  Context* c = Context::get();
  return c ? c->default_stream() : nullptr;
}

}  // namespace cuda

GpuBackend* gpu_backend() {
  // Leaked on purpose: buffers may be released during static destruction.
  static GpuBackend* backend = []() -> GpuBackend* {
    cuda::Context* ctx = cuda::Context::get();
    return ctx ? new cuda::CudaBackend(*ctx) : nullptr;
  }();
  return backend;
}

}  // namespace alloy
