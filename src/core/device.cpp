#include "alloy/device.h"

#include <atomic>
#include <stdexcept>

#include "core/backend.h"
#include "core/scheduler.h"

namespace alloy {

std::string Device::str() const {
  return type == Type::cpu ? "cpu" : "gpu:" + std::to_string(index);
}

bool gpu_available() {
  return gpu_backend() != nullptr;
}

Backend& backend(Device device) {
  if (device.type == Device::Type::cpu) return cpu_backend();
  if (Backend* gpu = gpu_backend()) return *gpu;
  throw std::invalid_argument("no GPU is available (no CUDA driver or device)");
}

namespace {
// -1: not chosen yet (GPU when available), 0: cpu, 1: gpu.
std::atomic<int> g_default{-1};
}  // namespace

Device default_device() {
  if (auto s = scheduler::context_stream()) return s->device;
  int d = g_default.load();
  if (d < 0) return gpu_available() ? Device::gpu() : Device::cpu();
  return d == 0 ? Device::cpu() : Device::gpu();
}

void set_default_device(Device d) {
  if (d.type == Device::Type::gpu && !gpu_available())
    throw std::invalid_argument(
        "set_default_device: no GPU is available (no CUDA driver or device)");
  if (d.index != 0) throw std::invalid_argument("set_default_device: only device index 0 exists");
  g_default.store(d.type == Device::Type::cpu ? 0 : 1);
}

}  // namespace alloy
