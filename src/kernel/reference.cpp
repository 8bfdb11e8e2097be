#include "kernel/reference.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string_view>

#include "alloy/errors.h"
#include "core/array_node.h"
#include "core/backend.h"
#include "core/env.h"

namespace alloy {

namespace {
std::mutex g_warn_mu;
std::function<void(const std::string&)> g_warn_handler;

void default_warning(const std::string& message) {
  std::fprintf(stderr, "[alloy] warning: %s\n", message.c_str());
  std::fflush(stderr);
}
}  // namespace

std::function<void(const std::string&)> set_warning_handler(
    std::function<void(const std::string&)> handler) {
  std::lock_guard lock(g_warn_mu);
  auto previous = std::move(g_warn_handler);
  g_warn_handler = std::move(handler);
  return previous;
}

namespace kernel {

Tolerance check_tolerance(Dtype dtype) {
  switch (dtype) {
    case Dtype::float16:
      return {1e-2, 1e-3};
    case Dtype::bfloat16:
      return {3e-2, 1e-2};
    case Dtype::float32:
    case Dtype::complex64:
      return {1e-4, 1e-5};
    case Dtype::float64:
      return {1e-10, 1e-12};
    default:
      return {0, 0};  // integers and bool: exact
  }
}

bool check_from_env() {
  return env::flag("ALLOY_CHECK", false);
}
bool fallback_from_env() {
  return env::flag("ALLOY_FALLBACK", true);
}

void warn(const std::string& message) {
  std::function<void(const std::string&)> handler;
  {
    std::lock_guard lock(g_warn_mu);
    handler = g_warn_handler;
  }
  if (handler)
    handler(message);
  else
    default_warning(message);
}

void warn_once(const std::string& key, const std::string& message) {
  static std::mutex mu;
  static std::set<std::string> seen;
  {
    std::lock_guard lock(mu);
    if (!seen.insert(key).second) return;
  }
  warn(message);
}

bool is_fallback_error(const std::exception_ptr& e) {
  if (!e) return false;
  try {
    std::rethrow_exception(e);
  } catch (const CompileError&) {
    return true;
  } catch (const NotSupported&) {
    return true;
  } catch (...) {
    return false;
  }
}

std::string first_line(const std::exception_ptr& e) {
  std::string what;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    what = x.what();
  } catch (...) {
    what = "unknown error";
  }
  // Skip a leading "[metal_kernel] Failed to compile kernel 'x':" line to show the first error.
  size_t nl = what.find('\n');
  std::string first = what.substr(0, nl);
  if (nl != std::string::npos && first.ends_with(":")) {
    size_t b = what.find_first_not_of(' ', nl + 1);
    size_t e = what.find('\n', nl + 1);
    if (b != std::string::npos) first += " " + what.substr(b, e == std::string::npos ? e : e - b);
  }
  return first;
}

std::vector<Array> call_reference(const ReferenceFn& fn, const std::string& kernel,
                                  const std::vector<Array>& args, size_t count) {
  std::vector<Array> out = fn(args);
  if (out.size() != count)
    throw std::invalid_argument(fmt::format(
        "[library] the reference of kernel '{}' returned {} array(s); it must return one per "
        "writable buffer ({})",
        kernel, out.size(), count));
  for (size_t i = 0; i < out.size(); ++i)
    if (!out[i].valid())
      throw std::invalid_argument(fmt::format(
          "[library] the reference of kernel '{}' returned an invalid array for output {}", kernel,
          i));
  return out;
}

Array conform(const Array& ref, const Shape& shape, Dtype dtype, Device device,
              const std::string& kernel, const std::string& output) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  if (ref.size() != n) {
    auto str = [](const Shape& s) {
      std::string r = "(";
      for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
      return r + (s.size() == 1 ? ",)" : ")");
    };
    throw std::invalid_argument(fmt::format(
        "[library] the reference of kernel '{}' returned shape {} for output '{}', expected {}",
        kernel, str(ref.shape()), output, str(shape)));
  }
  Array r = ref;
  if (r.dtype() != dtype) {
    r = Array::from_doubles(r.to_doubles(), shape, dtype, device);
  } else if (r.shape() != shape || !r.is_row_contiguous()) {
    auto bytes = r.to_bytes();
    r = Array::from_bytes(bytes.data(), shape, dtype, device);
  }
  if (r.device() != device) r = r.to(device);
  r.eval();
  return r;
}

void copy_into(const Array& src_in, const Array& dst) {
  Array src = src_in;
  src.eval();
  if (!src.is_row_contiguous()) src = src.contiguous();
  src.eval();
  size_t n = dst.nbytes();
  if (src.nbytes() != n)
    throw std::logic_error("internal: copy_into between arrays of different sizes");
  if (n == 0) return;
  void* d = node_of(dst)->data();
  const void* s = node_of(src)->data();
  Device dd = dst.device(), sd = src.device();
  if (dd.type == sd.type)
    backend(dd).copy_device(d, s, n);
  else if (sd.type == Device::Type::cpu)
    backend(dd).copy_to_device(d, s, n);
  else
    backend(sd).copy_to_host(d, s, n);
}

namespace {
std::string index_str(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  std::string s = "(";
  for (size_t i = 0; i < idx.size(); ++i) s += (i ? ", " : "") + std::to_string(idx[i]);
  return s + (idx.size() == 1 ? ",)" : ")");
}
std::vector<int64_t> index_of(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  return idx;
}
}  // namespace

void compare_outputs(const std::string& kernel, const std::string& output, const Array& actual,
                     const Array& expected_in, std::optional<double> rtol_opt,
                     std::optional<double> atol_opt) {
  Tolerance tol = check_tolerance(actual.dtype());
  double rtol = rtol_opt.value_or(tol.rtol), atol = atol_opt.value_or(tol.atol);
  Array expected =
      conform(expected_in, actual.shape(), actual.dtype(), actual.device(), kernel, output);
  std::vector<double> a = actual.to_doubles(), e = expected.to_doubles();
  const double inf = std::numeric_limits<double>::infinity();
  double max_abs = 0, max_rel = 0;
  int64_t first = -1, bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double x = a[i], y = e[i];
    bool nx = std::isnan(x), ny = std::isnan(y);
    double abs_err, rel_err;
    bool ok;
    if (nx || ny) {
      ok = nx && ny;
      abs_err = rel_err = ok ? 0 : inf;
    } else if (x == y) {  // also equal infinities
      ok = true;
      abs_err = rel_err = 0;
    } else {
      abs_err = std::fabs(x - y);
      rel_err = y != 0 ? abs_err / std::fabs(y) : inf;
      ok = abs_err <= atol + rtol * std::fabs(y);
    }
    max_abs = std::max(max_abs, abs_err);
    max_rel = std::max(max_rel, rel_err);
    if (!ok) {
      ++bad;
      if (first < 0) first = static_cast<int64_t>(i);
    }
  }
  if (bad == 0) return;
  std::string msg = fmt::format(
      "[check] kernel '{}': output '{}' differs from its reference in {} of {} elements "
      "(rtol {:g}, atol {:g} for {}); first at index {}: kernel {:.9g}, reference {:.9g}; "
      "max abs error {:.6g}, max rel error {:.6g}",
      kernel, output, bad, a.size(), rtol, atol, dtype_name(actual.dtype()),
      index_str(first, actual.shape()), a[first], e[first], max_abs, max_rel);
  throw CheckError(kernel, msg, output, max_abs, max_rel, index_of(first, actual.shape()));
}

}  // namespace kernel
}  // namespace alloy
