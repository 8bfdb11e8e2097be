// The CUDA driver API, loaded at run time with dlopen("libcuda.so.1") so that one build of Alloy
// runs with or without CUDA. The few driver types and constants we use are declared here (they are
// the driver's stable ABI) so the library builds without the CUDA toolkit's headers.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

namespace alloy::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUgraph = struct CUgraph_st*;
using CUgraphNode = struct CUgraphNode_st*;
using CUgraphExec = struct CUgraphExec_st*;

/// cuda.h's CUDA_KERNEL_NODE_PARAMS_v2 (the v1 struct is its prefix, so the v1 entry points
/// read it too).
struct KernelNodeParams {
  CUfunction func = nullptr;
  unsigned grid_dim[3] = {1, 1, 1};
  unsigned block_dim[3] = {1, 1, 1};
  unsigned shared_mem_bytes = 0;
  void** kernel_params = nullptr;
  void** extra = nullptr;
  void* kern = nullptr;     // CUkernel: unused (func is set)
  CUcontext ctx = nullptr;  // ignored when func is set
};

// CUresult values we test for (cuda.h: enum cudaError_enum).
constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
constexpr CUresult CUDA_ERROR_INVALID_IMAGE = 200;
constexpr CUresult CUDA_ERROR_NO_BINARY_FOR_GPU = 209;
constexpr CUresult CUDA_ERROR_INVALID_PTX = 218;
constexpr CUresult CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222;
constexpr CUresult CUDA_ERROR_NOT_READY = 600;
constexpr CUresult CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701;

// cuFuncGetAttribute / cuFuncSetAttribute (CUfunction_attribute).
constexpr int CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0;
constexpr int CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1;
constexpr int CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3;
constexpr int CU_FUNC_ATTRIBUTE_NUM_REGS = 4;
constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;

// cuDeviceGetAttribute (CUdevice_attribute).
constexpr int CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X = 2;  // _Y = 3, _Z = 4
constexpr int CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5;   // _Y = 6, _Z = 7
constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8;
constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;

constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1;
constexpr unsigned CU_EVENT_DEFAULT = 0x0;
constexpr unsigned CU_EVENT_DISABLE_TIMING = 0x2;

/// The driver entry points Alloy uses. Where cuda.h maps a name to a versioned symbol
/// (cuMemAlloc -> cuMemAlloc_v2 ...), the member holds the versioned one.
struct Driver {
  void* library = nullptr;  // dlopen handle
  std::string library_name;
  int version = 0;  // cuDriverGetVersion: 1000 * major + 10 * minor

