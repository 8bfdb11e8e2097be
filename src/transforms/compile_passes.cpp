#include "transforms/compile_passes.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/primitives.h"
#include "transforms/fuse.h"

namespace alloy::transforms {

namespace {

// Folding a value bigger than this that is also bigger than its inputs would trade a cheap op
// (a broadcast, an arange) for bytes held by the cache and copied per device.
constexpr int64_t kFoldGrowthLimit = 1 << 20;

int64_t bytes_of(const Shape& s, Dtype d) {
  return checked_numel(s) * static_cast<int64_t>(size_of(d));
}

// Every op input and output passed through `f` (references to op outputs).
template <class F>
void rewrite_refs(Trace& t, F&& f) {
  for (auto& op : t.ops)
    for (auto& r : op.inputs) r = f(r);
  for (auto& r : t.outputs) r = f(r);
}

}  // namespace

void fold_constants(Trace& t) {
  // replaced[i][k]: what output k of op i became (itself unless folded).
  std::vector<std::vector<ValueRef>> replaced(t.ops.size());
  auto resolve = [&](const ValueRef& r) {
    return r.kind == ValueRef::Kind::op ? replaced.at(r.index).at(r.output) : r;
  };
  for (size_t i = 0; i < t.ops.size(); ++i) {
    TapeOp& op = t.ops[i];
    for (auto& r : op.inputs) r = resolve(r);
    for (uint32_t k = 0; k < op.dtypes.size(); ++k)
      replaced[i].push_back({ValueRef::Kind::op, static_cast<uint32_t>(i), k});
    bool constant = std::all_of(op.inputs.begin(), op.inputs.end(), [](const ValueRef& r) {
      return r.kind == ValueRef::Kind::constant;
    });
    // A device move of a constant is folded too: the constant is simply made on that device.
    if (!constant) continue;
    int64_t in_bytes = 0, out_bytes = 0;
    for (auto& r : op.inputs)
      in_bytes += bytes_of(t.constants[r.index].shape, t.constants[r.index].dtype);
    for (size_t k = 0; k < op.dtypes.size(); ++k) out_bytes += bytes_of(op.shapes[k], op.dtypes[k]);
    if (out_bytes > kFoldGrowthLimit && out_bytes > in_bytes) continue;

    // The op alone as a trace over its constant inputs, replayed and evaluated now.
    Trace one;
    TapeOp single = op;
    for (size_t j = 0; j < op.inputs.size(); ++j) {
      one.constants.push_back(t.constants[op.inputs[j].index]);
      single.inputs[j] = {ValueRef::Kind::constant, static_cast<uint32_t>(j), 0};
    }
    one.ops.push_back(single);
    for (uint32_t k = 0; k < op.dtypes.size(); ++k)
      one.outputs.push_back({ValueRef::Kind::op, 0, k});
    std::vector<Array> values = replay(one, {});
    for (uint32_t k = 0; k < values.size(); ++k) {
      TapeConstant c;
      c.shape = values[k].shape();
      c.dtype = values[k].dtype();
      c.device = op.device;
      c.bytes = values[k].to_bytes();  // evaluates
      replaced[i][k] = {ValueRef::Kind::constant, static_cast<uint32_t>(t.constants.size()), 0};
      t.constants.push_back(std::move(c));
    }
  }
  for (auto& r : t.outputs) r = resolve(r);
  remove_dead_code(t);
}

void eliminate_common(Trace& t) {
  std::vector<std::vector<ValueRef>> replaced(t.ops.size());
  auto resolve = [&](const ValueRef& r) {
    return r.kind == ValueRef::Kind::op ? replaced.at(r.index).at(r.output) : r;
  };
  // Candidates by primitive name and inputs (as text): only those are compared.
  std::unordered_map<std::string, std::vector<size_t>> seen;
  for (size_t i = 0; i < t.ops.size(); ++i) {
    TapeOp& op = t.ops[i];
    for (auto& r : op.inputs) r = resolve(r);
    std::string key = op.primitive->name();
    for (auto& r : op.inputs)
      key += fmt::format("|{}:{}:{}", static_cast<int>(r.kind), r.index, r.output);
    auto& candidates = seen[key];
    size_t same = i;
    for (size_t j : candidates) {
      const TapeOp& o = t.ops[j];
      if (o.dtypes == op.dtypes && o.shapes == op.shapes && o.device == op.device &&
          (o.primitive == op.primitive || o.primitive->is_equivalent(*op.primitive))) {
        same = j;
        break;
      }
    }
    if (same == i) candidates.push_back(i);
    for (uint32_t k = 0; k < op.dtypes.size(); ++k)
      replaced[i].push_back({ValueRef::Kind::op, static_cast<uint32_t>(same), k});
  }
  for (auto& r : t.outputs) r = resolve(r);
  remove_dead_code(t);
}

void remove_dead_code(Trace& t) {
  std::vector<bool> live_op(t.ops.size(), false), live_constant(t.constants.size(), false);
  auto mark = [&](const ValueRef& r) {
    if (r.kind == ValueRef::Kind::op) live_op[r.index] = true;
    if (r.kind == ValueRef::Kind::constant) live_constant[r.index] = true;
  };
  for (auto& r : t.outputs) mark(r);
  for (size_t i = t.ops.size(); i-- > 0;)
    if (live_op[i])
      for (auto& r : t.ops[i].inputs) mark(r);
  std::vector<uint32_t> op_index(t.ops.size()), constant_index(t.constants.size());
  std::vector<TapeOp> ops;
  std::vector<TapeConstant> constants;
  for (size_t i = 0; i < t.ops.size(); ++i)
    if (live_op[i]) {
      op_index[i] = static_cast<uint32_t>(ops.size());
      ops.push_back(std::move(t.ops[i]));
    }
  for (size_t i = 0; i < t.constants.size(); ++i)
    if (live_constant[i]) {
      constant_index[i] = static_cast<uint32_t>(constants.size());
      constants.push_back(std::move(t.constants[i]));
    }
  t.ops = std::move(ops);
  t.constants = std::move(constants);
  rewrite_refs(t, [&](ValueRef r) {
    if (r.kind == ValueRef::Kind::op) r.index = op_index[r.index];
    if (r.kind == ValueRef::Kind::constant) r.index = constant_index[r.index];
    return r;
  });
}

void optimize(Trace& t) {
  remove_dead_code(t);
  fold_constants(t);
  eliminate_common(t);
  fuse_elementwise(t);
  remove_dead_code(t);  // Broadcast views that fused chains now read through
}

}  // namespace alloy::transforms
