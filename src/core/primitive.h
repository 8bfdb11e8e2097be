// Primitives: the operations in the lazy graph, as MLX's primitives.h. A primitive is a pure
// function of its inputs plus its own state (no captured arrays, no compiled code, no hidden
// globals), so a traced graph can be replayed on new inputs, re-traced for new shapes, compared
// (compile's cache) and written to a file (export):
//   - output_shapes(inputs) computes the outputs' shapes from the inputs;
//   - state() gives the primitive's own fields as a versioned PrimitiveState, and the registry
//     rebuilds the primitive from (name, state);
//   - is_equivalent() says whether two primitives compute the same function;
//   - vjp/jvp are the gradient hooks (the default raises "no gradient for <name>");
//   - eval_cpu / eval_gpu receive their outputs unallocated (shape, dtype and layout set) and
//     either allocate them (allocate_output) or make them views of an input (set_view), so view
//     outputs, in-place updates and buffer donation are possible. Evaluation never evaluates:
//     the scheduler has materialized every input before a primitive runs.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "alloy/array.h"

namespace alloy {

/// A primitive's own fields: named values of a few plain kinds, with the primitive's state
/// version. Serialized with FlexBuffers (to_bytes / from_bytes): a stable, self-describing binary
/// form that export files embed.
class PrimitiveState {
 public:
  using Value =
      std::variant<bool, int64_t, double, std::string, std::vector<int64_t>, std::vector<double>,
                   std::vector<std::string>, std::vector<std::vector<int64_t>>>;

  PrimitiveState() = default;
  explicit PrimitiveState(int version) : version_(version) {}

  int version() const { return version_; }
  PrimitiveState& set(std::string key, Value v);
  bool has(const std::string& key) const;
  /// The field's value; throws std::invalid_argument when it is missing or of another kind.
  const Value& get(const std::string& key) const;
  template <class T>
  const T& get_as(const std::string& key) const {
    const Value& v = get(key);
    if (auto* p = std::get_if<T>(&v)) return *p;
    throw std::invalid_argument("primitive state: field '" + key + "' has another type");
  }
  int64_t get_int(const std::string& key) const { return get_as<int64_t>(key); }
  const std::string& get_string(const std::string& key) const { return get_as<std::string>(key); }
  const std::vector<std::pair<std::string, Value>>& fields() const { return fields_; }

  /// FlexBuffers bytes (a map: the fields, plus "__version").
  std::vector<uint8_t> to_bytes() const;
  /// Reads to_bytes() output; verifies the buffer first. Throws std::invalid_argument on bad
  /// bytes.
  static PrimitiveState from_bytes(const uint8_t* data, size_t size);

  bool operator==(const PrimitiveState& o) const {
    return version_ == o.version_ && fields_ == o.fields_;
  }

 private:
  int version_ = 1;
  std::vector<std::pair<std::string, Value>> fields_;  // in insertion order
};

class Primitive {
 public:
  virtual ~Primitive() = default;

  /// The registry name ("CustomKernel", "Slice", ...): with state(), rebuilds the primitive.
  virtual const char* name() const = 0;
  /// Name for messages, e.g. "CustomKernel(myexp)".
  virtual std::string label() const { return name(); }

  /// Output shapes for these inputs (used at construction and when re-tracing for new shapes).
  virtual std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const = 0;
  /// The primitive's own state (everything but the inputs).
  virtual PrimitiveState state() const = 0;
  /// Same function of the inputs? Default: same name and equal state.
  virtual bool is_equivalent(const Primitive& other) const;
  /// True when output_shapes() (or what the outputs hold) comes from shapes or bounds recorded in
  /// the state at the call (a reshape's target, a slice's bounds, a broadcast's shape) rather than
  /// from the inputs' shapes alone: replayed on inputs of other shapes, the primitive would keep
  /// the call's shapes where the function, called again, would compute others. A shapeless
  /// compile traces a function holding one again for new shapes instead of replaying it.
  virtual bool shapes_from_state() const { return false; }

  /// Gradient hooks. cotangents: one per output; returns one cotangent per entry of argnums.
  virtual std::vector<Array> vjp(const std::vector<Array>& primals,
                                 const std::vector<Array>& cotangents,
                                 const std::vector<int>& argnums,
                                 const std::vector<Array>& outputs);
  /// tangents: one per entry of argnums; returns one tangent per output.
  virtual std::vector<Array> jvp(const std::vector<Array>& primals,
                                 const std::vector<Array>& tangents,
                                 const std::vector<int>& argnums);

  /// Outputs arrive unallocated; see the header comment.
  virtual void eval_cpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) = 0;
  virtual void eval_gpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) = 0;
  /// Whether eval_cpu on these (materialized) inputs finishes on the calling thread: no other
  /// thread runs any of it or is waited for (no compile to wait for, no pool thread), and
  /// nothing in it calls into Python or takes a lock that a thread may hold while it waits for
  /// something else (eval_inline). False by default: answer true only when all of that holds.
  virtual bool runs_inline(const std::vector<Array>& /*inputs*/) const { return false; }
};

/// Rebuilds a primitive from its state.
using PrimitiveFactory = std::function<std::shared_ptr<Primitive>(const PrimitiveState&)>;

/// Registers `factory` under `name` (done once per primitive type at start-up; a second
/// registration of a name replaces the first).
void register_primitive(const std::string& name, PrimitiveFactory factory);
/// The primitive `name` with `state`. Throws std::invalid_argument for an unknown name (naming
/// it) or a state the factory rejects.
std::shared_ptr<Primitive> make_primitive(const std::string& name, const PrimitiveState& state);
/// Names of every registered primitive, sorted.
std::vector<std::string> registered_primitives();

/// Registers a primitive type at static-initialization time:
///   ALLOY_REGISTER_PRIMITIVE(Slice, [](const PrimitiveState& s) { ... });
#define ALLOY_REGISTER_PRIMITIVE(NAME, FACTORY)  \
  namespace {                                    \
  const bool alloy_registered_##NAME = [] {      \
    ::alloy::register_primitive(#NAME, FACTORY); \
    return true;                                 \
  }();                                           \
  }

}  // namespace alloy
