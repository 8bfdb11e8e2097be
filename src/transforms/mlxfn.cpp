// Reader of MLX's `.mlxfn` files (mx.export_function, MLX 0.32): an undocumented little-endian
// stream without magic. Facts from MLX's mlx/export.cpp (read, not copied), checked against
// files written by mlx 0.32.4 (docs/export.md):
//   header   string version, int32 function count, bool shapeless, string metadata
//   function vector<string> keyword names, vector<u64> input ids, vector<(shape, dtype)> inputs,
//            vector<u64> output ids, u64 tape length, tape entries
//   entry    u64 id, bool has_primitive;
//            primitive: vector<u64> input ids, stream (int32 index, int32 device type, int32
//              device index), string name, the primitive's own state (no length: each
//              primitive has its own layout), u64 sibling count, then either (shape, dtype) or
//              (vector<u64> ids, vector<shape>, vector<dtype>);
//            else bool constant: constant (when its id was not seen) shape, dtype, raw bytes;
//              else a function input.
//   string = u64 length + bytes; vector = u64 count + elements; shape = vector<int32>;
//   dtype = int32 value + uint8 size; bool = 1 byte.
// Every count and length is checked against the bytes left, so a hostile file cannot ask for a
// large allocation; the state of an unknown primitive cannot be skipped, so it ends the import
// with an error naming the primitive.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <unordered_map>

#include "alloy/errors.h"
#include "alloy/ops.h"
#include "core/array_node.h"
#include "core/primitives.h"
#include "kernel/custom_kernel.h"
#include "ops/fast_primitives.h"
#include "ops/functors.h"
#include "ops/matmul.h"
#include "ops/misc_primitives.h"
#include "ops/primitives.h"
#include "ops/reduce_rows.h"
#include "transforms/export_impl.h"
#include "transforms/kernel_spec.h"

