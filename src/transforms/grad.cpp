// vjp, jvp, grad, value_and_grad, custom_function and stop_gradient (include/alloy/transforms.h;
// the decisions are in docs/transforms.md).
//
// A transform wraps each primal in a fresh identity view (a "leaf": its own node, so the graph
// can tell it from other uses of the same array), calls the function on the leaves, and walks the
// lazy graph the function built:
//   1. the pending ops below the outputs, in evaluation order (scheduler::pending_ops), each op's
//      inputs and outputs snapshotted under the graph mutex;
//   2. the active arrays: the leaves, and the floating outputs of every op with an active
//      floating input through which a gradient can flow (not StopGradient, not the forward
//      outputs under a CustomTransforms node);
//   3. vjp: cotangents seeded at the outputs, then the active ops in reverse order, each op's
//      output cotangents (zeros for outputs that got none) handed to its vjp rule; cotangents
//      meeting at an array are summed with `add`. jvp: tangents seeded at the leaves, then the
//      active ops in order through their jvp rules.
// Everything built is an ordinary lazy graph of primitives: nothing is evaluated here.
#include "transforms/grad.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "alloy/errors.h"
#include "alloy/ops.h"
#include "core/scheduler.h"
#include "kernel/custom_kernel.h"

namespace alloy {
namespace transforms {

// ---- CustomTransforms / StopGradient -----------------------------------------------------------

std::vector<Shape> CustomTransforms::output_shapes(const std::vector<Array>& inputs) const {
  std::vector<Shape> s;
  for (int i = 0; i < num_outputs_; ++i) s.push_back(inputs.at(i).shape());
  return s;
}

PrimitiveState CustomTransforms::state() const {
  PrimitiveState s(1);
  s.set("num_outputs", static_cast<int64_t>(num_outputs_));
  return s;
}

void CustomTransforms::eval_cpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) {
  // The outputs are the forward outputs (made row-contiguous when the node was built).
  for (int i = 0; i < num_outputs_; ++i) {
    if (!inputs[i].is_row_contiguous())
      throw Error("custom_function",
                  "custom_function: a forward output is no longer row-contiguous after "
                  "re-tracing (not supported)");
    set_view(outputs[i], inputs[i]);
  }
}

void CustomTransforms::eval_gpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) {
  eval_cpu(inputs, outputs);
}

std::vector<Array> CustomTransforms::vjp(const std::vector<Array>& inputs,
                                         const std::vector<Array>& cotangents,
                                         const std::vector<int>& argnums,
                                         const std::vector<Array>& outputs) {
  std::vector<Array> primals(inputs.begin() + num_outputs_, inputs.end());
  std::vector<Array> vj =
      vjp_ ? (*vjp_)(primals, cotangents, outputs) : alloy::vjp(fun_, primals, cotangents).second;
  if (vj.size() != primals.size())
    throw std::invalid_argument(
        fmt::format("custom_function: the vjp returned {} cotangents for {} primals", vj.size(),
                    primals.size()));
  std::vector<Array> out;
  for (int k : argnums) {
    if (k < num_outputs_) {  // a forward output: no gradient flows into the forward graph
      out.emplace_back();
      continue;
    }
    const Array& g = vj[k - num_outputs_];
    const Array& p = primals[k - num_outputs_];
    if (!g.valid())
      throw std::invalid_argument(fmt::format(
          "custom_function: the vjp returned no cotangent for primal {}", k - num_outputs_));
    if (g.shape() != p.shape())
      throw std::invalid_argument(fmt::format(
          "custom_function: the vjp's cotangent for primal {} has shape ({}), the primal ({})",
          k - num_outputs_, fmt::join(g.shape(), ", "), fmt::join(p.shape(), ", ")));
    out.push_back(g);
  }
  return out;
}

