#include "alloy/device.h"

#include <fmt/format.h>

#include <atomic>
#include <stdexcept>

#include "core/backend.h"
#include "core/hot.h"
#include "core/scheduler.h"

namespace alloy {

std::string Device::str() const {
  return type == Type::cpu ? "cpu" : "gpu:" + std::to_string(index);
}

ALLOY_HOT bool gpu_available() {
  return gpu_backend() != nullptr;
}

ALLOY_HOT Backend& backend(Device device) {
  if (device.type == Device::Type::cpu) return cpu_backend();
  if (Backend* gpu = gpu_backend(device.index)) return *gpu;
  if (device.index == 0 && gpu_count() == 0)
    throw std::invalid_argument("no GPU is available (no CUDA driver or device)");
  throw std::invalid_argument(fmt::format("gpu:{} is not available: {}", device.index,
                                          gpu_unavailable_reason(device.index)));
}

namespace {
// -1: not chosen yet (GPU 0 when available), else 0 for the CPU, 1 + index for GPU index.
std::atomic<int> g_default{-1};
}  // namespace

ALLOY_HOT Device default_device() {
  if (auto s = scheduler::context_stream()) return s->device;
  int d = g_default.load();
  if (d < 0) return gpu_available() ? Device::gpu() : Device::cpu();
  return d == 0 ? Device::cpu() : Device::gpu(d - 1);
}

void set_default_device(Device d) {
  if (d.type == Device::Type::cpu) {
    if (d.index != 0)
      throw std::invalid_argument(
          fmt::format("set_default_device: there is one CPU device (index 0), got {}", d.index));
    g_default.store(0);
    return;
  }
  if (!gpu_available())
    throw std::invalid_argument(
        "set_default_device: no GPU is available (no CUDA driver or device)");
  if (!gpu_backend(d.index))
    throw std::invalid_argument(fmt::format("set_default_device: gpu:{} is not available: {}",
                                            d.index, gpu_unavailable_reason(d.index)));
  g_default.store(1 + d.index);
}

}  // namespace alloy
