// matmul (include/alloy/ops.h) and its Matmul primitive: the op does MLX's checks, promotion,
// 1-D promotion and batch broadcasting; evaluation hands each batch of matrices to the backend's
// BLAS (Backend::gemm, src/core/blas.h) where they are, reading transposed views as transposed
// operands, and copies only inputs whose matrices have no unit stride.
#include "ops/matmul.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <stdexcept>

#include "alloy/errors.h"
#include "alloy/ops.h"
#include "core/array_node.h"
#include "core/backend.h"
#include "core/blas.h"
#include "core/primitives.h"

namespace alloy {
namespace ops {
namespace {

// How BLAS reads the [R, C] matrices of `x` (its last two axes).
struct MatLayout {
  bool ok = false, trans = false;
  int64_t ld = 0;
};

MatLayout mat_layout(const Array& x) {
  int nd = x.ndim();
  int64_t R = x.shape()[nd - 2], C = x.shape()[nd - 1];
  int64_t sr = x.strides()[nd - 2], sc = x.strides()[nd - 1];
  MatLayout l;
  // Row-major rows: element (r, p) at r * ld + p.
  if ((sc == 1 || C <= 1) && (R <= 1 || sr >= std::max<int64_t>(C, 1))) {
    l.ok = true;
    l.ld = R <= 1 ? std::max<int64_t>(C, 1) : sr;
    return l;
  }
  // Stored transposed: element (r, p) at p * ld + r.
  if ((sr == 1 || R <= 1) && (C <= 1 || sc >= std::max<int64_t>(R, 1))) {
    l.ok = l.trans = true;
    l.ld = C <= 1 ? std::max<int64_t>(R, 1) : sc;
    return l;
  }
  return l;
}

// Element offsets of each batch matrix of `x` (row-major order over the batch axes).
std::vector<int64_t> batch_offsets(const Shape& shape, const Strides& strides) {
  int nb = static_cast<int>(shape.size()) - 2;
  int64_t count = 1;
  for (int d = 0; d < nb; ++d) count *= shape[d];
  std::vector<int64_t> off(count);
  for (int64_t i = 0; i < count; ++i) {
    int64_t rem = i, o = 0;
    for (int d = nb - 1; d >= 0; --d) {
      o += (rem % shape[d]) * strides[d];
      rem /= shape[d];
    }
    off[i] = o;
  }
  return off;
}

// A BLAS operand: the array where it is, or a row-major copy (converted to `t`) in `keep`.
struct Operand {
  const void* data = nullptr;
  MatLayout layout;
  std::vector<int64_t> off;
};

Operand operand(const Array& x, Dtype t, std::vector<std::shared_ptr<Buffer>>& keep) {
  Operand o;
  o.layout = mat_layout(x);
  if (o.layout.ok && x.dtype() == t) {
    o.data = node_of(x)->data();
    o.off = batch_offsets(x.shape(), x.strides());
    return o;
  }
  Device d = x.device();
  auto buf = allocate(d, static_cast<size_t>(x.size()) * size_of(t));
  backend(d).copy_strided(node_of(x)->data(), x.shape(), x.strides(), x.dtype(), buf->ptr, t);
  keep.push_back(buf);
  o.data = buf->ptr;
  int nd = x.ndim();
  o.layout = {true, false, std::max<int64_t>(x.shape()[nd - 1], 1)};
  o.off = batch_offsets(x.shape(), row_major_strides(x.shape()));
  return o;
}

void matmul_eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) {
  const Array &a = inputs.at(0), &b = inputs.at(1);
  Array& out = outputs.at(0);
  allocate_output(out);
  if (out.size() == 0) return;
  int nd = a.ndim();
  int64_t M = a.shape()[nd - 2], K = a.shape()[nd - 1], N = b.shape()[nd - 1];
  void* c = node_of(out)->data();
  if (K == 0) {                                         // an empty sum: zeros
    backend(out.device()).fill(c, out.nbytes(), 0, 1);  // bytes: any size
    return;
  }
  Dtype t = out.dtype();
  // The CPU's BLAS has float32 and float64; half and bfloat compute in float32 there.
  Dtype bt = !gpu && (t == Dtype::float16 || t == Dtype::bfloat16) ? Dtype::float32 : t;
  std::vector<std::shared_ptr<Buffer>> keep;
  Operand oa = operand(a, bt, keep), ob = operand(b, bt, keep);
  blas::Gemm g;
  g.dtype = bt;
  g.m = M;
  g.n = N;
  g.k = K;
  g.trans_a = oa.layout.trans;
  g.trans_b = ob.layout.trans;
  g.lda = oa.layout.ld;
  g.ldb = ob.layout.ld;
  g.a = oa.data;
  g.b = ob.data;
  g.off_a = std::move(oa.off);
  g.off_b = std::move(ob.off);
  Backend& be = backend(out.device());
  if (bt == t) {
    g.c = c;
    be.gemm(g);
    return;
  }
  auto tmp = allocate(Device::cpu(), static_cast<size_t>(out.size()) * size_of(bt));
  g.c = tmp->ptr;
  be.gemm(g);
  copy_convert_host(tmp->ptr, out.shape(), row_major_strides(out.shape()), bt, c, t);
}

}  // namespace

Array row_contiguous_now(const Array& x, bool gpu) {
  if (x.is_row_contiguous()) return x;
  Array c = make_empty(x.shape(), x.dtype(), x.device());
  if (x.size() == 0) return c;
  backend(x.device())
      .copy_strided(node_of(x)->data(), x.shape(), x.strides(), x.dtype(), node_of(c)->data(),
                    x.dtype());
  return c;
}

void Matmul::eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) {
  matmul_eval(inputs, outputs, gpu);
}

