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

// The cross-thread part every cooperative kernel shares: combine `a0` over the simdgroup with
// shuffles (every lane ends with the result), then, when a row has several simdgroups, over them
// through threadgroup memory. Opens a block in which `a0` is the row's result; `write` is true
// in the one thread that writes it.
std::string tree_combine(const std::string& acc, const std::string& F, const std::string& init,
                         const RowLayout& lay) {
  std::string s = fmt::format(
      "  for (ushort o = 16; o > 0; o >>= 1) a0 = {0}(a0, simd_shuffle_xor(a0, o));\n", F);
  if (lay.threads == 32) return s + "  {\n    bool write = tid == 0;\n";
  return s + fmt::format(
                 "  threadgroup {0} part[{3}];\n"
                 "  uint sg = simdgroup_index_in_threadgroup;\n"
                 "  uint lane = thread_index_in_simdgroup;\n"
                 "  if (lane == 0) part[sg] = a0;\n"
                 "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
                 "  if (sg == 0) {{\n"
                 "    a0 = lane < {3} ? part[lane] : {2};\n"
                 "    for (ushort o = 16; o > 0; o >>= 1) a0 = {1}(a0, simd_shuffle_xor(a0, o));\n"
                 "    bool write = lane == 0;\n",
                 acc, F, init, lay.threads / 32);
}

// The row a thread works on and its place in it, for `lay` (constants baked into the kernel):
// declares tid (index in the row's threads), row, and returns early past the last row. Every
// thread of a row returns together (a row's threads are whole simdgroups), so the barriers
// after it see all of a row's threads.
std::string row_prologue(const RowLayout& lay, const std::string& nrows) {
  return fmt::format(
      "  typedef {0} I;\n"
      "  const uint T = {1}, R = {2};\n"
      "  uint lid = thread_position_in_threadgroup.x;\n"
      "  uint tid = lid % T;\n"
      // Groups of rows along y and z (CUDA allows at most 65,535 threadgroups along y).
      "  I row = (I(threadgroup_position_in_grid.y) +\n"
      "           I(threadgroup_position_in_grid.z) * I(threadgroups_per_grid.y)) * R + lid / T;\n"
      "  if (row >= I({3})) return;\n",
      lay.wide ? "int64_t" : "uint", lay.threads, lay.rows, nrows);
}

}  // namespace

void set_cooperative_rows_on_cpu(bool on) {
  g_coop_cpu = on;
}
bool cooperative_rows_on_cpu() {
  return g_coop_cpu;
}

