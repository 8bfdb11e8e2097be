// Golden tests: the generated Metal source equals, byte for byte, what MLX's metal_kernel builds
// for the same call. The expected texts are written by hand from MLX's generator (rules in
// docs/mlx-signature.md), not produced by our implementation.
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>

#include "msl/signature.h"

namespace alloy::msl {
namespace {

// gtest only (the test binary does not link gmock): substring check with a readable failure.
::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

KernelSpec make_spec(std::string name, std::vector<std::string> inputs,
                     std::vector<std::string> outputs, std::string source, std::string header = "",
                     bool atomic_outputs = false) {
  KernelSpec spec;
  spec.name = std::move(name);
  spec.input_names = std::move(inputs);
  spec.output_names = std::move(outputs);
  spec.source = std::move(source);
  spec.header = std::move(header);
  spec.atomic_outputs = atomic_outputs;
  return spec;
}

// An array input; size is the product of the shape.
SignatureInput arr(Dtype t, std::vector<int64_t> shape) {
  int64_t size = 1;
  for (auto d : shape) size *= d;
  return {"", t, static_cast<int>(shape.size()), size};
}
SignatureInput scalar(Dtype t) {
  return {"", t, 0, 1};
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "<no std::invalid_argument thrown>";
}

// The docs' example (docs/src/dev/custom_metal_kernels.rst), as MLX generates it today: float16
// input of shape (4, 16), template T = float32, output float16.
constexpr const char* kMyexpSource = R"(
    uint elem = thread_position_in_grid.x;
    T tmp = inp[elem];
    out[elem] = metal::exp(tmp);
)";

TEST(Signature, DocsMyexp) {
  auto spec = make_spec("myexp", {"inp"}, {"out"}, kMyexpSource);
  auto g = write_kernel_source(spec, {arr(float16, {4, 16})}, {float16}, {{"T", float32}});
  const char* expected = R"MSL(template <typename T>
[[kernel]] void custom_kernel_myexp__float_float16_t_float16_t(
  const device float16_t* inp [[buffer(0)]],
  device float16_t* out [[buffer(1)]],
  uint3 thread_position_in_grid [[thread_position_in_grid]]) {

    uint elem = thread_position_in_grid.x;
    T tmp = inp[elem];
    out[elem] = metal::exp(tmp);

}

template [[host_name("custom_kernel_myexp__float_float16_t_float16_t")]] [[kernel]] decltype(custom_kernel_myexp__float_float16_t_float16_t<float>) custom_kernel_myexp__float_float16_t_float16_t<float>;
)MSL";
  EXPECT_EQ(g.source, expected);
  EXPECT_EQ(g.kernel_name, "custom_kernel_myexp__float_float16_t_float16_t");
  EXPECT_EQ(g.template_name, g.kernel_name);
  ASSERT_EQ(g.bindings.size(), 2u);
  EXPECT_EQ(g.bindings[0].kind, BindingKind::input);
  EXPECT_EQ(g.bindings[0].index, 0);
  EXPECT_EQ(g.bindings[1].kind, BindingKind::output);
  EXPECT_EQ(g.bindings[1].index, 0);
  EXPECT_EQ(g.attributes, std::vector<std::string>{"thread_position_in_grid"});
}

TEST(Signature, VerboseListing) {
  auto spec = make_spec("myexp", {"inp"}, {"out"}, kMyexpSource);
  auto g = write_kernel_source(spec, {arr(float16, {4, 16})}, {float16}, {{"T", float32}});
  EXPECT_EQ(verbose_listing("myexp", g.source),
            "Generated source code for `myexp`:\n```\n" + g.source + "\n```\n");
}

// MLX's python/tests/test_fast.py::test_custom_kernel_args: a (3, 6) float32, b = [3, 4, 5]
// int32 (3 elements: constant), c (2, 2) bfloat16 (4 elements: constant), d = 7.3 (a float32
// scalar); template e = True, f = 3, T = float16. Bools print as 1/0 (MLX uses a plain ostream).
TEST(Signature, MlxTestArgs) {
  const std::string source = R"(
                uint elem = thread_position_in_grid.x;
                T tmp = a[0];
                if (e) {
                    out1[elem] = a[1] + b[2] + c[3] + d + f;
                } else {
                    out1[elem] = 1;
                }
                out2[elem] = a[1] + b[2] + c[1] - d;
            )";
  auto spec = make_spec("arg_test", {"a", "b", "c", "d"}, {"out1", "out2"}, source);
  auto g = write_kernel_source(
      spec, {arr(float32, {3, 6}), arr(int32, {3}), arr(bfloat16, {2, 2}), scalar(float32)},
      {float32, int32}, {{"e", true}, {"f", 3}, {"T", float16}});
  const std::string name =
      "custom_kernel_arg_test__1_3_float16_t_float_int32_tc_bfloat16_tc_floats_float_int32_t";
  const std::string expected = R"MSL(template <bool e, int f, typename T>
