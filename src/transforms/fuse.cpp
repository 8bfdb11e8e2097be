#include "transforms/fuse.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "alloy/ops.h"
#include "core/array_node.h"
#include "core/primitives.h"
#include "kernel/custom_kernel.h"
#include "ops/functors.h"
#include "ops/kernels.h"
#include "ops/primitives.h"

namespace alloy::transforms {

namespace {

// A fused kernel reads at most this many arrays: with the shape/strides/ndim parameters of
// strided inputs this stays well inside Metal's 31 buffer slots.
constexpr size_t kMaxFusedInputs = 12;

std::string type_name(Dtype t) {
  return std::string(msl_type_name(t));
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

// Generated fused specs, built once per distinct text (as the ops' spec cache).
struct FusedSpecs {
  std::mutex mu;
  std::unordered_map<std::string, ops::OpKernel> map;
};
FusedSpecs& fused_specs() {
  static FusedSpecs* c = new FusedSpecs;  // lives until exit
  return *c;
}

// The per-node dtype plans for inputs of these dtypes; node k's output dtype is plans[k].out.
std::vector<ops::ElementwisePlan> plan_nodes(const std::vector<FusedNode>& nodes,
                                             const std::vector<Dtype>& inputs) {
  std::vector<ops::ElementwisePlan> plans;
  plans.reserve(nodes.size());
  for (auto& n : nodes) {
    std::vector<Dtype> args;
    for (int64_t a : n.args) args.push_back(a >= 0 ? inputs.at(a) : plans.at(-1 - a).out);
    plans.push_back(ops::plan_elementwise(ops::op_info(n.op), args));
  }
  return plans;
}

// An evaluated input read as broadcast to `shape` (numpy's rule: missing leading axes and size-1
// axes get stride 0), sharing its buffer.
Array broadcast_input(const Array& x, const Shape& shape) {
  auto n = std::make_shared<ArrayNode>(*node_of(x));
  n->pending = nullptr;
  Strides strides(shape.size(), 0);
  size_t lead = shape.size() - x.shape().size();
  for (size_t d = 0; d < x.shape().size(); ++d)
    strides[lead + d] = x.shape()[d] == 1 ? 0 : x.strides()[d];
  n->shape = shape;
  n->strides = std::move(strides);
  return array_of(std::move(n));
}

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

}  // namespace

ops::OpKernel fused_kernel(const std::vector<FusedNode>& nodes, const std::vector<Array>& inputs,
                           const Shape& out_shape) {
  std::vector<Dtype> dtypes;
  std::string layouts, key = "fused|";
  for (auto& a : inputs) {
    dtypes.push_back(a.dtype());
    layouts += ops::input_layout(a, out_shape);
    key += fmt::format("{}:{},", dtype_name(a.dtype()), layouts.back());
  }
  for (auto& n : nodes) key += fmt::format("|{}({})", n.op, fmt::join(n.args, ","));
  auto& c = fused_specs();
  {
    std::lock_guard lock(c.mu);
    auto it = c.map.find(key);
    if (it != c.map.end()) return it->second;
  }
  std::vector<ops::ElementwisePlan> plans = plan_nodes(nodes, dtypes);
  auto spec = std::make_shared<KernelSpec>();
  spec->name = "alloy_fused";
  spec->ensure_row_contiguous = false;  // views are read where they are (strided, broadcast)
  spec->output_names = {"out"};
  std::vector<std::string> op_names;
  for (auto& n : nodes) op_names.push_back(n.op);
  spec->header = ops::functor_header(op_names);
  std::string s = "  uint i = thread_position_in_grid.x;\n";
  for (size_t j = 0; j < inputs.size(); ++j) {
    std::string name = fmt::format("in{}", j);
    spec->input_names.push_back(name);
    s +=
        fmt::format("  const {} x{} = {};\n", type_name(dtypes[j]), j, read_expr(name, layouts[j]));
  }
  for (size_t k = 0; k < nodes.size(); ++k) {
    const ops::ElementwisePlan& p = plans[k];
    std::string args;
    for (size_t j = 0; j < nodes[k].args.size(); ++j) {
      int64_t a = nodes[k].args[j];
      std::string x = a >= 0 ? fmt::format("x{}", a) : fmt::format("v{}", -1 - a);
      Dtype d = a >= 0 ? dtypes[a] : plans[-1 - a].out;
      // The unfused op's conversions: promote first (numpy's rule), then compute type (opmath).
      if (p.via[j] != d && p.via[j] != p.compute[j])
        x = fmt::format("static_cast<{}>({})", type_name(p.via[j]), x);
      if (j) args += ", ";
      args += fmt::format("static_cast<{}>({})", type_name(p.compute[j]), x);
    }
    // Each intermediate rounded to the dtype the unfused op would have stored.
    s += fmt::format("  const {0} v{1} = static_cast<{0}>({2}_functor()({3}));\n", type_name(p.out),
                     k, nodes[k].op, args);
  }
  s += fmt::format("  out[i] = v{};\n", nodes.size() - 1);
  spec->source = s;
  ops::OpKernel made{spec, kernel::spec_content_key(*spec)};
  std::lock_guard lock(c.mu);
  return c.map.emplace(key, std::move(made)).first->second;
}

FusedElementwise::FusedElementwise(std::vector<FusedNode> nodes) : nodes_(std::move(nodes)) {
  if (nodes_.empty()) throw std::invalid_argument("FusedElementwise: no ops");
  for (size_t k = 0; k < nodes_.size(); ++k) {
    const ops::OpInfo& info = ops::op_info(nodes_[k].op);  // throws for an unknown op
    if (static_cast<int>(nodes_[k].args.size()) != info.arity)
      throw std::invalid_argument(fmt::format("FusedElementwise: {} takes {} arguments, not {}",
                                              nodes_[k].op, info.arity, nodes_[k].args.size()));
    for (int64_t a : nodes_[k].args)
      if (a < 0 && -1 - a >= static_cast<int64_t>(k))
        throw std::invalid_argument("FusedElementwise: an argument refers to a later op");
  }
}

std::string FusedElementwise::label() const {
  std::vector<std::string> names;
  for (auto& n : nodes_) names.push_back(n.op);
  return fmt::format("Fused({})", fmt::join(names, ","));
}

std::vector<Shape> FusedElementwise::output_shapes(const std::vector<Array>& inputs) const {
  Shape s;
  for (auto& a : inputs) s = broadcast_shapes(s, a.shape());
  return {s};
}

Dtype FusedElementwise::output_dtype(const std::vector<Dtype>& inputs) const {
  return plan_nodes(nodes_, inputs).back().out;
}

PrimitiveState FusedElementwise::state() const {
  PrimitiveState s(1);
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> args;
  for (auto& n : nodes_) {
    names.push_back(n.op);
    args.push_back(n.args);
  }
  s.set("ops", names).set("args", args);
  return s;
}

std::shared_ptr<FusedElementwise> FusedElementwise::from_state(const PrimitiveState& s) {
  auto& names = s.get_as<std::vector<std::string>>("ops");
  auto& args = s.get_as<std::vector<std::vector<int64_t>>>("args");
  if (names.size() != args.size())
    throw std::invalid_argument("FusedElementwise: ops and args differ in number");
  std::vector<FusedNode> nodes;
  for (size_t k = 0; k < names.size(); ++k) nodes.push_back({names[k], args[k]});
  return std::make_shared<FusedElementwise>(std::move(nodes));
}

void FusedElementwise::eval(const std::vector<Array>& inputs, std::vector<Array>& outputs,
                            bool gpu) {
  Array& out = outputs.at(0);
  for (auto& n : nodes_)
    for (int64_t a : n.args)
      if (a >= static_cast<int64_t>(inputs.size()))
        throw std::invalid_argument(label() + ": an argument refers to a missing input");
  // Inputs of other shapes are broadcast here (the pass absorbed their Broadcast views, so that
  // a shapeless replay broadcasts the new shapes); 0-d inputs stay Metal scalars.
  std::vector<Array> in(inputs);
  for (size_t j = 0; j < in.size(); ++j) {
    if (in[j].ndim() == 0 || in[j].shape() == out.shape()) continue;
    if (broadcast_shapes(in[j].shape(), out.shape()) != out.shape())
      throw std::invalid_argument(
          fmt::format("{}: input {} does not broadcast to the output's shape", label(), j));
    in[j] = broadcast_input(in[j], out.shape());
  }
  std::vector<Dtype> dtypes;
  for (auto& a : in) dtypes.push_back(a.dtype());
  if (output_dtype(dtypes) != out.dtype())
    throw std::invalid_argument(label() + ": the output dtype does not match the inputs'");
  ops::run_kernel(fused_kernel(nodes_, in, out.shape()), in, outputs, out.size(), gpu);
}

void FusedElementwise::eval_cpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) {
  eval(inputs, outputs, false);
}

void FusedElementwise::eval_gpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) {
  eval(inputs, outputs, true);
}

