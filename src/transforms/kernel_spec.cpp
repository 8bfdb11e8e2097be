#include "transforms/kernel_spec.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <cstdint>
#include <stdexcept>

#include "alloy/errors.h"
#include "msl/signature.h"

namespace alloy::transforms {

namespace {
// Appends `s` with its length (8 bytes, little-endian) before it.
void add_field(std::string& data, const std::string& s) {
  uint64_t n = s.size();
  for (int i = 0; i < 8; ++i) data += static_cast<char>((n >> (8 * i)) & 0xff);
  data += s;
}

std::string sha256_hex(const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr))
    throw std::runtime_error("SHA-256 failed (OpenSSL)");
  std::string hex;
  for (unsigned i = 0; i < len; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}
}  // namespace

std::string library_sha256(const kernel::LibrarySpec& spec) {
  std::string data = "alloy-library-spec-v1";
  add_field(data, spec.name);
  add_field(data, spec.source);
  add_field(data, spec.math_mode);
  add_field(data, std::to_string(spec.template_dtypes.size()));
  for (auto& [input, ph] : spec.template_dtypes) {
    add_field(data, input);
    add_field(data, ph);
  }
  return sha256_hex(data);
}

std::string kernel_sha256(const KernelSpec& spec) {
  std::string data = "alloy-kernel-spec-v1";
  auto add = [&](const std::string& s) { add_field(data, s); };
  add(spec.name);
  add(std::to_string(spec.input_names.size()));
  for (auto& n : spec.input_names) add(n);
  add(std::to_string(spec.output_names.size()));
  for (auto& n : spec.output_names) add(n);
  add(spec.source);
  add(spec.header);
  add(spec.math_mode);
  add(std::string{spec.ensure_row_contiguous ? '1' : '0', spec.atomic_outputs ? '1' : '0'});
  return sha256_hex(data);
}

namespace {
using Ints = std::vector<int64_t>;
std::vector<std::string> dims_text(const Ints& row) {
  // [n, len0, code0..., len1, code1...] (CustomKernel::state)
  std::vector<std::string> out;
  if (row.empty()) throw std::invalid_argument("CustomKernel state: empty dims");
  size_t i = 1;
  for (int64_t k = 0; k < row[0]; ++k) {
    if (i >= row.size()) throw std::invalid_argument("CustomKernel state: truncated dims");
    int64_t len = row[i++];
    if (len < 0 || static_cast<uint64_t>(len) > row.size() - i)
      throw std::invalid_argument("CustomKernel state: truncated dims");
    out.push_back(ShapeExpr::from_code(Ints(row.begin() + i, row.begin() + i + len)).str());
    i += len;
  }
  return out;
}
bool dims_constant(const Ints& row) {
  if (row.empty()) return true;
  size_t i = 1;
  for (int64_t k = 0; k < row[0] && i < row.size(); ++k) {
    int64_t len = row[i++];
    if (len < 0 || static_cast<uint64_t>(len) > row.size() - i) return true;
    if (!ShapeExpr::from_code(Ints(row.begin() + i, row.begin() + i + len)).is_constant())
      return false;
    i += len;
  }
  return true;
}
}  // namespace

bool kernel_geometry_is_constant(const PrimitiveState& s) {
  if (!dims_constant(s.get_as<Ints>("grid")) || !dims_constant(s.get_as<Ints>("threadgroup")))
    return false;
  for (auto& row : s.get_as<std::vector<Ints>>("output_shapes"))
    if (!dims_constant(row)) return false;
  return true;
}