[[kernel]] void custom_kernel_arg_test__1_3_float16_t_float_int32_tc_bfloat16_tc_floats_float_int32_t(
  const device float* a [[buffer(0)]],
  const constant int32_t* b [[buffer(1)]],
  const constant bfloat16_t* c [[buffer(2)]],
  const constant float& d [[buffer(3)]],
  device float* out1 [[buffer(4)]],
  device int32_t* out2 [[buffer(5)]],
  uint3 thread_position_in_grid [[thread_position_in_grid]]) {
)MSL" + source + R"MSL(
}

template [[host_name("custom_kernel_arg_test__1_3_float16_t_float_int32_tc_bfloat16_tc_floats_float_int32_t")]] [[kernel]] decltype(custom_kernel_arg_test__1_3_float16_t_float_int32_tc_bfloat16_tc_floats_float_int32_t<1, 3, float16_t>) custom_kernel_arg_test__1_3_float16_t_float_int32_tc_bfloat16_tc_floats_float_int32_t<1, 3, float16_t>;
)MSL";
  EXPECT_EQ(g.source, expected);
  EXPECT_EQ(g.kernel_name, name);
  ASSERT_EQ(g.bindings.size(), 6u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(g.bindings[i].kind, BindingKind::input);
    EXPECT_EQ(g.bindings[i].index, i);
  }
  EXPECT_EQ(g.bindings[4].kind, BindingKind::output);
  EXPECT_EQ(g.bindings[5].index, 1);
}

// No template: no template line, no instantiation. Scalars are `constant T&` (suffix s), arrays of
// fewer than 8 elements `constant T*` (suffix c).
TEST(Signature, ScalarAndConstantArrayWithoutTemplate) {
  auto spec = make_spec("scale", {"x", "s", "w"}, {"y"},
                        "uint i = thread_position_in_grid.x;\ny[i] = x[i] * s + w[i % 7];");
  auto g = write_kernel_source(spec, {arr(float32, {1024}), scalar(float32), arr(float16, {7})},
                               {float32}, {});
  EXPECT_EQ(g.source, R"MSL([[kernel]] void custom_kernel_scale_float_floats_float16_tc_float(
  const device float* x [[buffer(0)]],
  const constant float& s [[buffer(1)]],
  const constant float16_t* w [[buffer(2)]],
  device float* y [[buffer(3)]],
  uint3 thread_position_in_grid [[thread_position_in_grid]]) {
uint i = thread_position_in_grid.x;
y[i] = x[i] * s + w[i % 7];
}
)MSL");
  EXPECT_EQ(g.kernel_name, "custom_kernel_scale_float_floats_float16_tc_float");
}

// 7 elements: constant; 8 elements (any shape): device; an empty array: constant. No attribute:
// the single output closes the parameter list.
TEST(Signature, ConstantSizeBoundaryAndNoAttribute) {
  auto spec = make_spec("bounds", {"p", "q", "r", "e"}, {"o"}, "o[0] = p[0] + q[0] + r[0];");
  auto g = write_kernel_source(
      spec, {arr(int32, {7}), arr(int32, {8}), arr(uint8, {2, 4}), arr(float32, {0})}, {uint32},
      {});
  EXPECT_EQ(g.source,
            R"MSL([[kernel]] void custom_kernel_bounds_int32_tc_int32_t_uint8_t_floatc_uint32_t(
  const constant int32_t* p [[buffer(0)]],
  const device int32_t* q [[buffer(1)]],
  const device uint8_t* r [[buffer(2)]],
  const constant float* e [[buffer(3)]],
  device uint32_t* o [[buffer(4)]]) {
o[0] = p[0] + q[0] + r[0];
}
)MSL");
  EXPECT_TRUE(g.attributes.empty());
}

