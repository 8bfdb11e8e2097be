// Quantized ops in MLX's affine layout (include/alloy/ops.h: quantize, dequantize,
// quantized_matmul, gather_qmm): generated Metal kernels run through the ops' kernel machinery
// (src/ops/kernels.h), so the same text runs on the CPU and on CUDA. Layout: per group of
// `group_size` consecutive elements along the last axis, w ~ scale * q + bias, q in [0, 2^bits)
// packed little-end-first into uint32 words (32 / bits values per word).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <numeric>
#include <stdexcept>

#include "alloy/errors.h"
#include "alloy/ops.h"
#include "core/array_node.h"
#include "ops/kernels.h"
#include "ops/matmul.h"

namespace alloy {
namespace ops {
namespace {

void check_quant_params(int group_size, int bits, const char* op) {
  if (bits != 4 && bits != 8)
    throw std::invalid_argument(
        fmt::format("[{}] bits must be 4 or 8 (affine mode), got {}", op, bits));
  if (group_size != 32 && group_size != 64 && group_size != 128)
    throw std::invalid_argument(
        fmt::format("[{}] group_size must be 32, 64 or 128, got {}", op, group_size));
}

}  // namespace

// One thread per group: MLX's affine quantization, step for step in float32 (so the codes and
// scales equal MLX's): the edge of larger magnitude maps to q = 0 or 2^bits - 1 exactly.
OpKernel quantize_kernel(Dtype in, int gs, int bits) {
  std::string key = fmt::format("quantize|{}|{}|{}", dtype_name(in), gs, bits);
  return op_kernel(
      key,
      [&] {
        KernelSpec spec;
        spec.name = "alloy_quantize";
        spec.input_names = {"w"};
        spec.output_names = {"wq", "scales", "biases"};
        int nb = (1 << bits) - 1, per = 32 / bits;
        spec.source = fmt::format(
            "  const int GS = {0}, BITS = {1}, PER = {2};\n"
            "  const float NB = {3}.0f;\n"
            "  int64_t g = thread_position_in_grid.x;\n"
            "  int64_t base = g * GS;\n"
            "  float wmax = -INFINITY, wmin = INFINITY;\n"
            "  for (int j = 0; j < GS; ++j) {{\n"
            "    float v = static_cast<float>(w[base + j]);\n"
            "    wmax = metal::max(wmax, v);\n"
            "    wmin = metal::min(wmin, v);\n"
            "  }}\n"
            "  bool mask = metal::abs(wmin) > metal::abs(wmax);\n"
            "  float scale = metal::max((wmax - wmin) / NB, 1e-7f);\n"
            "  scale = mask ? scale : -scale;\n"
            "  float edge = mask ? wmin : wmax;\n"
            "  float q0 = metal::rint(edge / scale);\n"
            "  if (q0 != 0.0f) scale = edge / q0;\n"
            "  float bias = q0 == 0.0f ? 0.0f : edge;\n"
            "  for (int wi = 0; wi < GS / PER; ++wi) {{\n"
            "    uint word = 0;\n"
            "    for (int j = 0; j < PER; ++j) {{\n"
            "      float v = static_cast<float>(w[base + wi * PER + j]);\n"
            "      float q = metal::clamp(metal::rint((v - bias) / scale), 0.0f, NB);\n"
            "      word |= uint(q) << (BITS * j);\n"
            "    }}\n"
            "    wq[g * (GS / PER) + wi] = word;\n"
            "  }}\n"
            "  scales[g] = static_cast<{4}>(scale);\n"
            "  biases[g] = static_cast<{4}>(bias);\n",
            gs, bits, per, nb, tname(in));
        return spec;
      },
      true);
}

// One thread per element of the dequantized matrix.
OpKernel dequantize_kernel(Dtype t, int gs, int bits) {
  std::string key = fmt::format("dequantize|{}|{}|{}", dtype_name(t), gs, bits);
  return op_kernel(
      key,
      [&] {
        KernelSpec spec;
        spec.name = "alloy_dequantize";
        spec.input_names = {"w", "scales", "biases"};
        spec.output_names = {"out"};
        spec.source = fmt::format(
            "  const int GS = {0}, BITS = {1}, PER = 32 / BITS;\n"
            "  const uint MASK = (1u << BITS) - 1u;\n"
            "  int64_t i = thread_position_in_grid.x;\n"
            "  int64_t WC = w_shape[w_ndim - 1], G = scales_shape[scales_ndim - 1];\n"
            "  int64_t C = WC * PER, row = i / C, col = i - row * C;\n"
            "  uint q = (w[row * WC + col / PER] >> (BITS * (col % PER))) & MASK;\n"
            "  float s = static_cast<float>(scales[row * G + col / GS]);\n"
            "  float b = static_cast<float>(biases[row * G + col / GS]);\n"
            "  out[i] = static_cast<{2}>(s * float(q) + b);\n",
            gs, bits, tname(t));
        return spec;
      },
      true);
}

// x @ W(.T) for batches picked by index arrays (gather) or for one matrix (x's rows).
// transpose: a simdgroup per output element; its lanes read consecutive packed words of W's
// row n (coalesced), each word's values combined as s * sum(x q) + b * sum(x), then simd_sum.
// Not transposed: a thread per output element walking the column n of W (adjacent threads read
// the same or adjacent words).
OpKernel qmm_kernel(Dtype x, Dtype t, Dtype out, int gs, int bits, bool transpose, bool gather) {
  std::string key = fmt::format("qmm|{}|{}|{}|{}|{}|{}|{}", dtype_name(x), dtype_name(t),
                                dtype_name(out), gs, bits, transpose, gather);
  return op_kernel(
      key,
      [&] {
        KernelSpec spec;
        spec.name = gather ? "alloy_gather_qmm" : "alloy_quantized_matmul";
        spec.input_names = {"x", "w", "scales", "biases"};
        if (gather) {
          spec.input_names.push_back("lhs");
          spec.input_names.push_back("rhs");
        }
        spec.output_names = {"out"};
        std::string s = fmt::format(
            "  const int GS = {0}, BITS = {1}, PER = 32 / BITS;\n"
            "  const uint MASK = (1u << BITS) - 1u;\n"
            "  int64_t M = x_shape[x_ndim - 2], K = x_shape[x_ndim - 1];\n"
            "  int64_t G = scales_shape[scales_ndim - 1];\n"
            "  int64_t WR = w_shape[w_ndim - 2], WC = w_shape[w_ndim - 1];\n"
            "  int64_t m = thread_position_in_grid.y, b = thread_position_in_grid.z;\n"
            "  int64_t xb = 0, wb = 0;\n",
            gs, bits);
        if (gather)
          s += "  int64_t XB = 1, WB = 1;\n"
               "  for (int d = 0; d < int(x_ndim) - 2; ++d) XB *= x_shape[d];\n"
               "  for (int d = 0; d < int(w_ndim) - 2; ++d) WB *= w_shape[d];\n"
               // Out-of-range indices are clamped (never read outside the arrays).
               "  xb = metal::min(int64_t(lhs[b]), XB - 1);\n"
               "  wb = metal::min(int64_t(rhs[b]), WB - 1);\n";
        if (transpose) {
          s += fmt::format(
              "  int64_t N = WR;\n"
              "  int64_t n = int64_t(thread_position_in_grid.x) / 32;\n"
              "  uint lane = thread_index_in_simdgroup;\n"
              "  int64_t xo = (xb * M + m) * K, wo = (wb * WR + n) * WC, so = (wb * WR + n) * G;\n"
              "  float acc = 0.0f;\n"
              "  for (int64_t kw = lane; kw < WC; kw += 32) {{\n"
              "    uint word = w[wo + kw];\n"
              "    int64_t k0 = kw * PER;\n"
              "    float sc = static_cast<float>(scales[so + k0 / GS]);\n"
              "    float bi = static_cast<float>(biases[so + k0 / GS]);\n"
              "    float qx = 0.0f, sx = 0.0f;\n"
              "    for (int j = 0; j < PER; ++j) {{\n"
              "      float xv = static_cast<float>(x[xo + k0 + j]);\n"
              "      qx += xv * float((word >> (BITS * j)) & MASK);\n"
              "      sx += xv;\n"
              "    }}\n"
              "    acc += sc * qx + bi * sx;\n"
              "  }}\n"
              "  acc = simd_sum(acc);\n"
              "  if (lane == 0) out[(b * M + m) * N + n] = static_cast<{0}>(acc);\n",
              tname(out));
        } else {
          s += fmt::format(
              "  int64_t N = WC * PER;\n"
              "  int64_t n = thread_position_in_grid.x;\n"
              "  int64_t xo = (xb * M + m) * K, wo = wb * WR * WC + n / PER, so = wb * WR * G + n "
              "/ GS;\n"
              "  uint shift = BITS * uint(n % PER);\n"
              "  float acc = 0.0f;\n"
              "  for (int64_t k = 0; k < K; ++k) {{\n"
              "    uint q = (w[wo + k * WC] >> shift) & MASK;\n"
              "    float sc = static_cast<float>(scales[so + k * G]);\n"
              "    float bi = static_cast<float>(biases[so + k * G]);\n"
              "    acc += static_cast<float>(x[xo + k]) * (sc * float(q) + bi);\n"
              "  }}\n"
              "  out[(b * M + m) * N + n] = static_cast<{0}>(acc);\n",
              tname(out));
        }
        spec.source = s;
        return spec;
      },
      true);
}

namespace {

// Primitives ------------------------------------------------------------------------------------

// MLX's fast::AffineQuantize: quantize (one input, three outputs) or dequantize (three inputs).
class AffineQuantize : public OpPrimitive {
 public:
  AffineQuantize(int group_size, int bits, bool dequantize)
      : gs_(group_size), bits_(bits), dequantize_(dequantize) {}
  const char* name() const override { return "AffineQuantize"; }
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override {
    Shape s = inputs.at(0).shape();
    if (dequantize_) {
      s.back() = s.back() * 32 / bits_;
      return {s};
    }
    Shape q = s, g = s;
    q.back() = s.back() * bits_ / 32;
    g.back() = s.back() / gs_;
    return {q, g, g};
  }
  PrimitiveState state() const override {
    PrimitiveState s(1);
    s.set("group_size", static_cast<int64_t>(gs_))
        .set("bits", static_cast<int64_t>(bits_))
        .set("dequantize", dequantize_);
    return s;
  }