namespace alloy::transforms {

namespace {

[[noreturn]] void bad(const std::string& what) {
  throw std::invalid_argument("import_function: bad .mlxfn file: " + what);
}

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  size_t left() const { return n_ - pos_; }
  void need(uint64_t bytes, const char* what) {
    if (bytes > left())
      bad(fmt::format("truncated ({} needs {} bytes, {} left)", what, bytes, left()));
  }
  template <class T>
  T num(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
    pos_ += sizeof(T);
    return v;
  }
  bool boolean(const char* what) {
    uint8_t b = num<uint8_t>(what);
    if (b > 1) bad(fmt::format("{} is not a bool ({})", what, b));
    return b;
  }
  // An element count, bounded by the bytes left (each element takes at least `min_bytes`).
  uint64_t count(const char* what, size_t min_bytes) {
    uint64_t c = num<uint64_t>(what);
    if (min_bytes > 0 && c > left() / min_bytes)
      bad(fmt::format("{} count {} exceeds what the file can hold", what, c));
    return c;
  }
  std::string str(const char* what) {
    uint64_t len = count(what, 1);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return s;
  }
  const uint8_t* bytes(uint64_t n, const char* what) {
    need(n, what);
    const uint8_t* b = p_ + pos_;
    pos_ += n;
    return b;
  }
  std::vector<int32_t> ints(const char* what) {
    uint64_t c = count(what, 4);
    std::vector<int32_t> v(c);
    for (auto& x : v) x = num<int32_t>(what);
    return v;
  }
  Shape shape(const char* what) {
    Shape s;
    for (int32_t d : ints(what)) s.push_back(d);
    checked_numel(s);
    return s;
  }
  std::vector<uint64_t> ids(const char* what) {
    uint64_t c = count(what, 8);
    std::vector<uint64_t> v(c);
    for (auto& x : v) x = num<uint64_t>(what);
    return v;
  }
  Dtype dtype() {
    // MLX's Dtype::Val order.
    static constexpr Dtype kMlx[] = {
        Dtype::bool_,   Dtype::uint8,   Dtype::uint16,   Dtype::uint32,   Dtype::uint64,
        Dtype::int8,    Dtype::int16,   Dtype::int32,    Dtype::int64,    Dtype::float16,
        Dtype::float32, Dtype::float64, Dtype::bfloat16, Dtype::complex64};
    int32_t v = num<int32_t>("dtype");
    uint8_t size = num<uint8_t>("dtype size");
    if (v < 0 || v >= static_cast<int32_t>(std::size(kMlx)))
      bad(fmt::format("unknown dtype {}", v));
    Dtype d = kMlx[v];
    if (size != size_of(d))
      bad(fmt::format("dtype {} with size {}", dtype_name(d), static_cast<int>(size)));
    return d;
  }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
};

// What an MLX tape entry's primitive becomes, once its outputs are known.
struct OpTypes {
  const std::vector<Shape>& in_shapes;
  const std::vector<Dtype>& in_dtypes;
  const std::vector<Shape>& out_shapes;
  const std::vector<Dtype>& out_dtypes;
  // A row may reorder MLX's inputs for Alloy's primitive (Alloy's input k is MLX's order[k]),
  // or, returning nullptr, make the entry a constant (an input-free primitive such as Arange).
  std::vector<size_t>& order;
  std::optional<TapeConstant>& constant;
};
using Maker = std::function<std::shared_ptr<Primitive>(const OpTypes&)>;
// Reads an MLX primitive's state (right after its name) and says how to build Alloy's.
using StateReader = std::function<Maker(Reader&)>;

std::vector<int64_t> widen(const std::vector<int32_t>& v) {
  return {v.begin(), v.end()};
}

// A reshape to the recorded output shape: MLX's shape-changing views whose state is given in
// axes (ExpandDims, Squeeze, Flatten, Unflatten). Exact at the traced shapes; a shapeless call
// with other shapes raises Reshape's element-count error instead of computing garbage.
Maker reshape_to_output() {
  return [](const OpTypes& t) { return std::make_shared<Reshape>(t.out_shapes.at(0)); };
}

// Alloy's elementwise op `op` for an MLX elementwise primitive. MLX's ops promote and broadcast
// before they make the primitive, so its inputs share a dtype; the output dtype Alloy computes
// for them must be the one MLX recorded (e.g. MLX's Divide of integers, from floor_divide, is an
// integer division: Alloy's divide is not, so it is refused rather than computed differently).
Maker elementwise(std::string op) {
  return [op](const OpTypes& t) -> std::shared_ptr<Primitive> {
    const ops::OpInfo& info = ops::op_info(op);
    if (t.in_dtypes.size() != static_cast<size_t>(info.arity))
      bad(fmt::format("MLX primitive {} has {} inputs, expected {}", info.primitive,
                      t.in_dtypes.size(), info.arity));
    Dtype out = ops::plan_elementwise(info, t.in_dtypes).out;
    if (t.out_dtypes.size() != 1 || out != t.out_dtypes[0])
      throw NotSupported(info.primitive,
                         fmt::format("not supported: MLX's {} of {} gives {}; Alloy's {} gives {}",
                                     info.primitive, dtype_name(t.in_dtypes[0]),
                                     t.out_dtypes.empty() ? "nothing" : dtype_name(t.out_dtypes[0]),
                                     op, dtype_name(out)));
    return std::make_shared<ops::Elementwise>(op);
  };
}

// An MLX enum field (serialized as int32) as one of `names`, in the enum's order.
std::string enum_field(Reader& r, const char* what, std::initializer_list<const char*> names) {
  int32_t v = r.num<int32_t>(what);
  if (v < 0 || v >= static_cast<int32_t>(names.size())) bad(fmt::format("{} {}", what, v));
  return names.begin()[v];
}

// The MLX primitive name -> Alloy table (docs/export.md). To map another primitive, add a row:
// read exactly the fields MLX's state() serializes, in order, and build the Alloy primitive.
const std::map<std::string, StateReader>& mlx_table() {
  static const std::map<std::string, StateReader> table = [] {
    std::map<std::string, StateReader> t = {
        {"Slice",
         [](Reader& r) -> Maker {
           auto start = widen(r.ints("Slice start")), stop = widen(r.ints("Slice stop")),
                step = widen(r.ints("Slice strides"));
           return [=](const OpTypes&) { return std::make_shared<SliceView>(start, stop, step); };
         }},
        {"Transpose",
         [](Reader& r) -> Maker {
           auto axes = widen(r.ints("Transpose axes"));
           return [=](const OpTypes&) { return std::make_shared<Transpose>(axes); };
         }},
        {"Reshape",
         [](Reader& r) -> Maker {
           r.ints("Reshape shape");  // as given (may hold -1): the traced output shape is exact
           return reshape_to_output();
         }},
        {"Broadcast",
         [](Reader& r) -> Maker {
           auto shape = r.shape("Broadcast shape");
           return [=](const OpTypes&) { return std::make_shared<Broadcast>(shape); };
         }},
        {"AsStrided",
         [](Reader& r) -> Maker {
           Shape shape = r.shape("AsStrided shape");
           uint64_t n = r.count("AsStrided strides", 8);
           Strides strides(n);
           for (auto& s : strides) s = r.num<int64_t>("AsStrided strides");
           uint64_t offset = r.num<uint64_t>("AsStrided offset");
           if (offset > INT64_MAX) bad("AsStrided offset out of range");
           return [=](const OpTypes&) {
             return std::make_shared<AsStrided>(shape, strides, static_cast<int64_t>(offset));
           };
         }},
        {"AsType",
         [](Reader& r) -> Maker {
           Dtype d = r.dtype();
           return [=](const OpTypes&) { return std::make_shared<AsType>(d); };
         }},
        {"Copy",
         [](Reader&) -> Maker { return [](const OpTypes&) { return std::make_shared<Copy>(); }; }},
        {"StopGradient",
         [](Reader&) -> Maker { return [](const OpTypes&) { return std::make_shared<Copy>(); }; }},
        {"ExpandDims",
         [](Reader& r) -> Maker {
           r.ints("ExpandDims axes");
           return reshape_to_output();
         }},
        {"Squeeze",
         [](Reader& r) -> Maker {
           r.ints("Squeeze axes");
           return reshape_to_output();
         }},
        {"Flatten",
         [](Reader& r) -> Maker {
           r.num<int32_t>("Flatten start");
           r.num<int32_t>("Flatten end");
           return reshape_to_output();
         }},
        {"Unflatten",
         [](Reader& r) -> Maker {
           r.num<int32_t>("Unflatten axis");
           r.shape("Unflatten shape");
           return reshape_to_output();
         }},
        {"CustomKernel",
         [](Reader& r) -> Maker {
           std::string name = r.str("CustomKernel name");
           std::string source = r.str("CustomKernel source");
           Dims grid, tg;
           for (auto& g : grid) g = r.num<int32_t>("CustomKernel grid");
           for (auto& g : tg) g = r.num<int32_t>("CustomKernel threadgroup");
           uint64_t n_info = r.count("CustomKernel shape infos", 3);
           for (uint64_t i = 0; i < 3 * n_info; ++i) r.boolean("CustomKernel shape info");
           bool contiguous = r.boolean("CustomKernel ensure_row_contiguous");
           std::optional<double> init;
           if (r.boolean("CustomKernel init_value")) init = r.num<float>("CustomKernel init_value");
           uint64_t n_scalars = r.count("CustomKernel scalar arguments", 5);
           bool precompiled = r.boolean("CustomKernel is_precompiled");
           int32_t shared = r.num<int32_t>("CustomKernel shared_memory");
           int32_t math = r.num<int32_t>("CustomKernel compile options");
           if (n_scalars > 0 || precompiled || shared != 0)
             throw NotSupported(name, "not supported: MLX kernel '" + name +
                                          "' is a precompiled kernel (scalar arguments, shared "
                                          "memory); only mx.fast.metal_kernel kernels import");
           if (math < 0 || math > 2) bad(fmt::format("kernel '{}' has math mode {}", name, math));
           static const char* kModes[] = {"safe", "relaxed", "fast"};
           std::string mode = kModes[math];
           return [=](const OpTypes& t) {
             auto rec = recover_mlx_kernel(name, source, t.in_dtypes, t.in_shapes, t.out_dtypes,
                                           contiguous, mode);
             std::vector<std::vector<ShapeExpr>> shapes;
             for (auto& s : t.out_shapes) shapes.emplace_back(s.begin(), s.end());
             DimsExpr g{grid[0], grid[1], grid[2]}, th{tg[0], tg[1], tg[2]};
             return std::make_shared<kernel::CustomKernel>(std::make_shared<KernelSpec>(rec.spec),
                                                           t.out_dtypes, rec.template_args, g, th,
                                                           std::move(shapes), init);
           };
         }},
        // Ops whose MLX primitive has a state field (MLX names the instances "Log2", "Rsqrt",
        // "Sum"..., but files carry the class name and the field).
        {"Log",
         [](Reader& r) -> Maker {
           // Log::Base {two, ten, e}
           static const std::map<std::string, std::string> ops = {
               {"two", "log2"}, {"ten", "log10"}, {"e", "log"}};
           return elementwise(ops.at(enum_field(r, "Log base", {"two", "ten", "e"})));
         }},
        {"Sqrt",
         [](Reader& r) -> Maker {
           return elementwise(r.boolean("Sqrt recip") ? "rsqrt" : "sqrt");
         }},
        {"Equal",
         [](Reader& r) -> Maker {
           if (r.boolean("Equal equal_nan"))
             throw NotSupported("NaNEqual",
                                "not supported: MLX primitive 'Equal' with equal_nan (array_equal "
                                "with equal_nan=True) has no Alloy equivalent yet");
           return elementwise("equal");
         }},
        {"BitwiseBinary",
         [](Reader& r) -> Maker {
           // BitwiseBinary::Op {And, Or, Xor, LeftShift, RightShift}
           return elementwise(enum_field(
               r, "BitwiseBinary op",
               {"bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"}));
         }},
        {"Reduce",
         [](Reader& r) -> Maker {
           // Reduce::ReduceType {And, Or, Sum, Prod, Min, Max}, then the axes.
           std::string op =
               enum_field(r, "Reduce type", {"all", "any", "sum", "prod", "min", "max"});
           std::vector<int> axes;
           for (int32_t a : r.ints("Reduce axes")) axes.push_back(a);
           return [=](const OpTypes&) { return std::make_shared<ops::Reduce>(op, axes); };
         }},
        {"ArgReduce",
         [](Reader& r) -> Maker {
           // ArgReduce::ReduceType {ArgMin, ArgMax}, then the axis.
           std::string op = enum_field(r, "ArgReduce type", {"argmin", "argmax"});
           int32_t axis = r.num<int32_t>("ArgReduce axis");
           return [=](const OpTypes&) { return std::make_shared<ops::ArgReduce>(op, axis); };
         }},
        {"Matmul",  // no state fields; MLX's op broadcast the batch axes before it
         [](Reader&) -> Maker {
           return [](const OpTypes&) { return std::make_shared<ops::Matmul>(); };
         }},
        {"Concatenate",
         [](Reader& r) -> Maker {
           int32_t axis = r.num<int32_t>("Concatenate axis");
           return [=](const OpTypes&) { return std::make_shared<ops::Concatenate>(axis); };
         }},
        {"Arange",
         [](Reader& r) -> Maker {
           // Arange (double start, stop, step): no inputs, so its values are fixed at import
           // (start + i step, rounded to the recorded dtype).
           double start = r.num<double>("Arange start"), stop = r.num<double>("Arange stop"),
                  step = r.num<double>("Arange step");
           return [=](const OpTypes& t) -> std::shared_ptr<Primitive> {
             if (!t.in_dtypes.empty()) bad("MLX primitive Arange has inputs");
             // Checked before anything is allocated: a hostile file must not ask for a huge
             // constant.
             double count = std::ceil((stop - start) / step);
             const Shape& want = t.out_shapes.at(0);
             if (!std::isfinite(count) || want.size() != 1 ||
                 std::max(count, 0.0) != static_cast<double>(want[0]))
               bad(fmt::format("MLX primitive Arange({}, {}, {}) does not give its recorded shape",
                               start, stop, step));
             if (want[0] > (int64_t{1} << 26))
               throw NotSupported("Arange", fmt::format("not supported: an MLX Arange of {} "
                                                        "elements (import makes it a constant)",
                                                        want[0]));
             Array a = arange(start, stop, step, t.out_dtypes.at(0), Device::cpu());
             if (a.shape() != t.out_shapes.at(0))
               bad(fmt::format("MLX primitive Arange({}, {}, {}) does not give its recorded shape",
                               start, stop, step));
             TapeConstant c;
             c.shape = a.shape();
             c.dtype = a.dtype();
             c.bytes = a.to_bytes();
             t.constant = std::move(c);
             return nullptr;
           };
         }},
        {"Softmax",  // bool precise; over the last axis, the output of the input's dtype
         [](Reader& r) -> Maker {
           bool precise = r.boolean("Softmax precise");
           return [=](const OpTypes& t) -> std::shared_ptr<Primitive> {
             if (t.in_dtypes.size() != 1 || t.out_dtypes.at(0) != t.in_dtypes[0])
               bad("MLX primitive Softmax: one input of its output's dtype expected");
             return std::make_shared<ops::RowSoftmax>(false, precise);
           };
         }},
        {"Gather",  // vector<int32> axes, vector<int32> slice_sizes; inputs a, indices...
         [](Reader& r) -> Maker {
           std::vector<int> axes;
           for (int32_t a : r.ints("Gather axes")) axes.push_back(a);
           Shape sizes = r.shape("Gather slice_sizes");
           return [=](const OpTypes&) { return std::make_shared<ops::Gather>(axes, sizes); };
         }},
        {"GatherAxis",  // int32 axis; inputs a, indices
         [](Reader& r) -> Maker {
           int32_t axis = r.num<int32_t>("GatherAxis axis");
           return [=](const OpTypes&) { return std::make_shared<ops::GatherAxis>(axis); };
         }},
        {"Scatter",
         [](Reader& r) -> Maker {
           // Scatter::ReduceType {Max, Min, Sum, Prod, None}, vector<int32> axes. MLX's inputs
           // are a, indices..., updates; Alloy's a, updates, indices...
           std::string op = enum_field(r, "Scatter type", {"max", "min", "add", "prod", "none"});
           std::vector<int> axes;
           for (int32_t a : r.ints("Scatter axes")) axes.push_back(a);
           return [=](const OpTypes& t) -> std::shared_ptr<Primitive> {
             if (op != "none" && op != "add")
               throw NotSupported("Scatter", "not supported: MLX's scatter_" + op +
                                                 " (Alloy's scatter replaces or adds)");
             size_t n = t.in_shapes.size();
             if (n != axes.size() + 2) bad("MLX primitive Scatter: one index array per axis");
             Shape want = t.in_shapes[1];
             for (int d = 0; d < static_cast<int>(t.in_shapes[0].size()); ++d)
               want.push_back(
                   std::find(axes.begin(), axes.end(), d) != axes.end() ? 1 : t.in_shapes[0][d]);
             if (t.in_shapes[n - 1] != want)
               throw NotSupported("Scatter",
                                  "not supported: MLX scatter updates smaller than the array "
                                  "off the indexed axes");
             t.order = {0, n - 1};
             for (size_t k = 1; k + 1 < n; ++k) t.order.push_back(k);
             return std::make_shared<ops::Scatter>(op, axes);
           };
         }},
        {"ScatterAxis",
         [](Reader& r) -> Maker {
           // ScatterAxis::ReduceType {Sum, None}, int32 axis; inputs a, indices, updates.
           std::string op = enum_field(r, "ScatterAxis type", {"add", "none"});
           int32_t axis = r.num<int32_t>("ScatterAxis axis");
           return [=](const OpTypes&) -> std::shared_ptr<Primitive> {
             if (op != "none")
               throw NotSupported("ScatterAxis",
                                  "not supported: MLX's ScatterAxis Sum (put_along_axis only)");
             return std::make_shared<ops::ScatterAxis>(axis);
           };
         }},
        // mx.fast primitives: what MLX records where its fused kernels run (Metal); their state
        // follows MLX's `nullptr` fallback slot, which serializes nothing.
        {"RMSNorm",  // float eps; inputs x, weight (0-d when none)
         [](Reader& r) -> Maker {
           float eps = r.num<float>("RMSNorm eps");
           return [=](const OpTypes&) { return std::make_shared<ops::RMSNorm>(eps); };
         }},
        {"LayerNorm",  // float eps; inputs x, weight, bias
         [](Reader& r) -> Maker {
           float eps = r.num<float>("LayerNorm eps");
           return [=](const OpTypes&) { return std::make_shared<ops::LayerNorm>(eps); };
         }},
        {"RoPE",
         [](Reader& r) -> Maker {
           // int32 dims, bool traditional, float base, float scale, bool forward; inputs x,
           // offset, optionally freqs.
           int32_t dims = r.num<int32_t>("RoPE dims");
           bool traditional = r.boolean("RoPE traditional");
           float base = r.num<float>("RoPE base"), scale = r.num<float>("RoPE scale");
           bool forward = r.boolean("RoPE forward");
           if (dims <= 0 || dims % 2 != 0) bad(fmt::format("RoPE dims {}", dims));
           return [=](const OpTypes&) {
             return std::make_shared<ops::RoPE>(dims, traditional, base, scale, forward);
           };
         }},
        {"ScaledDotProductAttention",
         [](Reader& r) -> Maker {
           // float scale, bool do_causal, bool has_sinks, bool output_logsumexp; inputs q, k, v,
           // the mask when given, the sinks.
           float scale = r.num<float>("ScaledDotProductAttention scale");
           bool causal = r.boolean("ScaledDotProductAttention do_causal");
           bool sinks = r.boolean("ScaledDotProductAttention has_sinks");
           bool lse = r.boolean("ScaledDotProductAttention output_logsumexp");
           return [=](const OpTypes&) {
             return std::make_shared<ops::ScaledDotProductAttention>(scale, causal, sinks, lse);
           };
         }},
        {"Full",
         [](Reader&) -> Maker {
           // mx.full / zeros / ones (zeros_like...): its input, already of the output's dtype,
           // broadcast to the output shape.
           return [](const OpTypes& t) -> std::shared_ptr<Primitive> {
             if (t.in_dtypes.size() != 1 || t.in_dtypes[0] != t.out_dtypes.at(0))
               bad("MLX primitive Full: its input is not of its output's dtype");
             return std::make_shared<Broadcast>(t.out_shapes.at(0));
           };
         }},
    };
    // Elementwise primitives without state: MLX's and Alloy's names agree (src/ops/functors.cpp).
    for (const char* name :
         {"Abs",       "Negative", "Sign",         "Square",     "Exp",        "Expm1",
          "Log1p",     "Sin",      "Cos",          "Tan",        "Tanh",       "ArcSin",
          "ArcCos",    "ArcTan",   "Sinh",         "Cosh",       "Sigmoid",    "Erf",
          "ErfInv",    "Floor",    "Ceil",         "Round",      "LogicalNot", "BitwiseInvert",
          "Add",       "Subtract", "Multiply",     "Divide",     "Remainder",  "Power",
          "Maximum",   "Minimum",  "ArcTan2",      "LogAddExp",  "NotEqual",   "Less",
          "LessEqual", "Greater",  "GreaterEqual", "LogicalAnd", "LogicalOr",  "Select"}) {
      std::string op;
      for (auto& info : ops::all_ops())
        if (std::string_view(info.primitive) == name) op = info.op;
      if (op.empty()) continue;  // not an Alloy op (yet)
      t.emplace(name, [op](Reader&) -> Maker { return elementwise(op); });
    }
    return t;
  }();
  return table;
}

struct Value {
  ValueRef ref;
  Shape shape;
  Dtype dtype;
};

}  // namespace

