#include "npy.h"

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <stdexcept>
#include <vector>


namespace alloy::tools {

namespace {
struct Descr {
  const char* text;
  Dtype dtype;
};
// NumPy's descr strings ('|' for one-byte types) <-> dtypes.
constexpr Descr kDescrs[] = {
    {"|b1", Dtype::bool_},    {"|i1", Dtype::int8},    {"<i2", Dtype::int16},
    {"<i4", Dtype::int32},    {"<i8", Dtype::int64},   {"|u1", Dtype::uint8},
    {"<u2", Dtype::uint16},   {"<u4", Dtype::uint32},  {"<u8", Dtype::uint64},
    {"<f2", Dtype::float16},  {"<f4", Dtype::float32}, {"<f8", Dtype::float64},
    {"<c8", Dtype::complex64}};

[[noreturn]] void bad(const std::string& path, const std::string& why) {
  throw std::invalid_argument(fmt::format("'{}' is not a .npy file Alloy reads: {}", path, why));
}

// The value of `key` in the header's Python dict literal (up to the next top-level comma).
std::string field(const std::string& header, const std::string& key, const std::string& path) {
  size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) bad(path, "the header has no '" + key + "'");
  size_t colon = header.find(':', k);
  if (colon == std::string::npos) bad(path, "malformed header");
  size_t i = colon + 1, depth = 0;
  std::string v;
  for (; i < header.size(); ++i) {
    char c = header[i];
    if (c == '(') ++depth;
    if (c == ')') {
      if (depth == 0) break;
      --depth;
    }
    if ((c == ',' || c == '}') && depth == 0) break;
    v += c;
  }
  size_t a = v.find_first_not_of(" "), b = v.find_last_not_of(" ");
  return a == std::string::npos ? "" : v.substr(a, b - a + 1);
}
}  // namespace

Array read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument("cannot read '" + path + "'");
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) bad(path, "no NUMPY magic");
  uint32_t hlen = 0;
  if (magic[6] == 1) {
    uint8_t b[2];
    if (!in.read(reinterpret_cast<char*>(b), 2)) bad(path, "truncated header");
    hlen = b[0] | (b[1] << 8);
  } else if (magic[6] == 2 || magic[6] == 3) {
    uint8_t b[4];
    if (!in.read(reinterpret_cast<char*>(b), 4)) bad(path, "truncated header");
    hlen = b[0] | (b[1] << 8) | (b[2] << 16) | (uint32_t{b[3]} << 24);
    if (hlen > (1u << 20)) bad(path, "header larger than 1 MiB");
  } else {
    bad(path, fmt::format("format version {}", static_cast<int>(magic[6])));
  }
  std::string header(hlen, '\0');
  if (!in.read(header.data(), hlen)) bad(path, "truncated header");
  std::string descr = field(header, "descr", path);
  if (descr.size() < 2) bad(path, "bad descr");
  descr = descr.substr(1, descr.size() - 2);  // quotes
  if (descr.size() == 3 && descr[0] == '=') descr[0] = '<';
  if (descr.size() == 3 && descr[0] == '<' && descr[2] == '1') descr[0] = '|';
  std::optional<Dtype> dtype;
  for (auto& d : kDescrs)
    if (descr == d.text) dtype = d.dtype;
  if (!dtype) bad(path, "dtype '" + descr + "' (little-endian numeric dtypes only)");
  if (field(header, "fortran_order", path) != "False") bad(path, "Fortran order");
  std::string shape_text = field(header, "shape", path);
  Shape shape;
  size_t i = shape_text.find('(');
  if (i == std::string::npos) bad(path, "bad shape");
  for (++i; i < shape_text.size();) {
    while (i < shape_text.size() && (shape_text[i] == ' ' || shape_text[i] == ',')) ++i;
    if (i >= shape_text.size() || shape_text[i] == ')') break;
    size_t used = 0;
    try {
      shape.push_back(std::stoll(shape_text.substr(i), &used));
    } catch (const std::exception&) {
      bad(path, "bad shape");
    }
    i += used;
  }
  int64_t bytes_signed = static_cast<int64_t>(size_of(*dtype));
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(bytes_signed, d, &bytes_signed)) bad(path, "bad shape");
  size_t bytes = static_cast<size_t>(bytes_signed);
  in.seekg(0, std::ios::end);
  size_t data_at = (magic[6] == 1 ? 10 : 12) + hlen;
  if (static_cast<size_t>(in.tellg()) < data_at + bytes) bad(path, "truncated data");
  in.seekg(static_cast<std::streamoff>(data_at));
  std::vector<uint8_t> data(bytes);
  in.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(bytes));
  return Array::from_bytes(data.data(), shape, *dtype, Device::cpu());
}

void write_npy(const std::string& path, const Array& a) {
  const char* descr = nullptr;
  for (auto& d : kDescrs)
    if (d.dtype == a.dtype()) descr = d.text;
  if (!descr)
    throw std::invalid_argument(fmt::format("cannot write {} to .npy", dtype_name(a.dtype())));
  std::string shape;  // Python's tuple syntax: (), (5,), (2, 3)
  for (int i = 0; i < a.ndim(); ++i) shape += (i ? ", " : "") + std::to_string(a.shape()[i]);
  if (a.ndim() == 1) shape += ",";
  std::string header =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr, shape);
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  auto bytes = a.to_bytes();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::invalid_argument("cannot write '" + path + "'");
  uint16_t hlen = static_cast<uint16_t>(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  char len[2] = {static_cast<char>(hlen & 0xff), static_cast<char>(hlen >> 8)};
  out.write(len, 2);
  out << header;
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::invalid_argument("cannot write '" + path + "'");
}

}  // namespace alloy::tools
