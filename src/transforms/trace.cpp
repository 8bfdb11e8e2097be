#include "transforms/trace.h"

#include <fmt/format.h>

#include <stdexcept>
#include <unordered_map>

#include "alloy/compile.h"
#include "alloy/errors.h"
#include "core/array_node.h"
#include "core/primitives.h"
#include "core/scheduler.h"
#include "kernel/custom_kernel.h"
#include "kernel/library.h"
#include "transforms/kernel_spec.h"

namespace alloy::transforms {

namespace {

// What a traced function receives: a pending array that cannot be evaluated. Not registered:
// placeholders never reach a tape.
class Placeholder : public Primitive {
 public:
  explicit Placeholder(int index) : index_(index) {}
  const char* name() const override { return "Placeholder"; }
  std::vector<Shape> output_shapes(const std::vector<Array>&) const override {
    throw std::logic_error("Placeholder has no inputs");
  }
  PrimitiveState state() const override {
    PrimitiveState s(1);
    s.set("index", static_cast<int64_t>(index_));
    return s;
  }
  void eval_cpu(const std::vector<Array>&, std::vector<Array>&) override { fail(); }
  void eval_gpu(const std::vector<Array>&, std::vector<Array>&) override { fail(); }
  int index() const { return index_; }

 private:
  [[noreturn]] void fail() const {
    throw NotSupported("trace",
                       fmt::format("not supported: the traced function read the values of input {} "
                                   "(to_bytes, item, data, printing...). Under tracing (export, "
                                   "compile) inputs have no values: compute with arrays only",
                                   index_));
  }
  int index_;
};

std::string shape_str(const Shape& s) {
  return fmt::format("({}{})", fmt::join(s, ", "), s.size() == 1 ? "," : "");
}

}  // namespace

// Where note_shape_read() reports while a function is traced on this thread.
static thread_local bool* g_shape_reads = nullptr;

Trace trace(const TraceFn& fn, const std::vector<Array>& example_inputs) {
  Trace t;
  std::vector<Array> placeholders;
  std::unordered_map<const PendingOp*, uint32_t> input_of;
  for (size_t i = 0; i < example_inputs.size(); ++i) {
    const Array& e = example_inputs[i];
    if (!e.valid())
      throw std::invalid_argument(fmt::format("trace: example input {} is an empty array", i));
    auto p = make_pending(std::make_shared<Placeholder>(static_cast<int>(i)), {}, {e.shape()},
                          {e.dtype()}, e.device())[0];
    input_of[node_of(p)->pending.get()] = static_cast<uint32_t>(i);
    placeholders.push_back(p);
    t.input_shapes.push_back(e.shape());
    t.input_dtypes.push_back(e.dtype());
    t.input_devices.push_back(e.device());
  }
  std::vector<Array> outputs;
  {
    bool* outer = g_shape_reads;
    g_shape_reads = &t.shapes_read;
    struct Restore {
      bool* outer;
      bool* mine;
      ~Restore() {
        g_shape_reads = outer;
        if (outer && *mine) *outer = true;  // a trace inside a trace: the outer one read it too
      }
    } restore{outer, &t.shapes_read};
    outputs = fn(placeholders);
  }
  if (outputs.empty()) throw std::invalid_argument("trace: the function returned no arrays");

  std::unordered_map<const PendingOp*, uint32_t> op_index;
  std::unordered_map<const ArrayNode*, uint32_t> constant_index;

  // The reference of an array whose producer (if any) is already on the tape.
  auto ref_of = [&](const Array& a) -> ValueRef {
    auto node = node_of(a);
    const PendingOp* p = node->pending.get();
    if (!p) {
      auto [it, fresh] =
          constant_index.emplace(node.get(), static_cast<uint32_t>(t.constants.size()));
      if (fresh) {
        TapeConstant c;
        c.shape = a.shape();
        c.dtype = a.dtype();
        c.bytes = a.to_bytes();
        c.device = a.device();
        t.constants.push_back(std::move(c));
      }
      return {ValueRef::Kind::constant, it->second, 0};
    }
    if (auto it = input_of.find(p); it != input_of.end())
      return {ValueRef::Kind::input, it->second, 0};
    uint32_t out = 0;
    for (; out < p->outputs.size(); ++out)
      if (p->outputs[out].lock() == node) break;
    if (out == p->outputs.size()) throw std::logic_error("trace: an output is not its op's");
    return {ValueRef::Kind::op, op_index.at(p), out};
  };

  // The ops between the placeholders and the outputs, inputs first.
  for (auto& op : scheduler::pending_ops(
           outputs, [&](const PendingOp& p) { return input_of.count(&p) > 0; },
           "trace: the function returned an empty array")) {
    TapeOp entry;
    entry.primitive = op->primitive;
    for (auto& in : op->inputs) entry.inputs.push_back(ref_of(in));
    entry.shapes = op->shapes;
    entry.dtypes = op->dtypes;
    entry.device = op->device;
    op_index[op.get()] = static_cast<uint32_t>(t.ops.size());
    t.ops.push_back(std::move(entry));
  }
  for (auto& out : outputs) t.outputs.push_back(ref_of(out));
  return t;
}

std::string call_shapes_held(const Trace& t, bool fused) {
  if (t.shapes_read) return "the function read the shapes of its inputs";
  for (auto& op : t.ops) {
    if (!op.primitive->shapes_from_state()) continue;
    auto* b = dynamic_cast<const Broadcast*>(op.primitive.get());
    if (!(fused && b && b->implicit())) return op.primitive->label() + " holds shapes of the call";
  }
  return "";
}

void validate(const Trace& t) {
  size_t n_in = t.input_shapes.size();
  if (t.input_dtypes.size() != n_in)
    throw std::invalid_argument("trace: input shapes and dtypes differ in number");
  auto check = [&](const ValueRef& r, size_t op, const std::string& where) {
    bool ok = false;
    switch (r.kind) {
      case ValueRef::Kind::input:
        ok = r.index < n_in;
        break;
      case ValueRef::Kind::constant:
        ok = r.index < t.constants.size();
        break;
      case ValueRef::Kind::op:
        ok = r.index < op && r.output < t.ops[r.index].dtypes.size();
        break;
    }
    if (!ok)
      throw std::invalid_argument("trace: " + where + " refers to a value that is not there");
  };
  for (size_t i = 0; i < t.ops.size(); ++i) {
    const TapeOp& op = t.ops[i];
    if (!op.primitive) throw std::invalid_argument(fmt::format("trace: op {} has no primitive", i));
    if (op.shapes.size() != op.dtypes.size() || op.dtypes.empty())
      throw std::invalid_argument(
          fmt::format("trace: op {} ({}) has {} output shapes and {} dtypes", i,
                      op.primitive->label(), op.shapes.size(), op.dtypes.size()));
    for (auto& r : op.inputs) check(r, i, fmt::format("an input of op {}", i));
  }
  for (auto& r : t.outputs) check(r, t.ops.size(), "an output");
  for (auto& c : t.constants) {
    int64_t bytes = checked_numel(c.shape) * static_cast<int64_t>(size_of(c.dtype));
    if (static_cast<int64_t>(c.bytes.size()) != bytes)
      throw std::invalid_argument(
          fmt::format("trace: a constant of shape {} holds {} bytes, not {}", shape_str(c.shape),
                      c.bytes.size(), bytes));
  }
}

namespace {
const Shape& traced_shape(const Trace& t, const ValueRef& r) {
  switch (r.kind) {
    case ValueRef::Kind::input:
      return t.input_shapes.at(r.index);
    case ValueRef::Kind::constant:
      return t.constants.at(r.index).shape;
    default:
      return t.ops.at(r.index).shapes.at(r.output);
  }
}

// One op applied again to new inputs.
std::vector<Array> apply(const Trace& t, const TapeOp& op, std::vector<Array> in,
                         std::optional<Device> device) {
  Primitive& p = *op.primitive;
  if (dynamic_cast<ToDevice*>(&p)) return {in.at(0).to(device.value_or(op.device))};
  if (auto* view = dynamic_cast<ViewPrimitive*>(&p)) {
    if (in.size() != 1)
      throw std::invalid_argument(p.label() + ": a view takes one input, the tape gives " +
                                  std::to_string(in.size()));
    if (dynamic_cast<Reshape*>(&p) && !in[0].is_row_contiguous()) in[0] = in[0].contiguous();
    return {make_pending_view(op.primitive, in[0], view->layout(in[0]))};
  }
  if (auto* k = dynamic_cast<kernel::CustomKernel*>(&p)) {
    if (k->spec().ensure_row_contiguous)
      for (auto& a : in)
        if (!a.is_row_contiguous()) a = a.contiguous();
    // A grid and output shapes given as numbers were right for the traced shapes only: for
    // other input shapes the kernel would silently compute something else (MLX's shapeless
    // bug); refuse, naming the kernel.
    for (size_t i = 0; i < in.size() && i < op.inputs.size(); ++i) {
      const Shape& traced = traced_shape(t, op.inputs[i]);
      if (in[i].shape() != traced && kernel_geometry_is_constant(p.state()))
        throw NotSupported(
            k->spec().name,
            fmt::format("not supported: kernel '{}' was traced with a constant grid and output "
                        "shapes for input {} of shape {}; it cannot run on shape {}. Give the "
                        "call's grid/threadgroup/output shapes as expressions of the input shapes "
                        "(KernelCall::grid_expr...) for shapeless use",
                        k->spec().name, i, shape_str(traced), shape_str(in[i].shape())));
    }
    k->geometry(in);  // geometry errors at the call, as a direct call reports them
  }
  if (kernel::is_library_kernel(p))  // a library call binds row-contiguous buffers
    for (auto& a : in)
      if (!a.is_row_contiguous()) a = a.contiguous();
  Device dev = device.value_or(op.device);
  auto shapes = p.output_shapes(in);
  if (shapes.size() != op.dtypes.size())
    throw std::invalid_argument(fmt::format("{} gives {} outputs, the tape records {}", p.label(),
                                            shapes.size(), op.dtypes.size()));
  return make_pending(op.primitive, std::move(in), shapes, op.dtypes, dev);
}
}  // namespace

std::vector<Array> make_constants(const Trace& t, std::optional<Device> device) {
  std::vector<Array> constants;
  for (auto& c : t.constants)
    constants.push_back(
        Array::from_bytes(c.bytes.data(), c.shape, c.dtype, device.value_or(c.device)));
  return constants;
}

std::vector<Array> replay(const Trace& t, const std::vector<Array>& inputs,
                          std::optional<Device> device, const std::vector<Array>* made) {
  if (inputs.size() != t.input_shapes.size())
    throw std::invalid_argument(fmt::format("the function takes {} inputs, {} were given",
                                            t.input_shapes.size(), inputs.size()));
  std::vector<Array> in;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Array& a = inputs[i];
    if (!a.valid()) throw std::invalid_argument(fmt::format("input {} is an empty array", i));
    if (a.dtype() != t.input_dtypes[i] || a.ndim() != static_cast<int>(t.input_shapes[i].size()))
      throw std::invalid_argument(
          fmt::format("input {} is {} of shape {}; the function was traced for {} of {} dimensions",
                      i, dtype_name(a.dtype()), shape_str(a.shape()), dtype_name(t.input_dtypes[i]),
                      t.input_shapes[i].size()));
    in.push_back(device ? a.to(*device) : a);
  }
  if (made && made->size() != t.constants.size())
    throw std::invalid_argument("replay: the constants were made for another trace");
  std::vector<Array> constants = made ? *made : make_constants(t, device);
  std::vector<std::vector<Array>> values;
  values.reserve(t.ops.size());
  auto get = [&](const ValueRef& r) -> const Array& {
    switch (r.kind) {
      case ValueRef::Kind::input:
        return in.at(r.index);
      case ValueRef::Kind::constant:
        return constants.at(r.index);
      default:
        return values.at(r.index).at(r.output);
    }
  };
  for (auto& op : t.ops) {
    std::vector<Array> args;
    for (auto& r : op.inputs) args.push_back(get(r));
    values.push_back(apply(t, op, std::move(args), device));
  }
  std::vector<Array> out;
  for (auto& r : t.outputs) out.push_back(get(r));
  return out;
}

}  // namespace alloy::transforms

void alloy::note_shape_read() {
  if (transforms::g_shape_reads) *transforms::g_shape_reads = true;
}