 private:
  void eval(const std::vector<Array>& inputs, std::vector<Array>& out, bool gpu) override {
    std::vector<Array> in;
    for (auto& a : inputs) in.push_back(row_contiguous_now(a, gpu));
    if (dequantize_) {
      for (auto& o : out) allocate_output(o);
      if (out[0].size() == 0) return;
      run_kernel_grid(dequantize_kernel(out[0].dtype(), gs_, bits_), in, out, {out[0].size(), 1, 1},
                      gpu ? 256 : 1024, gpu);
      return;
    }
    int64_t groups = in.at(0).size() / gs_;
    if (groups == 0) {
      for (auto& o : out) allocate_output(o);
      return;
    }
    run_kernel_grid(quantize_kernel(in[0].dtype(), gs_, bits_), in, out, {groups, 1, 1},
                    gpu ? 256 : 1024, gpu);
  }
  int gs_, bits_;
  bool dequantize_;
};

// MLX's QuantizedMatmul (x [R, K] rows against one quantized matrix) and GatherQMM (x
// [Bx..., M, K], w [E..., rows, cols], index arrays of B elements: out [B, M, N]).
class QuantizedProduct : public OpPrimitive {
 public:
  QuantizedProduct(bool gather, int group_size, int bits, bool transpose)
      : gather_(gather), gs_(group_size), bits_(bits), transpose_(transpose) {}
  const char* name() const override { return gather_ ? "GatherQMM" : "QuantizedMatmul"; }
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override {
    const Shape &x = inputs.at(0).shape(), &w = inputs.at(1).shape();
    int64_t N = transpose_ ? w[w.size() - 2] : w.back() * 32 / bits_;
    if (!gather_) return {{x[0], N}};
    return {{inputs.at(4).size(), x[x.size() - 2], N}};
  }
  PrimitiveState state() const override {
    PrimitiveState s(1);
    s.set("group_size", static_cast<int64_t>(gs_))
        .set("bits", static_cast<int64_t>(bits_))
        .set("transpose", transpose_);
    return s;
  }
  std::vector<Array> vjp(const std::vector<Array>& primals, const std::vector<Array>& cotangents,
                         const std::vector<int>& argnums, const std::vector<Array>&) override {
    std::vector<Array> out;
    for (int k : argnums) {
      if (k != 0 || gather_)
        throw NotSupported(name(), fmt::format("not supported: the gradient of {} with respect "
                                               "to input {} (only x of QuantizedMatmul)",
                                               name(), k));
      // d(x W^T)/dx = g W: the same product with the other orientation.
      out.push_back(astype(quantized_matmul(cotangents[0], primals[1], primals[2], primals[3],
                                            !transpose_, gs_, bits_),
                           primals[0].dtype()));
    }
    return out;
  }

