// Conformance: Metal features Alloy does not plan to run (textures, samplers, render functions)
// are rejected with alloy::NotSupported and a "not supported: ..." message on every target,
// never compiled into something wrong.
#include <cstdio>
#include <string>
#include <vector>

#include "conformance/harness.h"

namespace {
using namespace conformance;

// Expects `f` to throw alloy::NotSupported whose message says "not supported" and names `what`.
// `f` returns "" when it ran, or why it could not be tried (NVRTC missing).
template <class F>
void expect_not_supported(F&& f, const std::string& what) {
  try {
    std::string skipped = f();
    if (!skipped.empty())
      std::printf("NVRTC check skipped: %s\n", skipped.c_str());
    else
      ADD_FAILURE() << "no exception: " << what << " should be rejected";
  } catch (const NotSupported& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("not supported"), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected alloy::NotSupported, got: " << e.what();
  }
}

struct Case {
  const char* name;
  const char* header;
  const char* what;  // expected in the message
};

TEST(ConformanceNotPlanned, TexturesSamplersAndRenderFunctionsAreRejected) {
  const Case cases[] = {
      {"np_texture", R"MSL(
inline float first_texel(texture2d<float, access::read> t) { return t.read(uint2(0, 0)).x; }
)MSL",
       "texture"},
      {"np_sampler", R"MSL(
constexpr sampler kLinear(coord::normalized, filter::linear);
)MSL",
       "sampler"},
      {"np_vertex", R"MSL(
vertex float4 vs_main(uint vid [[vertex_id]]) { return float4(float(vid)); }
)MSL",
       "vertex"},
  };
  constexpr int64_t n = 32;
  auto x = random_array({n}, float32, -1, 1, 1301, Device::cpu());
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto k = metal_kernel(c.name, {"x"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    out[i] = x[i];
  )MSL",
                          c.header);
    KernelCall call;
    call.output_shapes = {{n}};
    call.output_dtypes = {float32};
    call.grid = {n, 1, 1};
    call.threadgroup = {32, 1, 1};
    for_each_device([&](Device d) {
      call.device = d;
      expect_not_supported(
          [&] {
            eval(k({x}, call));
            return std::string();
          },
          c.what);
    });
    call.device.reset();
    expect_not_supported([&] { return nvrtc_compile(k, {x}, call); }, c.what);
  }
}

}  // namespace
