// A stand-in for libcuda.so.1 that does no GPU work, for profiling Alloy's host cost of a GPU
// call on a machine without a GPU (perf, allocation counts). "Device" memory is host memory,
// copies and fills are memcpy/memset, launches return at once without running anything, events
// and streams are tokens. Results computed through it are meaningless: only host-side timings
// and call counts are. Never used by tests or CI.
//
//   cc -O2 -shared -fPIC -o /tmp/fakecuda/libcuda.so.1 scripts/experiments/fake_cuda_driver.c
//   LD_LIBRARY_PATH=/tmp/fakecuda ALLOY_CUDA_TIERED=0 build/alloy_bench \
//       --benchmark_filter='GpuLaunchOverhead|CachedCallAllocations/1'
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static char g_ctx_token;
static void* g_current = 0;

CUresult cuInit(unsigned flags) { (void)flags; return 0; }
CUresult cuDriverGetVersion(int* v) { *v = 13000; return 0; }
CUresult cuGetErrorName(CUresult r, const char** s) { (void)r; *s = "CUDA_ERROR_FAKE"; return 0; }
CUresult cuGetErrorString(CUresult r, const char** s) {
  (void)r;
  *s = "error from the fake driver";
  return 0;
}
CUresult cuDeviceGetCount(int* n) { *n = 1; return 0; }
CUresult cuDeviceGet(int* d, int ordinal) { *d = ordinal; return ordinal == 0 ? 0 : 101; }
CUresult cuDeviceGetName(char* name, int len, int dev) {
  (void)dev;
  strncpy(name, "Fake GPU (no work done)", (size_t)len);
  if (len > 0) name[len - 1] = 0;
  return 0;
}
CUresult cuDeviceGetAttribute(int* v, int attr, int dev) {
  (void)dev;
  switch (attr) {
    case 1: *v = 1024; break;                   // max threads per block
    case 2: case 3: *v = 1024; break;           // max block dim x, y
    case 4: *v = 64; break;                     // max block dim z
    case 5: *v = 2147483647; break;             // max grid dim x
    case 6: case 7: *v = 65535; break;          // max grid dim y, z
    case 8: *v = 49152; break;                  // shared memory per block
    case 10: *v = 32; break;                    // warp size
    case 16: *v = 132; break;                   // multiprocessors
    case 75: *v = 9; break;                     // compute capability major
    case 76: *v = 0; break;                     // minor
    case 97: *v = 232448; break;                // opt-in shared memory per block
    default: *v = 1; break;
  }
  return 0;
}
CUresult cuDeviceTotalMem_v2(size_t* bytes, int dev) { (void)dev; *bytes = (size_t)80 << 30; return 0; }
CUresult cuDevicePrimaryCtxRetain(void** ctx, int dev) { (void)dev; *ctx = &g_ctx_token; return 0; }
CUresult cuCtxSetCurrent(void* ctx) { g_current = ctx; return 0; }
CUresult cuCtxGetCurrent(void** ctx) { *ctx = g_current; return 0; }
CUresult cuCtxGetDevice(int* d) { *d = 0; return 0; }
CUresult cuCtxSynchronize(void) { return 0; }
CUresult cuStreamCreate(void** s, unsigned flags) { (void)flags; *s = malloc(16); return 0; }
CUresult cuStreamSynchronize(void* s) { (void)s; return 0; }
CUresult cuStreamQuery(void* s) { (void)s; return 0; }
CUresult cuStreamDestroy_v2(void* s) { free(s); return 0; }
CUresult cuStreamWaitEvent(void* s, void* e, unsigned f) { (void)s; (void)e; (void)f; return 0; }
CUresult cuStreamGetCtx(void* s, void** ctx) { (void)s; *ctx = &g_ctx_token; return 0; }
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
  void* m = aligned_alloc(256, (n + 255) / 256 * 256 + 256);  // cuMemAlloc aligns to 256
  if (!m) return 2;  // CUDA_ERROR_OUT_OF_MEMORY
  *p = (CUdeviceptr)(uintptr_t)m;
  return 0;
}
CUresult cuMemFree_v2(CUdeviceptr p) { free((void*)(uintptr_t)p); return 0; }
CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  *free_bytes = (size_t)70 << 30;
  *total = (size_t)80 << 30;
  return 0;
}
CUresult cuPointerGetAttribute(void* data, int attr, CUdeviceptr p) {
  (void)attr; (void)p;
  *(unsigned*)data = 2;  // CU_MEMORYTYPE_DEVICE
  return 0;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void* s, size_t n, void* st) {
  (void)st; memcpy((void*)(uintptr_t)d, s, n); return 0;
}
CUresult cuMemcpyDtoHAsync_v2(void* d, CUdeviceptr s, size_t n, void* st) {
  (void)st; memcpy(d, (const void*)(uintptr_t)s, n); return 0;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, void* st) {
  (void)st; memmove((void*)(uintptr_t)d, (const void*)(uintptr_t)s, n); return 0;
}
CUresult cuMemcpyPeerAsync(CUdeviceptr d, void* dc, CUdeviceptr s, void* sc, size_t n, void* st) {
  (void)dc; (void)sc; (void)st; memmove((void*)(uintptr_t)d, (const void*)(uintptr_t)s, n); return 0;
}
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, void* st) {
  (void)st; memset((void*)(uintptr_t)d, v, n); return 0;
}
CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, void* st) {
  (void)st; unsigned short* p = (unsigned short*)(uintptr_t)d;
  for (size_t i = 0; i < n; ++i) p[i] = v;
  return 0;
}
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, void* st) {
  (void)st; unsigned* p = (unsigned*)(uintptr_t)d;
  for (size_t i = 0; i < n; ++i) p[i] = v;
  return 0;
}
CUresult cuModuleLoadData(void** m, const void* image) { (void)image; *m = malloc(16); return 0; }
CUresult cuModuleUnload(void* m) { free(m); return 0; }
CUresult cuModuleGetFunction(void** f, void* m, const char* name) {
  (void)m; (void)name; *f = malloc(16); return 0;
}
CUresult cuModuleGetGlobal_v2(CUdeviceptr* p, size_t* n, void* m, const char* name) {
  (void)p; (void)n; (void)m; (void)name;
  return 500;  // CUDA_ERROR_NOT_FOUND
}
CUresult cuFuncGetAttribute(int* v, int attr, void* f) {
  (void)f;
  *v = attr == 0 ? 1024 : attr == 4 ? 32 : 0;
  return 0;
}
CUresult cuFuncSetAttribute(void* f, int attr, int v) { (void)f; (void)attr; (void)v; return 0; }
CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, void* stream, void** params, void** extra) {
  (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shared;
  (void)stream; (void)params; (void)extra;
  return 0;
}
CUresult cuEventCreate(void** e, unsigned flags) { (void)flags; *e = malloc(16); return 0; }
CUresult cuEventDestroy_v2(void* e) { free(e); return 0; }
CUresult cuEventRecord(void* e, void* s) { (void)e; (void)s; return 0; }
CUresult cuEventSynchronize(void* e) { (void)e; return 0; }
CUresult cuEventElapsedTime_v2(float* ms, void* a, void* b) { (void)a; (void)b; *ms = 0.001f; return 0; }
// NVRTC dlopens the driver and asks it for a private table; without the entry point it crashes.
CUresult cuGetExportTable(const void** table, const void* id) { (void)id; *table = 0; return 801; }
