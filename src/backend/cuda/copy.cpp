// CUDA evaluation of the core's moves (Copy, AsType, ToDevice): one built-in strided
// copy-and-convert kernel (compiled once with NVRTC, cached like user kernels), with the same
// conversions as the CPU (src/backend/cpu/copy.cpp): C casts, half/bfloat rounded to nearest
// even, to bool x != 0, complex <-> real through the real part.
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "alloy/errors.h"
#include "backend/cuda/device.h"
#include "backend/cuda/jit.h"
#include "core/array_node.h"
#include "core/backend.h"
#include "core/primitives.h"

namespace alloy {
namespace cuda {
namespace {

constexpr int kMaxDims = 8;

// Dtype ordinals as in include/alloy/dtype.h.
const char* kCopySource = R"(
typedef unsigned short u16;
struct Dims { long long shape[8]; long long strides[8]; int ndim; };
struct Wide { int kind; long long i; unsigned long long u; double f; float re, im; };
__device__ float h2f(u16 h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ u16 f2h(float f) { u16 h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ float b2f(u16 b) { return __uint_as_float(((unsigned)b) << 16); }
__device__ u16 f2b(float f) {
  unsigned x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (u16)((x >> 16) | 0x40u);  // quiet NaN
  return (u16)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
__device__ Wide load(const char* p, int t, long long k) {
  Wide w = {0, 0, 0, 0.0, 0.f, 0.f};
  switch (t) {
    case 0: w.kind = 0; w.u = ((const unsigned char*)p)[k] != 0; break;
    case 1: w.kind = 1; w.i = ((const signed char*)p)[k]; break;
    case 2: w.kind = 1; w.i = ((const short*)p)[k]; break;
    case 3: w.kind = 1; w.i = ((const int*)p)[k]; break;
    case 4: w.kind = 1; w.i = ((const long long*)p)[k]; break;
    case 5: w.kind = 2; w.u = ((const unsigned char*)p)[k]; break;
    case 6: w.kind = 2; w.u = ((const u16*)p)[k]; break;
    case 7: w.kind = 2; w.u = ((const unsigned*)p)[k]; break;
    case 8: w.kind = 2; w.u = ((const unsigned long long*)p)[k]; break;
    case 9: w.kind = 3; w.f = h2f(((const u16*)p)[k]); break;
    case 10: w.kind = 3; w.f = b2f(((const u16*)p)[k]); break;
    case 11: w.kind = 3; w.f = ((const float*)p)[k]; break;
    case 12: w.kind = 3; w.f = ((const double*)p)[k]; break;
    case 13: w.kind = 4; w.re = ((const float*)p)[2 * k]; w.im = ((const float*)p)[2 * k + 1]; break;
  }
  return w;
}
template <class T> __device__ T as(const Wide& w) {
  switch (w.kind) {
    case 0: case 2: return (T)w.u;
    case 1: return (T)w.i;
    case 3: return (T)w.f;
    default: return (T)w.re;
  }
}
__device__ bool nonzero(const Wide& w) {
  switch (w.kind) {
    case 0: case 2: return w.u != 0;
    case 1: return w.i != 0;
    case 3: return w.f != 0.0;
    default: return w.re != 0.f || w.im != 0.f;
  }
}
__device__ void store(char* p, int t, long long k, const Wide& w) {
  switch (t) {
    case 0: ((unsigned char*)p)[k] = nonzero(w); break;
    case 1: ((signed char*)p)[k] = as<signed char>(w); break;
    case 2: ((short*)p)[k] = as<short>(w); break;
    case 3: ((int*)p)[k] = as<int>(w); break;
    case 4: ((long long*)p)[k] = as<long long>(w); break;
    case 5: ((unsigned char*)p)[k] = as<unsigned char>(w); break;
    case 6: ((u16*)p)[k] = as<u16>(w); break;
    case 7: ((unsigned*)p)[k] = as<unsigned>(w); break;
    case 8: ((unsigned long long*)p)[k] = as<unsigned long long>(w); break;
    case 9: ((u16*)p)[k] = f2h(as<float>(w)); break;
    case 10: ((u16*)p)[k] = f2b(as<float>(w)); break;
    case 11: ((float*)p)[k] = as<float>(w); break;
    case 12: ((double*)p)[k] = as<double>(w); break;
    case 13: ((float*)p)[2 * k] = as<float>(w); ((float*)p)[2 * k + 1] = w.kind == 4 ? w.im : 0.f; break;
  }
}
extern "C" __global__ void alloy_copy_convert(const char* src, char* dst, long long n, int sdt,
                                              int ddt, Dims d) {
  long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += step) {
    long long off = 0, rem = i;
    for (int k = d.ndim - 1; k >= 0; --k) {
      long long c = rem % d.shape[k];
      rem /= d.shape[k];
      off += c * d.strides[k];
    }
    store(dst, ddt, i, load(src, sdt, off));
  }
}
)";

struct KernelDims {
  long long shape[kMaxDims];
  long long strides[kMaxDims];
  int ndim;
};

// Drops size-1 axes and merges axes that are contiguous with each other.
KernelDims collapse(const Shape& shape, const Strides& strides) {
  std::vector<std::pair<int64_t, int64_t>> dims;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (!dims.empty() && dims.back().second == strides[i] * shape[i]) {
      dims.back().first *= shape[i];
      dims.back().second = strides[i];
    } else {
      dims.emplace_back(shape[i], strides[i]);
    }
  }
  if (dims.size() > kMaxDims)
    throw NotSupported("copy", fmt::format("not supported: a strided GPU copy of {} dimensions "
                                           "that do not merge (at most {})",
                                           dims.size(), kMaxDims));
  KernelDims d{};
  d.ndim = static_cast<int>(dims.size());
  for (int i = 0; i < d.ndim; ++i) {
    d.shape[i] = dims[i].first;
    d.strides[i] = dims[i].second;
  }
  return d;
}

}  // namespace

void copy_strided(Context& ctx, const void* src, const Shape& shape, const Strides& strides,
                  Dtype src_dtype, void* dst, Dtype dst_dtype) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  if (n == 0) return;
  static const std::shared_ptr<const Module> module = [&] {
    KernelSource k;
    k.name = "alloy_copy_convert";
    k.source = kCopySource;
    k.entries = {"alloy_copy_convert"};
    return load(ctx, k);
  }();
  const Function& fn = module->function(0);
  KernelDims d = collapse(shape, strides);
  long long count = n;
  int sdt = static_cast<int>(src_dtype), ddt = static_cast<int>(dst_dtype);
  void* params[] = {const_cast<void**>(&src), &dst, &count, &sdt, &ddt, &d};
  unsigned threads = 256;
  unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + threads - 1) / threads, 1 << 20));
  ctx.check_usable();
  ctx.make_current();
  CUresult r = ctx.driver().cuLaunchKernel(fn.handle, blocks, 1, 1, threads, 1, 1, 0, ctx.stream(),
                                           params, nullptr);
  if (r != CUDA_SUCCESS) ctx.fail(r, "cuLaunchKernel", "alloy_copy_convert");
  ctx.note_launch("alloy_copy_convert");
}

