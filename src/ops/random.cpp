// Random numbers with explicit keys, as MLX's mlx/random.cpp: a key is two uint32 words; bits are
// threefry 2x32 (20 rounds) of (key, counter) in MLX's counter layout, computed by a generated
// kernel (the RandomBits primitive); uniform, normal, bernoulli and randint are compositions of
// ops in MLX's order, so their values are MLX's bit for bit (normal: up to the last bits of erfinv,
// whose implementation differs).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <stdexcept>

#include "alloy/errors.h"
#include "alloy/ops.h"
#include "core/array_node.h"
#include "ops/kernels.h"
#include "ops/misc_primitives.h"
#include "ops/ops_internal.h"

namespace alloy::ops {

namespace {

constexpr const char* kThreefry = R"METAL(
struct alloy_u32x2 {
  uint a, b;
};
// Threefry 2x32 with 20 rounds (Salmon et al. 2011), the counter-based hash MLX and JAX use.
inline alloy_u32x2 alloy_threefry2x32(uint k0, uint k1, uint c0, uint c1) {
  uint ks0 = k0, ks1 = k1, ks2 = k0 ^ k1 ^ 0x1BD11BDAu;
  uint x0 = c0 + ks0, x1 = c1 + ks1;
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 4; ++j) {
      uint r = (i % 2 == 0) ? (j == 0 ? 13u : j == 1 ? 15u : j == 2 ? 26u : 6u)
                            : (j == 0 ? 17u : j == 1 ? 29u : j == 2 ? 16u : 24u);
      x0 += x1;
      x1 = (x1 << r) | (x1 >> (32u - r));
      x1 ^= x0;
    }
    uint ka = (i % 3 == 0) ? ks1 : (i % 3 == 1 ? ks2 : ks0);
    uint kb = (i % 3 == 0) ? ks2 : (i % 3 == 1 ? ks0 : ks1);
    x0 += ka;
    x1 += kb + uint(i + 1);
  }
  alloy_u32x2 r;
  r.a = x0;
  r.b = x1;
  return r;
}
)METAL";

OpKernel bits_kernel() {
  return op_kernel("randombits|1", [] {
    KernelSpec spec;
    spec.name = "alloy_random_bits";
    spec.input_names = {"key", "p"};
    spec.output_names = {"out"};
    spec.header = functor_header({}) + kThreefry;
    // Word j of W: the first half from the first word of hash(j, j + half + odd), the second
    // half from the second word; an odd middle word from hash(half, 0) (MLX's layout).
    spec.source =
        "  uint j = thread_position_in_grid.x;\n"
        "  uint W = uint(p[0]), half = W / 2, odd = W % 2;\n"
        "  uint k0 = key[0], k1 = key[key_strides[0]];\n"
        "  if (j < half) {\n"
        "    out[j] = alloy_threefry2x32(k0, k1, j, j + half + odd).a;\n"
        "  } else if (odd != 0 && j == half) {\n"
        "    out[j] = alloy_threefry2x32(k0, k1, half, 0).a;\n"
        "  } else {\n"
        "    out[j] = alloy_threefry2x32(k0, k1, j - half - odd, j).b;\n"
        "  }\n";
    return spec;
  });
}

}  // namespace

RandomBits::RandomBits(Shape shape, int width) : shape_(std::move(shape)), width_(width) {
  if (width_ != 4)
    throw NotSupported("RandomBits",
                       fmt::format("not supported: random bits of width {} (only 4)", width_));
}

std::vector<Shape> RandomBits::output_shapes(const std::vector<Array>& inputs) const {
  const Array& key = inputs.at(0);
  if (key.dtype() != Dtype::uint32 || key.shape() != Shape{2})
    throw std::invalid_argument("[bits] a key is a uint32 array of shape (2)");
  return {shape_};
}

PrimitiveState RandomBits::state() const {
  PrimitiveState s(1);
  s.set("shape", shape_).set("width", static_cast<int64_t>(width_));
  return s;
}

void RandomBits::eval(const std::vector<Array>& inputs, std::vector<Array>& outputs, bool gpu) {
  int64_t n = outputs.at(0).size();
  if (n == 0) {
    allocate_output(outputs[0]);
    return;
  }
  if (n > std::numeric_limits<uint32_t>::max())
    throw NotSupported("RandomBits", "not supported: more than 2^32 random words per key");
  run_kernel(bits_kernel(), {inputs.at(0), param_array({n})}, outputs, n, gpu);
}