KernelCallInfo kernel_call_info(const PrimitiveState& s) {
  using Strings = std::vector<std::string>;
  KernelCallInfo k;
  for (auto& d : s.get_as<Strings>("output_dtypes")) k.output_dtypes.push_back(dtype_from_name(d));
  const auto& tn = s.get_as<Strings>("template_names");
  const auto& tk = s.get_as<Ints>("template_kinds");
  const auto& tv = s.get_as<Ints>("template_values");
  if (tn.size() != tk.size() || tn.size() != tv.size())
    throw std::invalid_argument("CustomKernel state: template argument lists differ in length");
  for (size_t i = 0; i < tn.size(); ++i) {
    if (tk[i] == 0) {
      if (tv[i] < 0 || tv[i] > static_cast<int64_t>(Dtype::complex64))
        throw std::invalid_argument("CustomKernel state: bad dtype template argument");
      k.template_args.emplace_back(tn[i], static_cast<Dtype>(tv[i]));
    } else if (tk[i] == 1) {
      k.template_args.emplace_back(tn[i], tv[i] != 0);
    } else {
      k.template_args.emplace_back(tn[i], static_cast<int>(tv[i]));
    }
  }
  k.grid = dims_text(s.get_as<Ints>("grid"));
  k.threadgroup = dims_text(s.get_as<Ints>("threadgroup"));
  for (auto& row : s.get_as<std::vector<Ints>>("output_shapes"))
    k.output_shapes.push_back("(" + fmt::format("{}", fmt::join(dims_text(row), ", ")) + ")");
  return k;
}

// ---- MLX's generated text -> specification ---------------------------------------------------

namespace {
[[noreturn]] void unrecognized(const std::string& kernel, const std::string& why) {
  throw NotSupported(kernel, fmt::format("not supported: the Metal text of MLX kernel '{}' is not "
                                         "one mx.fast.metal_kernel writes ({})",
                                         kernel, why));
}

std::vector<std::string> split(const std::string& s, const std::string& sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t p = s.find(sep, start);
    if (p == std::string::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, p - start));
    start = p + sep.size();
  }
}

std::optional<Dtype> dtype_of_metal_name(const std::string& t) {
  for (int i = 0; i <= static_cast<int>(Dtype::complex64); ++i)
    if (msl_type_name(static_cast<Dtype>(i)) == t) return static_cast<Dtype>(i);
  return std::nullopt;
}
}  // namespace