/// Device -> device across GPUs, on the destination's current stream (which the scheduler made
/// wait for the source's producers). Waits for the copy: the source's allocator knows only its
/// own device's streams, so a block freed there could be reused before this copy read it.
void copy_peer(Context& dst_ctx, void* dst, Context& src_ctx, const void* src, size_t nbytes) {
  src_ctx.check_usable();
  dst_ctx.check_usable();
  dst_ctx.make_current();
  CUstream s = dst_ctx.stream();
  dst_ctx.check(dst_ctx.driver().cuMemcpyPeerAsync(
                    reinterpret_cast<CUdeviceptr>(dst), dst_ctx.handle(),
                    reinterpret_cast<CUdeviceptr>(src), src_ctx.handle(), nbytes, s),
                "cuMemcpyPeerAsync");
  dst_ctx.synchronize_stream(s);
}

}  // namespace cuda

void Copy::eval_gpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) {
  const Array& in = inputs[0];
  allocate_output(outputs[0]);
  if (in.is_row_contiguous()) {
    backend(in.device()).copy_device(node_of(outputs[0])->data(), node_of(in)->data(), in.nbytes());
    return;
  }
  backend(in.device())
      .copy_strided(node_of(in)->data(), in.shape(), in.strides(), in.dtype(),
                    node_of(outputs[0])->data(), in.dtype());
}

void AsType::eval_gpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) {
  const Array& in = inputs[0];
  allocate_output(outputs[0]);
  backend(in.device())
      .copy_strided(node_of(in)->data(), in.shape(), in.strides(), in.dtype(),
                    node_of(outputs[0])->data(), dtype_);
}

void ToDevice::eval_gpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) {
  const Array& in = inputs[0];
  allocate_output(outputs[0]);
  size_t n = outputs[0].nbytes();
  if (n == 0) return;
  Device to = outputs[0].device(), from = in.device();
  if (from.type == Device::Type::cpu)
    backend(to).copy_to_device(node_of(outputs[0])->data(), node_of(in)->data(), n);
  else if (from == to)
    backend(to).copy_device(node_of(outputs[0])->data(), node_of(in)->data(), n);
  else
    cuda::copy_peer(*cuda::Context::get(to.index), node_of(outputs[0])->data(),
                    *cuda::Context::get(from.index), node_of(in)->data(), n);
}

}  // namespace alloy
