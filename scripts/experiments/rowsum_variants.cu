// Design experiment (not part of the build): the row sum of bench_gpu.cpp written by hand, plain
// and with `const float* __restrict__` input (read-only path, as Alloy's entries now give it).
// nvcc -O3 -arch=sm_90 rowsum_variants.cu
#include <cuda_runtime.h>
#include <algorithm>
#include <cstring>
#include <cstdio>
#include <vector>

template <bool R>
__global__ void rowsum(const float* in_, float* out, unsigned cols) {
  const float* __restrict__ rin = in_;
  unsigned row = blockIdx.x, lid = threadIdx.x, tpg = blockDim.x;
  float acc = 0.0f;
  if (R) {
    const float* __restrict__ p = rin + row * cols;
    for (unsigned i = lid; i < cols; i += tpg) acc += __ldg(p + i);
  } else {
    const float* p = in_ + row * cols;
    for (unsigned i = lid; i < cols; i += tpg) acc += p[i];
  }
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  __shared__ float partial[32];
  unsigned sg = lid / 32, lane = lid % 32;
  if (lane == 0) partial[sg] = acc;
  __syncthreads();
  if (sg == 0) {
    float v = lane < (tpg + 31) / 32 ? partial[lane] : 0.0f;
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) out[row] = v;
  }
}

// cols read the way Alloy's entries read `inp_shape[1]`: through a generic pointer that is either
// into the __grid_constant__ parameter block or to device memory, chosen at run time.
template <int N>
struct BlockN {
  const int* shape_global;
  unsigned long long inline_mask;
  alignas(16) unsigned char inline_data[N];
};
typedef BlockN<512> Block;
template <class B_>
__device__ __forceinline__ const int* small(const B_& B) {
  if (B.inline_mask & 1ull) return reinterpret_cast<const int*>(const_cast<unsigned char*>(B.inline_data));
  return B.shape_global;
}
template <class B_>
__global__ void rowsum_block(const __grid_constant__ B_ B, const float* __restrict__ in,
                             float* __restrict__ out) {
  unsigned cols = small(B)[1];
  unsigned row = blockIdx.x, lid = threadIdx.x, tpg = blockDim.x;
  float acc = 0.0f;
  const float* p = in + row * cols;
  for (unsigned i = lid; i < cols; i += tpg) acc += p[i];
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  __shared__ float partial[32];
  unsigned sg = lid / 32, lane = lid % 32;
  if (lane == 0) partial[sg] = acc;
  __syncthreads();
  if (sg == 0) {
    float v = lane < (tpg + 31) / 32 ? partial[lane] : 0.0f;
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) out[row] = v;
  }
}

template <class F>
float time_ms(F f) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  f();
  cudaDeviceSynchronize();
  std::vector<float> t;
  for (int i = 0; i < 30; ++i) {
    cudaEventRecord(a);
    f();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main() {
  const unsigned rows = 32768, cols = 4096;
  float *in, *out;
  cudaMalloc(&in, size_t(rows) * cols * 4);
  cudaMalloc(&out, rows * 4);
  std::vector<float> h(size_t(rows) * cols);
  for (size_t i = 0; i < h.size(); ++i) h[i] = float((i * 2654435761u) >> 20) / 4096.0f - 0.5f;
  cudaMemcpy(in, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
  for (int rep = 0; rep < 2; ++rep) {
    float plain = time_ms([&] { rowsum<false><<<rows, 256>>>(in, out, cols); });
    float ro = time_ms([&] { rowsum<true><<<rows, 256>>>(in, out, cols); });
    printf("plain %.4f ms, read-only path %.4f ms, ratio plain/ro %.4f\n", plain, ro, plain / ro);
    Block B{};
    int shape[2] = {int(rows), int(cols)};
    memcpy(B.inline_data, shape, 8);
    B.inline_mask = 1;
    int* dshape;
    cudaMalloc(&dshape, 8);
    cudaMemcpy(dshape, shape, 8, cudaMemcpyHostToDevice);
    B.shape_global = dshape;
    float inl = time_ms([&] { rowsum_block<<<rows, 256>>>(B, in, out); });
    B.inline_mask = 0;
    float glob = time_ms([&] { rowsum_block<<<rows, 256>>>(B, in, out); });
    printf("cols from the parameter block %.4f ms (plain/that %.4f), from device memory %.4f ms (%.4f)\n",
           inl, plain / inl, glob, plain / glob);
    BlockN<16> b16{};
    memcpy(b16.inline_data, shape, 8);
    b16.inline_mask = 1;
    BlockN<3072> b3k{};
    memcpy(b3k.inline_data, shape, 8);
    b3k.inline_mask = 1;
    float t16 = time_ms([&] { rowsum_block<<<rows, 256>>>(b16, in, out); });
    float t3k = time_ms([&] { rowsum_block<<<rows, 256>>>(b3k, in, out); });
    printf("parameter block of 32 bytes: %.4f ms (plain/that %.4f); of 3 KiB: %.4f ms (%.4f)\n", t16,
           plain / t16, t3k, plain / t3k);
  }
  return 0;
}