// The docs' myexp_strided: inp_shape, inp_strides and inp_ndim follow their input.
TEST(Signature, DocsMyexpStridedShapeStridesNdim) {
  const std::string source = R"(
    uint elem = thread_position_in_grid.x;
    // Utils from `mlx/backend/metal/kernels/utils.h` are automatically included
    uint loc = elem_to_loc(elem, inp_shape, inp_strides, inp_ndim);
    T tmp = inp[loc];
    // Output arrays are always row contiguous
    out[elem] = metal::exp(tmp);
)";
  auto spec = make_spec("myexp_strided", {"inp"}, {"out"}, source);
  auto g = write_kernel_source(spec, {arr(float16, {2, 16})}, {float16}, {{"T", float32}});
  const std::string expected = R"MSL(template <typename T>
[[kernel]] void custom_kernel_myexp_strided__float_float16_t_float16_t(
  const device float16_t* inp [[buffer(0)]],
  const constant int* inp_shape [[buffer(1)]],
  const constant int64_t* inp_strides [[buffer(2)]],
  const constant int& inp_ndim [[buffer(3)]],
  device float16_t* out [[buffer(4)]],
  uint3 thread_position_in_grid [[thread_position_in_grid]]) {
)MSL" + source + R"MSL(
}

template [[host_name("custom_kernel_myexp_strided__float_float16_t_float16_t")]] [[kernel]] decltype(custom_kernel_myexp_strided__float_float16_t_float16_t<float>) custom_kernel_myexp_strided__float_float16_t_float16_t<float>;
)MSL";
  EXPECT_EQ(g.source, expected);
  ASSERT_EQ(g.bindings.size(), 5u);
  EXPECT_EQ(g.bindings[1].kind, BindingKind::input_shape);
  EXPECT_EQ(g.bindings[2].kind, BindingKind::input_strides);
  EXPECT_EQ(g.bindings[3].kind, BindingKind::input_ndim);
  EXPECT_EQ(g.bindings[3].index, 0);
  EXPECT_EQ(g.bindings[4].kind, BindingKind::output);
}

// Only what is mentioned is passed; a scalar never gets shape/strides/ndim, even if mentioned.
TEST(Signature, OnlyMentionedStridesAndNothingForScalars) {
  auto spec = make_spec("strided", {"x", "s"}, {"y"},
                        "uint i = thread_position_in_grid.x;\n"
                        "// s_ndim is not passed for scalars\n"
                        "y[i] = x[i * x_strides[1]] + s;");
  auto g = write_kernel_source(spec, {arr(float32, {4, 4}), scalar(int32)}, {float32}, {});
  EXPECT_EQ(g.source, R"MSL([[kernel]] void custom_kernel_strided_float_int32_ts_float(
  const device float* x [[buffer(0)]],
  const constant int64_t* x_strides [[buffer(1)]],
  const constant int32_t& s [[buffer(2)]],
  device float* y [[buffer(3)]],
  uint3 thread_position_in_grid [[thread_position_in_grid]]) {
uint i = thread_position_in_grid.x;
// s_ndim is not passed for scalars
y[i] = x[i * x_strides[1]] + s;
}
)MSL");
  ASSERT_EQ(g.bindings.size(), 4u);
  EXPECT_EQ(g.bindings[1].kind, BindingKind::input_strides);
  EXPECT_EQ(g.bindings[2].kind, BindingKind::input);
  EXPECT_EQ(g.bindings[2].index, 1);
}

// The docs' grid_sample_grad (shortened body): several outputs, atomic_outputs, shape buffers and
// attributes in table order (not in order of mention).
TEST(Signature, DocsGridSampleGradAtomicOutputs) {
  const std::string source = R"(
    uint elem = thread_position_in_grid.x;
    int H = x_shape[1];
    int C_padded = ceildiv(x_shape[3], threads_per_simdgroup) * threads_per_simdgroup;
    int gH = grid_shape[1];
    T cot = cotangent[elem];
    atomic_fetch_add_explicit(&x_grad[elem], cot, memory_order_relaxed);
    if (thread_index_in_simdgroup == 0) {
        atomic_fetch_add_explicit(&grid_grad[elem], cot, memory_order_relaxed);
    }
)";
  auto spec = make_spec("grid_sample_grad", {"x", "grid", "cotangent"}, {"x_grad", "grid_grad"},
                        source, "", /*atomic_outputs=*/true);
  auto g = write_kernel_source(
      spec, {arr(float32, {2, 8, 8, 3}), arr(float32, {2, 4, 4, 2}), arr(float32, {2, 4, 4, 3})},
      {float32, float32}, {{"T", float32}});
  const std::string expected = R"MSL(template <typename T>
