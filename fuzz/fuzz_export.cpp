// libFuzzer target: import_function's readers (Alloy's FlatBuffers format and MLX's .mlxfn) on
// arbitrary bytes: verify, rebuild primitives, describe. Nothing is compiled or run.
// docs/export.md. Seeds are written by this binary itself (our own exporter and an MLX-layout
// stream): ALLOY_FUZZ_WRITE_SEEDS=DIR fuzz_export writes them to DIR and exits
// (scripts/ci-sanitizers.sh).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "alloy/alloy.h"
#include "msl/signature.h"
#include "transforms/export_impl.h"

namespace {

using namespace alloy;

// An MLX 0.32 stream: one function of one float32 input; a tape of a Transpose and a
// CustomKernel (the text of the MLX docs' myexp kernel).
std::vector<uint8_t> mlx_seed() {
  std::vector<uint8_t> b;
  auto num = [&](auto v) {
    auto* p = reinterpret_cast<uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof v);
  };
  auto str = [&](const std::string& s) {
    num(uint64_t{s.size()});
    b.insert(b.end(), s.begin(), s.end());
  };
  auto shape = [&](std::vector<int32_t> s) {
    num(uint64_t{s.size()});
    for (auto d : s) num(d);
  };
  auto f32 = [&] {
    num(int32_t{10});
    num(uint8_t{4});
  };
  auto stream = [&] {
    num(int32_t{0});
    num(int32_t{1});
    num(int32_t{0});
  };
  KernelSpec spec;
  spec.name = "myexp";
  spec.input_names = {"inp"};
  spec.output_names = {"out"};
  spec.source =
      "\n  uint elem = thread_position_in_grid.x;\n  out[elem] = metal::exp(inp[elem]);\n";
  auto gen = msl::write_kernel_source(spec, {{"", float32, 2, 32}}, {float32}, {});
  str("0.32.4");
  num(int32_t{1});
  num(uint8_t{0});
  str("");
  num(uint64_t{0});  // keyword names
  num(uint64_t{1});
  num(uint64_t{1});  // input ids
  num(uint64_t{1});
  shape({4, 8});
  f32();
  num(uint64_t{1});
  num(uint64_t{3});  // output ids
  num(uint64_t{3});  // tape
  num(uint64_t{1});
  num(uint8_t{0});
  num(uint8_t{0});  // the input
  num(uint64_t{2});
  num(uint8_t{1});
  num(uint64_t{1});
  num(uint64_t{1});
  stream();
  str("Transpose");
  num(uint64_t{2});
  num(int32_t{1});
  num(int32_t{0});
  num(uint64_t{0});
  shape({8, 4});
  f32();
  num(uint64_t{3});
  num(uint8_t{1});
  num(uint64_t{1});
  num(uint64_t{2});
  stream();
  str("CustomKernel");
  str(gen.kernel_name);
  str(gen.source);
  for (int32_t v : {32, 1, 1, 32, 1, 1}) num(v);
  num(uint64_t{1});
  num(uint8_t{0});
  num(uint8_t{0});
  num(uint8_t{0});
  num(uint8_t{1});   // ensure_row_contiguous
  num(uint8_t{0});   // init_value
  num(uint64_t{0});  // scalar arguments
  num(uint8_t{0});   // precompiled
  num(int32_t{0});   // shared memory
  num(int32_t{0});   // math mode
  num(uint64_t{0});
  shape({8, 4});
  f32();
  return b;
}

void write_seeds(const std::string& dir) {
  std::filesystem::create_directories(dir);
  auto k = metal_kernel("scale", {"inp"}, {"out"},
                        "uint i = thread_position_in_grid.x;\nout[i] = inp[i] * T(2);");
  Array x = full({4, 6}, 1.5, float32, Device::cpu());
  Array c = full({3}, 0.5, float32, Device::cpu());
  export_function(
      dir + "/views_kernel.alloy",
      [&](const Args& a) {
        Array v = a[0].slice({{}, {std::nullopt, std::nullopt, 2}}).transpose();
        KernelCall call;
        call.output_dtypes = {float32};
        call.grid_expr = DimsExpr{ShapeExpr::size(0), 1, 1};
        call.threadgroup_expr = DimsExpr{32, 1, 1};
        call.output_shape_exprs = {{ShapeExpr::dim(0, 0), ShapeExpr::dim(0, 1)}};
        call.template_args = {{"T", float32}};
        call.device = Device::cpu();
        Array o = k({v}, call)[0];
        return Args{o.transpose().astype(float16)};
      },
      {x}, /*shapeless=*/true);
  // Views that hold shapes of the call (a shapeless file refuses them): a file per shape.
  export_function(dir + "/kwargs.alloy",
                  [&](const Args& a, const Kwargs& kw) {
                    return Args{a[0].reshape({-1}), kw.at("y").as_strided({2}, {2}, 0),
                                c.broadcast_to({2, 3})};
                  },
                  {x}, {{"y", full({5}, 2.0, int32, Device::cpu())}});
  Library lib = compile_library(R"(#include <metal_stdlib>
using namespace metal;
kernel void axpy(device const TYPE* x [[buffer(0)]], device TYPE* y [[buffer(1)]],
                 constant float& a [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  y[i] = TYPE(a * float(x[i]) + float(y[i]));
})",
                                [] {
                                  LibraryOptions o;
                                  o.name = "seed_library";
                                  o.template_dtypes = {{"x", "TYPE"}};
                                  return o;
                                }());
  export_function(dir + "/library.alloy",
                  [&](const Args& a) {
                    LibraryCall call;
                    call.device = Device::cpu();
                    return Args{lib("axpy", {a[0], a[0], 2.0f}, call)[0]};
                  },
                  {x});
  auto m = mlx_seed();
  std::ofstream(dir + "/kernel.mlxfn", std::ios::binary)
      .write(reinterpret_cast<const char*>(m.data()), static_cast<std::streamsize>(m.size()));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("ALLOY_FUZZ_WRITE_SEEDS")) {
    write_seeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> buf(data, data + size);  // FlatBuffers wants an aligned buffer
  try {
    auto impl = alloy::transforms::load_exported(buf.data(), buf.size());
    for (auto& e : impl->entries) alloy::transforms::validate(e.trace);
  } catch (const std::invalid_argument&) {
  } catch (const alloy::NotSupported&) {
  }
  return 0;
}