std::vector<Array> CustomTransforms::jvp(const std::vector<Array>& inputs,
                                         const std::vector<Array>& tangents,
                                         const std::vector<int>& argnums) {
  std::vector<Array> primals(inputs.begin() + num_outputs_, inputs.end());
  std::vector<int> ks;
  for (int k : argnums) ks.push_back(k - num_outputs_);  // the walk sends primals' only
  std::vector<Array> r;
  if (jvp_) {
    r = (*jvp_)(primals, tangents, ks);
  } else {
    std::vector<Array> all;
    for (auto& p : primals) all.push_back(zeros_of(p.shape(), p.dtype(), p.device()));
    for (size_t i = 0; i < ks.size(); ++i) all[ks[i]] = tangents[i];
    r = alloy::jvp(fun_, primals, all).second;
  }
  if (static_cast<int>(r.size()) != num_outputs_)
    throw std::invalid_argument(fmt::format(
        "custom_function: the jvp returned {} tangents for {} outputs", r.size(), num_outputs_));
  return r;
}

bool differentiable_input(const Primitive& p, size_t index) {
  if (dynamic_cast<const StopGradient*>(&p)) return false;
  if (auto* c = dynamic_cast<const CustomTransforms*>(&p))
    return index >= static_cast<size_t>(c->num_outputs());
  return true;
}

ALLOY_REGISTER_PRIMITIVE(StopGradient,
                         [](const PrimitiveState&) { return std::make_shared<StopGradient>(); })
// CustomTransforms is not registered: its functions are code, so export names it and refuses.