RecoveredKernel recover_mlx_kernel(const std::string& kname, const std::string& text,
                                   const std::vector<Dtype>& input_dtypes,
                                   const std::vector<Shape>& input_shapes,
                                   const std::vector<Dtype>& output_dtypes,
                                   bool ensure_row_contiguous, const std::string& math_mode) {
  RecoveredKernel r;
  const std::string open = "[[kernel]] void " + kname + "(\n";
  size_t sig = text.find(open);
  if (sig == std::string::npos) unrecognized(kname, "no [[kernel]] signature of that name");
  // Template arguments: the instantiation at the end names their values.
  const std::string inst_mark = "\ntemplate [[host_name(\"" + kname + "\")]]";
  size_t inst = text.rfind(inst_mark);
  size_t prefix_end = sig;
  std::vector<std::string> tnames, tkinds, tvalues;
  if (inst != std::string::npos) {
    size_t decl = text.rfind("template <", sig);
    if (decl == std::string::npos || text.compare(sig - 2, 2, ">\n") != 0)
      unrecognized(kname, "no template declaration before the signature");
    std::string params = text.substr(decl + 10, sig - 2 - (decl + 10));
    for (auto& p : split(params, ", ")) {
      size_t sp = p.find(' ');
      if (sp == std::string::npos) unrecognized(kname, "bad template parameter '" + p + "'");
      tkinds.push_back(p.substr(0, sp));
      tnames.push_back(p.substr(sp + 1));
    }
    std::string args_open = ") " + kname + "<";
    size_t a = text.find(args_open, inst);
    size_t close = text.rfind(">;\n");
    if (a == std::string::npos || close == std::string::npos || close < a)
      unrecognized(kname, "bad instantiation");
    size_t from = a + args_open.size();
    tvalues = split(text.substr(from, close - from), ", ");
    if (tvalues.size() != tnames.size()) unrecognized(kname, "template arguments do not match");
    prefix_end = decl;
  }
  for (size_t i = 0; i < tnames.size(); ++i) {
    const std::string& k = tkinds[i];
    const std::string& v = tvalues[i];
    if (k == "typename") {
      auto d = dtype_of_metal_name(v);
      if (!d) unrecognized(kname, "template type '" + v + "'");
      r.template_args.emplace_back(tnames[i], *d);
    } else if (k == "bool") {
      if (v != "0" && v != "1") unrecognized(kname, "bool template argument '" + v + "'");
      r.template_args.emplace_back(tnames[i], v == "1");
    } else if (k == "int") {
      try {
        size_t used = 0;
        int x = std::stoi(v, &used);
        if (used != v.size()) throw std::invalid_argument(v);
        r.template_args.emplace_back(tnames[i], x);
      } catch (const std::exception&) {
        unrecognized(kname, "int template argument '" + v + "'");
      }
    } else {
      unrecognized(kname, "template parameter kind '" + k + "'");
    }
  }
  r.spec.header = text.substr(0, prefix_end);
  // Parameters: one per line up to ") {\n".
  size_t params_begin = sig + open.size();
  size_t params_end = text.find(") {\n", params_begin);
  if (params_end == std::string::npos) unrecognized(kname, "unterminated signature");
  for (auto& line : split(text.substr(params_begin, params_end - params_begin), ",\n")) {
    size_t attr = line.find(" [[");
    if (attr == std::string::npos) unrecognized(kname, "parameter without attribute");
    std::string decl = line.substr(0, attr);
    size_t sp = decl.rfind(' ');
    std::string name = decl.substr(sp + 1), type = decl.substr(0, sp);
    if (line.compare(attr, 10, " [[buffer(") != 0) continue;  // a Metal attribute
    bool is_shape = type == "  const constant int*" || type == "  const constant int64_t*" ||
                    type == "  const constant int&";
    if (is_shape && r.spec.input_names.size() > 0) {
      const std::string& last = r.spec.input_names.back();
      if (name == last + "_shape" || name == last + "_strides" || name == last + "_ndim") continue;
    }
    if (type.rfind("  const ", 0) == 0) {
      r.spec.input_names.push_back(name);
    } else if (type.rfind("  device ", 0) == 0) {
      r.spec.output_names.push_back(name);
      if (type.find("atomic<") != std::string::npos) r.spec.atomic_outputs = true;
    } else {
      unrecognized(kname, "parameter '" + line + "'");
    }
  }
  // The body, verbatim, then "\n}\n" (and the instantiation).
  size_t body = params_end + 4;
  size_t end = inst != std::string::npos ? inst : text.size();
  if (end < body + 3 || text.compare(end - 3, 3, "\n}\n") != 0)
    unrecognized(kname, "the body does not end as MLX ends it");
  r.spec.source = text.substr(body, end - 3 - body);
  r.spec.ensure_row_contiguous = ensure_row_contiguous;
  r.spec.math_mode = math_mode;
  if (input_dtypes.size() != r.spec.input_names.size())
    unrecognized(kname, fmt::format("{} inputs in the signature, {} in the call",
                                    r.spec.input_names.size(), input_dtypes.size()));
  // The name given to metal_kernel: the mangled name without its prefix and suffix.
  std::vector<msl::SignatureInput> sin;
  for (size_t i = 0; i < input_dtypes.size(); ++i) {
    int64_t n = 1;
    for (auto d : input_shapes[i]) n *= d;
    sin.push_back({"", input_dtypes[i], static_cast<int>(input_shapes[i].size()), n});
  }
  KernelSpec probe = r.spec;
  probe.name = "k";
  std::string suffix;
  try {
    suffix = msl::write_kernel_source(probe, sin, output_dtypes, r.template_args)
                 .kernel_name.substr(std::string("custom_kernel_k").size());
  } catch (const std::invalid_argument& e) {
    unrecognized(kname, e.what());
  }
  const std::string prefix = "custom_kernel_";
  if (kname.rfind(prefix, 0) != 0 || kname.size() < prefix.size() + suffix.size() ||
      kname.compare(kname.size() - suffix.size(), suffix.size(), suffix) != 0)
    unrecognized(kname, "unexpected kernel name");
  r.spec.name = kname.substr(prefix.size(), kname.size() - prefix.size() - suffix.size());
  std::string again = msl::write_kernel_source(r.spec, sin, output_dtypes, r.template_args).source;
  if (again != text) unrecognized(kname, "regenerating the text from its parts differs");
  return r;
}

}  // namespace alloy::transforms