[[kernel]] void custom_kernel_grid_sample_grad__float_float_float_float_float_float(
  const device float* x [[buffer(0)]],
  const constant int* x_shape [[buffer(1)]],
  const device float* grid [[buffer(2)]],
  const constant int* grid_shape [[buffer(3)]],
  const device float* cotangent [[buffer(4)]],
  device atomic<float>* x_grad [[buffer(5)]],
  device atomic<float>* grid_grad [[buffer(6)]],
  uint thread_index_in_simdgroup [[thread_index_in_simdgroup]],
  uint3 thread_position_in_grid [[thread_position_in_grid]],
  uint threads_per_simdgroup [[threads_per_simdgroup]]) {
)MSL" + source + R"MSL(
}

template [[host_name("custom_kernel_grid_sample_grad__float_float_float_float_float_float")]] [[kernel]] decltype(custom_kernel_grid_sample_grad__float_float_float_float_float_float<float>) custom_kernel_grid_sample_grad__float_float_float_float_float_float<float>;
)MSL";
  EXPECT_EQ(g.source, expected);
  EXPECT_EQ(g.attributes,
            (std::vector<std::string>{"thread_index_in_simdgroup", "thread_position_in_grid",
                                      "threads_per_simdgroup"}));
  ASSERT_EQ(g.bindings.size(), 7u);
  EXPECT_EQ(g.bindings[3].kind, BindingKind::input_shape);
  EXPECT_EQ(g.bindings[3].index, 1);
  EXPECT_EQ(g.bindings[6].kind, BindingKind::output);
  EXPECT_EQ(g.bindings[6].index, 1);
}

// The header goes first, verbatim, then the template line (MLX's test_custom_kernel_helper, with a
// template argument added). A 2x2 input has 4 elements: constant.
TEST(Signature, HeaderThenTemplate) {
  const std::string header = R"(
template <typename T>
T do_exp(T x) {
    return metal::precise::exp(x);
}
)";
  auto spec =
      make_spec("helper", {"a"}, {"out1"},
                "uint elem = thread_position_in_grid.x;\nout1[elem] = do_exp(a[elem]);", header);
  auto g = write_kernel_source(spec, {arr(float32, {2, 2})}, {float32}, {{"N", 4}});
  EXPECT_EQ(g.source, R"MSL(
template <typename T>
T do_exp(T x) {
    return metal::precise::exp(x);
}
template <int N>
[[kernel]] void custom_kernel_helper__4_floatc_float(
  const constant float* a [[buffer(0)]],
  device float* out1 [[buffer(1)]],
  uint3 thread_position_in_grid [[thread_position_in_grid]]) {
uint elem = thread_position_in_grid.x;
out1[elem] = do_exp(a[elem]);
}

template [[host_name("custom_kernel_helper__4_floatc_float")]] [[kernel]] decltype(custom_kernel_helper__4_floatc_float<4>) custom_kernel_helper__4_floatc_float<4>;
)MSL");
}