 private:
  void eval(const std::vector<Array>& inputs, std::vector<Array>& out, bool gpu) override {
    std::vector<Array> in;
    for (auto& a : inputs) in.push_back(row_contiguous_now(a, gpu));
    Array& o = out.at(0);
    if (o.size() == 0) {
      allocate_output(o);
      return;
    }
    const Shape& x = in[0].shape();
    int64_t N = o.shape().back(), M = gather_ ? x[x.size() - 2] : x[0];
    int64_t B = gather_ ? in[4].size() : 1;
    if (transpose_ && M >= kTiledQmmRows && (gpu || tiled_qmm_on_cpu())) {
      // Many rows (prefill): 32 x 32 output tiles sharing each dequantized weight.
      OpKernel t = qmm_tiled_kernel(in[0].dtype(), in[2].dtype(), o.dtype(), gs_, bits_, gather_);
      run_kernel_grid(t, in, out, {256 * ((N + 31) / 32), (M + 31) / 32, B}, 256, gpu);
      return;
    }
    OpKernel k =
        qmm_kernel(in[0].dtype(), in[2].dtype(), o.dtype(), gs_, bits_, transpose_, gather_);
    int64_t gx = transpose_ ? 32 * N : N;
    run_kernel_grid(k, in, out, {gx, M, B}, transpose_ ? 64 : (gpu ? 256 : 1024), gpu);
  }
  bool gather_;
  int gs_, bits_;
  bool transpose_;
};

std::shared_ptr<Primitive> quant_from_state(const PrimitiveState& s, const char* name) {
  if (s.version() != 1)
    throw std::invalid_argument(fmt::format("{} state version must be 1", name));
  int gs = static_cast<int>(s.get_int("group_size")), bits = static_cast<int>(s.get_int("bits"));
  check_quant_params(gs, bits, name);
  if (std::string_view(name) == "AffineQuantize")
    return std::make_shared<AffineQuantize>(gs, bits, s.get_as<bool>("dequantize"));
  return std::make_shared<QuantizedProduct>(std::string_view(name) == "GatherQMM", gs, bits,
                                            s.get_as<bool>("transpose"));
}

ALLOY_REGISTER_PRIMITIVE(AffineQuantize, [](const PrimitiveState& s) {
  return quant_from_state(s, "AffineQuantize");
})
ALLOY_REGISTER_PRIMITIVE(QuantizedMatmul, [](const PrimitiveState& s) {
  return quant_from_state(s, "QuantizedMatmul");
})
ALLOY_REGISTER_PRIMITIVE(GatherQMM,
                         [](const PrimitiveState& s) { return quant_from_state(s, "GatherQMM"); })

// Op helpers ------------------------------------------------------------------------------------

Device pick_device(const Array& a, const StreamOrDevice& s) {
  if (auto* st = std::get_if<Stream>(&s)) return st->device;
  if (auto* d = std::get_if<Device>(&s)) return *d;
  return a.device();
}
Stream pick_stream(Device d, const StreamOrDevice& s) {
  if (auto* st = std::get_if<Stream>(&s)) return *st;
  return default_stream(d);
}
Array to_dev(const Array& a, Device d) {
  return a.device() == d ? a : a.to(d);
}
void check_device(Device d, Dtype t, const char* op) {
  if (d.type == Device::Type::gpu && t == Dtype::float64)
    throw std::invalid_argument(
        fmt::format("[{}] float64 is not supported on the GPU (Metal has no double)", op));
  if (d.type == Device::Type::gpu && !gpu_available())
    throw std::invalid_argument(fmt::format("[{}] no GPU is available", op));
}
std::string shape_str(const Shape& s) {
  return fmt::format("({})", fmt::join(s, ","));
}

// Checks w / scales / biases of a quantized matrix stack; returns (rows, cols) of the
// dequantized matrices as stored (cols unpacked).
std::pair<int64_t, int64_t> check_quantized(const Array& w, const Array& scales,
                                            const Array& biases, int gs, int bits, const char* op) {
  check_quant_params(gs, bits, op);
  if (w.dtype() != Dtype::uint32)
    throw std::invalid_argument(
        fmt::format("[{}] the quantized matrix must be uint32, got {}", op, dtype_name(w.dtype())));
  if (w.ndim() < 2)
    throw std::invalid_argument(
        fmt::format("[{}] the quantized matrix must have at least 2 "
                    "dimensions, got shape {}",
                    op, shape_str(w.shape())));
  if (!is_floating(scales.dtype()) || scales.dtype() == Dtype::complex64 ||
      biases.dtype() != scales.dtype())
    throw std::invalid_argument(
        fmt::format("[{}] scales and biases must have one floating dtype, got {} and {}", op,
                    dtype_name(scales.dtype()), dtype_name(biases.dtype())));
  int64_t cols = w.shape().back() * 32 / bits;
  Shape g = w.shape();
  g.back() = cols / gs;
  if (scales.shape() != g || biases.shape() != g || cols % gs != 0)
    throw std::invalid_argument(fmt::format(
        "[{}] scales and biases of shape {} and {} do not fit a quantized matrix of shape {} "
        "with group_size {} and bits {} (expected {})",
        op, shape_str(scales.shape()), shape_str(biases.shape()), shape_str(w.shape()), gs, bits,
        shape_str(g)));
  return {w.shape()[w.ndim() - 2], cols};
}

}  // namespace
}  // namespace ops

std::vector<Array> quantize(const Array& w, int group_size, int bits, StreamOrDevice s) {
  if (!w.valid()) throw std::invalid_argument("[quantize] an input is an empty handle");
  ops::check_quant_params(group_size, bits, "quantize");
  if (!is_floating(w.dtype()) || w.dtype() == Dtype::complex64)
    throw std::invalid_argument(
        fmt::format("[quantize] only floating arrays can be quantized, "
                    "got {}",
                    dtype_name(w.dtype())));
  if (w.ndim() < 2 || w.shape().back() % group_size != 0)
    throw std::invalid_argument(fmt::format(
        "[quantize] the array must have at least 2 dimensions and a last axis divisible by the "
        "group size {}; got shape {}",
        group_size, ops::shape_str(w.shape())));
  Device d = ops::pick_device(w, s);
  ops::check_device(d, w.dtype(), "quantize");
  Array x = ops::to_dev(w, d).contiguous();
  auto prim = std::make_shared<ops::AffineQuantize>(group_size, bits, false);
  return make_pending(prim, {x}, prim->output_shapes({x}), {Dtype::uint32, w.dtype(), w.dtype()},
                      ops::pick_stream(d, s));
}

Array dequantize(const Array& w, const Array& scales, const Array& biases, int group_size, int bits,
                 StreamOrDevice s) {
  if (!w.valid() || !scales.valid() || !biases.valid())
    throw std::invalid_argument("[dequantize] an input is an empty handle");
  ops::check_quantized(w, scales, biases, group_size, bits, "dequantize");
  Device d = ops::pick_device(w, s);
  ops::check_device(d, scales.dtype(), "dequantize");
  std::vector<Array> in{ops::to_dev(w, d).contiguous(), ops::to_dev(scales, d).contiguous(),
                        ops::to_dev(biases, d).contiguous()};
  auto prim = std::make_shared<ops::AffineQuantize>(group_size, bits, true);
  return make_pending(prim, in, prim->output_shapes(in), {scales.dtype()},
                      ops::pick_stream(d, s))[0];
}

namespace {

Array qmm(const Array& x, const Array& w, const Array& scales, const Array& biases,
          std::optional<Array> lhs, std::optional<Array> rhs, bool transpose, int gs, int bits,
          StreamOrDevice s, const char* op) {
  if (!x.valid() || !w.valid() || !scales.valid() || !biases.valid())
    throw std::invalid_argument(fmt::format("[{}] an input is an empty handle", op));
  auto [rows, cols] = ops::check_quantized(w, scales, biases, gs, bits, op);
  int64_t K = transpose ? cols : rows, N = transpose ? rows : cols;
  if (x.ndim() < 1 || x.shape().back() != K)
    throw std::invalid_argument(fmt::format(
        "[{}] the last dimension of x {} must be {} to multiply the quantized matrix of shape {} "
        "(transpose={})",
        op, ops::shape_str(x.shape()), K, ops::shape_str(w.shape()), transpose));
  Dtype t = promote_types(x.dtype(), scales.dtype());
  if (!is_floating(t) || t == Dtype::complex64)
    throw std::invalid_argument(
        fmt::format("[{}] x must be floating, got {}", op, dtype_name(x.dtype())));
  Device d = ops::pick_device(x, s);
  ops::check_device(d, t, op);
  Stream st = ops::pick_stream(d, s);
  Array xd = ops::to_dev(x, d).contiguous(), wd = ops::to_dev(w, d).contiguous(),
        sd = ops::to_dev(scales, d).contiguous(), bd = ops::to_dev(biases, d).contiguous();
  bool gather = lhs || rhs || w.ndim() > 2 || std::string_view(op) == "gather_qmm";
  if (!gather) {
    // One matrix: every row of x against it.
    Shape out_shape(x.shape().begin(), x.shape().end() - 1);
    out_shape.push_back(N);
    int64_t R = x.size() / std::max<int64_t>(K, 1);
    if (K == 0) return zeros(out_shape, t, d);
    Array x2 = reshape(xd, {R, K});
    auto prim = std::make_shared<ops::QuantizedProduct>(false, gs, bits, transpose);
    std::vector<Array> in{x2, wd, sd, bd};
    Array r = make_pending(prim, in, prim->output_shapes(in), {t}, st)[0];
    return reshape(r, out_shape);
  }
  // Batches: x [xb..., M, K] (a vector x is one row), w [wb..., rows, cols].
  Array x3 = xd.ndim() == 1 ? reshape(xd, {1, K}) : xd;
  Shape xb(x3.shape().begin(), x3.shape().end() - 2), wb(w.shape().begin(), w.shape().end() - 2);
  int64_t M = x3.shape()[x3.ndim() - 2];
  auto arange_of = [&](const Shape& b) {
    int64_t n = std::accumulate(b.begin(), b.end(), int64_t{1}, std::multiplies<>());
    return reshape(arange(n, Dtype::uint32, d), b);
  };
  Array li = lhs ? ops::to_dev(*lhs, d) : arange_of(xb);
  Array ri = rhs ? ops::to_dev(*rhs, d) : arange_of(wb);
  for (const Array* a : {&li, &ri})
    if (!is_integral(a->dtype()) || a->dtype() == Dtype::bool_)
      throw std::invalid_argument(
          fmt::format("[{}] indices must be integers, got {}", op, dtype_name(a->dtype())));
  Shape ib = broadcast_shapes(li.shape(), ri.shape());
  Shape out_shape = ib;
  out_shape.push_back(M);
  out_shape.push_back(N);
  int64_t B = std::accumulate(ib.begin(), ib.end(), int64_t{1}, std::multiplies<>());
  if (K == 0 || B == 0 || M == 0 || N == 0) return zeros(out_shape, t, d);
  Array l = reshape(broadcast_to(astype(li, Dtype::uint32), ib), {B});
  Array r = reshape(broadcast_to(astype(ri, Dtype::uint32), ib), {B});
  auto prim = std::make_shared<ops::QuantizedProduct>(true, gs, bits, transpose);
  std::vector<Array> in{x3, wd, sd, bd, l, r};
  Array out = make_pending(prim, in, prim->output_shapes(in), {t}, st)[0];
  return reshape(out, out_shape);
}

}  // namespace

Array quantized_matmul(const Array& x, const Array& w, const Array& scales, const Array& biases,
                       bool transpose, int group_size, int bits, StreamOrDevice s) {
  if (w.valid() && w.ndim() > 2 && x.valid() && x.ndim() >= 2) {
    // Stacked matrices: batch axes broadcast as matmul's (MLX's quantized_matmul).
    Shape xb(x.shape().begin(), x.shape().end() - 2), wb(w.shape().begin(), w.shape().end() - 2);
    Shape b = broadcast_shapes(xb, wb);
    auto idx = [&](const Shape& own) {
      int64_t n = std::accumulate(own.begin(), own.end(), int64_t{1}, std::multiplies<>());
      Array a = reshape(arange(n, Dtype::uint32), own);
      Shape full(b.size() - own.size(), 1);
      full.insert(full.end(), own.begin(), own.end());
      return broadcast_to(reshape(a, full), b);
    };
    return qmm(x, w, scales, biases, idx(xb), idx(wb), transpose, group_size, bits, s,
               "quantized_matmul");
  }
  return qmm(x, w, scales, biases, std::nullopt, std::nullopt, transpose, group_size, bits, s,
             "quantized_matmul");
}

Array gather_qmm(const Array& x, const Array& w, const Array& scales, const Array& biases,
                 const std::optional<Array>& lhs_indices, const std::optional<Array>& rhs_indices,
                 bool transpose, int group_size, int bits, StreamOrDevice s) {
  return qmm(x, w, scales, biases, lhs_indices, rhs_indices, transpose, group_size, bits, s,
             "gather_qmm");
}

}  // namespace alloy