ALLOY_REGISTER_PRIMITIVE(FusedElementwise, [](const PrimitiveState& s) {
  return std::static_pointer_cast<Primitive>(FusedElementwise::from_state(s));
})

// ---- the pass ----------------------------------------------------------------------------------

void fuse_elementwise(Trace& t) {
  const size_t n = t.ops.size();
  std::vector<std::vector<size_t>> consumers(n);
  std::vector<bool> is_output(n, false);
  for (size_t i = 0; i < n; ++i)
    for (auto& r : t.ops[i].inputs)
      if (r.kind == ValueRef::Kind::op) consumers[r.index].push_back(i);
  for (auto& r : t.outputs)
    if (r.kind == ValueRef::Kind::op) is_output[r.index] = true;
  // What a chain reads for a value: the source of an elementwise op's own (implicit) Broadcast
  // view (the fused kernel broadcasts it itself, also for new shapes under shapeless replay), else
  // the value. An explicit broadcast_to keeps its view: its shape does not follow the operands.
  auto source = [&](const ValueRef& r) {
    if (r.kind == ValueRef::Kind::op)
      if (auto* b = dynamic_cast<Broadcast*>(t.ops[r.index].primitive.get()); b && b->implicit())
        return t.ops[r.index].inputs.at(0);
    return r;
  };
  auto elementwise = [&](size_t i) {
    return dynamic_cast<ops::Elementwise*>(t.ops[i].primitive.get()) != nullptr &&
           t.ops[i].dtypes.size() == 1;
  };

  // Groups named by their sink, grown backwards: an elementwise op joins the group of its
  // consumers when they all belong to one group, it is no output of the function, and it has
  // the group's shape and device.
  std::vector<int64_t> group(n, -1);
  std::vector<std::vector<ValueRef>> group_inputs(n);
  for (size_t i = n; i-- > 0;) {
    if (!elementwise(i)) continue;
    int64_t g = -1;
    bool join = !is_output[i] && !consumers[i].empty();
    for (size_t c : consumers[i]) {
      if (group[c] < 0 || (g >= 0 && group[c] != g)) join = false;
      if (group[c] >= 0) g = group[c];
    }
    if (join) {
      const TapeOp& sink = t.ops[g];
      join = t.ops[i].shapes[0] == sink.shapes[0] && t.ops[i].device == sink.device;
    }
    std::vector<ValueRef> merged;
    if (join) {
      for (auto& r : group_inputs[g])
        if (!(r.kind == ValueRef::Kind::op && r.index == i)) merged.push_back(r);
      for (auto& r : t.ops[i].inputs)
        if (std::find(merged.begin(), merged.end(), source(r)) == merged.end())
          merged.push_back(source(r));
      join = merged.size() <= kMaxFusedInputs;
    }
    if (join) {
      group[i] = g;
      group_inputs[g] = std::move(merged);
    } else {
      group[i] = static_cast<int64_t>(i);
      for (auto& r : t.ops[i].inputs)
        if (std::find(group_inputs[i].begin(), group_inputs[i].end(), source(r)) ==
            group_inputs[i].end())
          group_inputs[i].push_back(source(r));
    }
  }
  std::vector<std::vector<size_t>> members(n);
  for (size_t i = 0; i < n; ++i)
    if (group[i] >= 0) members[group[i]].push_back(i);  // ascending: evaluation order

  std::vector<TapeOp> out_ops;
  std::vector<uint32_t> new_index(n, 0);
  auto remap = [&](ValueRef r) {
    if (r.kind == ValueRef::Kind::op) r.index = new_index.at(r.index);
    return r;
  };
  for (size_t i = 0; i < n; ++i) {
    if (group[i] >= 0 && group[i] != static_cast<int64_t>(i)) continue;  // inside a chain
    TapeOp op = t.ops[i];
    // A chain reads Broadcast sources directly when they broadcast back to its shape (a
    // broadcast to a larger shape than the other operands need keeps its view).
    bool absorb = false, reads_broadcast = false;
    if (group[i] >= 0) {
      Shape s;
      for (auto& r : group_inputs[i]) s = broadcast_shapes(s, traced_shape(t, r));
      absorb = s == op.shapes[0];
      for (size_t m : members[i])
        for (auto& r : t.ops[m].inputs) reads_broadcast |= !(source(r) == r);
    }
    auto read = [&](const ValueRef& r) { return absorb ? source(r) : r; };
    if (group[i] >= 0 && (members[i].size() > 1 || (absorb && reads_broadcast))) {
      std::vector<ValueRef> inputs;  // outside values, in first-use order
      std::vector<FusedNode> nodes;
      for (size_t m : members[i]) {
        FusedNode node;
        node.op = static_cast<ops::Elementwise&>(*t.ops[m].primitive).op();
        for (auto& r : t.ops[m].inputs) {
          if (r.kind == ValueRef::Kind::op && group[r.index] == static_cast<int64_t>(i)) {
            auto pos = std::find(members[i].begin(), members[i].end(), r.index);
            node.args.push_back(-1 - (pos - members[i].begin()));
            continue;
          }
          auto it = std::find(inputs.begin(), inputs.end(), read(r));
          node.args.push_back(it - inputs.begin());
          if (it == inputs.end()) inputs.push_back(read(r));
        }
        nodes.push_back(std::move(node));
      }
      op.primitive = std::make_shared<FusedElementwise>(std::move(nodes));
      op.inputs = std::move(inputs);
    }
    for (auto& r : op.inputs) r = remap(r);
    new_index[i] = static_cast<uint32_t>(out_ops.size());
    out_ops.push_back(std::move(op));
  }
  for (auto& r : t.outputs) r = remap(r);
  t.ops = std::move(out_ops);
}

}  // namespace alloy::transforms