// Several attributes of both types, in MLX's (alphabetical) order; substring matching means
// dispatch_threads_per_threadgroup also brings threads_per_threadgroup. No inputs at all.
TEST(Signature, AttributesUintAndUint3InTableOrder) {
  auto spec = make_spec("attrs", {}, {"out"},
                        "uint lane = thread_index_in_simdgroup;\n"
                        "uint sg = simdgroup_index_in_threadgroup;\n"
                        "uint3 d = dispatch_threads_per_threadgroup;\n"
                        "uint w = thread_execution_width;\n"
                        "uint3 gs = grid_size;\n"
                        "out[thread_index_in_threadgroup] = lane + sg + w + d.x + gs.x + "
                        "quadgroups_per_threadgroup;");
  auto g = write_kernel_source(spec, {}, {uint32}, {});
  EXPECT_EQ(g.source, R"MSL([[kernel]] void custom_kernel_attrs_uint32_t(
  device uint32_t* out [[buffer(0)]],
  uint3 dispatch_threads_per_threadgroup [[dispatch_threads_per_threadgroup]],
  uint3 grid_size [[grid_size]],
  uint quadgroups_per_threadgroup [[quadgroups_per_threadgroup]],
  uint simdgroup_index_in_threadgroup [[simdgroup_index_in_threadgroup]],
  uint thread_execution_width [[thread_execution_width]],
  uint thread_index_in_simdgroup [[thread_index_in_simdgroup]],
  uint thread_index_in_threadgroup [[thread_index_in_threadgroup]],
  uint3 threads_per_threadgroup [[threads_per_threadgroup]]) {
uint lane = thread_index_in_simdgroup;
uint sg = simdgroup_index_in_threadgroup;
uint3 d = dispatch_threads_per_threadgroup;
uint w = thread_execution_width;
uint3 gs = grid_size;
out[thread_index_in_threadgroup] = lane + sg + w + d.x + gs.x + quadgroups_per_threadgroup;
}
)MSL");
  EXPECT_EQ(g.attributes.size(), 8u);
  EXPECT_EQ(g.attributes.back(), "threads_per_threadgroup");
}

// MLX's test_custom_kernel_attributes: a (1, 1) float32 input (1 element: constant).
TEST(Signature, MlxTestAttributes) {
  auto spec = make_spec("test_fun", {"a"}, {"out"}, "out[0] = threads_per_threadgroup.x;");
  auto g = write_kernel_source(spec, {arr(float32, {1, 1})}, {uint32}, {});
  EXPECT_EQ(g.source, R"MSL([[kernel]] void custom_kernel_test_fun_floatc_uint32_t(
  const constant float* a [[buffer(0)]],
  device uint32_t* out [[buffer(1)]],
  uint3 threads_per_threadgroup [[threads_per_threadgroup]]) {
out[0] = threads_per_threadgroup.x;
}
)MSL");
}

// Every template argument kind and many dtypes: bool false -> 0, int 0, dtypes by their MSL names
// (bool, int64_t, uint8_t, complex64_t, double for float64...).
TEST(Signature, TemplateKindsAndDtypeNames) {
  auto spec = make_spec("types", {"z", "i", "u", "bb"}, {"o1", "o2", "o3", "o4", "o5"},
                        "uint t = thread_position_in_grid.x;");
  auto g = write_kernel_source(
      spec, {arr(complex64, {3}), arr(int64, {16}), scalar(uint8), arr(bool_, {10})},
      {int16, uint16, uint64, int8, float64},
      {{"B", false}, {"N", 0}, {"T", bfloat16}, {"C", complex64}});
  const std::string name =
      "custom_kernel_types__0_0_bfloat16_t_complex64_t_complex64_tc_int64_t_uint8_ts_bool_int16_t_"
      "uint16_t_uint64_t_int8_t_double";
  EXPECT_EQ(g.kernel_name, name);
  EXPECT_EQ(g.source,
            "template <bool B, int N, typename T, typename C>\n"
            "[[kernel]] void " +
                name +
                "(\n"
                "  const constant complex64_t* z [[buffer(0)]],\n"
                "  const device int64_t* i [[buffer(1)]],\n"
                "  const constant uint8_t& u [[buffer(2)]],\n"
                "  const device bool* bb [[buffer(3)]],\n"
                "  device int16_t* o1 [[buffer(4)]],\n"
                "  device uint16_t* o2 [[buffer(5)]],\n"
                "  device uint64_t* o3 [[buffer(6)]],\n"
                "  device int8_t* o4 [[buffer(7)]],\n"
                "  device double* o5 [[buffer(8)]],\n"
                "  uint3 thread_position_in_grid [[thread_position_in_grid]]) {\n"
                "uint t = thread_position_in_grid.x;\n"
                "}\n"
                "\n"
                "template [[host_name(\"" +
                name + "\")]] [[kernel]] decltype(" + name + "<0, 0, bfloat16_t, complex64_t>) " +
                name + "<0, 0, bfloat16_t, complex64_t>;\n");
}