namespace {

// ---- the graph walk ----------------------------------------------------------------------------

struct OpRecord {
  std::shared_ptr<PendingOp> op;
  std::vector<Array> inputs;
  std::vector<std::shared_ptr<ArrayNode>> outputs;  // null: the handle was dropped (unused)
  std::vector<int> argnums;                         // active inputs a gradient flows into
};

using NodeKey = const ArrayNode*;
NodeKey key(const Array& a) {
  return node_of(a).get();
}

struct Walk {
  std::vector<OpRecord> ops;  // evaluation order, active ops only
  std::unordered_set<NodeKey> active;
};

// The active part of the graph below `outputs` that depends on `leaves`.
Walk walk(const std::vector<Array>& outputs, const std::vector<Array>& leaves) {
  std::unordered_set<const PendingOp*> stop;
  for (auto& l : leaves) stop.insert(node_of(l)->pending.get());
  std::unordered_map<const PendingOp*, OpRecord> seen;
  // Ops handed to a stream already (async_eval) are computing values: constants here.
  auto order = scheduler::pending_ops(
      outputs,
      [&](const PendingOp& p) {
        if (stop.count(&p) || p.done) return true;
        auto [it, fresh] = seen.try_emplace(&p);
        if (fresh) {
          it->second.inputs = p.inputs;
          for (auto& w : p.outputs) it->second.outputs.push_back(w.lock());
        }
        return false;
      },
      "grad: the function returned an invalid (empty) array");
  Walk w;
  for (auto& l : leaves) w.active.insert(key(l));
  for (auto& op : order) {
    OpRecord r = std::move(seen.at(op.get()));
    r.op = op;
    for (size_t i = 0; i < r.inputs.size(); ++i)
      if (differentiable_input(*op->primitive, i) && is_floating(r.inputs[i].dtype()) &&
          w.active.count(key(r.inputs[i])))
        r.argnums.push_back(static_cast<int>(i));
    if (r.argnums.empty()) continue;
    for (size_t j = 0; j < r.outputs.size(); ++j)
      if (r.outputs[j] && is_floating(op->dtypes[j])) w.active.insert(r.outputs[j].get());
    w.ops.push_back(std::move(r));
  }
  return w;
}

// The name a missing-gradient error gives: the kernel's own name for custom kernels.
std::string gradient_subject(const Primitive& p) {
  if (auto* k = dynamic_cast<const kernel::CustomKernel*>(&p)) return k->spec().name;
  return p.label();
}

// Calls a primitive's own vjp/jvp hook; its "no gradient" error becomes one that says what to do.
template <class F>
std::vector<Array> call_hook(const Primitive& p, const char* what, F&& f) {
  try {
    return f();
  } catch (const NotSupported& e) {
    if (e.kernel() != p.label()) throw;  // raised deeper (e.g. inside a custom vjp)
    std::string subject = gradient_subject(p);
    throw NotSupported(subject, fmt::format("no {} for {}: wrap it in custom_function with a {}",
                                            what, subject, what));
  }
}

Array cast_to(Array g, const Array& like) {
  if (g.dtype() != like.dtype()) g = g.astype(like.dtype());
  return g;
}

// Outputs of an op for its vjp: the live handles, and for dropped ones (only possible for
// multi-output ops) the outputs of the primitive applied again.
std::vector<Array> output_arrays(const OpRecord& r) {
  bool all = std::all_of(r.outputs.begin(), r.outputs.end(), [](auto& n) { return n != nullptr; });
  if (all) {
    std::vector<Array> out;
    for (auto& n : r.outputs) out.push_back(array_of(n));
    return out;
  }
  return make_pending(r.op->primitive, r.inputs, r.op->shapes, r.op->dtypes, r.op->stream);
}

// Identity views of the primals: nodes of their own that the walk stops at.
std::vector<Array> make_leaves(const std::vector<Array>& primals, const char* fn) {
  std::vector<Array> leaves;
  for (size_t i = 0; i < primals.size(); ++i) {
    const Array& p = primals[i];
    if (!p.valid())
      throw std::invalid_argument(fmt::format("{}: primal {} is an empty array", fn, i));
    // An identity transpose: a view whose layout follows its input's (a replayed trace with new
    // values or layouts stays valid).
    std::vector<int64_t> axes(p.ndim());
    for (int k = 0; k < p.ndim(); ++k) axes[k] = k;
    auto prim = std::make_shared<Transpose>(std::move(axes));
    leaves.push_back(make_pending_view(prim, p, prim->layout(p)));
  }
  return leaves;
}

// A leaf that was evaluated or handed to a stream means the function read values of arrays that
// depend on the arguments: the graph below them is gone (or going), so gradients would be wrong.
void check_leaves_pending(const std::vector<Array>& leaves, const char* fn) {
  bool evaluated = false;
  for (auto& l : leaves)
    if (!scheduler::pending_of(*node_of(l))) evaluated = true;
  if (!evaluated)  // `done` is read under the graph mutex, where pending_ops calls `skip`
    scheduler::pending_ops(
        leaves,
        [&](const PendingOp& p) {
          if (p.done) evaluated = true;
          return true;
        },
        "grad: invalid array");
  if (evaluated)
    throw NotSupported(fn, fmt::format("not supported: the function given to {} evaluated an "
                                       "array that depends on the differentiated arguments "
                                       "(eval, item, reading data); compute with arrays only",
                                       fn));
}

std::vector<Array> call_fun(const ArraysFn& fun, const std::vector<Array>& leaves, const char* fn) {
  std::vector<Array> outputs = fun(leaves);
  for (size_t i = 0; i < outputs.size(); ++i)
    if (!outputs[i].valid())
      throw std::invalid_argument(
          fmt::format("{}: output {} of the function is an empty array", fn, i));
  check_leaves_pending(leaves, fn);
  return outputs;
}

using CotangentsFn = std::function<std::vector<Array>(const std::vector<Array>& outputs)>;

std::pair<std::vector<Array>, std::vector<Array>> vjp_impl(const ArraysFn& fun,
                                                           const std::vector<Array>& primals,
                                                           const CotangentsFn& make_cotangents,
                                                           const char* fn) {
  std::vector<Array> leaves = make_leaves(primals, fn);
  std::vector<Array> outputs = call_fun(fun, leaves, fn);
  std::vector<Array> cotangents = make_cotangents(outputs);
  if (cotangents.size() != outputs.size())
    throw std::invalid_argument(
        fmt::format("{}: {} cotangents for {} outputs", fn, cotangents.size(), outputs.size()));
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!cotangents[i].valid())
      throw std::invalid_argument(fmt::format("{}: cotangent {} is an empty array", fn, i));
    if (cotangents[i].shape() != outputs[i].shape())
      throw std::invalid_argument(fmt::format(
          "{}: cotangent {} has shape ({}), output {} has shape ({})", fn, i,
          fmt::join(cotangents[i].shape(), ", "), i, fmt::join(outputs[i].shape(), ", ")));
  }

  Walk w = walk(outputs, leaves);
  std::unordered_map<NodeKey, Array> cot;
  auto accumulate = [&](const Array& target, const Array& g) {
    Array c = cast_to(g, target);
    if (c.shape() != target.shape())
      throw Error("grad", fmt::format("grad: a cotangent of shape ({}) reached an array of "
                                      "shape ({})",
                                      fmt::join(c.shape(), ", "), fmt::join(target.shape(), ", ")));
    auto [it, fresh] = cot.try_emplace(key(target), c);
    if (!fresh) it->second = add(it->second, c);
  };
  for (size_t i = 0; i < outputs.size(); ++i)
    if (w.active.count(key(outputs[i]))) accumulate(outputs[i], cotangents[i]);

  for (auto r = w.ops.rbegin(); r != w.ops.rend(); ++r) {
    const PendingOp& op = *r->op;
    std::vector<Array> cts;
    bool any = false;
    for (size_t j = 0; j < op.shapes.size(); ++j) {
      auto it = r->outputs[j] ? cot.find(r->outputs[j].get()) : cot.end();
      if (it != cot.end()) {
        cts.push_back(std::move(it->second));
        cot.erase(it);
        any = true;
      } else {
        cts.push_back(zeros_of(op.shapes[j], op.dtypes[j], op.device));
      }
    }
    if (!any) continue;
    StreamContext on(op.stream);  // the derivative's ops run where the op ran
    std::vector<Array> vj;
    if (auto rule = core_vjp(op, r->inputs, cts, r->argnums)) {
      vj = std::move(*rule);
    } else {
      std::vector<Array> outs = output_arrays(*r);
      vj = call_hook(*op.primitive, "vjp",
                     [&] { return op.primitive->vjp(r->inputs, cts, r->argnums, outs); });
    }
    if (vj.size() != r->argnums.size())
      throw Error(op.primitive->label(),
                  fmt::format("{}: its vjp returned {} cotangents for {} inputs",
                              op.primitive->label(), vj.size(), r->argnums.size()));
    for (size_t k = 0; k < vj.size(); ++k)
      if (vj[k].valid()) accumulate(r->inputs[r->argnums[k]], vj[k]);
  }

  std::vector<Array> grads;
  for (size_t i = 0; i < primals.size(); ++i) {
    auto it = cot.find(key(leaves[i]));
    grads.push_back(it != cot.end()
                        ? it->second
                        : zeros_of(primals[i].shape(), primals[i].dtype(), primals[i].device()));
  }
  return {outputs, grads};
}

