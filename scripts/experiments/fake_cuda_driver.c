// A stand-in for libcuda.so.1 that does no GPU work, for profiling Alloy's host cost of a GPU
// call on a machine without a GPU (perf, allocation counts). "Device" memory is host memory,
// copies and fills are memcpy/memset, launches return at once without running anything, events
// and streams are tokens. Results computed through it are meaningless: only host-side timings
// and call counts are. Never used by tests or CI.
//
// It counts its calls per entry point (fake_cuda_calls; FAKE_CUDA_REPORT=1 prints them at exit)
// and, when preloaded too, the process's mutex locks (fake_cuda_locks): BM_GpuLaunchOverhead
// then reports driver_calls_per_call and locks_per_call.
//
//   cc -O2 -shared -fPIC -o /tmp/fakecuda/libcuda.so.1 scripts/experiments/fake_cuda_driver.c -ldl -lpthread
//   LD_PRELOAD=/tmp/fakecuda/libcuda.so.1 LD_LIBRARY_PATH=/tmp/fakecuda ALLOY_CUDA_TIERED=0
//       build/alloy_bench --benchmark_filter='GpuLaunchOverhead|CachedCallAllocations/1'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static char g_ctx_token;
static void* g_current = 0;

// Mutex locks, counted when this library is also preloaded (LD_PRELOAD=.../libcuda.so.1: its
// pthread_mutex_lock then comes before libc's): fake_cuda_locks() gives the total so far.
static long g_locks;
typedef int (*LockFn)(pthread_mutex_t*);
int pthread_mutex_lock(pthread_mutex_t* m) {
  static LockFn next;
  if (!next) next = (LockFn)dlsym(RTLD_NEXT, "pthread_mutex_lock");
  __atomic_store_n(&g_locks, __atomic_load_n(&g_locks, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
  return next(m);
}
long fake_cuda_locks(void) { return __atomic_load_n(&g_locks, __ATOMIC_RELAXED); }

// Driver calls, counted per entry point (by its __func__ string), for "driver calls per cached
// launch": fake_cuda_calls(NULL) is the total so far, fake_cuda_calls("cuLaunchKernel") one
// entry's; the bench finds it with dlsym. FAKE_CUDA_REPORT=1 prints the counts at exit.
#define FAKE_MAX_ENTRIES 64
static const char* g_names[FAKE_MAX_ENTRIES];
static long g_counts[FAKE_MAX_ENTRIES];
static long g_total;
static int slot_of(const char* fn) {  // first call of an entry point: its slot
  for (int i = 0; i < FAKE_MAX_ENTRIES; ++i) {
    const char* expected = 0;
    if (__atomic_compare_exchange_n(&g_names[i], &expected, fn, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE) ||
        expected == fn)
      return i;
  }
  abort();
}
// Counted with relaxed loads and stores, not read-modify-writes, so that counting costs a launch
// next to nothing (concurrent calls from several threads may lose counts).
static void bump(long* c) { __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED); }
#define COUNT()                                      \
  do {                                               \
    static int slot_ = -1;                           \
    if (__builtin_expect(slot_ < 0, 0)) slot_ = slot_of(__func__); \
    bump(&g_counts[slot_]);                          \
    bump(&g_total);                                  \
  } while (0)
long fake_cuda_calls(const char* name) {
  if (!name) return __atomic_load_n(&g_total, __ATOMIC_RELAXED);
  for (int i = 0; i < FAKE_MAX_ENTRIES && g_names[i]; ++i)
    if (strcmp(g_names[i], name) == 0) return __atomic_load_n(&g_counts[i], __ATOMIC_RELAXED);
  return 0;
}
__attribute__((destructor)) static void report(void) {
  const char* r = getenv("FAKE_CUDA_REPORT");
  if (!r || !*r || *r == '0') return;
  for (int i = 0; i < FAKE_MAX_ENTRIES && g_names[i]; ++i)
    fprintf(stderr, "fake cuda: %-28s %ld\n", g_names[i], g_counts[i]);
}

// The real driver starts threads of its own at cuInit, which makes the process multi-threaded:
// from then on libstdc++'s shared_ptr reference counts and glibc's locks use atomic
// read-modify-writes (a single-threaded process skips them). So does this one, unless
// FAKE_CUDA_NO_THREAD=1 (the behaviour before: a host-cost figure without those atomics).
static void* idle_thread(void* arg) {
  (void)arg;
  for (;;) pause();
  return NULL;
}
CUresult cuInit(unsigned flags) {
  COUNT();
  (void)flags;
  static int started;
  const char* no = getenv("FAKE_CUDA_NO_THREAD");
  if (!started && !(no && no[0] == '1')) {
    pthread_t t;
    if (pthread_create(&t, NULL, idle_thread, NULL) == 0) pthread_detach(t);
    started = 1;
  }
  return 0;
}
CUresult cuDriverGetVersion(int* v) { COUNT(); *v = 13000; return 0; }
CUresult cuGetErrorName(CUresult r, const char** s) { COUNT(); (void)r; *s = "CUDA_ERROR_FAKE"; return 0; }
CUresult cuGetErrorString(CUresult r, const char** s) { COUNT();
  (void)r;
  *s = "error from the fake driver";
  return 0;
}
CUresult cuDeviceGetCount(int* n) { COUNT(); *n = 1; return 0; }
CUresult cuDeviceGet(int* d, int ordinal) { COUNT(); *d = ordinal; return ordinal == 0 ? 0 : 101; }
CUresult cuDeviceGetName(char* name, int len, int dev) { COUNT();
  (void)dev;
  strncpy(name, "Fake GPU (no work done)", (size_t)len);
  if (len > 0) name[len - 1] = 0;
  return 0;
}
CUresult cuDeviceGetAttribute(int* v, int attr, int dev) { COUNT();
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
CUresult cuDeviceTotalMem_v2(size_t* bytes, int dev) { COUNT(); (void)dev; *bytes = (size_t)80 << 30; return 0; }
CUresult cuDevicePrimaryCtxRetain(void** ctx, int dev) { COUNT(); (void)dev; *ctx = &g_ctx_token; return 0; }
CUresult cuCtxSetCurrent(void* ctx) { COUNT(); g_current = ctx; return 0; }
CUresult cuCtxGetCurrent(void** ctx) { COUNT(); *ctx = g_current; return 0; }
CUresult cuCtxGetDevice(int* d) { COUNT(); *d = 0; return 0; }
CUresult cuCtxSynchronize(void) { COUNT(); return 0; }
CUresult cuStreamCreate(void** s, unsigned flags) { COUNT(); (void)flags; *s = malloc(16); return 0; }
CUresult cuStreamSynchronize(void* s) { COUNT(); (void)s; return 0; }
CUresult cuStreamQuery(void* s) { COUNT(); (void)s; return 0; }
CUresult cuStreamDestroy_v2(void* s) { COUNT(); free(s); return 0; }
CUresult cuStreamWaitEvent(void* s, void* e, unsigned f) { COUNT(); (void)s; (void)e; (void)f; return 0; }
CUresult cuStreamGetCtx(void* s, void** ctx) { COUNT(); (void)s; *ctx = &g_ctx_token; return 0; }
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) { COUNT();
  void* m = aligned_alloc(256, (n + 255) / 256 * 256 + 256);  // cuMemAlloc aligns to 256
  if (!m) return 2;  // CUDA_ERROR_OUT_OF_MEMORY
  *p = (CUdeviceptr)(uintptr_t)m;
  return 0;
}
CUresult cuMemFree_v2(CUdeviceptr p) { COUNT(); free((void*)(uintptr_t)p); return 0; }
CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) { COUNT();
  *free_bytes = (size_t)70 << 30;
  *total = (size_t)80 << 30;
  return 0;
}
CUresult cuPointerGetAttribute(void* data, int attr, CUdeviceptr p) { COUNT();
  (void)attr; (void)p;
  *(unsigned*)data = 2;  // CU_MEMORYTYPE_DEVICE
  return 0;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void* s, size_t n, void* st) { COUNT();
  (void)st; memcpy((void*)(uintptr_t)d, s, n); return 0;
}
CUresult cuMemcpyDtoHAsync_v2(void* d, CUdeviceptr s, size_t n, void* st) { COUNT();
  (void)st; memcpy(d, (const void*)(uintptr_t)s, n); return 0;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, void* st) { COUNT();
  (void)st; memmove((void*)(uintptr_t)d, (const void*)(uintptr_t)s, n); return 0;
}
CUresult cuMemcpyPeerAsync(CUdeviceptr d, void* dc, CUdeviceptr s, void* sc, size_t n, void* st) { COUNT();
  (void)dc; (void)sc; (void)st; memmove((void*)(uintptr_t)d, (const void*)(uintptr_t)s, n); return 0;
}
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, void* st) { COUNT();
  (void)st; memset((void*)(uintptr_t)d, v, n); return 0;
}
CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, void* st) { COUNT();
  (void)st; unsigned short* p = (unsigned short*)(uintptr_t)d;
  for (size_t i = 0; i < n; ++i) p[i] = v;
  return 0;
}
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, void* st) { COUNT();
  (void)st; unsigned* p = (unsigned*)(uintptr_t)d;
  for (size_t i = 0; i < n; ++i) p[i] = v;
  return 0;
}
CUresult cuModuleLoadData(void** m, const void* image) { COUNT(); (void)image; *m = malloc(16); return 0; }
CUresult cuModuleUnload(void* m) { COUNT(); free(m); return 0; }
CUresult cuModuleGetFunction(void** f, void* m, const char* name) { COUNT();
  (void)m; (void)name; *f = malloc(16); return 0;
}
CUresult cuModuleGetGlobal_v2(CUdeviceptr* p, size_t* n, void* m, const char* name) { COUNT();
  (void)p; (void)n; (void)m; (void)name;
  return 500;  // CUDA_ERROR_NOT_FOUND
}
CUresult cuFuncGetAttribute(int* v, int attr, void* f) { COUNT();
  (void)f;
  *v = attr == 0 ? 1024 : attr == 4 ? 32 : 0;
  return 0;
}
CUresult cuFuncSetAttribute(void* f, int attr, int v) { COUNT(); (void)f; (void)attr; (void)v; return 0; }
// FAKE_CUDA_LAUNCH_TOUCH_KB=n: each launch writes n KiB of a private buffer (one store per
// 64-byte line), as a real driver's launch touches its own memory (pushbuffer, per-function
// state) between Alloy's calls: Alloy's data and code then come back from farther caches, which a
// no-work launch hides. 0 or unset: no touching.
static void pollute(void) {
  static long lines = -1;
  static volatile char* buf;
  if (__builtin_expect(lines < 0, 0)) {
    const char* e = getenv("FAKE_CUDA_LAUNCH_TOUCH_KB");
    long kb = e ? atol(e) : 0;
    lines = kb > 0 ? kb * 1024 / 64 : 0;
    if (lines) buf = (volatile char*)calloc((size_t)lines, 64);
  }
  for (long i = 0; i < lines; ++i) buf[i * 64] += 1;
}
CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, void* stream, void** params, void** extra) { COUNT();
  (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shared;
  (void)stream; (void)params; (void)extra;
  pollute();
  return 0;
}
CUresult cuEventCreate(void** e, unsigned flags) { COUNT(); (void)flags; *e = malloc(16); return 0; }
CUresult cuEventDestroy_v2(void* e) { COUNT(); free(e); return 0; }
CUresult cuEventRecord(void* e, void* s) { COUNT(); (void)e; (void)s; return 0; }
CUresult cuEventSynchronize(void* e) { COUNT(); (void)e; return 0; }
CUresult cuEventElapsedTime_v2(float* ms, void* a, void* b) { COUNT(); (void)a; (void)b; *ms = 0.001f; return 0; }
// NVRTC dlopens the driver and asks it for a private table; without the entry point it crashes.
CUresult cuGetExportTable(const void** table, const void* id) { COUNT(); (void)id; *table = 0; return 801; }