RowLayout row_layout(int64_t rows, int64_t len) {
  RowLayout l;
  while (l.threads < 256 && int64_t(l.threads) * 32 < len) l.threads *= 2;
  l.rows = l.threads == 32 ? 8 : 1;
  l.wide = rows * len >= (int64_t(1) << 31) - 4096;
  return l;
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

OpKernel row_reduce_kernel(const std::string& op, Dtype in, Dtype acc, Dtype out, RowLayout lay) {
  std::string key = fmt::format("rowcoop|{}|{}|{}|{}|{}|{}|{}", op, dtype_name(in), dtype_name(acc),
                                dtype_name(out), lay.threads, lay.rows, lay.wide);
  return reduction_kernel(key, op, acc, "rows", [&](const ReductionText& text) {
    const std::string &F = text.F, &A = text.A, &I = text.I;
    std::string s = row_prologue(lay, "x_shape[0]");
    s += fmt::format(
        "  I p = threadgroup_position_in_grid.x;\n"
        "  I P = threadgroups_per_grid.x;\n"
        "  I L = x_shape[1];\n"
        "  I chunk = (L + P - 1) / P;\n"
        "  I lo = p * chunk;\n"
        "  I hi = metal::min(L, lo + chunk);\n"
        "  const device {3}* xr = x + row * L;\n"
        "  {0} a0 = {1}, a1 = {1}, a2 = {1}, a3 = {1};\n"
        "  I i = lo + tid;\n"
        // Four loads in flight per thread, adjacent threads on adjacent elements.
        "  for (; i + 3 * T < hi; i += 4 * T) {{\n"
        "    a0 = {2}(a0, static_cast<{0}>(xr[i]));\n"
        "    a1 = {2}(a1, static_cast<{0}>(xr[i + T]));\n"
        "    a2 = {2}(a2, static_cast<{0}>(xr[i + 2 * T]));\n"
        "    a3 = {2}(a3, static_cast<{0}>(xr[i + 3 * T]));\n"
        "  }}\n"
        "  for (; i < hi; i += T) a0 = {2}(a0, static_cast<{0}>(xr[i]));\n"
        "  a0 = {2}({2}(a0, a1), {2}(a2, a3));\n",
        A, I, F, tname(in));
    s += tree_combine(A, F, I, lay);
    s += fmt::format("    if (write) out[row * P + p] = static_cast<{}>(a0);\n  }}\n", tname(out));
    return s;
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
  RowLayout lay = row_layout(N, L);
  // Few long rows: split each into pieces on separate threadgroups (about 32K elements each, at
  // most 1024 pieces), then reduce the pieces' results per row.
  int64_t pieces = 1;
  if (N < 1024 && L > 65536) pieces = std::min<int64_t>(1024, (L + 32767) / 32768);
  if (pieces > 1) {
    lay.rows = 1;  // (pieces of one row along x)
    std::vector<Array> partial{scratch({N, pieces}, acc, x.device())};
    run_kernel_grid(row_reduce_kernel(op, x.dtype(), acc, acc, lay), {x}, partial,
                    row_grid(int64_t(lay.threads) * pieces, N), lay.threads, gpu);
    RowLayout lay2 = row_layout(N, pieces);
    run_kernel_grid(row_reduce_kernel(op, acc, acc, out, lay2), partial, outputs,
                    row_grid(int64_t(lay2.threads) * lay2.rows, (N + lay2.rows - 1) / lay2.rows),
                    lay2.threads * lay2.rows, gpu);
    return;
  }
  run_kernel_grid(row_reduce_kernel(op, x.dtype(), acc, out, lay), {x}, outputs,
                  row_grid(int64_t(lay.threads) * lay.rows, (N + lay.rows - 1) / lay.rows),
                  lay.threads * lay.rows, gpu);
}

OpKernel row_softmax_kernel(bool log, Dtype in, Dtype compute, Dtype out, bool cooperative,
                            RowLayout lay) {
  std::string key =
      fmt::format("rowsoftmax|{}|{}|{}|{}|{}|{}|{}|{}", log, dtype_name(in), dtype_name(compute),
                  dtype_name(out), cooperative, lay.threads, lay.rows, lay.wide);
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
          std::string combine = fmt::format(
              "    for (ushort o = 16; o > 0; o >>= 1) {{\n"
              "      {0} m2 = simd_shuffle_xor(m, o), s2 = simd_shuffle_xor(s, o);\n"
              "      {0} mm = metal::max(m, m2);\n"
              "      s = (m == mm ? s : s * metal::exp(m - mm)) + (m2 == mm ? s2 : s2 * "
              "metal::exp(m2 - mm));\n"
              "      m = mm;\n"
              "    }}\n",
              C);
          s = "  int64_t x_rows = 1;\n  for (int d = 0; d + 1 < x_ndim; ++d) x_rows *= "
              "x_shape[d];\n" +
              row_prologue(lay, "x_rows");
          s += fmt::format(
              "  I L = x_shape[x_ndim - 1];\n"
              "  const device {1}* xr = x + row * L;\n"
              "  {0} m = -INFINITY;\n"
              "  {0} s = 0;\n",
              C, tname(in));
          if (!log) {
            // Rows of at most 32 elements per thread stay in registers: the outputs are
            // computed without reading the row again (a second pass from memory cost 0.77x
            // torch on an H100 in float32). Per thread: the maximum, then the sum.
            s += fmt::format(
                "  {0} v_[32];\n"
                "  bool cached = L <= I(32 * T);\n"
                "  if (cached) {{\n"
                "    for (uint j = 0; j < 32; ++j) {{\n"
                "      I i = tid + I(j) * T;\n"
                "      v_[j] = i < L ? static_cast<{0}>(xr[i]) : {0}(0);\n"
                "      if (i < L) m = metal::max(m, v_[j]);\n"
                "    }}\n"
                "    for (uint j = 0; j < 32; ++j)\n"
                "      if (tid + I(j) * T < L) s += v_[j] == m ? {0}(1) : metal::exp(v_[j] - m);\n"
                "  }} else\n",
                C);
          }
          s += fmt::format(
              "  for (I i = tid; i < L; i += T) {{\n"
              "    {0} v = static_cast<{0}>(xr[i]);\n"
              "    if (v > m) {{ s = (m == -INFINITY ? {0}(0) : s * metal::exp(m - v)) + {0}(1); "
              "m = v; }}\n"
              "    else s += v == m ? {0}(1) : metal::exp(v - m);\n"
              "  }}\n"
              "  {{\n",
              C);
          s += combine;
          s += "  }\n";
          if (lay.threads > 32) {
            s += fmt::format(
                "  threadgroup {0} pm[{1}], ps[{1}];\n"
                "  uint sg = simdgroup_index_in_threadgroup;\n"
                "  uint lane = thread_index_in_simdgroup;\n"
                "  if (lane == 0) {{ pm[sg] = m; ps[sg] = s; }}\n"
                "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
                "  if (sg == 0) {{\n"
                "    m = lane < {1} ? pm[lane] : {0}(-INFINITY);\n"
                "    s = lane < {1} ? ps[lane] : {0}(0);\n",
                C, lay.threads / 32);
            s += combine;
            s += "    if (lane == 0) { pm[0] = m; ps[0] = s; }\n"
                 "  }\n"
                 "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
                 "  m = pm[0];\n"
                 "  s = ps[0];\n";
          }
          if (log)
            s +=
                fmt::format("  if (tid == 0) out[row] = static_cast<{0}>(m + metal::log(s));\n", O);
          else
            s += fmt::format(
                "  device {1}* orow = out + row * L;\n"
                "  if (cached) {{\n"
                "    for (uint j = 0; j < 32; ++j) {{\n"
                "      I i = tid + I(j) * T;\n"
                "      if (i < L) orow[i] = static_cast<{1}>(metal::exp(v_[j] - m) / s);\n"
                "    }}\n"
                "  }} else {{\n"
                "    for (I i = tid; i < L; i += T)\n"
                "      orow[i] = static_cast<{1}>(metal::exp(static_cast<{0}>(xr[i]) - m) / s);\n"
                "  }}\n",
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
  if (coop) {
    RowLayout lay = row_layout(N, L);
    OpKernel k = row_softmax_kernel(log_, x.dtype(), compute, out.dtype(), true, lay);
    run_kernel_grid(k, inputs, outputs,
                    row_grid(int64_t(lay.threads) * lay.rows, (N + lay.rows - 1) / lay.rows),
                    lay.threads * lay.rows, gpu);
  } else {
    OpKernel k = row_softmax_kernel(log_, x.dtype(), compute, out.dtype(), false);
    run_kernel_grid(k, inputs, outputs, {N, 1, 1}, 64, gpu);
  }
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
