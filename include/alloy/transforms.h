// Gradient transforms with MLX's names and signatures: vjp, jvp, grad, value_and_grad,
// custom_function / custom_vjp and stop_gradient (docs/transforms.md).
//
//   auto loss = [](const std::vector<alloy::Array>& in) { return alloy::sum(alloy::exp(in[0])); };
//   auto [value, grads] = alloy::value_and_grad(loss)({x});  // grads[0] == exp(x)
//
// The transforms call the function on the arrays given and differentiate the lazy graph it built:
// the results are ordinary lazy arrays (nothing is evaluated), built from the primitives' own
// vjp/jvp rules, so they can be traced, compiled and exported like any other graph. Gradients
// flow through floating (and complex) arrays only; integer and bool arrays are constants.
// Evaluating an array that depends on the differentiated arguments inside the function (eval,
// item, reading data) is not supported: it raises alloy::NotSupported.
#pragma once
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "alloy/array.h"
#include "alloy/stream.h"

namespace alloy {

using ArraysFn = std::function<std::vector<Array>(const std::vector<Array>&)>;

/// Vector-Jacobian product: the outputs of `fun(primals)` and, for each primal, the sum over the
/// outputs of cotangent * d output / d primal. One cotangent per output, of the output's shape.
/// Throws std::invalid_argument for mismatched counts or shapes, alloy::NotSupported naming the
/// primitive (e.g. a custom kernel) that has no gradient.
std::pair<std::vector<Array>, std::vector<Array>> vjp(const ArraysFn& fun,
                                                      const std::vector<Array>& primals,
                                                      const std::vector<Array>& cotangents);
/// The same for a function of one array with one output.
std::pair<Array, Array> vjp(const std::function<Array(const Array&)>& fun, const Array& primal,
                            const Array& cotangent);

/// Jacobian-vector product (forward mode): the outputs of `fun(primals)` and, for each output,
/// the sum over the primals of d output / d primal * tangent. One tangent per primal, of the
/// primal's shape.
std::pair<std::vector<Array>, std::vector<Array>> jvp(const ArraysFn& fun,
                                                      const std::vector<Array>& primals,
                                                      const std::vector<Array>& tangents);
std::pair<Array, Array> jvp(const std::function<Array(const Array&)>& fun, const Array& primal,
                            const Array& tangent);

/// value_and_grad's result: the function's outputs and the gradients of its first output (a
/// scalar) with respect to the arguments in argnums.
using ValueAndGradFn =
    std::function<std::pair<std::vector<Array>, std::vector<Array>>(const std::vector<Array>&)>;
using SimpleValueAndGradFn =
    std::function<std::pair<Array, std::vector<Array>>(const std::vector<Array>&)>;

/// A function returning fun's outputs and the gradient of its first output, which must have
/// one element, with respect to the arguments `argnums` (distinct, negative counts from the end).
ValueAndGradFn value_and_grad(const ArraysFn& fun, const std::vector<int>& argnums);
ValueAndGradFn value_and_grad(const ArraysFn& fun, int argnum = 0);
/// For a function with one (scalar) output.
SimpleValueAndGradFn value_and_grad(const std::function<Array(const std::vector<Array>&)>& fun,
                                    const std::vector<int>& argnums);
std::function<std::pair<Array, Array>(const Array&)> value_and_grad(
    const std::function<Array(const Array&)>& fun);

/// The gradients alone (value_and_grad without the value).
std::function<std::vector<Array>(const std::vector<Array>&)> grad(
    const std::function<Array(const std::vector<Array>&)>& fun, const std::vector<int>& argnums);
std::function<std::vector<Array>(const std::vector<Array>&)> grad(
    const std::function<Array(const std::vector<Array>&)>& fun, int argnum = 0);
std::function<Array(const Array&)> grad(const std::function<Array(const Array&)>& fun);

/// A custom vjp: (primals, cotangents (one per output), outputs) -> one cotangent per primal.
using CustomVjpFn = std::function<std::vector<Array>(const std::vector<Array>& primals,
                                                     const std::vector<Array>& cotangents,
                                                     const std::vector<Array>& outputs)>;
/// A custom jvp: (primals, tangents of the primals in argnums, argnums) -> one tangent per
/// output.
using CustomJvpFn = std::function<std::vector<Array>(const std::vector<Array>& primals,
                                                     const std::vector<Array>& tangents,
                                                     const std::vector<int>& argnums)>;

/// `fun` with its own gradients, as MLX's custom_function: the returned function computes fun's
/// outputs; vjp/grad use `fun_vjp` and jvp uses `fun_jvp` instead of differentiating fun's
/// graph (either omitted: fun's graph is differentiated). This is how a custom kernel gets a
/// gradient. Primals that are not differentiated get the cotangent the vjp returns ignored.
ArraysFn custom_function(ArraysFn fun, std::optional<CustomVjpFn> fun_vjp = std::nullopt,
                         std::optional<CustomJvpFn> fun_jvp = std::nullopt);
/// custom_function with a vjp only.
ArraysFn custom_vjp(ArraysFn fun, CustomVjpFn fun_vjp);

/// The same values, with no gradient flowing through (a view; MLX's stop_gradient).
Array stop_gradient(const Array& a, StreamOrDevice s = {});

}  // namespace alloy