std::vector<int> normalize_argnums(std::vector<int> argnums, size_t n, const char* fn) {
  if (argnums.empty()) throw std::invalid_argument(fmt::format("{}: argnums is empty", fn));
  for (int& a : argnums) {
    int v = a < 0 ? a + static_cast<int>(n) : a;
    if (v < 0 || v >= static_cast<int>(n))
      throw std::invalid_argument(
          fmt::format("{}: argnum {} is out of range for {} arguments", fn, a, n));
    a = v;
  }
  std::vector<int> sorted = argnums;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    throw std::invalid_argument(fmt::format("{}: argnums has duplicates", fn));
  return argnums;
}

}  // namespace
}  // namespace transforms

using transforms::vjp_impl;

// ---- public API --------------------------------------------------------------------------------

std::pair<std::vector<Array>, std::vector<Array>> vjp(const ArraysFn& fun,
                                                      const std::vector<Array>& primals,
                                                      const std::vector<Array>& cotangents) {
  return vjp_impl(
      fun, primals, [&](const std::vector<Array>&) { return cotangents; }, "vjp");
}

std::pair<Array, Array> vjp(const std::function<Array(const Array&)>& fun, const Array& primal,
                            const Array& cotangent) {
  auto [o, g] = vjp([&](const std::vector<Array>& in) { return std::vector<Array>{fun(in[0])}; },
                    {primal}, {cotangent});
  return {o[0], g[0]};
}

