// Host-side strided copy with dtype conversion: numpy's astype semantics (C casts; half/bfloat
// through float, rounded to nearest even; to bool x != 0; complex -> real takes the real part).
// Used by Array::to_bytes and by the CPU evaluation of Copy and AsType.
#include <complex>
#include <cstring>
#include <stdexcept>

#include "core/array_node.h"
#include "core/half_convert.h"
#include "core/primitives.h"

namespace alloy {
namespace {

struct Half {
  uint16_t bits;
};
struct BFloat {
  uint16_t bits;
};

// Calls f(T{}) with the storage type of `t`.
template <class F>
void dispatch(Dtype t, F&& f) {
  switch (t) {
    case Dtype::bool_:
      return f(bool{});
    case Dtype::int8:
      return f(int8_t{});
    case Dtype::int16:
      return f(int16_t{});
    case Dtype::int32:
      return f(int32_t{});
    case Dtype::int64:
      return f(int64_t{});
    case Dtype::uint8:
      return f(uint8_t{});
    case Dtype::uint16:
      return f(uint16_t{});
    case Dtype::uint32:
      return f(uint32_t{});
    case Dtype::uint64:
      return f(uint64_t{});
    case Dtype::float16:
      return f(Half{});
    case Dtype::bfloat16:
      return f(BFloat{});
    case Dtype::float32:
      return f(float{});
    case Dtype::float64:
      return f(double{});
    case Dtype::complex64:
      return f(std::complex<float>{});
  }
  throw std::invalid_argument("unknown dtype");
}

// Element conversions. Every value passes through one "wide" type: int64/uint64 stay exact,
// floating values go through double (exact for every narrower float), complex keeps both parts.
template <class To, class From>
To convert(From v) {
  if constexpr (std::is_same_v<From, Half>) {
    return convert<To>(detail::f16_to_f32(v.bits));
  } else if constexpr (std::is_same_v<From, BFloat>) {
    return convert<To>(detail::bf16_to_f32(v.bits));
  } else if constexpr (std::is_same_v<From, std::complex<float>>) {
    if constexpr (std::is_same_v<To, std::complex<float>>)
      return v;
    else if constexpr (std::is_same_v<To, bool>)
      return v != std::complex<float>(0, 0);
    else
      return convert<To>(v.real());
  } else if constexpr (std::is_same_v<To, Half>) {
    return Half{detail::f32_to_f16(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<To, BFloat>) {
    return BFloat{detail::f32_to_bf16(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<To, std::complex<float>>) {
    return std::complex<float>(static_cast<float>(v), 0.0f);
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else {
    return static_cast<To>(v);
  }
}

// Calls f(offset) for the element offsets (in elements) of a strided view, row-major order.
template <class F>
void for_each_offset(const Shape& shape, const Strides& strides, F&& f) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  if (n == 0) return;
  int nd = static_cast<int>(shape.size());
  if (nd == 0) return f(int64_t{0});
  // Innermost loop over the last axis; an index vector for the rest.
  std::vector<int64_t> idx(nd, 0);
  int64_t inner = shape[nd - 1], inner_stride = strides[nd - 1];
  for (int64_t done = 0; done < n; done += inner) {
    int64_t base = 0;
    for (int d = 0; d < nd - 1; ++d) base += idx[d] * strides[d];
    for (int64_t i = 0; i < inner; ++i) f(base + i * inner_stride);
    for (int d = nd - 2; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace

void copy_convert_host(const void* src, const Shape& shape, const Strides& strides, Dtype src_dtype,
                       void* dst, Dtype dst_dtype) {
  size_t item = size_of(src_dtype);
  bool contiguous = strides == row_major_strides(shape);
  if (src_dtype == dst_dtype) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    if (contiguous) {
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * item);
      return;
    }
    auto* out = static_cast<char*>(dst);
    auto* in = static_cast<const char*>(src);
    for_each_offset(shape, strides, [&](int64_t off) {
      std::memcpy(out, in + off * static_cast<int64_t>(item), item);
      out += item;
    });
    return;
  }
  dispatch(src_dtype, [&](auto s) {
    using S = decltype(s);
    dispatch(dst_dtype, [&](auto d) {
      using D = decltype(d);
      auto* in = static_cast<const S*>(src);
      auto* out = static_cast<D*>(dst);
      for_each_offset(shape, strides, [&](int64_t off) { *out++ = convert<D>(in[off]); });
    });
  });
}

}  // namespace alloy
