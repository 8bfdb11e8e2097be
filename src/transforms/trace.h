// Tracing a function of arrays into a tape, and replaying the tape on new inputs.
//
// trace() calls the function on placeholder arrays (pending nodes of a Placeholder primitive that
// cannot be evaluated): arrays are lazy, so the call only builds the graph. The graph reachable
// from the outputs is then collected back to the placeholders as a tape in evaluation order:
// each entry a primitive (kept, plus its registry name and state) with its inputs as references
// to trace inputs, constants or earlier entries. Arrays that are neither inputs nor outputs of a
// primitive of the graph (materialized arrays the function captured or created) are constants:
// their bytes are copied into the trace. A function that reads values while being traced
// (to_bytes, item, data of an array that depends on an input) gets alloy::NotSupported naming
// the trace: the inputs have no values yet.
//
// replay() rebuilds the graph on new inputs: each primitive is applied again, its output shapes
// recomputed by output_shapes(inputs) (so a CustomKernel whose geometry and output shapes are
// expressions of its input shapes follows new sizes), views laid out again over the new inputs,
// and inputs that a primitive needs row-contiguous (kernels with ensure_row_contiguous, Reshape)
// copied when the new layout is not. Export (src/transforms/export.cpp) stores tapes; compile
// (issue 12) will cache them.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "alloy/array.h"
#include "core/primitive.h"

namespace alloy::transforms {

/// A value of a tape: input `index`, constant `index`, or output `output` of op `index`.
struct ValueRef {
  enum class Kind : uint8_t { input = 0, constant = 1, op = 2 };
  Kind kind = Kind::input;
  uint32_t index = 0;
  uint32_t output = 0;
  bool operator==(const ValueRef&) const = default;
};

struct TapeConstant {
  Shape shape;
  Dtype dtype = Dtype::float32;
  std::vector<uint8_t> bytes;     // row-major
  Device device = Device::cpu();  // where it lived when traced
};

struct TapeOp {
  std::shared_ptr<Primitive> primitive;  // rebuilt from (name, state) when read from a file
  std::vector<ValueRef> inputs;
  std::vector<Shape> shapes;  // output shapes at trace time
  std::vector<Dtype> dtypes;
  Device device;  // where the op ran when traced (replay may remap it)
};

struct Trace {
  std::vector<Shape> input_shapes;
  std::vector<Dtype> input_dtypes;
  std::vector<Device> input_devices;
  std::vector<TapeConstant> constants;
  std::vector<TapeOp> ops;  // in evaluation order: an op's inputs come before it
  std::vector<ValueRef> outputs;
  // The function read the shape of a traced value (note_shape_read): what it built may hold the
  // traced shapes as values. Not written to files.
  bool shapes_read = false;
};

using TraceFn = std::function<std::vector<Array>(const std::vector<Array>& inputs)>;

/// Traces `fn` on placeholders with the shapes, dtypes and devices of `example_inputs` (their
/// values are not read). Throws alloy::NotSupported when `fn` reads values of traced arrays,
/// std::invalid_argument when it returns no arrays or invalid ones.
Trace trace(const TraceFn& fn, const std::vector<Array>& example_inputs);

/// The trace's outputs computed from `inputs` (lazy); `constants` from make_constants, or made
/// for this call when null. `device`: where every op runs (inputs and
/// constants are moved there); std::nullopt keeps each op's recorded device. Throws
/// std::invalid_argument when the inputs do not match the trace in number, dtype or rank, or a
/// primitive rejects the new shapes.
std::vector<Array> replay(const Trace& trace, const std::vector<Array>& inputs,
                          std::optional<Device> device = std::nullopt,
                          const std::vector<Array>* constants = nullptr);

/// The trace's constants as arrays on `device` (or where they were traced): made once, they can
/// be given to every replay (arrays are immutable).
std::vector<Array> make_constants(const Trace& trace, std::optional<Device> device);

/// Why `trace` holds shapes of the call it was traced for (the function read shapes, or an op's
/// primitive keeps some: Primitive::shapes_from_state), naming the first such primitive; "" when
/// it holds none, so that it computes right on inputs of other shapes. `fused`: the elementwise
/// ops' own (implicit) broadcasts do not count, fusion reading through them.
std::string call_shapes_held(const Trace& trace, bool fused);

/// Checks a trace read from a file: references point backwards and within range, op output
/// counts match their shapes/dtypes. Throws std::invalid_argument naming the first problem.
void validate(const Trace& trace);

}  // namespace alloy::transforms
