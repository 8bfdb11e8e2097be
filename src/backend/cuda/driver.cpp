#include "backend/cuda/driver.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include "alloy/errors.h"

namespace alloy::cuda {
namespace {

// Resolves `name` (then `fallback`, when given) into `fn`; false when neither exists.
template <class Fn>
bool bind(void* lib, Fn& fn, const char* name, const char* fallback, std::string* missing) {
  void* sym = dlsym(lib, name);
  if (!sym && fallback) sym = dlsym(lib, fallback);
  if (!sym) {
    if (!missing->empty()) *missing += ", ";
    *missing += name;
    return false;
  }
  fn = reinterpret_cast<Fn>(sym);
  return true;
}

struct ProcessDriver {
  std::unique_ptr<Driver> driver;
  std::string error;
};

ProcessDriver init_process_driver() {
  ProcessDriver p;
  auto d = load_driver("libcuda.so.1", &p.error);
  if (!d) return p;
  CUresult r = d->cuInit(0);
  if (r != CUDA_SUCCESS) {
    p.error = fmt::format("cuInit failed: {}", error_string(*d, r));
    return p;  // the library stays loaded: unloading a driver that was entered is not safe
  }
  int version = 0;
  if (d->cuDriverGetVersion(&version) == CUDA_SUCCESS) d->version = version;
  p.driver = std::move(d);
  return p;
}

const ProcessDriver& process_driver() {
  // Leaked on purpose: buffers freed during static destruction still reach the allocator, and the
  // driver must not be unloaded under them.
  static const ProcessDriver* p = new ProcessDriver(init_process_driver());
  return *p;
}

}  // namespace

std::unique_ptr<Driver> load_driver(const std::string& library_name, std::string* error) {
  void* lib = dlopen(library_name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    *error = fmt::format("the CUDA driver library {} could not be loaded ({})", library_name,
                         why ? why : "unknown reason");
    return nullptr;
  }
  auto d = std::make_unique<Driver>();
  d->library = lib;
  d->library_name = library_name;
  std::string missing;
  bool ok = true;
  ok &= bind(lib, d->cuInit, "cuInit", nullptr, &missing);
  ok &= bind(lib, d->cuDriverGetVersion, "cuDriverGetVersion", nullptr, &missing);
  ok &= bind(lib, d->cuGetErrorName, "cuGetErrorName", nullptr, &missing);
  ok &= bind(lib, d->cuGetErrorString, "cuGetErrorString", nullptr, &missing);
  ok &= bind(lib, d->cuDeviceGetCount, "cuDeviceGetCount", nullptr, &missing);
  ok &= bind(lib, d->cuDeviceGet, "cuDeviceGet", nullptr, &missing);
  ok &= bind(lib, d->cuDeviceGetName, "cuDeviceGetName", nullptr, &missing);
  ok &= bind(lib, d->cuDeviceGetAttribute, "cuDeviceGetAttribute", nullptr, &missing);
  ok &= bind(lib, d->cuDeviceTotalMem, "cuDeviceTotalMem_v2", nullptr, &missing);
  ok &= bind(lib, d->cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", nullptr, &missing);
  ok &= bind(lib, d->cuCtxSetCurrent, "cuCtxSetCurrent", nullptr, &missing);
  ok &= bind(lib, d->cuCtxGetCurrent, "cuCtxGetCurrent", nullptr, &missing);
  ok &= bind(lib, d->cuStreamCreate, "cuStreamCreate", nullptr, &missing);
  ok &= bind(lib, d->cuStreamSynchronize, "cuStreamSynchronize", nullptr, &missing);
  ok &= bind(lib, d->cuStreamQuery, "cuStreamQuery", nullptr, &missing);
  ok &= bind(lib, d->cuStreamDestroy, "cuStreamDestroy_v2", nullptr, &missing);
  ok &= bind(lib, d->cuStreamWaitEvent, "cuStreamWaitEvent", nullptr, &missing);
  ok &= bind(lib, d->cuCtxSynchronize, "cuCtxSynchronize", nullptr, &missing);
  ok &= bind(lib, d->cuMemAlloc, "cuMemAlloc_v2", nullptr, &missing);
  ok &= bind(lib, d->cuMemFree, "cuMemFree_v2", nullptr, &missing);
  ok &= bind(lib, d->cuMemGetInfo, "cuMemGetInfo_v2", nullptr, &missing);
  ok &= bind(lib, d->cuPointerGetAttribute, "cuPointerGetAttribute", nullptr, &missing);
  ok &= bind(lib, d->cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", nullptr, &missing);
  ok &= bind(lib, d->cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", nullptr, &missing);
  ok &= bind(lib, d->cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", nullptr, &missing);
  ok &= bind(lib, d->cuMemcpyPeerAsync, "cuMemcpyPeerAsync", nullptr, &missing);
  ok &= bind(lib, d->cuStreamGetCtx, "cuStreamGetCtx", nullptr, &missing);
  ok &= bind(lib, d->cuCtxGetDevice, "cuCtxGetDevice", nullptr, &missing);
  ok &= bind(lib, d->cuMemsetD8Async, "cuMemsetD8Async", nullptr, &missing);
  ok &= bind(lib, d->cuMemsetD16Async, "cuMemsetD16Async", nullptr, &missing);
  ok &= bind(lib, d->cuMemsetD32Async, "cuMemsetD32Async", nullptr, &missing);
  ok &= bind(lib, d->cuModuleLoadData, "cuModuleLoadData", nullptr, &missing);
  ok &= bind(lib, d->cuModuleUnload, "cuModuleUnload", nullptr, &missing);
  ok &= bind(lib, d->cuModuleGetFunction, "cuModuleGetFunction", nullptr, &missing);
  ok &= bind(lib, d->cuModuleGetGlobal, "cuModuleGetGlobal_v2", nullptr, &missing);
  ok &= bind(lib, d->cuFuncGetAttribute, "cuFuncGetAttribute", nullptr, &missing);
  ok &= bind(lib, d->cuFuncSetAttribute, "cuFuncSetAttribute", nullptr, &missing);
  ok &= bind(lib, d->cuLaunchKernel, "cuLaunchKernel", nullptr, &missing);
  ok &= bind(lib, d->cuEventCreate, "cuEventCreate", nullptr, &missing);
  ok &= bind(lib, d->cuEventDestroy, "cuEventDestroy_v2", nullptr, &missing);
  ok &= bind(lib, d->cuEventRecord, "cuEventRecord", nullptr, &missing);
  ok &= bind(lib, d->cuEventSynchronize, "cuEventSynchronize", nullptr, &missing);
  // cuEventElapsedTime_v2 appeared in CUDA 12.8 drivers; older ones have only the first version.
  ok &= bind(lib, d->cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime", &missing);
  // Optional entry points (CUDA graphs): a driver without them still runs everything else.
  std::string optional_missing;
  bind(lib, d->cuGraphCreate, "cuGraphCreate", nullptr, &optional_missing);
  bind(lib, d->cuGraphDestroy, "cuGraphDestroy", nullptr, &optional_missing);
  bind(lib, d->cuGraphAddKernelNode, "cuGraphAddKernelNode_v2", "cuGraphAddKernelNode",
       &optional_missing);
  bind(lib, d->cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", nullptr,
       &optional_missing);
  bind(lib, d->cuGraphExecKernelNodeSetParams, "cuGraphExecKernelNodeSetParams_v2",
       "cuGraphExecKernelNodeSetParams", &optional_missing);
  bind(lib, d->cuGraphLaunch, "cuGraphLaunch", nullptr, &optional_missing);
  bind(lib, d->cuGraphExecDestroy, "cuGraphExecDestroy", nullptr, &optional_missing);
  if (!ok) {
    *error =
        fmt::format("the CUDA driver library {} lacks {} (driver too old?)", library_name, missing);
    dlclose(lib);
    return nullptr;
  }
  return d;
}

const Driver* driver() {
  return process_driver().driver.get();
}

const std::string& driver_error() {
  return process_driver().error;
}

std::string error_string(const Driver& driver, CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (driver.cuGetErrorName) driver.cuGetErrorName(result, &name);
  if (driver.cuGetErrorString) driver.cuGetErrorString(result, &text);
  return fmt::format("{} ({}): {}", name ? name : "CUDA_ERROR", result,
                     text ? text : "unknown error");
}

bool is_sticky_error(CUresult result) {
  switch (result) {
    case 700:  // ILLEGAL_ADDRESS
    case 702:  // LAUNCH_TIMEOUT
    case 710:  // ASSERT
    case 714:  // HARDWARE_STACK_ERROR
    case 715:  // ILLEGAL_INSTRUCTION
    case 716:  // MISALIGNED_ADDRESS
    case 717:  // INVALID_ADDRESS_SPACE
    case 718:  // INVALID_PC
    case 719:  // LAUNCH_FAILED
    case 999:  // UNKNOWN
      return true;
    default:
      return false;
  }
}

void throw_error(const Driver& driver, CUresult result, const char* call,
                 const std::string& kernel) {
  std::string what = fmt::format("CUDA error in {}: {}", call, error_string(driver, result));
  if (!kernel.empty()) what += fmt::format(" (kernel {})", kernel);
  throw Error(kernel, what);
}

}  // namespace alloy::cuda
