// alloy.Dtype and its members alloy.float32, alloy.bfloat16, ... (MLX's spellings).
#include <nanobind/stl/string.h>

#include <string>

#include "bindings.h"

namespace alloy::python {
namespace {
// The enum members (alloy.float32, ...), indexed by Dtype: identity checks are the fast path of
// every kernel call's output_dtypes.
constexpr int kNumDtypes = static_cast<int>(Dtype::complex64) + 1;
PyObject* g_members[kNumDtypes] = {};
}  // namespace

Dtype to_dtype(nb::handle h) {
  for (int i = 0; i < kNumDtypes; ++i)
    if (h.ptr() == g_members[i]) return static_cast<Dtype>(i);
  Dtype t;
  if (nb::try_cast<Dtype>(h, t, /*convert=*/false)) return t;
  // A name, or anything NumPy understands as a dtype (numpy.float32, numpy.dtype("int8")).
  if (nb::isinstance<nb::str>(h)) return dtype_from_name(nb::cast<std::string>(h));
  if (nb::hasattr(h, "dtype") || nb::isinstance<nb::type_object>(h) || nb::hasattr(h, "kind")) {
    try {
      nb::object np_dtype = nb::module_::import_("numpy").attr("dtype")(h);
      return dtype_from_name(nb::cast<std::string>(np_dtype.attr("name")));
    } catch (const nb::python_error&) {
    } catch (const std::invalid_argument&) {
    }
  }
  throw nb::type_error(
      ("expected an alloy.Dtype (alloy.float32, ...), got " + std::string(nb::inst_name(h).c_str()))
          .c_str());
}

void init_dtype(nb::module_& m) {
  nb::enum_<Dtype> e(m, "Dtype",
                     "Element type of an array. The members are exported as alloy.bool_, "
                     "alloy.int8 ... alloy.uint64, alloy.float16, alloy.bfloat16, alloy.float32, "
                     "alloy.float64 (CPU only: Metal has no double) and alloy.complex64.");
  e.value("bool_", Dtype::bool_)
      .value("int8", Dtype::int8)
      .value("int16", Dtype::int16)
      .value("int32", Dtype::int32)
      .value("int64", Dtype::int64)
      .value("uint8", Dtype::uint8)
      .value("uint16", Dtype::uint16)
      .value("uint32", Dtype::uint32)
      .value("uint64", Dtype::uint64)
      .value("float16", Dtype::float16)
      .value("bfloat16", Dtype::bfloat16)
      .value("float32", Dtype::float32)
      .value("float64", Dtype::float64)
      .value("complex64", Dtype::complex64)
      .export_values();
  e.def_prop_ro(
      "size", [](Dtype t) { return size_of(t); }, "Bytes per element.");
  e.def(
      "__repr__",
      [](Dtype t) {
        return t == Dtype::bool_ ? std::string("alloy.bool_")
                                 : "alloy." + std::string(dtype_name(t));
      },
      "alloy.float32, alloy.bool_, ...");
  e.def(
      "__str__", [](Dtype t) { return std::string(dtype_name(t)); },
      "The NumPy name: float32, bool, ...");
  for (int i = 0; i < kNumDtypes; ++i)
    g_members[i] = nb::cast(static_cast<Dtype>(i)).release().ptr();  // kept for the process
}

}  // namespace alloy::python
