// Reference implementations of kernels and what they are for: fallback (the reference runs when
// the kernel cannot be compiled or launched on the device, with a one-time warning) and check
// mode (kernel and reference both run, outputs are compared with per-dtype tolerances).
// Independent of where the kernel comes from: library kernels use it today, metal_kernel can.
#pragma once
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "alloy/array.h"
#include "alloy/library.h"

namespace alloy::kernel {

struct Tolerance {
  double rtol = 0, atol = 0;
};
/// Default check-mode tolerance of an output of `dtype`: a few units in the last place for
/// floating types (float16 1e-2, bfloat16 3e-2, float32 1e-4 relative), exact for integers/bool.
Tolerance check_tolerance(Dtype dtype);

/// ALLOY_CHECK=1 (or true/on/yes) in the environment: check mode for every call by default.
bool check_from_env();
/// ALLOY_FALLBACK=0 (or false/off/no) in the environment: no fallback by default.
bool fallback_from_env();

/// Sends `message` to the warning handler (alloy::set_warning_handler).
void warn(const std::string& message);
/// Sends `message` the first time `key` is seen in this process.
void warn_once(const std::string& key, const std::string& message);

/// True for failures after which the reference may run instead of the kernel: the kernel cannot
/// be compiled (alloy::CompileError) or uses something the target does not support
/// (alloy::NotSupported). Argument errors and check mismatches are never hidden.
bool is_fallback_error(const std::exception_ptr& e);

/// The first line of an exception's message (for warnings).
std::string first_line(const std::exception_ptr& e);

/// Calls a reference and checks that it returned `count` valid arrays; errors name the kernel.
std::vector<Array> call_reference(const ReferenceFn& fn, const std::string& kernel,
                                  const std::vector<Array>& args, size_t count);

/// `ref` as a row-contiguous array of `shape` and `dtype` on `device`: converted when its dtype
/// differs, reshaped when only its shape does. Throws std::invalid_argument (naming the kernel and
/// the output) when the number of elements differs.
Array conform(const Array& ref, const Shape& shape, Dtype dtype, Device device,
              const std::string& kernel, const std::string& output);

/// Copies the bytes of `src` into the materialized row-major array `dst` (same dtype and size;
/// CPU or GPU, either side).
void copy_into(const Array& src, const Array& dst);

/// Check mode: compares a kernel output with its reference (conformed to the output's shape and
/// dtype) element-wise, |actual - expected| <= atol + rtol * |expected| (NaN matches NaN only).
/// Throws alloy::CheckError naming the output, the max abs/rel errors and the first mismatching
/// index (row-major, as an index tuple).
void compare_outputs(const std::string& kernel, const std::string& output, const Array& actual,
                     const Array& expected, std::optional<double> rtol = std::nullopt,
                     std::optional<double> atol = std::nullopt);

}  // namespace alloy::kernel
