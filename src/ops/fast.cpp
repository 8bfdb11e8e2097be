// MLX's mx.fast transformer ops (include/alloy/fast.h) and their primitives
// (src/ops/fast_primitives.h). Facts from MLX's mlx/fast.cpp (read, not copied): argument checks,
// what each primitive's inputs are (the op casts x and weights to the output dtype, passes a 0-d
// 1 / 0 for a missing weight / bias, broadcasts an attention mask to (B, Hq, Lq, Lk)), and the
// fallback compositions that define the results (the graphs mlx[cpu] records).
#include "alloy/fast.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "alloy/errors.h"
#include "alloy/ops.h"
#include "core/array_node.h"
#include "ops/fast_primitives.h"
#include "ops/kernels.h"
#include "ops/matmul.h"
#include "ops/misc_primitives.h"
#include "ops/ops_internal.h"

namespace alloy {
namespace ops {
namespace {

// The dtype a kernel computes in for output dtype `out`.
Dtype compute_of(Dtype out) {
  return out == Dtype::float64 ? Dtype::float64 : Dtype::float32;
}

// Float parameters of a kernel (eps, scale...): a small host array in the compute dtype, so the
// kernel text (and its compiled program) does not depend on their values.
Array float_params(const std::vector<double>& v, Dtype compute) {
  return Array::from_doubles(v, {static_cast<int64_t>(v.size())}, compute, Device::cpu());
}

// The most negative finite value of `t` as Metal text (MLX masks scores with finfo(t).min).
std::string lowest_literal(Dtype t) {
  switch (t) {
    case Dtype::float16:
      return "-65504.0f";
    case Dtype::bfloat16:
      return "-3.38953139e38f";
    case Dtype::float64:
      return "-1.7976931348623157e308";
    default:
      return "-3.40282347e38f";
  }
}

// Index of element i of a (D) or broadcast 0-d parameter input.
std::string param_index(const Array& p) {
  return p.size() == 1 ? "0" : "i";
}

void check_float_out(Dtype t, const char* op) {
  if (!is_floating(t) || t == Dtype::complex64)
    throw std::invalid_argument(
        fmt::format("[{}] Received unsupported type {}.", op, dtype_name(t)));
}

void allocate_all(std::vector<Array>& outputs) {
  for (auto& o : outputs) allocate_output(o);
}

// The inputs as the kernels read them: row-major (broadcast masks, transposed views copied).
std::vector<Array> row_major(const std::vector<Array>& in, bool gpu) {
  std::vector<Array> r;
  for (auto& a : in) r.push_back(row_contiguous_now(a, gpu));
  return r;
}

int64_t rows_of(const Array& x) {
  int64_t d = x.shape().back();
  return d == 0 ? 0 : x.size() / d;
}

}  // namespace

// ---- RMSNorm -----------------------------------------------------------------------------------

std::vector<Shape> RMSNorm::output_shapes(const std::vector<Array>& inputs) const {
  if (inputs.size() != 2) throw std::invalid_argument("RMSNorm: inputs are x and weight");
  if (inputs[0].ndim() == 0) throw std::invalid_argument("[rms_norm] a 0-d input");
  return {inputs[0].shape()};
}

PrimitiveState RMSNorm::state() const {
  PrimitiveState s(1);
  s.set("eps", static_cast<double>(eps_));
  return s;
}

void RMSNorm::eval(const std::vector<Array>& given, std::vector<Array>& outputs, bool gpu) {
  std::vector<Array> inputs = row_major(given, gpu);
  const Array &x = inputs.at(0), &w = inputs.at(1);
  Array& out = outputs.at(0);
  int64_t N = rows_of(x), D = x.shape().back();
  if (w.size() != 1 && w.size() != D)
    throw std::invalid_argument("[rms_norm] weight must have the last axis' size");
  if (N == 0) return allocate_all(outputs);
  Dtype C = compute_of(out.dtype());
  std::string key = fmt::format("rmsnorm|{}|{}|{}|{}", dtype_name(x.dtype()), dtype_name(w.dtype()),
                                dtype_name(out.dtype()), param_index(w));
  OpKernel k = op_kernel(
      key,
      [&] {
        KernelSpec spec;
        spec.name = "alloy_rms_norm";
        spec.input_names = {"x", "w", "p"};
        spec.output_names = {"out"};
        spec.header = functor_header({});
        // MLX's fallback: x in float, x * rsqrt(mean(x^2) + eps) rounded to the output dtype,
        // then times the weight (rounded again).
        spec.source = fmt::format(
            "  int64_t row = thread_position_in_grid.x;\n"
            "  int64_t D = x_shape[x_ndim - 1];\n"
            "  int64_t base = row * D;\n"
            "  {0} acc = 0;\n"
            "  for (int64_t i = 0; i < D; ++i) {{\n"
            "    {0} v = static_cast<{0}>(x[base + i]);\n"
            "    acc += v * v;\n"
            "  }}\n"
            "  {0} n = metal::rsqrt(acc / static_cast<{0}>(D) + p[0]);\n"
            "  for (int64_t i = 0; i < D; ++i) {{\n"
            "    {1} y = static_cast<{1}>(static_cast<{0}>(x[base + i]) * n);\n"
            "    out[base + i] = static_cast<{1}>(static_cast<{0}>(y) * "
            "static_cast<{0}>(w[{2}]));\n"
            "  }}\n",
            tname(C), tname(out.dtype()), param_index(w));
        return spec;
      },
      true);
  std::vector<Array> in{x, at_least_1d_alias(w), float_params({eps_}, C)};
  run_kernel_grid(k, in, outputs, {N, 1, 1}, 64, gpu);
}

namespace {
// Every axis but the last: the weight / bias gradients sum over them.
std::vector<int> leading_axes(const Array& g) {
  std::vector<int> axes(g.ndim() - 1);
  std::iota(axes.begin(), axes.end(), 0);
  return axes;
}
}  // namespace

std::vector<Array> RMSNorm::vjp(const std::vector<Array>& primals,
                                const std::vector<Array>& cotangents,
                                const std::vector<int>& argnums, const std::vector<Array>&) {
  // d/dx = g w n - x n^3 mean(g w x), n = rsqrt(mean(x^2) + eps); d/dw = sum(g x n) over the
  // leading axes (computed in float, as the forward).
  const Array& x0 = primals.at(0);
  const Array& w0 = primals.at(1);
  Dtype C = compute_of(x0.dtype());
  Array x = astype(x0, C), w = astype(w0, C), g = astype(cotangents.at(0), C);
  Array n = rsqrt(add(mean(square(x), -1, true), Array::from_doubles({eps_}, {}, C)));
  Array gw = multiply(g, w);
  Array t = mean(multiply(gw, x), -1, true);
  std::vector<Array> r;
  for (int a : argnums) {
    if (a == 0) {
      Array dx = subtract(multiply(gw, n), multiply(multiply(x, t), multiply(n, square(n))));
      r.push_back(astype(dx, x0.dtype()));
    } else if (a == 1) {
      r.push_back(w0.ndim() == 0
                      ? zeros_like(w0)
                      : astype(sum(multiply(g, multiply(x, n)), leading_axes(g)), w0.dtype()));
    } else {
      throw std::invalid_argument("RMSNorm::vjp: argnum out of range");
    }
  }
  return r;
}

// ---- LayerNorm ---------------------------------------------------------------------------------

std::vector<Shape> LayerNorm::output_shapes(const std::vector<Array>& inputs) const {
  if (inputs.size() != 3) throw std::invalid_argument("LayerNorm: inputs are x, weight, bias");
  if (inputs[0].ndim() == 0) throw std::invalid_argument("[layer_norm] a 0-d input");
  return {inputs[0].shape()};
}

PrimitiveState LayerNorm::state() const {
  PrimitiveState s(1);
  s.set("eps", static_cast<double>(eps_));
  return s;
}

void LayerNorm::eval(const std::vector<Array>& given, std::vector<Array>& outputs, bool gpu) {
  std::vector<Array> inputs = row_major(given, gpu);
  const Array &x = inputs.at(0), &w = inputs.at(1), &b = inputs.at(2);
  Array& out = outputs.at(0);
  int64_t N = rows_of(x), D = x.shape().back();
  if ((w.size() != 1 && w.size() != D) || (b.size() != 1 && b.size() != D))
    throw std::invalid_argument("[layer_norm] weight and bias must have the last axis' size");
  if (N == 0) return allocate_all(outputs);
  Dtype C = compute_of(out.dtype());
  std::string key =
      fmt::format("layernorm|{}|{}|{}|{}|{}|{}", dtype_name(x.dtype()), dtype_name(w.dtype()),
                  dtype_name(b.dtype()), dtype_name(out.dtype()), param_index(w), param_index(b));
  OpKernel k = op_kernel(
      key,
      [&] {
        KernelSpec spec;
        spec.name = "alloy_layer_norm";
        spec.input_names = {"x", "w", "b", "p"};
        spec.output_names = {"out"};
        spec.header = functor_header({});
        // MLX's fallback: mean, centred variance (two passes, float), (x - mu) rsqrt(var + eps)
        // rounded to the output dtype, times the weight (rounded), plus the bias (rounded).
        spec.source = fmt::format(
            "  int64_t row = thread_position_in_grid.x;\n"
            "  int64_t D = x_shape[x_ndim - 1];\n"
            "  int64_t base = row * D;\n"
            "  {0} s = 0;\n"
            "  for (int64_t i = 0; i < D; ++i) s += static_cast<{0}>(x[base + i]);\n"
            "  {0} mu = s / static_cast<{0}>(D);\n"
            "  {0} v = 0;\n"
            "  for (int64_t i = 0; i < D; ++i) {{\n"
            "    {0} c = static_cast<{0}>(x[base + i]) - mu;\n"
            "    v += c * c;\n"
            "  }}\n"
            "  {0} n = metal::rsqrt(v / static_cast<{0}>(D) + p[0]);\n"
            "  for (int64_t i = 0; i < D; ++i) {{\n"
            "    {1} y = static_cast<{1}>((static_cast<{0}>(x[base + i]) - mu) * n);\n"
            "    y = static_cast<{1}>(static_cast<{0}>(y) * static_cast<{0}>(w[{2}]));\n"
            "    out[base + i] = static_cast<{1}>(static_cast<{0}>(y) + "
            "static_cast<{0}>(b[{3}]));\n"
            "  }}\n",
            tname(C), tname(out.dtype()), param_index(w), param_index(b));
        return spec;
      },
      true);
  std::vector<Array> in{x, at_least_1d_alias(w), at_least_1d_alias(b), float_params({eps_}, C)};
  run_kernel_grid(k, in, outputs, {N, 1, 1}, 64, gpu);
}

std::vector<Array> LayerNorm::vjp(const std::vector<Array>& primals,
                                  const std::vector<Array>& cotangents,
                                  const std::vector<int>& argnums, const std::vector<Array>&) {
  // xc = x - mean(x), n = rsqrt(mean(xc^2) + eps), wg = w g:
  // d/dx = (wg - mean(wg)) n - xc n^3 mean(wg xc); d/dw = sum(g xc n); d/db = sum(g).
  const Array &x0 = primals.at(0), &w0 = primals.at(1), &b0 = primals.at(2);
  Dtype C = compute_of(x0.dtype());
  Array x = astype(x0, C), w = astype(w0, C), g = astype(cotangents.at(0), C);
  Array xc = subtract(x, mean(x, -1, true));
  Array n = rsqrt(add(mean(square(xc), -1, true), Array::from_doubles({eps_}, {}, C)));
  Array wg = multiply(w, g);
  std::vector<Array> r;
  for (int a : argnums) {
    if (a == 0) {
      Array t1 = multiply(multiply(xc, mean(multiply(wg, xc), -1, true)), multiply(n, square(n)));
      Array t2 = multiply(subtract(wg, mean(wg, -1, true)), n);
      r.push_back(astype(subtract(t2, t1), x0.dtype()));
    } else if (a == 1) {
      r.push_back(w0.ndim() == 0
                      ? zeros_like(w0)
                      : astype(sum(multiply(g, multiply(xc, n)), leading_axes(g)), w0.dtype()));
    } else if (a == 2) {
      r.push_back(b0.ndim() == 0 ? zeros_like(b0) : astype(sum(g, leading_axes(g)), b0.dtype()));
    } else {
      throw std::invalid_argument("LayerNorm::vjp: argnum out of range");
    }
  }
  return r;
}

// ---- RoPE --------------------------------------------------------------------------------------

RoPE::RoPE(int dims, bool traditional, float base, float scale, bool forward)
    : dims_(dims), traditional_(traditional), base_(base), scale_(scale), forward_(forward) {
  if (dims <= 0 || dims % 2 != 0)
    throw std::invalid_argument(fmt::format("[rope] dims must be positive and even, got {}", dims));
}

std::vector<Shape> RoPE::output_shapes(const std::vector<Array>& inputs) const {
  if (inputs.size() != 2 && inputs.size() != 3)
    throw std::invalid_argument("RoPE: inputs are x, offset and optionally freqs");
  const Array& x = inputs[0];
  if (x.ndim() < 3)
    throw std::invalid_argument(fmt::format(
        "[rope] Input must have at least 3 dimensions but got input with {} dimensions.",
        x.ndim()));
  if (dims_ > x.shape().back())
    throw std::invalid_argument(
        fmt::format("[rope] dims must not exceed the input's last dimension ({}) but got {}.",
                    x.shape().back(), dims_));
  return {x.shape()};
}

PrimitiveState RoPE::state() const {
  PrimitiveState s(1);
  s.set("dims", static_cast<int64_t>(dims_))
      .set("traditional", traditional_)
      .set("base", static_cast<double>(base_))
      .set("scale", static_cast<double>(scale_))
      .set("forward", forward_);
  return s;
}

void RoPE::eval(const std::vector<Array>& given, std::vector<Array>& outputs, bool gpu) {
  std::vector<Array> inputs = row_major(given, gpu);
  const Array &x = inputs.at(0), &off = inputs.at(1);
  Array& out = outputs.at(0);
  bool freqs = inputs.size() == 3;
  if (!is_integral(off.dtype()) || off.dtype() == Dtype::bool_ || off.ndim() > 1 ||
      (off.size() != 1 && off.size() != x.shape()[0]))
    throw std::invalid_argument(
        "[rope] offset must be an integer scalar or one per entry of the first axis");
  if (freqs && (inputs[2].ndim() != 1 || inputs[2].size() != dims_ / 2))
    throw std::invalid_argument(
        fmt::format("[rope] freqs must be one dimensional with size {}", dims_ / 2));
  int64_t N = rows_of(x);
  if (N == 0) return allocate_all(outputs);
  std::string key =
      fmt::format("rope|{}|{}|{}|{}|{}|{}|{}|{}", dtype_name(x.dtype()), dtype_name(out.dtype()),
                  dtype_name(off.dtype()), off.size() > 1, freqs,
                  freqs ? dtype_name(inputs[2].dtype()) : "-", traditional_, forward_);
  std::string O = tname(out.dtype());
  OpKernel k = op_kernel(
      key,
      [&] {
        KernelSpec spec;
        spec.name = "alloy_rope";
        spec.input_names = {"x", "offset"};
        if (freqs) spec.input_names.push_back("freqs");
        spec.input_names.push_back("p");
        spec.output_names = {"out"};
        spec.header = functor_header({});
        // MLX's fallback: positions (t + offset) * scale and inverse frequencies
        // exp(-i log(base) / (dims/2)) (or 1 / freqs) in float32; cos and sin rounded to the
        // output dtype; each product and the sum / difference rounded to it.
        std::string s = fmt::format(
            "  int64_t row = thread_position_in_grid.x;\n"
            "  int64_t D = x_shape[x_ndim - 1];\n"
            "  int64_t T = x_shape[x_ndim - 2];\n"
            "  int64_t per_batch = 1;\n"
            "  for (int d = 1; d + 1 < x_ndim; ++d) per_batch *= x_shape[d];\n"
            "  int64_t b = row / per_batch;\n"
            "  int64_t t = row % T;\n"
            "  int64_t base = row * D;\n"
            "  int64_t dims = static_cast<int64_t>(p[2]);\n"
            "  int64_t half_dims = dims / 2;\n"
            "  float pos = (static_cast<float>(t) + static_cast<float>(offset[{0}])) * p[1];\n"
            "  for (int64_t i = 0; i < half_dims; ++i) {{\n",
            off.size() > 1 ? "b" : "0");
        if (freqs)
          s += "    float inv = 1.0f / static_cast<float>(freqs[i]);\n";
        else
          s += "    float inv = metal::exp(static_cast<float>(-i) * p[0]);\n";
        s += fmt::format(
            "    float theta = pos * inv;\n"
            "    float c = static_cast<float>(static_cast<{0}>(metal::cos(theta)));\n"
            "    float sn = static_cast<float>(static_cast<{0}>(metal::sin(theta)));\n"
            "    int64_t i1 = {1}, i2 = {2};\n"
            "    float x1 = static_cast<float>(x[base + i1]);\n"
            "    float x2 = static_cast<float>(x[base + i2]);\n",
            O, traditional_ ? "2 * i" : "i", traditional_ ? "2 * i + 1" : "i + half_dims");
        auto r = [&](const std::string& v) {
          return fmt::format("static_cast<float>(static_cast<{}>({}))", O, v);
        };
        if (forward_)
          s += fmt::format(
              "    out[base + i1] = static_cast<{0}>({1} - {2});\n"
              "    out[base + i2] = static_cast<{0}>({3} + {4});\n",
              O, r("x1 * c"), r("x2 * sn"), r("x1 * sn"), r("x2 * c"));
        else
          s += fmt::format(
              "    out[base + i1] = static_cast<{0}>({1} + {2});\n"
              "    out[base + i2] = static_cast<{0}>({3} - {4});\n",
              O, r("x2 * sn"), r("x1 * c"), r("x2 * c"), r("x1 * sn"));
        s += fmt::format(
            "  }}\n"
            "  for (int64_t i = dims; i < D; ++i) out[base + i] = static_cast<{}>(x[base + i]);\n",
            O);
        spec.source = s;
        return spec;
      },
      true);
  // p: log(base) / (dims / 2) as MLX computes it in float, the scale, dims.
  float logb = std::log(base_) / static_cast<float>(dims_ / 2);
  std::vector<Array> in{x, at_least_1d_alias(off)};
  if (freqs) in.push_back(inputs[2]);
  in.push_back(Array::from_doubles({logb, scale_, static_cast<double>(dims_)}, {3}, Dtype::float32,
                                   Device::cpu()));
  run_kernel_grid(k, in, outputs, {N, 1, 1}, 64, gpu);
}

std::vector<Array> RoPE::vjp(const std::vector<Array>& primals,
                             const std::vector<Array>& cotangents, const std::vector<int>& argnums,
                             const std::vector<Array>&) {
  // The rotation's transpose is the rotation the other way (MLX's RoPE::vjp).
  if (argnums.size() != 1 || argnums[0] != 0)
    throw NotSupported("RoPE", "not supported: the vjp of rope for its offset or frequencies");
  const Array& g = cotangents.at(0);
  auto prim = std::make_shared<RoPE>(dims_, traditional_, base_, scale_, !forward_);
  std::vector<Array> in{g, primals.at(1)};
  if (primals.size() == 3) in.push_back(primals[2]);
  return {make_pending(prim, in, {g.shape()}, {g.dtype()}, g.device())[0]};
}

// ---- ScaledDotProductAttention -----------------------------------------------------------------

ScaledDotProductAttention::ScaledDotProductAttention(float scale, bool do_causal, bool has_sinks,
                                                     bool output_logsumexp)
    : scale_(scale), do_causal_(do_causal), has_sinks_(has_sinks) {
  if (output_logsumexp)
    throw NotSupported("ScaledDotProductAttention",
                       "not supported: scaled_dot_product_attention with its logsumexp output "
                       "(MLX's training-mode fused attention)");
}

std::vector<Shape> ScaledDotProductAttention::output_shapes(
    const std::vector<Array>& inputs) const {
  if (inputs.size() < 3 || inputs.size() > 5)
    throw std::invalid_argument(
        "ScaledDotProductAttention: inputs are q, k, v, optionally a mask, then sinks");
  const Array &q = inputs[0], &k = inputs[1], &v = inputs[2];
  for (const Array* a : {&q, &k, &v})
    if (a->ndim() != 4)
      throw std::invalid_argument("[scaled_dot_product_attention] inputs must be rank 4");
  if (k.shape()[0] != q.shape()[0] || v.shape()[0] != q.shape()[0] ||
      k.shape()[3] != q.shape()[3] || k.shape()[1] != v.shape()[1] ||
      k.shape()[2] != v.shape()[2] || k.shape()[1] == 0 || q.shape()[1] % k.shape()[1] != 0)
    throw std::invalid_argument(
        "[scaled_dot_product_attention] q (B, H, Lq, D), k (B, Hk, Lk, D), v (B, Hk, Lk, Dv) "
        "with H a multiple of Hk");
  return {Shape{q.shape()[0], q.shape()[1], q.shape()[2], v.shape()[3]}};
}

PrimitiveState ScaledDotProductAttention::state() const {
  PrimitiveState s(1);
  s.set("scale", static_cast<double>(scale_))
      .set("do_causal", do_causal_)
      .set("has_sinks", has_sinks_)
      .set("output_logsumexp", false);
  return s;
}

void ScaledDotProductAttention::eval(const std::vector<Array>& given, std::vector<Array>& outputs,
                                     bool gpu) {
  std::vector<Array> inputs = row_major(given, gpu);
  const Array &q = inputs.at(0), &k = inputs.at(1), &v = inputs.at(2);
  Array& out = outputs.at(0);
  size_t want = 3 + (has_sinks_ ? 1 : 0);
  bool has_mask = inputs.size() == want + 1;
  if (!has_mask && inputs.size() != want)
    throw std::invalid_argument("ScaledDotProductAttention: the inputs do not match its state");
  int64_t B = q.shape()[0], H = q.shape()[1], Lq = q.shape()[2], Lk = k.shape()[2];
  int64_t Dv = v.shape()[3];
  if (has_mask) {
    const Array& m = inputs[3];
    if (m.shape() != Shape{B, H, Lq, Lk})
      throw std::invalid_argument(
          "ScaledDotProductAttention: the mask must be broadcast to (B, H, Lq, Lk)");
  }
  if (has_sinks_ && (inputs.back().ndim() != 1 || inputs.back().size() != H))
    throw std::invalid_argument("[scaled_dot_product_attention] sinks must have shape (H)");
  if (out.size() == 0) return allocate_all(outputs);
  if (Lk == 0) throw std::invalid_argument("[scaled_dot_product_attention] keys must not be empty");
  Dtype C = compute_of(out.dtype());
  Dtype mask_t = has_mask ? inputs[3].dtype() : Dtype::bool_;
  std::string key = fmt::format(
      "sdpa|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", dtype_name(q.dtype()), dtype_name(k.dtype()),
      dtype_name(v.dtype()), dtype_name(out.dtype()), do_causal_, has_mask, dtype_name(mask_t),
      has_sinks_, has_sinks_ ? dtype_name(inputs.back().dtype()) : "-", Dv);
  OpKernel kern = op_kernel(
      key,
      [&] {
        KernelSpec spec;
        spec.name = "alloy_sdpa";
        spec.input_names = {"q", "k", "v"};
        if (has_mask) spec.input_names.push_back("mask");
        if (has_sinks_) spec.input_names.push_back("sinks");
        spec.input_names.push_back("p");
        spec.output_names = {"out"};
        spec.header = functor_header({});
        std::string Cn = tname(C), O = tname(out.dtype());
        auto r = [&](const std::string& e) {
          return fmt::format("static_cast<{0}>(static_cast<{1}>({2}))", Cn, O, e);
        };
        // One thread per query row: scores of the scaled query (rounded to the output dtype,
        // as MLX's fallback scales q first) with each key, masked (MLX: finfo.min where a bool
        // mask / the causal mask is false, an added mask otherwise), an online softmax and the
        // weighted sum of the values.
        std::string s = fmt::format(
            "  int64_t row = thread_position_in_grid.x;\n"
            "  int64_t H = q_shape[1], Lq = q_shape[2], D = q_shape[3];\n"
            "  int64_t Hk = k_shape[1], Lk = k_shape[2];\n"
            "  int64_t i = row % Lq;\n"
            "  int64_t h = (row / Lq) % H;\n"
            "  int64_t b = row / (Lq * H);\n"
            "  int64_t hk = h / (H / Hk);\n"
            "  int64_t qb = row * D;\n"
            "  int64_t kb = (b * Hk + hk) * Lk * D;\n"
            "  int64_t vb = (b * Hk + hk) * Lk * {2};\n"
            "  {0} sc = p[0];\n"
            "  {0} acc[{2}];\n"
            "  for (int d = 0; d < {2}; ++d) acc[d] = 0;\n"
            "  {0} m = -INFINITY;\n"
            "  {0} l = 0;\n",
            Cn, O, Dv);
        if (has_sinks_) s += fmt::format("  m = static_cast<{0}>(sinks[h]);\n  l = 1;\n", Cn);
        s += fmt::format(
            "  for (int64_t j = 0; j < Lk; ++j) {{\n"
            "    {0} sj;\n"
            "    bool keep = true;\n",
            Cn);
        if (do_causal_) s += "    keep = i + Lk - Lq >= j;\n";
        if (has_mask && mask_t == Dtype::bool_) s += "    keep = keep && mask[row * Lk + j];\n";
        s += fmt::format(
            "    if (keep) {{\n"
            "      {0} dot = 0;\n"
            "      for (int64_t d = 0; d < D; ++d)\n"
            "        dot += {1} * static_cast<{0}>(k[kb + j * D + d]);\n"
            "      sj = {2};\n"
            "    }} else {{\n"
            "      sj = {3};\n"
            "    }}\n",
            Cn, r("sc * static_cast<" + Cn + ">(q[qb + d])"), r("dot"),
            lowest_literal(out.dtype()));
        if (has_mask && mask_t != Dtype::bool_)
          s += "    sj = " + r("sj + static_cast<" + Cn + ">(mask[row * Lk + j])") + ";\n";
        s += fmt::format(
            "    if (sj == -INFINITY) continue;\n"
            "    if (sj > m) {{\n"
            "      {0} f = metal::exp(m - sj);\n"
            "      l = l * f + 1;\n"
            "      for (int d = 0; d < {1}; ++d) acc[d] = acc[d] * f + static_cast<{0}>(v[vb + j * "
            "{1} + d]);\n"
            "      m = sj;\n"
            "    }} else {{\n"
            "      {0} e = metal::exp(sj - m);\n"
            "      l += e;\n"
            "      for (int d = 0; d < {1}; ++d) acc[d] += e * static_cast<{0}>(v[vb + j * {1} + "
            "d]);\n"
            "    }}\n"
            "  }}\n"
            "  for (int d = 0; d < {1}; ++d) out[row * {1} + d] = static_cast<{2}>(acc[d] / l);\n",
            Cn, Dv, O);
        spec.source = s;
        return spec;
      },
      true);
  std::vector<Array> in{q, k, v};
  if (has_mask) in.push_back(inputs[3]);
  if (has_sinks_) in.push_back(inputs.back());
  in.push_back(float_params({scale_}, C));
  run_kernel_grid(kern, in, outputs, {B * H * Lq, 1, 1}, 64, gpu);
}

std::vector<Array> ScaledDotProductAttention::vjp(const std::vector<Array>& primals,
                                                  const std::vector<Array>& cotangents,
                                                  const std::vector<int>& argnums,
                                                  const std::vector<Array>&) {
  // Recomputes the attention with ops (keys / values repeated over the query heads):
  // P = softmax(S), S = scale q k^T masked; dV = P^T dO, dS = P (dO v^T - rowsum(P * dO v^T)),
  // dQ = scale dS k, dK = scale dS^T q; the repeated heads' gradients are summed.
  if (has_sinks_)
    throw NotSupported("ScaledDotProductAttention",
                       "not supported: the vjp of scaled_dot_product_attention with sinks");
  for (int a : argnums)
    if (a > 2)
      throw NotSupported("ScaledDotProductAttention",
                         "not supported: the vjp of scaled_dot_product_attention with respect to "
                         "its mask");
  const Array &q0 = primals.at(0), &k0 = primals.at(1), &v0 = primals.at(2);
  Dtype t = q0.dtype();
  Dtype C = compute_of(t);
  int64_t B = q0.shape()[0], H = q0.shape()[1], Lq = q0.shape()[2];
  int64_t Hk = k0.shape()[1], Lk = k0.shape()[2], D = k0.shape()[3], Dv = v0.shape()[3];
  int64_t R = H / Hk;
  auto repeat = [&](const Array& a, int64_t last) {
    if (R == 1) return astype(a, C);
    Array e = broadcast_to(expand_dims(astype(a, C), 2), {B, Hk, R, Lk, last});
    return reshape(e, {B, H, Lk, last});
  };
  auto unrepeat = [&](const Array& a, int64_t last) {
    if (R == 1) return a;
    return sum(reshape(a, {B, Hk, R, Lk, last}), 2);
  };
  Array q = astype(q0, C), k = repeat(k0, D), v = repeat(v0, Dv), g = astype(cotangents.at(0), C);
  Array sc = Array::from_doubles({scale_}, {}, C);
  Array S = matmul(multiply(q, sc), swapaxes(k, -1, -2));
  Array lowest = Array::from_doubles({-std::numeric_limits<float>::max()}, {}, C);
  if (do_causal_) {
    Array qi = expand_dims(
        arange(static_cast<double>(Lk - Lq), static_cast<double>(Lk), 1.0, Dtype::int32), 1);
    Array kj = expand_dims(arange(0.0, static_cast<double>(Lk), 1.0, Dtype::int32), 0);
    S = where(greater_equal(qi, kj), S, lowest);
  }
  if (primals.size() == 4) {
    const Array& mask = primals[3];
    S = mask.dtype() == Dtype::bool_ ? where(mask, S, lowest) : add(S, astype(mask, C));
  }
  Array P = softmax(S, -1, true);
  std::vector<Array> r;
  for (int a : argnums) {
    if (a == 2) {
      r.push_back(astype(unrepeat(matmul(swapaxes(P, -1, -2), g), Dv), v0.dtype()));
      continue;
    }
    Array dP = matmul(g, swapaxes(v, -1, -2));
    Array dS = multiply(P, subtract(dP, sum(multiply(dP, P), -1, true)));
    if (a == 0)
      r.push_back(astype(multiply(matmul(dS, k), sc), q0.dtype()));
    else
      r.push_back(astype(unrepeat(multiply(matmul(swapaxes(dS, -1, -2), q), sc), D), k0.dtype()));
  }
  return r;
}

ALLOY_REGISTER_PRIMITIVE(RMSNorm, [](const PrimitiveState& s) {
  if (s.version() != 1) throw std::invalid_argument("RMSNorm state version must be 1");
  return std::make_shared<RMSNorm>(static_cast<float>(s.get_as<double>("eps")));
})
ALLOY_REGISTER_PRIMITIVE(LayerNorm, [](const PrimitiveState& s) {
  if (s.version() != 1) throw std::invalid_argument("LayerNorm state version must be 1");
  return std::make_shared<LayerNorm>(static_cast<float>(s.get_as<double>("eps")));
})
ALLOY_REGISTER_PRIMITIVE(RoPE, [](const PrimitiveState& s) {
  if (s.version() != 1) throw std::invalid_argument("RoPE state version must be 1");
  return std::make_shared<RoPE>(static_cast<int>(s.get_int("dims")), s.get_as<bool>("traditional"),
                                static_cast<float>(s.get_as<double>("base")),
                                static_cast<float>(s.get_as<double>("scale")),
                                s.get_as<bool>("forward"));
})
ALLOY_REGISTER_PRIMITIVE(ScaledDotProductAttention, [](const PrimitiveState& s) {
  if (s.version() != 1)
    throw std::invalid_argument("ScaledDotProductAttention state version must be 1");
  return std::make_shared<ScaledDotProductAttention>(
      static_cast<float>(s.get_as<double>("scale")), s.get_as<bool>("do_causal"),
      s.get_as<bool>("has_sinks"), s.get_as<bool>("output_logsumexp"));
})

}  // namespace ops

// ---- the public ops
// ------------------------------------------------------------------------------

namespace fast {

namespace {

Array param_or(const std::optional<Array>& p, double dflt, Dtype t, const Array& x,
               const char* what, const char* op) {
  if (!p) return Array::from_doubles({dflt}, {}, t, x.device());
  if (p->ndim() != 1)
    throw std::invalid_argument(
        fmt::format("[{}] {} must have 1 dimension but has {} dimensions.", op, what, p->ndim()));
  if (p->size() != x.shape().back())
    throw std::invalid_argument(fmt::format(
        "[{}] {} must have the same size as the last dimension of x but has {} elements.", op, what,
        p->size()));
  return astype(*p, t);
}

Array pending(std::shared_ptr<Primitive> prim, std::vector<Array> in, const Shape& shape, Dtype t,
              const StreamOrDevice& s, const char* op) {
  Device d = ops::resolve_device(in, s);
  ops::check_op_dtype(d, t, op);
  for (auto& a : in) a = ops::to_op_device(a, d);
  return make_pending(std::move(prim), std::move(in), {shape}, {t}, ops::resolve_stream(d, s))[0];
}

void check_x(const Array& x, const char* op) {
  if (!x.valid()) throw std::invalid_argument(fmt::format("[{}] an input is an empty handle", op));
  if (x.ndim() == 0)
    throw std::invalid_argument(fmt::format(
        "[{}] Input must have at least 1 dimension but got input with 0 dimensions.", op));
}

}  // namespace

Array rms_norm(const Array& x, const std::optional<Array>& weight, float eps, StreamOrDevice s) {
  check_x(x, "rms_norm");
  Dtype t = weight ? promote_types(x.dtype(), weight->dtype()) : x.dtype();
  ops::check_float_out(t, "rms_norm");
  Array w = param_or(weight, 1.0, t, x, "weight", "rms_norm");
  return pending(std::make_shared<ops::RMSNorm>(eps), {astype(x, t), w}, x.shape(), t, s,
                 "rms_norm");
}

Array layer_norm(const Array& x, const std::optional<Array>& weight,
                 const std::optional<Array>& bias, float eps, StreamOrDevice s) {
  check_x(x, "layer_norm");
  Dtype t = x.dtype();
  if (weight) t = promote_types(t, weight->dtype());
  if (weight && bias) t = promote_types(t, bias->dtype());
  ops::check_float_out(t, "layer_norm");
  Array w = param_or(weight, 1.0, t, x, "weight", "layer_norm");
  Array b = param_or(bias, 0.0, t, x, "bias", "layer_norm");
  return pending(std::make_shared<ops::LayerNorm>(eps), {astype(x, t), w, b}, x.shape(), t, s,
                 "layer_norm");
}

Array rope(const Array& x, int dims, bool traditional, std::optional<float> base, float scale,
           const Array& offset, const std::optional<Array>& freqs, StreamOrDevice s) {
  check_x(x, "rope");
  if (x.ndim() < 3)
    throw std::invalid_argument(fmt::format(
        "[rope] Input must have at least 3 dimensions but got input with {} dimensions.",
        x.ndim()));
  if (!is_floating(x.dtype()) || x.dtype() == Dtype::complex64)
    throw std::invalid_argument(
        fmt::format("[rope] Input must be a floating type but got {}.", dtype_name(x.dtype())));
  if (offset.ndim() > 1 || (offset.size() != 1 && offset.size() != x.shape()[0]))
    throw std::invalid_argument(
        fmt::format("[rope] offset must be a scalar or vector with {} elements", x.shape()[0]));
  if (!is_integral(offset.dtype()) || offset.dtype() == Dtype::bool_)
    throw std::invalid_argument(fmt::format("[rope] offset must be an integer but got type {}.",
                                            dtype_name(offset.dtype())));
  if (dims <= 0 || dims % 2 != 0)
    throw std::invalid_argument(
        fmt::format("[rope] dims must be positive and even but got {}.", dims));
  if (dims > x.shape().back())
    throw std::invalid_argument(
        fmt::format("[rope] dims must not exceed the input's last dimension ({}) but got {}.",
                    x.shape().back(), dims));
  std::vector<Array> in{x, size_of(offset.dtype()) == 4 ? offset : astype(offset, Dtype::int32)};
  if (freqs) {
    if (base) throw std::invalid_argument("[rope] Only one of base or freqs can have a value.");
    if (freqs->ndim() != 1 || freqs->size() != dims / 2)
      throw std::invalid_argument(
          fmt::format("[rope] freqs must be one dimensional with size {}.", dims / 2));
    in.push_back(astype(*freqs, Dtype::float32));
  } else if (!base) {
    throw std::invalid_argument("[rope] Neither base nor freqs has a value.");
  }
  auto prim = std::make_shared<ops::RoPE>(dims, traditional, base ? *base : 1.0f, scale, true);
  return pending(prim, std::move(in), x.shape(), x.dtype(), s, "rope");
}

Array rope(const Array& x, int dims, bool traditional, std::optional<float> base, float scale,
           int offset, const std::optional<Array>& freqs, StreamOrDevice s) {
  return rope(x, dims, traditional, base, scale, Array(offset), freqs, s);
}

Array scaled_dot_product_attention(const Array& queries, const Array& keys, const Array& values,
                                   float scale, const std::string& mask_mode,
                                   std::optional<Array> mask_arr, const std::optional<Array>& sinks,
                                   StreamOrDevice s) {
  const char* op = "scaled_dot_product_attention";
  for (const Array* a : {&queries, &keys, &values}) {
    if (!a->valid()) throw std::invalid_argument("[scaled_dot_product_attention] empty handle");
    if (a->ndim() != 4)
      throw std::invalid_argument("[scaled_dot_product_attention] input with " +
                                  std::to_string(a->ndim()) + " dimensions expected to be rank 4");
  }
  if (mask_mode != "" && mask_mode != "causal" && mask_mode != "array")
    throw std::invalid_argument("[scaled_dot_product_attention] Invalid mask_mode " + mask_mode +
                                ". mask_mode must be 'causal', 'array' or ''.");
  bool causal = mask_mode == "causal";
  if (causal && mask_arr)
    throw std::invalid_argument(
        "[scaled_dot_product_attention] no mask array may be given with mask_mode 'causal'");
  if (mask_mode == "array" && !mask_arr)
    throw std::invalid_argument("[scaled_dot_product_attention] mask_mode 'array' needs a mask");
  if (mask_arr && mask_arr->ndim() > 4)
    throw std::invalid_argument("[scaled_dot_product_attention] the mask has more than 4 axes");
  const Shape &qs = queries.shape(), &ks = keys.shape(), &vs = values.shape();
  if (ks[0] != qs[0] || vs[0] != qs[0])
    throw std::invalid_argument("[scaled_dot_product_attention] mismatching batch dimension");
  if (qs[3] != ks[3])
    throw std::invalid_argument(
        "[scaled_dot_product_attention] query, keys expected to have matching last dimension");
  if (ks[1] != vs[1] || ks[2] != vs[2])
    throw std::invalid_argument(
        "[scaled_dot_product_attention] keys, values expected to have matching heads and length");
  if (ks[1] == 0 || qs[1] % ks[1] != 0)
    throw std::invalid_argument(
        "[scaled_dot_product_attention] n_heads must be a multiple of n_kv_heads");
  Dtype t = promote_types(promote_types(queries.dtype(), keys.dtype()), values.dtype());
  ops::check_float_out(t, op);
  std::vector<Array> in{astype(queries, t), astype(keys, t), astype(values, t)};
  if (mask_arr) {
    Dtype mt = mask_arr->dtype();
    if (mt != Dtype::bool_ && promote_types(mt, t) != t)
      throw std::invalid_argument(
          "[scaled_dot_product_attention] Mask type must promote to output type " +
          std::string(dtype_name(t)) + ".");
    Array m = mt == Dtype::bool_ ? *mask_arr : astype(*mask_arr, t);
    in.push_back(broadcast_to(m, {qs[0], qs[1], qs[2], ks[2]}));
  }
  if (sinks) {
    if (promote_types(sinks->dtype(), t) != t)
      throw std::invalid_argument(
          "[scaled_dot_product_attention] Type of sinks must promote to output type");
    if (sinks->ndim() != 1 || sinks->shape()[0] != qs[1])
      throw std::invalid_argument(
          "[scaled_dot_product_attention] Received invalid shape for sinks");
    in.push_back(astype(*sinks, t));
  }
  auto prim =
      std::make_shared<ops::ScaledDotProductAttention>(scale, causal, sinks.has_value(), false);
  return pending(prim, std::move(in), {qs[0], qs[1], qs[2], vs[3]}, t, s, op);
}

}  // namespace fast
}  // namespace alloy
