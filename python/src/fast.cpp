// Python bindings of MLX's mx.fast transformer ops (include/alloy/fast.h) as the submodule
// alloy._core._fast, re-exported by alloy.fast with MLX's Python signatures.
#include "alloy/fast.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <optional>
#include <string>

#include "bindings.h"

namespace alloy::python {

namespace {

StreamOrDevice fast_stream(nb::handle h) {
  if (nb::isinstance<Stream>(h)) return nb::cast<Stream>(h);
  if (auto d = to_device(h, "stream")) return *d;
  return {};
}

std::optional<Array> optional_input(nb::handle h) {
  if (h.is_none()) return std::nullopt;
  return as_input(h);
}

}  // namespace

void init_fast(nb::module_& m) {
  nb::module_ f = m.def_submodule("_fast", "MLX's mx.fast transformer ops (alloy.fast)");
  f.def(
      "rms_norm",
      [](nb::handle x, nb::handle weight, float eps, nb::handle stream) {
        return fast::rms_norm(as_input(x), optional_input(weight), eps, fast_stream(stream));
      },
      nb::arg("x"), nb::arg("weight").none(), nb::arg("eps"), nb::kw_only(),
      nb::arg("stream") = nb::none(),
      "x * rsqrt(mean(x**2, -1) + eps) * weight over the last axis (weight may be None).");
  f.def(
      "layer_norm",
      [](nb::handle x, nb::handle weight, nb::handle bias, float eps, nb::handle stream) {
        return fast::layer_norm(as_input(x), optional_input(weight), optional_input(bias), eps,
                                fast_stream(stream));
      },
      nb::arg("x"), nb::arg("weight").none(), nb::arg("bias").none(), nb::arg("eps"), nb::kw_only(),
      nb::arg("stream") = nb::none(),
      "(x - mean) * rsqrt(var + eps) * weight + bias over the last axis (weight, bias may be "
      "None).");
  f.def(
      "rope",
      [](nb::handle a, int dims, bool traditional, std::optional<float> base, float scale,
         nb::handle offset, nb::handle freqs, nb::handle stream) {
        Array off = PyLong_Check(offset.ptr()) ? Array(nb::cast<int>(offset)) : as_input(offset);
        return fast::rope(as_input(a), dims, traditional, base, scale, off, optional_input(freqs),
                          fast_stream(stream));
      },
      nb::arg("a"), nb::arg("dims"), nb::kw_only(), nb::arg("traditional"), nb::arg("base").none(),
      nb::arg("scale"), nb::arg("offset"), nb::arg("freqs") = nb::none(),
      nb::arg("stream") = nb::none(),
      "Rotary position embedding of the first `dims` features (MLX's mx.fast.rope).");
  f.def(
      "scaled_dot_product_attention",
      [](nb::handle q, nb::handle k, nb::handle v, float scale, nb::handle mask, nb::handle sinks,
         nb::handle stream) {
        std::string mode;
        std::optional<Array> mask_arr;
        if (PyUnicode_Check(mask.ptr()))
          mode = nb::cast<std::string>(mask);
        else if (!mask.is_none())
          mask_arr = as_input(mask);
        return fast::scaled_dot_product_attention(as_input(q), as_input(k), as_input(v), scale,
                                                  mode, mask_arr, optional_input(sinks),
                                                  fast_stream(stream));
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::kw_only(), nb::arg("scale"),
      nb::arg("mask") = nb::none(), nb::arg("sinks") = nb::none(), nb::arg("stream") = nb::none(),
      "softmax(scale * q @ k.T + mask) @ v over (B, heads, L, D) arrays; mask None, 'causal' or "
      "an array (bool: keep where True; else added); grouped-query heads allowed.");
}

}  // namespace alloy::python