// No attribute and several outputs: fine while no shape/strides/ndim buffer shifts the indices.
TEST(Signature, SeveralOutputsWithoutAttributes) {
  auto spec = make_spec("two", {"a"}, {"o1", "o2"}, "o1[0] = a[0];\no2[0] = a[1];");
  auto g = write_kernel_source(spec, {arr(float32, {10})}, {float32, float32}, {});
  EXPECT_EQ(g.source, R"MSL([[kernel]] void custom_kernel_two_float_float_float(
  const device float* a [[buffer(0)]],
  device float* o1 [[buffer(1)]],
  device float* o2 [[buffer(2)]]) {
o1[0] = a[0];
o2[0] = a[1];
}
)MSL");
}

// No attribute, a shape buffer and one output: the output still closes the list.
TEST(Signature, ShapeBufferWithoutAttributesOneOutput) {
  auto spec = make_spec("loop", {"a"}, {"o"}, "for (int i = 0; i < a_shape[0]; ++i) o[i] = a[i];");
  auto g = write_kernel_source(spec, {arr(float32, {10})}, {float32}, {});
  EXPECT_EQ(g.source, R"MSL([[kernel]] void custom_kernel_loop_float_float(
  const device float* a [[buffer(0)]],
  const constant int* a_shape [[buffer(1)]],
  device float* o [[buffer(2)]]) {
for (int i = 0; i < a_shape[0]; ++i) o[i] = a[i];
}
)MSL");
}

// Substring matching, as in MLX: a mention inside a comment or a longer name counts.
TEST(Signature, MentionsAreSubstrings) {
  auto spec = make_spec("sub", {"a"}, {"o"},
                        "// data_shape and grid_size_hint\nuint i = thread_position_in_grid.x;");
  auto g = write_kernel_source(spec, {arr(float32, {16})}, {float32}, {});
  EXPECT_TRUE(Contains(g.source, "  const constant int* a_shape [[buffer(1)]],\n"));
  EXPECT_EQ(g.attributes, (std::vector<std::string>{"grid_size", "thread_position_in_grid"}));
}

TEST(Signature, AttributeTable) {
  auto attrs = metal_attributes();
  ASSERT_EQ(attrs.size(), 20u);
  EXPECT_EQ(attrs.front().name, "dispatch_quadgroups_per_threadgroup");
  EXPECT_EQ(attrs.front().type, "uint");
  EXPECT_EQ(attrs.back().name, "threads_per_threadgroup");
  EXPECT_EQ(attrs.back().type, "uint3");
  for (size_t i = 1; i < attrs.size(); ++i) EXPECT_LT(attrs[i - 1].name, attrs[i].name);
}

// --- errors ---

TEST(Signature, ErrorNoOutputs) {
  auto spec = make_spec("k", {"a"}, {}, "");
  EXPECT_EQ(message_of([&] { write_kernel_source(spec, {arr(float32, {8})}, {}, {}); }),
            "[metal_kernel] Must specify at least one output.");
}

TEST(Signature, ErrorInputCount) {
  auto spec = make_spec("k", {"a", "b"}, {"o"}, "");
  EXPECT_EQ(message_of([&] { write_kernel_source(spec, {arr(float32, {8})}, {float32}, {}); }),
            "[metal_kernel] Expected `inputs` to have size 2 but got size 1.\n");
}

TEST(Signature, ErrorOutputDtypeCount) {
  auto spec = make_spec("k", {"a"}, {"o", "p"}, "");
  EXPECT_EQ(message_of([&] { write_kernel_source(spec, {arr(float32, {8})}, {float32}, {}); }),
            "[metal_kernel] Expected `output_dtypes` to have size 2 but got size 1.\n");
}

TEST(Signature, ErrorDuplicateInput) {
  auto spec = make_spec("k", {"a", "a"}, {"o"}, "");
  EXPECT_TRUE(
      Contains(message_of([&] {
                 write_kernel_source(spec, {arr(float32, {8}), arr(float32, {8})}, {float32}, {});
               }),
               "`a` is declared twice in the generated signature: as input and as input"));
}

TEST(Signature, ErrorInputOutputClash) {
  auto spec = make_spec("k", {"x"}, {"x"}, "");
  EXPECT_TRUE(
      Contains(message_of([&] { write_kernel_source(spec, {arr(float32, {8})}, {float32}, {}); }),
               "as input and as output"));
}

