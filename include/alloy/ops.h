// Built-in array ops with MLX's names, signatures, broadcasting and type promotion.
//
// Every op is lazy: it returns a pending array (a graph node) and computes nothing. Elementwise
// ops and reductions run as Metal kernels generated from functors written once (src/ops), through
// the same machinery as metal_kernel. The last argument picks where the op runs
// (`StreamOrDevice`, as MLX's `s`): when omitted, an op runs on the device of its first array
// input that is not 0-d (then its first input; the default device when it has none), and inputs
// elsewhere are moved lazily. float64 is CPU-only (Metal has no double).
//
// Type promotion is MLX's (`promote_types`); a C++ scalar next to an array is "weak" as in MLX's
// Python API: it takes the array's dtype unless its kind is wider (a float scalar with an integer
// array gives float32).
#pragma once
#include <iosfwd>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "alloy/array.h"
#include "alloy/stream.h"

namespace alloy {

// Where an op runs: the last argument of every op, MLX's StreamOrDevice (alloy/stream.h): a
// stream, a device (its default stream), or neither (the device of the op's first input that is
// not 0-d, on its default stream).

/// MLX's type promotion of two dtypes (e.g. int8 + uint8 -> int16, float16 + bfloat16 ->
/// float32, uint64 + int64 -> float32, any integer with a float -> that float).
Dtype promote_types(Dtype a, Dtype b);
/// The numpy broadcast of two shapes; std::invalid_argument when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b);

// ---- creation ----------------------------------------------------------------------------

Array ones(const Shape& shape, Dtype dtype = Dtype::float32, StreamOrDevice s = {});
Array zeros_like(const Array& a, StreamOrDevice s = {});
Array ones_like(const Array& a, StreamOrDevice s = {});
Array full_like(const Array& a, double value, StreamOrDevice s = {});
/// start, start + step, ... up to stop (exclusive), as numpy's arange.
Array arange(double start, double stop, double step, Dtype dtype = Dtype::float32,
             StreamOrDevice s = {});

// ---- unary -------------------------------------------------------------------------------
// Math ops (exp ... erfinv) give float32 for integer and bool inputs; half/bfloat compute in
// float and round once.

Array abs(const Array& a, StreamOrDevice s = {});
Array negative(const Array& a, StreamOrDevice s = {});
Array sign(const Array& a, StreamOrDevice s = {});
Array square(const Array& a, StreamOrDevice s = {});
Array exp(const Array& a, StreamOrDevice s = {});
Array expm1(const Array& a, StreamOrDevice s = {});
Array log(const Array& a, StreamOrDevice s = {});
Array log2(const Array& a, StreamOrDevice s = {});
Array log10(const Array& a, StreamOrDevice s = {});
Array log1p(const Array& a, StreamOrDevice s = {});
Array sqrt(const Array& a, StreamOrDevice s = {});
Array rsqrt(const Array& a, StreamOrDevice s = {});
Array sin(const Array& a, StreamOrDevice s = {});
Array cos(const Array& a, StreamOrDevice s = {});
Array tan(const Array& a, StreamOrDevice s = {});
Array tanh(const Array& a, StreamOrDevice s = {});
Array arcsin(const Array& a, StreamOrDevice s = {});
Array arccos(const Array& a, StreamOrDevice s = {});
Array arctan(const Array& a, StreamOrDevice s = {});
Array sinh(const Array& a, StreamOrDevice s = {});
Array cosh(const Array& a, StreamOrDevice s = {});
Array sigmoid(const Array& a, StreamOrDevice s = {});
Array erf(const Array& a, StreamOrDevice s = {});
Array erfc(const Array& a, StreamOrDevice s = {});
/// Inverse of erf on (-1, 1); +-inf at +-1, NaN outside.
Array erfinv(const Array& a, StreamOrDevice s = {});
/// floor / ceil / round (half-way cases to even) of floats; integers are returned unchanged.
Array floor(const Array& a, StreamOrDevice s = {});
Array ceil(const Array& a, StreamOrDevice s = {});
Array round(const Array& a, StreamOrDevice s = {});
/// Rounded to `decimals` places (MLX's: round(a * 10^d) / 10^d computed in a floating dtype,
/// float32 for integers, then cast back to a's dtype); decimals = 0 is round(a).
Array round(const Array& a, int decimals, StreamOrDevice s = {});
Array logical_not(const Array& a, StreamOrDevice s = {});
/// Bitwise not of integers, logical not of bool.
Array bitwise_invert(const Array& a, StreamOrDevice s = {});
/// Elementwise NaN / infinity tests (bool; always false for integers).
Array isnan(const Array& a, StreamOrDevice s = {});
Array isinf(const Array& a, StreamOrDevice s = {});
/// Parts of complex64 values: real and imaginary parts (float32), the complex conjugate
/// (complex64). Real inputs: `real` and `conjugate` return the input, `imag` zeros of its dtype
/// (MLX). complex64 also takes abs (float32 |z|), negative, sign (z / |z|), square, exp, log,
/// log2, log10, log1p, sqrt, rsqrt, the trigonometric and hyperbolic functions and their
/// inverses (principal branches), round (each part), add, subtract, multiply, divide,
/// floor_divide (a division, as MLX), power, maximum/minimum and comparisons (lexicographic on
/// (real, imag), as MLX), logical ops, where, sum, prod, max, min, mean, var (a float32),
/// argmax/argmin, all/any; other ops raise std::invalid_argument, as MLX's ValueError.
Array real(const Array& a, StreamOrDevice s = {});
Array imag(const Array& a, StreamOrDevice s = {});
Array conjugate(const Array& a, StreamOrDevice s = {});

// ---- binary (broadcasting, promoted) -------------------------------------------------------

Array add(const Array& a, const Array& b, StreamOrDevice s = {});
Array subtract(const Array& a, const Array& b, StreamOrDevice s = {});
Array multiply(const Array& a, const Array& b, StreamOrDevice s = {});
/// True division: integers give float32.
Array divide(const Array& a, const Array& b, StreamOrDevice s = {});
/// Python's floor division; integer division by zero gives 0.
Array floor_divide(const Array& a, const Array& b, StreamOrDevice s = {});
/// Python's remainder (the sign of the divisor); integer remainder by zero gives 0.
Array remainder(const Array& a, const Array& b, StreamOrDevice s = {});
Array power(const Array& a, const Array& b, StreamOrDevice s = {});
/// Elementwise maximum / minimum; NaN if either is NaN.
Array maximum(const Array& a, const Array& b, StreamOrDevice s = {});
Array minimum(const Array& a, const Array& b, StreamOrDevice s = {});
Array arctan2(const Array& a, const Array& b, StreamOrDevice s = {});
/// log(exp(a) + exp(b)) without overflow.
Array logaddexp(const Array& a, const Array& b, StreamOrDevice s = {});
Array equal(const Array& a, const Array& b, StreamOrDevice s = {});
Array not_equal(const Array& a, const Array& b, StreamOrDevice s = {});
Array less(const Array& a, const Array& b, StreamOrDevice s = {});
Array less_equal(const Array& a, const Array& b, StreamOrDevice s = {});
Array greater(const Array& a, const Array& b, StreamOrDevice s = {});
Array greater_equal(const Array& a, const Array& b, StreamOrDevice s = {});
Array logical_and(const Array& a, const Array& b, StreamOrDevice s = {});
Array logical_or(const Array& a, const Array& b, StreamOrDevice s = {});
/// Integers and bool only.
Array bitwise_and(const Array& a, const Array& b, StreamOrDevice s = {});
Array bitwise_or(const Array& a, const Array& b, StreamOrDevice s = {});
Array bitwise_xor(const Array& a, const Array& b, StreamOrDevice s = {});
Array left_shift(const Array& a, const Array& b, StreamOrDevice s = {});
Array right_shift(const Array& a, const Array& b, StreamOrDevice s = {});

// ---- ternary and conversions ---------------------------------------------------------------

/// x where condition is true, else y (broadcasting all three; x and y promoted).
Array where(const Array& condition, const Array& x, const Array& y, StreamOrDevice s = {});
/// Converted to `dtype` (C casts, as numpy's astype).
Array astype(const Array& a, Dtype dtype, StreamOrDevice s = {});
/// Values limited to [a_min, a_max] (either may be omitted, not both).
Array clip(const Array& a, const std::optional<Array>& a_min, const std::optional<Array>& a_max,
           StreamOrDevice s = {});

// ---- reductions ----------------------------------------------------------------------------
// Over the given axes (negative counts from the end; none given: all axes). keepdims keeps the
// reduced axes as size 1. sum/prod of integers accumulate in (u)int32 at least, as MLX.

Array sum(const Array& a, bool keepdims = false, StreamOrDevice s = {});
Array sum(const Array& a, const std::vector<int>& axes, bool keepdims = false,
          StreamOrDevice s = {});
Array sum(const Array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
Array prod(const Array& a, bool keepdims = false, StreamOrDevice s = {});
Array prod(const Array& a, const std::vector<int>& axes, bool keepdims = false,
           StreamOrDevice s = {});
Array prod(const Array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
/// Maximum / minimum (NaN if any element is NaN); empty reductions raise.
Array max(const Array& a, bool keepdims = false, StreamOrDevice s = {});
Array max(const Array& a, const std::vector<int>& axes, bool keepdims = false,
          StreamOrDevice s = {});
Array max(const Array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
Array min(const Array& a, bool keepdims = false, StreamOrDevice s = {});
Array min(const Array& a, const std::vector<int>& axes, bool keepdims = false,
          StreamOrDevice s = {});
Array min(const Array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
Array all(const Array& a, bool keepdims = false, StreamOrDevice s = {});
Array all(const Array& a, const std::vector<int>& axes, bool keepdims = false,
          StreamOrDevice s = {});
Array all(const Array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
Array any(const Array& a, bool keepdims = false, StreamOrDevice s = {});
Array any(const Array& a, const std::vector<int>& axes, bool keepdims = false,
          StreamOrDevice s = {});
Array any(const Array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
/// Mean (float32 for integers).
Array mean(const Array& a, bool keepdims = false, StreamOrDevice s = {});
Array mean(const Array& a, const std::vector<int>& axes, bool keepdims = false,
           StreamOrDevice s = {});
Array mean(const Array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
/// Variance with `ddof` delta degrees of freedom.
Array var(const Array& a, bool keepdims = false, int ddof = 0, StreamOrDevice s = {});
Array var(const Array& a, const std::vector<int>& axes, bool keepdims = false, int ddof = 0,
          StreamOrDevice s = {});
Array var(const Array& a, int axis, bool keepdims = false, int ddof = 0, StreamOrDevice s = {});
/// log(sum(exp(a))) computed stably.
Array logsumexp(const Array& a, bool keepdims = false, StreamOrDevice s = {});
Array logsumexp(const Array& a, const std::vector<int>& axes, bool keepdims = false,
                StreamOrDevice s = {});
Array logsumexp(const Array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
/// exp(a - logsumexp(a)) over the axes.
Array softmax(const Array& a, bool precise = false, StreamOrDevice s = {});
Array softmax(const Array& a, const std::vector<int>& axes, bool precise = false,
              StreamOrDevice s = {});
Array softmax(const Array& a, int axis, bool precise = false, StreamOrDevice s = {});
/// Index of the first maximum / minimum (uint32) over the flattened array or one axis.
Array argmax(const Array& a, bool keepdims = false, StreamOrDevice s = {});
Array argmax(const Array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
Array argmin(const Array& a, bool keepdims = false, StreamOrDevice s = {});
Array argmin(const Array& a, int axis, bool keepdims = false, StreamOrDevice s = {});

// ---- matrix products ---------------------------------------------------------------------

/// Matrix product with numpy/MLX semantics: 1-D inputs are promoted to a row (first) or a column
/// (second) vector and that axis removed from the result; batch axes broadcast; dtypes promoted
/// and required floating (float16/bfloat16 compute with float32 accumulation). OpenBLAS on the
/// CPU, cuBLAS on CUDA, both loaded at run time (alloy::NotSupported when absent).
Array matmul(const Array& a, const Array& b, StreamOrDevice s = {});
/// The BLAS library `device`'s matmul runs through, loaded now if it was not: on the CPU the
/// OpenBLAS file and its configuration string (ALLOY_OPENBLAS's file, else an OpenBLAS already
/// loaded in the process such as numpy's, else one named with add_cpu_blas_candidate, else the
/// system's), on CUDA the cuBLAS file. Throws alloy::NotSupported when none loads.
std::string blas_library(Device device = Device::cpu());
/// Names an OpenBLAS file for the CPU's matmul to try after ALLOY_OPENBLAS's file and an OpenBLAS
/// already loaded in the process, before the system's libopenblas.so.0 (candidates in the order
/// added). The Python package names numpy's bundled library, so that Alloy and numpy share one
/// library and one thread pool whichever is imported or used first. The library is chosen once,
/// at the first CPU product (or blas_library()): returns false, and adds nothing, after that.
bool add_cpu_blas_candidate(const std::string& file);

/// MLX's affine quantization of `w` (last axis a multiple of group_size; group_size 32, 64 or
/// 128; bits 4 or 8): per group of `group_size` elements along the last axis a scale and a bias
/// (w's dtype) so that w ~ scale * q + bias with q in [0, 2^bits); q packed little-end-first into
/// uint32 words (32 / bits per word). Returns {w_q, scales, biases}.
std::vector<Array> quantize(const Array& w, int group_size = 64, int bits = 4,
                            StreamOrDevice s = {});
/// scales * q + biases, unpacked (the dtype of scales).
Array dequantize(const Array& w, const Array& scales, const Array& biases, int group_size = 64,
                 int bits = 4, StreamOrDevice s = {});
/// x @ dequantize(w).T (transpose = true: w is [N, K] quantized) or x @ dequantize(w)
/// (transpose = false: w is [K, N] quantized), without materializing the dequantized matrix.
/// x: [..., M, K]; the result [..., M, N] has x's (floating) dtype promoted with the scales'.
Array quantized_matmul(const Array& x, const Array& w, const Array& scales, const Array& biases,
                       bool transpose = true, int group_size = 64, int bits = 4,
                       StreamOrDevice s = {});
/// MLX's gather_qmm (mixture-of-experts): out[i] = x[lhs_indices[i]] @ W[rhs_indices[i]], with
/// w / scales / biases stacks of quantized matrices [E, ...] and the index arrays (integers,
/// broadcast together) picking the batch of x and the matrix of w; omitted indices default to
/// the batch positions (arange). Result shape: indices' shape + [M, N].
Array gather_qmm(const Array& x, const Array& w, const Array& scales, const Array& biases,
                 const std::optional<Array>& lhs_indices = std::nullopt,
                 const std::optional<Array>& rhs_indices = std::nullopt, bool transpose = true,
                 int group_size = 64, int bits = 4, StreamOrDevice s = {});

// ---- shapes (lazy views where possible) ----------------------------------------------------

Array reshape(const Array& a, Shape shape, StreamOrDevice s = {});
Array flatten(const Array& a, StreamOrDevice s = {});
Array transpose(const Array& a, std::vector<int> axes, StreamOrDevice s = {});
Array transpose(const Array& a, StreamOrDevice s = {});
Array swapaxes(const Array& a, int axis1, int axis2, StreamOrDevice s = {});
Array broadcast_to(const Array& a, const Shape& shape, StreamOrDevice s = {});
Array expand_dims(const Array& a, const std::vector<int>& axes, StreamOrDevice s = {});
Array expand_dims(const Array& a, int axis, StreamOrDevice s = {});
Array squeeze(const Array& a, const std::vector<int>& axes, StreamOrDevice s = {});
Array squeeze(const Array& a, StreamOrDevice s = {});
/// a[start:stop:step] per axis (MLX's slice(a, start, stop, strides)).
Array slice(const Array& a, const Shape& start, const Shape& stop, const Shape& strides = {},
            StreamOrDevice s = {});

/// Joined along an existing axis (dtypes promoted; one array is returned as it is).
Array concatenate(const std::vector<Array>& arrays, int axis = 0, StreamOrDevice s = {});
/// Joined along a new axis.
Array stack(const std::vector<Array>& arrays, int axis = 0, StreamOrDevice s = {});

// ---- scans (src/ops/scan.cpp) --------------------------------------------------------------
// Cumulative sum / product / maximum / minimum along `axis` (over the flattened array when no
// axis is given). `reverse` scans from the end; `inclusive = false` gives the exclusive scan (the
// first output is the identity). cumsum of bool gives int32; other dtypes are kept.

Array cumsum(const Array& a, int axis, bool reverse = false, bool inclusive = true,
             StreamOrDevice s = {});
Array cumsum(const Array& a, bool reverse = false, bool inclusive = true, StreamOrDevice s = {});
Array cumprod(const Array& a, int axis, bool reverse = false, bool inclusive = true,
              StreamOrDevice s = {});
Array cumprod(const Array& a, bool reverse = false, bool inclusive = true, StreamOrDevice s = {});
Array cummax(const Array& a, int axis, bool reverse = false, bool inclusive = true,
             StreamOrDevice s = {});
Array cummax(const Array& a, bool reverse = false, bool inclusive = true, StreamOrDevice s = {});
Array cummin(const Array& a, int axis, bool reverse = false, bool inclusive = true,
             StreamOrDevice s = {});
Array cummin(const Array& a, bool reverse = false, bool inclusive = true, StreamOrDevice s = {});

// ---- indexing (src/ops/indexing.cpp) ---------------------------------------------------------
// Index arrays are any integer dtype; negative indices count from the end. Gathers clamp indices
// that are still out of range, scatters drop them (MLX leaves both undefined).

/// Elements of `a` at `indices` along `axis`: shape a.shape[:axis] + indices.shape +
/// a.shape[axis+1:]. Without an axis, indexes the flattened array.
Array take(const Array& a, const Array& indices, int axis, StreamOrDevice s = {});
Array take(const Array& a, const Array& indices, StreamOrDevice s = {});
Array take(const Array& a, int index, int axis, StreamOrDevice s = {});
/// out[..., i, ...] = a[..., indices[..., i, ...], ...] along `axis` (a and indices broadcast
/// off the axis); without an axis, over the flattened arrays.
Array take_along_axis(const Array& a, const Array& indices, int axis, StreamOrDevice s = {});
Array take_along_axis(const Array& a, const Array& indices, StreamOrDevice s = {});
/// A copy of `a` with `values` (broadcast to indices' shape) written at `indices` along `axis`.
Array put_along_axis(const Array& a, const Array& indices, const Array& values, int axis,
                     StreamOrDevice s = {});
/// MLX's gather: indices[k] (broadcast together, shape I) index axes[k]; from each indexed
/// position a slice of `slice_sizes` is taken. Shape I + slice_sizes.
Array gather(const Array& a, const std::vector<Array>& indices, const std::vector<int>& axes,
             const Shape& slice_sizes, StreamOrDevice s = {});
/// MLX's scatter: a copy of `a` with `updates` (shape I + a.shape with 1 on the indexed axes, or
/// broadcastable to it) written at the positions the indices give. Repeated positions: the last
/// update wins. scatter_add adds instead (every update counted).
Array scatter(const Array& a, const std::vector<Array>& indices, const Array& updates,
              const std::vector<int>& axes, StreamOrDevice s = {});
Array scatter_add(const Array& a, const std::vector<Array>& indices, const Array& updates,
                  const std::vector<int>& axes, StreamOrDevice s = {});
/// A copy of `src` with `update` (broadcast to the slice's shape) written at
/// src[start:stop:strides] (Python slice bounds per axis; negative ones count from the end).
Array slice_update(const Array& src, const Array& update, Shape start, Shape stop, Shape strides,
                   StreamOrDevice s = {});
Array slice_update(const Array& src, const Array& update, Shape start, Shape stop,
                   StreamOrDevice s = {});
/// Views of `a` split along `axis` at `indices`, or into `num_splits` equal parts.
std::vector<Array> split(const Array& a, const Shape& indices, int axis = 0, StreamOrDevice s = {});
std::vector<Array> split(const Array& a, int num_splits, int axis = 0, StreamOrDevice s = {});
/// n x m with ones on diagonal k (eye), on and below it (tri).
Array eye(int n, int m, int k = 0, Dtype dtype = Dtype::float32, StreamOrDevice s = {});
Array eye(int n, Dtype dtype = Dtype::float32, StreamOrDevice s = {});
Array identity(int n, Dtype dtype = Dtype::float32, StreamOrDevice s = {});
Array tri(int n, int m, int k = 0, Dtype dtype = Dtype::float32, StreamOrDevice s = {});
Array tri(int n, Dtype dtype = Dtype::float32, StreamOrDevice s = {});
/// The last two axes' lower (tril: on and below diagonal k) / upper triangle, zeros elsewhere.
Array tril(const Array& x, int k = 0, StreamOrDevice s = {});
Array triu(const Array& x, int k = 0, StreamOrDevice s = {});

// ---- random (src/ops/random.cpp): MLX's mx.random with explicit keys -------------------------
// A key is a uint32 array of shape (2). Without a key, the next key of a process-wide sequence
// (seeded from the clock, or by random::seed) is used. Values are MLX's bit for bit (threefry
// 2x32 in MLX's counter layout, MLX's conversions); normal differs from MLX in the last bits
// of erfinv (1e-4 relative in the tails).

namespace random {
/// Seeds the process-wide key sequence.
void seed(uint64_t seed);
/// The key of a seed: {seed >> 32, seed & 0xffffffff}.
Array key(uint64_t seed);
/// `num` new keys, shape (num, 2).
Array split(const Array& key, int num, StreamOrDevice s = {});
/// Two new keys.
std::pair<Array, Array> split(const Array& key, StreamOrDevice s = {});
/// Random uint32 words (width 4; widths 1 and 2 raise NotSupported).
Array bits(const Shape& shape, int width = 4, const std::optional<Array>& key = std::nullopt,
           StreamOrDevice s = {});
/// Uniform in [low, high) (float16/bfloat16/float32).
Array uniform(const Array& low, const Array& high, const Shape& shape, Dtype dtype = Dtype::float32,
              const std::optional<Array>& key = std::nullopt, StreamOrDevice s = {});
Array uniform(const Shape& shape, Dtype dtype = Dtype::float32,
              const std::optional<Array>& key = std::nullopt, StreamOrDevice s = {});
/// Normal with mean `loc` and standard deviation `scale` (sqrt(2) erfinv(uniform(-1, 1))).
Array normal(const Shape& shape, Dtype dtype, const std::optional<Array>& loc,
             const std::optional<Array>& scale, const std::optional<Array>& key = std::nullopt,
             StreamOrDevice s = {});
Array normal(const Shape& shape = {}, Dtype dtype = Dtype::float32, double loc = 0.0,
             double scale = 1.0, const std::optional<Array>& key = std::nullopt,
             StreamOrDevice s = {});
/// True with probability p (p broadcast to shape).
Array bernoulli(const Array& p, const Shape& shape, const std::optional<Array>& key = std::nullopt,
                StreamOrDevice s = {});
Array bernoulli(const Array& p, const std::optional<Array>& key = std::nullopt,
                StreamOrDevice s = {});
Array bernoulli(const std::optional<Array>& key = std::nullopt, StreamOrDevice s = {});
/// Integers in [low, high) (MLX's: the floor of a float32 uniform draw).
Array randint(const Array& low, const Array& high, const Shape& shape, Dtype dtype = Dtype::int32,
              const std::optional<Array>& key = std::nullopt, StreamOrDevice s = {});
}  // namespace random

// ---- printing (src/ops/print.cpp) ------------------------------------------------------------

/// MLX's text of an array, e.g. "array([[1, 2],\n       [3, 4]], dtype=int32)": floats with 6
/// significant digits, every axis longer than 6 summarised (its first and last 3 entries).
/// Evaluates the array. `python_bools` writes True/False instead of true/false.
std::string array_repr(const Array& a, bool python_bools = false);
/// Writes array_repr(a).
std::ostream& operator<<(std::ostream& os, const Array& a);

// ---- operators -------------------------------------------------------------------------------

Array operator-(const Array& a);
Array operator!(const Array& a);
Array operator~(const Array& a);
Array operator+(const Array& a, const Array& b);
Array operator-(const Array& a, const Array& b);
Array operator*(const Array& a, const Array& b);
Array operator/(const Array& a, const Array& b);
Array operator%(const Array& a, const Array& b);
Array operator==(const Array& a, const Array& b);
Array operator!=(const Array& a, const Array& b);
Array operator<(const Array& a, const Array& b);
Array operator<=(const Array& a, const Array& b);
Array operator>(const Array& a, const Array& b);
Array operator>=(const Array& a, const Array& b);
Array operator&&(const Array& a, const Array& b);
Array operator||(const Array& a, const Array& b);
Array operator&(const Array& a, const Array& b);
Array operator|(const Array& a, const Array& b);
Array operator^(const Array& a, const Array& b);
Array operator<<(const Array& a, const Array& b);
Array operator>>(const Array& a, const Array& b);

/// A 0-d array of `value` that is "weak" next to `like`: it takes like's dtype unless a double
/// next to an integer array (float32) or a non-bool next to a bool array (int32 / float32).
Array scalar_like(double value, const Array& like, bool is_integer);

#define ALLOY_SCALAR_OPERATOR(OP)                                              \
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>        \
  Array operator OP(const Array& a, T b) {                                     \
    return a OP scalar_like(static_cast<double>(b), a, std::is_integral_v<T>); \
  }                                                                            \
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>        \
  Array operator OP(T a, const Array& b) {                                     \
    return scalar_like(static_cast<double>(a), b, std::is_integral_v<T>) OP b; \
  }
ALLOY_SCALAR_OPERATOR(+)
ALLOY_SCALAR_OPERATOR(-)
ALLOY_SCALAR_OPERATOR(*)
ALLOY_SCALAR_OPERATOR(/)
ALLOY_SCALAR_OPERATOR(%)
ALLOY_SCALAR_OPERATOR(==)
ALLOY_SCALAR_OPERATOR(!=)
ALLOY_SCALAR_OPERATOR(<)
ALLOY_SCALAR_OPERATOR(<=)
ALLOY_SCALAR_OPERATOR(>)
ALLOY_SCALAR_OPERATOR(>=)
#undef ALLOY_SCALAR_OPERATOR

}  // namespace alloy
