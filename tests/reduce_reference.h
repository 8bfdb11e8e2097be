// The float64 reference of the reduction tests (test_ops_reduce_cpu.cpp, test_ops_columns.cpp).
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "alloy/array.h"

namespace alloy::test {

// Reference reduction of row-major `v` of `shape` over `axes` (kept as size 1) in float64.
inline std::vector<double> reduce_reference(const std::string& op, const std::vector<double>& v,
                                            const Shape& shape, const std::vector<int>& axes) {
  int nd = static_cast<int>(shape.size());
  Shape out_shape = shape;
  for (int a : axes) out_shape[a] = 1;
  int64_t n_out = 1;
  for (auto d : out_shape) n_out *= d;
  double init = op == "sum" ? 0 : op == "prod" ? 1 : op == "max" ? -INFINITY : INFINITY;
  if (op == "all") init = 1;
  if (op == "any") init = 0;
  std::vector<double> r(n_out, init);
  std::vector<int64_t> idx(nd, 0);
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t o = 0;
    for (int d = 0; d < nd; ++d) o = o * out_shape[d] + (out_shape[d] == 1 ? 0 : idx[d]);
    double x = v[i];
    if (op == "sum") r[o] += x;
    if (op == "prod") r[o] *= x;
    if (op == "max") r[o] = std::isnan(r[o]) || std::isnan(x) ? NAN : std::max(r[o], x);
    if (op == "min") r[o] = std::isnan(r[o]) || std::isnan(x) ? NAN : std::min(r[o], x);
    if (op == "all") r[o] = r[o] && x != 0;
    if (op == "any") r[o] = r[o] || x != 0;
    for (int d = nd - 1; d >= 0 && ++idx[d] == shape[d]; --d) idx[d] = 0;
  }
  return r;
}

}  // namespace alloy::test