std::pair<std::vector<Array>, std::vector<Array>> jvp(const ArraysFn& fun,
                                                      const std::vector<Array>& primals,
                                                      const std::vector<Array>& tangents) {
  using namespace transforms;
  if (tangents.size() != primals.size())
    throw std::invalid_argument(
        fmt::format("jvp: {} tangents for {} primals", tangents.size(), primals.size()));
  for (size_t i = 0; i < primals.size(); ++i) {
    if (!tangents[i].valid())
      throw std::invalid_argument(fmt::format("jvp: tangent {} is an empty array", i));
    if (primals[i].valid() && tangents[i].shape() != primals[i].shape())
      throw std::invalid_argument(fmt::format("jvp: tangent {} has shape ({}), primal {} ({})", i,
                                              fmt::join(tangents[i].shape(), ", "), i,
                                              fmt::join(primals[i].shape(), ", ")));
  }
  std::vector<Array> leaves = make_leaves(primals, "jvp");
  std::vector<Array> outputs = call_fun(fun, leaves, "jvp");
  Walk w = walk(outputs, leaves);
  std::unordered_map<NodeKey, Array> tan;
  for (size_t i = 0; i < leaves.size(); ++i)
    tan.emplace(key(leaves[i]), cast_to(tangents[i], primals[i]));
  for (auto& r : w.ops) {
    std::vector<Array> ts;
    for (int k : r.argnums) ts.push_back(tan.at(key(r.inputs[k])));
    StreamContext on(r.op->stream);
    std::vector<Array> out;
    if (auto rule = core_jvp(r.op, r.inputs, ts, r.argnums))
      out = std::move(*rule);
    else
      out = call_hook(*r.op->primitive, "jvp",
                      [&] { return r.op->primitive->jvp(r.inputs, ts, r.argnums); });
    if (out.size() != r.op->shapes.size())
      throw Error(r.op->primitive->label(),
                  fmt::format("{}: its jvp returned {} tangents for {} outputs",
                              r.op->primitive->label(), out.size(), r.op->shapes.size()));
    for (size_t j = 0; j < out.size(); ++j) {
      if (!r.outputs[j] || !w.active.count(r.outputs[j].get())) continue;
      Array t = out[j];
      if (t.dtype() != r.op->dtypes[j]) t = t.astype(r.op->dtypes[j]);
      if (t.shape() != r.op->shapes[j]) t = broadcast_to(t, r.op->shapes[j]);
      tan.emplace(r.outputs[j].get(), std::move(t));
    }
  }
  std::vector<Array> jvps;
  for (auto& o : outputs) {
    auto it = tan.find(key(o));
    jvps.push_back(it != tan.end() ? it->second : zeros_of(o.shape(), o.dtype(), o.device()));
  }
  return {outputs, jvps};
}

std::pair<Array, Array> jvp(const std::function<Array(const Array&)>& fun, const Array& primal,
                            const Array& tangent) {
  auto [o, t] = jvp([&](const std::vector<Array>& in) { return std::vector<Array>{fun(in[0])}; },
                    {primal}, {tangent});
  return {o[0], t[0]};
}

ValueAndGradFn value_and_grad(const ArraysFn& fun, const std::vector<int>& argnums) {
  if (argnums.empty()) throw std::invalid_argument("value_and_grad: argnums is empty");
  return [fun, argnums](const std::vector<Array>& inputs) {
    std::vector<int> nums = transforms::normalize_argnums(argnums, inputs.size(), "value_and_grad");
    std::vector<Array> primals;
    for (int a : nums) {
      if (!inputs[a].valid())
        throw std::invalid_argument(fmt::format("value_and_grad: argument {} is empty", a));
      if (!is_floating(inputs[a].dtype()))
        throw std::invalid_argument(
            fmt::format("value_and_grad: argument {} is {}: gradients are taken with respect "
                        "to floating arrays only",
                        a, dtype_name(inputs[a].dtype())));
      primals.push_back(inputs[a]);
    }
    std::vector<Array> outputs;
    auto inner = [&](const std::vector<Array>& diff) {
      std::vector<Array> args = inputs;
      for (size_t k = 0; k < nums.size(); ++k) args[nums[k]] = diff[k];
      outputs = fun(args);
      if (outputs.empty())
        throw std::invalid_argument("value_and_grad: the function returned no arrays");
      if (!outputs[0].valid() || outputs[0].size() != 1)
        throw std::invalid_argument(fmt::format(
            "value_and_grad: the function's output must be a scalar (one element), got shape "
            "({})",
            outputs[0].valid() ? fmt::format("{}", fmt::join(outputs[0].shape(), ", ")) : ""));
      return std::vector<Array>{outputs[0]};
    };
    auto [outs, grads] = vjp_impl(
        inner, primals,
        [](const std::vector<Array>& o) {
          return std::vector<Array>{full(o[0].shape(), 1.0, o[0].dtype(), o[0].device())};
        },
        "value_and_grad");
    return std::pair{outputs, grads};
  };
}

