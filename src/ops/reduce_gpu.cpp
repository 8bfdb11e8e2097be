// Cooperative row reductions and the fused softmax / logsumexp (see reduce_rows.h).
#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <stdexcept>

#include "alloy/errors.h"
#include "alloy/ops.h"
#include "core/array_node.h"
#include "ops/matmul.h"
#include "ops/reduce_rows.h"

namespace alloy::ops {
namespace {

std::atomic<bool> g_coop_cpu{false};

std::string tname(Dtype t) {
  return std::string(msl_type_name(t));
}

// An unallocated row-major output for an intermediate pass (the kernel allocates it).
Array scratch(const Shape& shape, Dtype dtype, Device device) {
  auto n = std::make_shared<ArrayNode>();
  n->dtype = dtype;
  n->shape = shape;
  n->strides = row_major_strides(shape);
  n->device = device;
  return array_of(std::move(n));
}

// The cross-thread part every cooperative kernel shares: combine `a` over the simdgroup with
// shuffles, then over the threadgroup's simdgroups through threadgroup memory; simdgroup 0 ends
// with the threadgroup's result in `a`.
std::string tree_combine(const std::string& acc, const std::string& F, const std::string& init) {
  return fmt::format(
      "  for (ushort o = 16; o > 0; o >>= 1) a0 = {1}(a0, simd_shuffle_xor(a0, o));\n"
      "  threadgroup {0} part[32];\n"
      "  uint sg = simdgroup_index_in_threadgroup;\n"
      "  uint lane = thread_index_in_simdgroup;\n"
      "  uint nsg = (TPG + 31) / 32;\n"
      "  if (lane == 0) part[sg] = a0;\n"
      "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
      "  if (sg == 0) {{\n"
      "    a0 = lane < nsg ? part[lane] : {2};\n"
      "    for (ushort o = 16; o > 0; o >>= 1) a0 = {1}(a0, simd_shuffle_xor(a0, o));\n",
      acc, F, init);
}

}  // namespace

void set_cooperative_rows_on_cpu(bool on) {
  g_coop_cpu = on;
}
bool cooperative_rows_on_cpu() {
  return g_coop_cpu;
}

int row_threads(int64_t len) {
  int t = 32;
  while (t < 1024 && int64_t(t) * 8 < len) t *= 2;  // about eight elements per thread
  return t;
}

bool row_reduce_supported(const std::string& op, Dtype acc) {
  if (op != "sum" && op != "prod" && op != "max" && op != "min") return false;
  switch (acc) {
    case Dtype::int32:
    case Dtype::uint32:
    case Dtype::int64:
    case Dtype::uint64:
    case Dtype::float32:
    case Dtype::float64:
      return true;
    default:
      return false;
  }
}

OpKernel row_reduce_kernel(const std::string& op, Dtype in, Dtype acc, Dtype out) {
  std::string key =
      fmt::format("rowcoop|{}|{}|{}|{}", op, dtype_name(in), dtype_name(acc), dtype_name(out));
  return op_kernel(key, [&] {
    KernelSpec spec;
    spec.name = "alloy_" + op + "_rows";
    spec.input_names = {"x"};
    spec.output_names = {"out"};
    std::string f = reduction_functor(op), F = f + "_functor()", A = tname(acc);
    std::string I = reduction_identity(op, acc);
    spec.header = functor_header({f});
    std::string s = fmt::format(
        "  uint tid = thread_position_in_threadgroup.x;\n"
        "  uint TPG = threads_per_threadgroup.x;\n"
        "  int64_t p = threadgroup_position_in_grid.x;\n"
        "  int64_t P = threadgroups_per_grid.x;\n"
        // Rows along y and z (CUDA allows at most 65,535 threadgroups along y).
        "  int64_t row = threadgroup_position_in_grid.y +\n"
        "                int64_t(threadgroup_position_in_grid.z) * threadgroups_per_grid.y;\n"
        "  if (row >= x_shape[0]) return;\n"
        "  int64_t L = x_shape[1];\n"
        "  int64_t chunk = (L + P - 1) / P;\n"
        "  int64_t lo = p * chunk;\n"
        "  int64_t hi = metal::min(L, lo + chunk);\n"
        "  int64_t base = row * L;\n"
        "  {0} a0 = {1};\n"
        "  {0} a1 = {1}, a2 = {1}, a3 = {1};\n"
        "  int64_t i = lo + tid;\n"
        // Four loads in flight per thread, adjacent threads on adjacent elements.
        "  for (; i + 3 * int64_t(TPG) < hi; i += 4 * int64_t(TPG)) {{\n"
        "    a0 = {2}(a0, static_cast<{0}>(x[base + i]));\n"
        "    a1 = {2}(a1, static_cast<{0}>(x[base + i + TPG]));\n"
        "    a2 = {2}(a2, static_cast<{0}>(x[base + i + 2 * TPG]));\n"
        "    a3 = {2}(a3, static_cast<{0}>(x[base + i + 3 * TPG]));\n"
        "  }}\n"
        "  for (; i < hi; i += TPG) a0 = {2}(a0, static_cast<{0}>(x[base + i]));\n"
        "  a0 = {2}({2}(a0, a1), {2}(a2, a3));\n",
        A, I, F);
    s += tree_combine(A, F, I);
    s += fmt::format("    if (lane == 0) out[row * P + p] = static_cast<{}>(a0);\n  }}\n",
                     tname(out));
    spec.source = s;
    return spec;
  });
}

namespace {
// The grid of a kernel with one threadgroup (of x threads) per row: rows along y, and along z
// past CUDA's 65,535 threadgroups along y (the kernels skip rows past the last).
std::array<int64_t, 3> row_grid(int64_t x, int64_t rows) {
  constexpr int64_t kMaxY = 65535;
  return {x, std::min(rows, kMaxY), (rows + kMaxY - 1) / kMaxY};
}
}  // namespace

void reduce_rows(const std::string& op, const Array& x, Dtype acc, std::vector<Array>& outputs,
                 bool gpu) {
  int64_t N = x.shape()[0], L = x.shape()[1];
  Dtype out = outputs.at(0).dtype();
  int T = row_threads(L);
  // Few long rows: split each into pieces on separate threadgroups (about 64K elements each, at
  // most 1024 pieces), then reduce the pieces' results per row.
  int64_t pieces = 1;
  if (N < 1024 && L > 65536) pieces = std::min<int64_t>(1024, (L + 65535) / 65536);
  if (pieces > 1) {
    std::vector<Array> partial{scratch({N, pieces}, acc, x.device())};
    run_kernel_grid(row_reduce_kernel(op, x.dtype(), acc, acc), {x}, partial,
                    row_grid(int64_t(T) * pieces, N), T, gpu);
    int T2 = row_threads(pieces);
    run_kernel_grid(row_reduce_kernel(op, acc, acc, out), partial, outputs, row_grid(T2, N), T2,
                    gpu);
    return;
  }
  run_kernel_grid(row_reduce_kernel(op, x.dtype(), acc, out), {x}, outputs, row_grid(T, N), T, gpu);
}

OpKernel row_softmax_kernel(bool log, Dtype in, Dtype compute, Dtype out, bool cooperative) {
  std::string key = fmt::format("rowsoftmax|{}|{}|{}|{}|{}", log, dtype_name(in),
                                dtype_name(compute), dtype_name(out), cooperative);
  return op_kernel(
      key,
      [&] {
        KernelSpec spec;
        spec.name = log ? "alloy_logsumexp_rows" : "alloy_softmax_rows";
        spec.input_names = {"x"};
        spec.output_names = {"out"};
        spec.header = functor_header({});
        std::string C = tname(compute), O = tname(out);
        std::string s;
        if (cooperative) {
          // Each thread keeps a running (max m, sum s of exp(x - m)); pairs combine as
          // m = max(m1, m2), s = s1 exp(m1 - m) + s2 exp(m2 - m). A term whose max is the
          // combined one (also +-inf) keeps its sum as is, so infinities give no inf - inf.
          s = fmt::format(
              "  uint tid = thread_position_in_threadgroup.x;\n"
              "  uint TPG = threads_per_threadgroup.x;\n"
              "  int64_t row = threadgroup_position_in_grid.y +\n"
              "                int64_t(threadgroup_position_in_grid.z) * threadgroups_per_grid.y;\n"
              "  int64_t L = x_shape[x_ndim - 1];\n"
              "  int64_t rows = 1;\n"
              "  for (int d = 0; d + 1 < x_ndim; ++d) rows *= x_shape[d];\n"
              "  if (row >= rows) return;\n"
              "  int64_t base = row * L;\n"
              "  {0} m = -INFINITY;\n"
              "  {0} s = 0;\n"
              "  for (int64_t i = tid; i < L; i += TPG) {{\n"
              "    {0} v = static_cast<{0}>(x[base + i]);\n"
              "    if (v > m) {{ s = (m == -INFINITY ? {0}(0) : s * metal::exp(m - v)) + {0}(1); "
              "m = v; }}\n"
              "    else s += v == m ? {0}(1) : metal::exp(v - m);\n"
              "  }}\n"
              "  for (ushort o = 16; o > 0; o >>= 1) {{\n"
              "    {0} m2 = simd_shuffle_xor(m, o), s2 = simd_shuffle_xor(s, o);\n"
              "    {0} mm = metal::max(m, m2);\n"
              "    s = (m == mm ? s : s * metal::exp(m - mm)) + (m2 == mm ? s2 : s2 * "
              "metal::exp(m2 - mm));\n"
              "    m = mm;\n"
              "  }}\n"
              "  threadgroup {0} pm[32], ps[32];\n"
              "  uint sg = simdgroup_index_in_threadgroup;\n"
              "  uint lane = thread_index_in_simdgroup;\n"
              "  uint nsg = (TPG + 31) / 32;\n"
              "  if (lane == 0) {{ pm[sg] = m; ps[sg] = s; }}\n"
              "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
              "  if (sg == 0) {{\n"
              "    m = lane < nsg ? pm[lane] : {0}(-INFINITY);\n"
              "    s = lane < nsg ? ps[lane] : {0}(0);\n"
              "    for (ushort o = 16; o > 0; o >>= 1) {{\n"
              "      {0} m2 = simd_shuffle_xor(m, o), s2 = simd_shuffle_xor(s, o);\n"
              "      {0} mm = metal::max(m, m2);\n"
              "      s = (m == mm ? s : s * metal::exp(m - mm)) + (m2 == mm ? s2 : s2 * "
              "metal::exp(m2 - mm));\n"
              "      m = mm;\n"
              "    }}\n"
              "    if (lane == 0) {{ pm[0] = m; ps[0] = s; }}\n"
              "  }}\n"
              "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
              "  m = pm[0];\n"
              "  s = ps[0];\n",
              C);
          if (log)
            s +=
                fmt::format("  if (tid == 0) out[row] = static_cast<{0}>(m + metal::log(s));\n", O);
          else
            s += fmt::format(
                "  for (int64_t i = tid; i < L; i += TPG)\n"
                "    out[base + i] = static_cast<{1}>(metal::exp(static_cast<{0}>(x[base + i]) - "
                "m) / s);\n",
                C, O);
        } else {
          // One thread per row: the maximum (eight accumulators, vector lanes on the CPU), the
          // sum of exponentials, then the outputs.
          s = fmt::format(
              "  int64_t row = thread_position_in_grid.x;\n"
              "  int64_t L = x_shape[x_ndim - 1];\n"
              "  int64_t base = row * L;\n"
              "  {0} m0 = -INFINITY, m1 = m0, m2 = m0, m3 = m0, m4 = m0, m5 = m0, m6 = m0, m7 = "
              "m0;\n"
              "  int64_t i = 0;\n"
              "  for (; i + 8 <= L; i += 8) {{\n"
              "    m0 = maximum_functor()(m0, static_cast<{0}>(x[base + i]));\n"
              "    m1 = maximum_functor()(m1, static_cast<{0}>(x[base + i + 1]));\n"
              "    m2 = maximum_functor()(m2, static_cast<{0}>(x[base + i + 2]));\n"
              "    m3 = maximum_functor()(m3, static_cast<{0}>(x[base + i + 3]));\n"
              "    m4 = maximum_functor()(m4, static_cast<{0}>(x[base + i + 4]));\n"
              "    m5 = maximum_functor()(m5, static_cast<{0}>(x[base + i + 5]));\n"
              "    m6 = maximum_functor()(m6, static_cast<{0}>(x[base + i + 6]));\n"
              "    m7 = maximum_functor()(m7, static_cast<{0}>(x[base + i + 7]));\n"
              "  }}\n"
              "  for (; i < L; ++i) m0 = maximum_functor()(m0, static_cast<{0}>(x[base + i]));\n"
              "  {0} m = maximum_functor()(maximum_functor()(maximum_functor()(m0, m1), "
              "maximum_functor()(m2, m3)), maximum_functor()(maximum_functor()(m4, m5), "
              "maximum_functor()(m6, m7)));\n",
              C);
          // logsumexp does not subtract an infinite maximum (exp(x - inf) is NaN), as the
          // composed form.
          s += fmt::format(
              "  {0} sh = {1};\n"
              "  {0} s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;\n"
              "  for (i = 0; i + 8 <= L; i += 8) {{\n"
              "    s0 += metal::exp(static_cast<{0}>(x[base + i]) - sh);\n"
              "    s1 += metal::exp(static_cast<{0}>(x[base + i + 1]) - sh);\n"
              "    s2 += metal::exp(static_cast<{0}>(x[base + i + 2]) - sh);\n"
              "    s3 += metal::exp(static_cast<{0}>(x[base + i + 3]) - sh);\n"
              "    s4 += metal::exp(static_cast<{0}>(x[base + i + 4]) - sh);\n"
              "    s5 += metal::exp(static_cast<{0}>(x[base + i + 5]) - sh);\n"
              "    s6 += metal::exp(static_cast<{0}>(x[base + i + 6]) - sh);\n"
              "    s7 += metal::exp(static_cast<{0}>(x[base + i + 7]) - sh);\n"
              "  }}\n"
              "  for (; i < L; ++i) s0 += metal::exp(static_cast<{0}>(x[base + i]) - sh);\n"
              "  {0} s = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));\n",
              C, log ? "metal::isinf(m) ? " + C + "(0) : m" : "m");
          if (log)
            s += fmt::format("  out[row] = static_cast<{}>(metal::log(s) + sh);\n", O);
          else
            s += fmt::format(
                "  for (i = 0; i < L; ++i)\n"
                "    out[base + i] = static_cast<{1}>(metal::exp(static_cast<{0}>(x[base + i]) - "
                "m) / s);\n",
                C, O);
          spec.header = functor_header({"maximum"});
        }
        spec.source = s;
        return spec;
      },
      true);
}

// ---- RowSoftmax --------------------------------------------------------------------------------

std::vector<Shape> RowSoftmax::output_shapes(const std::vector<Array>& inputs) const {
  Shape s = inputs.at(0).shape();
  if (s.empty()) throw std::invalid_argument(std::string(name()) + ": a 0-d input");
  if (log_) s.back() = 1;
  return {s};
}

PrimitiveState RowSoftmax::state() const {
  PrimitiveState s(1);
  s.set("precise", precise_);
  return s;
}

std::vector<Array> RowSoftmax::vjp(const std::vector<Array>& primals,
                                   const std::vector<Array>& cotangents, const std::vector<int>&,
                                   const std::vector<Array>& outputs) {
  const Array &x = primals.at(0), &g = cotangents.at(0), &y = outputs.at(0);
  if (log_) return {multiply(g, exp(subtract(x, y)))};  // g * softmax(x)
  return {multiply(y, subtract(g, sum(multiply(g, y), -1, true)))};
}

std::vector<Array> RowSoftmax::jvp(const std::vector<Array>& primals,
                                   const std::vector<Array>& tangents, const std::vector<int>&) {
  const Array &x = primals.at(0), &t = tangents.at(0);
  Array sm = row_softmax(x, false, precise_, x.device());
  if (log_) return {sum(multiply(t, sm), -1, true)};
  return {multiply(sm, subtract(t, sum(multiply(t, sm), -1, true)))};
}

void RowSoftmax::eval(const std::vector<Array>& in, std::vector<Array>& outputs, bool gpu) {
  std::vector<Array> inputs{row_contiguous_now(in.at(0), gpu)};
  const Array& x = inputs[0];
  Array& out = outputs.at(0);
  int64_t L = x.shape().back();
  if (out.size() == 0 || L == 0) {
    // Empty rows are handled by the op (logsumexp of nothing is -inf); nothing to compute.
    allocate_output(out);
    return;
  }
  int64_t N = x.size() / L;
  Dtype compute = x.dtype() == Dtype::float64 ? Dtype::float64 : Dtype::float32;
  bool coop = gpu || g_coop_cpu;
  OpKernel k = row_softmax_kernel(log_, x.dtype(), compute, out.dtype(), coop);
  if (coop) {
    int T = row_threads(L);
    run_kernel_grid(k, inputs, outputs, row_grid(T, N), T, gpu);
  } else {
    run_kernel_grid(k, inputs, outputs, {N, 1, 1}, 64, gpu);
  }
}

void RowSoftmax::eval_cpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) {
  eval(inputs, outputs, false);
}

void RowSoftmax::eval_gpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) {
  eval(inputs, outputs, true);
}

Array row_softmax(const Array& x, bool log, bool precise, StreamOrDevice s) {
  auto prim = std::make_shared<RowSoftmax>(log, precise);
  Device d = x.device();
  Stream st = default_stream(d);
  if (auto* p = std::get_if<Stream>(&s)) st = *p;
  Array xc = x.contiguous();
  return make_pending(prim, {xc}, prim->output_shapes({xc}), {x.dtype()}, st)[0];
}

ALLOY_REGISTER_PRIMITIVE(Softmax, [](const PrimitiveState& s) {
  if (s.version() != 1) throw std::invalid_argument("Softmax state version must be 1");
  return std::make_shared<RowSoftmax>(false, s.get_as<bool>("precise"));
})
ALLOY_REGISTER_PRIMITIVE(LogSumExp, [](const PrimitiveState& s) {
  if (s.version() != 1) throw std::invalid_argument("LogSumExp state version must be 1");
  return std::make_shared<RowSoftmax>(true, s.get_as<bool>("precise"));
})

}  // namespace alloy::ops
