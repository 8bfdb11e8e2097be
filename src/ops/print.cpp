// Printing arrays as MLX does: "array([[1, 2],\n       [3, 4]], dtype=int32)". Elements are
// written as C++ streams write them (6 significant digits for floats: 0.333333, 1e-08); an array
// of more than 1000 elements shows the first and last 3 entries of every axis longer than 6, with
// "..." between. Printing evaluates the array.
#include <cmath>
#include <complex>
#include <cstring>
#include <ostream>
#include <sstream>
#include <string>

#include "alloy/ops.h"

namespace alloy {

namespace {

constexpr int64_t kEdgeItems = 3;

struct Printer {
  const uint8_t* data;
  Dtype dtype;
  const Shape& shape;
  Strides strides;  // row-major, elements
  bool summarise;
  bool python_bools;
  std::ostringstream os;

  void element(int64_t index) {
    const uint8_t* p = data + index * static_cast<int64_t>(size_of(dtype));
    auto read = [&](auto v) {
      std::memcpy(&v, p, sizeof(v));
      return v;
    };
    switch (dtype) {
      case Dtype::bool_:
        os << (*p ? (python_bools ? "True" : "true") : (python_bools ? "False" : "false"));
        break;
      case Dtype::int8:
        os << static_cast<int>(read(int8_t{}));
        break;
      case Dtype::uint8:
        os << static_cast<unsigned>(*p);
        break;
      case Dtype::int16:
        os << read(int16_t{});
        break;
      case Dtype::uint16:
        os << read(uint16_t{});
        break;
      case Dtype::int32:
        os << read(int32_t{});
        break;
      case Dtype::uint32:
        os << read(uint32_t{});
        break;
      case Dtype::int64:
        os << read(int64_t{});
        break;
      case Dtype::uint64:
        os << read(uint64_t{});
        break;
      case Dtype::float16:
        os << float16_to_float(read(uint16_t{}));
        break;
      case Dtype::bfloat16:
        os << bfloat16_to_float(read(uint16_t{}));
        break;
      case Dtype::float32:
        os << read(float{});
        break;
      case Dtype::float64:
        os << read(double{});
        break;
      case Dtype::complex64: {
        auto c = read(std::complex<float>{});
        os << c.real() << (c.imag() < 0 || std::signbit(c.imag()) ? "-" : "+") << std::abs(c.imag())
           << "j";
        break;
      }
    }
  }

  void axis(int dim, int64_t offset) {
    int nd = static_cast<int>(shape.size());
    int64_t n = shape[dim];
    os << "[";
    bool cut = summarise && n > 2 * kEdgeItems;
    std::string sep = dim == nd - 1 ? ", " : ",\n" + std::string(7 + dim, ' ');
    for (int64_t i = 0; i < n; ++i) {
      if (cut && i == kEdgeItems) {
        os << "..." << sep;
        i = n - kEdgeItems;
      }
      if (dim == nd - 1)
        element(offset + i);
      else
        axis(dim + 1, offset + i * strides[dim]);
      if (i + 1 < n) os << sep;
    }
    os << "]";
  }
};

}  // namespace

std::string array_repr(const Array& a, bool python_bools) {
  if (!a.valid()) return "array(<empty handle>)";
  std::vector<uint8_t> bytes = a.to_bytes();
  Strides st(a.ndim(), 1);
  for (int d = a.ndim() - 2; d >= 0; --d) st[d] = st[d + 1] * a.shape()[d + 1];
  Printer p{bytes.data(), a.dtype(), a.shape(), st, true, python_bools, {}};
  p.os << "array(";
  if (a.ndim() == 0)
    p.element(0);
  else
    p.axis(0, 0);
  p.os << ", dtype=" << dtype_name(a.dtype()) << ")";
  return p.os.str();
}

std::ostream& operator<<(std::ostream& os, const Array& a) {
  return os << array_repr(a);
}

}  // namespace alloy