ValueAndGradFn value_and_grad(const ArraysFn& fun, int argnum) {
  return value_and_grad(fun, std::vector<int>{argnum});
}

SimpleValueAndGradFn value_and_grad(const std::function<Array(const std::vector<Array>&)>& fun,
                                    const std::vector<int>& argnums) {
  auto vg = value_and_grad(
      [fun](const std::vector<Array>& in) { return std::vector<Array>{fun(in)}; }, argnums);
  return [vg](const std::vector<Array>& in) {
    auto [o, g] = vg(in);
    return std::pair{o[0], g};
  };
}

std::function<std::pair<Array, Array>(const Array&)> value_and_grad(
    const std::function<Array(const Array&)>& fun) {
  auto vg = value_and_grad(
      [fun](const std::vector<Array>& in) { return std::vector<Array>{fun(in[0])}; }, 0);
  return [vg](const Array& x) {
    auto [o, g] = vg({x});
    return std::pair{o[0], g[0]};
  };
}

std::function<std::vector<Array>(const std::vector<Array>&)> grad(
    const std::function<Array(const std::vector<Array>&)>& fun, const std::vector<int>& argnums) {
  auto vg = value_and_grad(fun, argnums);
  return [vg](const std::vector<Array>& in) { return vg(in).second; };
}

std::function<std::vector<Array>(const std::vector<Array>&)> grad(
    const std::function<Array(const std::vector<Array>&)>& fun, int argnum) {
  return grad(fun, std::vector<int>{argnum});
}

std::function<Array(const Array&)> grad(const std::function<Array(const Array&)>& fun) {
  auto vg = value_and_grad(fun);
  return [vg](const Array& x) { return vg(x).second; };
}

ArraysFn custom_function(ArraysFn fun, std::optional<CustomVjpFn> fun_vjp,
                         std::optional<CustomJvpFn> fun_jvp) {
  if (!fun) throw std::invalid_argument("custom_function: the function is empty");
  return [fun, fun_vjp, fun_jvp](const std::vector<Array>& inputs) {
    std::vector<Array> outs = fun(inputs);
    if (outs.empty())
      throw std::invalid_argument("custom_function: the function returned no arrays");
    Device d = outs[0].device();
    std::vector<Array> node_inputs;
    std::vector<Shape> shapes;
    std::vector<Dtype> dtypes;
    for (size_t i = 0; i < outs.size(); ++i) {
      if (!outs[i].valid())
        throw std::invalid_argument(
            fmt::format("custom_function: output {} of the function is an empty array", i));
      Array o = outs[i].device() == d ? outs[i] : outs[i].to(d);
      node_inputs.push_back(o.contiguous());  // the node's outputs share these buffers
      shapes.push_back(o.shape());
      dtypes.push_back(o.dtype());
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].valid())
        throw std::invalid_argument(
            fmt::format("custom_function: argument {} is an empty array", i));
      node_inputs.push_back(inputs[i]);
    }
    auto p = scheduler::pending_of(*node_of(node_inputs[0]));
    Stream s = p ? p->stream : default_stream(d);
    auto prim = std::make_shared<transforms::CustomTransforms>(static_cast<int>(outs.size()), fun,
                                                               fun_vjp, fun_jvp);
    return make_pending(prim, std::move(node_inputs), shapes, dtypes, s);
  };
}

ArraysFn custom_vjp(ArraysFn fun, CustomVjpFn fun_vjp) {
  return custom_function(std::move(fun), std::move(fun_vjp), std::nullopt);
}

Array stop_gradient(const Array& a, StreamOrDevice s) {
  if (!a.valid()) throw std::invalid_argument("stop_gradient: invalid (empty) array");
  Array x = a;
  if (!std::holds_alternative<std::monostate>(s)) {
    Device d = std::holds_alternative<Stream>(s) ? std::get<Stream>(s).device : std::get<Device>(s);
    if (!(x.device() == d)) x = x.to(d);
  }
  auto prim = std::make_shared<transforms::StopGradient>();
  return make_pending_view(prim, x, prim->layout(x));
}

}  // namespace alloy
