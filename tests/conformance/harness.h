// Conformance harness: each Metal feature is one small kernel with a float64/exact reference,
// run on every available device (CPU always; the GPU when there is one) and compiled with NVRTC
// for sm_90 (no GPU needed) so CI checks the CUDA translation of every kernel.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "alloy/alloy.h"

namespace conformance {

using namespace alloy;

/// Devices to run on: cpu, plus gpu when a CUDA GPU is available.
std::vector<Device> devices();

/// Compiles the call's kernel with NVRTC for sm_90. Returns "" on success, else the reason it was
/// skipped ("NVRTC not found") - compile errors fail the test.
std::string nvrtc_compile(const MetalKernel& k, const std::vector<Array>& inputs,
                          const KernelCall& call);

/// Sets call.init_value to a poison value for the outputs (NaN for float outputs, else 0x5A5A...)
/// so elements the kernel does not write fail the comparison.
void poison(KernelCall& call);

/// Relative tolerance for comparing a `dtype` result with a float64 reference.
double tolerance(Dtype dtype);

/// Element-wise |a - e| <= atol + rtol * |e| (rtol, atol default from tolerance(dtype)); NaN
/// never passes unless expected is NaN too. Reports the first few mismatches.
void expect_close(const Array& actual, const std::vector<double>& expected, double rtol = -1,
                  double atol = -1);
/// Exact comparison (integers, bools, or bit-exact floats).
void expect_equal(const Array& actual, const std::vector<double>& expected);

/// Random values in [lo, hi) as float64 (deterministic per seed), and the array of them.
std::vector<double> random_values(size_t n, double lo, double hi, uint64_t seed);
Array random_array(const Shape& shape, Dtype dtype, double lo, double hi, uint64_t seed,
                   Device device);

/// Runs `body(device)` once per device as a SCOPED_TRACE'd section.
void for_each_device(const std::function<void(Device)>& body);

/// Runs `k` on every device with its outputs poisoned (unless the call sets init_value), gives the
/// outputs to `check`, then compiles the same call with NVRTC for sm_90.
void run_kernel(const MetalKernel& k, const std::vector<Array>& inputs, KernelCall call,
                const std::function<void(const std::vector<Array>&)>& check);

KernelCall make_call(std::vector<Shape> shapes, std::vector<Dtype> dtypes, Dims grid, Dims tg,
                     TemplateArgs targs = {});

/// Compares a row-major [rows, names.size()] table column by column, naming the column that fails.
void expect_table(const Array& out, const std::vector<double>& expected,
                  const std::vector<std::string>& names, double rtol = -1, double atol = -1);

/// Values rounded to `dtype` (as the kernel's inputs/outputs hold them).
std::vector<double> round_to(Dtype dtype, const std::vector<double>& v);
double round_to(Dtype dtype, double v);
/// Rounded to float32.
inline double f32(double v) {
  return static_cast<double>(static_cast<float>(v));
}

}  // namespace conformance