  CUresult (*cuInit)(unsigned flags) = nullptr;
  CUresult (*cuDriverGetVersion)(int* version) = nullptr;
  CUresult (*cuGetErrorName)(CUresult, const char** name) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char** text) = nullptr;
  CUresult (*cuDeviceGetCount)(int* count) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice* device, int ordinal) = nullptr;
  CUresult (*cuDeviceGetName)(char* name, int len, CUdevice) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int* value, int attribute, CUdevice) = nullptr;
  CUresult (*cuDeviceTotalMem)(size_t* bytes, CUdevice) = nullptr;  // _v2
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext* ctx, CUdevice) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuCtxGetCurrent)(CUcontext*) = nullptr;
  CUresult (*cuStreamCreate)(CUstream* stream, unsigned flags) = nullptr;
  CUresult (*cuStreamSynchronize)(CUstream) = nullptr;
  CUresult (*cuStreamQuery)(CUstream) = nullptr;
  CUresult (*cuStreamDestroy)(CUstream) = nullptr;  // _v2
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned flags) = nullptr;
  CUresult (*cuCtxSynchronize)() = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr* ptr, size_t bytes) = nullptr;  // _v2
  CUresult (*cuMemFree)(CUdeviceptr) = nullptr;                      // _v2
  CUresult (*cuMemGetInfo)(size_t* free, size_t* total) = nullptr;   // _v2
  CUresult (*cuPointerGetAttribute)(void* data, int attribute, CUdeviceptr ptr) = nullptr;
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr dst, const void* src, size_t, CUstream) = nullptr;
  CUresult (*cuMemcpyDtoHAsync)(void* dst, CUdeviceptr src, size_t, CUstream) = nullptr;
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t, CUstream) = nullptr;
  CUresult (*cuMemcpyPeerAsync)(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src,
                                CUcontext src_ctx, size_t, CUstream) = nullptr;
  CUresult (*cuStreamGetCtx)(CUstream, CUcontext*) = nullptr;
  CUresult (*cuCtxGetDevice)(CUdevice*) = nullptr;
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t count, CUstream) = nullptr;
  CUresult (*cuMemsetD16Async)(CUdeviceptr, unsigned short, size_t count, CUstream) = nullptr;
  CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned int, size_t count, CUstream) = nullptr;
  CUresult (*cuModuleLoadData)(CUmodule* module, const void* image) = nullptr;
  CUresult (*cuModuleUnload)(CUmodule) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction* fn, CUmodule, const char* name) = nullptr;
  CUresult (*cuModuleGetGlobal)(CUdeviceptr* ptr, size_t* bytes, CUmodule,
                                const char* name) = nullptr;  // _v2
  CUresult (*cuFuncGetAttribute)(int* value, int attribute, CUfunction) = nullptr;
  CUresult (*cuFuncSetAttribute)(CUfunction, int attribute, int value) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned shared_bytes, CUstream,
                             void** params, void** extra) = nullptr;
  CUresult (*cuEventCreate)(CUevent* event, unsigned flags) = nullptr;
  CUresult (*cuEventDestroy)(CUevent) = nullptr;  // _v2
  CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuEventElapsedTime)(float* ms, CUevent start, CUevent end) = nullptr;  // _v2 if any

  // CUDA graphs (compile's replay). Optional: null when the driver lacks one of them (then
  // has_graphs() is false and replays launch kernel by kernel).
  CUresult (*cuGraphCreate)(CUgraph* graph, unsigned flags) = nullptr;
  CUresult (*cuGraphDestroy)(CUgraph) = nullptr;
  CUresult (*cuGraphAddKernelNode)(CUgraphNode* node, CUgraph, const CUgraphNode* deps,
                                   size_t num_deps, const KernelNodeParams*) = nullptr;  // _v2
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec* exec, CUgraph,
                                          unsigned long long flags) = nullptr;
  CUresult (*cuGraphExecKernelNodeSetParams)(CUgraphExec, CUgraphNode,
                                             const KernelNodeParams*) = nullptr;  // _v2
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream) = nullptr;
  CUresult (*cuGraphExecDestroy)(CUgraphExec) = nullptr;

  bool has_graphs() const {
    return cuGraphCreate && cuGraphDestroy && cuGraphAddKernelNode && cuGraphInstantiateWithFlags &&
           cuGraphExecKernelNodeSetParams && cuGraphLaunch && cuGraphExecDestroy;
  }
};

/// Loads the driver library `library_name` and resolves every entry point, without initializing
/// it. Returns nullptr and sets *error when the library or a symbol is missing. Never throws.
std::unique_ptr<Driver> load_driver(const std::string& library_name, std::string* error);

/// The process's driver (libcuda.so.1, cuInit done), or nullptr when there is none. Loaded once;
/// never throws.
const Driver* driver();
/// Why driver() is nullptr ("" when it is not).
const std::string& driver_error();

/// "CUDA_ERROR_ILLEGAL_ADDRESS (700): an illegal memory access was encountered".
std::string error_string(const Driver& driver, CUresult result);

/// True for errors after which the context is unusable (faults inside kernels): every later call
/// fails with the same error until the process ends.
bool is_sticky_error(CUresult result);

/// Throws alloy::Error "CUDA error in <call>: <error_string>" (naming `kernel` when not empty).
[[noreturn]] void throw_error(const Driver& driver, CUresult result, const char* call,
                              const std::string& kernel = "");

inline void check(const Driver& driver, CUresult result, const char* call) {
  if (result != CUDA_SUCCESS) throw_error(driver, result, call);
}

}  // namespace alloy::cuda
