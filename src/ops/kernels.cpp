// Generated kernels of the built-in ops (see kernels.h): Metal bodies written per op, dtypes and
// input layouts, with the op's functor (src/ops/functors.cpp) as the kernel's header.
#include "ops/kernels.h"

#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "alloy/errors.h"
#include "core/array_node.h"
#include "kernel/custom_kernel.h"
#include "ops/functors.h"

namespace alloy::ops {

namespace {

std::atomic<bool> g_poison{false};

// What outputs of `t` are filled with before an op kernel runs, under set_poison_outputs.
std::optional<double> poison_value(Dtype t) {
  if (!g_poison) return std::nullopt;
  return is_floating(t) ? std::numeric_limits<double>::quiet_NaN() : 77.0;
}

// The functor texts an op needs (its own after those it calls), after the shared helpers.
void add_functor(std::string& header, const std::string& op) {
  const OpInfo& info = op_info(op);
  std::string needs = info.needs ? info.needs : "";
  std::istringstream in(needs);
  for (std::string dep; in >> dep;) {
    std::string text = op_info(dep).metal;
    if (header.find(text) == std::string::npos) header += text + "\n";
  }
  std::string text = info.metal;
  if (header.find(text) == std::string::npos) header += text + "\n";
}

std::string header_for(const std::vector<std::string>& ops) {
  std::string h(functor_helpers());
  for (auto& op : ops) add_functor(h, op);
  return h;
}

// Generated specs, built once per distinct text.
struct SpecCache {
  std::mutex mu;
  std::unordered_map<std::string, OpKernel> map;
};
SpecCache& spec_cache() {
  static SpecCache* c = new SpecCache;  // lives until exit
  return *c;
}

OpKernel cached_spec(const std::string& cache_key, const std::function<KernelSpec()>& build,
                     bool ensure_row_contiguous = false) {
  auto& c = spec_cache();
  {
    std::lock_guard lock(c.mu);
    auto it = c.map.find(cache_key);
    if (it != c.map.end()) return it->second;
  }
  auto spec = std::make_shared<KernelSpec>(build());
  // Views are read where they are (strided, broadcast) unless the kernel asks for row-major.
  spec->ensure_row_contiguous = ensure_row_contiguous;
  OpKernel k{spec, kernel::spec_content_key(*spec)};
  std::lock_guard lock(c.mu);
  return c.map.emplace(cache_key, std::move(k)).first->second;
}

const char* kInputNames[] = {"a", "b", "c"};

// Metal text converting `x` from `from` to `to`. A complex64 value is true when either part is
// non-zero (MLX, numpy); complex64_t's own conversion to a real type keeps the real part.
std::string convert_expr(const std::string& x, Dtype from, Dtype to) {
  if (from == Dtype::complex64 && to == Dtype::bool_)
    return fmt::format("bool(({}) != complex64_t(0.0f, 0.0f))", x);
  return fmt::format("static_cast<{}>({})", tname(to), x);
}

std::string read_expr(const std::string& name, char layout) {
  switch (layout) {
    case 's':
      return name;
    case 'u':
      return name + "[0]";
    case 'c':
      return name + "[i]";
    default:
      return fmt::format("{0}[elem_to_loc(i, {0}_shape, {0}_strides, {0}_ndim)]", name);
  }
}

// The identity of a reduction in the accumulator's type, as Metal text.
std::string reduce_init(const std::string& op, Dtype acc) {
  if (op == "sum") return "0";
  if (op == "prod") return "1";
  if (op == "all") return "true";
  if (op == "any") return "false";
  bool max = op == "max";
  // complex64 is ordered lexicographically on (real, imag).
  if (acc == Dtype::complex64)
    return max ? "complex64_t(-INFINITY, -INFINITY)" : "complex64_t(INFINITY, INFINITY)";
  if (is_floating(acc)) return max ? "-INFINITY" : "INFINITY";
  switch (acc) {
    case Dtype::bool_:
      return max ? "false" : "true";
    case Dtype::int8:
      return max ? "-128" : "127";
    case Dtype::int16:
      return max ? "-32768" : "32767";
    case Dtype::int32:
      return max ? "(-2147483647 - 1)" : "2147483647";
    case Dtype::int64:
      return max ? "(-9223372036854775807L - 1)" : "9223372036854775807L";
    case Dtype::uint8:
      return max ? "0" : "255";
    case Dtype::uint16:
      return max ? "0" : "65535";
    case Dtype::uint32:
      return max ? "0" : "4294967295u";
    default:
      return max ? "0" : "18446744073709551615ul";
  }
}

std::string reduce_functor(const std::string& op) {
  if (op == "sum") return "add";
  if (op == "prod") return "multiply";
  if (op == "max") return "maximum";
  if (op == "min") return "minimum";
  if (op == "all") return "logical_and";
  if (op == "any") return "logical_or";
  throw std::invalid_argument("unknown reduction '" + op + "'");
}

}  // namespace

std::string reduction_functor(const std::string& op) {
  return reduce_functor(op);
}
std::string reduction_identity(const std::string& op, Dtype acc) {
  return reduce_init(op, acc);
}

OpKernel reduction_kernel(const std::string& key, const std::string& op, Dtype acc,
                          const std::string& suffix,
                          const std::function<std::string(const ReductionText&)>& source) {
  return op_kernel(key, [&] {
    KernelSpec spec;
    spec.name = "alloy_" + op + "_" + suffix;
    spec.input_names = {"x"};
    spec.output_names = {"out"};
    std::string f = reduction_functor(op);
    spec.header = functor_header({f});
    spec.source = source({f + "_functor()", tname(acc), reduction_identity(op, acc)});
    return spec;
  });
}
std::string functor_header(const std::vector<std::string>& functors) {
  return header_for(functors);
}

OpKernel op_kernel(const std::string& cache_key, const std::function<KernelSpec()>& build,
                   bool ensure_row_contiguous) {
  return cached_spec((ensure_row_contiguous ? "rc|" : "") + cache_key, build,
                     ensure_row_contiguous);
}

void set_poison_outputs(bool on) {
  g_poison = on;
}

char input_layout(const Array& a, const Shape& out_shape) {
  if (a.ndim() == 0) return 's';
  bool all_zero = true;
  for (auto s : a.strides()) all_zero &= s == 0;
  if (all_zero && a.size() > 0) return 'u';
  if (a.shape() == out_shape && a.is_row_contiguous()) return 'c';
  return 'g';
}

OpKernel elementwise_kernel(const ElementwiseKernel& k, const std::vector<Array>& inputs,
                            const Shape& out_shape) {
  std::string layouts, key = "ew|" + k.op + "|";
  for (size_t j = 0; j < inputs.size(); ++j) {
    layouts += input_layout(inputs[j], out_shape);
    key += fmt::format("{}:{}:{}:{},", dtype_name(inputs[j].dtype()), dtype_name(k.via[j]),
                       dtype_name(k.compute[j]), layouts.back());
  }
  key += dtype_name(k.out);
  return cached_spec(key, [&] {
    KernelSpec spec;
    spec.name = "alloy_" + k.op;
    for (size_t j = 0; j < inputs.size(); ++j) spec.input_names.push_back(kInputNames[j]);
    spec.output_names = {"out"};
    spec.header = header_for({k.op});
    std::string args;
    for (size_t j = 0; j < inputs.size(); ++j) {
      if (j) args += ", ";
      std::string x = read_expr(kInputNames[j], layouts[j]);
      Dtype from = inputs[j].dtype();
      if (k.via[j] != from && k.via[j] != k.compute[j]) {
        x = convert_expr(x, from, k.via[j]);
        from = k.via[j];
      }
      args += convert_expr(x, from, k.compute[j]);
    }
    spec.source = fmt::format(
        "  uint i = thread_position_in_grid.x;\n"
        "  out[i] = static_cast<{}>({}_functor()({}));\n",
        tname(k.out), k.op, args);
    return spec;
  });
}

OpKernel reduce_kernel(const ReduceKernel& k, const Array& x) {
  int nd = x.ndim(), nred = static_cast<int>(k.axes.size());
  bool arg = k.op == "argmax" || k.op == "argmin";
  // Row-contiguous input reduced over its trailing axes: one contiguous run per output.
  bool trailing = x.is_row_contiguous() && !arg;
  for (int j = 0; j < nred; ++j) trailing &= k.axes[j] == nd - nred + j;
  std::string key =
      fmt::format("red|{}|{}|{}|{}|{}|{}|{}", k.op, dtype_name(x.dtype()), dtype_name(k.acc),
                  dtype_name(k.out), nd, fmt::join(k.axes, ","), trailing ? 'c' : 'g');
  return cached_spec(key, [&] {
    KernelSpec spec;
    spec.name = "alloy_" + k.op;
    spec.input_names = {"x"};
    spec.output_names = {"out"};
    std::string acc = tname(k.acc), out = tname(k.out);
    std::string s = "  uint o = thread_position_in_grid.x;\n";
    if (arg) {
      spec.header = header_for({});
      int ax = k.axes.at(0);
      s += "  int64_t base = 0;\n  uint64_t rem = o;\n";
      for (int d = nd - 1; d >= 0; --d)
        if (d != ax)
          s += fmt::format(
              "  {{ uint64_t n = uint64_t(x_shape[{0}]); base += int64_t(rem % n) * "
              "x_strides[{0}]; rem /= n; }}\n",
              d);
      std::string cmp = k.op == "argmax" ? ">" : "<";
      std::string better =
          is_floating(k.acc) && k.acc != Dtype::complex64
              ? fmt::format("v {} best || (metal::isnan(v) && !metal::isnan(best))", cmp)
              : fmt::format("v {} best", cmp);
      s += fmt::format(
          "  int64_t n = x_shape[{0}], st = x_strides[{0}];\n"
          "  {1} best = static_cast<{1}>(x[base]);\n"
          "  uint bi = 0;\n"
          "  for (int64_t r = 1; r < n; ++r) {{\n"
          "    {1} v = static_cast<{1}>(x[base + r * st]);\n"
          "    if ({2}) {{ best = v; bi = uint(r); }}\n"
          "  }}\n"
          "  out[o] = bi;\n",
          ax, acc, better);
      spec.source = s;
      return spec;
    }
    std::string f = reduce_functor(k.op);
    spec.header = header_for({f});
    std::string init = reduce_init(k.op, k.acc);
    std::string F = f + "_functor()";
    if (trailing) {
      // Eight independent accumulators for floats: the host compiler turns them into vector
      // lanes. Integer accumulators use one: g++ 12's loop vectoriser miscompiles the
      // eight-accumulator form for them (sums came out halved; reproduced outside Alloy's code
      // with the same source and -O2 -march=native, fixed by -fno-tree-loop-vectorize), and
      // integer reductions vectorise as a plain reduction anyway.
      s += fmt::format(
          "  int64_t n = 1;\n"
          "  for (int d = {0}; d < {1}; ++d) n *= x_shape[d];\n"
          "  int64_t base = int64_t(o) * n;\n",
          nd - nred, nd);
      if (is_floating(k.acc)) {
        s += fmt::format(
            "  {0} a0 = {1}, a1 = {1}, a2 = {1}, a3 = {1}, a4 = {1}, a5 = {1}, a6 = {1}, "
            "a7 = {1};\n",
            acc, init);
        s += "  int64_t r = 0;\n  for (; r + 8 <= n; r += 8) {\n";
        for (int j = 0; j < 8; ++j)
          s += fmt::format("    a{0} = {1}(a{0}, static_cast<{2}>(x[base + r + {0}]));\n", j, F,
                           acc);
        s += "  }\n";
        s += fmt::format("  for (; r < n; ++r) a0 = {0}(a0, static_cast<{1}>(x[base + r]));\n", F,
                         acc);
        s += fmt::format(
            "  a0 = {0}({0}({0}(a0, a1), {0}(a2, a3)), {0}({0}(a4, a5), {0}(a6, a7)));\n", F);
      } else {
        s += fmt::format("  {} a0 = {};\n", acc, init);
        s += fmt::format(
            "  for (int64_t r = 0; r < n; ++r) a0 = {0}(a0, static_cast<{1}>(x[base + r]));\n", F,
            acc);
      }
    } else {
      s += "  int64_t base = 0;\n  uint64_t rem = o;\n";
      auto reduced = [&](int d) {
        return std::find(k.axes.begin(), k.axes.end(), d) != k.axes.end();
      };
      for (int d = nd - 1; d >= 0; --d)
        if (!reduced(d))
          s += fmt::format(
              "  {{ uint64_t n = uint64_t(x_shape[{0}]); base += int64_t(rem % n) * "
              "x_strides[{0}]; rem /= n; }}\n",
              d);
      s += fmt::format("  {} a0 = {};\n", acc, init);
      std::string index = "base";
      for (int j = 0; j < nred; ++j) {
        s += fmt::format("  for (int64_t r{0} = 0; r{0} < x_shape[{1}]; ++r{0})\n", j, k.axes[j]);
        index += fmt::format(" + r{} * x_strides[{}]", j, k.axes[j]);
      }
      s += fmt::format("    a0 = {}(a0, static_cast<{}>(x[{}]));\n", F, acc, index);
    }
    s += fmt::format("  out[o] = static_cast<{}>(a0);\n", out);
    spec.source = s;
    return spec;
  });
}

OpKernel column_pass_kernel(const std::string& op, Dtype in, Dtype acc, Dtype out) {
  std::string key = fmt::format("col|{}|{}|{}|{}|{}", op, dtype_name(in), dtype_name(acc),
                                dtype_name(out), kColumnPassRows);
  return reduction_kernel(key, op, acc, "columns", [&](const ReductionText& text) {
    return fmt::format(
        "  int64_t c = thread_position_in_grid.x, p = thread_position_in_grid.y;\n"
        "  int64_t R = x_shape[0], C = x_shape[1], r0 = p * {0};\n"
        "  {1} a = {2};\n"
        // Branch-free over a constant count (rows past the end re-read the last row and are
        // not accumulated), so the thread loop vectorises.
        "  for (int k = 0; k < {0}; ++k) {{\n"
        "    int64_t r = r0 + k;\n"
        "    {1} v = static_cast<{1}>(x[(r < R ? r : R - 1) * C + c]);\n"
        "    a = r < R ? {3}(a, v) : a;\n"
        "  }}\n"
        "  out[p * C + c] = static_cast<{4}>(a);\n",
        kColumnPassRows, text.A, text.I, text.F, tname(out));
  });
}

OpKernel row_chunk_kernel(const std::string& op, Dtype in, Dtype acc) {
  std::string key =
      fmt::format("rowchunk|{}|{}|{}|{}", op, dtype_name(in), dtype_name(acc), kRowChunk);
  return reduction_kernel(key, op, acc, "chunks", [&](const ReductionText& text) {
    const std::string &F = text.F, &a = text.A;
    std::string s = fmt::format(
        "  int64_t q = thread_position_in_grid.x, o = thread_position_in_grid.y;\n"
        "  int64_t n = x_shape[1], chunks = (n + {0} - 1) / {0};\n"
        "  int64_t base = o * n, r = q * {0}, end = min(n, r + {0});\n"
        "  {1} a0 = {2}, a1 = {2}, a2 = {2}, a3 = {2}, a4 = {2}, a5 = {2}, a6 = {2}, a7 = {2};\n",
        kRowChunk, a, text.I);
    if (is_floating(acc)) {  // eight accumulators for floats only (see reduce_kernel)
      s += "  for (; r + 8 <= end; r += 8) {\n";
      for (int j = 0; j < 8; ++j)
        s += fmt::format("    a{0} = {1}(a{0}, static_cast<{2}>(x[base + r + {0}]));\n", j, F, a);
      s += "  }\n";
    }
    s += fmt::format("  for (; r < end; ++r) a0 = {0}(a0, static_cast<{1}>(x[base + r]));\n", F, a);
    if (is_floating(acc))
      s += fmt::format(
          "  a0 = {0}({0}({0}(a0, a1), {0}(a2, a3)), {0}({0}(a4, a5), {0}(a6, a7)));\n", F);
    s += "  out[o * chunks + q] = a0;\n";
    return s;
  });
}

OpKernel concatenate_kernel(int n, Dtype t, int axis, int ndim) {
  std::string key = fmt::format("cat|{}|{}|{}|{}", n, dtype_name(t), axis, ndim);
  return cached_spec(key, [&] {
    KernelSpec spec;
    spec.name = "alloy_concatenate";
    for (int j = 0; j < n; ++j) spec.input_names.push_back(fmt::format("a{}", j));
    spec.output_names = {"out"};
    spec.header = header_for({});
    std::string s = fmt::format(
        "  uint i = thread_position_in_grid.x;\n"
        "  int64_t inner = 1;\n"
        "  for (int d = {0} + 1; d < {1}; ++d) inner *= a0_shape[d];\n",
        axis, ndim);
    s += "  int64_t total = 0";
    for (int j = 0; j < n; ++j) s += fmt::format(" + a{}_shape[{}]", j, axis);
    s += ";\n";
    s += "  int64_t rest = int64_t(i) % inner, pos = (int64_t(i) / inner) % total, outer = "
         "int64_t(i) / inner / total;\n";
    for (int j = 0; j < n; ++j)
      s += fmt::format(
          "  if (pos < a{0}_shape[{1}]) {{\n"
          "    out[i] = a{0}[elem_to_loc((outer * a{0}_shape[{1}] + pos) * inner + rest, "
          "a{0}_shape, a{0}_strides, a{0}_ndim)];\n"
          "    return;\n"
          "  }}\n"
          "  pos -= a{0}_shape[{1}];\n",
          j, axis);
    spec.source = s;
    return spec;
  });
}

KernelCall kernel_call(const Shape& out_shape, Dtype out_dtype, int64_t threads, bool gpu,
                       int64_t rows) {
  if (threads > std::numeric_limits<int32_t>::max() || rows > std::numeric_limits<int32_t>::max())
    throw NotSupported("alloy ops",
                       fmt::format("not supported: an op over {} elements (at most 2^31 - 1 "
                                   "threads per op for now)",
                                   threads));
  KernelCall call;
  call.output_shapes = {out_shape};
  call.output_dtypes = {out_dtype};
  call.grid = {static_cast<int>(threads), static_cast<int>(rows), 1};
  // CPU: a threadgroup is one vectorised loop; 1024 threads amortize its setup. CUDA: 256.
  call.threadgroup = {gpu ? 256 : 1024, 1, 1};
  call.init_value = poison_value(out_dtype);
  return call;
}

void launch_op_kernel(const OpKernel& k, const std::vector<Array>& inputs,
                      std::vector<Array>& outputs, std::array<int64_t, 3> grid,
                      std::array<int64_t, 3> threadgroup, bool gpu) {
  std::vector<Dtype> dtypes;
  std::vector<std::vector<ShapeExpr>> shapes;
  for (auto& o : outputs) {
    dtypes.push_back(o.dtype());
    shapes.emplace_back(o.shape().begin(), o.shape().end());
  }
  auto dims = [](const std::array<int64_t, 3>& d) {
    return DimsExpr{ShapeExpr(d[0]), ShapeExpr(d[1]), ShapeExpr(d[2])};
  };
  kernel::CustomKernel ck(k.spec, std::move(dtypes), {}, dims(grid), dims(threadgroup),
                          std::move(shapes), poison_value(outputs.at(0).dtype()), k.key);
  if (gpu)
    ck.eval_gpu(inputs, outputs);
  else
    ck.eval_cpu(inputs, outputs);
}

void run_kernel(const OpKernel& k, const std::vector<Array>& inputs, std::vector<Array>& outputs,
                int64_t threads, bool gpu, int64_t rows) {
  KernelCall call = kernel_call(outputs.at(0).shape(), outputs[0].dtype(), threads, gpu, rows);
  launch_op_kernel(k, inputs, outputs, {call.grid[0], call.grid[1], 1}, {call.threadgroup[0], 1, 1},
                   gpu);
}

void run_kernel_grid(const OpKernel& k, const std::vector<Array>& inputs,
                     std::vector<Array>& outputs, std::array<int64_t, 3> grid, int threadgroup,
                     bool gpu) {
  for (int64_t g : grid)
    if (g > std::numeric_limits<int32_t>::max())
      throw NotSupported("alloy ops", fmt::format("not supported: an op grid of {} threads along "
                                                  "one axis (at most 2^31 - 1 for now)",
                                                  g));
  launch_op_kernel(k, inputs, outputs, grid, {threadgroup, 1, 1}, gpu);
}

Array scratch(const Shape& shape, Dtype dtype, Device device) {
  auto n = std::make_shared<ArrayNode>();
  n->dtype = dtype;
  n->shape = shape;
  n->strides = row_major_strides(shape);
  n->device = device;
  return array_of(std::move(n));
}

}  // namespace alloy::ops
