// Conformance: Metal integer functions (clz ctz popcount extract_bits insert_bits mulhi rotate
// reverse_bits absdiff addsat subsat hadd rhadd, abs/min/max/clamp) on 8-, 16-, 32- and 64-bit
// types, with exact references over the full 32-bit input range.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "conformance/harness.h"

namespace {
using namespace conformance;

// ---- integer functions -----------------------------------------------------------------------

int64_t sat32(int64_t v) {
  return std::clamp<int64_t>(v, INT32_MIN, INT32_MAX);
}

TEST(ConformanceInteger, BitAndSaturatingFunctions) {
  constexpr int64_t n = 256, K = 35;
  auto k = metal_kernel("integer_functions", {"xu", "xv", "xs", "xt"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    uint u = xu[i], v = xv[i];
    int s = xs[i], t = xt[i];
    device int64_t* o = out + i * 35;
    o[0] = clz(u);
    o[1] = ctz(u);
    o[2] = popcount(u);
    o[3] = clz(u - u);
    o[4] = ctz(v ^ v);
    o[5] = clz(ushort(u));
    o[6] = popcount(uchar(u));
    o[7] = clz(ulong(u));
    o[8] = ctz(ulong(u) << 32);
    o[9] = popcount((ulong(u) << 32) | ulong(v));
    o[10] = clz(s);
    o[11] = extract_bits(u, 5u, 11u);
    o[12] = extract_bits(s, 3u, 9u);
    o[13] = insert_bits(u, v, 7u, 10u);
    o[14] = mulhi(u, v);
    o[15] = mulhi(s, t);
    o[16] = rotate(u, 13u);
    o[17] = rotate(uchar(u), uchar(3));
    o[18] = reverse_bits(u);
    o[19] = uint(absdiff(s, t));
    o[20] = addsat(s, t);
    o[21] = subsat(s, t);
    o[22] = addsat(u, v);
    o[23] = subsat(u, v);
    o[24] = hadd(s, t);
    o[25] = rhadd(s, t);
    o[26] = hadd(u, v);
    o[27] = rhadd(u, v);
    o[28] = abs(s / 2);
    o[29] = min(s, t);
    o[30] = max(u, v);
    o[31] = clamp(s, -1000000, 1000000);
    o[32] = absdiff(u, v);
    o[33] = reverse_bits(ushort(u));
    o[34] = popcount(s);
  )MSL");
  auto xu = random_array({n}, uint32, 1, 4294967295.0, 401, Device::cpu());
  auto xv = random_array({n}, uint32, 1, 4294967295.0, 402, Device::cpu());
  auto xs = random_array({n}, int32, -2147483648.0, 2147483647.0, 403, Device::cpu());
  auto xt = random_array({n}, int32, -2147483648.0, 2147483647.0, 404, Device::cpu());
  auto U = xu.to_vector<uint32_t>(), V = xv.to_vector<uint32_t>();
  auto S = xs.to_vector<int32_t>(), T = xt.to_vector<int32_t>();
  std::vector<double> ref;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u = U[i], v = V[i];
    int32_t s = S[i], t = T[i];
    int64_t ss = s, tt = t;
    uint32_t mask10 = ((1u << 10) - 1) << 7;
    int64_t row[K] = {std::countl_zero(u),
                      std::countr_zero(u),
                      std::popcount(u),
                      32,
                      32,
                      std::countl_zero(static_cast<uint16_t>(u)),
                      std::popcount(static_cast<uint8_t>(u)),
                      std::countl_zero(uint64_t(u)),
                      std::countr_zero(uint64_t(u) << 32),
                      std::popcount(u) + std::popcount(v),
                      std::countl_zero(static_cast<uint32_t>(s)),
                      (u >> 5) & 0x7ffu,
                      (int64_t(int32_t(uint32_t(s) << (32 - 3 - 9))) >> (32 - 9)),
                      (u & ~mask10) | ((v << 7) & mask10),
                      int64_t((uint64_t(u) * v) >> 32),
                      (ss * tt) >> 32,
                      std::rotl(u, 13),
                      std::rotl(static_cast<uint8_t>(u), 3),
                      0,  // reverse_bits(u), below
                      ss > tt ? ss - tt : tt - ss,
                      sat32(ss + tt),
                      sat32(ss - tt),
                      std::min<int64_t>(int64_t(u) + v, UINT32_MAX),
                      u > v ? int64_t(u) - v : 0,
                      (ss + tt) >> 1,
                      (ss + tt + 1) >> 1,
                      (int64_t(u) + v) >> 1,
                      (int64_t(u) + v + 1) >> 1,
                      std::abs(s / 2),
                      std::min(s, t),
                      std::max(u, v),
                      std::clamp(s, -1000000, 1000000),
                      u > v ? int64_t(u) - v : int64_t(v) - u,
                      0,  // reverse_bits(ushort(u)), below
                      std::popcount(static_cast<uint32_t>(s))};
    uint32_t r = 0;
    for (int b = 0; b < 32; ++b) r |= ((u >> b) & 1u) << (31 - b);
    row[18] = r;
    uint16_t h = static_cast<uint16_t>(u), rh = 0;
    for (int b = 0; b < 16; ++b) rh |= ((h >> b) & 1u) << (15 - b);
    row[33] = rh;
    for (auto x : row) ref.push_back(double(x));
  }
  run_kernel(k, {xu, xv, xs, xt}, make_call({{n, K}}, {int64}, {n, 1, 1}, {64, 1, 1}),
             [&](auto& o) {
               expect_table(o[0], ref,
                            {"clz(uint)",
                             "ctz(uint)",
                             "popcount(uint)",
                             "clz(0)",
                             "ctz(0)",
                             "clz(ushort)",
                             "popcount(uchar)",
                             "clz(ulong)",
                             "ctz(ulong)",
                             "popcount(ulong)",
                             "clz(int)",
                             "extract_bits(uint)",
                             "extract_bits(int) sign-extended",
                             "insert_bits(uint)",
                             "mulhi(uint)",
                             "mulhi(int)",
                             "rotate(uint)",
                             "rotate(uchar)",
                             "reverse_bits(uint)",
                             "absdiff(int)",
                             "addsat(int)",
                             "subsat(int)",
                             "addsat(uint)",
                             "subsat(uint)",
                             "hadd(int)",
                             "rhadd(int)",
                             "hadd(uint)",
                             "rhadd(uint)",
                             "abs(int)",
                             "min(int)",
                             "max(uint)",
                             "clamp(int)",
                             "absdiff(uint)",
                             "reverse_bits(ushort)",
                             "popcount(int)"},
                            0, 0);
             });
}

// Integer functions on vectors apply per component.
TEST(ConformanceInteger, VectorIntegerFunctions) {
  constexpr int64_t n = 128;
  auto k = metal_kernel("integer_vector_functions", {"xu"}, {"out"}, R"MSL(
    uint i = thread_position_in_grid.x;
    uint4 u = uint4(xu[4 * i], xu[4 * i + 1], xu[4 * i + 2], xu[4 * i + 3]);
    uint4 p = popcount(u) + 100u * clz(u) + 10000u * ctz(u);
    uint4 r = rotate(u, uint4(1u, 5u, 17u, 31u));
    int2 a = int2(int(u.x), int(u.y));
    int2 sat = addsat(a, int2(2147483000, -2147483000));
    for (int c = 0; c < 4; ++c) {
      out[9 * i + c] = p[c];
      out[9 * i + 4 + c] = r[c];
    }
    out[9 * i + 8] = uint(sat.x);
  )MSL");
  auto xu = random_array({n, 4}, uint32, 1, 4294967295.0, 411, Device::cpu());
  auto U = xu.to_vector<uint32_t>();
  std::vector<double> ref;
  int sh[4] = {1, 5, 17, 31};
  for (int64_t i = 0; i < n; ++i) {
    for (int c = 0; c < 4; ++c) {
      uint32_t u = U[4 * i + c];
      ref.push_back(std::popcount(u) + 100 * std::countl_zero(u) + 10000 * std::countr_zero(u));
    }
    for (int c = 0; c < 4; ++c) ref.push_back(std::rotl(U[4 * i + c], sh[c]));
    int64_t sum = int64_t(int32_t(U[4 * i])) + 2147483000;
    ref.push_back(uint32_t(int32_t(sat32(sum))));
  }
  run_kernel(k, {xu}, make_call({{n, 9}}, {uint32}, {n, 1, 1}, {64, 1, 1}), [&](auto& o) {
    expect_table(o[0], ref,
                 {"pop+clz+ctz.x", ".y", ".z", ".w", "rotate.x", "rotate.y", "rotate.z", "rotate.w",
                  "addsat(int2).x"},
                 0, 0);
  });
}

}  // namespace