std::vector<Shape> Matmul::output_shapes(const std::vector<Array>& inputs) const {
  const Shape &a = inputs.at(0).shape(), &b = inputs.at(1).shape();
  if (a.size() < 2 || a.size() != b.size() || a[a.size() - 1] != b[b.size() - 2] ||
      !std::equal(a.begin(), a.end() - 2, b.begin()))
    throw std::invalid_argument(
        fmt::format("Matmul: inputs of shapes ({}) and ({}) are not [batch..., M, K] and "
                    "[batch..., K, N]",
                    fmt::join(a, ","), fmt::join(b, ",")));
  Shape s = a;
  s.back() = b.back();
  return {s};
}

std::vector<Array> Matmul::vjp(const std::vector<Array>& primals,
                               const std::vector<Array>& cotangents,
                               const std::vector<int>& argnums, const std::vector<Array>&) {
  const Array& g = cotangents.at(0);
  // The adjoint of the other factor (MLX's rule: for complex64 the conjugate transpose).
  auto adjoint = [](const Array& x) {
    Array t = swapaxes(x, -1, -2);
    return x.dtype() == Dtype::complex64 ? conjugate(t) : t;
  };
  std::vector<Array> out;
  for (int k : argnums) {
    if (k == 0)
      out.push_back(matmul(g, adjoint(primals[1])));
    else
      out.push_back(matmul(adjoint(primals[0]), g));
  }
  return out;
}

std::vector<Array> Matmul::jvp(const std::vector<Array>& primals,
                               const std::vector<Array>& tangents,
                               const std::vector<int>& argnums) {
  Array t;
  for (size_t i = 0; i < argnums.size(); ++i) {
    Array term =
        argnums[i] == 0 ? matmul(tangents[i], primals[1]) : matmul(primals[0], tangents[i]);
    t = t.valid() ? add(t, term) : term;
  }
  return {t};
}

ALLOY_REGISTER_PRIMITIVE(Matmul, [](const PrimitiveState& s) {
  if (s.version() != 1) throw std::invalid_argument("Matmul state version must be 1");
  return std::make_shared<Matmul>();
})

}  // namespace ops

Array matmul(const Array& a, const Array& b, StreamOrDevice s) {
  if (!a.valid() || !b.valid()) throw std::invalid_argument("[matmul] an input is an empty handle");
  if (a.ndim() == 0 || b.ndim() == 0)
    throw std::invalid_argument(
        "[matmul] Got 0 dimension input. Inputs must have at least one dimension.");
  Dtype t = promote_types(a.dtype(), b.dtype());
  if (!is_floating(t) && t != Dtype::complex64)
    throw std::invalid_argument(
        fmt::format("[matmul] Only inexact types are supported but {} and {} were provided which "
                    "results in {}, which is not a floating point type.",
                    dtype_name(a.dtype()), dtype_name(b.dtype()), dtype_name(t)));
  std::optional<Device> dev;
  if (auto* st = std::get_if<Stream>(&s)) dev = st->device;
  if (auto* d = std::get_if<Device>(&s)) dev = *d;
  Device d = dev ? *dev : a.device();
  if (d.type == Device::Type::gpu && t == Dtype::float64)
    throw std::invalid_argument(
        "[matmul] float64 is not supported on the GPU (Metal has no double)");
  if (d.type == Device::Type::gpu && !gpu_available())
    throw std::invalid_argument("[matmul] no GPU is available");
  Array x = a.device() == d ? a : a.to(d), y = b.device() == d ? b : b.to(d);
  bool vec_a = x.ndim() == 1, vec_b = y.ndim() == 1;
  if (vec_a) x = reshape(x, {1, x.shape()[0]});
  if (vec_b) y = reshape(y, {y.shape()[0], 1});
  int64_t K = x.shape().back();
  if (K != y.shape()[y.ndim() - 2])
    throw std::invalid_argument(fmt::format(
        "[matmul] Last dimension of first input with shape ({}) must match second to last "
        "dimension of second input with shape ({}).",
        fmt::join(x.shape(), ","), fmt::join(y.shape(), ",")));
  Shape bx(x.shape().begin(), x.shape().end() - 2), by(y.shape().begin(), y.shape().end() - 2);
  Shape batch = broadcast_shapes(bx, by);
  Shape sx = batch, sy = batch;
  sx.insert(sx.end(), x.shape().end() - 2, x.shape().end());
  sy.insert(sy.end(), y.shape().end() - 2, y.shape().end());
  if (x.dtype() != t) x = astype(x, t, s);
  if (y.dtype() != t) y = astype(y, t, s);
  if (x.shape() != sx) x = broadcast_to(x, sx);
  if (y.shape() != sy) y = broadcast_to(y, sy);
  auto prim = std::make_shared<ops::Matmul>();
  Stream st = std::holds_alternative<Stream>(s) ? std::get<Stream>(s) : default_stream(d);
  Array r = make_pending(prim, {x, y}, prim->output_shapes({x, y}), {t}, st)[0];
  if (vec_a || vec_b) {
    Shape rs(batch);
    if (!vec_a) rs.push_back(sx[sx.size() - 2]);
    if (!vec_b) rs.push_back(sy.back());
    r = reshape(r, rs);
  }
  return r;
}

std::string blas_library(Device device) {
  if (device.type == Device::Type::gpu && !gpu_available())
    throw std::invalid_argument("[blas_library] no GPU is available");
  return backend(device).blas_library();
}

}  // namespace alloy
