// Devices: the CPU is always there; the GPU is an NVIDIA GPU found at run time through CUDA.
#pragma once
#include <string>

namespace alloy {

struct Device {
  enum class Type { cpu, gpu };
  Type type = Type::cpu;
  int index = 0;

  constexpr Device() = default;
  constexpr Device(Type t, int i = 0) : type(t), index(i) {}
  static constexpr Device cpu() { return Device(Type::cpu); }
  static constexpr Device gpu(int i = 0) { return Device(Type::gpu, i); }
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu" or "gpu:0"
};

/// True when a CUDA driver and GPU were found (loaded with dlopen, so this never fails to link).
bool gpu_available();
/// How many GPUs CUDA shows (CUDA_VISIBLE_DEVICES selects them): Device::gpu(0) ..
/// Device::gpu(gpu_count() - 1). 0 without a driver.
int gpu_count();
/// The default device: the GPU when available, else the CPU (or what set_default_device chose).
Device default_device();
/// Sets the default device (any GPU index); throws std::invalid_argument for a GPU that is not
/// available.
void set_default_device(Device d);

}  // namespace alloy