ALLOY_REGISTER_PRIMITIVE(RandomBits, [](const PrimitiveState& s) {
  if (s.version() != 1) throw std::invalid_argument("RandomBits state version must be 1");
  return std::make_shared<RandomBits>(s.get_as<std::vector<int64_t>>("shape"),
                                      static_cast<int>(s.get_int("width")));
})

}  // namespace alloy::ops

namespace alloy::random {

namespace {

std::optional<Device> device_of(const StreamOrDevice& s) {
  if (auto* st = std::get_if<Stream>(&s)) return st->device;
  if (auto* d = std::get_if<Device>(&s)) return *d;
  return std::nullopt;
}

// The process-wide key sequence used when no key is given (MLX's KeySequence).
struct KeySequence {
  std::mutex mu;
  uint64_t seed;
  uint64_t drawn = 0;
  std::optional<Array> current;
};
KeySequence& sequence() {
  static KeySequence* k = [] {
    auto* s = new KeySequence;  // lives until exit
    s->seed = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
    return s;
  }();
  return *k;
}

Array next_key() {
  auto& k = sequence();
  std::lock_guard lock(k.mu);
  if (!k.current) k.current = key(k.seed);
  Array both = split(*k.current, 2, Device::cpu());
  both.eval();
  k.current = reshape(slice(both, {0, 0}, {1, 2}), {2}).contiguous();
  k.current->eval();
  Array next = reshape(slice(both, {1, 0}, {2, 2}), {2}).contiguous();
  next.eval();
  return next;
}

Array key_or_next(const std::optional<Array>& key) {
  return key ? *key : next_key();
}

Array scalar(double v, Dtype t) {
  return Array::from_doubles({v}, {}, t, Device::cpu());
}

}  // namespace

void seed(uint64_t s) {
  auto& k = sequence();
  std::lock_guard lock(k.mu);
  k.seed = s;
  k.current.reset();
}

Array key(uint64_t seed) {
  std::vector<uint32_t> words{static_cast<uint32_t>(seed >> 32), static_cast<uint32_t>(seed)};
  return Array::from_vector(words, {2}, Dtype::uint32, Device::cpu());
}

Array bits(const Shape& shape, int width, const std::optional<Array>& key_, StreamOrDevice s) {
  if (width != 1 && width != 2 && width != 4)
    throw std::invalid_argument(fmt::format("[bits] width must be 1, 2 or 4, got {}", width));
  if (width != 4) throw NotSupported("bits", "not supported: random bits of width 1 or 2 (only 4)");
  for (auto d : shape)
    if (d < 0) throw std::invalid_argument("[bits] negative dimensions are not allowed");
  Array k = key_or_next(key_);
  if (!k.valid()) throw std::invalid_argument("[bits] the key is an empty handle");
  if (k.dtype() != Dtype::uint32)
    throw std::invalid_argument(
        fmt::format("[bits] expected a uint32 key, got {}", dtype_name(k.dtype())));
  if (k.shape() != Shape{2})
    throw std::invalid_argument(
        fmt::format("[bits] expected a key of shape (2), got ({})", fmt::join(k.shape(), ",")));
  Device d = device_of(s).value_or(k.device());
  ops::check_op_dtype(d, Dtype::uint32, "bits");
  Array kd = ops::to_op_device(k, d);
  return make_pending(std::make_shared<ops::RandomBits>(shape, width), {kd}, {shape},
                      {Dtype::uint32}, ops::resolve_stream(d, s))[0];
}

Array split(const Array& key, int num, StreamOrDevice s) {
  if (num < 0) throw std::invalid_argument("[split] num must be non-negative");
  return bits({num, 2}, 4, key, s);
}

std::pair<Array, Array> split(const Array& key, StreamOrDevice s) {
  Array both = split(key, 2, s);
  return {reshape(slice(both, {0, 0}, {1, 2}, {}, s), {2}, s),
          reshape(slice(both, {1, 0}, {2, 2}, {}, s), {2}, s)};
}

namespace {
uint16_t below_one_bits(Dtype t) {
  return t == Dtype::float16 ? 0x3BFF : 0x3F7F;  // 1.0's bit pattern minus one
}
}  // namespace

Array uniform(const Array& low, const Array& high, const Shape& shape, Dtype dtype,
              const std::optional<Array>& key, StreamOrDevice s) {
  if (!is_floating(dtype))
    throw std::invalid_argument(
        "[uniform] can only generate uniform numbers with a real floating point type");
  Array lo = astype(low, dtype, s), hi = astype(high, dtype, s);
  Array range = subtract(hi, lo, s);
  if (broadcast_shapes(shape, range.shape()) != shape)
    throw std::invalid_argument(
        fmt::format("[uniform] cannot generate random values of shape ({}) from broadcast shape "
                    "({})",
                    fmt::join(shape, ","), fmt::join(broadcast_shapes(shape, range.shape()), ",")));
  double upper;
  switch (dtype) {
    case Dtype::float32:
      upper = std::nextafter(1.0f, 0.0f);
      break;
    case Dtype::float16:
    case Dtype::bfloat16: {
      uint16_t b = below_one_bits(dtype);
      upper = Array::from_bytes(&b, {}, dtype, Device::cpu()).item();
      break;
    }
    default:
      throw NotSupported(
          "uniform", "not supported: uniform of " + std::string(dtype_name(dtype)) + " (as MLX)");
  }
  Array out = bits(shape, 4, key, s);
  out = divide(
      out, scalar(static_cast<double>(std::numeric_limits<uint32_t>::max()), Dtype::float32), s);
  out = astype(minimum(out, scalar(upper, Dtype::float32), s), dtype, s);
  return add(multiply(range, out, s), lo, s);
}

Array uniform(const Shape& shape, Dtype dtype, const std::optional<Array>& key, StreamOrDevice s) {
  return uniform(scalar(0.0, dtype), scalar(1.0, dtype), shape, dtype, key, s);
}

Array normal(const Shape& shape, Dtype dtype, const std::optional<Array>& loc,
             const std::optional<Array>& scale, const std::optional<Array>& key, StreamOrDevice s) {
  if (!is_floating(dtype))
    throw std::invalid_argument("[normal] can only generate numbers of a floating point type");
  Array low = scalar(std::nextafter(-1.0f, 0.0f), Dtype::float32);
  Array high = scalar(1.0, Dtype::float32);
  Array samples = uniform(low, high, shape, Dtype::float32, key, s);
  Array applied_scale = scalar(std::sqrt(2.0), dtype);
  if (scale) applied_scale = multiply(applied_scale, astype(*scale, dtype, s), s);
  samples = astype(erfinv(samples, s), dtype, s);
  samples = multiply(applied_scale, samples, s);
  if (loc) samples = add(astype(*loc, dtype, s), samples, s);
  return samples;
}

Array normal(const Shape& shape, Dtype dtype, double loc, double scale,
             const std::optional<Array>& key, StreamOrDevice s) {
  return normal(shape, dtype, scalar(loc, dtype), scalar(scale, dtype), key, s);
}

Array bernoulli(const Array& p, const Shape& shape, const std::optional<Array>& key,
                StreamOrDevice s) {
  if (!p.valid()) throw std::invalid_argument("[bernoulli] p is an empty handle");
  if (!is_floating(p.dtype()))
    throw std::invalid_argument("[bernoulli] the probability p must be a float type");
  float upper = std::nextafter(static_cast<float>(std::numeric_limits<uint32_t>::max()),
                               std::numeric_limits<float>::max());
  Array res = less(bits(shape, 4, key, s), multiply(p, scalar(upper, Dtype::float32), s), s);
  if (res.shape() != shape)
    throw std::invalid_argument("[bernoulli] the shape of p does not broadcast to shape");
  return res;
}

Array bernoulli(const Array& p, const std::optional<Array>& key, StreamOrDevice s) {
  if (!p.valid()) throw std::invalid_argument("[bernoulli] p is an empty handle");
  return bernoulli(p, p.shape(), key, s);
}

Array bernoulli(const std::optional<Array>& key, StreamOrDevice s) {
  return bernoulli(scalar(0.5, Dtype::float32), key, s);
}

Array randint(const Array& low, const Array& high, const Shape& shape, Dtype dtype,
              const std::optional<Array>& key, StreamOrDevice s) {
  if (is_floating(dtype) || dtype == Dtype::complex64)
    throw std::invalid_argument("[randint] randint only accepts integer dtypes and bool");
  Array u = uniform(low, high, shape, Dtype::float32, key, s);
  return astype(floor(maximum(u, low, s), s), dtype, s);
}

}  // namespace alloy::random