std::vector<std::string> mlx_mapped_primitives() {
  std::vector<std::string> names;
  for (auto& [n, r] : mlx_table()) names.push_back(n);
  return names;
}

std::shared_ptr<ImportedFunction::Impl> load_mlxfn_file(const uint8_t* data, size_t size) {
  Reader r(data, size);
  if (size < 8) bad("too short to be an Alloy or MLX export");
  uint64_t vlen = r.num<uint64_t>("version");
  if (vlen == 0 || vlen > 32)
    bad("neither an Alloy export (no 'ALYF' identifier) nor an MLX .mlxfn file (no MLX version "
        "string)");
  std::string version(reinterpret_cast<const char*>(r.bytes(vlen, "version")), vlen);
  for (char c : version)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' ||
          std::isalpha(static_cast<unsigned char>(c))))
      bad("neither an Alloy export nor an MLX .mlxfn file (bad version string)");
  auto impl = std::make_shared<ImportedFunction::Impl>();
  impl->format = "mlxfn";
  impl->producer = "mlx " + version;
  try {
    int32_t count = r.num<int32_t>("function count");
    impl->shapeless = r.boolean("shapeless flag");
    impl->metadata = r.str("metadata");
    if (count <= 0 || static_cast<uint64_t>(count) > r.left())
      bad(fmt::format("function count {}", count));
    std::unordered_map<uint64_t, std::pair<uint32_t, std::pair<Shape, Dtype>>> no_constants;
    for (int32_t fi = 0; fi < count; ++fi) {
      ImportedFunction::Impl::Entry e;
      Trace& t = e.trace;
      uint64_t nk = r.count("keyword names", 8);
      for (uint64_t i = 0; i < nk; ++i) e.kwarg_names.push_back(r.str("keyword name"));
      auto input_ids = r.ids("input ids");
      uint64_t n_in = r.count("inputs", 13);
      if (n_in != input_ids.size()) bad("input ids and inputs differ in number");
      if (nk > n_in) bad("more keyword names than inputs");
      std::unordered_map<uint64_t, Value> values;
      for (uint64_t i = 0; i < n_in; ++i) {
        Shape s = r.shape("input shape");
        Dtype d = r.dtype();
        t.input_shapes.push_back(s);
        t.input_dtypes.push_back(d);
        t.input_devices.push_back(Device::cpu());
        values[input_ids[i]] = {{ValueRef::Kind::input, static_cast<uint32_t>(i), 0}, s, d};
      }
      auto output_ids = r.ids("output ids");
      uint64_t tape = r.count("tape", 9);
      std::unordered_map<uint64_t, uint32_t> constant_of;  // per function (ids are per trace)
      for (uint64_t ti = 0; ti < tape; ++ti) {
        uint64_t id = r.num<uint64_t>("tape id");
        if (r.boolean("has primitive")) {
          auto in_ids = r.ids("primitive input ids");
          r.num<int32_t>("stream index");
          int32_t dev = r.num<int32_t>("stream device");
          r.num<int32_t>("stream device index");
          if (dev != 0 && dev != 1) bad(fmt::format("unknown device type {}", dev));
          std::string name = r.str("primitive name");
          auto it = mlx_table().find(name);
          if (it == mlx_table().end())
            throw NotSupported(
                name, fmt::format("not supported: MLX primitive '{}' (in the .mlxfn file) has no "
                                  "Alloy equivalent yet. Mapped: {}",
                                  name, fmt::join(mlx_mapped_primitives(), ", ")));
          Maker make = it->second(r);
          TapeOp op;
          std::vector<Shape> in_shapes;
          std::vector<Dtype> in_dtypes;
          for (auto iid : in_ids) {
            auto v = values.find(iid);
            if (v == values.end()) bad(fmt::format("primitive {} reads an unknown array", name));
            op.inputs.push_back(v->second.ref);
            in_shapes.push_back(v->second.shape);
            in_dtypes.push_back(v->second.dtype);
          }
          uint64_t siblings = r.num<uint64_t>("sibling count");
          std::vector<uint64_t> out_ids;
          if (siblings == 0) {
            op.shapes.push_back(r.shape("output shape"));
            op.dtypes.push_back(r.dtype());
            out_ids.push_back(id);
          } else {
            out_ids = r.ids("sibling ids");
            uint64_t ns = r.count("sibling shapes", 8);
            for (uint64_t i = 0; i < ns; ++i) op.shapes.push_back(r.shape("sibling shape"));
            uint64_t nd = r.count("sibling dtypes", 5);
            for (uint64_t i = 0; i < nd; ++i) op.dtypes.push_back(r.dtype());
            if (out_ids.size() != op.shapes.size() || out_ids.size() != op.dtypes.size())
              bad(fmt::format("primitive {}: sibling ids, shapes and dtypes differ in number",
                              name));
          }
          if (op.shapes.empty()) bad(fmt::format("primitive {} has no outputs", name));
          std::vector<size_t> order;
          std::optional<TapeConstant> constant;
          op.primitive = make(OpTypes{in_shapes, in_dtypes, op.shapes, op.dtypes, order, constant});
          if (constant) {
            if (out_ids.size() != 1) bad(fmt::format("primitive {} has several outputs", name));
            uint32_t index = static_cast<uint32_t>(t.constants.size());
            values[id] = {{ValueRef::Kind::constant, index, 0}, constant->shape, constant->dtype};
            t.constants.push_back(std::move(*constant));
            continue;
          }
          if (!op.primitive) bad(fmt::format("primitive {} made nothing", name));
          if (!order.empty()) {
            std::vector<ValueRef> permuted;
            for (size_t k : order) permuted.push_back(op.inputs.at(k));
            op.inputs = std::move(permuted);
          }
          op.device = Device::cpu();
          uint32_t index = static_cast<uint32_t>(t.ops.size());
          for (uint32_t o = 0; o < out_ids.size(); ++o)
            values[out_ids[o]] = {{ValueRef::Kind::op, index, o}, op.shapes[o], op.dtypes[o]};
          t.ops.push_back(std::move(op));
        } else if (r.boolean("is constant")) {
          if (constant_of.count(id)) continue;
          TapeConstant c;
          c.shape = r.shape("constant shape");
          c.dtype = r.dtype();
          int64_t bytes = 0;
          if (__builtin_mul_overflow(checked_numel(c.shape), static_cast<int64_t>(size_of(c.dtype)),
                                     &bytes))
            bad("constant size overflows");
          const uint8_t* p = r.bytes(static_cast<uint64_t>(bytes), "constant data");
          c.bytes.assign(p, p + bytes);
          uint32_t index = static_cast<uint32_t>(t.constants.size());
          constant_of[id] = index;
          values[id] = {{ValueRef::Kind::constant, index, 0}, c.shape, c.dtype};
          t.constants.push_back(std::move(c));
        } else if (!values.count(id)) {
          bad("a tape entry names an input that is not one");
        }
      }
      for (auto oid : output_ids) {
        auto v = values.find(oid);
        if (v == values.end()) bad("an output is not on the tape");
        t.outputs.push_back(v->second.ref);
      }
      if (t.outputs.empty()) bad("a function has no outputs");
      // MLX sorts keyword arguments by name; so does Alloy's matching.
      if (!std::is_sorted(e.kwarg_names.begin(), e.kwarg_names.end()))
        bad("keyword names unsorted");
      validate(t);
      impl->entries.push_back(std::move(e));
    }
  } catch (const std::invalid_argument& err) {
    std::string what = err.what();
    if (what.rfind("import_function", 0) == 0) throw;
    bad(what + fmt::format(" (file written by MLX {}; Alloy reads MLX 0.32's format)", version));
  }
  collect_kernels(*impl);
  return impl;
}

}  // namespace alloy::transforms