TEST(Signature, ErrorTemplateArgClash) {
  auto spec = make_spec("k", {"T"}, {"o"}, "");
  EXPECT_TRUE(
      Contains(message_of([&] {
                 write_kernel_source(spec, {arr(float32, {8})}, {float32}, {{"T", float32}});
               }),
               "`T` is declared twice in the generated signature: as template argument "
               "and as input"));
  auto spec2 = make_spec("k", {"a"}, {"o"}, "");
  EXPECT_TRUE(
      Contains(message_of([&] {
                 write_kernel_source(spec2, {arr(float32, {8})}, {float32}, {{"N", 1}, {"N", 2}});
               }),
               "`N` is declared twice"));
}

TEST(Signature, ErrorAttributeClash) {
  auto spec = make_spec("k", {"grid_size"}, {"o"}, "o[0] = grid_size[0];");
  EXPECT_TRUE(
      Contains(message_of([&] { write_kernel_source(spec, {arr(float32, {8})}, {float32}, {}); }),
               "as input and as attribute"));
}

TEST(Signature, ErrorShapeParameterClash) {
  auto spec = make_spec("k", {"a", "a_shape"}, {"o"}, "o[0] = a[0] + a_shape[0];");
  EXPECT_TRUE(
      Contains(message_of([&] {
                 write_kernel_source(spec, {arr(float32, {8}), arr(float32, {8})}, {float32}, {});
               }),
               "`a_shape` is declared twice"));
  // A scalar `a` gets no a_shape: no clash.
  EXPECT_NO_THROW(write_kernel_source(spec, {scalar(float32), arr(float32, {8})}, {float32}, {}));
}

TEST(Signature, ErrorInvalidNames) {
  auto bad_input = make_spec("k", {"my-input"}, {"o"}, "");
  EXPECT_TRUE(Contains(
      message_of([&] { write_kernel_source(bad_input, {arr(float32, {8})}, {float32}, {}); }),
      "Invalid input name `my-input`"));
  auto bad_output = make_spec("k", {}, {"1o"}, "");
  EXPECT_TRUE(Contains(message_of([&] { write_kernel_source(bad_output, {}, {float32}, {}); }),
                       "Invalid output name `1o`"));
  auto bad_kernel = make_spec("my kernel", {}, {"o"}, "");
  EXPECT_TRUE(Contains(message_of([&] { write_kernel_source(bad_kernel, {}, {float32}, {}); }),
                       "Invalid kernel name `my kernel`"));
  auto bad_template = make_spec("k", {}, {"o"}, "");
  EXPECT_TRUE(Contains(message_of([&] {
                         write_kernel_source(bad_template, {}, {float32}, {{"T x", float32}});
                       }),
                       "Invalid template argument name `T x`"));
}

// MLX 0.32.4 accepts negative int template arguments and writes '-' as '_' in the kernel name
// (text printed by mlx 0.32.4 on Linux, verbose=True under export tracing).
TEST(Signature, NegativeIntTemplateArg) {
  auto spec = make_spec("t", {"a"}, {"o"}, "uint i = thread_position_in_grid.x; o[i] = a[i] * N;");
  auto g = write_kernel_source(spec, {arr(float32, {4})}, {float32}, {{"N", -3}, {"T", float32}});
  EXPECT_EQ(g.source, R"MSL(template <int N, typename T>
[[kernel]] void custom_kernel_t___3_float_floatc_float(
  const constant float* a [[buffer(0)]],
  device float* o [[buffer(1)]],
  uint3 thread_position_in_grid [[thread_position_in_grid]]) {
uint i = thread_position_in_grid.x; o[i] = a[i] * N;
}

template [[host_name("custom_kernel_t___3_float_floatc_float")]] [[kernel]] decltype(custom_kernel_t___3_float_floatc_float<-3, float>) custom_kernel_t___3_float_floatc_float<-3, float>;
)MSL");
}

// MLX would close the parameter list after the first output here (its source cannot compile).
TEST(Signature, ErrorMlxBrokenSignatureCase) {
  auto spec = make_spec("k", {"a"}, {"o1", "o2"}, "o1[0] = a_shape[0]; o2[0] = 0;");
  EXPECT_TRUE(Contains(message_of([&] {
                         write_kernel_source(spec, {arr(float32, {8})}, {float32, float32}, {});
                       }),
                       "not supported: several outputs, shape/strides/ndim parameters and no "
                       "Metal attribute"));
}

}  // namespace
}  // namespace alloy::msl
